"""Each team queue's fair-share usage as the scheduler's cache keeps it (usage.py): pods that
stop holding GPUs are counted until the usage kept in the cluster covers them, and what that
ConfigMap holds is read back, bad entries left out with one line in the log."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from kube.kubeobjs import node, pod
from ringleader.clock import ManualClock
from ringleader.engines.kubernetes import names
from ringleader.engines.kubernetes.cache import Cache
from ringleader.engines.kubernetes.usage import read_usage, usage_data
from ringleader.scheduler.teams import KeptUsage, TeamQueue, run_usage

START = datetime(2026, 12, 6, 10, tzinfo=UTC).timestamp()


def running(name: str, queue: str, gpus: int, at: float = START) -> dict[str, Any]:
    """A worker of ``queue`` bound to node n0 and started at ``at`` (kubelet's startTime)."""
    obj = pod(name, gpus=gpus, nodeName="n0")
    obj["metadata"]["annotations"] = {names.QUEUE_ANNOTATION: queue}
    obj["status"] = {"phase": "Running", "startTime": datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    return obj


def usage_config(data: dict[str, str], version: str = "1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "data": data,
            "metadata": {"name": names.QUEUE_USAGE_CONFIG, "namespace": names.SYSTEM_NAMESPACE,
                         "resourceVersion": version}}  # fmt: skip


def cache_on(clock: ManualClock, *pods: dict[str, Any]) -> Cache:
    cache = Cache(clock=clock)
    cache.queues = (TeamQueue("a"), TeamQueue("b"))
    cache.replace("nodes", [node("n0")])
    cache.replace("pods", list(pods))
    return cache


def test_a_run_that_ended_counts_until_the_kept_usage_covers_it() -> None:
    """A gang of queue a that ran an hour and ended still counts (it would have looked unused);
    once the usage kept in the cluster covers its end, the kept number counts it, not twice."""
    clock = ManualClock(START + 3600)
    cache = cache_on(clock, running("w0", "a", 4), running("w1", "a", 4))
    hour = run_usage(8, START, START + 3600, START + 3600)
    assert cache.queue_usage(clock.now()) == pytest.approx({"a": hour})
    for name in ("w0", "w1"):
        done = running(name, "a", 4)
        done["status"]["phase"] = "Succeeded"
        cache.apply("pods", "MODIFIED", done)
    clock.advance(600)
    assert cache.queue_usage(clock.now()) == pytest.approx({"a": run_usage(8, START, START + 3600, clock.now())})
    kept = cache.usage_now(clock.now())  # what the leader writes, back through the watch
    cache.apply("configmaps", "MODIFIED", usage_config(usage_data(kept)))
    assert cache.ended == []
    assert cache.queue_usage(clock.now()) == pytest.approx({"a": run_usage(8, START, START + 3600, clock.now())})


def test_a_deleted_pod_ends_its_run_once_and_an_older_watch_event_changes_nothing() -> None:
    """A pod being deleted still holds its GPUs (its containers may run); gone, its run ends,
    once. A watch event from before this replica's own write never takes the usage back."""
    clock = ManualClock(START + 100)
    cache = cache_on(clock, running("w0", "b", 2))
    deleting = running("w0", "b", 2)
    deleting["metadata"]["deletionTimestamp"] = "2026-12-06T10:01:40Z"
    cache.apply("pods", "MODIFIED", deleting)
    assert cache.ended == []
    cache.apply("pods", "DELETED", deleting)
    cache.apply("pods", "DELETED", deleting)
    assert len(cache.ended) == 1 and cache.ended[0].gpus == 2
    new, old = KeptUsage(200.0, START + 100), KeptUsage(50.0, START + 10)
    cache.apply("configmaps", "MODIFIED", usage_config(usage_data({"b": new}), "2"))
    cache.apply("configmaps", "MODIFIED", usage_config(usage_data({"b": old}), "1"))
    assert cache.kept_usage == {"b": new} and cache.ended == []


def test_bad_usage_entries_are_left_out_with_one_line_each(caplog: pytest.LogCaptureFixture) -> None:
    """An entry not as the scheduler writes it counts as no usage kept for that queue, said in
    one log line naming the queue; the others are read; a deleted ConfigMap forgets them all."""
    data = {"a": '{"gpu_s": 10, "as_of": 5}', "b": "ten", "c": '{"gpu_s": -1, "as_of": 5}', "d": '{"gpu_s": 1}'}
    kept, problems = read_usage(data)
    assert kept == {"a": KeptUsage(10.0, 5.0)}
    assert [p.split(":")[0] for p in problems] == ["queue b", "queue c", "queue d"]
    cache = Cache()
    with caplog.at_level(logging.WARNING, logger="ringleader.kube.cache"):
        cache.replace("configmaps", [usage_config(data)])
    assert cache.kept_usage == {"a": KeptUsage(10.0, 5.0)}
    assert len(caplog.records) == 3 and "queue b: 'ten' is not" in caplog.records[0].getMessage()
    cache.apply("configmaps", "DELETED", usage_config({}))
    assert cache.kept_usage == {} and cache.usage_config is None
