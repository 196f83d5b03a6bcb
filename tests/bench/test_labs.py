"""The labs' outputs committed under examples/labs/ (`make lab-horovod`, `make lab-dli`, run by
hand: minutes each): what they show is what the code renders from the results kept beside them,
and they are the labs' tables and plots."""

from __future__ import annotations

import json
from pathlib import Path

from ringleader.bench.pipeline import ratio_range, study_results, study_table
from ringleader.bench.scaling import markdown, table_rows

LABS = Path(__file__).resolve().parents[2] / "examples" / "labs"
PNG = b"\x89PNG\r\n\x1a\n"


def test_the_dli_models_study_is_what_its_results_render() -> None:
    """The lab's first half: its four models in its order, compute only vs the full pipeline."""
    out = LABS / "dli" / "models"
    results = study_results(out)
    assert [r["model"] for r in results] == ["googlenet", "resnet50", "resnet152", "alexnet"]
    assert (out / "pipeline.md").read_text() == study_table(results)
    for r in results:  # each figure the median of its runs, the lab's degradation from them
        assert r["repeat"] == 2 and r["degradation"] == r["real_images_per_sec"] / r["synthetic_images_per_sec"]
        assert len(r["runs"]["real"]) == 2 and r["degradation_range"] == list(ratio_range(r["runs"]["real"],
                                                                                          r["runs"]["synthetic"]))
    assert all((out / name).read_bytes()[:8] == PNG for name in ("pipeline_scatter.png", "pipeline_ratio.png"))
    assert (out / "pipeline.txt").read_text().count("each GPU at its compute-only rate") == 4


def test_the_dli_steps_study_makes_the_pipeline_worse_as_the_lab_does() -> None:
    """The lab's second half: the trivial model's pipeline, one knob at a time, in its order."""
    out = LABS / "dli" / "steps"
    results = study_results(out)
    knobs = [(r["label"], r["loader_workers"], r["decode"], r["augment"]) for r in results]
    assert knobs == [("reference", 2, "fast", "standard"), ("1-reader", 1, "fast", "standard"),
                     ("accurate-decode", 2, "accurate", "standard"), ("1-reader-accurate-decode", 1, "accurate",
                                                                      "standard"),
                     ("complex-augment", 2, "fast", "complex"), ("simple-augment", 2, "fast", "simple")]  # fmt: skip
    assert {r["model"] for r in results} == {"trivial"} and all(r["repeat"] == 2 for r in results)
    assert (out / "pipeline.md").read_text() == study_table(results)
    assert all((out / name).read_bytes()[:8] == PNG for name in ("pipeline_scatter.png", "pipeline_ratio.png"))


def test_the_horovod_lab_table_is_what_its_runs_render() -> None:
    out = LABS / "horovod"
    doc = json.loads((out / "scaling.json").read_text())
    # ringleader's gloo and MPI beside Horovod itself, each at 1 and 2 ranks
    assert [(r["backend"], r["gpus_per_server"]) for r in doc["rows"]] == [
        (b, k) for b in ("gloo", "horovod", "mpi") for k in (1, 2)]  # fmt: skip
    horovod = [p for p in doc["points"] if p["backend"] == "horovod"]
    assert len(horovod) == 6 and all(p["horovod_controller"] == "mpi" for p in horovod)
    assert all(len(set(p["weight_sums"])) == 1 for p in horovod)  # DistributedOptimizer kept ranks equal
    assert "[X] PyTorch" in (out / "horovod-build.txt").read_text()
    assert doc["skipped"] == {"nccl": "the nccl backend needs CUDA GPUs and none is visible here"}
    assert table_rows(doc["points"]) == doc["rows"]  # the medians and speedups from the runs kept
    assert (out / "scaling.md").read_text() == markdown(doc["rows"], doc["title"], doc["machine"], doc["skipped"])
    assert all((out / name).read_bytes()[:8] == PNG for name in ("speedup.png", "busbw.png"))
    assert "Experiment environment" in (out / "env.txt").read_text()
    assert (out / "report.html").read_text().count("data:image/png;base64,") >= 2


def test_the_horovod_labs_servers_table_is_what_its_runs_render() -> None:
    """The second table (servers x ranks per server, on the emulated reference cluster): every
    layout a row, rendered from its runs, and each run's ranks on as many servers as it says."""
    out = LABS / "horovod" / "servers"
    doc = json.loads((out / "scaling.json").read_text())
    assert [(r["backend"], r["servers"], r["gpus_per_server"]) for r in doc["rows"]] == [
        (b, s, k) for b in ("gloo", "mpi") for s, k in ((1, 1), (1, 2), (2, 1))]  # fmt: skip
    assert doc["launcher"] == "runtime" and all(p["job"].startswith("bench-train-") for p in doc["points"])
    assert sorted((p["world_size"], p["nodes"]) for p in doc["points"]) == sorted([(1, 1), (2, 1), (2, 2)] * 6)
    assert table_rows(doc["points"]) == doc["rows"]
    assert (out / "scaling.md").read_text() == markdown(doc["rows"], doc["title"], doc["machine"], doc["skipped"])
    assert (out / "speedup.png").read_bytes()[:8] == PNG
    cluster = (out / "cluster.txt").read_text()
    assert "links at network_gbps x 0.02" in cluster and "cn-shanghai-172" in cluster and "cn-shanghai-173" in cluster
