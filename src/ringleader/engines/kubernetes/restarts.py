"""Failed gangs restarted on Kubernetes (submit --max-restarts), as the other engines restart them
(jobs/failures.py): what a failed worker pod says of its failure, and whom it blames.

A worker pod (restartPolicy Never) that fails shows in the scheduler's pod watch (which selects
no phase, see client.ACTIVE_PODS) turning Failed, with its last state: its container's exit
code, its reason, and the end of its log (terminationMessagePolicy FallbackToLogsOnError). The scheduler
then blames the node where that says a node or the network failed (a node blamed twice is
cordoned, as `kubectl cordon` does, with the reason in an annotation), raises the gang's restart
count on its PodGroup, and deletes every pod of the gang with its grace; mpi-operator makes them
again, and the scheduler places them as any gang, away from cordoned nodes, each bound with the
new count, which its programs read as RINGLEADER_RESTARTS.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ringleader.engines.kubernetes import names
from ringleader.engines.kubernetes.objects import PodInfo, pod_info
from ringleader.jobs.failures import Failure, classify

# Pod status reasons that say the node failed under the pod, not the program.
NODE_REASONS = {"NodeLost", "Evicted", "UnexpectedAdmissionError", "NodeShutdown", "Terminated"}


@dataclass(frozen=True)
class PodFailure:
    """A gang member that failed, as its last state says."""

    pod: PodInfo
    run: int  # the restart count it ran with (RINGLEADER_RESTARTS)
    max_restarts: int  # the gang's --max-restarts
    exit_code: int | None
    note: str  # the pod's or its container's reason ("Error", "OOMKilled", "NodeLost")
    log_tail: str  # the end of its log, as kubelet kept it in the container's status

    def failure(self, job_nodes: list[str], node_ready: bool) -> Failure:
        """Whom this failure blames (jobs/failures.py), a node the kubelet lost first."""
        node = self.pod.node
        if not node_ready or self.note in NODE_REASONS:
            said = f"the pod's status says {self.note}" if self.note in NODE_REASONS else "it is NotReady"
            return Failure(True, f"node {node} failed under it: {said}", node)
        return classify(self.exit_code, self.note, node, False, self.log_tail, job_nodes)


def pod_failure(obj: Mapping[str, Any]) -> PodFailure | None:
    """The failure of a bound pod of ringleader's that ended Failed by itself; None for any other
    pod, one that was being deleted included (kubelet marks it Failed once it has stopped)."""
    status = obj.get("status") or {}
    if status.get("phase") != "Failed":
        return None
    pod = pod_info(obj)
    if pod.node is None or not pod.ours or pod.deleting:
        return None  # a pod deleted on purpose (preempted, restarted, its job deleted) ends as it was told
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    code, reason, message = None, str(status.get("reason") or ""), ""
    for container in status.get("containerStatuses") or ():
        done = (container.get("state") or {}).get("terminated") or {}
        if done and done.get("exitCode", 0) != 0:
            code, message = int(done["exitCode"]), str(done.get("message") or "")
            reason = reason or str(done.get("reason") or "")
            break
    return PodFailure(pod, _count(annotations.get(names.RESTARTS_ANNOTATION)),
                      _count(annotations.get(names.MAX_RESTARTS_ANNOTATION)), code, reason, message)  # fmt: skip


def blamed(node: Mapping[str, Any], gang: str, run: int, why: str) -> dict[str, str]:
    """A node's faults annotation with this failure added (the same run blamed twice counts once)."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    try:
        faults = json.loads(annotations.get(names.FAULTS_ANNOTATION) or "{}")
    except ValueError:
        faults = {}
    faults = faults if isinstance(faults, dict) else {}
    faults.setdefault(f"{gang}#{run}", why[:300])
    return faults


def _count(text: str | None) -> int:
    return int(text) if text is not None and text.isdigit() else 0


def ended_runs(text: str) -> list[tuple[float, float]]:
    """A PodGroup's runs annotation (names.RUNS_ANNOTATION) read back; one that is not as the
    scheduler writes it counts as no run (the gang's order then treats it as new)."""
    try:
        runs = [(float(start), float(end)) for start, end in json.loads(text)]
    except (ValueError, TypeError):
        return []
    return runs if all(math.isfinite(start) and math.isfinite(end) for start, end in runs) else []


def runs_annotation(runs: list[tuple[float, float]]) -> str:
    return json.dumps([[round(start, 3), round(end, 3)] for start, end in runs])
