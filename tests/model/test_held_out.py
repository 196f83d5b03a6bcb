"""Leave-one-source-out cross-validation of the model's scaling constants: every row predicted by
constants fitted without its source, beside the shipped prediction."""

from __future__ import annotations

import pytest

from ringleader.model.calibration import Calibration
from ringleader.model.fidelity import fidelity_rows, leave_one_source_out, short_source


def test_each_source_is_predicted_by_constants_fitted_without_it() -> None:
    rows = [r for r in fidelity_rows() if short_source(r.source) in ("seeds (ACK)", "Horovod")]
    results = leave_one_source_out(rows, sweeps=1)
    assert [h.shipped.row for h in results] == rows  # each row once, in order
    seeds = [h for h in results if h.shipped.row.fabric == "tcp"]
    assert len(seeds) == 4
    # Without the seeds nothing left runs over TCP: its share is the RDMA-class default, so the
    # spread rows are predicted far faster than measured; the shipped fit (with them) is close.
    spread = [h for h in seeds if h.shipped.row.policy == "default"]  # 4 workers spread over 2 nodes
    assert spread and all(h.held_out.error > h.shipped.error + 0.2 for h in spread), [
        (h.shipped.error, h.held_out.error) for h in seeds]
    # Horovod's rows, held out, are predicted by a fit on the seeds alone: not the shipped values
    horovod = [h for h in results if h.shipped.row.fabric == "roce"]
    assert len(horovod) == 3 and any(h.held_out.prediction != h.shipped.prediction for h in horovod)


def test_the_shipped_ranges_are_the_held_out_errors_percentiles() -> None:
    """reference.toml [intervals] is what leave-one-source-out gives today: the 10th and 90th
    percentiles of the held-out errors, per node count (a change to the model or the table that
    moves them must move the data too)."""
    import statistics

    from ringleader.reference import reference

    results = leave_one_source_out(sweeps=2)
    shipped = reference()["intervals"]
    for key, part in (("one_node", [h for h in results if h.shipped.row.nodes == 1]),
                      ("several_nodes", [h for h in results if h.shipped.row.nodes > 1])):  # fmt: skip
        q = statistics.quantiles([h.held_out.error for h in part], n=10)
        assert shipped[key] == [round(q[0], 3), round(q[-1], 3)], key


def test_a_prediction_carries_the_range_its_kind_of_row_was_held_out_within() -> None:
    from ringleader.model import predict_placement
    from ringleader.model.fidelity import seeds_cluster
    from ringleader.scheduler import place
    from ringleader.scheduler.types import JobRequest

    state = seeds_cluster()
    for policy, low, high in (("topology", 1 / 1.232, 1 / (1 - 0.084)), ("default", 1 / 1.691, 1 / (1 - 0.08))):
        placement = place(state, JobRequest("vgg", 4, 1, topology_aware=policy == "topology"), policy).placement
        assert placement is not None
        pred = predict_placement(state.by_name, placement, "vgg16", 64)
        lo, hi = pred.likely_range or (0.0, 0.0)
        assert (lo, hi) == pytest.approx((pred.images_per_s * low, pred.images_per_s * high)), policy
        assert pred.as_dict()["likely_images_per_s"] == [round(lo, 1), round(hi, 1)]
    calibrated = predict_placement(state.by_name, placement, "vgg16", 64, calibration=Calibration())
    assert calibrated.likely_range is None  # a user's calibration is no row of the table
