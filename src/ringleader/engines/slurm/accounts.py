"""Team queues on Slurm are Slurm's own, kept by slurmdbd for every user of the cluster (not in
a file in one user's home):

    queue team-a, 8 GPUs, weight 2   =  QOS team-a with GrpTRES=gres/gpu=8
                                        + account team-a with Fairshare=2, QOS team-a its only
                                          and default QOS

so Slurm itself holds every job of the account (ringleader's, and plain `sbatch --account`
ones) to the quota, and orders them by fair share (priority/multifactor). Read and written with
sacctmgr, usage read from sshare, all as argv lists, never a shell. Any account with a QOS of
its own name whose GrpTRES limits gres/gpu is a queue, whoever made it; the queue's order rides
in the QOS's Description.

What Slurm cannot keep is refused in one line: borrowing (a QOS's GrpTRES is a hard limit, and
Slurm lends no idle quota between accounts), a quota per GPU model (ringleader's nodes declare
one GRES type per GPU, for exact GPU ids, so a model is no GRES type a QOS could limit), a
weight that is not a whole number of fair-share shares.
"""

from __future__ import annotations

import getpass
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from ringleader.engines.slurm import slurmcli
from ringleader.errors import ConflictError, DependencyError, NotFoundError, RingleaderError, UsageError
from ringleader.scheduler.order import QueueOrder
from ringleader.scheduler.teams import ANY_TYPE, TeamQueue

GPU_TRES = "gres/gpu"
# The Description of the accounts and QOS ringleader makes; the QOS's carries the queue's order
# ("ringleader queue order=las"), which Slurm has no field for.
MARK = "ringleader queue"
READ_AGAIN_S = 2.0  # how long the queues read from slurmdbd are taken as current
# What sacctmgr says to a user who is not a Slurm administrator or operator.
DENIED = ("permission denied", "privilege", "not authorized")


class AdminNeeded(RingleaderError):
    """What only a Slurm administrator may change (accounts, QOS, who is in an account)."""


@dataclass(frozen=True)
class Accounting:
    """Where slurmctld keeps accounts (slurm.conf's AccountingStorageType) and its ClusterName."""

    storage: str
    cluster: str

    @staticmethod
    def read() -> Accounting:
        config = {}
        for line in slurmcli.run(["scontrol", "show", "config"]).stdout.splitlines():
            key, _, value = line.partition("=")
            config[key.strip()] = value.strip()
        return Accounting(config.get("AccountingStorageType", "accounting_storage/none"),
                          config.get("ClusterName", ""))  # fmt: skip


def grp_gpus(tres: str) -> int | None:
    """``cpu=4,gres/gpu=8`` -> 8; None where gres/gpu is not limited."""
    for item in tres.split(","):
        key, _, value = item.partition("=")
        if key == GPU_TRES and value.isdigit():
            return int(value)
    return None


def order_of(description: str) -> QueueOrder | None:
    """The order a QOS's Description carries (None: none, or not one ringleader knows)."""
    found = re.search(r"\border=(\w+)", description)
    try:
        return QueueOrder(found[1]) if found else None
    except ValueError:
        return None


def _sacctmgr_rows(*args: str) -> list[list[str]]:
    done = slurmcli.run(["sacctmgr", "-n", "-P", *args])
    return [line.split("|") for line in done.stdout.splitlines() if line.strip()]


