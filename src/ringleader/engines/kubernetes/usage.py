"""Each team queue's fair-share usage, kept in the cluster (names.QUEUE_USAGE_CONFIG).

As Kueue's admission fair sharing keeps each LocalQueue's decayed consumed resources in its
status, sampled from the workloads it admitted, the scheduler keeps one decayed number of
GPU-seconds per queue, as of a time (``scheduler/teams.py`` ``usage_at``): the runs of the
queue's gangs up to then, ended ones included. The leader brings it up to now every few minutes
and soon after a gang stops holding GPUs (each span counted from the last ``as_of`` only), with
the ConfigMap's resourceVersion, so two writers never lose an update; a restarted scheduler or
another replica reads it back from its watch. An entry not as the scheduler writes it is left
out with one line in the log, and replaced by the next write.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

from ringleader.scheduler.teams import KeptUsage

# Kueue's usageSamplingInterval default: the kept usage of running gangs is brought up to date
# this often (and soon after any gang stops holding GPUs, so an ended run is never left out).
KEEP_EVERY_S = 300.0


def read_usage(data: Mapping[str, object]) -> tuple[dict[str, KeptUsage], list[str]]:
    """The ConfigMap's data read back: queue -> its kept usage; and, in words, each entry left out."""
    kept: dict[str, KeptUsage] = {}
    problems = []
    for queue, text in sorted(data.items()):
        try:
            entry = json.loads(str(text))
            gpu_s, as_of = float(entry["gpu_s"]), float(entry["as_of"])
        except (ValueError, TypeError, KeyError):
            gpu_s = as_of = math.nan
        if not (math.isfinite(gpu_s) and math.isfinite(as_of) and gpu_s >= 0):
            problems.append(f"queue {queue}: {str(text)[:80]!r} is not {{\"gpu_s\": N >= 0, \"as_of\": unix seconds}}")
            continue
        kept[queue] = KeptUsage(gpu_s, as_of)
    return kept, problems


def usage_data(kept: Mapping[str, KeptUsage]) -> dict[str, str]:
    """The ConfigMap's data for ``kept``, one key per queue."""
    return {queue: json.dumps({"gpu_s": k.gpu_s, "as_of": k.as_of}, sort_keys=True)
            for queue, k in sorted(kept.items())}  # fmt: skip
