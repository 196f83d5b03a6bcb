"""One vocabulary: the simulator names a job's placement and slowest link as submit and predict do,
and states its images/s with the likely range predict gives."""

from __future__ import annotations

from typing import Any

import pytest

from ringleader.model import predict_placement
from ringleader.model.predict import Prediction
from ringleader.scheduler import ClusterState, Decision, JobRequest, place
from ringleader.sim.engine import simulate
from ringleader.sim.steptime import StepTime, model_step_time
from ringleader.sim.summary import job_rows
from ringleader.sim.trace import TraceJob
from ringleader.topology import NodeSpec, preset

SPECS = [NodeSpec(n, preset("dgx1v")) for n in ("node-a", "node-b")]
JOBS = [TraceJob("quad", 0.0, 4, 1, "vgg16", 64, 10), TraceJob("wide", 0.0, 12, 1, "resnet50", 64, 10)]


def simulated_and_predicted() -> tuple[dict[str, dict[str, Any]], Decision, Prediction]:
    """The simulator's job rows for a 4-GPU gang on one node and a 12-GPU one over both, beside
    what `submit` decides and `predict` predicts for the first on the empty cluster."""
    rows = {r["name"]: r for r in job_rows(simulate(SPECS, JOBS, "topology", model_step_time()))}
    state = ClusterState.empty(SPECS)
    decision = place(state, JobRequest("quad", 4, 1, topology_aware=True), "topology")
    assert decision.chosen is not None and decision.placement is not None
    return rows, decision, predict_placement(state.by_name, decision.placement, "vgg16", 64)


def test_simulated_jobs_use_submit_s_words_for_placement_and_bottleneck() -> None:
    rows, decision, pred = simulated_and_predicted()
    assert decision.chosen is not None and decision.placement is not None
    # what `submit` prints as "Bottleneck:", what `predict -o json` gives, what the simulator records
    assert rows["quad"]["bottleneck"] == decision.chosen.metrics.bottleneck.describe() == pred.bottleneck
    assert rows["quad"]["placement"] == decision.placement.describe() == pred.placement
    assert rows["wide"]["bottleneck"].startswith("network ")


def test_simulated_jobs_carry_the_likely_range_predict_gives() -> None:
    """The same range as `predict` (the model's held-out errors for one node or several); a
    step-time function that states none has none."""
    rows, _, pred = simulated_and_predicted()
    assert pred.likely_range is not None
    assert (rows["quad"]["images_per_s_low"], rows["quad"]["images_per_s_high"]) == pytest.approx(pred.likely_range)
    for row in rows.values():
        assert row["images_per_s_low"] < row["images_per_s"] < row["images_per_s_high"]
    wide_low, wide_high = rows["wide"]["images_per_s_low"], rows["wide"]["images_per_s_high"]
    quad_low, quad_high = rows["quad"]["images_per_s_low"], rows["quad"]["images_per_s_high"]
    assert wide_high / wide_low > quad_high / quad_low  # several nodes: the wider range

    def flat(nodes, placement, job):  # type: ignore[no-untyped-def]
        return StepTime(0.5, 100.0)

    plain = job_rows(simulate(SPECS, JOBS[:1], "topology", flat))[0]
    assert plain["images_per_s"] == 100.0 and plain["images_per_s_low"] is None and plain["images_per_s_high"] is None
