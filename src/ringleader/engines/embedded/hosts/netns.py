"""An emulated cluster on one box: each declared node gets a Linux network namespace with its own
sshd and hostname, joined by a bridge, its link shaped with `tc` to the declared bandwidth.

    ringleader cluster up -f cluster.yaml [--scale 0.02]     (root)
    ringleader cluster down

Jobs then run exactly as on real hosts (engines.embedded.hosts): mpirun's ssh launcher starts the ranks
inside the namespaces, and the traffic between nodes crosses the shaped links, so placement
changes measured speed. `tc` tbf shapes each node's uplink (its egress) and downlink (the bridge
port's egress) to ``network_gbps x scale``: a 2-core box cannot compute fast enough for
25-100 Gb/s to matter, so links are scaled down with the compute (the factor is printed and
recorded). With a network tree in the cluster file (its `network:` section), every switch
gets its own bridge (a rack's leaf switch, a spine, ...): a node's link joins its leaf's bridge,
and each switch's bridge joins its parent's (the top level's join the head's bridge) by a veth
pair shaped both ways to the switch's uplink, ``network_gbps`` of its nodes / the level's
oversubscription x scale, so a gang across racks shares the uplinks as on real hardware. A
non-blocking level's uplink is left unshaped: its nodes' links bound it already. Every object is
recorded before it is created, so `cluster down` removes all of it, also after the head process
was killed -9, and is idempotent.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ringleader.engines.embedded.hosts.ssh import known_hosts
from ringleader.errors import ConflictError, DependencyError, RingleaderError, UsageError
from ringleader.inputs import load_yaml, read_bounded
from ringleader.runtime.hostlock import host_lock
from ringleader.runtime.procs import alive, start_time, stop_all
from ringleader.topology import NodeSpec

RECORD = "record.json"
DEFAULT_SCALE = 0.02
# Each emulated cluster takes the first free 10.N.0.0/16 from these (bridge .0.1, node k .0.(k+2)).
SUBNETS = [f"10.{n}" for n in range(231, 255)]
NS_IFACE = "eth0"
SSHD = "/usr/sbin/sshd"


class EmulationError(RingleaderError):
    """A step of `cluster up`/`down` failed (exit code 1); the message names the command."""


def emulation_dir(home: Path) -> Path:
    return home / "emulation"


@dataclass(frozen=True)
class Names:
    """Kernel object names for one ringleader home (interface names have at most 15 bytes)."""

    tag: str

    @staticmethod
    def for_home(home: Path) -> Names:
        return Names(hashlib.sha1(str(home.resolve()).encode()).hexdigest()[:4])

    @property
    def bridge(self) -> str:
        return f"rl{self.tag}br"

    def namespace(self, node: str) -> str:
        return f"rl-{self.tag}-{node}"

    def veth(self, k: int) -> str:
        return f"rl{self.tag}v{k}"

    def switch_bridge(self, k: int) -> str:
        return f"rl{self.tag}s{k}"

    def uplink(self, k: int) -> str:
        """The switch end of switch k's uplink pair; its peer (``downlink``) is on the parent."""
        return f"rl{self.tag}u{k}"

    def downlink(self, k: int) -> str:
        return f"rl{self.tag}d{k}"


def check_can_emulate() -> None:
    if os.geteuid() != 0:
        raise UsageError("`cluster up` needs root (network namespaces, bridges, tc)", "run it as root")
    for tool in ("ip", "tc", "ssh", "ssh-keygen", SSHD):
        if shutil.which(tool) is None:
            raise DependencyError(f"{tool} is not installed", "install iproute2, openssh-server and openssh-client")


def _run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(argv), capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if check and done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        raise EmulationError(f"`{' '.join(argv)}` failed: {why}", "run `ringleader cluster down`, then retry")
    return done


