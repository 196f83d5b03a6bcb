"""`cluster apply` with a network tree and `submit mpi --topology-required/--topology-preferred`,
through the real command."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

CLUSTER = """nodes:
  - {name: node, preset: dgx-a100, emulated: true, count: 4}
network:
  levels: [{name: rack, oversubscription: 4}, {name: spine}]
  switches:
    - {name: rack-1, nodes: "node-[0-1]"}
    - {name: rack-2, nodes: "node-[2-3]"}
    - {name: spine, switches: "rack-[1-2]"}
"""


def test_required_and_preferred_levels_on_the_command_line(cli, write: Callable[[str, str], Path]) -> None:  # type: ignore[no-untyped-def]
    cli.ok("cluster", "apply", "-f", str(write("cluster.yaml", CLUSTER)))
    submit = ("submit", "mpi", "--name", "g", "--gpus", "8", "--dry-run")
    plan = json.loads(cli.ok(*submit, "--workers", "2", "--topology-required", "rack", "-o", "json", "--", "true"))
    assert plan["plan"]["code"] == "Success" and "under rack" in plan["plan"]["chosen"]["bottleneck"]
    spread = json.loads(cli.ok(*submit, "--workers", "3", "--topology-preferred", "rack", "-o", "json", "--", "true"))
    assert "(4:1 uplinks)" in spread["plan"]["chosen"]["bottleneck"]
    never = cli(*submit, "--workers", "3", "--topology-required", "rack", "--", "true")
    assert never.returncode == 2 and len(never.stderr.strip().splitlines()) == 1
    assert "under one rack; most free under any rack: 2 worker slot(s) (rack-1)" in never.stderr
    unknown = cli(*submit, "--workers", "1", "--topology-required", "row", "--", "true")
    assert unknown.returncode == 2 and "no network level 'row' (levels: rack, spine)" in unknown.stderr
    bad = cli(*submit, "--workers", "1", "--topology-preferred", "a b", "--", "true")
    assert bad.returncode == 2 and "--topology-preferred 'a b' is not a level name" in bad.stderr


def test_a_node_under_two_racks_is_refused_naming_it(cli, write: Callable[[str, str], Path]) -> None:  # type: ignore[no-untyped-def]
    text = CLUSTER.replace('nodes: "node-[2-3]"', 'nodes: "node-[1-3]"')
    out = cli("cluster", "apply", "-f", str(write("cluster.yaml", text)))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "node 'node-1' is under two switches (rack-1, rack-2)" in out.stderr


def test_a_topology_conf_with_a_node_under_two_leaves_is_applied_noted(cli, write: Callable[[str, str], Path]) -> None:  # type: ignore[no-untyped-def]
    """A Slurm topology.conf that lists a node under two leaves runs under Slurm (which warns);
    `cluster apply` takes it too, keeps the node under the first leaf, and says so."""
    conf = write("topology.conf", "SwitchName=rack-1 Nodes=node-[0-1]\nSwitchName=rack-2 Nodes=node-[1-3]\n"
                                  "SwitchName=spine Switches=rack-[1-2]\n")  # fmt: skip
    text = CLUSTER.split("network:")[0] + f"network:\n  file: {conf}\n"
    out = cli("cluster", "apply", "-f", str(write("cluster.yaml", text)))
    assert out.returncode == 0, out.stderr
    assert (f"note: {conf}: nodes under several leaf switches, each kept under the first that lists it (as Slurm "
            'warns "Multiple leaf switches contain nodes" and runs): node-1 (rack-1, also rack-2)') in out.stderr
