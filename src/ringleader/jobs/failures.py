"""Why a gang failed, as a restart needs to know it: the program's own exit, or a fault of the
node or network it ran on (and which node to blame). Read from what every engine has: the
failed instance's exit code, its engine's note, the node it ran on and the end of its log.

A program that exits non-zero by itself fails the same way wherever it runs: it is restarted
(up to ``--max-restarts``) but no node is blamed. A lost ssh connection (ssh's exit code 255),
an instance that could not start on its node, or a log that ends in a connection error of
NCCL, Gloo, Open MPI or the kernel's socket layer, or a missing GPU, blames the node; so does a
host the engine heard nothing from. The verdict (``cordon_reason``) cordons a node only on what
a user cannot forge: a silent host at once, two failures the engine saw itself, or the logs of
several jobs; one job cordons one node at most (the restart then goes elsewhere).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ringleader.scheduler import ClusterState
from ringleader.scheduler.cycle import without_nodes

SSH_FAILED = 255  # ssh's own exit code: the connection, not the remote command, failed
# How many faults blamed on a node, by different failures, cordon it.
BLAMES_TO_CORDON = 2
# How many nodes one job's failures may cordon; more takes an administrator's `node cordon`.
CORDONS_PER_JOB = 1
# How much of the end of a failed rank's log is read for the patterns below.
LOG_TAIL_BYTES = 16 << 10

# Lines that say the network or the machine failed under the program, not the program itself;
# each with the words a user reads in the job's events.
NODE_FAULTS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), what)
    for pattern, what in (
        (r"ORTE has lost communication|lost connection to (the )?(remote )?(daemon|host)|"
         r"ORTE daemon has unexpectedly failed|PRTE has lost communication", "Open MPI lost a node's daemon"),
        (r"NCCL (WARN|error).*(remote process exited|connection closed|Connection reset|socket)|"
         r"ncclRemoteError|ncclSystemError", "an NCCL connection error"),
        (r"gloo.*(Connection reset|Connection closed|Connection refused|timed out|Timed out)|"
         r"\[enforce fail at .*gloo/transport", "a Gloo connection error"),
        (r"Connection reset by peer|Broken pipe|No route to host|Network is unreachable|"
         r"Connection timed out|Connection refused", "a network connection error"),
        (r"no CUDA-capable device is detected|CUDA error: (unspecified launch failure|an illegal memory access)|"
         r"NVML_ERROR_GPU_IS_LOST|GPU has fallen off the bus|Xid", "a GPU fault"),
    )
)  # fmt: skip


@dataclass(frozen=True)
class Failure:
    """What failed: ``node_fault`` True when the node (or its network) is to blame, then
    ``node`` is the one blamed; ``why`` in a user's words."""

    node_fault: bool
    why: str
    node: str | None = None


def classify(
    exit_code: int | None, note: str, node: str | None, remote: bool, log_tail: str, job_nodes: Sequence[str] = ()
) -> Failure:
    """The failure of one instance: ``exit_code`` as its engine saw it (None: unknown, killed),
    ``note`` its engine's words (e.g. "cannot start: ..."), ``node`` where it ran, ``remote``
    whether it ran over ssh, ``log_tail`` the end of its log. A fault line that names another
    of the job's nodes (``job_nodes``; mpirun's "Remote daemon ... on node X") blames that one:
    the instance that reports a lost peer is not the one that failed."""
    if note.startswith("cannot start"):
        return Failure(True, f"it could not start on {node}: {note}", node)
    if _HOST_LOST.match(note):  # the engine heard nothing from the host: its own evidence
        return Failure(True, note, node)
    if remote and exit_code == SSH_FAILED:
        return Failure(True, f"ssh to {node} failed (exit code {SSH_FAILED}): the node or its network is lost", node)
    for pattern, what in NODE_FAULTS:
        found = _last_match(pattern, log_tail)
        if found:
            named = [n for n in job_nodes if n != node and re.search(rf"\b{re.escape(n)}\b", log_tail)]
            blamed = named[0] if len(named) == 1 else node
            return Failure(True, f"{what} on {blamed}: {found}", blamed)
    code = "unknown" if exit_code is None else str(exit_code)
    return Failure(False, f"the program exited with code {code}" + (f" ({note})" if note else ""))


