"""--image with a real podman and a training image built here (tests/trainimage.py): torchrun,
mpirun + mpi4py and torch gloo jobs in containers; the job's environment as without an image;
no container record left however a job ends; the container options. Per-GPU isolation and the
CDI check are checked on their argv and on real CDI spec files (no GPU on this host)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ringleader.engines.embedded.engine import Runtime
from ringleader.errors import DependencyError, UsageError
from ringleader.jobs.spec import HOST_ONLY_KEYS, ContainerOptions, JobSpec
from ringleader.jobs.states import JobStatus
from ringleader.runtime import rank as rank_wrapper
from ringleader.runtime.containers import LABEL, check_cdi, container_runtime_of, guard_command, job_label
from ringleader.runtime.rank import GUARD_MARK
from statedb import supervisor_of
from trainimage import SITE_PACKAGES

EXAMPLE_JOBS = Path(__file__).resolve().parents[2] / "examples" / "jobs"
# torch and mpi4py from the test interpreter's environment, mounted into the image.
VENV = ContainerOptions(data=((SITE_PACKAGES, SITE_PACKAGES), (str(EXAMPLE_JOBS), "/jobs")))
IN_IMAGE_ENV = {"PYTHONPATH": SITE_PACKAGES}
DUMP_ENV = "import json, os, sys; print('env', json.dumps({**os.environ, 'python': sys.executable}), flush=True)"
# What the image and the runtime set themselves in a container.
IMAGE_OWN = {"PATH", "HOME", "HOSTNAME", "container", "TERM", "python"}


def records(home: Path, job: str = "") -> list[str]:
    """podman's records of this home's containers (of jobs named ``job``...), running or not."""
    out = subprocess.run(["podman", "ps", "-a", "--format", "{{.ID}} {{.Labels}}"], capture_output=True, text=True,
                         check=True, env={**os.environ, "CONTAINERS_CONF": os.environ["CONTAINERS_CONF"]})  # fmt: skip
    prefix = job_label(home, job)
    return [line for line in out.stdout.splitlines() if f"{LABEL}:{prefix}" in line]


@pytest.fixture
def image(train_image: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> str:
    """The image, with podman's settings in the submitting shell (passed on to each rank's client)."""
    tag, conf = train_image
    monkeypatch.setenv("CONTAINERS_CONF", str(conf))
    return tag


def logs_of(rt: Runtime, job: str, rank: int) -> str:
    return rt.logs(job, f"worker-{rank}")


@pytest.mark.slow
def test_torchrun_gloo_and_mpi4py_jobs_run_in_a_local_image(seeds: Runtime, h, image: str, home: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A torchrun line whose script is a torch.distributed gloo job, and an mpirun + mpi4py job."""
    monkeypatch.chdir(home.parent)
    common = {"workers": 2, "gpus": 1, "image": image, "env": IN_IMAGE_ENV, "container": VENV}
    seeds.submit(h.spec("trun", ["torchrun", "--nproc-per-node=2", "/jobs/torch_gloo.py"], **common))
    seeds.submit(h.spec("mpi", shlex.split("mpirun -np 2 --mca btl ^openib python3 /jobs/mpi_hello.py"), **common))
    runs = seeds.get("trun").spec.command
    assert runs[runs.index(image) + 1 :] == ["python3", "-u", "/jobs/torch_gloo.py"]  # the image's interpreter
    for job in ("trun", "mpi"):
        view = seeds.wait(job, 180)
        assert view.status is JobStatus.SUCCEEDED, (job, view.events, seeds.logs(job, "worker-0"))
    for rank in range(2):
        seen = json.loads(logs_of(seeds, "trun", rank).splitlines()[-1])
        assert (seen["rank"], seen["world_size"], seen["allreduce_sum"]) == (rank, 2, 1.0)
    assert "allreduce sum of ranks: 1" in seeds.logs("mpi")
    assert "gds_ds12" not in seeds.logs("mpi", "worker-0") + seeds.logs("mpi", "worker-1")  # PMIX_MCA_gds=hash
    assert records(home) == []


