"""`cluster up` with a network tree on real namespaces: a bridge per rack and one for the spine,
the rack uplinks shaped with tc to the nodes' bandwidth over the oversubscription, traffic across
racks measurably slower than inside one, and `cluster down` leaves no link or namespace."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ringleader.engines.embedded.engine import Runtime
from ringleader.engines.embedded.hosts.netns import Names
from waiting import WAIT_S

pytestmark = pytest.mark.slow

# 2 racks x 2 nodes at 25 Gb/s, rack uplinks 4:1. At scale 0.01: a node's link 250 Mb/s, a rack's
# uplink 2 x 25 / 4 x 0.01 Gb/s = 125 Mb/s.
RACKS = """nodes:
  - {name: node, matrix: [[X]], network_gbps: 25, count: 4}
network:
  levels:
    - {name: rack, oversubscription: 4}
    - {name: spine}
  switches:
    - {name: rack-1, nodes: "node-[0-1]"}
    - {name: rack-2, nodes: "node-[2-3]"}
    - {name: spine, switches: "rack-[1-2]"}
"""
SCALE = 0.01
NBYTES = 6_000_000  # 0.2 s inside a rack at 250 Mb/s, 0.4 s across at 125 Mb/s
# A socket transfer between two namespaces: `serve ADDR` receives NBYTES and answers one byte;
# `send ADDR` sends them and prints the seconds until the answer.
TRANSFER = """
import socket, sys, time
mode, addr, nbytes = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "serve":
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, 5201))
    s.listen(1)
    print("ready", flush=True)
    c, _ = s.accept()
    got = 0
    while got < nbytes:
        chunk = c.recv(1 << 20)
        if not chunk:
            break
        got += len(chunk)
    c.sendall(b"k")
else:
    c = socket.create_connection((addr, 5201), timeout=120)  # ends a hang only
    t0 = time.perf_counter()
    c.sendall(bytes(nbytes))
    c.recv(1)
    print(time.perf_counter() - t0)
"""


def ours(home: Path) -> list[str]:
    """This home's links and namespaces that exist now."""
    tag = Names.for_home(home).tag
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    found = [ln.split(":")[1].strip().split("@")[0] for ln in links.splitlines() if f" rl{tag}" in ln]
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return found + [ln.split()[0] for ln in spaces.splitlines() if ln.startswith(f"rl-{tag}-")]


def transfer_s(home: Path, src: str, dst: str, addr: str) -> float:
    names = Names.for_home(home)
    serve = subprocess.Popen(["ip", "netns", "exec", names.namespace(dst), sys.executable, "-c", TRANSFER,
                              "serve", addr, str(NBYTES)], stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert serve.stdout is not None and serve.stdout.readline().strip() == "ready"
        send = subprocess.run(["ip", "netns", "exec", names.namespace(src), sys.executable, "-c", TRANSFER,
                               "send", addr, str(NBYTES)], capture_output=True, text=True, timeout=60)  # fmt: skip
        assert send.returncode == 0, send.stderr
        return float(send.stdout)
    finally:
        serve.wait(timeout=WAIT_S)


def test_racks_are_bridges_with_shaped_uplinks_and_down_leaves_nothing(tmp_path: Path, hosts_tools: None) -> None:
    home, spec = tmp_path / "home", tmp_path / "racks.yaml"
    spec.write_text(RACKS)
    env = {**os.environ, "RINGLEADER_HOME": str(home)}
    cmd = [sys.executable, "-m", "ringleader.cli.main", "cluster"]
    up = subprocess.run([*cmd, "up", "-f", str(spec), "--scale", str(SCALE)], env=env, capture_output=True,
                        text=True, timeout=120)  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr
        assert "switch rack-1: a bridge over 2 node(s), its uplink to spine shaped to 125 Mb/s" in up.stdout
        assert "switch spine: a bridge over 4 node(s), its uplink to the head unshaped" in up.stdout
        names = Names.for_home(home)
        bridges = [b for b in ours(home) if b.startswith(f"rl{names.tag}s")]
        assert len(bridges) == 3  # rack-1, rack-2, spine
        shaped = [subprocess.run(["tc", "qdisc", "show", "dev", names.uplink(k)], capture_output=True,
                                 text=True).stdout for k in range(3)]  # fmt: skip
        assert sum("tbf" in q and "rate 125Mbit" in q for q in shaped) == 2  # the racks'; the spine's is not
        with Runtime.open(home, readonly=True) as rt:  # the applied cluster keeps the tree
            state = rt.nodes()
        addr = {ns.name: str(ns.spec.address.host) for ns in state.nodes if ns.spec.address is not None}
        assert state.by_name["node-2"].spec.switches == ("rack-2", "spine")
        in_rack = min(transfer_s(home, "node-0", "node-1", addr["node-1"]) for _ in range(2))
        across = min(transfer_s(home, "node-0", "node-2", addr["node-2"]) for _ in range(2))
        # Ideal: 0.19 s and 0.38 s; across must take clearly longer (the shaped 4:1 uplinks).
        assert across > 1.5 * in_rack, (in_rack, across)
    finally:
        down = subprocess.run([*cmd, "down"], env=env, capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    time.sleep(0.2)
    assert ours(home) == []
