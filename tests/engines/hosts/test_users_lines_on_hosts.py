"""Users' command lines on real ssh hosts (an emulated two-node cluster): -x values, a
horovodrun line and a torchrun line reach every rank on every host as they would by hand."""

from __future__ import annotations

import json
import shlex

import pytest

from ringleader.engines.embedded.engine import Runtime
from ringleader.jobs.states import JobStatus

pytestmark = pytest.mark.slow

NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "FOO",
         "HOROVOD_FUSION_THRESHOLD", "RINGLEADER_NODE")  # fmt: skip
SHOW = (
    "import json, os, socket, sys; "
    f"print(json.dumps({{'argv': sys.argv[1:], 'host': socket.gethostname(), "
    f"**{{n: os.environ.get(n) for n in {NAMES!r}}}}}), flush=True)"
)


def ranks(rt: Runtime, job: str, workers: int) -> list[dict[str, object]]:
    return [json.loads(rt.logs(job, f"worker-{i}").strip().splitlines()[-1]) for i in range(workers)]


def test_x_name_reaches_ranks_on_every_host(hosts: Runtime, h, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOO", "from the submitting shell")
    line = f"mpirun -np 8 -H server1:4,server2:4 -x FOO python3 -c {shlex.quote(SHOW)}"
    hosts.submit(h.job("xhosts", shlex.split(line), workers=8))
    assert "mpirun -H server1:4,server2:4 replaced by the placement" in hosts.notes[-1]
    view = hosts.wait("xhosts", timeout=120)
    assert view.status is JobStatus.SUCCEEDED, view.reason
    seen = ranks(hosts, "xhosts", 8)
    assert sorted({r["host"] for r in seen}) == ["node-a", "node-b"]
    assert all(r["FOO"] == "from the submitting shell" for r in seen)


def test_horovodrun_line_runs_across_hosts(hosts: Runtime, h) -> None:
    line = f"horovodrun -np 8 -H server1:4,server2:4 --fusion-threshold-mb 32 python3 -c {shlex.quote(SHOW)} a"
    hosts.submit(h.job("hvdhosts", shlex.split(line), workers=8))
    view = hosts.wait("hvdhosts", timeout=120)
    assert view.status is JobStatus.SUCCEEDED, view.reason
    seen = ranks(hosts, "hvdhosts", 8)
    assert sorted({r["host"] for r in seen}) == ["node-a", "node-b"]
    for r in seen:
        assert r["argv"] == ["a"] and r["OMPI_COMM_WORLD_SIZE"] == "8"
        assert r["OMPI_COMM_WORLD_LOCAL_RANK"] == r["LOCAL_RANK"]  # hvd.local_rank()
        assert r["HOROVOD_FUSION_THRESHOLD"] == str(32 * 1024 * 1024)
    started = next(e.message for e in view.events if e.kind == "Started")
    # horovodrun's -map-by slot gives way to the placement's rank order, and its -bind-to to
    # ringleader's --bind-to none (these hosts are emulated: they share this box's cores); the
    # job says so.
    said = "(mpirun -bind-to none -map-by slot replaced: ranks follow the placement's order, unbound on emulated nodes)"
    assert said in started
    assert "--bind-to none" in started


def test_an_mpirun_stdin_option_gives_way_to_the_ranks_leases(hosts: Runtime, h) -> None:
    # Every rank's stdin carries its lease from the head (docs/hosts.md, Fencing): with the
    # user's --stdin none no rank would get one, and none would start its program.
    line = ["mpirun", "-np", "2", "--stdin", "none", "python3", "-c", "print('leased', flush=True)"]
    hosts.submit(h.job("stdinhosts", line, workers=2))
    view = hosts.wait("stdinhosts", timeout=120)
    assert view.status is JobStatus.SUCCEEDED, view.reason
    assert all(hosts.logs("stdinhosts", f"worker-{i}").strip() == "leased" for i in range(2))
    started = next(e.message for e in view.events if e.kind == "Started")
    assert "(mpirun --stdin none replaced: every rank's stdin carries its lease from the head)" in started
    assert "--stdin all" in started


def test_torchrun_line_runs_once_per_worker_across_hosts(hosts: Runtime, h, tmp_path) -> None:
    script = tmp_path / "show.py"  # the hosts share this box's files, as a cluster's shared home
    script.write_text(SHOW + "\n")
    line = ["torchrun", "--nnodes", "2", "--nproc-per-node", "4", "--rdzv-endpoint", "server1:29400", str(script), "b"]
    hosts.submit(h.job("trhosts", line, workers=8))
    assert "--rdzv-endpoint server1:29400 taken from the placement" in hosts.notes[-1]
    view = hosts.wait("trhosts", timeout=120)
    assert view.status is JobStatus.SUCCEEDED, view.reason
    seen = ranks(hosts, "trhosts", 8)
    assert sorted(r["RANK"] for r in seen) == [str(i) for i in range(8)]  # one process per worker, no copies
    assert all(r["WORLD_SIZE"] == "8" and r["argv"] == ["b"] for r in seen)
    assert sorted({r["host"] for r in seen}) == ["node-a", "node-b"]



def test_an_image_is_resolved_on_each_host_before_its_ranks_start(
    hosts: Runtime, h, train_image, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over ssh, with the job's runtime settings: an image no host can pull fails the job with the
    first host's one-line reason, and no rank starts. (Running the containers needs cgroups, which
    this rig's network-namespace hosts lack: runc finds no cgroup mount there.)"""
    _, conf = train_image
    monkeypatch.setenv("CONTAINERS_CONF", str(conf))
    missing = "localhost/ringleader-no-such-image:2"
    hosts.submit(h.job("himage", ["true"], workers=8, gpus=0, image=missing))
    view = hosts.wait("himage", timeout=120)
    assert view.status is JobStatus.FAILED, view.reason
    assert view.reason.startswith(f"image {missing} could not be pulled on host node-"), view.reason
    assert "\n" not in view.reason and not any(i.pid for i in view.instances)


TORCHRUN_ENV = ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "OMP_NUM_THREADS", "CROSS_RANK",
                "CROSS_SIZE", "LOCAL_SIZE", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS")  # fmt: skip
SHOW_ENV = f"import json, os, socket; print(json.dumps({{'host': socket.gethostname(), **{{n: os.environ.get(n) for n in {TORCHRUN_ENV!r}}}}}), flush=True)"  # noqa: E501


def test_a_plain_programs_ranks_see_torchruns_environment_node_by_node(
    hosts: Runtime, h, monkeypatch: pytest.MonkeyPatch
) -> None:
    """4 workers x 2 GPUs without --gputopology over the two hosts: ranks 0,1 on one host and 2,3
    on the other (as two torchrun agents of --nproc_per_node 2 number them), OMP_NUM_THREADS=1 (the
    job set none), DeepSpeed's CROSS_RANK, and the restart limit the job was given."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    hosts.submit(h.job("envhosts", ["python3", "-c", SHOW_ENV], workers=4, gpus=2, max_restarts=2))
    view = hosts.wait("envhosts", timeout=120)
    assert view.status is JobStatus.SUCCEEDED, view.reason
    seen = sorted(ranks(hosts, "envhosts", 4), key=lambda r: int(str(r["RANK"])))
    assert seen[0]["host"] == seen[1]["host"] != seen[2]["host"] == seen[3]["host"]
    assert [(r["LOCAL_RANK"], r["GROUP_RANK"], r["CROSS_RANK"]) for r in seen] == [
        ("0", "0", "0"), ("1", "0", "0"), ("0", "1", "1"), ("1", "1", "1")]  # fmt: skip
    for r in seen:
        assert (r["LOCAL_WORLD_SIZE"], r["LOCAL_SIZE"], r["CROSS_SIZE"], r["OMP_NUM_THREADS"]) == ("2", "2", "2", "1")
        assert (r["TORCHELASTIC_RESTART_COUNT"], r["TORCHELASTIC_MAX_RESTARTS"]) == ("0", "2")