class SlurmQueues:
    """The queues slurmdbd keeps for this cluster (slurm.conf's ClusterName)."""

    def __init__(self) -> None:
        # when, the queues read then, and each account's users
        self._read: tuple[float, list[TeamQueue], dict[str, set[str]]] | None = None

    @cached_property
    def accounting(self) -> Accounting:
        return Accounting.read()

    def enabled(self) -> bool:
        return self.accounting.storage == "accounting_storage/slurmdbd"

    def _require(self) -> None:
        if not self.enabled():
            raise DependencyError(
                "team queues on Slurm are slurmdbd's accounts and QOS, and this Slurm keeps no accounting "
                f"(AccountingStorageType={self.accounting.storage})",
                "ask the Slurm administrator for slurmdbd (AccountingStorageType=accounting_storage/slurmdbd, "
                "AccountingStorageTRES=gres/gpu, AccountingStorageEnforce=associations,limits,qos); see docs/slurm.md",
            )

    def queues(self) -> list[TeamQueue]:
        """Every account with a QOS of its own name that limits gres/gpu, as a queue (none
        without accounting). Read again after READ_AGAIN_S: one submit asks several times,
        and each read is two round trips to slurmdbd."""
        return list(self._kept()[0])

    def check_member(self, name: str) -> None:
        """This user may submit to queue ``name``: Slurm refuses a job of an account the user
        has no association with, so ringleader says so before it queues the job."""
        if not self.enabled() or not any(q.name == name for q in self.queues()):
            return  # no such queue: check_queue_exists says so
        user = getpass.getuser()
        if user not in self._kept()[1].get(name, set()):
            raise AdminNeeded(f"user {user!r} is not in Slurm account {name}, so their jobs may not use queue {name}",
                              f"ask the Slurm administrator to run `sacctmgr -i add user {user} account={name}`")

    def _kept(self) -> tuple[list[TeamQueue], dict[str, set[str]]]:
        if self._read is None or time.monotonic() - self._read[0] > READ_AGAIN_S:
            # a Slurm without slurmdbd keeps no accounts, so no queues (sacctmgr would refuse)
            self._read = (time.monotonic(), *(self._queues() if self.enabled() else ([], {})))
        return self._read[1], self._read[2]

    def _queues(self) -> tuple[list[TeamQueue], dict[str, set[str]]]:
        """The queues, and the users of each account."""
        qos_rows = _sacctmgr_rows("show", "qos", "format=Name,GrpTRES,Description")
        limits = {row[0]: grp_gpus(row[1]) for row in qos_rows}
        orders = {row[0]: order_of(row[2]) for row in qos_rows}
        out: list[TeamQueue] = []
        members: dict[str, set[str]] = {}
        where = ["where", f"cluster={self.accounting.cluster}"] if self.accounting.cluster else []
        for account, user, shares, qos in _sacctmgr_rows("show", "assoc", *where, "format=Account,User,Fairshare,QOS"):
            gpus = limits.get(account)
            if user:
                members.setdefault(account, set()).add(user)
            if user or gpus is None or account not in qos.split(","):
                continue
            weight = float(shares) if shares.isdigit() and int(shares) > 0 else 1.0  # "parent": the parent's
            out.append(TeamQueue(account, ((ANY_TYPE, gpus),), weight, order=orders.get(account)))
        return out, members

    def put(self, queue: TeamQueue, overwrite: bool) -> None:
        """``queue`` made (or, with ``overwrite``, changed) in slurmdbd, the user who made it
        added to its account so that their jobs may name it."""
        self._require()
        gpus, shares = slurm_terms(queue)
        self._read = None
        accounts = {row[0] for row in _sacctmgr_rows("show", "account", "format=Account")}
        qos_kept = {row[0] for row in _sacctmgr_rows("show", "qos", "format=Name")}
        exists = queue.name in accounts
        if exists and not any(q.name == queue.name for q in self.queues()):
            raise ConflictError(f"account {queue.name!r} exists in Slurm and is no queue (it has no QOS "
                                f"{queue.name} limiting gres/gpu)", "pick another name")  # fmt: skip
        if exists and not overwrite:
            fix = f"give --overwrite to change it, or `ringleader queue delete {queue.name}`"
            raise ConflictError(f"queue {queue.name!r} already exists", fix)
        limit, user = f"GrpTRES={GPU_TRES}={gpus}", getpass.getuser()
        described = f"Description={MARK}" + (f" order={queue.order.value}" if queue.order else "")
        steps = [
            ["modify", "qos", "where", f"name={queue.name}", "set", limit, described] if queue.name in qos_kept else
            ["add", "qos", queue.name, limit, described],
            ["modify", "account", "where", f"name={queue.name}", "set", f"Fairshare={shares}"] if exists else
            ["add", "account", queue.name, f"Description={MARK}", "Organization=ringleader",
             f"Fairshare={shares}", f"QosLevel={queue.name}", f"DefaultQOS={queue.name}"],
            ["add", "user", user, f"account={queue.name}"],
        ]  # fmt: skip
        try:
            for step in steps:
                _sacctmgr(step, queue, user)
        finally:
            self._read = None  # changed, or partly: read it again

    def delete(self, name: str) -> None:
        """The queue's account (its users' associations with it) and its QOS removed; Slurm
        refuses while a job of the account is in its queue."""
        self._require()
        self._read = None
        if not any(q.name == name for q in self.queues()):
            raise NotFoundError(f"queue {name!r} not found", "see `ringleader queue list --engine slurm`")
        try:
            _sacctmgr(["delete", "account", f"name={name}"], None, getpass.getuser())
            _sacctmgr(["delete", "qos", f"name={name}"], None, getpass.getuser())
        finally:
            self._read = None

    def usage(self, names: Sequence[str]) -> dict[str, float]:
        """Queue -> its decayed GPU-seconds as Slurm counts them (every job of the account,
        ringleader's or not, deleted or not)."""
        if not names:
            return {}
        done = slurmcli.run(["sshare", "-n", "-P", "-A", ",".join(names), "-o", "Account,User,GrpTRESRaw"])
        out = {}
        for line in done.stdout.splitlines():
            account, user, raw = [*line.split("|"), "", ""][:3]
            if account.strip() in names and not user:
                tres = dict(item.partition("=")[::2] for item in raw.split(","))
                out[account.strip()] = float(tres.get(GPU_TRES) or 0) * 60.0  # TRES-minutes
        return out


