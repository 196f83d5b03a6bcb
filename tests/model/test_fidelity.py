"""The seeds' fidelity test: fit the network on VGG16's two runs, predict ResNet-50's within 15%.

Everything comes from reference.toml: the seeds' measurements, the published single-GPU rates,
the batch-scaling pair, link bandwidths. Only the network efficiency is fitted, on VGG16 alone.
"""

from __future__ import annotations

import pytest

from ringleader.model.fidelity import fit_seeds, seed_measurements
from ringleader.reference import reference

TOLERANCE = 0.15


@pytest.fixture(scope="module")
def fit():
    return fit_seeds("vgg16")


def test_the_fit_reproduces_vgg16_default(fit):
    # one free parameter, and only the default run depends on it: it must be matched exactly
    assert fit.point("vgg16", "default").error == pytest.approx(0.0, abs=0.005)
    assert 0.0 < fit.network_efficiency <= 1.0


@pytest.mark.parametrize("policy", ["topology", "default"])
def test_resnet50_within_15_percent(fit, policy):
    point = fit.point("resnet50", policy)
    assert point.measured == seed_measurements()["resnet50"][policy]
    assert abs(point.error) <= TOLERANCE, f"{policy}: predicted {point.predicted:.1f}, measured {point.measured}"


def test_topology_beats_default_for_both_models(fit):
    for model in ("vgg16", "resnet50"):
        assert fit.point(model, "topology").predicted > 1.5 * fit.point(model, "default").predicted


def test_the_stored_network_efficiency_is_this_fit(fit):
    stored = float(reference()["model"]["network_efficiency"])
    assert stored == pytest.approx(fit.network_efficiency, rel=0.01)


def test_fit_on_resnet50_predicts_vgg16_default_too():
    # the other direction, as a check that the fit is not one-sided
    other = fit_seeds("resnet50")
    assert abs(other.point("vgg16", "default").error) <= TOLERANCE