class Record:
    """What `up` created, written before each creation (so `down` finds it after a crash)."""

    def __init__(self, home: Path) -> None:
        self.path = emulation_dir(home) / RECORD
        try:
            self.data: dict[str, Any] = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.data = {}

    @property
    def exists(self) -> bool:
        return bool(self.data)

    def add(self, kind: str, value: Any) -> None:
        self.data.setdefault(kind, []).append(value)
        self.save()

    def set(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.save()

    def save(self) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(self.data, fh, indent=1)
        os.replace(tmp, self.path)


def shaped_mbit(network_gbps: float, scale: float) -> float:
    return network_gbps * 1000.0 * scale


def _shape(dev: str, mbit: float, netns: str | None = None) -> None:
    rate_bytes = mbit * 1e6 / 8
    burst = max(64 * 1024, int(rate_bytes / 100))  # >= 10 ms of traffic: tbf needs rate/HZ at least
    cmd = ["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{mbit:.3f}mbit",
           "burst", str(burst), "latency", "100ms"]  # fmt: skip
    _run(["ip", "netns", "exec", netns, *cmd] if netns else cmd)


def free_subnet() -> str:
    """A 10.N /16 that no interface or route of this machine uses yet."""
    used = _run(["ip", "-o", "addr"]).stdout + _run(["ip", "route"]).stdout
    for prefix in SUBNETS:
        if not re.search(rf"(^|\s){re.escape(prefix)}\.", used, re.MULTILINE):
            return prefix
    raise EmulationError("no free 10.N.0.0/16 subnet for the bridge", "run `ringleader cluster down` on other homes")


@dataclass(frozen=True)
class SwitchLink:
    """One switch of the network tree as `cluster up` builds it: its bridge joins ``parent``'s
    (None: the head's bridge) through an uplink of ``mbit`` (None: unshaped, non-blocking)."""

    switch: str
    parent: str | None
    mbit: float | None
    nodes: tuple[str, ...]


def switch_links(nodes: Sequence[NodeSpec], scale: float) -> list[SwitchLink]:
    """The switches above ``nodes`` (their network places), nearest the nodes first, each with
    its parent and its shaped uplink: the network_gbps of the nodes under it over its level's
    oversubscription (the model's uplink: model.comm.uplink_cap), times ``scale``."""
    placed = [n for n in nodes if n.network is not None]
    links: dict[str, SwitchLink] = {}
    level_of: dict[str, int] = {}
    for node in placed:
        path, levels = node.switches, node.network.levels if node.network is not None else ()
        for k, switch in enumerate(path):
            parent = next((p for p in path[k + 1 :] if p != switch), None)
            under = tuple(n.name for n in placed if switch in n.switches)
            # A switch that stands at several levels (a shallower branch) takes the worst ratio.
            ratio = max(levels[j].oversubscription for j, s in enumerate(path) if s == switch)
            down = sum(n.network_gbps for n in placed if n.name in under)
            mbit = shaped_mbit(down / ratio, scale) if ratio > 1 else None
            links.setdefault(switch, SwitchLink(switch, parent, mbit, under))
            level_of.setdefault(switch, k)
    return sorted(links.values(), key=lambda link: level_of[link.switch])


def _build_switches(rec: Record, names: Names, links: Sequence[SwitchLink]) -> dict[str, str]:
    """A bridge per switch, each joined to its parent's (or the head's) by a shaped veth pair;
    returns switch -> bridge."""
    bridges = {link.switch: names.switch_bridge(k) for k, link in enumerate(links)}
    for link in links:
        rec.add("bridges", bridges[link.switch])
        _run(["ip", "link", "add", bridges[link.switch], "type", "bridge"])
        _run(["ip", "link", "set", bridges[link.switch], "up"])
    for k, link in enumerate(links):
        up_end, down_end = names.uplink(k), names.downlink(k)
        rec.add("links", up_end)
        _run(["ip", "link", "add", up_end, "type", "veth", "peer", "name", down_end])
        _run(["ip", "link", "set", up_end, "master", bridges[link.switch], "up"])
        parent = bridges[link.parent] if link.parent is not None else names.bridge
        _run(["ip", "link", "set", down_end, "master", parent, "up"])
        if link.mbit is not None:
            _shape(up_end, link.mbit)  # traffic leaving the switch for its parent
            _shape(down_end, link.mbit)  # and coming down into it
    return bridges


def network_section(path: Path) -> dict[str, Any] | None:
    """The cluster file's `network:` section as written (a `file:` made absolute), for the
    cluster file `cluster up` writes: the emulated nodes keep the declared tree and names."""
    doc, _ = load_yaml(read_bounded(path, "cluster file"), str(path))
    section = doc.get("network") if isinstance(doc, dict) else None
    if not isinstance(section, dict):
        return None
    if isinstance(section.get("file"), str) and not Path(section["file"]).is_absolute():
        section = {**section, "file": str((path.parent / section["file"]).resolve())}
    return section


def up(
    home: Path, nodes: Sequence[NodeSpec], scale: float = DEFAULT_SCALE, network: dict[str, Any] | None = None
) -> Path:
    """Create the namespaces, bridges, shaped links and sshds; write and return the cluster file
    that declares the nodes with their ssh addresses (``emulation/cluster.yaml``) and the
    ``network`` section given (the declared tree: ``network_section``)."""
    import yaml

    check_can_emulate()
    if not 0 < scale <= 1:
        raise UsageError(f"--scale must be in (0, 1], got {scale:g}", "give e.g. 0.02")
    emulated = [n for n in nodes if n.name != "local"]
    if not emulated or len(emulated) > 200:
        raise UsageError(f"{len(emulated)} nodes to emulate", "declare between 1 and 200 nodes besides local")
    real = [n.name for n in emulated if n.address is not None]
    if real:
        raise UsageError(f"node {real[0]!r} has an address: it is a real host", "declare only nodes to emulate")
    if Record(home).exists:
        raise ConflictError("an emulated cluster is already up", "run `ringleader cluster down` first")
    names, edir = Names.for_home(home), emulation_dir(home)
    edir.mkdir(mode=0o700, parents=True, exist_ok=True)
    rec = Record(home)
    rec.set("scale", scale)
    client_key, host_key = edir / "id_ed25519", edir / "host_ed25519"
    for key in (client_key, host_key):
        rec.add("files", str(key))
        rec.add("files", str(key) + ".pub")
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ringleader-emulation", "-f", str(key)])
        os.chmod(str(key) + ".pub", 0o600)
    authorized = edir / "authorized_keys"
    rec.add("files", str(authorized))
    authorized.write_text(Path(str(client_key) + ".pub").read_text())
    authorized.chmod(0o600)
    rec.add("bridges", names.bridge)
    with host_lock("subnets"):  # another `cluster up` must not pick the same subnet meanwhile
        subnet = free_subnet()
        rec.set("subnet", subnet)
        _run(["ip", "link", "add", names.bridge, "type", "bridge"])
        _run(["ip", "addr", "add", f"{subnet}.0.1/16", "dev", names.bridge])
    _run(["ip", "link", "set", names.bridge, "up"])
    bridge_of = _build_switches(rec, names, switch_links(emulated, scale))
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation folder
    host_pub = Path(str(host_key) + ".pub").read_text().split()[:2]
    declared, known = [], []
    for k, node in enumerate(emulated):
        ns, veth, ip = names.namespace(node.name), names.veth(k), f"{subnet}.{(k + 2) // 256}.{(k + 2) % 256}"
        rec.add("namespaces", ns)
        _run(["ip", "netns", "add", ns])
        _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", NS_IFACE, "netns", ns])
        leaf = bridge_of.get(node.switches[0]) if node.switches else None
        _run(["ip", "link", "set", veth, "master", leaf or names.bridge, "up"])
        _run(["ip", "-n", ns, "addr", "add", f"{ip}/16", "dev", NS_IFACE])
        _run(["ip", "-n", ns, "link", "set", NS_IFACE, "up"])
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        mbit = shaped_mbit(node.network_gbps, scale)
        _shape(veth, mbit)
        _shape(NS_IFACE, mbit, netns=ns)
        _start_sshd(rec, edir, ns, node.name, ip, host_key, authorized)
        known.append(f"{ip} {' '.join(host_pub)}")
        item: dict[str, Any] = {"name": node.name, "emulated": True, "network_gbps": node.network_gbps,
                                "address": ip, "user": "root", "port": 22, "identity_file": str(client_key),
                                "matrix": _matrix_rows(node)}  # fmt: skip
        if node.labels:
            item["labels"] = dict(node.labels)
        if node.topology.gpu_model:
            item["gpu_model"] = node.topology.gpu_model
        declared.append(item)
    _add_known_hosts(home, rec, known)
    _add_hosts_entries(rec, names, [(d["address"], d["name"]) for d in declared])
    for ns, ip in zip([names.namespace(n.name) for n in emulated], [d["address"] for d in declared], strict=True):
        _wait_for_port(ip, 22, ns)
    cluster = edir / "cluster.yaml"
    rec.add("files", str(cluster))
    doc: dict[str, Any] = {"nodes": declared, **({"network": network} if network else {})}
    cluster.write_text(yaml.safe_dump(doc, sort_keys=False))
    cluster.chmod(0o600)
    return cluster


def settings(home: Path) -> dict[str, Any]:
    """How jobs launch on the emulated cluster: MPI and gloo over the namespaces' interface."""
    record = Record(home).data
    subnet = record["subnet"]
    return {
        "mca": {"btl_tcp_if_include": f"{subnet}.0.0/16", "oob_tcp_if_include": f"{subnet}.0.0/16"},
        "env": {"GLOO_SOCKET_IFNAME": NS_IFACE, "NCCL_SOCKET_IFNAME": NS_IFACE},
        "head_address": f"{subnet}.0.1",
        "scale": record.get("scale"),
    }


def _matrix_rows(node: NodeSpec) -> list[list[str]]:
    return [[str(link) for link in row] for row in node.topology.links]


def _start_sshd(rec: Record, edir: Path, ns: str, node: str, ip: str, host_key: Path, authorized: Path) -> None:
    conf = edir / f"sshd-{node}.conf"
    rec.add("files", str(conf))
    conf.write_text("\n".join([
        f"ListenAddress {ip}", "Port 22", f"HostKey {host_key}", f"AuthorizedKeysFile {authorized}",
        "PermitRootLogin prohibit-password", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
        "UsePAM no", "StrictModes no", "PidFile none", "MaxStartups 100:30:200", "MaxSessions 100",
    ]) + "\n")  # fmt: skip
    conf.chmod(0o600)
    log = os.fdopen(os.open(edir / f"sshd-{node}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
    rec.add("files", str(edir / f"sshd-{node}.log"))
    argv = ["ip", "netns", "exec", ns, "unshare", "--uts", "--", sys.executable, "-m", __name__, "exec-as", node,
            "--", SSHD, "-D", "-e", "-f", str(conf)]  # fmt: skip
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, close_fds=True)  # fmt: skip
    log.close()
    rec.add("processes", [proc.pid, start_time(proc.pid)])


def _wait_for_port(ip: str, port: int, ns: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((ip, port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise EmulationError(f"sshd in namespace {ns} does not answer on {ip}:{port}", "see emulation/sshd-*.log")


def _add_known_hosts(home: Path, rec: Record, lines: list[str]) -> None:
    path = known_hosts(home)
    for line in lines:
        rec.add("known_hosts", line)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a") as fh:
        fh.write("".join(line + "\n" for line in lines))


HOSTS_FILE = Path("/etc/hosts")


def _hosts_marker(names: Names) -> str:
    return f"# ringleader emulated cluster {names.tag}"


def _add_hosts_entries(rec: Record, names: Names, entries: list[tuple[str, str]]) -> None:
    """/etc/hosts lines for the nodes' names, so programs inside the namespaces (gloo, c10d)
    resolve their own hostname and each other's, their addresses as IPv4-mapped IPv6 too: c10d's
    dual-stack store sees its clients as ::ffff:a.b.c.d, and without a line for that form the
    reverse lookup went to DNS, out of reach in the namespace ("[c10d] The hostname of the
    client socket cannot be retrieved. err=-3" on every rank)."""
    lines = [f"{addr} {name} {_hosts_marker(names)}" for ip, name in entries for addr in (ip, f"::ffff:{ip}")]
    for line in lines:
        rec.add("hosts_entries", line)
    with open(HOSTS_FILE, "a") as fh:
        fh.write("".join(line + "\n" for line in lines))


def _remove_lines(path: Path, ours: set[str]) -> None:
    """Remove exactly the lines we added; the file itself stays if anything else is in it."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return
    kept = [ln for ln in lines if ln not in ours]
    if len(kept) == len(lines):
        return
    if kept or path == HOSTS_FILE:
        path.write_text("".join(ln + "\n" for ln in kept))
    else:
        path.unlink()


def down(home: Path) -> list[str]:
    """Remove everything the record lists (what exists of it); what was removed, one per line."""
    rec = Record(home)
    if not rec.exists:
        return []
    removed = []
    procs = [(int(p), s) for p, s in rec.data.get("processes", []) if s is not None]
    live = [(p, s) for p, s in procs if alive(p, s)]
    stop_all(live, 2.0)
    removed += [f"process {p}" for p, _ in live]
    for ns in rec.data.get("namespaces", []):
        if _run(["ip", "netns", "pids", ns], check=False).returncode == 0:
            pids = [int(p) for p in _run(["ip", "netns", "pids", ns], check=False).stdout.split()]
            stop_all([(p, s) for p in pids if (s := start_time(p)) is not None], 1.0)
            _run(["ip", "netns", "del", ns], check=False)
            removed.append(f"namespace {ns}")
    for link in rec.data.get("links", []):  # a switch's uplink pair (its peer goes with it)
        if _run(["ip", "link", "del", link], check=False).returncode == 0:
            removed.append(f"link {link}")
    for bridge in rec.data.get("bridges", []):
        if _run(["ip", "link", "del", bridge], check=False).returncode == 0:
            removed.append(f"bridge {bridge}")

    _remove_lines(known_hosts(home), set(rec.data.get("known_hosts", [])))
    _remove_lines(HOSTS_FILE, set(rec.data.get("hosts_entries", [])))
    for name in rec.data.get("files", []):
        Path(name).unlink(missing_ok=True)
    rec.path.unlink(missing_ok=True)
    return removed


def _exec_as(argv: list[str]) -> int:
    """`exec-as NAME -- PROGRAM...` inside a fresh UTS namespace: set the hostname, exec."""
    split = argv.index("--")
    socket.sethostname(argv[split - 1])
    os.execv(argv[split + 1], argv[split + 1 :])
    return 0  # not reached


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "exec-as":
        sys.exit(_exec_as(sys.argv[2:]))
    sys.exit(2)
