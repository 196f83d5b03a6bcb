"""Every constant the model reads from reference.toml sits next to its source."""

from __future__ import annotations

from ringleader.reference import reference


def test_model_sections_carry_sources():
    ref = reference()
    for section in ("models", "models_small", "throughput", "batch_scaling", "seeds"):
        assert ref[section].get("source"), f"[{section}] has no source"
    model = ref["model"]
    for key, value in model.items():
        if not key.endswith("source") and not isinstance(value, dict):
            assert any(k.endswith("source") and k.startswith(key.split("_")[0]) for k in model), key
