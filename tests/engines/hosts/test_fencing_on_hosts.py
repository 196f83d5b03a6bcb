"""Fencing on ssh hosts: a node cut off mid-training (its link to the bridge taken down, so its
ranks go on training with each other) writes nothing after the gang's restart on the other node
starts, and the job ends with the weights an uninterrupted run computes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from ringleader.engines.embedded.engine import Runtime
from ringleader.engines.embedded.hosts.netns import Names
from ringleader.jobs.states import JobStatus

pytestmark = pytest.mark.slow

STEPS = 300
# Deterministic data-parallel training on CPU over gloo: each step's batch comes from the step and
# the rank alone, gradients are averaged, rank 0 saves (step, weights, optimizer) every 10 steps
# and the last run saves the final weights. `--reference` computes the same steps in one process
# (a sum of two gradients is the same in any order), for the weights of an uninterrupted run.
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
mine = lambda name: os.path.join(folder, f"{{name}}-{{run}}-{{rank}}")  # this run's own files
first = 0
if os.path.exists(snapshot):
    saved = torch.load(snapshot)
    model.load_state_dict(saved["model"])
    opt.load_state_dict(saved["opt"])
    first = saved["step"]
with open(mine("start"), "w") as fh:
    fh.write(f"{{first}} {{os.environ['RINGLEADER_NODE']}}")
dist.init_process_group("gloo")
for step in range(first, steps):
    for p, g in zip(model.parameters(), grads(model, step, rank)):
        dist.all_reduce(g)
        p.grad = g / dist.get_world_size()
    opt.step()
    if rank == 0 and (step + 1) % 10 == 0:
        torch.save({{"step": step + 1, "model": model.state_dict(), "opt": opt.state_dict()}}, snapshot + ".tmp" + run)
        os.replace(snapshot + ".tmp" + run, snapshot)
    with open(mine("progress"), "w") as fh:  # after any save: its time is this rank's last write
        fh.write(str(step + 1))
    time.sleep(0.1)
if rank == 0:
    torch.save(model.state_dict(), os.path.join(folder, "final.pt"))
"""


def test_a_node_cut_off_mid_training_writes_nothing_once_its_gang_restarts_elsewhere(
    hosts: Runtime, h, hosts_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("RINGLEADER_GRACE_S", "2")
    program = tmp_path / "train.py"
    program.write_text(TRAIN)
    hosts.submit(h.job("fenced", ["python3", str(program), str(tmp_path)], workers=2, gpus=1, topology_aware=True,
                       max_restarts=1))  # fmt: skip
    progress = [tmp_path / f"progress-0-{rank}" for rank in range(2)]
    h.wait_for(lambda: all(p.exists() and int(p.read_text() or 0) >= 30 for p in progress), 120, "30 steps trained")
    [lost] = {i.node for i in hosts.get("fenced").instances if i.role == "worker"}  # one node holds the gang
    [other] = {ns.name for ns in hosts.nodes().nodes if ns.spec.address is not None} - {lost}
    # The node's cable pulled: its bridge port down. Its ranks still reach each other (their own
    # address is local), so they train on, and write, unless they stop themselves.
    port = Names.for_home(hosts_home).veth(["node-a", "node-b"].index(lost))
    subprocess.run(["ip", "link", "set", port, "down"], check=True, timeout=30)
    cut = time.time()
    try:
        done = hosts.wait("fenced", 300)
    finally:
        subprocess.run(["ip", "link", "set", port, "up"], check=True, timeout=30)
    hosts.uncordon_node(lost)  # the module's later jobs use both nodes
    assert done.status is JobStatus.SUCCEEDED, (done.reason, [(e.kind, e.message) for e in done.events])
    assert {i.node for i in done.instances if i.role == "worker"} == {other}

    # The cut-off ranks' last write (every file of the first run) came before the job was put
    # back in the queue (the new gang may start from then on) and before the new gang started.
    [restarting] = [e.at for e in done.events if e.kind == "Restarting"]
    restarted = [e.at for e in done.events if e.kind == "Started"][-1]
    last_write = max(p.stat().st_mtime for p in tmp_path.iterdir() if "-0-" in p.name or p.name.endswith(".tmp0"))
    print(f"link cut -> last write of the cut-off ranks {last_write - cut:.1f} s -> restart {restarting - cut:.1f} s "
          f"-> new gang {restarted - cut:.1f} s")  # fmt: skip
    assert last_write < restarting <= restarted, f"the cut-off node wrote {last_write - restarting:.1f} s after"
    for rank in range(2):
        resumed, node = (tmp_path / f"start-1-{rank}").read_text().split()
        assert int(resumed) >= 30 and node == other  # resumed from the snapshot, not from scratch
    assert any(e.kind == "Fencing" and lost in e.message for e in done.events), done.events

    subprocess.run([sys.executable, str(program), str(tmp_path), "--reference"], check=True, timeout=300)
    final, reference = torch.load(tmp_path / "final.pt"), torch.load(tmp_path / "reference.pt")
    assert final.keys() == reference.keys()
    assert all(torch.equal(final[k], reference[k]) for k in final), "the restarted run's weights differ"
