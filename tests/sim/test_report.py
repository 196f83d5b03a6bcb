"""What `simulate --out` shows: plots that keep coinciding policies apart and say so, a
utilization plot with a stated bin width, and one self-contained HTML report that a browser
renders with every image (headless Chromium, when installed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rendering import check_in_chromium
from ringleader.cli.main import main
from ringleader.sim import compare_policies, generate_trace, parse_trace, write_outputs
from ringleader.sim.plots import bin_width_s, legend_labels
from ringleader.sim.summary import identical_groups
from ringleader.topology import load_cluster_file

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "examples" / "seeds-cluster.yaml"
# Two-GPU jobs, one at a time: besteffort and ack pick the same GPUs every time, topology and
# default other ones (checked below), so two curves coincide exactly.
SPACED = "name,arrival_s,workers,gpus,model,batch_size,iterations,priority\n" + "".join(
    f"j{i},{i * 10000},1,2,resnet50,64,100,0\n" for i in range(4)
)
POLICIES = ["topology", "default", "besteffort", "ack"]


@pytest.fixture(scope="module")
def spaced():
    return compare_policies(load_cluster_file(CLUSTER), parse_trace(SPACED, "spaced.csv"), POLICIES)


def test_policies_that_placed_identically_are_named_in_legend_json_and_table(spaced, tmp_path, capsys) -> None:
    assert identical_groups(spaced.runs) == [["besteffort", "ack"]]
    labels = legend_labels(spaced.runs)
    assert labels["ack"] == "ack (same placements as besteffort)" and labels["topology"] == "topology"
    trace = tmp_path / "spaced.csv"
    trace.write_text(SPACED)
    assert main(["simulate", "--cluster", str(CLUSTER), "--trace", str(trace), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["identical_placements"] == [["besteffort", "ack"]]
    assert main(["simulate", "--cluster", str(CLUSTER), "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "note: besteffort, ack placed every job identically" in out
    assert "--out DIR also writes" in out  # plots only with --out: the table says so


def test_utilization_bins_are_round_and_stated() -> None:
    assert bin_width_s(84 * 3600) == 7200  # 84 h -> 42 bins of 2 h
    assert bin_width_s(3000) == 120  # 50 min -> 25 bins of 2 min
    assert bin_width_s(10**9) == 86400  # capped at a day


def test_report_is_self_contained_and_renders(spaced, tmp_path) -> None:
    written = write_outputs(spaced, tmp_path / "spaced", title="4 jobs, 2 nodes")
    assert "besteffort, ack placed every job identically" in (tmp_path / "spaced" / "report.html").read_text()
    busy = compare_policies(load_cluster_file(CLUSTER), generate_trace(120, 1, 6.0, 16), POLICIES)
    same_times = identical_groups(busy.runs, placements=False)
    same_places = identical_groups(busy.runs)
    written = write_outputs(busy, tmp_path / "busy", title="120 jobs, 2 nodes")
    report = tmp_path / "busy" / "report.html"
    assert report in written
    text = report.read_text()
    assert not re.search(r"(src|href)=\"(https?:|//|file:)", text)  # nothing fetched from anywhere
    assert "<script" not in text
    assert text.count('src="data:image/png;base64,') == 2
    assert re.search(r"mean over each \d+(\.\d+)? (min|h) bin", text)
    for policy in POLICIES:
        assert f'<td class="text">{policy}</td>' in text
    for group in same_times:  # whichever policies coincide on this trace, the report names them
        verb = "placed every job identically" if group in same_places else "started and finished every job"
        assert f"{', '.join(group)} {verb}" in text
        assert all(f"same {'placements' if group in same_places else 'job times'} as {group[0]}" in
                   legend_labels(busy.runs)[name] for name in group[1:])  # fmt: skip
    check_in_chromium(report, images=2, shot="simulate-report.png")


def test_a_curve_within_1_percent_of_another_is_named() -> None:
    """JCT CDFs that differ by under 1% at every quantile draw as one curve: the legend, the
    notes and the JSON name the hidden policy (runs built from one real run, JCTs scaled)."""
    from dataclasses import replace

    from ringleader.sim.summary import coincidence_notes, near_jct_pairs

    base = compare_policies(load_cluster_file(CLUSTER), parse_trace(SPACED, "spaced.csv"), ["topology"]).runs[0]

    def scaled(policy: str, factor: float):  # type: ignore[no-untyped-def]
        records = [replace(r, finish_s=r.start_s + (r.finish_s - r.start_s) * factor) for r in base.records]
        return replace(base, policy=policy, records=records)

    runs = [base, scaled("close", 1.004), scaled("apart", 1.05)]
    assert near_jct_pairs(runs) == [("close", "topology", pytest.approx(0.004, abs=1e-3))]
    assert legend_labels(runs)["close"] == "close (JCTs within 0.4% of topology)"
    assert legend_labels(runs)["apart"] == "apart"
    assert "close's JCT CDF lies within 0.4% of topology's at every quantile" in " ".join(coincidence_notes(runs))
