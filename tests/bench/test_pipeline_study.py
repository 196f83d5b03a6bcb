"""The DLI lab's study folder without training anything: the rows' order, every ratio with the
range its runs allow, the notes on ratios within the noise, and the plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ringleader.bench.pipeline import ratio_note, ratio_range, study_results, study_table, write_study
from ringleader.cli.main import main

PNG = b"\x89PNG\r\n\x1a\n"


def result(label: str, syn: list[float], real: list[float], model: str = "trivial") -> dict[str, Any]:
    """A `bench pipeline` result as run_pipeline writes it (medians of odd-length runs)."""
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return {"kind": "pipeline", "label": label, "model": model, "world_size": 1, "backend": "gloo", "device": "cpu",
            "loader_workers": 2, "decode": "fast", "augment": "standard", "repeat": len(syn),
            "runs": {"loader": [900.0, 1000.0, 1100.0], "synthetic": syn, "real": real},
            "loader_images_per_sec": 1000.0, "synthetic_images_per_sec": med(syn), "real_images_per_sec": med(real),
            "degradation": med(real) / med(syn), "degradation_range": list(ratio_range(real, syn)),
            "need_per_gpu": {"host_to_device_mib_per_sec": 1.0, "storage_mib_per_sec": 0.5}, "notes": []}  # fmt: skip


def test_a_ratio_spans_lowest_over_highest_to_highest_over_lowest() -> None:
    assert ratio_range([40, 50, 60], [100, 80, 120]) == pytest.approx((40 / 120, 60 / 80))


def test_a_ratio_within_its_runs_spread_gets_a_noise_note() -> None:
    # the finding: a 0.56 "degradation" from runs that varied 3.1x is noise, and says so
    note = ratio_note("the degradation", 0.56, [30, 56, 93], [90, 100, 110])
    assert note is not None and note.startswith("the degradation 0.56 (range 0.27-1.03) is within the noise: "
                                                "its runs varied 3.1x, more than the 1.79x it measures")
    assert ratio_note("the degradation", 0.5, [49, 50, 51], [99, 100, 101]) is None  # a real halving


def test_a_one_model_study_reads_step_by_step(tmp_path: Path) -> None:
    """The lab's "make the pipeline worse" half: rows in the order first run, each against the row
    before it and the first, a rerun keeping its place, noisy steps noted."""
    write_study(tmp_path, result("reference", [100, 102, 104], [80, 81, 82]))
    write_study(tmp_path, result("1-reader", [100, 101, 102], [40, 41, 42]))
    write_study(tmp_path, result("complex-augment", [100, 101, 102], [30, 41, 50]))
    write_study(tmp_path, result("reference", [100, 101, 102], [79, 80, 81]))  # rerun: same row
    rows = study_results(tmp_path)
    assert [r["label"] for r in rows] == ["reference", "1-reader", "complex-augment"]
    table = (tmp_path / "pipeline.md").read_text()
    assert table == study_table(rows)
    lines = [ln for ln in table.splitlines() if ln.startswith("| ") and not ln.startswith("| row")]
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
    assert [c[0] for c in cells] == ["reference", "1-reader", "complex-augment"]
    assert cells[0][10:12] == ["-", "-"]
    assert cells[1][8] == "41.0 (40.0-42.0)" and cells[1][10] == f"{41 / 80:.3f} ({40 / 81:.2f}-{42 / 79:.2f})"
    assert cells[2][10] == f"{41 / 41:.3f} ({30 / 42:.2f}-{50 / 40:.2f})"  # vs 1-reader: within the noise
    assert cells[2][11] == f"{41 / 80:.3f} ({30 / 81:.2f}-{50 / 79:.2f})"  # vs reference
    notes = [ln for ln in table.splitlines() if ln.startswith("- ")]
    assert any(n.startswith("- complex-augment: complex-augment / 1-reader 1.00") for n in notes), notes
    assert not any("1-reader / reference" in n for n in notes)  # a halving its runs agree on
    assert all((tmp_path / name).read_bytes()[:8] == PNG for name in ("pipeline_scatter.png", "pipeline_ratio.png"))


def test_a_study_of_several_models_has_no_step_columns(tmp_path: Path) -> None:
    write_study(tmp_path, result("googlenet", [50, 52, 54], [40, 41, 42], model="googlenet"))
    write_study(tmp_path, result("alexnet", [300, 310, 320], [100, 110, 120], model="alexnet"))
    table = (tmp_path / "pipeline.md").read_text()
    assert "vs previous row" not in table.splitlines()[0]
    assert [json.loads(p.read_text())["order"] for p in sorted(tmp_path.glob("pipeline-*.json"))] == [1, 0]


def test_a_label_that_cannot_name_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "pipeline", "--data", str(tmp_path), "--label", "../one reader"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--label '../one reader' cannot name a study row" in err
