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


def test_v2_sections_carry_sources():
    ref = reference()
    for section in ("gpus", "model_flops", "scaling"):
        assert ref[section].get("source"), f"[{section}] has no source"
    assert ref["derivation"]["compute_weight_source"]
    for fabric in ("tcp", "roce", "infiniband", "efa"):
        assert 0 < ref["fabrics"][fabric] <= 1 and ref["fabrics"][f"{fabric}_source"]
    for row in ref["throughput_rows"]:
        assert row["source"] and row["images_per_s"] > 0
    for row in ref["fidelity"]["rows"]:
        assert row["source"] and (row.get("measured") or row.get("efficiency"))


def test_every_gpu_has_datasheet_numbers():
    from ringleader.model.tables import gpu_specs, normalize_gpu_type

    specs = gpu_specs()
    assert len(specs) >= 17
    for spec in specs.values():
        assert spec.fp32_tflops > 0 and spec.mem_gbs > 0 and spec.names
        assert (spec.nvlink_gbs > 0) == (spec.nvlink_gen > 0), spec.name
    # names as NVML reports them map to the right row, most specific first
    for nvml, ours in [("Tesla V100-SXM2-32GB", "V100"), ("Tesla V100-PCIE-16GB", "V100-PCIe"),
                       ("NVIDIA A100-SXM4-80GB", "A100-80GB"), ("NVIDIA A100-PCIE-40GB", "A100"),
                       ("NVIDIA A100 80GB PCIe", "A100-80GB-PCIe"), ("NVIDIA A10", "A10"), ("NVIDIA L4", "L4"),
                       ("NVIDIA L40S", "L40S"), ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA H100 PCIe", "H100-PCIe"),
                       ("NVIDIA GH200 480GB", "GH200"), ("NVIDIA H200", "H200"), ("Tesla K80", "K80"),
                       ("Tesla T4", "T4"), ("Tesla P100-PCIE-16GB", "P100-PCIe")]:  # fmt: skip
        assert normalize_gpu_type(nvml) == ours, nvml
