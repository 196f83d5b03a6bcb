"""The model against published multi-GPU results (reference.toml [fidelity], docs/model.md).

Every row comes from reference.toml with its source. The bars are the project's own: >= 90% of
the rows expressible, median |error| <= 8%, within-node scaling efficiency within 3 points (the
median over the one-node rows), and the seeds' four runs within 15%. Regression guards: the whole
table's median |error| stays under 6% (5.3% when they were set), and the mixed-precision rows and
the multi-node InfiniBand rows each under 8% (5.9% each).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import pytest

from ringleader.model.fidelity import (
    Scaling,
    fidelity_rows,
    fidelity_table,
    fitted_rows,
    loss,
    predict_row,
    seed_results,
    subsets,
    summarise,
)
from ringleader.model.tables import exposed_allreduce_s, grad_ready_curves


@pytest.fixture(scope="module")
def table():
    return fidelity_table()


def test_every_row_names_its_source_and_is_expressible(table):
    rows = fidelity_rows()
    assert len(table) == len(rows) >= 50
    assert all(r.source and r.table for r in rows)
    assert {"DLPerf", "DeepLearningExamples", "horovod"} <= {
        key for r in rows for key in ("DLPerf", "DeepLearningExamples", "horovod") if key in r.source
    }
    assert summarise(table).expressible_share >= 0.90


def test_median_error_within_8_percent(table):
    assert summarise(table).median_abs_error <= 0.08


def median_abs_error(results) -> float:
    return statistics.median(abs(r.error) for r in results)


def test_median_error_does_not_regress(table):
    assert summarise(table).median_abs_error <= 0.06


def test_mixed_precision_rows_within_8_percent(table):
    rows = subsets(table)["mixed precision"]
    assert len(rows) >= 15 and {1, 2, 4} <= {r.row.nodes for r in rows}
    assert median_abs_error(rows) <= 0.08


def test_multi_node_infiniband_rows_within_8_percent(table):
    rows = subsets(table)["multi-node InfiniBand"]
    assert len(rows) >= 30
    assert median_abs_error(rows) <= 0.08
    # the rows added after the fit (DeepLearningExamples EfficientNet, DLPerf mixed precision) too
    later = subsets(table)["added after the fit"]
    assert len(later) >= 16 and median_abs_error(later) <= 0.08


def test_within_node_scaling_efficiency_within_3_points(table):
    summary = summarise(table)
    assert len(summary.within_node_points) >= 15
    assert summary.median_within_node_points <= 3.0


@pytest.mark.parametrize("model", ["vgg16", "resnet50"])
@pytest.mark.parametrize("policy", ["topology", "default"])
def test_the_seeds_four_rows_within_15_percent(model, policy):
    found = [r for r in seed_results() if (r.row.model, r.row.policy) == (model, policy)]
    assert len(found) == 1
    got = found[0]
    assert abs(got.error) <= 0.15, f"predicted {got.prediction.images_per_s:.1f}, measured {got.measured}"


def test_topology_placement_beats_default_in_the_seeds():
    by = {(r.row.model, r.row.policy): r.prediction.images_per_s for r in seed_results()}
    for model in ("vgg16", "resnet50"):
        assert by[(model, "topology")] > 1.5 * by[(model, "default")]


def test_inside_a_node_scaling_is_not_perfect(table):
    # published 8-GPU runs scale 83-97%; the model must not predict ~100% for them any more
    one_node = [r for r in table if r.row.nodes == 1 and r.row.ranks == 8]
    assert one_node and all(r.predicted_efficiency < 0.985 for r in one_node)


def test_the_shipped_constants_are_a_minimum_of_the_fit():
    # a 10% step of any fitted constant (either way) does not lower the fit's loss by more than noise
    base = Scaling.shipped()
    rows = fitted_rows()
    assert 0 < len(rows) < len(fidelity_rows())  # the later rows are out of sample
    at = loss(fidelity_table(base, rows))
    for name in ("host_us_per_image", "node_jitter"):
        for factor in (0.9, 1.1):
            moved = replace(base, **{name: getattr(base, name) * factor})
            assert loss(fidelity_table(moved, rows)) >= at - 1e-3, name
    tcp = base.fabrics["tcp"]
    for factor in (0.9, 1.1):
        moved = replace(base, fabrics={**base.fabrics, "tcp": tcp * factor})
        assert loss(fidelity_table(moved, rows)) >= at - 1e-3
    assert math.isfinite(at)


def test_allreduce_hides_only_behind_the_backward_that_follows_its_gradients():
    # VGG-16's classifier (91% of the bytes) is ready in the first 1/20 of backward; BERT's word
    # embedding (tied to the masked-LM decoder, 22% of the bytes) only when backward ends
    assert exposed_allreduce_s("vgg16", 1.0, 1.0) <= 0.06
    assert exposed_allreduce_s("bertbase", 1.0, 1.0) >= 0.22
    assert exposed_allreduce_s("gpt2", 1.5, 1.0) == pytest.approx(0.5)  # no curve: all ready at once
    for model in grad_ready_curves():
        curve = grad_ready_curves()[model]
        assert len(curve) == 20 and curve[-1] == 1.0 and list(curve) == sorted(curve)
        for c in (0.1, 0.5, 1.0, 3.0):
            assert max(0.0, c - 1.0) <= exposed_allreduce_s(model, c, 1.0) <= c


def test_full_overlap_leaves_bert_more_exposed_than_vgg(table):
    by = {(r.row.model, r.row.nodes, r.row.framework): r.row for r in table}
    bert = by[("bertbase", 4, "OneFlow 0.1.9")]
    vgg = next(r.row for r in table if r.row.model == "vgg16" and r.row.nodes == 128)
    full = replace(Scaling.shipped(), overlap=1.0)
    b, v = predict_row(bert, full).prediction, predict_row(vgg, full).prediction
    assert b.comm_exposed_s >= 0.2 * b.comm_s
    assert v.comm_exposed_s <= 0.4 * v.comm_s  # there C > backward: what is left is C - backward
    # overlap 0 (the shipped fit) leaves the whole allreduce exposed
    assert predict_row(vgg).prediction.comm_exposed_s == pytest.approx(v.comm_s)
