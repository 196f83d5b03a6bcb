"""A throwaway Slurm cluster on this host: slurmctld plus one slurmd per node, for tests,
benchmarks and demos.

Debian's Slurm build runs one slurmd per host name, so every node gets its own network and UTS
namespace (its own host name and address on a private bridge); its GPUs are device files made
with mknod (character major 195, like /dev/nvidiaN), declared one GRES type per GPU so a job can
name exact GPU ids (see ``ringleader.engines.slurm.gres``). Root only.

    with Sandbox.start(root, {"node-a": topo, "node-b": topo}) as box:
        os.environ["SLURM_CONF"] = str(box.conf)
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ringleader.engines.slurm import sandboxdb
from ringleader.engines.slurm.gres import gres_conf_lines, node_gres
from ringleader.engines.slurm.state import gpu_feature
from ringleader.errors import DependencyError
from ringleader.runtime.hostlock import host_lock
from ringleader.topology.node import NodeTopology

_SERIAL = itertools.count()  # several sandboxes in one process get distinct interface names
DAEMONS = ("slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "scancel")
NVIDIA_MAJOR = 195
CLUSTER = "ringleader"
# What the steps a stopped slurmd left get between SIGTERM and SIGKILL (its KillWait below).
STEPS_GRACE_S = 2.0


def missing() -> str | None:
    """Why a sandbox cannot start here (None if it can)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, mknod)"
    absent = [d for d in (*DAEMONS, "ip", "unshare") if shutil.which(d) is None]
    if absent:
        return f"{', '.join(absent)} not installed (make test-packages installs Debian's slurm-wlm)"
    return None


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 no interface of this host uses yet (several sandboxes may run at once)."""
    used = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True, check=True).stdout
    for third in range(10, 250):
        net = ipaddress.IPv4Network(f"10.213.{third}.0/24")
        if f" 10.213.{third}." not in used:
            return net
    raise DependencyError("no free 10.213.x.0/24 subnet for a Slurm sandbox", "stop old sandboxes")


@dataclass
class Sandbox:
    root: Path
    topologies: Mapping[str, NodeTopology]
    typed: bool = True  # one GRES type per GPU (False: plain `Gres=gpu:N`, Slurm's usual setup)
    tag: str = field(default_factory=lambda: f"rl{os.getpid() % 100000}{chr(97 + next(_SERIAL) % 26)}")
    conf: Path = field(init=False)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    bridge: str | None = None
    accounting: bool = False  # slurmdbd on a private MariaDB: accounts, QOS, fair share
    db: sandboxdb.AccountingDb | None = None

    def __post_init__(self) -> None:
        self.conf = self.root / "etc" / "slurm.conf"

    @classmethod
    def start(
        cls, root: Path, topologies: Mapping[str, NodeTopology], typed: bool = True, timeout: float = 60.0,
        accounting: bool = False,
    ) -> Sandbox:
        why = missing() or (sandboxdb.missing() if accounting else None)
        if why:
            raise DependencyError(f"cannot start a Slurm sandbox: {why}", "run as root after `make test-packages`")
        box = cls(root, topologies, typed, accounting=accounting)
        try:
            box._start(timeout)
        except BaseException:
            box.stop()
            raise
        return box

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    # -- start ----------------------------------------------------------------------------------
    def _start(self, timeout: float) -> None:
        for sub in ("etc", "dev", "log", "state", "run"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        for name in self.topologies:
            for sub in ("spool", "tmp"):
                (self.root / sub / name).mkdir(parents=True, exist_ok=True)
        self.bridge = f"{self.tag}br"
        with host_lock("subnets"):  # another sandbox or `cluster up` must not pick it meanwhile
            net = _free_subnet()
            hosts = list(net.hosts())
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            _run("ip", "addr", "add", f"{hosts[0]}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        addrs = {}
        for i, name in enumerate(self.topologies):
            ns, outer = f"{self.tag}n{i}", f"{self.tag}v{i}"
            _run("ip", "netns", "add", ns)
            self.namespaces.append(ns)
            _run("ip", "link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _run("ip", "link", "set", outer, "master", self.bridge, "up")
            addrs[name] = str(hosts[10 + i])
            _run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{addrs[name]}/24", "dev", "eth0")
            _run("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
            _run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        max_gpus = max((t.n_gpus for t in self.topologies.values()), default=0)
        for gpu in range(max_gpus):
            dev = self.root / "dev" / f"nvidia{gpu}"
            if not dev.exists():
                os.mknod(dev, 0o600 | 0o020000, os.makedev(NVIDIA_MAJOR, gpu))
        if self.accounting:  # before slurmctld, which registers with slurmdbd as it starts
            self.db = sandboxdb.AccountingDb.start(self.root / "db", self.root / "etc", CLUSTER, timeout)
        self._write_conf(str(hosts[0]), addrs)
        env = self.env()
        log = self.root / "log"
        ctld = ["slurmctld", "-D", "-i", "-f", str(self.conf)]
        self.procs.append(_spawn(ctld, env, log / "slurmctld.out"))
        for i, name in enumerate(self.topologies):
            self.procs.append(self._slurmd(i, name))
        self._wait_idle(timeout)

    def _write_conf(self, ctld_addr: str, addrs: Mapping[str, str]) -> None:
        r = self.root
        lines = [
            f"ClusterName={CLUSTER}",
            f"SlurmctldHost={socket.gethostname()}({ctld_addr})",
            f"SlurmctldPort={sandboxdb.free_port()}",
            "SlurmdPort=6818",
            "AuthType=auth/none",
            "CredType=cred/none",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={r}/state",
            f"SlurmdSpoolDir={r}/spool/%n",
            # Every node shares this host's file system: PMIx's per-step folders go per node.
            f"TmpFS={r}/tmp/%n",
            f"SlurmctldPidFile={r}/run/slurmctld.pid",
            f"SlurmdPidFile={r}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={r}/log/slurmctld.log",
            f"SlurmdLogFile={r}/log/slurmd-%n.log",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SlurmdParameters=config_overrides",
            "GresTypes=gpu",
            "SchedulerType=sched/backfill",
            # Heterogeneous jobs are started by the backfill scheduler only: run it every second.
            "SchedulerParameters=bf_interval=1",
            "MpiDefault=none",
            "ReturnToService=2",
            *(self.db.slurm_conf_lines() if self.db else ["AccountingStorageType=accounting_storage/none"]),
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "MinJobAge=600",
            "KillWait=2",
            "InactiveLimit=0",
            "MessageTimeout=20",
        ]
        for name, topo in self.topologies.items():
            cpus = max(2, 2 * topo.n_gpus)
            feature = gpu_feature(topo.gpu_model)  # as `slurm gres-conf` tells an admin to declare it
            lines.append(
                f"NodeName={name} NodeAddr={addrs[name]} CPUs={cpus} RealMemory=4000 "
                f"Gres={node_gres(topo.n_gpus) if self.typed else f'gpu:{topo.n_gpus}'} State=UNKNOWN"
                + (f" Features={feature}" if feature else "")
            )
        lines.append("PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO")
        (r / "etc" / "slurm.conf").write_text("\n".join(lines) + "\n")
        gres = []
        for name, topo in self.topologies.items():
            files = [str(r / "dev" / f"nvidia{i}") for i in range(topo.n_gpus)]
            gres += gres_conf_lines(name, topo, files, typed=self.typed)
        (r / "etc" / "gres.conf").write_text("\n".join(gres) + "\n")
        (r / "etc" / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nConstrainDevices=no\n")

    def _wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        want = set(self.topologies)
        last = ""
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.poll() is not None:
                    raise DependencyError(
                        f"a Slurm daemon of the sandbox exited ({proc.args!r})", f"see {self.root / 'log'}"
                    )
            out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env(),
                                 capture_output=True, text=True)  # fmt: skip
            last = out.stdout + out.stderr
            idle = {ln.split()[0] for ln in out.stdout.splitlines() if ln.split()[1:] == ["idle"]}
            if want <= idle:
                return
            time.sleep(0.5)
        raise DependencyError(f"Slurm sandbox nodes not idle after {timeout:.0f} s: {last.strip()}",
                              f"see {self.root / 'log'}")  # fmt: skip

    # -- a node lost and back ----------------------------------------------------------------------
    def crash(self, node: str) -> None:
        """Every process of ``node`` (its slurmd, its steps, their ranks) killed at once, as when
        the machine dies: Slurm learns of it only when told, or when its pings time out."""
        _signal_namespace(self.namespaces[list(self.topologies).index(node)], signal.SIGKILL)

    def revive(self, node: str, timeout: float = 30.0) -> None:
        """``node``'s slurmd started again (after ``crash``), once the old one is gone."""
        i = list(self.topologies).index(node)
        self.procs[1 + i].wait(timeout=timeout)
        self.procs[1 + i] = self._slurmd(i, node)

    def _slurmd(self, i: int, name: str) -> subprocess.Popen[bytes]:
        # The node's own host name, set inside a new UTS namespace, then slurmd.
        argv = ["ip", "netns", "exec", self.namespaces[i], "unshare", "--uts", "--", sys.executable, "-c", _SETHOST,
                name, "slurmd", "-D", "-f", str(self.conf), "-N", name]  # fmt: skip
        return _spawn(argv, self.env(), self.root / "log" / f"slurmd-{name}.out")

    # -- stop -----------------------------------------------------------------------------------
    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()
        # A slurmstepd outlives its slurmd by design (a step survives a slurmd restart): the steps
        # of jobs still running stay in their node's namespace, holding it and the logs, until told.
        for ns in self.namespaces:
            _signal_namespace(ns, signal.SIGTERM)
        deadline = time.monotonic() + STEPS_GRACE_S
        while time.monotonic() < deadline and any(_namespace_pids(ns) for ns in self.namespaces):
            time.sleep(0.1)
        for ns in self.namespaces:
            _signal_namespace(ns, signal.SIGKILL)
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
        self.namespaces.clear()
        if self.bridge:
            subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True)
            self.bridge = None
        if self.db is not None:
            self.db.stop()
            self.db = None


def _namespace_pids(namespace: str) -> list[int]:
    listed = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    return [int(pid) for pid in listed.stdout.split()]


def _signal_namespace(namespace: str, sig: signal.Signals) -> None:
    """``sig`` to every process in a node's network namespace."""
    for pid in _namespace_pids(namespace):
        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
            os.kill(pid, sig)


_SETHOST = "import os, socket, sys; socket.sethostname(sys.argv[1]); os.execvp(sys.argv[2], sys.argv[2:])"


def _spawn(argv: list[str], env: dict[str, str], out: Path) -> subprocess.Popen[bytes]:
    with open(out, "ab") as fh:
        return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
