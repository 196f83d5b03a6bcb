"""Lab 7's second table on the emulated cluster: `bench scaling --servers` runs each layout
(servers x ranks per server) as a ringleader job whose ranks land that many per node, over the
nodes' shaped links. Root only, as the rest of this folder."""

from __future__ import annotations

import json
from pathlib import Path

from ringleader.cli.main import main
from ringleader.engines.embedded.engine import Runtime


def test_each_layout_runs_its_ranks_on_that_many_servers(hosts: Runtime, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "servers"
    code = main(["bench", "scaling", "--servers", "1,2", "--workers", "1,2", "--backends", "gloo",
                 "--model", "trivial", "--batch-size", "4", "--image-size", "32", "--num-batches", "3",
                 "--num-warmup-batches", "1", "--repeat", "1", "--no-busbw", "--launcher", "runtime",
                 "--out", str(out), "-o", "json"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err[-2000:]
    doc = json.loads((out / "scaling.json").read_text())
    assert [(r["servers"], r["gpus_per_server"]) for r in doc["rows"]] == [(1, 1), (1, 2), (2, 1)]
    layouts = {(p["world_size"], p["nodes"]): p for p in doc["points"]}
    assert set(layouts) == {(1, 1), (2, 1), (2, 2)}
    assert all(p["images_per_sec_total"] > 0 for p in layouts.values())
    # each point's job ran where its layout says, and was deleted once read
    assert not [j for j in hosts.list_jobs() if j.name.startswith("bench-train-")]
    assert "| gloo | 2 | 1 | " in (out / "scaling.md").read_text()