def slurm_terms(queue: TeamQueue) -> tuple[int, int]:
    """The queue's GrpTRES GPUs and fair-share shares; what Slurm cannot keep is refused."""
    if queue.cohort is not None:
        raise UsageError("--cohort: Slurm lends no idle quota between accounts (a QOS's GrpTRES is a hard limit), "
                         "so queues on Slurm do not borrow", "leave --cohort out: each queue gets its own quota "
                         "(borrowing runs on the embedded and kubernetes engines)")  # fmt: skip
    if len(queue.quota) != 1 or queue.quota[0][0] != ANY_TYPE:
        raise UsageError("--gpus TYPE=N: ringleader's Slurm nodes declare one GRES type per GPU (for exact GPU ids), "
                         "so a QOS cannot limit one GPU model", "give --gpus N (every GPU type)")  # fmt: skip
    if queue.weight != math.floor(queue.weight):
        raise UsageError(f"--weight {queue.weight:g}: Slurm's fair-share shares are whole numbers",
                         f"give --weight {max(round(queue.weight), 1)}")  # fmt: skip
    return queue.quota[0][1], int(queue.weight)


def _sacctmgr(step: list[str], queue: TeamQueue | None, user: str) -> None:
    """One sacctmgr change (-i: no confirmation); a refusal for want of rights says what to ask
    the administrator for."""
    done = slurmcli.run(["sacctmgr", "-i", *step], check=False)
    said = " ".join((done.stdout + " " + done.stderr).split())
    if done.returncode == 0 or (step[:2] == ["add", "user"] and "Nothing new added" in said):  # already in it
        return
    if any(word in said.lower() for word in DENIED):
        raise AdminNeeded(f"sacctmgr refused {user!r}: only a Slurm administrator may change accounts and QOS",
                          "ask the administrator to run " + admin_commands(queue, step, user))  # fmt: skip
    raise slurmcli.SlurmError(f"sacctmgr {' '.join(step[:2])} failed: {said[-300:]}",
                              "see `sacctmgr show assoc` and `sacctmgr show qos`")  # fmt: skip


def admin_commands(queue: TeamQueue | None, step: list[str], user: str) -> str:
    """The sacctmgr lines an administrator runs for ``queue`` (or the refused ``step``)."""
    if queue is None:
        return f"`sacctmgr -i {' '.join(step)}`"
    gpus, shares = queue.quota[0][1], int(queue.weight)
    return (f"`sacctmgr -i add qos {queue.name} GrpTRES={GPU_TRES}={gpus}`, "
            f"`sacctmgr -i add account {queue.name} Fairshare={shares} QosLevel={queue.name} "
            f"DefaultQOS={queue.name}` and `sacctmgr -i add user {user} account={queue.name}`")  # fmt: skip
