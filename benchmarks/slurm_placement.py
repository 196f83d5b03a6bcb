"""On a real Slurm (a sandbox on this host, root only): the GPUs Slurm picks by itself vs the ones
ringleader places and Slurm then grants, with predicted images/s of each; and the time from
submit to all ranks running, ringleader vs plain sbatch.

The cluster is examples/seeds-cluster.yaml: 2 x 8 V100 hybrid cube mesh (DGX-1V), declared to
Slurm with one GRES type per GPU and gres.conf Links= (so Slurm's own choice sees the NVLinks).
Slurm's own pick is a plain `sbatch --gpus=N` (N ranks of one GPU, as a user asks for GPUs);
ringleader's is `place()` (topology policy, N workers x 1 GPU) submitted through the engine, and
the GPUs Slurm then handed out are read back from `scontrol -d show job`.

    sudo python benchmarks/slurm_placement.py [--rounds 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ringleader.engines.slurm import SlurmEngine, slurmcli
from ringleader.engines.slurm.sandbox import Sandbox, missing
from ringleader.jobs.spec import JobSpec
from ringleader.model import predict_placement
from ringleader.scheduler import JobRequest, Placement, WorkerSlot, place
from ringleader.topology import load_cluster_file

REPO = Path(__file__).resolve().parents[1]
CLUSTER = REPO / "examples" / "seeds-cluster.yaml"
MODELS = (("vgg16", 64), ("resnet50", 64))
# (blocked GPUs before the request: node -> how many, taken first-fit by a plain sbatch job), GPUs asked
SCENARIOS: list[tuple[dict[str, int], int]] = [
    ({}, 2), ({}, 4), ({}, 8), ({}, 12),
    ({"cn-shanghai-172": 1}, 2), ({"cn-shanghai-172": 1}, 3), ({"cn-shanghai-172": 1}, 4),
    ({"cn-shanghai-172": 1, "cn-shanghai-173": 2}, 4), ({"cn-shanghai-172": 3, "cn-shanghai-173": 2}, 8),
]  # fmt: skip
STAMP = "import os, sys, time; open(os.path.join(sys.argv[1], os.environ['SLURM_PROCID']), 'w').write(str(time.time()))"


def sleeper(root: Path) -> Path:
    script = root / "sleep.py"
    script.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(600)\n")
    script.chmod(0o755)
    return script


def sbatch(*options: str) -> str:
    out = subprocess.run(["sbatch", "--parsable", "--output=/dev/null", *options], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(out.stderr)
    return out.stdout.strip().split(";")[0]


def granted(ident: str, timeout: float = 30) -> dict[str, list[int]]:
    """node -> GPU ids Slurm handed to job ``ident`` (all components), once it runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        recs = slurmcli.show("job", ident)
        if recs and all(r.get("JobState") == "RUNNING" for r in recs):
            out: dict[str, list[int]] = {}
            for rec in recs:
                for nodes, gpus in slurmcli.job_node_gres(rec["_line"]):
                    for node in slurmcli.hostnames(nodes):
                        out.setdefault(node, []).extend(gpus)
            return {k: sorted(v) for k, v in out.items()}
        time.sleep(0.1)
    raise RuntimeError(f"job {ident} did not start")


def cancel(*idents: str) -> None:
    if not idents:
        return
    subprocess.run(["scancel", *idents], check=False)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if not any(r.get("JobState") in ("RUNNING", "COMPLETING") for i in idents for r in slurmcli.show("job", i)):
            return
        time.sleep(0.1)


def as_placement(job: str, gpus: dict[str, list[int]]) -> Placement:
    slots = [(node, g) for node, ids in gpus.items() for g in ids]
    return Placement(job, tuple(WorkerSlot(i, node, (g,)) for i, (node, g) in enumerate(slots)))


def describe(gpus: dict[str, list[int]]) -> str:
    return " + ".join(f"{n.removeprefix('cn-shanghai-')}[{','.join(map(str, g))}]" for n, g in gpus.items())


