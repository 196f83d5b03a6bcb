"""bench train / pipeline / scaling on tiny real multi-process runs."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rendering import check_in_chromium
from ringleader.bench.comm import Comm
from ringleader.bench.ranks import RankInfo
from ringleader.bench.train import Step, TrainConfig

from .conftest import LONG_TIMEOUT, TIMEOUT, cli, cli_json

# Each test runs benches of real ranks; under load they take minutes (the limits: conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2 * LONG_TIMEOUT)]

TINY = ("--batch-size", "8", "--num-batches", "4", "--num-warmup-batches", "1",
        "--image-size", "16", "--display-every", "2")  # fmt: skip
TRAIN_KEYS = {"kind", "model", "batch_size", "precision", "data_format", "backend", "world_size", "nodes",
              "device", "num_batches", "images_per_sec_total", "images_per_sec_per_worker",
              "step_time_s", "step_times_s", "data"}  # fmt: skip
HAS_MPI = shutil.which("mpirun") is not None


def test_gloo_mnist_prints_tf_cnn_benchmarks_lines() -> None:
    proc = cli("bench", "train", "--model", "mnist", "--backend", "gloo", "-np", "2", *TINY,
               "--precision", "bf16")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    # how long the timed steps will take, from the warm-up's: a long bench says so before it starts
    estimate = [ln for ln in proc.stderr.splitlines() if ln.startswith("note: a warm-up step took ")]
    assert len(estimate) == 1 and re.search(r": the 4 timed steps take about \d+(\.\d)? (s|min|h)$", estimate[0])
    lines = proc.stdout.splitlines()
    steps = [ln for ln in lines if re.match(r"^\d+\timages/sec: [\d.]+ \+/- [\d.]+ \(jitter = "
                                             r"[\d.]+\)\t[\d.]+$", ln)]  # fmt: skip
    assert [s.split("\t")[0] for s in steps] == ["2", "4"]
    i = lines.index(next(ln for ln in lines if ln.startswith("total images/sec: ")))
    assert lines[i - 1] == lines[i + 1] == "-" * 64
    assert float(lines[i].split(": ")[1]) > 0


@pytest.fixture(scope="module")
def json_on_terminal() -> tuple[str, str]:
    """`bench train -o json` with stderr on a terminal (stdout, stderr), run once for the JSON
    contract and the terminal test: two mpi ranks where Open MPI is, else one rank."""
    mpi = ("--backend", "mpi", "-np", "2") if HAS_MPI else ()
    return _with_terminal_stderr("bench", "train", "--model", "trivial", *mpi, *TINY, "-o", "json")


@pytest.mark.skipif(not HAS_MPI, reason="needs Open MPI")
def test_mpi_trivial_json_contract(json_on_terminal: tuple[str, str]) -> None:
    res = json.loads(json_on_terminal[0])
    assert res.keys() >= TRAIN_KEYS
    assert (res["kind"], res["model"], res["backend"], res["world_size"]) == (
        "train", "trivial", "mpi", 2)
    assert res["data"] == "synthetic" and res["device"] == "cpu" and res["nodes"] == 1
    assert len(res["step_times_s"]) == 4 and res["step_time_s"] > 0
    assert res["images_per_sec_per_worker"] == pytest.approx(res["images_per_sec_total"] / 2)


@dataclass(frozen=True)
class Study:
    """A pipeline study folder and the two runs that wrote it: trivial's JSON, mnist's table."""

    out: Path
    trivial: dict[str, Any]
    mnist: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def pipeline_study(jpeg_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Study:
    """The DLI lab's study, run once for the tests below (each pipeline run trains two times a
    round): trivial in two rounds with -o json, then mnist in one with the fast decode and the
    table, into one folder."""
    out = tmp_path_factory.mktemp("pipe") / "study"
    pipeline = ("bench", "pipeline", "--data", str(jpeg_dir), "--launcher", "local", "--loader-workers", "1",
                "--out", str(out), *TINY)  # fmt: skip
    trivial = cli_json(*pipeline, "--model", "trivial", "--repeat", "2")
    mnist = cli(*pipeline, "--model", "mnist", "--repeat", "1", "--decode", "fast")
    assert mnist.returncode == 0, mnist.stderr[-2000:]
    return Study(out, trivial, mnist)


@pytest.fixture(scope="module")
def pipeline_json(pipeline_study: Study, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pipe") / "pipeline.json"
    path.write_text(json.dumps(pipeline_study.trivial))
    return path


def test_pipeline_reports_degradation(pipeline_json: Path) -> None:
    res = json.loads(pipeline_json.read_text())
    assert res["kind"] == "pipeline" and res["loader_images_per_sec"] > 0
    assert res["degradation"] == pytest.approx(
        res["real_images_per_sec"] / res["synthetic_images_per_sec"])
    assert res["skipped_images"] >= 1  # the corrupt file
    assert res["real"]["data"] != "synthetic" and res["synthetic"]["data"] == "synthetic"
    # two rounds: each figure the median of its runs, the load around them, notes on themselves
    assert res["repeat"] == 2 and res["device"] == "cpu"
    for key in ("loader", "synthetic", "real"):
        runs = res["runs"][key]
        assert len(runs) == 2 and min(runs) <= res[f"{key}_images_per_sec"] <= max(runs)
    assert len(res["load_avg"]["before"]) == 3 and isinstance(res["notes"], list)



def test_pipeline_says_the_bandwidth_each_gpu_needs(pipeline_json: Path, jpeg_dir: Path) -> None:
    """The DLI lab's arithmetic: at the compute-only rate each GPU takes decoded images (side x
    side x 3 bytes, as the lab counts them) host to device, and reads the files from storage."""
    res = json.loads(pipeline_json.read_text())
    need = res["need_per_gpu"]
    files = [f for f in jpeg_dir.rglob("*.jpg")]
    assert need["images_per_sec"] == pytest.approx(res["synthetic_images_per_sec"] / res["world_size"])
    assert need["decoded_bytes_per_image"] == 16 * 16 * 3  # TINY's --image-size 16, RGB
    assert need["host_to_device_mib_per_sec"] == pytest.approx(need["images_per_sec"] * 16 * 16 * 3 / 2**20)
    assert need["file_bytes_per_image"] == pytest.approx(sum(f.stat().st_size for f in files) / len(files))
    assert need["storage_mib_per_sec"] == pytest.approx(need["images_per_sec"] * need["file_bytes_per_image"] / 2**20)


def test_the_pipeline_table_ends_with_that_need(pipeline_study: Study) -> None:
    stdout = pipeline_study.mnist.stdout
    assert "augment standard, decode fast;" in " ".join(stdout.split())  # the table's title
    said = [ln for ln in stdout.splitlines() if ln.startswith("each GPU at its compute-only rate (")]
    # mnist sees 28x28 grey images whatever --image-size says
    assert len(said) == 1 and re.search(r"needs [\d.]+ MiB/s of decoded 28x28x1 images host to device and "
                                        r"[\d.]+ MiB/s of files from storage \([\d.]+ KiB each\)", said[0]), said


def test_a_pipeline_study_folder_gathers_every_model(pipeline_study: Study) -> None:
    """The DLI lab's study: one run per model into one folder, which keeps each model's result
    and redraws the table and the lab's two plots over all of them."""
    out, proc = pipeline_study.out, pipeline_study.mnist
    assert sorted(p.name for p in out.iterdir()) == ["pipeline-mnist.json", "pipeline-trivial.json", "pipeline.md",
                                                    "pipeline_ratio.png", "pipeline_scatter.png"]
    assert proc.stdout.rstrip().endswith(f"wrote {out}: 2 row(s) in pipeline.md, pipeline_scatter.png and "
                                         "pipeline_ratio.png")
    table = (out / "pipeline.md").read_text()
    rows = [ln for ln in table.splitlines() if ln.startswith("| ") and not ln.startswith("| row")]
    assert [r.split("|")[1].strip() for r in rows] == ["trivial", "mnist"]  # in the order run
    mnist = json.loads((out / "pipeline-mnist.json").read_text())
    assert f"{mnist['degradation']:.3f}" in rows[1]
    assert (out / "pipeline_scatter.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_pipeline_notes_say_what_the_numbers_cannot_be() -> None:
    from ringleader.bench.pipeline import pipeline_notes

    def result(loader: list[float], syn: list[float], real: list[float], load: float = 0.5) -> dict[str, object]:
        syn_m, real_m = sorted(syn)[len(syn) // 2], sorted(real)[len(real) // 2]
        return {"runs": {"loader": loader, "synthetic": syn, "real": real}, "synthetic_images_per_sec": syn_m,
                "real_images_per_sec": real_m, "load_avg": {"before": [load, 0, 0]}, "cpus": 2}  # fmt: skip

    assert pipeline_notes(result([100, 110, 105], [50, 52, 51], [40, 41, 42])) == []
    faster = pipeline_notes(result([100, 110, 105], [50, 52, 51], [80, 82, 81]))
    assert len(faster) == 1 and faster[0].startswith("real data trained faster than synthetic data in every run")
    within = pipeline_notes(result([100, 110, 105], [50, 60, 55], [52, 58, 56]))
    assert within == ["real data's median is above synthetic data's within the runs' spread: no degradation that "
                      "these runs can tell from noise"]  # fmt: skip
    noisy = pipeline_notes(result([100, 500, 300], [50, 52, 51], [40, 41, 42], load=3.7))
    assert noisy[0].startswith("the loader runs varied 5.0x (100.0 to 500.0 images/s)")
    assert noisy[1] == "the machine was busy before the runs (load 3.7 on 2 cores): expect noise"


def test_scaling_through_the_runtime_writes_table_and_plots(
        tmp_path: Path, pipeline_json: Path) -> None:  # fmt: skip
    out = tmp_path / "scaling"
    env = {"RINGLEADER_HOME": str(tmp_path / "home")}
    proc = cli("bench", "scaling", "--backends", "gloo", "--workers", "1,2", "--model", "mnist",
               *TINY, "--busbw-max", "4K", "--out", str(out), "--pipeline-results",
               str(pipeline_json), "--repeat", "2", "-o", "json", env=env, timeout=LONG_TIMEOUT)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(proc.stdout)
    assert res["launcher"] == "runtime"
    assert [(r["backend"], r["gpus_per_server"]) for r in res["rows"]] == [("gloo", 1), ("gloo", 2)]
    assert res["rows"][0]["speedup"] == pytest.approx(1.0)
    for row in res["rows"]:  # two runs per point: median within min..max, warnings as the rule says
        assert row["repeats"] == 2 and row["throughput_min"] <= row["avg_throughput"] <= row["throughput_max"]
        flagged = row["scaling_efficiency"] > 1 or row["spread"] > 0.10
        assert bool(row["warnings"]) == flagged, row
    assert res["machine"]["load_start"]["cpus"] >= 1 and "load_1m" in res["machine"]["load_end"]
    # Each point's job is deleted once read: `list` shows none of them.
    assert json.loads(cli("list", "-o", "json", env=env).stdout) == []
    md = (out / "scaling.md").read_text()
    assert "| Backend | Servers | Ranks per server | Median step time (s) |" in md
    assert (out / "scaling.csv").read_text().startswith("backend,servers,gpus_per_server,")
    assert json.loads((out / "scaling.json").read_text())["rows"] == res["rows"]
    for png in ("speedup.png", "busbw.png", "pipeline_scatter.png", "pipeline_ratio.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (out / "report.html").read_text()
    assert html.count('src="data:image/png;base64,') == 4 and "Machine load" in html
    check_in_chromium(out / "report.html", images=4, shot="bench-scaling-report.png")


def test_scaling_skips_the_backends_this_machine_cannot_run_and_says_why(tmp_path: Path) -> None:
    """The Horovod lab's table asks for NCCL rows beside Gloo's: on a machine without CUDA the
    gloo rows are measured and the nccl rows skipped with the reason, in the table, the files and
    the JSON; a study of nothing but such backends is refused in one line, as before."""
    from ringleader.bench.ranks import cuda_count

    if cuda_count():
        pytest.skip("this machine runs nccl: nothing to skip")
    out = tmp_path / "scaling"
    study = ("bench", "scaling", "--workers", "1", "--model", "mnist", *TINY, "--repeat", "1", "--no-busbw",
             "--launcher", "local")  # fmt: skip
    proc = cli(*study, "--backends", "gloo,nccl", "--out", str(out), timeout=LONG_TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = "nccl skipped: the nccl backend needs CUDA GPUs and none is visible here"
    assert said in proc.stdout
    res = json.loads((out / "scaling.json").read_text())
    assert [r["backend"] for r in res["rows"]] == ["gloo"]
    assert res["skipped"] == {"nccl": "the nccl backend needs CUDA GPUs and none is visible here"}
    assert said in (out / "scaling.md").read_text() and said in (out / "report.html").read_text()
    refused = cli(*study, "--backends", "nccl", "--out", str(tmp_path / "none"))
    assert refused.returncode == 2 and refused.stderr.startswith("error: the nccl backend needs CUDA GPUs")


@pytest.mark.skipif(not HAS_MPI, reason="needs Open MPI")
def test_mpi_gradient_buckets_average_exactly_what_every_rank_computed() -> None:
    import subprocess
    import sys

    from ringleader.bench.launch import mpirun_command, rank_env

    env = rank_env(2)
    cmd = [sys.executable, str(Path(__file__).with_name("rank_gradsync.py"))]
    proc = subprocess.run(mpirun_command(2, cmd, env), env=env, capture_output=True, text=True, timeout=LONG_TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(proc.stdout)
    assert len(res) == 8
    for name, (worst, _, views_kept) in res.items():
        tolerance = 1e-6 if name.startswith("float32") else 1e-2  # bf16: one rounding of the sum
        assert worst <= tolerance, name
        assert views_kept == 1.0, name
    assert res["float32/1024/after"][1] == 6 and res["float32/67108864/after"][1] == 1


def _with_terminal_stderr(*args: str) -> tuple[str, str]:
    """Run the CLI with stderr on a pseudo-terminal (as a user's), stdout piped."""
    import os
    import pty
    import subprocess
    import sys

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "ringleader.cli.main", *args], stdout=subprocess.PIPE,
                            stderr=slave, text=True)  # fmt: skip
    os.close(slave)
    out, _ = proc.communicate(timeout=TIMEOUT)
    err = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the terminal's other end is closed: all read
            break
        if not chunk:
            break
        err += chunk
    os.close(master)
    assert proc.returncode == 0, err.decode()[-2000:]
    return out, err.decode(errors="replace")


def test_train_shows_what_it_does_on_a_terminal_only(json_on_terminal: tuple[str, str]) -> None:
    """`bench train` was silent for minutes: on a terminal, stderr names the phase and step;
    stdout (the table) stays clean, and -o json shows no progress."""
    out, err = _with_terminal_stderr("bench", "train", "--model", "trivial", *TINY)
    assert "# measuring trivial: building the model" in err and "\r" not in out
    assert out.splitlines()[0].startswith("Model:")
    out, err = json_on_terminal
    assert "measuring" not in err and json.loads(out)["kind"] == "train"


def test_nhwc_trains_channels_last_as_tuned_recipes_do() -> None:
    """--data-format NHWC (tf_cnn_benchmarks' --data_format) trains the model and its batches in
    channels-last memory, the layout tuned mixed-precision recipes use; the result says which
    layout ran, and the default is PyTorch's NCHW."""
    import torch

    comm = Comm(RankInfo(0, 1, 0, "none"), torch.device("cpu"))
    comm.backend = "gloo"
    conv = {}
    for data_format in ("NCHW", "NHWC"):
        # mnist's convolutions, not a big model's: the layout is the model's, whatever its size.
        # Its second one: a weight of one input channel reads as channels-last in either layout.
        step = Step(TrainConfig(model="mnist", data_format=data_format), comm)
        weight = [p for p in step.net.parameters() if p.dim() == 4][-1]
        assert weight.shape[1] > 1
        conv[data_format] = weight.is_contiguous(memory_format=torch.channels_last)
        images, labels = torch.randn(2, 1, 28, 28), torch.tensor([0, 1])
        assert torch.isfinite(step(images, labels))
        assert weight.is_contiguous(memory_format=torch.channels_last) == conv[data_format]  # stays so
    assert conv == {"NCHW": False, "NHWC": True}
    res = cli_json("bench", "train", "--model", "mnist", "--backend", "gloo", "-np", "1", "--data-format", "NHWC",
                   *TINY)  # fmt: skip
    assert res["data_format"] == "NHWC" and res["images_per_sec_total"] > 0
    bad = cli("bench", "train", "--data-format", "NWHC", *TINY)
    assert bad.returncode == 2 and "NWHC" in bad.stderr
