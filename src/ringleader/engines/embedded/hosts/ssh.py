"""The ssh side of real hosts: one client configuration per job, remote commands, discovery.

Every ssh invocation goes through ``ssh -F <config>`` with a Host block per node (its node name
as the alias), so mpirun's messages name ringleader's nodes, and no option passes through a
shell on this side: argv lists only.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ringleader.errors import RingleaderError, UsageError
from ringleader.topology import NodeSpec, NodeTopology
from ringleader.topology.smi import parse_topo_text

# A host that does not answer within this many seconds is unreachable; one that stops answering
# for SERVER_ALIVE_S x SERVER_ALIVE_COUNT seconds mid-job is cut off.
CONNECT_TIMEOUT_S = 5
SERVER_ALIVE_S = 2
SERVER_ALIVE_COUNT = 3
KNOWN_HOSTS = "known_hosts"
SSH_FAILED = 255  # ssh's own exit code when it cannot connect or log in (the remote command's otherwise)


class HostError(RingleaderError):
    """An ssh host cannot be reached or does not answer as expected (exit code 1)."""


def known_hosts(home: Path) -> Path:
    return home / KNOWN_HOSTS


def config_text(nodes: Sequence[NodeSpec], home: Path) -> str:
    """ssh_config(5) with one Host block per addressed node. New host keys are accepted once and
    then pinned in ringleader's own known_hosts (ssh's accept-new), never ignored."""
    blocks = []
    for node in nodes:
        if node.address is None:
            continue
        a = node.address
        lines = [f"Host {node.name}", f"  HostName {a.host}"]
        if a.user:
            lines.append(f"  User {a.user}")
        if a.port:
            lines.append(f"  Port {a.port}")
        if a.identity_file:
            lines += [f"  IdentityFile {_quote(os.path.expanduser(a.identity_file))}", "  IdentitiesOnly yes"]
        blocks.append("\n".join(lines))
    common = [
        "Host *", "  BatchMode yes", f"  ConnectTimeout {CONNECT_TIMEOUT_S}",
        f"  ServerAliveInterval {SERVER_ALIVE_S}", f"  ServerAliveCountMax {SERVER_ALIVE_COUNT}",
        "  StrictHostKeyChecking accept-new", "  LogLevel ERROR",
        f"  UserKnownHostsFile {_quote(str(known_hosts(home)))} ~/.ssh/known_hosts",
    ]  # fmt: skip
    return "\n\n".join([*blocks, "\n".join(common)]) + "\n"


def _quote(path: str) -> str:
    if any(c in path for c in '"\n'):
        raise UsageError(f"path {path!r} cannot go into an ssh configuration", "use a path without quotes")
    return f'"{path}"' if " " in path else path


def write_config(path: Path, nodes: Sequence[NodeSpec], home: Path) -> Path:
    """Write the configuration privately (0600) and return its path."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(config_text(nodes, home))
    return path


def run_remote(config: Path, node: str, argv: Sequence[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` on ``node``. ssh joins a remote command into one string for the remote
    shell, so every word is quoted for it here; nothing of ours is interpreted there."""
    cmd = ["ssh", "-F", str(config), node, "--", shlex.join(argv)]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        why = f"host {node} did not answer within {timeout:g} s"
        raise HostError(why, "check that it is up and reachable") from None
    except FileNotFoundError:
        raise HostError("ssh is not installed on this machine", "install openssh-client") from None


def check_reachable(config: Path, node: NodeSpec) -> None:
    """One line naming the host when ssh cannot log in to it."""
    done = run_remote(config, node.name, ["true"], timeout=CONNECT_TIMEOUT_S + 10)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"ssh exit code {done.returncode}"])[-1]
        raise HostError(
            f"host {node.name} ({node.address}) is unreachable over ssh: {why}",
            "check its address, user, port and identity_file, and that sshd runs there",
        )


def discover(config: Path, node: NodeSpec) -> tuple[NodeTopology, str]:
    """The host's GPU topology: `nvidia-smi topo -m`, else NVML through ringleader's own probe
    when ringleader is installed there, else none (a CPU node). Returns (topology, how)."""
    check_reachable(config, node)
    smi = run_remote(config, node.name, ["nvidia-smi", "topo", "-m"])
    if smi.returncode == 0 and "GPU0" in smi.stdout:
        return parse_topo_text(smi.stdout), "nvidia-smi topo -m over ssh"
    nvml = run_remote(config, node.name, ["python3", "-m", "ringleader.topology.nvml"])
    if nvml.returncode == 0 and "GPU0" in nvml.stdout:
        return parse_topo_text(nvml.stdout), "NVML over ssh"
    return NodeTopology(links=()), "no GPU found over ssh (nvidia-smi and NVML absent): a CPU node"
