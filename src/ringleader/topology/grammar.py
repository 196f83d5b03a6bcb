"""The grammar of names that are not DNS labels but reach Kubernetes, Slurm or a table: label keys
and values (Kubernetes' own), and the switch and NVLink domain names of a cluster file. One
definition, read by the CLI, the cluster file's schema and the engines."""

from __future__ import annotations

import re

from ringleader.errors import UsageError

# Kubernetes label keys ([prefix/]name) and values: what node labels and jobs' labels must be on
# every engine (a label becomes a Kubernetes label, a Slurm feature, a line of a table).
LABEL_KEY_PATTERN = r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
LABEL_VALUE_PATTERN = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
# Names in a cluster file that are not Kubernetes names (a switch, an NVLink domain): letters,
# digits and - _ . : inside, no space, quote, ';' or '$' that a Slurm or shell line could read.
WORD_PATTERN = r"^([A-Za-z0-9]([-A-Za-z0-9_.:]{0,251}[A-Za-z0-9])?)?$"
LABEL_KEY_RE, LABEL_VALUE_RE = re.compile(LABEL_KEY_PATTERN), re.compile(LABEL_VALUE_PATTERN)


def check_label(key: str, value: str | None, what: str = "label") -> None:
    """Refuse a label that is not a Kubernetes label (``value`` None: the key alone)."""
    if not LABEL_KEY_RE.fullmatch(key):
        raise UsageError(f"invalid {what} key {key!r}",
                         "use [prefix/]name: up to 63 letters, digits, '-', '_', '.', e.g. gpu-schedule")  # fmt: skip
    if value is not None and not LABEL_VALUE_RE.fullmatch(value):
        raise UsageError(
            f"invalid {what} value {value!r} for {key}",
            "use up to 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit",
        )
