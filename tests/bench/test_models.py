"""The hand-written models match torchvision's parameter counts (data/reference.toml)."""

from __future__ import annotations

import pytest
import torch

from ringleader.bench.models import MODELS, build, param_count, spec
from ringleader.errors import UsageError
from ringleader.reference import reference


@pytest.mark.parametrize("name", ["alexnet", "googlenet", "resnet50", "resnet152", "vgg16"])
def test_param_counts_match_reference(name: str) -> None:
    expected = reference()["models"][name]
    assert round(param_count(build(name)) / 1e6, 2) == pytest.approx(expected, abs=0.005)


@pytest.mark.parametrize("name", [m for m in MODELS if m not in ("resnet152", "vgg16")])
def test_forward_on_small_images(name: str) -> None:
    """(vgg16 and resnet152 share their blocks with the tested ones and are slow on CPU.)"""
    s = spec(name)
    size = s.fixed_size or 64
    out = build(name, size).eval()(torch.randn(2, s.channels, size, size))
    assert out.shape == (2, s.num_classes)


def test_mnist_is_horovods_net() -> None:
    assert param_count(build("mnist")) == 21840


def test_unknown_model_lists_known_ones() -> None:
    with pytest.raises(UsageError) as info:
        spec("lenet")
    assert "resnet50" in info.value.fix