@pytest.mark.slow
def test_the_jobs_environment_in_the_container_is_the_one_without_an_image(
    small: Runtime, h, image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same variables, same values, but the host's own paths (HOST_ONLY_KEYS), which the image sets."""
    for name, value in {"NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_HCA": "mlx5_0", "GLOO_SOCKET_IFNAME": "lo",
                        "OMP_NUM_THREADS": "3", "TORCH_SHOW_CPP_STACKTRACES": "1", "NCCL_DEBUG": "WARN"}.items():
        monkeypatch.setenv(name, value)  # exported in the submitting shell  # fmt: skip
    envs = {}
    for kind, python, extra in (("host", h.PY, {}), ("image", "python3", {"image": image})):
        small.submit(h.spec("envs", [python, "-c", DUMP_ENV], workers=2, gpus=1, env={"MY_SETTING": "x y"},
                            **extra))  # fmt: skip
        assert small.wait("envs", 120).status is JobStatus.SUCCEEDED, small.logs("envs", "worker-0")
        envs[kind] = [json.loads(logs_of(small, "envs", r).splitlines()[-1].split(" ", 1)[1]) for r in range(2)]
        small.delete(["envs"])
    for without, within in zip(envs["host"], envs["image"], strict=True):
        assert within["python"] == "/usr/bin/python3" != without["python"]
        differ = {k for k in without if k not in {*HOST_ONLY_KEYS, "python"} and within.get(k) != without[k]}
        assert differ == {"MASTER_PORT"}, differ  # a port chosen per launch
        assert set(within) - set(without) <= IMAGE_OWN, set(within) - set(without)
        assert within["NCCL_IB_HCA"] == "mlx5_0" and within["MY_SETTING"] == "x y" and "CONTAINERS_CONF" not in within


def _sleepers(rt: Runtime, h, image: str, names: list[str], workers: int, line: str) -> None:
    for name in names:
        rt.submit(h.spec(name, ["sh", "-c", line], workers=workers, gpus=0, image=image))


@pytest.mark.slow
def test_deletes_and_sibling_failures_leave_no_container_record(rt: Runtime, h, image: str, home: Path) -> None:
    """20 jobs deleted while their containers run, 20 whose sibling failed: 0 records left."""
    deleted = [f"del-{i}" for i in range(20)]
    failing = [f"sib-{i}" for i in range(20)]
    _sleepers(rt, h, image, ["early"], 1, "exec sleep 317")
    h.wait_for(lambda: all(i.pid for i in rt.get("early").instances), what="its rank started")
    rt.delete(["early"])  # before the container's client is up
    _sleepers(rt, h, image, deleted, 1, "exec sleep 317")
    _sleepers(rt, h, image, failing, 2, 'if [ "$RANK" = 0 ]; then sleep 3; exit 3; fi; exec sleep 317')
    h.wait_for(lambda: len(records(home, "del-")) == 20, 240, "the deleted jobs' containers up")
    rt.delete(deleted)
    for name in failing:
        view = rt.wait(name, 240)
        assert view.status is JobStatus.FAILED and "worker-0 failed (exit code 3)" in view.reason, view.reason
    assert records(home) == []
    programs = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True, check=True).stdout
    assert "sleep 317" not in programs.splitlines()  # and no rank's program left running


@pytest.mark.slow
def test_a_killed_supervisor_and_a_time_limit_leave_no_container_record(rt: Runtime, h, image: str,
                                                                         home: Path) -> None:  # fmt: skip
    # The orphan first and alone: the limited job's 4 s count from its own start, so under load its
    # container may come and go before a slow second one is up (both up at once is not the point).
    rt.submit(h.spec("orphan", ["sleep", "300"], gpus=0, image=image))
    h.wait_for(lambda: len(records(home, "orphan")) == 1, 120, lambda: f"the orphan's container up: {records(home)}")
    rt.submit(h.spec("limited", ["sleep", "300"], gpus=0, image=image, time_limit_s=4.0))
    # The agent and every process of the orphan's rank killed at once, its client among them.
    supervisor, _ = supervisor_of(rt, "orphan")
    tree = subprocess.run(["ps", "-eo", "pid=,sid="], capture_output=True, text=True, check=True).stdout
    inst = rt.get("orphan").instances[0]
    sid = int(next(line.split()[1] for line in tree.splitlines() if int(line.split()[0]) == inst.pid))
    os.kill(supervisor, signal.SIGKILL)
    os.killpg(sid, signal.SIGKILL)
    h.wait_for(lambda: rt.get("orphan").status.is_terminal(), what="the standby to finish it")
    view = rt.wait("limited", 60)
    assert view.status is JobStatus.FAILED and view.reason.startswith("TIMEOUT"), view.reason
    assert records(home) == []


