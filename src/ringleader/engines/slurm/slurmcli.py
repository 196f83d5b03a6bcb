"""Slurm's own commands (scontrol, sbatch, squeue, scancel) run as argv lists, and their output
parsed into small values. Never through a shell; SLURM_CONF and the rest of the environment are
the caller's.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ringleader.errors import DependencyError, RingleaderError

TIMEOUT_S = 60.0
# One GRES item of `scontrol -d show node`'s GresUsed / Gres, or a job's per-node GRES:
# gpu:g3:1(IDX:3), gpu:2(IDX:0-1), gpu:tesla:4(S:0)  (the index list may hold commas).
_GRES_ITEM = re.compile(r"(?P<name>[^:,()=\s]+)(?::(?P<type>[^:,()\s]+))?:(?P<count>\d+)(?:\((?P<extra>[^)]*)\))?")


class SlurmError(RingleaderError):
    """A Slurm command failed; the message is Slurm's own."""


def run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    if shutil.which(argv[0]) is None:
        raise DependencyError(f"{argv[0]} not found: Slurm's client commands are missing",
                              "install slurm-client (make test-packages), or add Slurm's bin folder to PATH")
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{argv[0]} did not answer in {TIMEOUT_S:.0f} s", "check that slurmctld is up") from None
    if check and done.returncode != 0:
        message = (done.stderr.strip() or done.stdout.strip() or f"exit code {done.returncode}").splitlines()[-1]
        raise SlurmError(f"{argv[0]} failed: {message}", "check `scontrol ping` and SLURM_CONF")
    return done


def parse_records(text: str) -> list[dict[str, str]]:
    """`scontrol -o` output: one record a line of KEY=VALUE words (values may hold spaces only
    in the last keys, e.g. OS=Linux ...; those are kept whole up to the next KEY=)."""
    records = []
    for line in text.splitlines():
        if not line.strip():
            continue
        record: dict[str, str] = {"_line": line}
        key = None
        for word in line.split(" "):
            head, sep, value = word.partition("=")
            if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9_:/]*", head):
                key = head
                record[key] = value
            elif key is not None and word:
                record[key] += " " + word
        records.append(record)
    return records


def expand_indices(text: str) -> list[int]:
    """'0,2-3' -> [0, 2, 3]; 'N/A' or '' -> []."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part or not part[0].isdigit():
            continue
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (hi or lo).isdigit():  # anything else is not an index list
            out.extend(range(int(lo), int(hi or lo) + 1))
    return out


@dataclass(frozen=True)
class GresItem:
    name: str
    type: str | None
    count: int
    indices: tuple[int, ...]


def parse_gres(text: str) -> list[GresItem]:
    """GRES lists as scontrol prints them; indices from the ``(IDX:...)`` part when present."""
    items = []
    for m in _GRES_ITEM.finditer(text or ""):
        extra = m.group("extra") or ""
        idx = extra.partition("IDX:")[2] if "IDX:" in extra else ""
        items.append(GresItem(m.group("name"), m.group("type"), int(m.group("count")), tuple(expand_indices(idx))))
    return items


def job_node_gres(detail: str) -> list[tuple[str, list[int]]]:
    """A job's `-d` per-node GPU indices: ``Nodes=a CPU_IDs=0 Mem=0 GRES=gpu:g0:1(IDX:0)`` ->
    [("a", [0])] (a node list like a[1-2] is expanded by the caller)."""
    out = []
    for m in re.finditer(r"Nodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=(\S*)", detail):
        gpus = sorted({i for item in parse_gres(m.group(2)) if item.name == "gpu" for i in item.indices})
        out.append((m.group(1), gpus))
    return out


def hostnames(nodelist: str) -> list[str]:
    """Slurm's node-list syntax (node[1-3,5]) expanded by Slurm itself."""
    if not nodelist or nodelist in ("(null)", "None"):
        return []
    if "[" not in nodelist:
        return nodelist.split(",")
    return run(["scontrol", "show", "hostnames", nodelist]).stdout.split()


def slurm_time(text: str | None) -> float | None:
    """'2026-11-23T13:50:06' (local time) -> epoch seconds; Unknown/None/N/A -> None."""
    if not text or not text[0].isdigit():
        return None
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def show(kind: str, ident: str | None = None) -> list[dict[str, str]]:
    """`scontrol -o -d show <kind> [ident]` as records; a job id Slurm no longer knows -> []."""
    argv = ["scontrol", "-o", "-d", "show", kind, *([ident] if ident else [])]
    done = run(argv, check=False)
    if done.returncode != 0:
        if "Invalid job id" in done.stderr or "not found" in done.stderr:
            return []
        message = (done.stderr.strip() or f"exit code {done.returncode}").splitlines()[-1]
        raise SlurmError(f"scontrol show {kind} failed: {message}", "check `scontrol ping` and SLURM_CONF")
    if "No jobs in the system" in done.stdout:
        return []
    return parse_records(done.stdout)
