"""The model against published multi-GPU results (reference.toml [fidelity], docs/model.md).

Every row comes from reference.toml with its source. The bars are the project's own: >= 90% of
the rows expressible, median |error| <= 8%, within-node scaling efficiency within 3 points (the
median over the one-node rows), and the seeds' four runs within 15%.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from ringleader.model.fidelity import (
    Scaling,
    fidelity_rows,
    fidelity_table,
    fitted_rows,
    loss,
    seed_results,
    summarise,
)


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
