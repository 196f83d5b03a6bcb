"""CPU time of the model's prices: a dry run's prediction and the queue's estimator, per call.

    python benchmarks/prediction_cost.py --reps 5                          # this checkout
    python benchmarks/prediction_cost.py --reps 5 --src OLD/src --src src  # two source trees, interleaved

Each repetition runs, in a fresh process importing ringleader from the tree, two loops on four
DGX-1V nodes and a 2 x 8-GPU placement, with and without a calibration (links and one compute
rate): ``jobs.prediction.predict_job`` (what `submit --dry-run --model` and `get` show: the job's
pricing resolved, its placement and the other policy's placed and priced) and
``model.predict.placement_images_per_s`` (what the queue's start rules and preemption weigh for
every placement they consider). It prints the process CPU time per call of each loop; with
several --src trees the repetitions alternate between them, so each sees the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

LOOPS = ("predict_job", "estimator")


def one(calls: int) -> dict[str, float]:
    """Both loops in this process: CPU seconds per call of each."""
    from ringleader.jobs.prediction import predict_job
    from ringleader.jobs.spec import JobSpec
    from ringleader.model.calibration import Calibration, ComputeFit, LinkFit
    from ringleader.model.predict import placement_images_per_s
    from ringleader.scheduler import ClusterState, JobRequest, NodeState, Placement, WorkerSlot
    from ringleader.topology import NodeSpec, preset

    state = ClusterState(tuple(NodeState(NodeSpec(f"n{i}", preset("dgx1v"), 100.0)) for i in range(4)))
    placement = Placement("j", (WorkerSlot(0, "n0", tuple(range(8))), WorkerSlot(1, "n1", tuple(range(8)))))
    cal = Calibration(links={"NV1": LinkFit(20.0, 3.0), "NV2": LinkFit(40.0, 3.0), "network": LinkFit(9.0, 30.0)},
                      compute=(ComputeFit("resnet50", "V100", "fp32", 64, 300.0),))  # fmt: skip
    specs = [JobSpec("j", 2, 8, ["python", "train.py"], model="resnet50"),
             JobSpec("j", 2, 8, ["python", "train.py"], model="resnet50", calibration=cal.as_dict())]  # fmt: skip
    request = JobRequest("j", 2, 8, model="resnet50")
    out = {}
    start = time.process_time()
    for _ in range(calls):
        for spec in specs:
            predict_job(state, spec, placement)
    out["predict_job"] = (time.process_time() - start) / (2 * calls)
    start = time.process_time()
    for _ in range(calls):
        placement_images_per_s(state.by_name, placement, request)
        placement_images_per_s(state.by_name, placement, request, cal)
    out["estimator"] = (time.process_time() - start) / (2 * calls)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--calls", type=int, default=500, help="calls of each loop per repetition")
    parser.add_argument("--src", action="append", help="a source tree to import ringleader from (repeatable)")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.calls)))
        return 0
    trees = args.src or [str(Path(__file__).resolve().parent.parent / "src")]
    runs: dict[str, list[dict[str, float]]] = {tree: [] for tree in trees}
    for _ in range(args.reps):
        for tree in trees:
            env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
            line = subprocess.run([sys.executable, __file__, "--one", "--calls", str(args.calls)], env=env,
                                  check=True, capture_output=True, text=True).stdout  # fmt: skip
            runs[tree].append(json.loads(line))
    print(f"CPU ms per call, medians of {args.reps} processes of {args.calls} x 2 calls each")
    print(f"{'source':<40}" + "".join(f"{loop:>14}" for loop in LOOPS))
    for tree, results in runs.items():
        print(f"{tree:<40}" + "".join(f"{1e3 * statistics.median(r[loop] for r in results):14.3f}" for loop in LOOPS))
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
