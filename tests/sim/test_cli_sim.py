"""`ringleader simulate` and `simulate gen-trace` end to end on a tiny case (real model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ringleader.cli.main import main
from ringleader.sim.families import best_step_fn, window_load
from ringleader.sim.trace import load_trace
from ringleader.topology import load_cluster_file

CLUSTER = """nodes:
  - name: v100
    preset: dgx1v
    network_gbps: 25
    count: 2
"""
TRACE = """name,arrival_s,workers,gpus,model,batch_size,iterations,priority
a,0,4,1,vgg16,64,200,0
b,10,1,2,resnet50,64,300,0
c,20,2,4,alexnet,256,100,1
d,30,8,1,resnet50,64,100,0
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    cluster, trace = tmp_path / "c.yaml", tmp_path / "t.csv"
    cluster.write_text(CLUSTER)
    trace.write_text(TRACE)
    return cluster, trace


def test_table_json_and_pngs(files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster, trace = files
    out = tmp_path / "out"
    assert main(["simulate", "--cluster", str(cluster), "--trace", str(trace), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "AVG JCT (h)" in text and "IMAGES/S" in text
    for policy in ("topology", "default", "besteffort", "ack"):
        assert f"\n{policy} " in "\n" + text
    for name in ("jct_cdf.png", "utilization.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "summary.csv").read_text().startswith("POLICY,DONE,REJECTED")
    assert len((out / "jobs-topology.csv").read_text().splitlines()) == 5

    assert (
        main(
            [
                "simulate",
                "run",
                "--cluster",
                str(cluster),
                "--trace",
                str(trace),
                "--policies",
                "topology,default",
                "-o",
                "json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    by = {p["policy"]: p for p in data["policies"]}
    assert set(by) == {"topology", "default"}
    assert by["topology"]["completed"] == 4 and data["rejected"] == []
    # 4 single-GPU vgg16 workers: packed on one node beats spread 2+2 over the network.
    assert by["topology"]["avg_jct_s"] < by["default"]["avg_jct_s"]
    assert by["topology"]["images_per_s"] > by["default"]["images_per_s"]


def test_never_fitting_job_listed(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    cluster, trace = files
    trace.write_text(TRACE + "huge,40,4,8,vgg16,64,10,0\n")
    assert main(["simulate", "--cluster", str(cluster), "--trace", str(trace), "--policies", "ack", "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["policies"][0]["rejected"] == 1 and data["policies"][0]["completed"] == 4
    [item] = data["rejected"]
    assert item["job"] == "huge" and item["reason"].startswith("never fits this cluster")
    assert main(["simulate", "--cluster", str(cluster), "--trace", str(trace), "--policies", "ack"]) == 0
    assert "rejected (ack): huge: never fits this cluster" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--policies", "topology,magic"],
            "unknown policy 'magic'. To fix: use one of ack, besteffort, default, throughput, topology",
        ),
        (["--policies", ""], "--policies is empty"),
    ],
)
def test_bad_policies(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    cluster, trace = files
    assert main(["simulate", "--cluster", str(cluster), "--trace", str(trace), *args]) == 2
    err = capsys.readouterr().err
    assert expected in err and len(err.strip().splitlines()) == 1


def test_malformed_trace_names_the_line(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    cluster, trace = files
    trace.write_text(TRACE + "e,50,two,1,vgg16,64,10,0\n")
    assert main(["simulate", "--cluster", str(cluster), "--trace", str(trace)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {trace} line 6: workers='two' is not an integer")
    assert len(err.splitlines()) == 1


def test_unknown_model_is_a_usage_error(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    cluster, trace = files
    trace.write_text(TRACE + "e,50,1,1,gpt5,64,10,0\n")
    assert main(["simulate", "--cluster", str(cluster), "--trace", str(trace), "--policies", "topology"]) == 2
    assert "unknown model 'gpt5'" in capsys.readouterr().err


def test_gen_trace_is_deterministic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    for path in (a, b):
        args = ["simulate", "gen-trace", "--jobs", "50", "--seed", "3", "--arrival-rate", "6", "--out", str(path)]
        assert main(args) == 0
    assert a.read_bytes() == b.read_bytes()
    assert "wrote 50 jobs" in capsys.readouterr().out
    assert main(["simulate", "gen-trace", "--jobs", "0", "--arrival-rate", "6", "--out", str(a)]) == 2


def test_every_simulate_command_has_help_and_docs() -> None:
    from ringleader.cli.sim import simulate_group

    docs = (Path(__file__).parents[2] / "docs" / "sim.md").read_text()
    assert "ringleader simulate " in docs
    for name, command in simulate_group.commands.items():
        assert command.help and command.help.strip()
        assert f"simulate {name}" in docs or (name == "run" and "simulate run" in docs), name
        for param in command.params:
            if param.name not in ("help",) and getattr(param, "opts", None):
                opt = max(param.opts, key=len)
                assert opt in docs or opt == "--output", opt  # -o json is documented


def test_start_rules_and_preemption_compared(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    cluster, trace = files
    code = main(["simulate", "--cluster", str(cluster), "--trace", str(trace), "--policies", "topology,default",
                 "--start", "now,finish", "--preempt", "-o", "json"])  # fmt: skip
    assert code == 0
    names = [p["policy"] for p in json.loads(capsys.readouterr().out)["policies"]]
    assert names == ["topology/now", "topology/finish", "default/now", "default/finish"]


@pytest.mark.parametrize(("value", "words"), [
    ("later", "unknown start rule 'later'"), ("now,now", "a start rule is given twice"), (",", "--start is empty"),
])  # fmt: skip
def test_bad_start_rules(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str], value: str, words: str) -> None:
    cluster, trace = files
    assert main(["simulate", "--cluster", str(cluster), "--trace", str(trace), "--start", value]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) <= 2


def test_the_committed_2x8_results_are_what_the_documented_command_gives(tmp_path: Path) -> None:
    """docs/sim.md's 2 x 8 table and examples/sim/results-2x8 come from one command: a rerun gives
    the same figures (all but the wall times, which are the machine's)."""
    examples = Path(__file__).resolve().parents[2] / "examples" / "sim"
    out = tmp_path / "again"
    assert main(["simulate", "--cluster", str(examples / "cluster-2x8-v100.yaml"), "--trace",
                 str(examples / "trace-2x8-v100.csv"), "--policies", "throughput,topology,ack,besteffort,default",
                 "--out", str(out)]) == 0  # fmt: skip

    def figures(path: Path) -> list[list[str]]:
        return [row.split(",")[:-1] for row in path.read_text().splitlines()]  # WALL (s) last

    assert figures(out / "summary.csv") == figures(examples / "results-2x8" / "summary.csv")


def test_gen_trace_of_a_family_then_simulated_with_an_order_and_estimates(
    files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, _ = files
    trace = tmp_path / "pai.csv"
    args = ["simulate", "gen-trace", "--family", "pai", "--jobs", "30", "--seed", "2", "--load", "0.5",
            "--cluster", str(cluster), "--out", str(trace)]  # fmt: skip
    assert main(args) == 0 and "wrote 30 jobs" in capsys.readouterr().out
    runs = {}
    for order in ("fifo", "srtf"):
        code = main(["simulate", "--cluster", str(cluster), "--trace", str(trace), "--policies", "topology",
                     "--order", order, "--estimate-error", "biased", "--risk", "averse", "--prediction-error",
                     "--start", "finish", "-o", "json"])  # fmt: skip
        assert code == 0
        runs[order] = json.loads(capsys.readouterr().out)["policies"][0]
    assert runs["fifo"]["jobs"] == runs["srtf"]["jobs"] == 30
    assert runs["srtf"]["avg_jct_s"] <= runs["fifo"]["avg_jct_s"] * 1.05


def test_gen_trace_of_a_family_with_a_process_per_gpu_writes_gangs_that_may_spread(
    files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, _ = files
    traces = {}
    for shape in ((), ("--process-per-gpu",)):
        trace = tmp_path / f"helios{len(shape)}.csv"
        args = ["simulate", "gen-trace", "--family", "helios", "--jobs", "200", "--seed", "3", "--load", "0.9",
                "--cluster", str(cluster), "--out", str(trace), *shape]  # fmt: skip
        assert main(args) == 0, capsys.readouterr().err
        traces[shape] = load_trace(trace)
    whole, split = traces[()], traces[("--process-per-gpu",)]
    assert [j.workers * j.gpus for j in split] == [j.workers * j.gpus for j in whole]
    assert any(j.workers == 1 and j.gpus > 1 for j in whole)
    assert all(j.gpus == 1 for j in split if j.workers * j.gpus <= 8)
    assert main(["simulate", "gen-trace", "--jobs", "5", "--arrival-rate", "6", "--process-per-gpu",
                 "--out", str(tmp_path / "t.csv")]) == 2  # fmt: skip
    assert "--process-per-gpu shapes a --family trace" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "words"), [
    (["--family", "pai", "--load", "0.5"], "--family needs --cluster and --load"),
    ([], "give --arrival-rate (jobs per hour) or --family"),
])  # fmt: skip
def test_gen_trace_family_needs_its_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], words: str
) -> None:
    assert main(["simulate", "gen-trace", "--jobs", "5", "--out", str(tmp_path / "t.csv"), *args]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) <= 2


def test_a_bad_estimate_error_is_one_line(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    cluster, trace = files
    assert main(["simulate", "--cluster", str(cluster), "--trace", str(trace), "--estimate-error", "wild"]) == 2
    err = capsys.readouterr().err
    assert "bad --estimate-error 'wild'" in err and len(err.strip().splitlines()) <= 2


def test_gen_trace_of_a_family_offers_its_load_to_the_whole_cluster_whatever_the_largest_gang(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--cluster-gpus caps the gangs drawn, not the cluster the load is offered to: 0.9 asked of
    the 64 x 8 GPUs with gangs of at most 16 is 0.9 of 512 GPUs held over the arrival window."""
    cluster = Path(__file__).resolve().parents[2] / "examples" / "sim" / "cluster-64x8-v100.yaml"
    trace = tmp_path / "helios.csv"
    args = ["simulate", "gen-trace", "--family", "helios", "--jobs", "2000", "--seed", "1", "--load", "0.9",
            "--cluster", str(cluster), "--cluster-gpus", "16", "--out", str(trace)]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    jobs = load_trace(trace)
    assert max(j.workers * j.gpus for j in jobs) <= 16
    best = best_step_fn(load_cluster_file(cluster))
    runs = [(j.workers * j.gpus, j.iterations * best(j)) for j in jobs]
    assert window_load(runs, [j.arrival_s for j in jobs], 512) == pytest.approx(0.9, rel=0.02)


def test_the_engines_queue_unless_told_otherwise(tmp_path: Path) -> None:
    """`simulate` runs the queue the engines run: the gang that does not fit gets a reservation,
    and a small job that came after it waits. With --no-reservations the small job starts on
    the GPUs free beside the first job and the gang waits for both to end."""
    cluster, trace = tmp_path / "c.yaml", tmp_path / "t.csv"
    cluster.write_text(CLUSTER.replace("count: 2", "count: 1"))
    trace.write_text("name,arrival_s,workers,gpus,model,batch_size,iterations,priority\n"
                     "first,0,1,4,resnet50,64,2000,0\ngang,10,1,8,resnet50,64,200,0\n"
                     "small,20,1,2,resnet50,64,4000,0\n")  # fmt: skip

    def starts(*args: str) -> dict[str, float]:
        out = tmp_path / "-".join(("out", *args))
        assert main(["simulate", "--cluster", str(cluster), "--trace", str(trace), "--policies", "topology",
                     "--out", str(out), *args]) == 0  # fmt: skip
        rows = (out / "jobs-topology.csv").read_text().splitlines()
        header = rows[0].split(",")
        return {r.split(",")[0]: float(r.split(",")[header.index("start_s")]) for r in rows[1:]}

    engines, plain = starts(), starts("--no-reservations")
    assert engines["small"] > engines["gang"] > engines["first"] == 0.0
    assert plain["small"] == 20.0 and plain["gang"] > engines["gang"]


def test_moves_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--moves`: the VGG16 gang that had to start spread 2 + 2 (two six-GPU gangs hold the rest)
    moves to one node once the short gang there ends, as the engines move it; the table says how
    many moves each policy made and JSON counts them. Without the flag nothing moves."""
    cluster, trace = tmp_path / "c.yaml", tmp_path / "t.csv"
    cluster.write_text(CLUSTER)
    trace.write_text("name,arrival_s,workers,gpus,model,batch_size,iterations,priority\n"
                     "short,0,6,1,resnet50,64,2000,0\nlong,0,6,1,resnet50,64,200000,0\n"
                     "vgg,1,4,1,vgg16,64,40000,0\n")  # fmt: skip
    args = ["simulate", "--cluster", str(cluster), "--trace", str(trace), "--policies", "topology"]
    assert main([*args, "--moves"]) == 0
    assert "topology: 1 gang move(s) to a better placement" in capsys.readouterr().out
    assert main([*args, "--moves", "-o", "json"]) == 0
    moved = json.loads(capsys.readouterr().out)["policies"][0]
    assert main([*args, "-o", "json"]) == 0
    stayed = json.loads(capsys.readouterr().out)["policies"][0]
    assert moved["moved"] == 1 and "moved" not in stayed and moved["avg_jct_s"] < stayed["avg_jct_s"]
