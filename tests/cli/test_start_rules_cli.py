"""`submit --run-time/--start/--max-wait` on the embedded engine: a gang that finishes sooner by
waiting says so with both predicted finishes and holds its GPUs; it starts on them when they free,
or on what is free once its longest wait is over; bad combinations are refused in one line."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from clijobs import wait_until

pytestmark = pytest.mark.slow  # multi-process runs of seconds each: run early (tests/conftest.py)

Cli = Any  # the `seeds_cli` fixture of tests/cli/conftest.py


def busy(cli: Cli, name: str, run_time: str) -> None:
    """Six of a node's eight GPUs, for ``run_time`` as far as the queue knows."""
    cli.ok("submit", "mpi", "--name", name, "--workers", "6", "--gpus", "1", "--gputopology",
           "--run-time", run_time, "--", "sleep", "600")  # fmt: skip


def vgg(cli: Cli, name: str, *extra: str) -> str:
    return cli.ok("submit", "mpi", "--name", name, "--workers", "4", "--gpus", "1", "--gputopology",
                  "--model", "vgg16", "--run-time", "1h", *extra, "--", "sleep", "600")  # fmt: skip


def job(cli: Cli, name: str) -> dict[str, Any]:
    return json.loads(cli.ok("get", name, "-o", "json"))  # type: ignore[no-any-return]


def nodes_of(data: dict[str, Any]) -> set[str]:
    return {w["node"] for w in data["placement"]["chosen"]["workers"]}


def test_a_gang_waits_for_one_node_when_that_finishes_sooner_and_starts_there(seeds_cli: Cli) -> None:
    busy(seeds_cli, "block-a", "10m")
    busy(seeds_cli, "block-b", "10h")
    first = nodes_of(job(seeds_cli, "block-a"))
    vgg(seeds_cli, "vgg")
    data = job(seeds_cli, "vgg")
    assert data["status"] == "PENDING"
    reason = data["reason"]
    assert "waits: it finishes sooner (by ~" in reason
    assert "start now on cn-shanghai-172[2w: GPU 6,7] + cn-shanghai-173[2w: GPU 6,7] at " in reason
    # block-a's run ends 10 min after its start, less what the submits between took on this machine
    waits = re.search(r"start in ~(\d+) min on [^;]*? finishes in ~(\d+) min", reason)
    assert waits is not None, reason
    start_min, finish_min = int(waits[1]), int(waits[2])
    assert 5 <= start_min <= 10 and abs(finish_min - start_min - 60) <= 1, reason  # then its 1 h at best
    when = data["placement"]["when"]
    assert when["rule"] == "finish" and not when["starts_now"]
    # times in RFC 3339 as every time -o json shows (UTC, to the microsecond: they sort as text)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", when["wait"]["finish"]), when["wait"]
    assert data["created_at"] < when["wait"]["start"] < when["wait"]["finish"] < when["now"]["finish"]
    assert data["placement"]["reservation"]["start"] == when["wait"]["start"]
    text = seeds_cli.ok("get", "vgg")
    assert "waits: it finishes sooner" in text and "reserved GPUs" in text
    held = {(w["node"], g) for w in data["placement"]["reservation"]["workers"] for g in w["gpus"]}
    assert {node for node, _ in held} == first
    # a 2-GPU job behind it takes no GPU it holds
    seeds_cli.ok("submit", "mpi", "--name", "small", "--workers", "2", "--gpus", "1", "--gputopology",
                 "--", "sleep", "600")  # fmt: skip
    small = job(seeds_cli, "small")["placement"]["chosen"]["workers"]
    assert not held & {(w["node"], g) for w in small for g in w["gpus"]}
    # the node frees: the gang starts on it, all four workers on one node
    seeds_cli.ok("delete", "block-a")
    started = job(seeds_cli, "vgg")
    assert started["status"] == "RUNNING" and nodes_of(started) == first


