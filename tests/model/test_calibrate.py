"""Calibration round trip: bench JSON generated from known parameters, fitted, recovered."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from ringleader.cli.main import main
from ringleader.model import load_calibration, predict_placement
from ringleader.model.calibration import Calibration, LinkFit
from ringleader.model.checks import emulated_job
from ringleader.model.fit import TrainPoint
from ringleader.model.predict import ModelEstimator, likely_range
from ringleader.model.rows import calibrate_files
from ringleader.reference import reference
from ringleader.scheduler.types import ClusterState, JobRequest, NodeState, Placement, WorkerSlot
from ringleader.topology import NodeSpec, preset

SIZES = [2**k for k in range(10, 29, 2)]  # 1 KiB .. 256 MiB


def allreduce_doc(backend: str, n: int, nodes: int, gbs: float, lat_us: float) -> dict:
    rows = []
    for s in SIZES:
        t = 2 * (n - 1) * lat_us * 1e-6 + 2 * (n - 1) / n * s / (gbs * 1e9)
        cell = {"time_us": t * 1e6, "algbw_gbs": s / t / 1e9, "busbw_gbs": 0.0, "wrong": 0}
        rows.append({"size_bytes": s, "count": s // 4, "type": "float32", "redop": "sum", "oop": cell, "ip": cell})
    return {"kind": "allreduce", "collective": "allreduce", "backend": backend, "world_size": n, "nodes": nodes,
            "dtype": "float32", "op": "sum", "results": rows, "avg_busbw_gbs": 0.0}  # fmt: skip


def train_doc(batch: int, rate: float, world: int = 1, backend: str = "gloo") -> dict:
    return {"kind": "train", "model": "resnet50", "batch_size": batch, "precision": "fp32", "backend": backend,
            "world_size": world, "nodes": 1, "device": "cpu", "images_per_sec_total": rate,
            "images_per_sec_per_worker": rate / world, "step_time_s": batch * world / rate}  # fmt: skip


def write(tmp: Path, name: str, doc: object) -> str:
    path = tmp / name
    path.write_text(json.dumps(doc))
    return str(path)


def test_links_and_compute_are_recovered(tmp_path):
    files = [
        write(tmp_path, "g2.json", allreduce_doc("gloo", 2, 1, 1.4, 40.0)),
        write(tmp_path, "g4.json", allreduce_doc("gloo", 4, 1, 1.4, 40.0)),
        write(tmp_path, "net.json", allreduce_doc("nccl", 4, 2, 0.8, 60.0)),
        # t(b) = 0.05 + b / 20 -> rates at batch 8 and 32
        write(tmp_path, "t8.json", train_doc(8, 8 / (0.05 + 8 / 20))),
        write(tmp_path, "t32.json", train_doc(32, 32 / (0.05 + 32 / 20))),
    ]
    cal, multi = calibrate_files(files)
    assert multi == []
    assert cal.links["gloo/local"].gbs == pytest.approx(1.4, rel=1e-6)
    assert cal.links["gloo/local"].latency_us == pytest.approx(40.0, rel=1e-4)
    assert cal.links["nccl/network"].gbs == pytest.approx(0.8, rel=1e-6)
    assert cal.links["nccl/network"].latency_us == pytest.approx(60.0, rel=1e-4)
    (fit,) = cal.compute
    assert (fit.model, fit.gpu_type, fit.batch_size) == ("resnet50", "cpu", 32)
    assert fit.step_overhead_s == pytest.approx(0.05, rel=1e-6)
    assert fit.images_per_s == pytest.approx(32 / (0.05 + 32 / 20), rel=1e-6)


def test_calibrate_cli_writes_a_file_predict_reads_and_checks_multiworker_runs(tmp_path, capsys):
    # a 2-worker run measured exactly as the model says: the check error must be ~0
    point = TrainPoint("resnet50", "cpu", "fp32", "gloo", 16, 2, 1, 1.0, "x")
    files = [write(tmp_path, "g2.json", allreduce_doc("gloo", 2, 1, 1.5, 30.0)),
             write(tmp_path, "t1.json", train_doc(16, 4.0))]  # fmt: skip
    cal, _ = calibrate_files(files)
    state, placement = emulated_job(point)
    expected = predict_placement(state.by_name, placement, "resnet50", 16, "fp32", "cpu", cal, backend="gloo")
    # two workers on one 2-core host share the cores: compute per step doubles
    assert expected.compute_s == pytest.approx(2 * 16 / 4.0)
    files.append(write(tmp_path, "t2.json", train_doc(16, expected.images_per_s, world=2)))
    out = tmp_path / "cal.json"
    assert main(["calibrate", *files, "--out", str(out), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (check,) = doc["checks"]
    assert check["error"] == pytest.approx(0.0, abs=1e-3)
    assert load_calibration(out).links["gloo/local"].gbs == pytest.approx(1.5, rel=1e-6)
    assert main(["predict", "--model", "resnet50", "--placement", "node-a:0,1", "--gpu-type", "cpu",
                 "--calibration", str(out), "--batch-size", "16", "-o", "json"]) == 0  # fmt: skip
    pred = json.loads(capsys.readouterr().out)["predictions"][0]
    assert pred["gpu_type"] == "cpu" and pred["compute_source"].startswith("calibrated")


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{oops", "is not JSON"),
        ('{"kind": "allreduce", "backend": "gloo", "world_size": 2}', "missing key 'results'"),
        ('{"kind": "nope"}', "not \\\"allreduce\\\" or \\\"train\\\""),
        ('{"kind": "train", "model": "resnet50", "batch_size": 8, "world_size": 1, "images_per_sec_total": -3}',
         "images_per_sec_total must be > 0"),
        ('{"kind": "train", "model": "lenet", "batch_size": 8, "world_size": 1, "images_per_sec_total": 3}',
         "unknown model 'lenet'"),
    ],
)
def test_malformed_bench_json_names_the_file(tmp_path, capsys, content, needle):
    path = write(tmp_path, "bad.json", None)
    Path(path).write_text(content)
    assert main(["calibrate", path]) == 2
    err = capsys.readouterr().err
    assert path in err and needle.replace("\\", "") in err


def test_a_calibrated_small_model_becomes_known(tmp_path):
    from ringleader.model import known_models

    doc = dict(train_doc(64, 900.0), model="mnist")
    cal, _ = calibrate_files([write(tmp_path, "m.json", doc)])
    assert "mnist" not in known_models()
    assert "mnist" in known_models(cal)
    state, placement = emulated_job(TrainPoint("mnist", "cpu", "fp32", "gloo", 64, 1, 1, 1.0, "x"))
    pred = predict_placement(state.by_name, placement, "mnist", 64, "fp32", "cpu", cal)
    assert pred.images_per_s == pytest.approx(900.0)
    assert pred.grad_bytes == 21840 * 4


def test_one_outlier_in_a_sweep_is_dropped(tmp_path):
    doc = allreduce_doc("gloo", 2, 1, 1.2, 50.0)
    doc["results"][5]["oop"] = dict(doc["results"][5]["oop"], time_us=doc["results"][5]["oop"]["time_us"] * 5)
    cal, _ = calibrate_files([write(tmp_path, "a.json", doc)])
    fit = cal.links["gloo/local"]
    assert fit.gbs == pytest.approx(1.2, rel=1e-6) and fit.latency_us == pytest.approx(50.0, rel=1e-4)
    assert fit.points == 2 * len(SIZES) - 1


def test_cpu_ranks_share_the_host(tmp_path):
    # k ranks on one host: together no faster than the best one-worker run, each no faster than
    # a worker measured with its share of the threads (cores // k)
    point = TrainPoint("resnet50", "cpu", "fp32", "gloo", 16, 2, 1, 1.0, "x")
    state, placement = emulated_job(point)

    def compute_s(*rates: tuple[int, float]) -> float:
        docs = [dict(train_doc(16, r), threads=t) for t, r in rates]
        cal, _ = calibrate_files([write(tmp_path, f"{i}.json", d) for i, d in enumerate(docs)])
        return predict_placement(state.by_name, placement, "resnet50", 16, "fp32", "cpu", cal).compute_s

    assert compute_s((2, 10.0)) == pytest.approx(2 * 16 / 10.0)  # host share: 2 x the 2-thread step
    assert compute_s((2, 10.0), (1, 7.0)) == pytest.approx(2 * 16 / 10.0)  # the share binds
    assert compute_s((2, 10.0), (1, 4.0)) == pytest.approx(16 / 4.0)  # one thread binds
    assert compute_s((2, 3.0), (1, 9.0)) == pytest.approx(2 * 16 / 9.0)  # best run: 1 thread


def test_bandwidth_comes_from_gradient_sized_messages(tmp_path):
    # cache-resident mid sizes run at 3 GB/s, 1 MiB and up at 1 GB/s: the fit must say 1 GB/s
    doc = allreduce_doc("mpi", 2, 1, 1.0, 20.0)
    for row in doc["results"]:
        if row["size_bytes"] < 1 << 20:
            t = (2 * 20.0 + row["size_bytes"] / 3e9 * 1e6)
            row["oop"] = row["ip"] = dict(row["oop"], time_us=t)
    cal, _ = calibrate_files([write(tmp_path, "m.json", doc)])
    assert cal.links["mpi/local"].gbs == pytest.approx(1.0, rel=0.02)


def test_bench_fields_device_name_threads_and_image_size(tmp_path):
    doc = dict(train_doc(16, 50.0), device="cuda:0", device_name="NVIDIA H100 80GB HBM3",
               config={"image_size": 128}, env={"OMP_NUM_THREADS": "4"})  # fmt: skip
    cal, _ = calibrate_files([write(tmp_path, "g.json", doc)])
    (fit,) = cal.compute
    assert (fit.gpu_type, fit.image_size, fit.threads) == ("H100", 128, 4)


# -- multi-GPU throughput rows (CSV, or bench train on GPUs) ------------------------------------

DLPERF_CSV = """model,gpu_type,batch_size,nodes,gpus_per_node,images_per_s,node,network_gbps,fabric,precision
resnet50,Tesla V100-SXM2-16GB,128,1,1,384.85,dgx1v,100,infiniband,fp32
resnet50,V100,128,1,8,2969.45,dgx1v,100,infiniband,fp32
resnet50,V100,128,2,8,5906.55,dgx1v,100,infiniband,fp32
resnet50,V100,128,4,8,11711.18,dgx1v,100,infiniband,fp32
"""


def test_a_throughput_csv_fits_scaling_and_predicts_its_rows(tmp_path):
    # OneFlow's ResNet-50 rows of the DLPerf report: 96.4% on one node, 95.9% on 2, 95.1% on 4
    path = tmp_path / "runs.csv"
    path.write_text(DLPERF_CSV)
    cal, multi = calibrate_files([str(path)])
    assert multi == []
    assert cal.sync is not None and cal.overlap is not None
    (fit,) = cal.compute
    assert (fit.gpu_type, fit.batch_size, fit.images_per_s) == ("V100", 128, 384.85)
    assert "network" in cal.links  # the rows span nodes on one fabric: a network link is fitted
    from ringleader.model.rows import fit_calibration_rows

    _, _, rows = fit_calibration_rows([str(path)])
    assert len(rows) == 3 and all(abs(r.error) < 0.03 for r in rows)
    # the file round-trips and predict uses it
    out = tmp_path / "cal.json"
    assert main(["calibrate", str(path), "--out", str(out), "-o", "json"]) == 0
    again = load_calibration(out)
    assert again.sync == pytest.approx(cal.sync, rel=1e-3)


def test_the_fitted_sync_term_follows_the_rows(tmp_path):
    # the same rows from a framework that loses 17% more on every multi-GPU run: a larger per-rank cost
    worse = DLPERF_CSV
    for rate in ("2969.45", "5906.55", "11711.18"):
        worse = worse.replace(rate, str(round(0.83 * float(rate), 2)))
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text(DLPERF_CSV)
    b.write_text(worse)
    good, _ = calibrate_files([str(a)])
    bad, _ = calibrate_files([str(b)])
    assert good.sync is not None and bad.sync is not None
    assert bad.sync[0] > 2 * good.sync[0]


def test_bench_train_runs_on_gpus_fit_the_scaling_too(tmp_path):
    one = {**train_doc(64, 2470.0), "device": "cuda", "device_name": "NVIDIA A100-SXM4-80GB", "precision": "fp16"}
    eight = {**train_doc(64, 16621.0, world=8, backend="nccl"), "device": "cuda",
             "device_name": "NVIDIA A100-SXM4-80GB", "precision": "fp16"}  # fmt: skip
    from ringleader.model.rows import fit_calibration_rows

    cal, _, rows = fit_calibration_rows([write(tmp_path, "1.json", one), write(tmp_path, "8.json", eight)])
    assert cal.sync is not None and cal.sync[0] > 0
    (row,) = rows
    assert row.row.gpu == "A100-80GB" and abs(row.error) < 0.02


def test_a_throughput_csv_row_may_sum_micro_batches(tmp_path):
    """A run that accumulates 16 micro-batches a step (its accumulation_steps column) is priced
    with one allreduce per step, as submit prices such a job: VGG-16 spread over two nodes on
    25 Gb/s is several times faster than a run that allreduces every micro-batch."""
    from ringleader.model.fidelity import predict_row
    from ringleader.model.rows import read_throughput_csv

    path = tmp_path / "runs.csv"
    path.write_text("model,gpu_type,batch_size,nodes,gpus_per_node,images_per_s,node,accumulation_steps\n"
                    "vgg16,V100,32,1,1,190,dgx1v,16\nvgg16,V100,32,2,8,2400,dgx1v,16\n")  # fmt: skip
    (row,), (single,) = read_throughput_csv(path)
    assert row.accumulation == 16 and single.images_per_s == 190
    summed, every = predict_row(row).prediction, predict_row(replace(row, accumulation=1)).prediction
    assert summed.accumulation == 16 and summed.images_per_s > 3 * every.images_per_s


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("model,gpu_type\nresnet50,V100\n", "has no column 'batch_size'"),
        (DLPERF_CSV.replace("precision\n", "precision,accumulation_steps\n").replace("fp32\n", "fp32,0.5\n"),
         "accumulation_steps must be a whole number from 1 to 1048576, got '0.5'"),
        (DLPERF_CSV.replace("precision\n", "precision,accumulation_steps\n").replace("fp32\n", f"fp32,{'9' * 5000}\n"),
         "accumulation_steps must be a whole number from 1 to 1048576, got '999"),
        (DLPERF_CSV.replace("2969.45", "fast"), "line 3: could not convert string to float: 'fast'"),
        (DLPERF_CSV.replace("5906.55,dgx1v", "5906.55,dgx9"), "unknown preset 'dgx9'"),
        (DLPERF_CSV.replace("infiniband", "smoke"), "unknown fabric 'smoke'"),
    ],
)
def test_a_bad_csv_is_one_line_and_exit_2(tmp_path, capsys, text, needle):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    code = main(["calibrate", str(path)])
    _, err = capsys.readouterr()
    assert code == 2
    assert needle in err and str(path) in err and len(err.strip().splitlines()) == 1


# -- what a calibration's predictions are worth: its own held-out runs ------------------------------

# DLPerf's OneFlow ResNet-50 rows above, plus 2 and 4 GPUs of one node and a second 4-node run
# (made up to the same shape, 1-2% apart), so that five runs can be left out in turn.
SIX_ROWS_CSV = DLPERF_CSV + """resnet50,V100,128,1,2,752.6,dgx1v,100,infiniband,fp32
resnet50,V100,128,1,4,1490.3,dgx1v,100,infiniband,fp32
resnet50,V100,128,4,8,11535.0,dgx1v,100,infiniband,fp32
"""


def test_a_calibration_predicts_each_run_it_left_out_and_states_a_range(tmp_path, capsys):
    from ringleader.model.rows import fit_calibration_rows

    path = tmp_path / "runs.csv"
    path.write_text(SIX_ROWS_CSV)
    cal, _, in_sample = fit_calibration_rows([str(path)])
    # every multi-GPU run predicted by the scaling fitted without it: other errors than in-sample
    assert len(cal.held_out) == len(in_sample) == 6
    assert sorted(round(e, 4) for e in cal.held_out) != sorted(round(r.error, 4) for r in in_sample)
    assert cal.interval is not None
    low, high = cal.interval
    assert min(cal.held_out) <= low <= high <= max(cal.held_out)
    # saved and read back, and the CLI says it
    out = tmp_path / "cal.json"
    assert main(["calibrate", str(path), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "held out: 6 run(s) each predicted by the fit without it" in said and "likely range" in said
    assert load_calibration(out).held_out == pytest.approx(cal.held_out, abs=1e-4)
    # a calibrated prediction now carries that range, as the published rates carry theirs
    assert main(["predict", "--model", "resnet50", "--workers", "16", "--gpus", "1", "--gpu-type", "V100",
                 "--batch-size", "128", "--calibration", str(out), "-o", "json"]) == 0  # fmt: skip
    for pred in json.loads(capsys.readouterr().out)["predictions"]:
        if pred.get("fits", True):
            lo, hi = pred["likely_images_per_s"]
            assert lo <= pred["images_per_s"] * 1.0001 and hi >= pred["images_per_s"] * 0.9999
            assert lo == pytest.approx(pred["images_per_s"] / (1 + high), rel=1e-3)


def test_too_few_held_out_runs_state_no_range(tmp_path, capsys):
    path = tmp_path / "runs.csv"
    path.write_text(DLPERF_CSV)  # three multi-GPU runs
    cal, _ = calibrate_files([str(path)])
    assert len(cal.held_out) == 3 and cal.interval is None
    out = tmp_path / "cal.json"
    assert main(["calibrate", str(path), "--out", str(out)]) == 0
    assert "held out: 3 run(s)" in capsys.readouterr().out
    assert main(["predict", "--model", "resnet50", "--workers", "8", "--gpus", "1", "--gpu-type", "V100",
                 "--batch-size", "128", "--calibration", str(out)]) == 0  # fmt: skip
    assert "calibrated" in capsys.readouterr().out  # the LIKELY column: no range to state


def test_the_queue_prices_a_calibrated_job_with_its_calibrations_range() -> None:
    from ringleader.model.calibration import Calibration
    from ringleader.model.predict import ModelEstimator
    from ringleader.scheduler.types import JobRequest, Placement, WorkerSlot

    job = JobRequest("j", 2, 1)
    placement = Placement("j", (WorkerSlot(0, "a", (0,)), WorkerSlot(1, "a", (1,))))
    wide = Calibration(held_out=(-0.2, -0.1, 0.0, 0.1, 0.25))
    assert ModelEstimator({"j": Calibration()}).likely(placement, job, 100.0) == (100.0, 100.0)
    low, high = ModelEstimator({"j": wide}).likely(placement, job, 100.0)
    assert low < 100.0 < high


@pytest.mark.parametrize("bad", ["[-1.5]", '["x"]', "[1e400]"])
def test_a_malformed_held_out_list_is_refused_in_one_line(tmp_path, capsys, bad: str) -> None:
    path = tmp_path / "cal.json"
    path.write_text('{"kind": "calibration", "version": 1, "held_out": ' + bad + "}")
    assert main(["predict", "--model", "resnet50", "--workers", "2", "--calibration", str(path)]) == 2
    err = capsys.readouterr().err
    assert "held_out" in err and len(err.strip().splitlines()) == 1


def test_one_gpus_measured_rate_takes_the_published_rows_range_with_their_own_rate(tmp_path, capsys):
    """A `bench train` run on one GPU, calibrated, measures the compute the published rows give
    as their source's own 1-GPU rate: its predictions take those rows' held-out range (the
    scaling model's error), not the wider one of the table's rates, and the queue weighs a job
    priced with it the same way."""
    h100 = {**train_doc(64, 2000.0), "device": "cuda", "device_name": "NVIDIA H100 80GB HBM3", "precision": "fp16"}
    out = tmp_path / "h100.json"
    assert main(["calibrate", write(tmp_path, "1.json", h100), "--out", str(out)]) == 0
    capsys.readouterr()
    cal = load_calibration(out)
    assert cal.compute_only and cal.interval is None
    shipped = reference()["intervals"]
    for workers, key in ((8, "one_node_measured_compute"), (16, "several_nodes_measured_compute")):
        assert main(["predict", "--model", "resnet50", "--workers", str(workers), "--gpu-type", "H100",
                     "--precision", "fp16", "--batch-size", "64", "--policy", "topology",
                     "--calibration", str(out), "-o", "json"]) == 0  # fmt: skip
        (pred,) = json.loads(capsys.readouterr().out)["predictions"]
        assert pred["compute_source"].startswith("calibrated")
        low, high = shipped[key]
        assert pred["likely_images_per_s"] == pytest.approx(
            [pred["images_per_s"] / (1 + high), pred["images_per_s"] / (1 + low)], abs=0.06)
        assert shipped[key] != shipped[key.removesuffix("_measured_compute")]
    job = JobRequest("j", 2, 1, model="resnet50")
    placement = Placement("j", (WorkerSlot(0, "a", (0,)), WorkerSlot(1, "a", (1,))))
    assert ModelEstimator({"j": cal}).likely(placement, job, 100.0) == likely_range(100.0, 1, measured_compute=True)
    # a rate for another model says nothing of this job's: priced with the table's rate, it takes
    # its range; a calibration that fitted links or scaling too is no published row's situation:
    # no range, the prediction as it is
    other = JobRequest("j", 2, 1, model="vgg16")
    assert ModelEstimator({"j": cal}).likely(placement, other, 100.0) == likely_range(100.0, 1)
    with_links = Calibration(links={"network": LinkFit(10.0, 5.0)}, compute=cal.compute)
    assert not with_links.compute_only
    assert ModelEstimator({"j": with_links}).likely(placement, job, 100.0) == (100.0, 100.0)


def test_a_calibration_of_another_gpu_says_so_and_leaves_the_tables_range(tmp_path, capsys):
    """An H100's measured rate applied to V100 nodes prices nothing: `predict` warns on stderr,
    naming what was measured and how to use it, and the prediction is the table's, with the
    table's range (not `calibrated`)."""
    h100 = {**train_doc(64, 2000.0), "device": "cuda", "device_name": "NVIDIA H100 80GB HBM3", "precision": "fp16"}
    out = tmp_path / "h100.json"
    assert main(["calibrate", write(tmp_path, "1.json", h100), "--out", str(out)]) == 0
    capsys.readouterr()
    args = ["predict", "--model", "resnet50", "--workers", "8", "--precision", "fp16", "--policy", "topology",
            "--calibration", str(out), "-o", "json"]  # fmt: skip
    assert main(args) == 0
    captured = capsys.readouterr()
    (pred,) = json.loads(captured.out)["predictions"]
    assert pred["gpu_type"] == "V100" and pred["compute_source"].startswith("published")
    assert captured.err.strip().splitlines() == [
        "warning: the calibration measured resnet50 fp16 on H100, not resnet50 fp16 on V100: this prediction uses "
        f"the model's own rate ({pred['compute_source']}); calibrate on these GPUs with this model and precision, "
        "or pass --gpu-type H100 if the job runs there"]  # fmt: skip
    assert pred["likely_images_per_s"] == pytest.approx(list(likely_range(pred["images_per_s"], 1)), abs=0.06)
    assert main([*args, "--gpu-type", "H100"]) == 0  # measured there: no warning, its own range
    captured = capsys.readouterr()
    assert captured.err == "" and json.loads(captured.out)["predictions"][0]["compute_source"].startswith("calibrated")


def test_a_version_1_file_reads_and_a_fit_keeps_its_framework(tmp_path):
    """Files from before compute fits named their framework still read; a fit's framework
    survives the round trip (an older ringleader refuses the newer version by its number)."""
    old = tmp_path / "v1.json"
    old.write_text(json.dumps({"kind": "calibration", "version": 1, "compute": [
        {"model": "resnet50", "gpu_type": "V100", "precision": "fp32", "batch_size": 64, "images_per_s": 300.0}]}))
    (fit,) = load_calibration(old).compute
    assert fit.framework is None
    new = tmp_path / "v2.json"
    assert main(["calibrate", write(tmp_path, "1.json", train_doc(64, 300.0)), "--out", str(new)]) == 0
    doc = json.loads(new.read_text())
    assert doc["version"] == 2 and doc["compute"][0]["framework"] == "PyTorch"
    assert load_calibration(new).compute[0].framework == "PyTorch"
    # a channels-last run is its own fit, not one batch point of the NCHW line
    nhwc = {**train_doc(128, 400.0), "data_format": "NHWC"}
    cal, _ = calibrate_files([write(tmp_path, "a.json", train_doc(64, 300.0)), write(tmp_path, "b.json", nhwc)])
    assert sorted((c.framework, c.batch_size, c.points) for c in cal.compute) == [
        ("PyTorch", 64, 1), ("PyTorch NHWC", 128, 1)]


@dataclass(frozen=True)
class LinkReadsCounted(Calibration):
    """A calibration that notes each hop kind its link table is asked for."""

    reads: list[str] = field(default_factory=list)

    def link(self, kind: str, backend: str | None = None) -> LinkFit | None:
        self.reads.append(kind)
        return super().link(kind, backend)


def test_a_prediction_reads_its_calibrations_link_table_once() -> None:
    """Two DGX-1V nodes, 16 GPUs: dozens of GPU pairs and hops, each kind of link looked up once."""
    links = {"NV1": LinkFit(20.0, 3.0), "NV2": LinkFit(40.0, 3.0), "SYS": LinkFit(4.0, 9.0),
             "network": LinkFit(9.0, 30.0), "gloo/network": LinkFit(2.0, 60.0)}  # fmt: skip
    cal = LinkReadsCounted(links=links)
    state = ClusterState(tuple(NodeState(NodeSpec(n, preset("dgx1v"), 100.0)) for n in ("a", "b")))
    placement = Placement("j", (WorkerSlot(0, "a", tuple(range(8))), WorkerSlot(1, "b", tuple(range(8)))))
    pred = predict_placement(state.by_name, placement, "resnet50", 64, calibration=cal)
    assert sorted(cal.reads) == ["NV1", "NV2", "SYS", "network"]
    assert pred.allreduce.bottleneck is not None and pred.allreduce.bottleneck.gbs == pytest.approx(9.0)


@pytest.mark.parametrize("backend", [None, "gloo", "nccl"])
def test_the_link_table_a_backend_reads_is_its_link_lookups(backend: str | None) -> None:
    links = {"network": LinkFit(9.0, 30.0), "gloo/network": LinkFit(2.0, 60.0), "nccl/NV1": LinkFit(20.0, 3.0),
             "local": LinkFit(5.0, 7.0)}  # fmt: skip
    cal = Calibration(links=links)
    kinds = ["network", "NV1", "local", "SYS"]
    assert cal.links_for(backend) == {k: fit for k in kinds if (fit := cal.link(k, backend)) is not None}
