"""Moves on ssh hosts: a gang that had to start spread over both nodes (another job held most of
each node's GPUs) is moved to one node at its checkpoint once a node frees, resumes from its
checkpoint there, and ends with the weights an uninterrupted run computes; the same job that
does not resume (--non-preemptible) stays spread. Both runs' times are printed (they are
measurements, not asserted: BENCHMARKS.md keeps them)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ringleader.engines.embedded.engine import Runtime

pytestmark = pytest.mark.slow

STEPS = 300
# Deterministic data-parallel training on CPU over gloo, as the fencing test's: each step's batch
# comes from the step and the rank alone, gradients are averaged, rank 0 saves (step, weights,
# optimizer) every 10 steps. Each step also allreduces 5 MB (a bigger model's gradients), so the
# placement's links set the step time: spread, it crosses the emulated network. `--reference`
# computes the same steps in one process, for the weights of an uninterrupted run.
TRAIN = f"""
import os, sys, time
import torch
torch.set_num_threads(1)
folder, steps = sys.argv[1], {STEPS}
snapshot = os.path.join(folder, "snapshot.pt")

def batch(step, rank):
    gen = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen)

def grads(model, step, rank):
    model.zero_grad(set_to_none=True)
    x, y = batch(step, rank)
    torch.nn.functional.mse_loss(model(x), y).backward()
    return [p.grad.clone() for p in model.parameters()]

torch.manual_seed(0)
model = torch.nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
if sys.argv[2:] == ["--reference"]:
    for step in range(steps):
        for p, a, b in zip(model.parameters(), grads(model, step, 0), grads(model, step, 1)):
            p.grad = (a + b) / 2
        opt.step()
    torch.save(model.state_dict(), os.path.join(folder, "reference.pt"))
    raise SystemExit(0)

import torch.distributed as dist
run, rank = os.environ["RINGLEADER_RESTARTS"], int(os.environ["RANK"])
first = 0
if os.path.exists(snapshot):
    saved = torch.load(snapshot)
    model.load_state_dict(saved["model"])
    opt.load_state_dict(saved["opt"])
    first = saved["step"]
with open(os.path.join(folder, f"start-{{run}}-{{rank}}"), "w") as fh:
    fh.write(f"{{first}} {{os.environ['RINGLEADER_NODE']}}")
dist.init_process_group("gloo")
traffic = torch.zeros(1_250_000)
for step in range(first, steps):
    for p, g in zip(model.parameters(), grads(model, step, rank)):
        dist.all_reduce(g)
        p.grad = g / dist.get_world_size()
    dist.all_reduce(traffic)
    opt.step()
    if rank == 0 and (step + 1) % 10 == 0:
        torch.save({{"step": step + 1, "model": model.state_dict(), "opt": opt.state_dict()}}, snapshot + ".tmp" + run)
        os.replace(snapshot + ".tmp" + run, snapshot)
    with open(os.path.join(folder, f"progress-{{run}}-{{rank}}"), "w") as fh:
        fh.write(str(step + 1))
if rank == 0:
    torch.save(model.state_dict(), os.path.join(folder, "final.pt"))
"""


def workers_on(hosts: Runtime, name: str) -> set[str]:
    return {i.node for i in hosts.get(name).instances if i.role == "worker"}


def spread_then_free(hosts: Runtime, h: Any, folder: Path, resumes: bool) -> tuple[Any, str, float]:
    """Three GPUs of each node held, the job (2 workers, VGG16 as the queue prices it, ten minutes
    of work as its user guesses) starts spread 1 + 1; once it trained 20 steps the holder of one
    node ends. The job's end, the node that freed and seconds from submit to end."""
    folder.mkdir()
    program = folder / "train.py"
    program.write_text(TRAIN)
    for name in ("hold-a", "hold-b"):
        hosts.submit(h.job(name, ["sleep", "600"], workers=3, gpus=1, topology_aware=True))
        h.wait_for(lambda name=name: hosts.get(name).status.value == "RUNNING", 60, f"{name} running")
    submitted = time.monotonic()
    hosts.submit(h.job("trained", ["python3", str(program), str(folder)], workers=2, gpus=1, topology_aware=True,
                       model="vgg16", run_time_s=600.0, preemptible=resumes))  # fmt: skip
    progress = [folder / f"progress-0-{rank}" for rank in range(2)]
    h.wait_for(lambda: all(p.exists() and int(p.read_text() or 0) >= 20 for p in progress), 180, "20 steps trained")
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
    (tmp_path / "train.py").write_text(TRAIN)
    subprocess.run([sys.executable, str(tmp_path / "train.py"), str(tmp_path), "--reference"], check=True, timeout=300)
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
    for rank in range(2):  # resumed from its last checkpoint, on the node that freed
        resumed, node = (tmp_path / "moves" / f"start-1-{rank}").read_text().split()
        assert int(resumed) >= 20 - 10 and int(resumed) % 10 == 0 and node == freed
    assert same_weights(torch, tmp_path / "moves", reference)
    moved_at = next(e.at for e in moved.events if e.kind == "Moved")
    resumed_at = min((tmp_path / "moves" / f"start-1-{rank}").stat().st_mtime for rank in range(2))
    ended = (tmp_path / "moves" / "final.pt").stat().st_mtime
    first = [(tmp_path / d / "start-0-0").stat().st_mtime for d in ("stays", "moves")]
    print(f"submit to end: stays spread {stay_s:.1f} s (ranks {first[0]:.1f} -> end "
          f"{(tmp_path / 'stays' / 'final.pt').stat().st_mtime:.1f}), moved {move_s:.1f} s (ranks {first[1]:.1f}, "
          f"moved at {moved_at:.1f}, resumed at {resumed_at:.1f}, ended {ended:.1f}; {said})")  # fmt: skip