def test_the_longest_wait_ends_the_wait_without_any_job_ending(seeds_cli: Cli) -> None:
    """block-a was to end in 2 s and runs on: at the longest wait, 6 s after its submit, the gang
    starts spread, while both blocks still run. On a busy machine the gang's submit may come so
    long after block-a's start that block-a, overrunning, is expected to free only after the
    longest wait: then no later start is weighed and it starts at once, as it should."""
    busy(seeds_cli, "block-a", "2s")
    busy(seeds_cli, "block-b", "10h")
    vgg(seeds_cli, "vgg", "--max-wait", "6s")
    data = wait_until(seeds_cli, "vgg", lambda view: view.status.value != "PENDING", "vgg to leave the queue")
    assert data["status"] == "RUNNING" and len(nodes_of(data)) == 2  # spread, as rule "now" would
    waited = datetime.fromisoformat(data["started_at"]) - datetime.fromisoformat(data["created_at"])
    if waited.total_seconds() < 6:  # started at its submit: no later start within its longest wait
        when = data["placement"]["when"]
        assert waited.total_seconds() == 0 and when["starts_now"] and when["wait"] is None, (waited, when)
    assert job(seeds_cli, "block-a")["status"] == job(seeds_cli, "block-b")["status"] == "RUNNING"


def test_best_waits_however_long_and_now_starts_spread(seeds_cli: Cli) -> None:
    busy(seeds_cli, "block-a", "5h")
    busy(seeds_cli, "block-b", "10h")
    vgg(seeds_cli, "best", "--start", "best")
    assert job(seeds_cli, "best")["reason"].startswith("waits for a placement as fast as its best")
    seeds_cli.ok("delete", "best")
    vgg(seeds_cli, "now", "--start", "now")
    assert len(nodes_of(job(seeds_cli, "now"))) == 2


def test_the_users_risk_decides_a_wait_that_wins_only_on_the_predictions(seeds_cli: Cli) -> None:
    """The node frees in 3.2 h: waiting for it wins on the model's predictions (spread runs the
    hour in ~4.5 h), not at the pessimistic end of their likely ranges. With --risk averse the
    gang starts spread now; risk neutral (the default) waits, and says it took the predictions."""
    busy(seeds_cli, "block-a", "192m")
    busy(seeds_cli, "block-b", "10h")
    vgg(seeds_cli, "averse", "--risk", "averse")
    averse = job(seeds_cli, "averse")
    assert averse["status"] == "RUNNING" and len(nodes_of(averse)) == 2
    assert averse["placement"]["request"]["risk"] == "averse"
    seeds_cli.ok("delete", "averse")
    vgg(seeds_cli, "neutral")
    neutral = job(seeds_cli, "neutral")
    assert neutral["status"] == "PENDING", neutral
    assert "waits: it finishes sooner (by ~" in neutral["reason"]
    assert "taking the predictions as they are (risk neutral)" in neutral["reason"]
    assert neutral["placement"]["request"]["risk"] == "neutral"
    assert neutral["placement"]["when"]["at_risk"] is None


def test_start_options_refused_in_one_line(seeds_cli: Cli) -> None:
    for extra, words in (
        (("--start", "finish"), "--start finish weighs how long the job runs"),
        (("--max-wait", "10m"), "--max-wait bounds a wait for better GPUs"),
        (("--run-time", "0s"), "--run-time '0s' must be more than 0 s"),
        (("--start", "later"), "Invalid value for '--start'"),
        (("--risk", "neutral"), "--risk weighs a wait for better GPUs"),
        (("--risk", "bold", "--run-time", "1h"), "Invalid value for '--risk'"),
    ):
        out = seeds_cli("submit", "mpi", "--name", "x", "--workers", "2", "--gpus", "1", *extra, "--", "true")
        assert out.returncode == 2, out
        assert words in out.stderr and len(out.stderr.strip().splitlines()) <= 2, out.stderr
    assert seeds_cli.ok("list").count("\n") <= 1  # nothing was queued


