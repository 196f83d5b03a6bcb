"""Slurm's accounting for a sandbox (``sandbox.py``): a private MariaDB (its own data folder, a
socket only, no network) and a slurmdbd on it, the cluster registered, so that slurmctld keeps
accounts, QOS and fair share as a site's does. Root only, like the sandbox.

    db = AccountingDb.start(root / "db", conf_dir, cluster="ringleader")
    ...slurm.conf gets db.slurm_conf_lines()...
    db.stop()

slurmdbd reads ``slurmdbd.conf`` beside ``slurm.conf`` (the folder of SLURM_CONF) and reaches
the database through the MySQL client library, which takes the socket from MYSQL_UNIX_PORT.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from ringleader.errors import DependencyError

COMMANDS = ("mariadbd", "mariadb-install-db", "mariadb", "slurmdbd", "sacctmgr")


def missing() -> str | None:
    """Why a sandbox's accounting cannot start here (None if it can)."""
    absent = [c for c in COMMANDS if shutil.which(c) is None]
    if absent:
        return f"{', '.join(absent)} not installed (make test-packages installs mariadb-server and slurmdbd)"
    return None


def free_port() -> int:
    """A TCP port free on every interface now (slurmctld listens on all of them, slurmdbd on
    localhost), for a daemon of the sandbox to take."""
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


@dataclass
class AccountingDb:
    root: Path  # the database's folder: data/, the socket, logs
    conf_dir: Path  # where slurm.conf is (slurmdbd.conf goes beside it)
    cluster: str
    port: int = field(default_factory=free_port)  # slurmdbd's (slurmctld and sacctmgr reach it on localhost)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def socket(self) -> Path:
        return self.root / "mysqld.sock"

    @classmethod
    def start(cls, root: Path, conf_dir: Path, cluster: str, timeout: float = 60.0) -> AccountingDb:
        why = missing()
        if why:
            raise DependencyError(f"cannot start Slurm's accounting: {why}", "run `make test-packages` as root")
        db = cls(root, conf_dir, cluster)
        try:
            db._start(timeout)
        except BaseException:
            db.stop()
            raise
        return db

    def slurm_conf_lines(self) -> list[str]:
        """slurm.conf's accounting: slurmdbd, GPUs tracked (for GrpTRES=gres/gpu=N), limits and QOS
        enforced, jobs ordered by fair share (priority/multifactor), usage decayed every minute."""
        return [
            "AccountingStorageType=accounting_storage/slurmdbd",
            "AccountingStorageHost=localhost",
            f"AccountingStoragePort={self.port}",
            "AccountingStorageTRES=gres/gpu",
            "AccountingStorageEnforce=associations,limits,qos",
            "PriorityType=priority/multifactor",
            "PriorityWeightFairshare=10000",
            "PriorityCalcPeriod=1",
        ]

    def _start(self, timeout: float) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        log = self.root / "log"
        log.mkdir(exist_ok=True)
        data = self.root / "data"
        if not data.exists():
            subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root",
                            "--auth-root-authentication-method=socket", "--skip-test-db"],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
        mariadbd = ["mariadbd", "--no-defaults", f"--datadir={data}", f"--socket={self.socket}", "--skip-networking",
                    f"--pid-file={self.root / 'mysqld.pid'}", "--user=root", f"--log-error={log / 'mariadb.log'}",
                    "--innodb-buffer-pool-size=64M"]  # fmt: skip
        self.procs.append(_spawn(mariadbd, os.environ.copy(), log / "mariadbd.out"))
        deadline = time.monotonic() + timeout
        self._wait(["mariadb", f"--socket={self.socket}", "-e", "select 1"], deadline, "MariaDB")
        self._write_conf()
        env = {**os.environ, "SLURM_CONF": str(self.conf_dir / "slurm.conf"), "MYSQL_UNIX_PORT": str(self.socket)}
        self.procs.append(_spawn(["slurmdbd", "-D"], env, log / "slurmdbd.out"))
        self._wait(["sacctmgr", "-n", "-P", "show", "cluster"], deadline, "slurmdbd")
        subprocess.run(["sacctmgr", "-i", "add", "cluster", self.cluster], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip

    def _write_conf(self) -> None:
        """slurmdbd.conf (0600, as slurmdbd requires), and the slurm.conf sacctmgr reads until the
        sandbox writes its own (the cluster's name and where slurmdbd is)."""
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        lines = [
            "AuthType=auth/none",
            "DbdHost=localhost",
            f"DbdPort={self.port}",
            "SlurmUser=root",
            "StorageType=accounting_storage/mysql",
            "StorageHost=localhost",
            "StorageUser=root",
            "StorageLoc=slurm_acct_db",
            f"PidFile={self.root / 'slurmdbd.pid'}",
            f"LogFile={self.root / 'log' / 'slurmdbd.log'}",
        ]
        conf = self.conf_dir / "slurmdbd.conf"
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write("\n".join(lines) + "\n")
        slurm_conf = self.conf_dir / "slurm.conf"
        if not slurm_conf.exists():
            slurm_conf.write_text("\n".join([f"ClusterName={self.cluster}", "SlurmctldHost=localhost",
                                             "AuthType=auth/none", *self.slurm_conf_lines()]) + "\n")  # fmt: skip

    def _wait(self, argv: list[str], deadline: float, what: str) -> None:
        env = {**os.environ, "SLURM_CONF": str(self.conf_dir / "slurm.conf")}
        last = ""
        while time.monotonic() < deadline:
            if any(proc.poll() is not None for proc in self.procs):
                raise DependencyError(f"MariaDB or slurmdbd of the sandbox exited before {what} answered",
                                      f"see {self.root / 'log'}")  # fmt: skip
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
            if done.returncode == 0:
                return
            last = (done.stderr or done.stdout).strip()
            time.sleep(0.2)
        raise DependencyError(f"{what} did not answer: {last[-200:]}", f"see {self.root / 'log'}")

    def stop(self) -> None:
        for proc in reversed(self.procs):  # slurmdbd first, then MariaDB
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()


def _spawn(argv: list[str], env: dict[str, str], out: Path) -> subprocess.Popen[bytes]:
    with open(out, "ab") as fh:
        return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
