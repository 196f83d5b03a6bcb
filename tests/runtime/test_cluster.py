"""The seeds' scenario, node labels, cluster apply guards, requests that can never fit."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from ringleader.engines.embedded.engine import Runtime
from ringleader.errors import ConflictError, NotFoundError, UnschedulableError, UsageError
from ringleader.jobs.states import JobStatus

QUADS = ({0, 1, 2, 3}, {4, 5, 6, 7})


def test_seeds_topology_job_lands_on_one_fully_nvlinked_quad(seeds: Runtime, h) -> None:
    plan = seeds.submit(h.spec("topo-4", h.py("pass"), workers=4, topology_aware=True), dry_run=True)
    chosen = plan.plan["chosen"]
    assert len(chosen["nodes"]) == 1
    assert {g for w in chosen["workers"] for g in w["gpus"]} in QUADS
    assert chosen["metrics"]["bottleneck_link"].startswith("NV")
    assert plan.plan["runner_up"] is not None
    assert seeds.list_jobs() == []  # a dry run writes nothing


def test_seeds_default_job_spreads_two_and_two(seeds: Runtime, h) -> None:
    plan = seeds.submit(h.spec("plain-4", h.py("pass"), workers=4), dry_run=True).plan["chosen"]
    per_node = [sum(1 for w in plan["workers"] if w["node"] == n) for n in plan["nodes"]]
    assert sorted(per_node) == [2, 2]
    assert plan["metrics"]["bottleneck_link"] == "network"


def test_seeds_real_short_topology_job(seeds: Runtime, h) -> None:
    code = "import os; print(os.environ['RINGLEADER_NODE'], os.environ['RINGLEADER_VIRTUAL_GPUS'])"
    seeds.submit(h.spec("topo-run", h.py(code), workers=4, topology_aware=True))
    view = seeds.wait("topo-run", 90)
    assert view.status is JobStatus.SUCCEEDED
    gpus = {g for i in view.instances for g in i.gpus}
    assert gpus in QUADS and len({i.node for i in view.instances}) == 1
    node, ids = seeds.logs("topo-run").split()
    assert {int(g) for g in ids.split(",")} == gpus and node == view.instances[0].node


def test_unresolvable_request_is_refused_and_nothing_written(seeds: Runtime, h) -> None:
    before = h.dump_db(seeds.home)
    with pytest.raises(UnschedulableError, match="can never run"):
        seeds.submit(h.spec("huge", h.py("pass"), workers=1, gpus=9))
    with pytest.raises(UnschedulableError):
        seeds.submit(h.spec("many", h.py("pass"), workers=17, gpus=1))
    assert h.dump_db(seeds.home) == before


def test_labels_follow_kubectl_rules_and_steer_jobs(seeds: Runtime, h) -> None:
    seeds.label_node("cn-shanghai-172", "gpu-schedule", "topology", overwrite=False)
    with pytest.raises(ConflictError, match="already has label gpu-schedule=topology"):
        seeds.label_node("cn-shanghai-172", "gpu-schedule", "default", overwrite=False)
    with pytest.raises(NotFoundError):
        seeds.label_node("nope", "gpu-schedule", "default", overwrite=False)
    with pytest.raises(UsageError):
        seeds.label_node("cn-shanghai-172", "gpu-schedule", "sometimes", overwrite=True)
    seeds.label_node("cn-shanghai-173", "ack.node.gpu.schedule", "default", overwrite=False)
    topo = seeds.submit(h.spec("t", h.py("pass"), workers=2, topology_aware=True), dry_run=True)
    plain = seeds.submit(h.spec("p", h.py("pass"), workers=2), dry_run=True)
    assert topo.plan["chosen"]["nodes"] == ["cn-shanghai-172"]
    assert plain.plan["chosen"]["nodes"] == ["cn-shanghai-173"]
    seeds.label_node("cn-shanghai-172", "gpu-schedule", "default", overwrite=True)
    modes = {ns.name: ns.spec.schedule_mode for ns in seeds.nodes().nodes}
    assert modes["cn-shanghai-172"] == "default"


def test_apply_refuses_to_pull_gpus_from_running_jobs(
    small: Runtime, h, cluster_file: Callable[[str], Path]
) -> None:
    small.submit(h.spec("hold", h.py("import time; time.sleep(60)"), gpus=2))
    before = h.dump_db(small.home)
    with pytest.raises(ConflictError, match="would disappear"):
        small.apply_cluster(cluster_file("nodes:\n  - name: other\n    preset: dgx1v\n    emulated: true\n"))
    shrink = "nodes:\n  - name: box\n    matrix: [[X, PIX], [PIX, X]]\n    emulated: true\n"
    with pytest.raises(ConflictError, match="shrink"):
        small.apply_cluster(cluster_file(shrink))
    assert h.dump_db(small.home) == before
    grow = "nodes:\n  - name: box\n    preset: dgx1v\n    emulated: true\n"
    assert small.apply_cluster(cluster_file(grow)).total_gpus == 8


def test_a_real_node_other_than_local_needs_an_ssh_address(rt: Runtime, cluster_file: Callable[[str], Path]) -> None:
    with pytest.raises(UsageError, match="neither emulated nor an ssh host"):
        rt.apply_cluster(cluster_file("nodes:\n  - name: far\n    preset: dgx1v\n"))


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ("address: 'a b'", "not a host name"),
        ("address: '-oProxyCommand=x'", "not a host name"),
        ("address: h\n    port: 70000", "not a TCP port"),
        ("address: h\n    user: 'root;rm'", "not a user name"),
        ("user: root", "'user' without `address`"),
        ("address: h\n    count: 2", "`count` and `address`"),
    ],
)
def test_bad_ssh_addresses_are_refused_before_any_connection(
    rt: Runtime, cluster_file: Callable[[str], Path], extra: str, problem: str
) -> None:
    with pytest.raises(UsageError, match=problem):
        rt.apply_cluster(cluster_file(f"nodes:\n  - name: far\n    preset: dgx1v\n    {extra}\n"))


def test_unreachable_host_is_one_line_naming_it(rt: Runtime, cluster_file: Callable[[str], Path]) -> None:
    from ringleader.engines.embedded.hosts.ssh import HostError

    # Nothing listens on port 1: ssh is refused at once.
    text = "nodes:\n  - name: far\n    preset: dgx1v\n    address: 127.0.0.1\n    port: 1\n"
    with pytest.raises(HostError, match=re.escape("host far (127.0.0.1:1) is unreachable over ssh")):
        rt.apply_cluster(cluster_file(text))


def test_cpu_job_runs_on_a_machine_without_gpus(rt: Runtime, h) -> None:
    if rt.nodes().total_gpus:
        pytest.skip("this machine has GPUs")
    rt.submit(h.spec("cpu", h.py("print('ok')"), workers=2, gpus=0))
    view = rt.wait("cpu", 60)
    assert view.status is JobStatus.SUCCEEDED and {i.node for i in view.instances} == {"local"}
    with pytest.raises(UnschedulableError):
        rt.submit(h.spec("gpu", h.py("pass"), gpus=1))
