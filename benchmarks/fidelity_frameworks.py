"""The fidelity table's rows grouped by framework: the shipped constants, then the overlap, host
and jitter fitted on that framework's rows alone (as `ringleader calibrate` fits a user's
throughput CSV), with the median |error| of each.

    python benchmarks/fidelity_frameworks.py

Prints one markdown row per group (docs/model.md, "Overlap per framework"). About a minute on
2 cores: each group is a coordinate-descent fit over its rows.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from ringleader.model.fidelity import FidelityRow, fidelity_rows, fidelity_table, fit_scaling

GROUPS: dict[str, Callable[[FidelityRow], bool]] = {
    "PyTorch DDP, DLPerf ResNet-50 FP32 and AMP": lambda r: r.framework.startswith("PyTorch 1.5")
    and r.model == "resnet50",
    "OneFlow, DLPerf (ResNet-50, BERT, FP16)": lambda r: r.framework.startswith("OneFlow"),
    "Horovod, 512 GPUs": lambda r: r.nodes == 128,
    "TensorFlow 1.15 + Horovod, DLPerf": lambda r: r.framework.startswith("TensorFlow 1.15"),
}


def main() -> None:
    print(r"| rows | n | shipped median \|error\| | fitted overlap / host / jitter | fitted median \|error\| |")
    print("|---|---|---|---|---|")
    for name, chosen in GROUPS.items():
        rows = [r for r in fidelity_rows() if chosen(r)]
        shipped = statistics.median(abs(r.error) for r in fidelity_table(rows=rows))
        fitted = fit_scaling(rows, sweeps=2, fabrics=())
        after = statistics.median(abs(r.error) for r in fidelity_table(fitted, rows))
        constants = f"{fitted.overlap:.2f} / {fitted.host_us_per_image:.1f} us / {fitted.node_jitter:.4f}"
        print(f"| {name} | {len(rows)} | {shipped:.1%} | {constants} | {after:.1%} |", flush=True)


if __name__ == "__main__":
    main()
