"""Users' command lines at submit: replaced with a note, refused with one line, or run as meant.

Refusals go through the real `ringleader` entry point (exit 2, one line, the state database
unchanged); the jobs are real: mpirun ranks, a horovodrun line run as mpirun, torchrun and
deepspeed lines.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from ringleader.cli.main import main
from ringleader.engines.embedded.engine import Runtime
from ringleader.errors import DependencyError
from ringleader.jobs.commandline import prepare, prepare_spec
from ringleader.jobs.states import JobStatus
from ringleader.runtime.containers import find_runtime

PY = sys.executable
VENV_BIN = str(Path(PY).parent)
# Prints what a rank sees: its arguments and the variables under test, as one JSON line.
NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "FOO", "BAR", "HOROVOD_FUSION_THRESHOLD",
         "OMP_NUM_THREADS")  # fmt: skip
SHOW = (
    "import json, os, sys; "
    f"print('seen', json.dumps({{'argv': sys.argv[1:], **{{n: os.environ.get(n) for n in {NAMES!r}}}}}), flush=True)"
)


def seen(text: str) -> dict[str, object]:
    """What the rank printed (its one `seen` line of the log)."""
    lines = [line for line in text.splitlines() if line.startswith("seen ")]
    assert len(lines) == 1, text
    return dict(json.loads(lines[0][5:]))


def no_runtime_path(tmp_path: Path) -> str:
    """A PATH with no podman and, when this host has one, the real docker client: without a
    reachable daemon (this host's case) it counts as no runtime."""
    folder = tmp_path / "no-runtime-bin"
    folder.mkdir(exist_ok=True)
    docker = shutil.which("docker")
    if docker and not (folder / "docker").exists():
        (folder / "docker").symlink_to(docker)
    return str(folder)


def _docker_answers(path: str) -> bool:
    try:
        find_runtime("probe", {"PATH": path})
    except DependencyError:
        return False
    return True


REFUSED = {
    "np-disagrees": "mpirun -np 3 {py} -c pass",
    "x-bad-name": "mpirun -x 9LIVES {py} -c pass",
    "x-and-e-disagree": "mpirun -x RL_TEST_E=2 {py} -c pass",
    "map-by-node": "mpirun -np 2 --map-by node {py} -c pass",
    "ppr": "mpirun --map-by ppr:1:node {py} -c pass",
    "npernode": "mpirun -npernode 1 {py} -c pass",
    "rankfile": "mpirun --rankfile ranks.txt {py} -c pass",
    "mpirun-of-torchrun": "mpirun -np 2 torchrun --nproc_per_node 2 train.py",
    "mpirun-of-horovodrun": "mpirun -np 2 horovodrun -np 2 {py} train.py",
    "horovodrun-np": "horovodrun -np 4 -H server1:2,server2:2 {py} train.py",
    "horovodrun-gloo": "horovodrun --gloo -np 2 {py} train.py",
    "horovodrun-elastic": "horovodrun -np 2 --min-np 1 --host-discovery-script ./d.sh {py} train.py",
    "horovodrun-config": "horovodrun -np 2 --config-file hvd.yaml {py} train.py",
    "horovodrun-unknown": "horovodrun -np 2 --no-such-option {py} train.py",
    "horovodrun-no-program": "horovodrun -np 2",
    "torchrun-count": "torchrun --nnodes 2 --nproc-per-node 2 train.py",
    "torchrun-one-by-default": "torchrun --nproc_per_node=1 train.py",
    "torchrun-elastic": "torchrun --nnodes 1:2 --nproc-per-node 1 train.py",
    "torchrun-unknown": "torchrun --no-such-option train.py",
    "torchrun-no-script": "torchrun --nproc-per-node 2",
    "torchrun-of-horovodrun": "torchrun --no-python horovodrun -np 2 train.py",
    "launch-count": "{py} -m torch.distributed.launch --nproc_per_node 3 train.py",
    "deepspeed-count": "deepspeed --num_gpus 3 train.py",
    "deepspeed-nodes-count": "deepspeed --num_nodes=2 --num_gpus=2 train.py",
    "deepspeed-not-a-count": "deepspeed --num_gpus -1 train.py",
    "deepspeed-elastic": "deepspeed --elastic_training --num_nodes 2 train.py",
    "deepspeed-autotuning": "deepspeed --autotuning tune train.py",
    "deepspeed-unknown": "deepspeed --no-such-option train.py",
    "deepspeed-no-script": "deepspeed --num_gpus 2",
    "deepspeed-module-no-python": "deepspeed --module --no_python pkg.train",
    "mpirun-of-deepspeed": "mpirun -np 2 deepspeed train.py",
    "torchrun-of-deepspeed": "torchrun --no-python deepspeed train.py",
    "deepspeed-of-torchrun": "deepspeed --no_python torchrun train.py",
}


def test_every_refused_line_exits_2_with_one_line_and_changes_nothing(
    seeds: Runtime, h, capsys, monkeypatch, tmp_path
) -> None:
    cases = {name: shlex.split(line.format(py=PY)) for name, line in REFUSED.items()}
    cases_args = {name: ["submit", "mpi", "--name", "r", "--workers", "2", "-e", "RL_TEST_E=1", "--", *argv]
                  for name, argv in cases.items()}  # fmt: skip
    image = ["submit", "mpi", "--name", "r", "--image"]
    cases_args["image-bad-reference"] = [*image, "-v /:/host", "--", PY, "-c", "pass"]
    cases_args["image-no-runtime"] = [*image, "python:3.11", "--", PY, "-c", "pass"]
    path = no_runtime_path(tmp_path)
    if _docker_answers(path):
        pytest.skip("docker's daemon answers here: an image has a runtime")
    before = h.dump_db(seeds.home)
    for name, args in cases_args.items():
        if name.startswith("image"):
            monkeypatch.setenv("PATH", path)
        capsys.readouterr()
        code = main(args)
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert code == 2, f"{name}: rc={code}\n{err}"
        assert len(lines) == 1 and lines[0].startswith("error:") and "To fix:" in lines[0], f"{name}: {err}"
        assert h.dump_db(seeds.home) == before, name


def test_image_is_refused_naming_why_when_no_runtime_answers(tmp_path: Path) -> None:
    """No podman, and docker (when present) without a reachable daemon: this host's case."""
    path = no_runtime_path(tmp_path)
    if _docker_answers(path):
        pytest.skip("docker's daemon answers here")
    with pytest.raises(DependencyError, match="needs a container runtime on this host") as info:
        find_runtime("python:3.11", {"PATH": path})
    assert "no podman on PATH" in info.value.message
    if shutil.which("docker"):
        assert "docker at" in info.value.message and "cannot run containers" in info.value.message


def command_notes(rt: Runtime) -> list[str]:
    """The notes about the line (not the hint a spread placement gets: the seeds' jobs spread)."""
    return [n for n in rt.notes if not n.startswith("note: placed without --gputopology")]


@pytest.mark.slow
def test_x_name_reaches_every_rank_with_the_submitters_value(seeds: Runtime, h, monkeypatch) -> None:
    monkeypatch.setenv("FOO", "from the submitting shell")
    line = f"mpirun -np 2 -H server1:1,server2:1 -x FOO -x BAR=given --mca btl ^openib {PY} -c {shlex.quote(SHOW)}"
    seeds.submit(h.spec("xfoo", shlex.split(line), workers=2, gpus=1))
    replaced = "note: mpirun -H server1:1,server2:1 replaced by the placement; see `ringleader get xfoo`"
    assert command_notes(seeds)[-1:] == [replaced]
    view = seeds.wait("xfoo", 120)
    assert view.status is JobStatus.SUCCEEDED, view.events
    assert view.spec.env == {"FOO": "from the submitting shell", "BAR": "given"}
    for rank in range(2):
        got = seen(seeds.logs("xfoo", f"worker-{rank}"))
        assert (got["RANK"], got["OMPI_COMM_WORLD_SIZE"]) == (str(rank), "2")
        assert (got["FOO"], got["BAR"]) == ("from the submitting shell", "given")
    assert any(e.kind == "Command" and "-H server1:1,server2:1" in e.message for e in view.events)


@pytest.mark.slow
def test_replaced_hosts_and_unset_x_names_are_named_on_stderr(seeds: Runtime, capsys, monkeypatch) -> None:
    monkeypatch.delenv("RL_TEST_UNSET", raising=False)
    line = f"mpirun -np 2 --hostfile /etc/no-such-hostfile -H server1:1,server2:1 -x RL_TEST_UNSET {PY} -c pass"
    capsys.readouterr()
    assert main(["submit", "mpi", "--name", "noted", "--workers", "2", line]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[-2:] == [
        "note: mpirun -x RL_TEST_UNSET: RL_TEST_UNSET not set when submitted, so no rank gets it "
        "(mpirun too would pass nothing)",
        "note: mpirun --hostfile /etc/no-such-hostfile -H server1:1,server2:1 replaced by the placement; "
        "see `ringleader get noted`",
    ]
    assert "RL_TEST_UNSET" not in seeds.get("noted").spec.env


@pytest.mark.slow
def test_horovodrun_line_runs_as_its_mpirun_line_with_np_from_workers(seeds: Runtime, h, monkeypatch) -> None:
    monkeypatch.setenv("HOROVOD_LOG_LEVEL", "warning")
    line = f"horovodrun -np 2 -H server1:1,server2:1 --fusion-threshold-mb 32 {PY} -c {shlex.quote(SHOW)} a"
    seeds.submit(h.spec("hvd", shlex.split(line), workers=2, gpus=1))
    note = command_notes(seeds)[-1]
    assert note.startswith("note: horovodrun runs as its MPI mode's line: mpirun --allow-run-as-root --tag-output "
                           "-np 2 -bind-to none")  # fmt: skip
    assert "-H server1:1,server2:1 replaced by the placement" in note
    view = seeds.wait("hvd", 120)
    assert view.status is JobStatus.SUCCEEDED, view.events
    assert view.spec.user_command == shlex.split(line)
    assert view.spec.command[:5] == ["mpirun", "--allow-run-as-root", "--tag-output", "-np", "2"]
    assert view.spec.env["HOROVOD_LOG_LEVEL"] == "warning"  # -x of the submitter's HOROVOD_*
    started = next(e.message for e in view.events if e.kind == "Started")
    assert "mpirun -np 2 --host localhost:2" in started and started.count("-np") == 1
    for rank in range(2):
        got = seen(seeds.logs("hvd", f"worker-{rank}"))
        assert (got["argv"], got["RANK"], got["OMPI_COMM_WORLD_SIZE"]) == (["a"], str(rank), "2")
        assert got["HOROVOD_FUSION_THRESHOLD"] == str(32 * 1024 * 1024)  # in bytes, as horovodrun sets it


@pytest.mark.slow
@pytest.mark.parametrize(
    ("line", "argv"),
    [
        ("torchrun --nproc_per_node 2 --max-restarts 3", ["b"]),
        (f"{PY} -m torch.distributed.launch --nproc_per_node=2", ["--local-rank={local_rank}", "b"]),
        (f"{PY} -m torch.distributed.run --nnodes 1 --nproc-per-node 2", ["b"]),
    ],
    ids=["torchrun", "launch", "run"],
)
def test_torchrun_lines_run_the_script_once_per_worker(small: Runtime, h, tmp_path, monkeypatch, line, argv) -> None:
    rt = small  # one node: local ranks 0 and 1
    monkeypatch.setenv("PATH", f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}")  # where torchrun is
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    script = tmp_path / "show.py"
    script.write_text(SHOW + "\n")
    rt.submit(h.spec("tr", [*shlex.split(line), str(script), "b"], workers=2, gpus=1))
    assert "replaced: ringleader starts" in rt.notes[-1] and "once per worker (2 in all)" in rt.notes[-1]
    if line.startswith("torchrun"):
        assert rt.notes[-1].endswith("ignored (a failed rank fails the job, logs are per instance): --max-restarts 3")
    view = rt.wait("tr", 120)
    assert view.status is JobStatus.SUCCEEDED, view.events
    assert [i.name for i in view.instances] == ["tr-worker-0", "tr-worker-1"]  # no launcher, no copies
    for rank in range(2):
        got = seen(rt.logs("tr", f"worker-{rank}"))
        assert got["argv"] == [a.format(local_rank=got["LOCAL_RANK"]) for a in argv]
        assert (got["RANK"], got["LOCAL_RANK"], got["WORLD_SIZE"]) == (str(rank), str(rank), "2")
        assert got["OMP_NUM_THREADS"] == "1"  # torchrun's default with several processes per node


@pytest.mark.slow
@pytest.mark.parametrize(
    ("line", "argv"),
    [
        ("deepspeed --num_gpus 2 --master_port 29999 --save_pid", ["--local_rank={local_rank}", "b"]),
        ("deepspeed --hostfile hosts.txt --no_local_rank", ["b"]),
    ],
    ids=["local-rank", "no-local-rank"],
)
def test_deepspeed_lines_run_the_script_once_per_worker_as_its_launcher_would(
    small: Runtime, h, tmp_path, monkeypatch, line, argv
) -> None:
    """DeepSpeed's launcher starts `python -u SCRIPT --local_rank=N ARGS` per GPU with torchrun's
    variables: ringleader starts that once per worker, and never the launcher (here a deepspeed
    that would fail the job if it ran)."""
    rt = small
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "deepspeed").write_text(f"#!{PY}\nimport sys\nsys.exit('the launcher ran')\n")
    (bin_dir / "deepspeed").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    script = tmp_path / "show.py"
    script.write_text(SHOW + "\n")
    rt.submit(h.spec("ds", [*shlex.split(line), str(script), "b"], workers=2, gpus=1))
    note = rt.notes[-1]
    assert note.startswith(f"note: deepspeed replaced: ringleader starts `{PY} -u {script}") and "(2 in all)" in note
    assert ("--local_rank=N b`" in note) is ("--no_local_rank" not in line)
    assert "taken from the placement" in note and line.split()[1] in note
    if "--save_pid" in line:
        assert note.endswith("ignored (a failed rank fails the job, logs are per instance): --save_pid")
    view = rt.wait("ds", 120)
    assert view.status is JobStatus.SUCCEEDED, view.events
    assert [i.name for i in view.instances] == ["ds-worker-0", "ds-worker-1"]
    for rank in range(2):
        got = seen(rt.logs("ds", f"worker-{rank}"))
        assert got["argv"] == [a.format(local_rank=got["LOCAL_RANK"]) for a in argv]
        assert (got["RANK"], got["LOCAL_RANK"], got["WORLD_SIZE"]) == (str(rank), str(rank), "2")
        assert got["OMP_NUM_THREADS"] is None  # deepspeed's launcher leaves it alone


@pytest.mark.parametrize(("line", "words"), [
    ("deepspeed --num_gpus 3 train.py", "deepspeed would start 3 process(es) (--num_nodes 1 x --num_gpus 3) but "
                                        "--workers is 2"),
    ("deepspeed --num_nodes=2 --num_gpus=2 train.py", "(--num_nodes 2 x --num_gpus 2)"),
    ("deepspeed --num_gpus -1 train.py", "deepspeed --num_gpus -1 is not a count"),
    ("deepspeed --elastic_training --num_nodes 2 train.py", "elastic deepspeed (--elastic_training)"),
    ("deepspeed --autotuning tune train.py", "deepspeed --autotuning runs its own series of experiments"),
    ("deepspeed --no-such-option train.py", "deepspeed option --no-such-option is not known to ringleader"),
    ("deepspeed --num_gpus 2", "the deepspeed line names no training script"),
    ("deepspeed --module --no_python pkg.train", "deepspeed --no_python and --module cannot go together"),
    ("mpirun -np 2 deepspeed train.py", "mpirun would start one deepspeed per rank"),
    ("deepspeed --no_python torchrun train.py", "deepspeed would start one torchrun per worker"),
])  # fmt: skip
def test_deepspeed_lines_are_refused_where_a_gang_cannot_run_them(line: str, words: str) -> None:
    from ringleader.errors import UsageError

    with pytest.raises(UsageError) as refused:
        prepare(shlex.split(line), 2, {}, dict(os.environ), "ds")
    assert words in refused.value.message


@pytest.mark.parametrize("line", ["mpirun -np {n} python3 t.py", "horovodrun -np {n} python3 t.py",
                                  "torchrun --nnodes {n} t.py", "torchrun --nproc-per-node={n} t.py",
                                  "deepspeed --num_gpus {n} t.py"])  # fmt: skip
def test_a_count_of_thousands_of_digits_is_refused_not_a_traceback(line: str) -> None:
    from ringleader.errors import UsageError

    with pytest.raises(UsageError):  # int() itself refuses more than 4,300 digits, with a ValueError
        prepare(shlex.split(line.format(n="9" * 5000)), 2, {}, dict(os.environ), "j")


def test_preparing_is_idempotent_and_keeps_the_line_as_written(monkeypatch, h) -> None:
    monkeypatch.setenv("FOO", "1")
    spec = h.spec("p", shlex.split(f"horovodrun -np 2 -H a:1,b:1 {PY} t.py"), workers=2, env={"FOO": "1"})
    once, line, notes = prepare_spec(spec, os.environ)
    twice, line_again, again = prepare_spec(once, os.environ)
    assert once == twice and notes == again and line == line_again
    assert once.user_command == spec.command
    assert line.mpirun and line.argv == tuple(once.command)
    plain = h.spec("q", [PY, "t.py"], workers=2)
    spec_again, plain_line, plain_notes = prepare_spec(plain, os.environ)
    assert (spec_again, plain_notes) == (plain, []) and not plain_line.mpirun


def test_horovodrun_options_become_what_horovodrun_would_pass() -> None:
    line = ("horovodrun -np 4 --hostfile hosts.txt --network-interface eth1 --hierarchical-allreduce "
            "--mpi-args='--mca btl_tcp_if_exclude lo' --timeline-filename /tmp/t.json --tcp -p 2222 "
            "python train.py")  # fmt: skip
    out = prepare(shlex.split(line), 4, {}, {}, "j")
    cmd = out.command
    assert cmd[cmd.index("btl_tcp_if_include") + 1] == "eth1"
    assert cmd[cmd.index("btl_tcp_if_exclude") + 1] == "lo"
    assert cmd[-2:] == ["python", "train.py"] and "--hostfile" not in cmd and "2222" not in " ".join(cmd)
    assert out.env == {"NCCL_SOCKET_IFNAME": "eth1", "HOROVOD_HIERARCHICAL_ALLREDUCE": "1",
                       "HOROVOD_TIMELINE": "/tmp/t.json", "NCCL_IB_DISABLE": "1"}  # fmt: skip
    assert "--hostfile hosts.txt replaced by the placement" in out.notes[0]
    assert "ignored (hosts are reached as the cluster file says): -p 2222" in out.notes[0]
    # horovodrun's own first words (its mpi_run), root or not: as root in an image mpirun needs them
    assert cmd[:3] == ["mpirun", "--allow-run-as-root", "--tag-output"]


def test_x_name_in_an_image_is_the_images_value_not_this_shells() -> None:
    """mpirun -x NAME passes NAME as it is where mpirun runs: in an image, the image's (the
    reference study's -x PATH is the launcher pod's PATH), so nothing of this shell is recorded."""
    shell = {"PATH": "/home/me/venv/bin:/usr/bin", "LD_LIBRARY_PATH": "/home/me/cuda-12.1/lib64",
             "HOROVOD_LOG_LEVEL": "debug"}  # fmt: skip
    line = "mpirun -np 2 -x LD_LIBRARY_PATH -x PATH -x NCCL_DEBUG=INFO python train.py"
    here = prepare(shlex.split(line), 2, {}, shell, "j")
    assert here.env == {"LD_LIBRARY_PATH": "/home/me/cuda-12.1/lib64", "PATH": "/home/me/venv/bin:/usr/bin",
                        "NCCL_DEBUG": "INFO"}  # fmt: skip
    imaged = prepare(shlex.split(line), 2, {}, shell, "j", in_image=True)
    assert imaged.env == {"NCCL_DEBUG": "INFO"}
    assert imaged.command == shlex.split(line)  # mpirun in the image passes its own values
    assert imaged.notes == ["note: mpirun -x LD_LIBRARY_PATH, -x PATH: each rank gets the image's value, as mpirun "
                            "passes its own environment where it runs, not this shell's; write -x NAME=VALUE or "
                            "-e NAME=VALUE to pass a value"]  # fmt: skip
    hvd = prepare(["horovodrun", "-np", "2", "python", "train.py"], 2, {}, shell, "j", in_image=True)
    assert "HOROVOD_LOG_LEVEL" not in hvd.command and hvd.env == {}  # horovodrun there lists that env, not this


def test_torchrun_standalone_is_named_as_replaced() -> None:
    out = prepare(["torchrun", "--standalone", "--nproc-per-node=2", "train.py"], 2, {}, {"PATH": os.defpath}, "j")
    assert out.notes[-1].endswith("--standalone --nproc-per-node=2 taken from the placement (see `ringleader get j`)")


@pytest.mark.slow
def test_image_contract_with_a_stand_in_podman(seeds: Runtime, h, tmp_path, monkeypatch) -> None:
    """Contract test: a stand-in `podman` that answers `version` and, for `run`, starts the program
    with only the variables named by -e (by name, or by prefix with `*`, as podman does): the
    ranks' variables, Open MPI's and the job's -x NAME=VALUE values must be passed into the image;
    -x NAME is the image's own value, not the submitting shell's."""
    fake = tmp_path / "bin" / "podman"
    fake.parent.mkdir()
    fake.write_text(
        f"#!{PY}\nimport os, sys\n"
        "a = sys.argv[1:]\n"
        "if a[0] == 'version': print('4.3.1'); sys.exit(0)\n"
        "if a[:2] == ['image', 'exists']: sys.exit(0 if a[2] == 'example.org/train:1' else 1)\n"
        "if a[0] in ('ps', 'rm'): sys.exit(0)  # no container is left: each ran in this process\n"
        "i = a.index('example.org/train:1'); opts, prog = a[1:i], a[i + 1:]\n"
        "names = [opts[k + 1] for k, o in enumerate(opts) if o == '-e']\n"
        "env = {k: v for k, v in os.environ.items() if any(k == n or n.endswith('*') and k.startswith(n[:-1])"
        " for n in names)}\n"
        "os.chdir(opts[opts.index('-w') + 1]); os.execve(prog[0], prog, env)\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FOO", "this shell's, not the image's")
    line = f"mpirun -np 2 -x FOO -x BAR=into-the-image {PY} -c {shlex.quote(SHOW)}"
    seeds.submit(h.spec("img", shlex.split(line), workers=2, gpus=1, image="example.org/train:1"))
    assert command_notes(seeds)[-1] == f"note: each rank runs in image example.org/train:1 through podman ({fake})"
    assert command_notes(seeds)[-2].startswith("note: mpirun -x FOO: each rank gets the image's value")
    view = seeds.wait("img", 120)
    assert view.status is JobStatus.SUCCEEDED, view.events
    assert view.spec.command[view.spec.command.index("podman") + 1] == "run"
    for rank in range(2):
        got = seen(seeds.logs("img", f"worker-{rank}"))
        assert (got["RANK"], got["OMPI_COMM_WORLD_SIZE"], got["BAR"]) == (str(rank), "2", "into-the-image")
        assert got["FOO"] is None  # the image sets none


TOKENS = [
    "mpirun", "horovodrun", "torchrun", "python", "/usr/bin/python3", "-m", "torch.distributed.run",
    "torch.distributed.launch", "-mtorch.distributed.run", "-u", "-W", "-X", "-c", "--", "-", "", "=", "'",
    "-np", "-n", "2", "3", "-H", "a:1,b:1", "--host=a:2", "--hostfile", "-x", "FOO", "FOO=1", "9X", "UNSET_X",
    "--map-by", "slot", "ppr:1:node", "--map-by=node", "-N", "--mca", "btl", "^openib", "--nproc_per_node",
    "--nproc-per-node=2", "--nnodes", "1:2", "2:2", "auto", "--use-env", "--no-python", "--module",
    "--max-restarts", "--rdzv-endpoint=h:1", "--fusion-threshold-mb", "x", "--mpi-args", "--binding-args",
    "--gloo", "--network-interface", "eth0", "-p", "--tcp", "--hierarchical-allreduce", "train.py",
    "deepspeed", "--num_gpus", "--num_nodes=2", "--no_local_rank", "--no_python", "--include", "-H",
    "9" * 5000,  # more digits than int() takes
]  # fmt: skip


def test_any_line_is_prepared_or_refused_and_never_runs_a_launcher_per_rank() -> None:
    """Fuzzing: every line is either refused with a UsageError or prepared into a line that
    prepares to itself and never starts one torchrun, deepspeed or horovodrun per worker."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from ringleader.errors import UsageError
    from ringleader.jobs.commandline import _launcher
    from ringleader.jobs.line import scan_mpirun

    @settings(max_examples=400, deadline=None)
    @given(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=10), st.integers(1, 4))
    def check(argv: list[str], workers: int) -> None:
        environ = {"FOO": "shell", "PATH": os.defpath}
        try:
            out = prepare(argv, workers, {}, environ, "j")
        except UsageError as exc:
            assert exc.fix and "\n" not in exc.one_line()
            return
        assert out.command and all(isinstance(a, str) for a in out.command)
        again = prepare(out.command, workers, out.env, environ, "j")
        assert (again.command, again.env) == (out.command, out.env)
        launcher = _launcher(out.command)
        assert launcher in (None, "mpirun")
        if launcher == "mpirun":
            assert _launcher(scan_mpirun(out.command)[1]) is None

    check()
