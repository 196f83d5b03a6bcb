"""The model judged on rows it never saw: leave-one-source-out cross-validation over the
published fidelity table (``ringleader.model.fidelity.leave_one_source_out``), per source, GPU,
model family, precision and fabric, the shipped constants' (in-sample) error beside it, and
the held-out error of each row priced with the model's own 1-GPU rate instead of its source's
(what a user without a calibration gets; reference.toml [intervals] are its percentiles).

    python benchmarks/fidelity_held_out.py [--sweeps 2]

Prints the markdown tables of docs/model.md ("Held out: leave one source out"). About two
minutes on 2 cores: one coordinate-descent fit per source.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

from ringleader.model.fidelity import HeldOut, leave_one_source_out, model_family, short_source

GROUPINGS: dict[str, Callable[[HeldOut], str]] = {
    "source": lambda h: short_source(h.shipped.row.source),
    "GPU": lambda h: h.shipped.row.gpu,
    "model family": lambda h: model_family(h.shipped.row.model),
    "precision": lambda h: h.shipped.row.precision,
    "fabric": lambda h: h.shipped.row.fabric,
    "nodes": lambda h: "one node" if h.shipped.row.nodes == 1 else "several nodes",
}


def line(name: str, part: list[HeldOut]) -> str:
    shipped = statistics.median(abs(h.shipped.error) for h in part)
    held = sorted(abs(h.held_out.error) for h in part)
    signed = statistics.median(h.held_out.error for h in part)
    p90 = held[min(len(held) - 1, int(0.9 * len(held)))]
    uncalibrated = statistics.median(abs(h.uncalibrated.error) for h in part)
    return (f"| {name} | {len(part)} | {shipped:.1%} | {statistics.median(held):.1%} | {signed:+.1%} | "
            f"{p90:.1%} | {uncalibrated:.1%} |")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweeps", type=int, default=2)
    results = leave_one_source_out(sweeps=ap.parse_args().sweeps)
    header = ("| {} | rows | shipped median \\|error\\| | held-out median \\|error\\| | held-out median error "
              "| held-out p90 \\|error\\| | held out, model's 1-GPU rate: median \\|error\\| |")  # fmt: skip
    print(header.format("all rows"))
    print("|---|---:|---:|---:|---:|---:|---:|")
    print(line("all", results))
    for grouping, key in GROUPINGS.items():
        print()
        print(header.format(grouping))
        print("|---|---:|---:|---:|---:|---:|---:|")
        groups: dict[str, list[HeldOut]] = {}
        for h in results:
            groups.setdefault(key(h), []).append(h)
        for name, part in sorted(groups.items()):
            print(line(name, part))


if __name__ == "__main__":
    main()