@pytest.mark.slow
def test_data_shm_size_and_a_working_directory_with_a_colon(small: Runtime, h, image: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    workdir, data = tmp_path / "run:1", tmp_path / "data"
    workdir.mkdir()
    data.mkdir()
    (data / "hello").write_text("from the host\n")
    monkeypatch.chdir(workdir)
    options = ContainerOptions(data=((str(data), "/data"),), shm_size=64 << 20, user="1234:1234")
    script = data / "show.sh"  # /data/show.sh: a program only the container has (not checked on the host)
    script.write_text("#!/bin/sh\ncat /data/hello; pwd; id -u; df -k /dev/shm | tail -1\n")
    script.chmod(0o755)
    small.submit(h.spec("opts", ["/data/show.sh"], gpus=0, image=image, container=options))
    view = small.wait("opts", 120)
    assert view.status is JobStatus.SUCCEEDED, (view.events, small.logs("opts", "worker-0"))
    out = small.logs("opts", "worker-0").splitlines()
    assert out[:3] == ["from the host", str(workdir), "1234"]
    assert out[3].split()[1] == str(64 * 1024)  # /dev/shm's size in KiB


@pytest.mark.slow
def test_an_image_that_cannot_be_had_is_the_jobs_reason_in_one_line(small: Runtime, h, image: str) -> None:
    missing = "localhost/ringleader-no-such-image:1"
    never = ContainerOptions(image_pull_policy="Never")
    with pytest.raises(UsageError, match="is not on this host and --image-pull-policy is Never"):
        small.submit(h.spec("never", ["true"], gpus=0, image=missing, container=never))
    assert small.list_jobs() == []
    small.submit(h.spec("pull", ["true"], workers=2, gpus=0, image=missing))
    view = small.wait("pull", 120)
    assert view.status is JobStatus.FAILED, view.reason
    assert view.reason.startswith(f"image {missing} could not be pulled on this host: "), view.reason
    assert "\n" not in view.reason
    small.submit(h.spec("present", ["true"], gpus=0, image=image, container=never))
    assert small.wait("present", 120).status is JobStatus.SUCCEEDED


@pytest.mark.slow
def test_the_image_is_checked_at_submit_and_again_at_each_start(
    small: Runtime, h, image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The submit asks podman once (is the image here?) and the agent asks again when the job
    starts, once per host, so an image removed while a job waited is its one-line reason, not a
    rank's exit code 125."""
    calls = tmp_path / "podman-calls"
    shim = tmp_path / "bin" / "podman"  # the real podman, each call written down
    shim.parent.mkdir()
    real = shutil.which("podman")
    assert real is not None
    shim.write_text(f'#!/bin/sh\necho "$*" >> {shlex.quote(str(calls))}\nexec {shlex.quote(real)} "$@"\n')
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim.parent}{os.pathsep}{os.environ['PATH']}")
    small.submit(h.spec("at-once", ["true"], workers=2, gpus=0, image=image))
    view = small.wait("at-once", 120)
    assert view.status is JobStatus.SUCCEEDED
    (started,) = [e.message for e in view.events if e.kind == "Started"]
    assert "-c <guard> --guard podman run" in started and GUARD_MARK not in started  # not 9 KB of packed source
    asked = [c for c in calls.read_text().splitlines() if c.startswith("image exists")]
    assert asked == [f"image exists {image}"] * 2  # the submit's and the start's; the ranks ran: `run` twice
    assert sum(c.startswith("run ") for c in calls.read_text().splitlines()) == 2

    copy = "localhost/ringleader-test-queued:1"
    subprocess.run([real, "tag", image, copy], check=True, capture_output=True)
    try:
        small.submit(h.spec("blocker", ["sleep", "300"], gpus=4))
        small.submit(h.spec("waits", ["true"], gpus=1, image=copy))
        assert small.get("waits").status is JobStatus.PENDING, small.get("waits").reason
        subprocess.run([real, "rmi", copy], check=True, capture_output=True)  # the tag alone
        small.delete(["blocker"])
        view = small.wait("waits", 120)
    finally:
        subprocess.run([real, "rmi", "--ignore", copy], capture_output=True)
    assert view.status is JobStatus.FAILED, view.reason
    assert view.reason.startswith(f"image {copy} could not be pulled on this host: "), view.reason


# -- per-GPU isolation (argv and CDI specs; no GPU here: unverified on one) ---------------------


@pytest.mark.parametrize(("runtime", "visible", "devices", "inside"), [
    ("podman", "2,5", ["--device", "nvidia.com/gpu=2", "--device", "nvidia.com/gpu=5"], "0,1"),
    ("/usr/bin/docker", "3", ["--gpus", '"device=3"'], "0"),
    ("docker", "1,4,6", ["--gpus", '"device=1,4,6"'], "0,1,2"),
    ("podman", "", [], ""),  # an emulated node's rank: no real GPU
])  # fmt: skip
def test_each_rank_gets_only_its_own_gpus_numbered_as_the_container_sees_them(
    runtime: str, visible: str, devices: list[str], inside: str
) -> None:
    argv, env = rank_wrapper.completed(["--gpus", runtime, "run", "--rm", "img", "prog"],
                                          {"CUDA_VISIBLE_DEVICES": visible, "X": "1"})  # fmt: skip
    assert argv == [runtime, "run", *devices, "--rm", "img", "prog"]
    assert env == {"CUDA_VISIBLE_DEVICES": inside, "X": "1"}
    assert rank_wrapper.completed([runtime, "run", "img"], {"CUDA_VISIBLE_DEVICES": visible})[0] == [
        runtime, "run", "img"]  # a job without GPUs  # fmt: skip


def test_the_guard_runs_as_a_program_of_its_own_and_a_queued_jobs_old_guard_is_still_read() -> None:
    """A prepared command runs under any wrapper (its guard is a program); a rank wrapper
    completes the same line itself. A job queued before the guard was the rank wrapper keeps
    its image check and cleanup."""
    guard = [sys.executable, *guard_command()[1:]]  # `python3` may be another interpreter here
    done = subprocess.run([*guard, "--gpus", "/bin/echo", "run", "--rm", "img", "prog"], capture_output=True,
                          text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": "3"})  # fmt: skip
    assert (done.returncode, done.stdout.split()) == (0, ["run", "--device", "nvidia.com/gpu=3", "--rm", "img", "prog"])
    assert rank_wrapper.unguarded([*guard, "--gpus", "/bin/echo", "run", "img"], {"CUDA_VISIBLE_DEVICES": "3"}) == (
        ["/bin/echo", "run", "--device", "nvidia.com/gpu=3", "img"], {"CUDA_VISIBLE_DEVICES": "0"})  # fmt: skip
    missing = subprocess.run([*guard, "/nonexistent/podman", "run", "img"], capture_output=True, text=True)
    assert missing.returncode == 127
    assert missing.stdout.strip() == (
        "ringleader: cannot run the container runtime '/nonexistent/podman' on this host: No such file or directory")
    old = ["python3", "-S", "-c", "import base64,zlib;exec(zlib.decompress(b''))", "--gpus", "podman", "run", "img"]
    assert container_runtime_of(old) == "podman"
    assert container_runtime_of([*guard_command(), "docker", "run", "img"]) == "docker"
    assert container_runtime_of(["python3", "-c", "print(1)", "podman", "run"]) is None


CDI_SPEC = """cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: GPU-4d6e8a4b-0c1f-2f8e-9c3a-5b7d9e1f2a3c
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
containerEdits:
  deviceNodes:
  - path: /dev/nvidiactl
"""


def test_the_cdi_spec_must_name_each_gpu_or_the_submit_says_how_to_generate_it(tmp_path: Path) -> None:
    etc, run = tmp_path / "etc-cdi", tmp_path / "run-cdi"
    etc.mkdir()
    with pytest.raises(DependencyError) as none:
        check_cdi([0], [str(etc), str(run)])
    assert "there is none in" in none.value.message and "nvidia-ctk cdi generate" in none.value.fix
    (etc / "nvidia.yaml").write_text(CDI_SPEC)
    check_cdi([0], [str(etc), str(run)])
    with pytest.raises(DependencyError, match=r"\(GPU 1\): it names 0, GPU-4d6e8a4b"):
        check_cdi([0, 1], [str(etc), str(run)])
    run.mkdir()
    doc = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [{"name": "1", "containerEdits": {}}]}
    (run / "nvidia.json").write_text(json.dumps(doc))  # nvidia-ctk's JSON output, in the other folder
    check_cdi([0, 1], [str(etc), str(run)])
    (etc / "other.yaml").write_text(CDI_SPEC.replace("nvidia.com/gpu", "example.com/fpga").replace('"0"', '"2"'))
    with pytest.raises(DependencyError):
        check_cdi([2], [str(etc), str(run)])  # another kind's device 2 is no GPU


def test_container_options_reach_the_runtimes_argv(tmp_path: Path) -> None:
    from ringleader.runtime.containers import ContainerRuntime, in_image

    options = ContainerOptions(data=(("/srv/a:b", "/data"),), shm_size=1 << 30, rdma=True, user="1000:100")
    argv = in_image(ContainerRuntime("podman", "/usr/bin/podman"), "img", ["prog"], "/w:1", ["FOO"], gpus=True,
                    mpi=False, options=options, label="abc.job")  # fmt: skip
    words = argv[argv.index("--gpus") + 1 : argv.index("img")]
    joined = " ".join(words)
    expected = ("podman run --rm --pull=never", "--ipc=private --shm-size=1073741824b", f"--label {LABEL}=abc.job",
                "--mount type=bind,source=/w:1,target=/w:1 -w /w:1", "--mount type=bind,source=/srv/a:b,target=/data",
                "--device /dev/infiniband --ulimit memlock=-1:-1 --cap-add IPC_LOCK", "--user 1000:100", "-e FOO")
    for part in expected:
        assert part in joined, part
    assert "--ipc=host" not in words and argv[-1] == "prog"


def test_a_submit_refuses_mounts_the_runtime_would_refuse(small: Runtime, h, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    comma = tmp_path / "a,b"
    comma.mkdir()
    monkeypatch.chdir(comma)
    with pytest.raises(UsageError, match="holds a ','"):
        small.submit(h.spec("c", ["true"], gpus=0, image="img"), dry_run=True)
    monkeypatch.chdir(tmp_path)
    for source, why in (("rel/dir", "absolute host path"), (str(tmp_path / "nope"), "no such file or folder")):
        with pytest.raises(UsageError, match=why):
            small.submit(h.spec("c", ["true"], gpus=0, image="img", container=ContainerOptions(data=((source, "/d"),))))
    assert small.list_jobs() == []
    spec = JobSpec("c", 1, 0, ["true"], container=ContainerOptions(rdma=True))
    with pytest.raises(UsageError, match="--rdma sets up each rank's container and this job has none"):
        small.submit(spec)



@pytest.mark.slow
def test_the_cli_options_reach_the_container_and_get_shows_them(
    home: Path, image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from ringleader.cli.main import main

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x").write_text("mounted\n")
    (tmp_path / "config.json").write_text('{"lr": 0.1}\n')
    monkeypatch.chdir(tmp_path)
    # arena's --config-file HOST_FILE:CONTAINER_FILE, a relative host path as its docs write them
    args = ["submit", "mpi", "--name", "cli", "--image", image, "-d", f"{tmp_path / 'in'}:/in", "--shm-size", "32m",
            "--container-user", "submitter", "--image-pull-policy", "IfNotPresent",
            "--config-file", "config.json:/etc/config/config.json", "--", "sh", "-c",
            "cat /in/x; id -u; df -k /dev/shm | tail -1; cat /etc/config/config.json"]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    rt = Runtime.open(home)
    view = rt.wait("cli", 120)
    assert view.status is JobStatus.SUCCEEDED, rt.logs("cli")
    out = rt.logs("cli").splitlines()
    assert out[:2] == ["mounted", str(os.getuid())] and out[2].split()[1] == str(32 * 1024)
    assert out[3] == '{"lr": 0.1}'
    capsys.readouterr()
    assert main(["get", "cli", "-o", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)["container"]
    rt.close()
    mounts = [[str(tmp_path / "in"), "/in"], [str(tmp_path / "config.json"), "/etc/config/config.json"]]
    assert shown == {"data": mounts, "shm_size": 32 << 20, "rdma": False,
                     "image_pull_policy": "IfNotPresent", "user": f"{os.getuid()}:{os.getgid()}"}  # fmt: skip