def picks(engine: SlurmEngine, script: Path) -> list[dict[str, Any]]:
    rows = []
    for k, (blocked, n) in enumerate(SCENARIOS):
        blockers = [sbatch(f"--nodelist={node}", f"--gres=gpu:{count}", str(script)) for node, count in blocked.items()]
        busy: dict[str, list[int]] = {}
        for ident in blockers:
            for node, ids in granted(ident).items():
                busy[node] = sorted(busy.get(node, []) + ids)
        state = engine.nodes()
        slurm_job = sbatch(f"--gpus={n}", f"--ntasks={n}", str(script))
        slurm_gpus = granted(slurm_job)
        cancel(slurm_job)
        name = f"pick-{k}"
        decision = place(state, JobRequest(name, n, 1, topology_aware=True))
        assert decision.placement is not None
        engine.submit(JobSpec(name, n, 1, [sys.executable, "-c", "import time; time.sleep(600)"], topology_aware=True))
        ident = engine.records.load(name)["slurm_id"]  # type: ignore[index]
        rl_gpus = granted(ident)
        placed = {node: sorted(decision.placement.gpus_on(node)) for node in decision.placement.nodes}
        row: dict[str, Any] = {
            "busy": describe(busy) or "-", "gpus": n,
            "slurm": describe(slurm_gpus), "ringleader": describe(rl_gpus), "granted_as_placed": rl_gpus == placed,
        }  # fmt: skip
        for model, batch in MODELS:
            # gres.conf Links= carry no GPU model: the cluster file's V100 is named here.
            own = predict_placement(state.by_name, as_placement("s", slurm_gpus), model, batch, gpu_type="V100")
            ours = predict_placement(state.by_name, decision.placement, model, batch, gpu_type="V100")
            row[model] = {"slurm": round(own.images_per_s), "ringleader": round(ours.images_per_s),
                          "ratio": round(ours.images_per_s / own.images_per_s, 2)}  # fmt: skip
        engine.delete([name])
        cancel(*blockers)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def wait_files(folder: Path, n: int, timeout: float = 120) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(list(folder.iterdir())) >= n:
            return time.monotonic()
        time.sleep(0.02)
    raise RuntimeError(f"{folder}: ranks did not all start")


def start_times(engine: SlurmEngine, root: Path, rounds: int) -> list[dict[str, Any]]:
    """Submit to all N ranks running (each rank writes a file when it starts)."""
    batch = root / "plain.py"
    srun = ["srun", sys.executable, "-c", STAMP]
    body = f"import subprocess, sys\nsys.exit(subprocess.call({srun!r} + sys.argv[1:]))\n"
    batch.write_text(f"#!{sys.executable}\n{body}")
    batch.chmod(0o755)
    rows = []
    for n in (4, 12):
        plain, ours, calls = [], [], []
        for r in range(rounds):
            for kind in ("plain", "ringleader"):
                out = Path(tempfile.mkdtemp(dir=root))
                t0 = time.monotonic()
                if kind == "plain":
                    ident = sbatch(f"--ntasks={n}", "--gpus-per-task=1", str(batch), str(out))
                    plain.append(wait_files(out, n) - t0)
                    cancel(ident)
                else:
                    name = f"t{n}-{r}"
                    engine.submit(JobSpec(name, n, 1, [sys.executable, "-c", STAMP, str(out)], topology_aware=True))
                    calls.append(time.monotonic() - t0)  # ringleader's own part: snapshot, place, sbatch, first look
                    ours.append(wait_files(out, n) - t0)
                    engine.wait(name, timeout=60)
                    engine.delete([name])
        p50, o50 = statistics.median(plain), statistics.median(ours)
        row = {"ranks": n, "plain_s": round(p50, 3), "ringleader_s": round(o50, 3), "ratio": round(o50 / p50, 2),
               "submit_call_s": round(statistics.median(calls), 3),
               "plain_all": [round(x, 3) for x in plain], "ringleader_all": [round(x, 3) for x in ours]}  # fmt: skip
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    why = missing()
    if why:
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="rl-slurm-bench-"))
    topologies = {spec.name: spec.topology for spec in load_cluster_file(CLUSTER)}
    load_before = os.getloadavg()
    with Sandbox.start(root, topologies) as box:
        os.environ["SLURM_CONF"] = str(box.conf)
        engine = SlurmEngine(root / "home")
        assert engine.nodes().node("cn-shanghai-172").spec.topology.link(0, 3).nvlinks == 2  # Links= read back
        result = {"picks": picks(engine, sleeper(root)), "start": start_times(engine, root, args.rounds)}
    result["load_average"] = [load_before, os.getloadavg()]
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