def test_a_calibration_kept_with_the_job_prices_its_placements(seeds_cli: Cli, tmp_path: Path) -> None:
    """--calibration: measured on this cluster, the network is as fast as NVLink, so starting
    spread now costs nothing and the gang starts at once; a bad file is one line, nothing queued."""
    fast = tmp_path / "fast.json"
    fast.write_text(json.dumps({"kind": "calibration", "version": 1, "sources": [], "compute": [], "overlap": None,
                                "sync": None, "links": {"network": {"gbs": 300.0, "latency_us": 1.0}}}))  # fmt: skip
    busy(seeds_cli, "block-a", "10m")
    busy(seeds_cli, "block-b", "10h")
    vgg(seeds_cli, "vgg", "--calibration", str(fast))
    data = job(seeds_cli, "vgg")
    assert data["status"] == "RUNNING" and len(nodes_of(data)) == 2
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    out = seeds_cli("submit", "mpi", "--name", "x", "--workers", "4", "--gpus", "1", "--run-time", "1h",
                    "--calibration", str(bad), "--", "true")  # fmt: skip
    assert out.returncode == 2 and "calibration file" in out.stderr and len(out.stderr.strip().splitlines()) <= 2
    assert "x" not in [line.split()[0] for line in seeds_cli.ok("list").splitlines()[1:]]


def test_steps_and_the_models_step_time_give_the_run_time(seeds_cli: Cli) -> None:
    busy(seeds_cli, "block-a", "10m")
    busy(seeds_cli, "block-b", "10h")
    out = seeds_cli("submit", "mpi", "--name", "vgg", "--workers", "4", "--gpus", "1", "--gputopology",
                    "--model", "vgg16", "--steps", "14000", "--", "sleep", "600")  # fmt: skip
    assert out.returncode == 0, out.stderr
    # 4 x 64 images a step at the model's 910 images/s; said with the other notes, on stderr
    assert "run time from --steps: 14000 steps x 0.28" in out.stderr
    data = job(seeds_cli, "vgg")
    request = data["placement"]["request"]
    assert request["start"] == "finish" and 3800 < request["run_time_s"] < 4100
    assert data["status"] == "PENDING" and "waits: it finishes sooner" in data["reason"]
    for extra, words in (((), "--steps needs the model's step time"),
                         (("--model", "vgg16", "--run-time", "1h"), "--steps and --run-time both say")):  # fmt: skip
        bad = seeds_cli("submit", "mpi", "--name", "x", "--workers", "2", "--gpus", "1", "--steps", "10", *extra,
                        "--", "true")  # fmt: skip
        assert bad.returncode == 2 and words in bad.stderr, bad.stderr


def test_the_queue_weighs_the_batch_and_precision_the_command_line_names(seeds_cli: Cli) -> None:
    """A gang that trains VGG-16 at batch 16 in fp16 is three times more bound by the network
    than at batch 64 in fp32: the rates the queue weighs its start by are those `predict` gives
    for that batch and precision on the same placements (they were batch 64, fp32, whatever
    the job ran), so the wait it shows is the one the user would compute."""
    busy(seeds_cli, "block-a", "10m")
    busy(seeds_cli, "block-b", "10h")
    seeds_cli.ok("submit", "mpi", "--name", "small-batch", "--workers", "4", "--gpus", "1", "--gputopology",
                 "--model", "vgg16", "--run-time", "1h", "--", "sleep", "600", "--batch_size=16",
                 "--use_fp16")  # fmt: skip
    when = job(seeds_cli, "small-batch")["placement"]["when"]
    for side in ("now", "wait"):
        gpus: dict[str, list[str]] = {}
        for worker in when[side]["workers"]:
            gpus.setdefault(worker["node"], []).extend(str(g) for g in worker["gpus"])
        placement = "+".join(f"{node}:{','.join(ids)}" for node, ids in gpus.items())
        predicted = json.loads(seeds_cli.ok("predict", "--model", "vgg16", "--batch-size", "16", "--precision", "fp16",
                                            "--placement", placement, "-o", "json"))["predictions"][0]  # fmt: skip
        assert when[side]["images_per_s"] == pytest.approx(predicted["images_per_s"], abs=0.05), side  # rounded
