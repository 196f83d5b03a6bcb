"""Benchmark numbers a user can trust: repeats summarised as median/min/max, suspicious rows
flagged, plots that show the spread; nccl-tests' -a, -z, -t, -g and --op all, its per-rank
"Using devices" block, and progress while a long size runs."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from waiting import WAIT_S

from .conftest import cli, cli_json

SMALL = ("-b", "1K", "-e", "4K", "-n", "3", "-w", "1")


def _point(workers: int, thr: float) -> dict:
    return {"backend": "gloo", "world_size": workers, "images_per_sec_total": thr, "step_time_s": 8 * workers / thr,
            "step_times_s": [8 * workers / thr], "nodes": 1, "load": {"load_1m": 1.5}}  # fmt: skip


def test_repeats_give_median_range_and_warnings() -> None:
    from ringleader.bench.scaling import markdown, table_rows

    points = [_point(1, t) for t in (100.0, 104.0, 98.0)] + [_point(2, t) for t in (150.0, 260.0, 190.0)]
    one, two = table_rows(points)
    assert (one["avg_throughput"], one["throughput_min"], one["throughput_max"]) == (100.0, 98.0, 104.0)
    assert one["repeats"] == 3 and one["spread"] == pytest.approx(0.06) and one["warnings"] == []
    assert two["speedup"] == pytest.approx(1.9) and two["speedup_min"] == pytest.approx(1.5)
    assert two["speedup_max"] == pytest.approx(2.6)
    assert two["warnings"] == ["spread 58% > 10% over 3 runs: too noisy to trust"]
    fast = table_rows([_point(1, 100.0), _point(2, 269.0)])[1]
    assert fast["scaling_efficiency"] == pytest.approx(1.345) and fast["spread"] is None
    assert fast["warnings"][0].startswith("efficiency 134% > 100%")
    md = markdown([one, two], "t")
    assert "| gloo | 1 | 2 | " in md and "150.0-260.0 | 3 | spread 58% > 10%" in md


def test_speedup_plot_has_whole_worker_ticks_error_bars_and_model_in_title(tmp_path: Path) -> None:
    import matplotlib

    from ringleader.bench.plots import speedup
    from ringleader.bench.scaling import table_rows

    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text, so the test can read it
    rows = table_rows([_point(w, t) for w in (1, 2, 3) for t in (100.0 * w, 90.0 * w)])
    svg = (Path(speedup(rows, tmp_path / "speedup.svg", "resnet50", 32))).read_text()
    assert "Speedup vs workers: resnet50, batch 32 per worker" in svg
    xticks = re.findall(r'<g id="xtick_\d+">.*?>([^<]+)</text>', svg, re.S)
    assert xticks == ["1", "2", "3"]  # whole workers only
    assert "median of 2, bars min-max" in svg


@pytest.mark.slow
def test_nccl_tests_flags_and_every_rank_in_using_devices() -> None:
    proc = cli("bench", "allreduce", *SMALL, "--op", "all", "-a", "3", "-z", "1", "-np", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert "nThread 1 nGpus 1" in lines[0] and "blocking: 1 time: max" in lines[0]
    ranks = [ln for ln in lines if re.match(r"^#  Rank +\d+ Group +0 Pid +\d+ on +\S+ device cpu$", ln)]
    assert len(ranks) == 2 and len({ln.split()[6] for ln in ranks}) == 2  # two processes
    assert any(re.match(r"^# Machine: load average [\d.]+ [\d.]+ [\d.]+ on \d+ cores at ", ln) for ln in lines)
    rows = [ln.split() for ln in lines if not ln.startswith("#") and ln.strip()]
    assert [(r[0], r[3]) for r in rows] == [(s, op) for s in ("1024", "2048", "4096") for op in ("sum", "avg")]
    threads = cli("bench", "allreduce", *SMALL, "-t", "2", "-g", "2")
    assert threads.returncode == 0, threads.stderr[-2000:]
    assert "nranks 4 nThread 2 nGpus 2" in threads.stdout and threads.stdout.count("#  Rank ") == 4
    res = cli_json("bench", "allreduce", *SMALL, "-a", "2", "-np", "2")
    assert res["time_over_ranks"] == "min" and [d["rank"] for d in res["devices"]] == [0, 1]
    assert res["load"]["cpus"] >= 1 and res["load"]["load_1m"] >= 0


def test_bad_nccl_tests_values_are_usage_errors() -> None:
    from ringleader.cli.main import main

    for args in (["-a", "5"], ["-z", "2"], ["-t", "0"], ["--op", "max"]):
        assert main(["bench", "allreduce", *args]) == 2, args


@pytest.mark.slow
def test_progress_shows_on_a_terminal_and_is_cleared() -> None:
    """On a terminal, stderr names the size being measured; stdout keeps only the table."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "ringleader.cli.main", "bench", "allreduce", "-b", "16M",
                             "-e", "16M", "-n", "20", "-w", "1", "-np", "2"],
                            stdout=subprocess.PIPE, stderr=slave, text=True)  # fmt: skip
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 2 * WAIT_S  # reads until the end; the deadline only ends a hang
    while proc.poll() is None and time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                seen += os.read(master, 4096)
            except OSError:
                break
    out, _ = proc.communicate(timeout=WAIT_S)
    os.close(master)
    assert proc.returncode == 0
    text = seen.decode(errors="replace")
    assert re.search(r"# measuring 16777216 B sum (out-of-place|in-place) \d+/20 \(\d+ s elapsed\)", text), text
    assert text.rstrip(" \r\n").endswith("\x1b[K")  # cleared: nothing left over the table
    assert "measuring" not in out and re.search(r"^\s+16777216\s", out, re.M)


