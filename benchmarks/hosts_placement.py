"""Placement measured on the emulated cluster, beside the model's predictions (`make demo` runs it).

    python benchmarks/hosts_placement.py extract --out DIR JOB...     (bench jobs' JSON -> files)
    python benchmarks/hosts_placement.py report --default JOB --topology JOB --calibration FILE

``extract`` writes each finished job's result (rank 0's JSON in its log) to DIR/JOB.json for
`ringleader calibrate`. ``report`` reads the two runs of examples/jobs/vgg16_exchange.py (same job,
default and --gputopology placement) and prints their measured images/s and ratio beside:
  * the model calibrated on this emulated cluster (links fitted by `calibrate` from `bench
    allreduce` run inside the namespaces; compute: the fixed wait the job spends per step, which
    is the model's own V100 step time), for the placements the jobs actually got, gloo's ring;
  * the model's prediction for the real 2 x 8 V100 cluster (NCCL), and the reference study's
    published measurement.
Must show: measured ratio >= 3 and the calibrated predicted ratio within 25% of it.

    python benchmarks/hosts_placement.py racks --in-rack JOB --across JOB --calibration FILE

``racks`` does the same for one 2-node gang inside a rack and across two racks of the emulated
cluster with a network tree (scripts/racks_demo.sh): the model calibrated on the in-rack link
prices the gang across by its share of the rack uplinks (their oversubscription).
Must show: the calibrated predicted across/in-rack ratio within 25% of the measured one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ringleader.engines.embedded.engine import Runtime
from ringleader.errors import UsageError
from ringleader.jobs.prediction import placement_from_plan
from ringleader.model import load_calibration, predict_placement
from ringleader.reference import reference

GOAL_RATIO = 3.0
GOAL_ERROR = 0.25


def result_of(rt: Runtime, job: str, kind: str | None = None) -> dict[str, Any]:
    """Rank 0's JSON document in the job's log (one line or indented, after any warnings)."""
    text = rt.logs(job, "worker-0")
    decoder = json.JSONDecoder()
    found = None
    for at in [i for i, ch in enumerate(text) if ch == "{" and (i == 0 or text[i - 1] == "\n")]:
        try:
            doc, _ = decoder.raw_decode(text, at)
        except ValueError:
            continue
        if isinstance(doc, dict) and (kind is None or doc.get("kind") == kind):
            found = doc
    if found is None:
        raise UsageError(f"job {job!r} printed no JSON result", f"see `ringleader logs {job} -i worker-0`")
    return found


def extract(rt: Runtime, jobs: list[str], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for job in jobs:
        path = out / f"{job}.json"
        path.write_text(json.dumps(result_of(rt, job)) + "\n")
        print(f"wrote {path}")


def _predicted(rt: Runtime, job: str, batch: int, model: str = "vgg16", **kw: Any) -> float:
    placement = placement_from_plan(job, rt.get(job).placement)
    if placement is None:
        raise UsageError(f"job {job!r} has no placement", "run it first")
    return predict_placement(rt.nodes().by_name, placement, model, batch, **kw).images_per_s


def report(rt: Runtime, default_job: str, topology_job: str, calibration: Path) -> bool:
    runs = {name: result_of(rt, name, "train") for name in (default_job, topology_job)}
    batch = int(runs[default_job]["batch_size"])
    cal = load_calibration(calibration)
    measured = [float(runs[j]["images_per_sec_total"]) for j in (default_job, topology_job)]
    calibrated = [_predicted(rt, j, batch, calibration=cal, backend="gloo") for j in (default_job, topology_job)]
    real = [_predicted(rt, j, batch) for j in (default_job, topology_job)]
    seeds = reference()["seeds"]["vgg16"]
    published = [float(seeds["default"]), float(seeds["topology"])]
    rows = [
        ("MEASURED here (emulated cluster)", measured),
        ("PREDICTED here (model calibrated on it)", calibrated),
        ("PREDICTED on the real 2 x 8 V100 cluster", real),
        ("reference study, measured there", published),
    ]
    print(f"{'':42}{'default':>10}{'topology':>10}{'ratio':>9}")
    for label, (d, t) in rows:
        print(f"{label:42}{d:>10.1f}{t:>10.1f}{t / d:>8.2f}x")
    ratio, predicted_ratio = measured[1] / measured[0], calibrated[1] / calibrated[0]
    error = predicted_ratio / ratio - 1
    steps = "  ".join(f"{j}: step {runs[j]['step_time_s']:.2f} s (allreduce {runs[j]['allreduce_s']:.2f} s)"
                      for j in (default_job, topology_job))  # fmt: skip
    print(f"images/s of the whole job (4 workers x batch {batch}); {steps}")
    ok = ratio >= GOAL_RATIO and abs(error) <= GOAL_ERROR
    verdict = "met" if ok else "NOT met"
    print(f"measured topology/default ratio {ratio:.2f}x (goal >= {GOAL_RATIO:g}x); calibrated prediction "
          f"{predicted_ratio:.2f}x, {error:+.0%} off (goal within {GOAL_ERROR:.0%}): {verdict}")  # fmt: skip
    return ok


def report_racks(rt: Runtime, in_rack: str, across: str, calibration: Path) -> bool:
    runs = {name: result_of(rt, name, "train") for name in (in_rack, across)}
    batch, model = int(runs[in_rack]["batch_size"]), str(runs[in_rack]["model"])
    cal = load_calibration(calibration)
    measured = [float(runs[j]["images_per_sec_total"]) for j in (in_rack, across)]
    calibrated = [_predicted(rt, j, batch, model, calibration=cal, backend="gloo") for j in (in_rack, across)]
    real = [_predicted(rt, j, batch, model) for j in (in_rack, across)]
    head = f"{model}, 2 workers x batch {batch}"
    print(f"{head:42}{'in rack':>10}{'across':>10}{'ratio':>9}")
    for label, (a, b) in [("MEASURED here (emulated racks)", measured),
                          ("PREDICTED here (model calibrated on it)", calibrated),
                          ("PREDICTED on real 25 Gb/s racks, 4:1", real)]:  # fmt: skip
        print(f"{label:42}{a:>10.1f}{b:>10.1f}{b / a:>8.2f}x")
    for job in (in_rack, across):
        placement = placement_from_plan(job, rt.get(job).placement)
        nodes = placement.nodes if placement is not None else ()
        r = runs[job]
        print(f"{job}: on {', '.join(nodes)}; step {r['step_time_s']:.2f} s (allreduce {r['allreduce_s']:.2f} s)")
    ratio, predicted_ratio = measured[1] / measured[0], calibrated[1] / calibrated[0]
    error = predicted_ratio / ratio - 1
    ok = abs(error) <= GOAL_ERROR
    print(f"measured across/in-rack ratio {ratio:.2f}x; calibrated prediction {predicted_ratio:.2f}x, "
          f"{error:+.0%} off (goal within {GOAL_ERROR:.0%}): {'met' if ok else 'NOT met'}")  # fmt: skip
    return ok


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("extract", help="write finished jobs' JSON results to files")
    ex.add_argument("--out", type=Path, required=True)
    ex.add_argument("jobs", nargs="+")
    rep = sub.add_parser("report", help="measured vs predicted images/s of both placements")
    rep.add_argument("--default", dest="default_job", required=True)
    rep.add_argument("--topology", dest="topology_job", required=True)
    rep.add_argument("--calibration", type=Path, required=True)
    racks = sub.add_parser("racks", help="measured vs predicted images/s inside a rack and across racks")
    racks.add_argument("--in-rack", dest="in_rack", required=True)
    racks.add_argument("--across", required=True)
    racks.add_argument("--calibration", type=Path, required=True)
    a = p.parse_args(argv)
    try:
        with Runtime.open(readonly=True) as rt:
            if a.cmd == "extract":
                extract(rt, a.jobs, a.out)
                return 0
            if a.cmd == "racks":
                return 0 if report_racks(rt, a.in_rack, a.across, a.calibration) else 1
            return 0 if report(rt, a.default_job, a.topology_job, a.calibration) else 1
    except UsageError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
