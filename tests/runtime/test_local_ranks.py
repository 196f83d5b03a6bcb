"""Open MPI's local rank is the placement's on emulated nodes too (Horovod's local_rank() reads
it), although mpirun starts every rank of an emulated node on this one host."""

from __future__ import annotations

import json

import pytest

from ringleader.engines.embedded.engine import Runtime
from ringleader.jobs.states import JobStatus

CODE = (
    "import json, os; print(json.dumps({k: os.environ.get(k) for k in ('RANK', 'LOCAL_RANK', "
    "'OMPI_COMM_WORLD_LOCAL_RANK', 'OMPI_COMM_WORLD_LOCAL_SIZE', 'LOCAL_WORLD_SIZE', 'RINGLEADER_NODE')}))"
)


@pytest.mark.slow
def test_ompi_local_rank_equals_local_rank_on_a_two_node_placement(seeds: Runtime, h) -> None:
    seeds.submit(h.spec("spread", ["mpirun", h.PY, "-c", CODE], workers=4))  # default policy: 2 nodes
    view = seeds.wait("spread", 120)
    assert view.status is JobStatus.SUCCEEDED, view.reason
    assert len(view.nodes) == 2
    ranks = [json.loads(seeds.logs("spread", f"worker-{i}").strip().splitlines()[-1]) for i in range(4)]
    for r in ranks:
        assert r["OMPI_COMM_WORLD_LOCAL_RANK"] == r["LOCAL_RANK"]
        assert r["OMPI_COMM_WORLD_LOCAL_SIZE"] == r["LOCAL_WORLD_SIZE"] == "2"
    assert sorted(r["LOCAL_RANK"] for r in ranks) == ["0", "0", "1", "1"]