@pytest.mark.slow
def test_runtime_points_are_deleted_unless_kept(tmp_path: Path) -> None:
    from ringleader.bench.launchers import RuntimeLauncher

    cfg = {"minbytes": 1024, "maxbytes": 1024, "factor": 2, "iters": 2, "warmup": 1, "check": 1}
    for keep in (False, True):
        home = tmp_path / f"keep-{keep}"
        launcher = RuntimeLauncher(home=str(home), keep=keep)
        result = launcher.run("allreduce", cfg, "gloo", 2, threads=1)
        assert result["out_of_bounds"] == 0 and result["job"].startswith("bench-allreduce-gloo-2-")
        listed = [v.name for v in launcher.rt.list_jobs()]
        assert listed == ([result["job"]] if keep else [])


def test_servers_split_each_worker_count_into_lab_7s_layouts() -> None:
    """Lab 7's second table: servers x ranks per server. Each worker count is split over each
    server count that divides it; a row per layout, so 2 ranks on one server and 1 rank on each
    of two servers are two rows, both with their speedup over the 1-rank run."""
    from ringleader.bench.scaling import ScalingConfig, markdown, table_rows

    cfg = ScalingConfig(backends=["gloo"], workers=[1, 2, 4], servers=[1, 2], out="x")
    assert cfg.layouts == [(1, 1), (1, 2), (2, 2), (1, 4), (2, 4)]  # (servers, workers)
    points = [_point(1, 100.0), _point(2, 180.0), {**_point(2, 60.0), "nodes": 2}]
    rows = table_rows(points)
    assert [(r["servers"], r["gpus_per_server"]) for r in rows] == [(1, 1), (1, 2), (2, 1)]
    assert [r["speedup"] for r in rows] == pytest.approx([1.0, 1.8, 0.6])
    assert "| gloo | 2 | 1 | " in markdown(rows, "t")


def test_the_speedup_plot_draws_a_line_per_server_count(tmp_path: Path) -> None:
    import matplotlib

    from ringleader.bench.plots import speedup
    from ringleader.bench.scaling import table_rows

    matplotlib.rcParams["svg.fonttype"] = "none"
    rows = table_rows([_point(1, 100.0), _point(2, 180.0), {**_point(2, 60.0), "nodes": 2}])
    svg = Path(speedup(rows, tmp_path / "speedup.svg", "alexnet", 16)).read_text()
    assert "gloo, 1 server (median of 1" in svg and "gloo, 2 servers (median of 1" in svg


def test_several_servers_need_ranks_placed_as_jobs() -> None:
    """A layout over several servers cannot be run by local processes: one line, nothing run."""
    proc = cli("bench", "scaling", "--servers", "1,2", "--workers", "2", "--launcher", "local", "--out", "x")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: --servers 2 places ranks on several servers")
    assert "--launcher runtime" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    bad = cli("bench", "scaling", "--servers", "0", "--out", "x")
    assert bad.returncode == 2 and "--servers" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
