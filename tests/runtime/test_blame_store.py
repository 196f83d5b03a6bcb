"""The restart verdict on the embedded engine's own store (real SQLite): faults blamed on a node
cordon it on the second, and one job's failures cordon one node at most."""

from __future__ import annotations

from ringleader.engines.embedded import store
from ringleader.engines.embedded.engine import Runtime
from ringleader.engines.embedded.lifecycle import blame_node
from ringleader.jobs.failures import Failure


def lost(node: str) -> Failure:
    return Failure(True, f"ssh to {node} failed (exit code 255): the node or its network is lost", node)


def test_one_jobs_failures_cordon_one_node_and_say_so(rt: Runtime) -> None:
    with rt.db.write() as conn:
        for now in (1.0, 2.0):
            blame_node(conn, "train", lost("node-a"), now)
        for now in (3.0, 4.0):  # the same job's failures on a second node: it stays in service
            blame_node(conn, "train", lost("node-b"), now)
        blame_node(conn, "eval", lost("node-b"), 5.0)  # another job's failure there does cordon it
        cordons = store.cordons(conn)
        said = [e["message"] for e in store.events(conn, "train") if e["kind"] == "NodeCordoned"]
    assert set(cordons) == {"node-a", "node-b"}
    assert cordons["node-a"].startswith("blamed for 2 failures, the last of job train: ssh to node-a failed")
    assert cordons["node-b"].startswith("blamed for 3 failures, the last of job eval: ssh to node-b failed")
    assert said == [f"node node-a cordoned: {cordons['node-a']}; `ringleader node uncordon node-a` ends it"]
