"""One vocabulary: the simulator names a job's placement and slowest link as submit and predict do."""

from __future__ import annotations

import pytest

from ringleader.model import predict_placement
from ringleader.scheduler import ClusterState, JobRequest, place
from ringleader.sim.engine import simulate
from ringleader.sim.steptime import StepTime, model_step_time
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


def test_simulated_jobs_carry_the_likely_range_predict_gives() -> None:
    """The simulator states its images/s with the same likely range as `predict` (the model's
    held-out errors for one node or several); a step-time function that states none has none."""
    specs = [NodeSpec(n, preset("dgx1v")) for n in ("node-a", "node-b")]
    jobs = [TraceJob("quad", 0.0, 4, 1, "vgg16", 64, 10), TraceJob("wide", 0.0, 12, 1, "resnet50", 64, 10)]
    run = simulate(specs, jobs, "topology", model_step_time())
    rows = {r["name"]: r for r in job_rows(run)}
    state = ClusterState.empty(specs)
    decision = place(state, JobRequest("quad", 4, 1, topology_aware=True), "topology")
    assert decision.placement is not None
    pred = predict_placement(state.by_name, decision.placement, "vgg16", 64)
    assert pred.likely_range is not None
    assert (rows["quad"]["images_per_s_low"], rows["quad"]["images_per_s_high"]) == pytest.approx(pred.likely_range)
    for row in rows.values():
        assert row["images_per_s_low"] < row["images_per_s"] < row["images_per_s_high"]
    wide_low, wide_high = rows["wide"]["images_per_s_low"], rows["wide"]["images_per_s_high"]
    quad_low, quad_high = rows["quad"]["images_per_s_low"], rows["quad"]["images_per_s_high"]
    assert wide_high / wide_low > quad_high / quad_low  # several nodes: the wider range

    def flat(nodes, placement, job):  # type: ignore[no-untyped-def]
        return StepTime(0.5, 100.0)

    plain = job_rows(simulate(specs, jobs[:1], "topology", flat))[0]
    assert plain["images_per_s"] == 100.0 and plain["images_per_s_low"] is None and plain["images_per_s_high"] is None
