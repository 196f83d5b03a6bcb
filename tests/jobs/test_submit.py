"""prepare_submit: the user's line read once per submit, and a dry run that refuses exactly what
a real submit refuses, in the same words, on every engine."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringleader.engines.embedded.engine import Runtime
from ringleader.errors import RingleaderError, UsageError
from ringleader.jobs import commandline
from ringleader.jobs import line as line_module
from ringleader.jobs import spec as spec_module
from ringleader.jobs.spec import ContainerOptions, JobSpec, parse_container_user, parse_data, parse_size
from ringleader.jobs.submit import prepare_submit
from ringleader.jobs.support import Support

PY = sys.executable
CLUSTER = "nodes:\n  - name: box\n    preset: pcie-4gpu-workstation\n    emulated: true\n"


@pytest.fixture
def rt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    runtime = Runtime.open(tmp_path / "home")
    runtime.apply_cluster(tmp_path / "cluster.yaml")
    yield runtime
    live = [v.name for v in runtime.list_jobs() if not v.status.is_terminal()]
    if live:
        runtime.delete(live)
    runtime.close()


@pytest.fixture
def readings(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """Every reading of a command line (and every walk over an mpirun line) in this process."""
    seen: list[tuple[str, ...]] = []
    read, scan = line_module.read_line, line_module.scan_mpirun

    def counted_read(argv):  # type: ignore[no-untyped-def]
        seen.append(tuple(argv))
        return read(argv)

    def counted_scan(argv):  # type: ignore[no-untyped-def]
        seen.append(("scan", *argv))
        return scan(argv)

    for module in (line_module, commandline, spec_module):  # every name the reading goes by
        monkeypatch.setattr(module, "read_line", counted_read)
    monkeypatch.setattr(line_module, "scan_mpirun", counted_scan)
    return seen


LINES = {
    "mpirun": f"mpirun -np 2 -x PATH --mca btl ^openib {PY} -c pass",
    "horovodrun": f"horovodrun -np 2 -H a:1,b:1 --fusion-threshold-mb 8 {PY} -c pass",
    "torchrun": f"torchrun --nnodes=1 --nproc-per-node=2 {PY} -c pass",
    "program": f"{PY} -c pass",
}


@pytest.mark.parametrize("kind", list(LINES))
@pytest.mark.parametrize("dry_run", [True, False])
def test_the_users_line_is_read_once_per_submit(rt: Runtime, readings: list[tuple[str, ...]], kind: str,
                                                dry_run: bool) -> None:  # fmt: skip
    rt.submit(JobSpec(f"once-{kind}", 2, 1, shlex.split(LINES[kind])), dry_run=dry_run)
    lines = [r for r in readings if r[0] != "scan"]
    scans = [r for r in readings if r[0] == "scan"]
    assert len(lines) == 1, readings
    assert len(scans) == (1 if lines[0][0] == "mpirun" else 0), readings


def test_the_kubernetes_manifests_render_the_line_submit_read(readings: list[tuple[str, ...]],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    pytest.importorskip("kubernetes", reason="the kubernetes client is not installed")
    from kube.fakeapi import FakeApiServer
    from kube.kubeobjs import node
    from ringleader.engines.kubernetes.engine import open_kubernetes

    fake = FakeApiServer().start()
    try:
        fake.put("nodes", node("gpu-0", mode="default"))
        monkeypatch.setenv("RINGLEADER_KUBE_SERVER", fake.url)
        engine = open_kubernetes(Path("unused"))
        result = engine.submit(JobSpec("k", 2, 1, shlex.split(LINES["horovodrun"])), dry_run=True)
    finally:
        fake.stop()
    assert "mpirun" in result.extra["manifests"]
    assert len([r for r in readings if r[0] != "scan"]) == 1, readings


REFUSED = [
    "mpirun -np 3 python t.py",  # -np against --workers 2
    "mpirun --app appfile",  # places ranks itself
    "mpirun -npernode 1 python t.py",
    "mpirun --map-by node python t.py",
    "mpirun -np 2 horovodrun python t.py",
    "horovodrun -np 2 --gloo python t.py",
    "horovodrun -np 2 --min-np 1 python t.py",
    "torchrun --nnodes=1:4 t.py",
    "torchrun --nproc-per-node=3 t.py",
    "torchrun --no-python horovodrun python t.py",
    "mpirun -np 2 -x 1BAD python t.py",
    "mpirun -np 2",
    "no-such-program-here --flag",
]


@pytest.mark.parametrize("line", REFUSED)
def test_a_dry_run_refuses_what_a_submit_refuses_in_the_same_words(rt: Runtime, line: str) -> None:
    spec = JobSpec("refused", 2, 1, shlex.split(line))
    with pytest.raises(RingleaderError) as dry:
        rt.submit(spec, dry_run=True)
    with pytest.raises(RingleaderError) as real:
        rt.submit(spec)
    assert (type(real.value), real.value.message, real.value.fix) == (type(dry.value), dry.value.message, dry.value.fix)
    assert rt.list_jobs() == []  # nothing written


SEEDS = Path(__file__).resolve().parents[2] / "examples" / "seeds-cluster.yaml"


def test_a_spread_placement_names_the_packed_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference study's trap: a plain submit spreads 2 workers over 2 nodes with every GPU free."""
    monkeypatch.chdir(tmp_path)
    with Runtime.open(tmp_path / "home") as seeds:
        seeds.apply_cluster(SEEDS)
        seeds.notes.clear()
        seeds.submit(JobSpec("spread", 2, 1, [PY, "-c", "pass"]), dry_run=True)
        (hint,) = [n for n in seeds.notes if "--gputopology would place it" in n]
        assert "bottleneck network 3.125 GB/s" in hint and "bottleneck NV" in hint and "(16.0x)" in hint
        seeds.notes.clear()
        seeds.submit(JobSpec("packed", 2, 1, [PY, "-c", "pass"], topology_aware=True), dry_run=True)
        seeds.submit(JobSpec("one", 1, 1, [PY, "-c", "pass"]), dry_run=True)
        assert not [n for n in seeds.notes if "--gputopology would place it" in n]
        seeds.submit(JobSpec("spread", 2, 1, [PY, "-c", "pass"]))
        assert any(e.kind == "Hint" and "(16.0x)" in e.message for e in seeds.get("spread").events)


