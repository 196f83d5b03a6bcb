"""One rank of the collectives matrix test: every dtype x op x collective on one communicator,
tiny sizes, exact verification; plus the verification function on a corrupted real result.
Rank 0 prints one JSON object."""

from __future__ import annotations

import json
import sys

from ringleader.bench.allreduce import AllreduceConfig, Case, count_wrong, measure
from ringleader.bench.comm import init
from ringleader.bench.ranks import discover


def main() -> None:
    comm = init(sys.argv[1], discover())
    out = {}
    for dtype in ("float", "half", "bfloat16"):
        for collective in ("allreduce", "allgather", "broadcast", "reducescatter"):
            for op in ("sum", "avg") if collective in ("allreduce", "reducescatter") else ("sum",):
                cfg = AllreduceConfig(minbytes=8, maxbytes=4096, factor=8, iters=1, warmup=0,
                                      dtype=dtype, op=op, collective=collective, root=1)  # fmt: skip
                res = measure(cfg, comm)
                out[f"{dtype}/{collective}/{op}"] = [res["out_of_bounds"], len(res["results"])]
    case = Case(AllreduceConfig(dtype="bfloat16"), comm, 1000)
    case.fill()
    result = case.run(inplace=False)
    if comm.rank == comm.world_size - 1:
        result[17] += 2  # a planted wrong value in a real result, on one rank
    out["corrupted"] = [int(comm.sum_scalar(count_wrong(result, case.expected()))), 1]
    comm.close()
    if comm.rank == 0:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