# An engine's note that a host went silent ("host a lost: silent for 11 s (down or cut off)").
_HOST_LOST = re.compile(r"host \S+ lost: ")


def _last_match(pattern: re.Pattern[str], text: str) -> str | None:
    """The last line of ``text`` that matches, shortened to what a reason can hold."""
    for line in reversed(text.splitlines()):
        if pattern.search(line):
            line = line.strip()
            return line if len(line) <= 160 else line[:157] + "..."
    return None


def without_cordoned(state: ClusterState, cordoned: Mapping[str, str]) -> ClusterState:
    """``state`` with the free GPUs of cordoned nodes held: no gang is placed there, and no plan
    counts on them; what runs there runs on (as the queue's cycle masks them)."""
    return without_nodes(state, cordoned)


# -- the verdict on a failed run, and its words (every engine's) -----------------------------------
def restart_number(failed_runs: int, max_restarts: int, at_time_limit: bool = False) -> int | None:
    """Which restart a failed run gets (1 for the first), after ``failed_runs`` restarts for
    failures (preemptions not counted); None when it has none left of ``--max-restarts``, or it
    was stopped at its time limit (a restart would only hit it again)."""
    if at_time_limit or failed_runs >= max_restarts:
        return None
    return failed_runs + 1


def from_log(why: str) -> bool:
    """Whether a fault's only evidence is a line of the job's own log, which its user writes."""
    return any(why.startswith(f"{what} on ") for _, what in NODE_FAULTS)


def cordon_reason(
    faults: Sequence[tuple[str, str]], failure: Failure, last_of: str, cordoned: bool, cordons: Iterable[str] = ()
) -> str | None:
    """Why the node ``failure`` blames is cordoned, given its ``faults`` ((job, why) of each
    failure blamed on it, this one included) and ``last_of`` ("job x", "gang ns/x"); None while
    it is not to be, or is ``cordoned`` already.

    Only what a user cannot forge counts alone: a host that went silent cordons its node on
    the first failure (the restart goes elsewhere), and every failure the engine saw itself
    (ssh's own exit, an instance that could not start, Slurm's NODE_FAIL, a NotReady node) is
    one of the ``BLAMES_TO_CORDON`` needed; connection errors read in logs count once per job,
    so a job's own log text never cordons a node, several jobs' do. One job cordons at most
    ``CORDONS_PER_JOB`` nodes (``cordons``: the reasons of every cordon in place); more takes
    an administrator's `ringleader node cordon`."""
    if not failure.node_fault or cordoned:
        return None
    logged = {job for job, why in faults if from_log(why)}
    witnesses = len(logged) + sum(1 for _, why in faults if not from_log(why))
    if witnesses < (1 if _HOST_LOST.match(failure.why) else BLAMES_TO_CORDON):
        return None
    if sum(1 for reason in cordons if f"the last of {last_of}: " in reason) >= CORDONS_PER_JOB:
        return None
    count = f"{len(faults)} failure" + ("s" if len(faults) != 1 else "")
    return f"blamed for {count}, the last of {last_of}: {failure.why}"


def restarting_text(cause: str, restart: int, max_restarts: int) -> str:
    """The Restarting event: what failed and why (``cause``), and which restart this is."""
    return f"{cause}; restart {restart} of {max_restarts} (--max-restarts)"


def cordoned_text(node: str, reason: str, how: str = "") -> str:
    """The NodeCordoned event: the node, why, ``how`` where the engine says more (Slurm's drain)."""
    return f"node {node} cordoned: {reason}; {how + '; ' if how else ''}`ringleader node uncordon {node}` ends it"


def requeued_reason(why: str, restarts: int) -> str:
    """A requeued job's reason (``jobs.queues.read_preempted`` reads it back)."""
    return f"{why}; requeued (restart {restarts})"


def resume_text(restarts: int) -> str:
    """What a requeued job's next run is told, in its Requeued event."""
    return f"to run again with RINGLEADER_RESTARTS={restarts} (resume from your checkpoint)"