FULL = ContainerOptions(data=(("/srv/data", "/data"), ("/a:b", "/b")), shm_size=1 << 30, rdma=True,
                        image_pull_policy="Never", user="1000:100")  # fmt: skip


def test_container_options_are_kept_as_given_through_the_store() -> None:
    spec = JobSpec("c", 1, 0, ["true"], image="img", container=FULL).validate()
    assert JobSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    assert JobSpec.from_dict({"name": "old", "workers": 1, "gpus_per_worker": 0, "command": ["true"]}).container == (
        ContainerOptions()
    )  # a job stored before the options existed


def test_container_option_values_are_read_as_podman_docker_and_kubernetes_read_them() -> None:
    assert [parse_size(t) for t in ("1g", "512m", "64MiB", "2GB", "4096", "1k")] == [
        1 << 30, 512 << 20, 64 << 20, 2 << 30, 4096, 1024]  # fmt: skip
    # Kubernetes quantities, as arena takes them
    assert [parse_size(t) for t in ("8Gi", "512Mi", "1Ti", "64Ki")] == [8 << 30, 512 << 20, 1 << 40, 64 << 10]
    assert parse_data("/a:b:/in/c") == ("/a:b", "/in/c")  # a host path may hold ':'; DST may not
    assert parse_data("my-pvc:/data") == ("my-pvc", "/data")
    assert parse_container_user("submitter", uid=1000, gid=100) == "1000:100"
    assert parse_container_user("0") == "0"


@pytest.mark.parametrize("options", [ContainerOptions(data=(("/x", "/d"), ("/y", "/d"))),
                                     ContainerOptions(image_pull_policy="always"),
                                     ContainerOptions(user="root"), ContainerOptions(shm_size=0)])  # fmt: skip
def test_container_options_a_program_builds_are_checked_as_the_cli_checks_them(options: ContainerOptions) -> None:
    with pytest.raises(UsageError):
        JobSpec("c", 1, 0, ["true"], image="img", container=options).validate()


@pytest.mark.parametrize("option", FULL.given())
def test_an_engine_refuses_each_container_option_it_does_not_declare_in_one_line(option: str) -> None:
    honoured = tuple(o for o in FULL.given() if o != option)
    spec = JobSpec("c", 1, 0, [PY, "-c", "pass"], image="img", container=FULL)
    with pytest.raises(UsageError) as refused:
        prepare_submit(spec, Support("plain", image="a runtime", container_options=honoured))
    assert refused.value.message == f"{option} is not supported by the plain engine"
    everything = Support("plain", image="a runtime", container_options=tuple(FULL.given()))
    assert prepare_submit(spec, everything).spec.container == FULL
    with pytest.raises(UsageError, match="sets up each rank's container and this job has none"):
        prepare_submit(dataclasses.replace(spec, image=None), everything)


def test_an_api_callers_submitter_is_the_submitting_users_own_ids() -> None:
    spec = JobSpec("c", 1, 0, [PY, "-c", "pass"], image="img", container=ContainerOptions(user="submitter"))
    everything = Support("plain", image="a runtime", container_options=tuple(FULL.given()))
    assert prepare_submit(spec, everything).spec.container.user == f"{os.getuid()}:{os.getgid()}"


def test_slurm_refuses_the_container_options_in_one_line() -> None:
    """Slurm runs no container runtime for a job (docs/runtime.md, "Containers")."""
    from ringleader.engines.slurm.engine import SlurmEngine

    spec = JobSpec("c", 1, 0, [PY, "-c", "pass"], container=ContainerOptions(shm_size=1 << 20))
    with pytest.raises(UsageError, match=r"^--shm-size is not supported by the slurm engine$"):
        prepare_submit(spec, SlurmEngine.supports)


def test_the_line_read_at_submit_is_kept_with_the_job_for_its_launcher(rt: Runtime) -> None:
    rt.submit(JobSpec("kept", 2, 1, shlex.split(LINES["horovodrun"])))
    stored = rt.get("kept").spec  # as the agent reads it back from the state
    assert stored.line is not None and stored.line.mpirun and list(stored.line.argv) == stored.command
    assert stored.line.kept == line_module.read_line(stored.command).kept  # horovodrun's line as mpirun's
    assert JobSpec.from_dict(json.loads(json.dumps(stored.to_dict()))) == stored


def test_the_queue_and_start_options_are_kept_through_the_store() -> None:
    spec = JobSpec("q", 2, 1, ["true"], priority=3, model="vgg16", time_limit_s=600.0, start="best", run_time_s=300.0,
                   max_wait_s=60.0, preempt=True, preemptible=False, queue="team-a").validate()  # fmt: skip
    kept = JobSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert kept == spec and kept.request().queue == "team-a" and not kept.request().preemptible

