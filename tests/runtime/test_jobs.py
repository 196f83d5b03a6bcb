"""Real jobs: mpirun with 2 ranks, torch.distributed over gloo, failures, the queue."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from ringleader.engines.embedded.engine import Runtime
from ringleader.jobs.states import JobStatus
from ringleader.runtime.procs import alive


def allocated(rt: Runtime) -> list[tuple[str, int, str]]:
    return [(ns.name, g, job) for ns in rt.nodes().nodes for g, job in ns.allocated]


@pytest.mark.slow
def test_mpirun_two_ranks_land_on_their_slots(seeds: Runtime, h) -> None:
    line = f"mpirun -np 2 -map-by slot -x PATH --mca btl ^openib {h.PY} {h.EXAMPLES}/jobs/mpi_hello.py"
    result = seeds.submit(h.spec("hello", shlex.split(line), workers=2, gpus=2, topology_aware=True))
    slots = result.decision.placement.slots
    view = seeds.wait("hello", 120)
    assert view.status is JobStatus.SUCCEEDED, view.events
    names = [i.name for i in view.instances]
    assert names == ["hello-launcher", "hello-worker-0", "hello-worker-1"]
    assert [i.is_chief for i in view.instances] == [True, False, False]
    assert all(i.exit_code == 0 for i in view.instances)
    assert "allreduce sum of ranks: 1" in seeds.logs("hello")  # the launcher's log has every rank
    node_gpus = ",".join(str(g) for s in slots for g in s.gpus)
    for rank, slot in enumerate(slots):
        text = seeds.logs("hello", f"worker-{rank}")
        assert f"rank {rank}/2 node={slot.node} local_rank={rank}" in text
        # Emulated node: no real GPU handed out, virtual ids as placed.
        assert f"gpus={node_gpus!r} virtual={node_gpus!r}" in text
    assert allocated(seeds) == []


@pytest.mark.slow
def test_torch_gloo_job_sees_torchrun_variables_and_its_gpus(rt: Runtime, h) -> None:
    rt.apply_cluster(h.EXAMPLES / "local-gpus.yaml")  # node `local` is real: real GPU ids
    result = rt.submit(h.spec("gloo", [h.PY, str(h.EXAMPLES / "jobs" / "torch_gloo.py")], workers=2))
    view = rt.wait("gloo", 180)
    assert view.status is JobStatus.SUCCEEDED, [e.message for e in view.events]
    slots = result.decision.placement.slots
    assert {s.node for s in slots} == {"local"}
    placed = ",".join(str(s.gpus[0]) for s in slots)
    for rank in range(2):
        seen = json.loads(rt.logs("gloo", f"worker-{rank}").strip().splitlines()[-1])
        assert seen["rank"] == rank and seen["world_size"] == 2 and seen["local_rank"] == rank
        assert seen["cuda_visible_devices"] == placed and seen["virtual_gpus"] == ""
        assert seen["allreduce_sum"] == 1.0


def test_crashing_worker_fails_the_job_and_stops_its_siblings(small: Runtime, h) -> None:
    code = "import os, sys, time\nif os.environ['RANK'] == '1':\n    time.sleep(0.5); sys.exit(3)\ntime.sleep(120)"
    small.submit(h.spec("crash", h.py(code), workers=3))
    view = small.wait("crash", 90)
    assert view.status is JobStatus.FAILED
    assert view.reason is not None and "crash-worker-1" in view.reason and "exit code 3" in view.reason
    by_name = {i.name: i for i in view.instances}
    assert by_name["crash-worker-1"].status == "Failed" and by_name["crash-worker-1"].exit_code == 3
    for sibling in ("crash-worker-0", "crash-worker-2"):
        assert by_name[sibling].status == "Stopped"
        assert by_name[sibling].exit_code == 143  # SIGTERM: 128 + 15, as Kubernetes and arena show it
        assert not alive(by_name[sibling].pid, None)
    exits = [e.message for e in view.events if e.kind == "InstanceExited" and "worker-0" in e.message]
    assert exits and "(exit code 143, SIGTERM)" in exits[0]
    started = next(e.message for e in view.events if e.kind == "Started")
    assert "import os, sys, time" in started and "'" in started  # shell-quoted (shlex.join)
    assert allocated(small) == []


def test_pending_job_starts_when_the_running_one_ends(small: Runtime, h) -> None:
    small.submit(h.spec("first", h.py("import time; time.sleep(1.5)"), gpus=4))
    second = small.submit(h.spec("second", h.py("pass"), gpus=4))
    assert second.job is not None and second.job.status is JobStatus.PENDING
    assert "needs 1 worker(s) x 4 GPU(s)" in (second.job.reason or "")
    assert "most free on any such node: 0;" in (second.job.reason or "")  # no node named for 0 GPUs
    done = small.wait("second", 90)  # nobody acts: the first job's supervisor starts it
    first = small.get("first")
    assert done.status is JobStatus.SUCCEEDED and first.status is JobStatus.SUCCEEDED
    assert done.started_at is not None and first.ended_at is not None and done.started_at >= first.ended_at
    kinds = [e.kind for e in done.events]
    assert kinds.index("Pending") < kinds.index("Scheduled") < kinds.index("Succeeded")


def test_higher_priority_goes_first(small: Runtime, h) -> None:
    small.submit(h.spec("blocker", h.py("import time; time.sleep(1.5)"), gpus=4))
    small.submit(h.spec("low", h.py("pass"), gpus=4))
    small.submit(h.spec("high", h.py("pass"), gpus=4, priority=5))
    low, high = small.wait("low", 90), small.wait("high", 90)
    assert high.started_at is not None and low.started_at is not None and high.started_at <= low.started_at


def test_delete_stops_processes_frees_gpus_and_removes_logs(small: Runtime, h) -> None:
    small.submit(h.spec("sleepy", h.py("import time; print('up', flush=True); time.sleep(120)"), workers=2))
    h.wait_for(lambda: "up" in small.logs("sleepy"), what="the job to print")
    pids = [i.pid for i in small.get("sleepy").instances]
    small.delete(["sleepy"])
    assert allocated(small) == [] and small.list_jobs() == []
    assert not any(alive(pid, None) for pid in pids)
    assert not (small.home / "logs" / "sleepy").exists()


def test_prune_deletes_only_old_finished_jobs(small: Runtime, h) -> None:
    small.submit(h.spec("done", h.py("pass"), gpus=0))
    small.wait("done", 60)
    assert small.prune(3600) == []
    assert small.prune(0) == ["done"]
    assert small.list_jobs() == []


def test_plain_program_env_and_log_paths(small: Runtime, h) -> None:
    code = "import os; print(os.environ['MYVAR'], os.environ['WORLD_SIZE'], os.environ['MASTER_PORT'].isdigit())"
    small.submit(h.spec("envy", h.py(code), workers=2, gpus=1, env={"MYVAR": "hello world"}))
    small.wait("envy", 60)
    log = Path(small.home) / "logs" / "envy" / "envy-worker-1.log"
    assert log.exists()
    assert small.logs("envy", "envy-worker-1").strip() == "hello world 2 True"
    stamped = small.logs("envy", "worker-1", timestamps=True)
    assert stamped.startswith("20") and stamped.rstrip().endswith("hello world 2 True")


@pytest.mark.slow
def test_failing_mpi_rank_is_the_root_cause(small: Runtime, h, tmp_path: Path) -> None:
    script = tmp_path / "crash.py"
    script.write_text(
        "import os, time\nfrom mpi4py import MPI\n"
        "if MPI.COMM_WORLD.Get_rank() == 1:\n    time.sleep(0.5)\n    os._exit(3)\ntime.sleep(120)\n"
    )
    small.submit(h.spec("mpicrash", ["mpirun", "-np", "2", h.PY, str(script)], workers=2))
    view = small.wait("mpicrash", 120)
    assert view.status is JobStatus.FAILED
    assert view.reason is not None and "mpicrash-worker-1" in view.reason and "exit code 3" in view.reason
    statuses = {i.name: i.status for i in view.instances}
    assert statuses == {"mpicrash-launcher": "Stopped", "mpicrash-worker-0": "Stopped", "mpicrash-worker-1": "Failed"}
    assert allocated(small) == []


def test_a_job_keeps_its_submit_environment(small: Runtime, h, monkeypatch: pytest.MonkeyPatch) -> None:
    small.submit(h.spec("holder", h.py("import time; time.sleep(1)"), gpus=4))
    monkeypatch.setenv("NCCL_ALGO", "Ring")  # set after the holder's supervisor started
    small.submit(h.spec("later", h.py("import os; print(os.environ.get('NCCL_ALGO'))"), gpus=4))
    assert small.get("later").status is JobStatus.PENDING
    assert small.wait("later", 90).status is JobStatus.SUCCEEDED  # started by the holder's supervisor
    assert small.logs("later").strip() == "Ring"
