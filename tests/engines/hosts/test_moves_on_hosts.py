"""Moves on the emulated reference cluster (examples/seeds-cluster.yaml: 2 x 8 V100, 25 Gb/s,
each node a network namespace with its own sshd): the reference job (4 workers of one GPU) that
had to start spread 2 + 2 (other jobs held six GPUs of each node) is moved to one node at its
checkpoint once a node frees, resumes from its checkpoint there, and ends with the weights an
uninterrupted run computes; the same job that does not resume (--non-preemptible) stays spread.
The engine measures the move's restart (the next move's price) to the program's first line.
Both runs' times are printed (measurements, not asserted: BENCHMARKS.md keeps them)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ringleader.engines.embedded import store
from ringleader.engines.embedded.engine import Runtime
from ringleader.engines.embedded.lifecycle import queue_snapshot
from ringleader.scheduler.move import RESTART_WINDOW

# slow, and minutes on a loaded machine: two runs of the job, each 150 steps spread or not
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

CLUSTER = (Path(__file__).resolve().parents[3] / "examples" / "seeds-cluster.yaml").read_text()
SCALE = 0.01  # its 25 Gb/s links at 250 Mb/s: a spread step waits on them
WORKERS = 4
# Enough that the move comes long before a spread run could end: the node frees at step 20, the
# move came within a second of it (load 20 on 2 cores), and the 130 spread steps left take over
# 30 s. 300 steps gave the run that stays 90 s of spread training that no assertion needs.
STEPS = 150
# The example's deterministic training (examples/jobs/checkpointed_train.py): checkpoints every
# 10 steps, resumes from them, and allreduces 5 MB a step, so a spread step waits on the links.
PROGRAM = Path(__file__).resolve().parents[3] / "examples" / "jobs" / "checkpointed_train.py"


def workers_on(hosts: Runtime, name: str) -> set[str]:
    return {i.node for i in hosts.get(name).instances if i.role == "worker"}


def spread_then_free(hosts: Runtime, h: Any, folder: Path, resumes: bool) -> tuple[Any, str, float]:
    """Six GPUs of each node held, the job (4 workers, VGG16 as the queue prices it, ten minutes
    of work as its user guesses) starts spread 2 + 2; once it trained 20 steps the holder of one
    node ends. The job's end, the node that freed and seconds from submit to end."""
    folder.mkdir()
    for name in ("hold-a", "hold-b"):
        hosts.submit(h.job(name, ["sleep", "600"], workers=6, gpus=1, topology_aware=True))
        h.wait_for(lambda name=name: hosts.get(name).status.value == "RUNNING", 60, f"{name} running")
    submitted = time.monotonic()
    command = ["python3", str(PROGRAM), str(folder), "--steps", str(STEPS)]
    hosts.submit(h.job("trained", command, workers=WORKERS, gpus=1, topology_aware=True, model="vgg16",
                       run_time_s=600.0, preemptible=resumes))  # fmt: skip
    progress = [folder / f"progress-0-{rank}" for rank in range(WORKERS)]
    h.wait_for(lambda: all(p.exists() and int((p.read_text() or "0").split()[0]) >= 20 for p in progress), 180,
               "20 steps trained")  # fmt: skip
    assert len(workers_on(hosts, "trained")) == 2
    [freed] = workers_on(hosts, "hold-a")
    hosts.delete(["hold-a"])
    done = hosts.wait("trained", 600)
    took = time.monotonic() - submitted
    hosts.delete(["hold-b"])
    return done, freed, took


def same_weights(torch: Any, folder: Path, reference: Path) -> bool:
    final, expected = torch.load(folder / "final.pt"), torch.load(reference)
    return final.keys() == expected.keys() and all(torch.equal(final[k], expected[k]) for k in final)


def test_a_spread_gang_moves_to_one_node_at_its_checkpoint_with_the_same_weights(
    hosts: Runtime, h: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("RINGLEADER_GRACE_S", "2")
    subprocess.run([sys.executable, str(PROGRAM), str(tmp_path), "--steps", str(STEPS), "--workers", str(WORKERS),
                    "--reference"], check=True, timeout=300)  # fmt: skip
    reference = tmp_path / "reference.pt"

    stayed, _, stay_s = spread_then_free(hosts, h, tmp_path / "stays", resumes=False)
    assert stayed.status.value == "SUCCEEDED", (stayed.reason, [(e.kind, e.message) for e in stayed.events])
    assert len({i.node for i in stayed.instances if i.role == "worker"}) == 2
    assert not [e for e in stayed.events if e.kind == "Moved"]
    assert same_weights(torch, tmp_path / "stays", reference)
    hosts.delete(["trained"])  # the next run takes its name

    moved, freed, move_s = spread_then_free(hosts, h, tmp_path / "moves", resumes=True)
    assert moved.status.value == "SUCCEEDED", (moved.reason, [(e.kind, e.message) for e in moved.events])
    [said] = [e.message for e in moved.events if e.kind == "Moved"]
    assert said.startswith("moves: finishes sooner by ~") and f"move to node {freed} (" in said
    assert {i.node for i in moved.instances if i.role == "worker"} == {freed} and moved.restarts == 1
    for rank in range(WORKERS):  # resumed from its last checkpoint, on the node that freed
        resumed, node = (tmp_path / "moves" / f"start-1-{rank}").read_text().split()
        assert int(resumed) >= 20 - 10 and int(resumed) % 10 == 0 and node == freed
    assert same_weights(torch, tmp_path / "moves", reference)
    moved_at = next(e.at for e in moved.events if e.kind == "Moved")
    resumed_at = min((tmp_path / "moves" / f"start-1-{rank}").stat().st_mtime for rank in range(WORKERS))
    ended = (tmp_path / "moves" / "final.pt").stat().st_mtime
    # the restart the engine measured, which prices the next move: from its placement (the
    # requeue's instant) to its program's first line, printed once it had imported torch,
    # loaded its checkpoint and written its start file, before its run ended
    requeued_at = next(e.at for e in moved.events if e.kind == "Requeued")
    with hosts.db.read() as conn:
        [restart_s] = store.recent_restarts(conn, RESTART_WINDOW)
    assert resumed_at - requeued_at <= restart_s < ended - requeued_at
    with hosts.db.read() as conn:  # and prices a stop for queue order on this cluster too
        assert queue_snapshot(conn, time.time()).config.reorder.restart_s == restart_s
    first = [(tmp_path / d / "start-0-0").stat().st_mtime for d in ("stays", "moves")]
    print(f"submit to end: stays spread {stay_s:.1f} s (ranks {first[0]:.1f} -> end "
          f"{(tmp_path / 'stays' / 'final.pt').stat().st_mtime:.1f}), moved {move_s:.1f} s (ranks {first[1]:.1f}, "
          f"moved at {moved_at:.1f}, requeued at {requeued_at:.1f}, restart measured {restart_s:.1f} s, "
          f"resumed at {resumed_at:.1f}, ended {ended:.1f}; {said})")  # fmt: skip
