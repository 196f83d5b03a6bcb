"""One rank of a bench: ``python -m ringleader.bench.worker KIND CONFIG_JSON``.

The CLI runs the same functions in-process when it is itself a rank (inside mpirun, under
ringleader's runtime or any launcher that sets RANK/WORLD_SIZE) or a single process. Only
rank 0 prints.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from ringleader.bench import report
from ringleader.bench.allreduce import AllreduceConfig, measure, rank_devices
from ringleader.bench.comm import init
from ringleader.bench.machine import load_text, machine_load
from ringleader.bench.ranks import discover
from ringleader.bench.train import TrainConfig, run
from ringleader.errors import RingleaderError


def _emit(text: str, status: Any = None) -> None:
    if status is not None:
        status.clear()
    print(text, flush=True)


def run_allreduce(cfg: AllreduceConfig) -> int:
    """Run the sweep as this rank; the exit code is 1 when any value was out of bounds."""
    cfg.validate()
    comm = init(cfg.backend, discover())
    try:
        lead = comm.rank == 0
        table = lead and cfg.output == "table"
        devices = rank_devices(comm)  # collective: every rank takes part
        load = machine_load()
        if table:
            for line in report.allreduce_header(cfg, comm.backend, comm.world_size, devices, load_text(load)):
                _emit(line)
        status = report.Status() if lead and cfg.progress else None
        on_row = (lambda row: _emit(report.allreduce_row(row), status)) if table else None
        result = measure(cfg, comm, on_row, status.show if status else None)
        if status:
            status.clear()
        if table:
            for line in report.allreduce_footer(result):
                _emit(line)
        elif lead:
            _emit(json.dumps({**result, "devices": devices, "load": load}, indent=2))
    finally:
        comm.close()
    return 1 if result["out_of_bounds"] else 0


def run_train(cfg_dict: dict[str, Any]) -> int:
    cfg = TrainConfig(**cfg_dict)
    run(cfg)
    return 0


def run_kind(kind: str, cfg: dict[str, Any]) -> int:
    if kind == "allreduce":
        return run_allreduce(AllreduceConfig(**cfg))
    if kind == "train":
        return run_train(cfg)
    raise SystemExit(f"unknown bench kind {kind!r}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m ringleader.bench.worker allreduce|train CONFIG_JSON", file=sys.stderr)
        return 2
    try:
        return run_kind(args[0], json.loads(args[1]))
    except RingleaderError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
