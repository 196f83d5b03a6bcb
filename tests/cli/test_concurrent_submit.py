"""20 `ringleader submit` processes at once on a cluster with room for 8 jobs at a time."""

from __future__ import annotations

import itertools
import json
import subprocess
from typing import Any

import pytest

from ringleader.engines.embedded.engine import Runtime
from waiting import WAIT_S, wait_for

JOBS = 20


@pytest.mark.slow
def test_concurrent_submits_never_share_a_gpu(cli, write) -> None:
    one_node = "nodes:\n  - name: box\n    preset: dgx1v\n    emulated: true\n"
    cli.ok("cluster", "apply", "-f", str(write("one.yaml", one_node)))
    cmd = "sleep 1"
    procs = [
        subprocess.Popen(
            cli.argv("submit", "mpi", "--name", f"job-{i}", "--gpus", "1", cmd),
            env=cli.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for i in range(JOBS)
    ]
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
    seen: list[str] = []

    def all_succeeded() -> list[dict[str, Any]] | None:  # polled in-process: a CLI per poll would load the cores
        jobs = [v.to_dict() for v in Runtime.open(cli.home).list_jobs(with_instances=True)]
        seen[:] = [j["status"] for j in jobs]
        running = [j for j in jobs if j["status"] == "RUNNING"]
        gpus = [(i["node"], g) for j in running for i in j["instances"] for g in i["gpus"]]
        assert len(gpus) == len(set(gpus)) <= 8  # never a GPU allocated twice, at any moment
        assert "FAILED" not in seen, [(j["name"], j["reason"]) for j in jobs if j["status"] == "FAILED"]
        return jobs if all(status == "SUCCEEDED" for status in seen) else None

    # Twenty 1 s jobs, eight at a time, each started by its own supervisor: longer than one wait.
    jobs = wait_for(all_succeeded, 2 * WAIT_S, lambda: f"every job to succeed, last seen: {seen}", every=0.5)
    assert len(jobs) == JOBS
    views = [Runtime.open(cli.home).get(j["name"]).to_dict() for j in jobs]
    assert json.loads(cli.ok("get", "job-0", "-o", "json"))["status"] == "SUCCEEDED"
    waited = [v for v in views if any(e["kind"] == "Pending" for e in v["events"])]
    assert waited, "with room for 8 jobs some of the 20 must have waited"
    # Over the whole run: two jobs that held the same GPU never held it at the same time.
    held: dict[tuple[str, int], list[tuple[float, float, str]]] = {}
    for v in views:
        for inst in v["instances"]:
            for g in inst["gpus"]:
                held.setdefault((inst["node"], g), []).append((v["started_at"], v["ended_at"], v["name"]))
    for spans in held.values():
        for (_, e1, n1), (s2, _, n2) in itertools.combinations(sorted(spans), 2):
            assert e1 <= s2, f"{n1} and {n2} overlap on one GPU"
