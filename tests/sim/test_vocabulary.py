"""One vocabulary: the simulator names a job's placement and slowest link as submit and predict do."""

from __future__ import annotations

from ringleader.model import predict_placement
from ringleader.scheduler import ClusterState, JobRequest, place
from ringleader.sim.engine import simulate
from ringleader.sim.steptime import model_step_time
from ringleader.sim.summary import job_rows
from ringleader.sim.trace import TraceJob
from ringleader.topology import NodeSpec, preset


def test_simulated_jobs_use_submit_s_words_for_placement_and_bottleneck():
    specs = [NodeSpec(n, preset("dgx1v")) for n in ("node-a", "node-b")]
    jobs = [TraceJob("quad", 0.0, 4, 1, "vgg16", 64, 10), TraceJob("wide", 0.0, 12, 1, "resnet50", 64, 10)]
    run = simulate(specs, jobs, "topology", model_step_time())
    rows = {r["name"]: r for r in job_rows(run)}
    state = ClusterState.empty(specs)
    decision = place(state, JobRequest("quad", 4, 1, topology_aware=True), "topology")
    assert decision.chosen is not None and decision.placement is not None
    pred = predict_placement(state.by_name, decision.placement, "vgg16", 64)
    # what `submit` prints as "Bottleneck:", what `predict -o json` gives, what the simulator records
    assert rows["quad"]["bottleneck"] == decision.chosen.metrics.bottleneck.describe() == pred.bottleneck
    assert rows["quad"]["placement"] == decision.placement.describe() == pred.placement
    assert rows["wide"]["bottleneck"].startswith("network ")
