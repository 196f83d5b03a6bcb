"""The embedded engine keeps the cluster file's network tree and places by it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ringleader.engines.embedded.engine import Runtime
from ringleader.errors import UnschedulableError
from ringleader.jobs.spec import JobSpec

CLUSTER = """
nodes:
  - {name: node, preset: dgx-a100, emulated: true, count: 6}
network:
  levels:
    - {name: rack, oversubscription: 4}
    - {name: spine}
  switches:
    - {name: rack-1, nodes: "node-[0-2]"}
    - {name: rack-2, nodes: "node-[3-5]"}
    - {name: spine, switches: "rack-[1-2]"}
"""


def spec(name: str, workers: int, **kw: object) -> JobSpec:
    return JobSpec(name, workers, 8, [sys.executable, "-c", "pass"], **kw)  # type: ignore[arg-type]


def test_the_tree_survives_a_reopen_and_gangs_stay_in_a_rack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    with Runtime.open(tmp_path / "home") as rt:
        rt.apply_cluster(tmp_path / "cluster.yaml")
    with Runtime.open(tmp_path / "home") as rt:
        switches = {ns.name: ns.spec.switches for ns in rt.nodes().nodes}
        assert switches["node-4"] == ("rack-2", "spine") and switches["local"] == ()
        plan = rt.submit(spec("three", 3, topology_aware=True), dry_run=True).decision
        assert plan.placement is not None
        assert set(plan.placement.nodes) in ({"node-0", "node-1", "node-2"}, {"node-3", "node-4", "node-5"})
        assert "under rack" in plan.chosen.metrics.bottleneck.where  # type: ignore[union-attr]
        wide = rt.submit(spec("four", 4, topology_required="spine"), dry_run=True).decision
        assert wide.placement is not None and "(4:1 uplinks)" in wide.chosen.metrics.bottleneck.where  # type: ignore[union-attr]
        with pytest.raises(UnschedulableError) as err:
            rt.submit(spec("four", 4, topology_required="rack"), dry_run=True)
        assert "under one rack; most free under any rack: 3 worker slot(s) (rack-1)" in err.value.one_line()
        assert "require a wider network level" in err.value.one_line()
