"""Contract tests: the scheduler against a fake API server over real HTTP with the official
client. They assert the exact requests a real API server would receive."""

from __future__ import annotations

import copy
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kube.fakeapi import FakeApiServer, permitted
from kube.kubeobjs import node, pod, podgroup
from ringleader.clock import ManualClock
from ringleader.engines.kubernetes import manifests, names
from ringleader.engines.kubernetes.client import Api, load_client
from ringleader.engines.kubernetes.engine import job_view
from ringleader.engines.kubernetes.scheduler import Scheduler
from ringleader.jobs.queues import read_preempted
from waiting import wait_for

pytestmark = pytest.mark.slow  # multi-process runs of seconds each: run early (tests/conftest.py)


def scheduler(fake: FakeApiServer, identity: str = "sched-a") -> Scheduler:
    s = Scheduler(Api(load_client(host=fake.url)), identity)
    s.sync()
    assert s.elector.try_acquire_or_renew()
    return s


def gang(fake: FakeApiServer, name: str, workers: int, gpus: int = 1) -> None:
    fake.put("podgroups", podgroup(name, workers))
    for i in range(workers):
        fake.put("pods", pod(f"{name}-worker-{i}", gang=name, gpus=gpus))


def writes(fake: FakeApiServer) -> list[tuple[str, str]]:
    """(verb, pod) of every pod patch, binding and deletion, in order."""
    out = []
    for r in fake.requests:
        if "/pods/" in r.path and r.verb in ("patch", "bind", "delete"):
            out.append((r.verb, r.path.split("/pods/")[1].split("/")[0]))
    return out


def test_contract_gang_annotations_then_bindings(fake: FakeApiServer) -> None:
    uuids = [f"GPU-{g:08x}-aaaa-bbbb-cccc-{g:012x}" for g in range(8)]
    for i in range(2):
        fake.put("nodes", node(f"gpu-{i}"))
        published = fake.get("nodes", f"gpu-{i}")
        published["metadata"]["annotations"][names.GPU_UUIDS_ANNOTATION] = ",".join(uuids)  # the agent's
        fake.put("nodes", published)
    gang(fake, "vgg", 4)
    s = scheduler(fake)
    results = s.cycle()
    assert [r.ok for r in results] == [True]
    members = [f"vgg-worker-{i}" for i in range(4)]
    assert writes(fake) == [("bind", m) for m in members]  # the GPU ids travel on the Binding: no pod patch
    binds = fake.calls("bind")
    ids = [b.body["metadata"]["annotations"][names.GPU_IDS_ANNOTATION] for b in binds]
    nodes = {b.body["target"]["name"] for b in binds}
    assert len(nodes) == 1  # 4 GPUs of a dgx1v: one node, not two
    # The topology policy's choice on a hybrid cube mesh: one NVLink quad.
    assert sorted(int(i) for i in ids) in ([0, 1, 2, 3], [4, 5, 6, 7])
    notes = binds[0].body["metadata"]["annotations"]
    assert binds[0].body == {"apiVersion": "v1", "kind": "Binding",
                             "metadata": {"name": "vgg-worker-0", "namespace": "default", "uid": "uid-vgg-worker-0",
                                          "annotations": notes},
                             "target": {"apiVersion": "v1", "kind": "Node", "name": binds[0].body["target"]["name"]}}
    assert notes[names.GPU_IDS_UID_ANNOTATION] == "uid-vgg-worker-0" and notes[names.WORKER_INDEX_ANNOTATION] == "0"
    # The same GPU by its UUID, which a reboot or an Xid cannot make name another one.
    assert [b.body["metadata"]["annotations"][names.GPU_DEVICES_ANNOTATION] for b in binds] == [
        uuids[int(i)] for i in ids]  # fmt: skip
    # The API server put them on the pod with its node, in one update.
    assert fake.get("pods", "vgg-worker-0")["metadata"]["annotations"][names.GPU_IDS_ANNOTATION] == ids[0]
    assert fake.get("podgroups", "vgg")["status"]["phase"] == "Scheduled"
    # The cache assumed the gang: a second cycle writes nothing more.
    before = len(fake.requests)
    assert s.cycle() == []
    assert len(fake.requests) == before


def test_contract_a_launcher_made_after_its_workers_bound_goes_beside_them(fake: FakeApiServer) -> None:
    """mpi-operator creates the launcher once the workers are Ready (WaitForWorkersReady): it
    lands on a node of its own gang's workers, not the first node in cache order."""
    for i in range(3):
        fake.put("nodes", node(f"gpu-{i}"))
    fake.put("pods", pod("busy", gpus=8))  # gpu-0 full: the workers go elsewhere
    s = scheduler(fake)
    assert [r.ok for r in s.cycle()] == [True]
    gang(fake, "mpi", 2)
    s.sync()
    assert [r.ok for r in s.cycle()] == [True]
    worker_node = fake.get("pods", "mpi-worker-0")["spec"]["nodeName"]
    assert worker_node != "gpu-0"
    fake.put("pods", pod("mpi-launcher-x7k2p", gang="mpi", gpus=0))
    s.sync()
    assert [r.ok for r in s.cycle()] == [True]
    assert fake.get("pods", "mpi-launcher-x7k2p")["spec"]["nodeName"] == worker_node
    assert s.cycle() == []  # assumed bound until the watch says so: never bound twice


def test_contract_a_throttled_bind_is_retried_not_rolled_back(fake: FakeApiServer) -> None:
    """API priority and fairness answers 429 (with Retry-After) under load, before running the
    request: the Binding is sent again, and the gang is not undone for it."""
    fake.put("nodes", node("gpu-0"))
    gang(fake, "th", 4)
    fake.fail[("bind", "th-worker-2")] = 429
    s = scheduler(fake)
    assert [r.ok for r in s.cycle()] == [True]
    assert writes(fake) == [("bind", f"th-worker-{i}") for i in (0, 1, 2, 2, 3)]
    assert s.metrics.rollbacks == 0 and all(fake.get("pods", f"th-worker-{i}")["spec"]["nodeName"] for i in range(4))


def test_contract_a_gang_whose_bind_keeps_failing_backs_off(fake: FakeApiServer) -> None:
    """A bind or pin that keeps failing was retried every second (140 FailedScheduling events
    and 51 claim writes in 35 s for one gang on a real cluster): each failure now doubles the
    gang's wait before the next try, from 1 s up to 10 s, as kube-scheduler backs a pod off."""
    fake.put("nodes", node("gpu-0"))
    gang(fake, "bo", 2)
    clock = ManualClock(time.time())
    s = Scheduler(Api(load_client(host=fake.url)), "sched-a", clock=clock)
    s.sync()
    assert s.elector.try_acquire_or_renew()
    tries = []
    for at in (0.0, 0.5, 1.1, 1.6, 2.6, 3.2, 5.2):
        clock.advance(at - clock.monotonic())
        fake.fail[("bind", "bo-worker-0")] = 500  # the first member's bind fails whenever tried
        binds = len(fake.calls("bind"))
        s.cycle()
        if len(fake.calls("bind")) > binds:
            tries.append(at)
    assert tries == [0.0, 1.1, 3.2]  # then waits of 1 s and 2 s; the next try is due at 7.2 s
    fake.fail.clear()
    clock.advance(7.3 - clock.monotonic())
    assert [r.ok for r in s.cycle()] == [True]


def test_contract_rollback_after_injected_bind_failure(fake: FakeApiServer) -> None:
    fake.put("nodes", node("gpu-0"))
    gang(fake, "rn", 4)
    fake.fail[("bind", "rn-worker-2")] = 500
    s = scheduler(fake)
    results = s.cycle()
    assert [r.ok for r in results] == [False]
    members = [f"rn-worker-{i}" for i in range(4)]
    assert writes(fake) == [
        ("bind", "rn-worker-0"), ("bind", "rn-worker-1"), ("bind", "rn-worker-2"),
        ("delete", "rn-worker-0"), ("delete", "rn-worker-1"),
    ]  # fmt: skip
    deletes = [r for r in fake.calls("delete") if "/pods/" in r.path]
    assert deletes[0].body["preconditions"] == {"uid": "uid-rn-worker-0"}
    assert s.metrics.rollbacks == 1
    # Before the watch has shown the deletions, the two unbound members are no gang of their own.
    assert s.cycle() == []
    assert len(fake.calls("bind")) == 3
    # Bound pods go gracefully: they stay, marked, until their kubelet has stopped them; until
    # then they still hold their GPUs and are no members of the gang.
    s.sync()
    assert all(fake.get("pods", f"rn-worker-{i}")["metadata"].get("deletionTimestamp") for i in (0, 1))
    assert s.cycle() == []
    # The kubelet finishes; the controller recreates the deleted members; the next cycle places
    # the whole gang again.
    for i in (0, 1):
        fake.finish_deletion(f"rn-worker-{i}")
        fake.put("pods", pod(f"rn-worker-{i}", gang="rn"))
    s.sync()
    assert [r.ok for r in s.cycle()] == [True]
    assert all(fake.get("pods", m)["spec"].get("nodeName") == "gpu-0" for m in members)
    events = [o for (p, _, _), o in fake.objects.items() if p == "events"]
    assert any(e["reason"] == "FailedScheduling" and "undone" in e["message"] for e in events)


def test_contract_pending_reason_with_numbers_event_and_podgroup(fake: FakeApiServer) -> None:
    fake.put("nodes", node("gpu-0"))
    fake.put("nodes", node("gpu-1", unschedulable=True))
    gang(fake, "big", 12)
    s = scheduler(fake)
    assert s.cycle() == []
    group = fake.get("podgroups", "big")
    reason = group["metadata"]["annotations"][names.PENDING_ANNOTATION]
    assert group["status"]["phase"] == "Pending"
    assert "12 worker(s) x 1 GPU(s) = 12 GPUs" in reason and "1 node(s) cordoned" in reason
    events = [o for (p, _, _), o in fake.objects.items() if p == "events"]
    assert len(events) == 12 and {e["reason"] for e in events} == {"FailedScheduling"}
    # Each pod's own status says so too, as cluster autoscalers read it.
    condition = fake.get("pods", "big-worker-3")["status"]["conditions"]
    assert [(c["type"], c["status"], c["reason"]) for c in condition] == [("PodScheduled", "False", "Unschedulable")]
    assert "12 worker(s)" in condition[0]["message"]
    statuses = [r for r in fake.calls("patch") if r.path.endswith("/status") and "/pods/" in r.path]
    assert len(statuses) == 12 and {r.content_type for r in statuses} == {"application/strategic-merge-patch+json"}
    # Said once per change of reason, not every cycle; and not even decided again while nothing
    # was freed.
    decided = sum(s.metrics.decisions.values())
    s.cycle()
    assert sum(s.metrics.decisions.values()) == decided
    assert len([o for (p, _, _), o in fake.objects.items() if p == "events"]) == 12
    assert s.metrics.pending_gangs == 1
    assert 'ringleader_pending_gangs 1' in s.metrics.render()
    # The cordoned node comes back: decided again, and it fits now (8 + 8 GPUs for 12 workers).
    fake.put("nodes", node("gpu-1"))
    s.sync()
    assert [r.ok for r in s.cycle()] == [True]
    # The Binding turned it True, the other conditions kept (a strategic merge by type).
    conditions = fake.get("pods", "big-worker-3")["status"]["conditions"]
    assert [(c["type"], c["status"], c.get("reason")) for c in conditions] == [("PodScheduled", "True", None)]
    # Nodes whose agent published no UUIDs: the GPUs are named by their ids.
    notes = [r.body["metadata"]["annotations"] for r in fake.calls("bind")]
    assert len(notes) == 12 and all(n[names.GPU_DEVICES_ANNOTATION] == n[names.GPU_IDS_ANNOTATION] for n in notes)


def test_contract_lists_in_pages_without_finished_pods_and_relists_an_expired_snapshot(fake: FakeApiServer) -> None:
    """Pods are listed in pages (limit/continue) and only those not finished (a field selector
    the server applies); a pod that finishes while watched (the watch selects no phase: leaving
    a selection arrives as DELETED with the pod's state from before) leaves the cache and frees
    its GPUs; a continue token the server has compacted away (410) starts the list again."""
    fake.put("nodes", node("gpu-0"))
    for i in range(7):
        fake.put("pods", pod(f"done-{i}", gpus=1, nodeName="gpu-0", schedulerName="default-scheduler")
                 | {"status": {"phase": "Succeeded"}})  # fmt: skip
    for i in range(4):
        fake.put("pods", pod(f"busy-{i}", gpus=1, nodeName="gpu-0", schedulerName="default-scheduler")
                 | {"status": {"phase": "Running"}})  # fmt: skip
    gang(fake, "five", 5)
    api = Api(load_client(host=fake.url))
    items, version = api.list("pods", page=3)
    assert sorted(p["metadata"]["name"] for p in items) == sorted([f"busy-{i}" for i in range(4)] +
                                                                  [f"five-worker-{i}" for i in range(5)])  # fmt: skip
    lists = [r for r in fake.calls("list") if r.path == "/api/v1/pods"]
    assert [r.query.get("limit") for r in lists] == ["3", "3", "3"]
    assert "continue" not in lists[0].query and all("continue" in r.query for r in lists[1:])
    assert {r.query["fieldSelector"] for r in lists} == {"status.phase!=Succeeded,status.phase!=Failed"}
    assert version == lists[0].query.get("resourceVersion", version)  # one snapshot for every page

    # A snapshot compacted between two pages: the list starts over and still sees everything.
    real_list = fake._list

    def compact_after_first_page(h, req, plural, watch):  # type: ignore[no-untyped-def]
        if req.query.get("continue") and not compacted:
            compacted.append(True)
            fake.expire()
        return real_list(h, req, plural, watch)

    compacted: list[bool] = []
    fake._list = compact_after_first_page  # type: ignore[method-assign]
    again, _ = api.list("pods", page=4)
    fake._list = real_list  # type: ignore[method-assign]
    assert compacted and len(again) == 9
    assert any(r.query.get("continue") for r in fake.calls("list")[-4:])

    s = Scheduler(api, "pages")
    s.sync()
    assert s.elector.try_acquire_or_renew()
    assert "default/done-0" not in s.cache.pods
    assert s.cycle() == []  # 4 of 8 GPUs busy: the gang of 5 waits
    for i in range(2):  # two busy pods finish: the watch shows them Succeeded
        busy = fake.get("pods", f"busy-{i}")
        busy["status"]["phase"] = "Succeeded"
        fake.put("pods", busy)
    s.sync()
    assert "default/busy-0" not in s.cache.pods
    watch = [r for r in fake.calls("watch") if r.path == "/api/v1/pods"][-1]
    assert "fieldSelector" not in watch.query
    assert [r.ok for r in s.cycle()] == [True]


def test_contract_410_gone_relists(fake: FakeApiServer) -> None:
    fake.put("nodes", node("gpu-0"))
    s = scheduler(fake)
    fake.put("nodes", node("gpu-1"))
    fake.expire()  # history compacted: the informers' versions are too old now
    gang(fake, "late", 8)
    s.sync()  # watches answer 410 -> versions dropped
    assert s.metrics.relists == len(s.informers) == 4  # nodes, pods, PodGroups, the queues' ConfigMap
    s.sync()  # relists
    lists = [r for r in fake.calls("list") if r.path == "/api/v1/nodes"]
    assert len(lists) == 2
    assert set(s.cache.nodes) == {"gpu-0", "gpu-1"}
    relisted_at = s.informers["nodes"].resource_version
    assert [r.ok for r in s.cycle()] == [True]
    # Watches resume from the version the relist returned, not from the expired one.
    s.sync()
    watch = [r for r in fake.calls("watch") if r.path == "/api/v1/nodes"][-1]
    assert watch.query["resourceVersion"] == relisted_at


def test_contract_no_bind_without_the_lease_and_handover(fake: FakeApiServer) -> None:
    fake.put("nodes", node("gpu-0"))
    gang(fake, "one", 2)
    clock = ManualClock(time.time())
    a = Scheduler(Api(load_client(host=fake.url)), "sched-a", lease_seconds=10, clock=clock)
    b = Scheduler(Api(load_client(host=fake.url)), "sched-b", lease_seconds=10, clock=clock)
    a.sync()
    b.sync()
    assert a.elector.try_acquire_or_renew()
    assert not b.elector.try_acquire_or_renew()
    assert b.cycle() == []  # a standby writes nothing
    assert not fake.calls("bind") and not fake.calls("patch")
    # a stops renewing; once its lease has expired b takes over and schedules.
    clock.advance(11)
    assert not a.elector.leading
    assert a.cycle() == []
    assert b.elector.try_acquire_or_renew()
    lease = fake.get("leases", names.LEASE_NAME, names.SYSTEM_NAMESPACE)
    assert lease["spec"]["holderIdentity"] == "sched-b" and lease["spec"]["leaseTransitions"] == 1
    assert [r.ok for r in b.cycle()] == [True]
    assert {r.path.split("/pods/")[1].split("/")[0] for r in fake.calls("bind")} == {"one-worker-0", "one-worker-1"}
    # a comes back: the lease is b's and valid, so a still binds nothing.
    gang(fake, "two", 2)
    a.sync()
    assert not a.elector.try_acquire_or_renew()
    assert a.cycle() == []
    assert len(fake.calls("bind")) == 2


def test_contract_lease_expiry_on_the_local_clock_and_race_one_winner(fake: FakeApiServer) -> None:
    """The holder's renewTime is never compared with this replica's clock (their clocks need
    not agree): a lease is expired only once this replica has seen it unchanged for a whole
    leaseDurationSeconds, as client-go's observedTime. Then two replicas race for it; the
    second write carries a stale resourceVersion and gets 409, so exactly one leads."""
    from ringleader.engines.kubernetes.client import ApiError

    clock = ManualClock(time.time())
    a = Scheduler(Api(load_client(host=fake.url)), "sched-a", lease_seconds=10)
    b = Scheduler(Api(load_client(host=fake.url)), "sched-b", lease_seconds=10, clock=clock)
    assert a.elector.try_acquire_or_renew()
    lease = fake.get("leases", names.LEASE_NAME, names.SYSTEM_NAMESPACE)
    lease["spec"]["renewTime"] = "2000-01-01T00:00:00.000000Z"  # the holder's clock is years behind
    assert not b.elector.try_acquire_or_renew()  # first seen now: valid for 10 s on b's clock
    clock.advance(9)
    assert not b.elector.try_acquire_or_renew()
    # A holder whose clock runs years ahead does not hold it forever either: a renewal is a change.
    lease["spec"]["renewTime"] = "2100-01-01T00:00:00.000000Z"
    clock.advance(2)
    assert not b.elector.try_acquire_or_renew()  # changed 0 s ago on b's clock
    clock.advance(10.5)
    stale = copy.deepcopy(fake.get("leases", names.LEASE_NAME, names.SYSTEM_NAMESPACE))
    assert b.elector.try_acquire_or_renew()  # unchanged for a whole duration: b takes it over
    # a, writing from its old view, is refused: the version moved.
    try:
        a.api.replace_lease(names.SYSTEM_NAMESPACE, names.LEASE_NAME, a.elector._lease(stale, 1))
        raise AssertionError("a stale lease write must be refused")
    except ApiError as exc:
        assert exc.status == 409
    assert fake.get("leases", names.LEASE_NAME, names.SYSTEM_NAMESPACE)["spec"]["holderIdentity"] == "sched-b"


def test_contract_daemon_binds_and_serves_metrics(fake: FakeApiServer) -> None:
    """The scheduler as `ringleader kube scheduler` runs it: informer and lease threads, the
    cycle woken by watch events (long-polled), /metrics and /healthz over HTTP; a watch that
    goes silent (a half-open connection) is dropped at the client's read timeout, and /healthz
    fails while the informers hear nothing, then recovers."""
    import threading
    import urllib.error
    import urllib.request

    from ringleader.engines.kubernetes.metrics import serve

    fake.put("nodes", node("gpu-0"))
    s = Scheduler(Api(load_client(host=fake.url), watch_grace=0.5), "daemon")
    server = serve(s.metrics, s.health_problem, "127.0.0.1", 0)
    thread = threading.Thread(target=s.run, kwargs={"watch_timeout": 1, "retry_seconds": 0.2, "stall_seconds": 2.5},
                              daemon=True)  # fmt: skip
    thread.start()
    base = f"http://127.0.0.1:{server.server_port}"

    def healthz() -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"{base}/healthz") as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    try:
        gang(fake, "live", 2)
        wait_for(lambda: len(fake.calls("bind")) == 2, what="the first gang's 2 binds")
        assert healthz()[0] == 200
        with urllib.request.urlopen(f"{base}/metrics") as resp:
            text = resp.read().decode()
        assert 'ringleader_binds_total{result="ok"} 2' in text
        assert 'ringleader_gang_decisions_total{result="scheduled"} 1' in text
        assert "ringleader_leader 1" in text
        # Watches are long polls: they carry the timeout and ask for bookmarks.
        watch = fake.calls("watch")[-1]
        assert watch.query["timeoutSeconds"] == "1" and watch.query["allowWatchBookmarks"] == "true"
        fake.stall_watches.set()  # every watch now answers its headers and then nothing at all
        wait_for(lambda: healthz()[0] == 503, what="/healthz to say 503 once the watches stall")
        assert "heard nothing from the API server" in healthz()[1]
        fake.stall_watches.clear()
        wait_for(lambda: healthz()[0] == 200, what="/healthz to say 200 again")
        gang(fake, "after", 2)  # and scheduling goes on
        wait_for(lambda: len(fake.calls("bind")) == 4, what="the second gang's 2 binds")
    finally:
        fake.stall_watches.clear()
        s.stop()
        thread.join(10)
        server.shutdown()
    # Stopping gives the lease up, so a standby takes over at once.
    assert fake.get("leases", names.LEASE_NAME, names.SYSTEM_NAMESPACE)["spec"]["holderIdentity"] == ""


def test_contract_parallel_writers_keep_each_gangs_order(fake: FakeApiServer) -> None:
    """Gangs are written on several threads; each gang's bindings are in order, and a failed
    gang is undone alone."""
    for i in range(4):
        fake.put("nodes", node(f"gpu-{i}"))
    for g in range(6):
        gang(fake, f"g{g}", 4)
    fake.fail[("bind", "g3-worker-1")] = 500
    s = Scheduler(Api(load_client(host=fake.url)), "sched-p", writers=4)
    s.sync()
    assert s.elector.try_acquire_or_renew()
    results = {r.gang: r.ok for r in s.cycle()}
    assert results == {f"default/g{g}": g != 3 for g in range(6)}
    for g in range(6):
        mine = [(verb, p) for verb, p in writes(fake) if p.startswith(f"g{g}-")]
        verbs = [verb for verb, _ in mine]
        expected = ["bind"] * (2 if g == 3 else 4) + (["delete"] if g == 3 else [])
        assert verbs == expected, (g, mine)
    assert s.metrics.rollbacks == 1 and s.metrics.binds == {"ok": 21, "error": 1}


def test_contract_every_request_of_the_scheduler_is_one_its_role_allows_and_no_more(fake: FakeApiServer) -> None:
    """Placing a gang, reporting one that waits, undoing a half-bound one, holding the Lease:
    run as a user holding exactly the installed ClusterRole and Role (the fake answers 403 to
    anything else), every request succeeds; and they allow no pod patch or update (the GPU ids
    travel on the Binding) and no event patch."""
    from kubernetes import client

    objects = manifests.install()
    role = next(o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "ringleader-scheduler")
    lease = next(o for o in objects if o["kind"] == "Role")
    rules = [(r, None) for r in role["rules"]] + [(r, names.SYSTEM_NAMESPACE) for r in lease["rules"]]
    fake.put("nodes", node("gpu-0"))
    gang(fake, "fits", 4)
    gang(fake, "waits", 8)
    gang(fake, "half", 2)
    fake.fail[("bind", "half-worker-1")] = 500
    fake.grant("system:serviceaccount:ringleader-system:ringleader-scheduler", rules)
    configuration = client.Configuration()
    configuration.host = fake.url
    configuration.api_key = {"BearerToken": "Bearer system:serviceaccount:ringleader-system:ringleader-scheduler"}
    s = Scheduler(Api(client.ApiClient(configuration)), "sched-rbac")
    s.sync()
    assert s.elector.try_acquire_or_renew()
    assert {r.gang: r.ok for r in s.cycle()} == {"default/fits": True, "default/half": False}
    s.cycle()
    denied = [f"{r.method} {r.path}" for r in fake.requests if r.user and not permitted(r, rules)]
    assert not denied, denied
    assert fake.get("pods", "waits-worker-0")["status"]["conditions"][0]["reason"] == "Unschedulable"
    grants = {(res, verb) for r in role["rules"] for res in r["resources"] for verb in r["verbs"]}
    assert ("pods", "patch") not in grants and ("pods", "update") not in grants and ("events", "patch") not in grants
    used = {(r.path.split("?")[0], r.verb) for r in fake.requests}
    assert any("/binding" in p for p, _ in used) and any(v == "delete" for _, v in used)


def test_contract_reservation_keeps_a_starving_big_gang_ahead_of_a_stream_of_small_ones(fake: FakeApiServer) -> None:
    """The shared queue's policy on Kubernetes: a big gang at high priority that cannot start
    gets a reservation of the GPUs it will take; a stream of small gangs without a time limit
    is bound nowhere on them (they wait, saying for whom), a small gang whose pods'
    activeDeadlineSeconds ends before the reservation starts backfills, and the big gang is
    bound as soon as the running gang ends: no later than its reservation's start."""
    from datetime import UTC, datetime

    started = time.time() - 5
    stamp = datetime.fromtimestamp(started, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    fake.put("nodes", node("gpu-0"))
    fake.put("podgroups", podgroup("old", 4))
    for i in range(4):
        fake.put("pods", pod(f"old-worker-{i}", gang="old", nodeName="gpu-0", activeDeadlineSeconds=600)
                 | {"status": {"phase": "Running", "startTime": stamp}})  # fmt: skip
    fake.put("podgroups", podgroup("big", 8))
    for i in range(8):
        fake.put("pods", pod(f"big-worker-{i}", gang="big", priority=1000))
    s = scheduler(fake)

    for wave in range(3):  # small gangs keep coming, one per cycle
        gang(fake, f"small{wave}", 2)
        s.sync()
        assert s.cycle() == []
    reservation = s._reservations["default/big"]
    assert sorted(reservation.placement.gpus_on("gpu-0")) == list(range(8))
    assert reservation.start_s == pytest.approx(started + 600, abs=1)
    assert not fake.calls("bind")
    note = fake.get("podgroups", "small2")["metadata"]["annotations"][names.PENDING_ANNOTATION]
    assert "waits for reservation of job default/big" in note and "no time limit" in note
    big_note = fake.get("podgroups", "big")["metadata"]["annotations"][names.PENDING_ANNOTATION]
    assert "reserved GPUs 0-7 on gpu-0" in big_note
    assert "ringleader_reserved_gangs 1" in s.metrics.render()

    # A short gang (ends in 60 s, the reservation starts in ~595 s) backfills onto reserved GPUs.
    fake.put("podgroups", podgroup("short", 2))
    for i in range(2):
        fake.put("pods", pod(f"short-worker-{i}", gang="short", activeDeadlineSeconds=60))
    s.sync()
    assert [r.gang for r in s.cycle()] == ["default/short"]
    assert all(fake.get("pods", f"small{w}-worker-0")["spec"].get("nodeName") is None for w in range(3))

    # The running gang and the short one end: the big gang is bound at once, whole.
    for name in [f"old-worker-{i}" for i in range(4)] + ["short-worker-0", "short-worker-1"]:
        ended = fake.get("pods", name)
        ended["status"]["phase"] = "Succeeded"
        fake.put("pods", ended)
    s.sync()
    assert [(r.gang, r.ok) for r in s.cycle()] == [("default/big", True)]
    assert time.time() < reservation.start_s
    assert {fake.get("pods", f"big-worker-{i}")["spec"]["nodeName"] for i in range(8)} == {"gpu-0"}
    # Its reservation is gone; the next two gangs in line (depth 2) now hold one each.
    assert set(s._reservations) == {"default/small0", "default/small1"}
    assert "ringleader_reserved_gangs 2" in s.metrics.render()


def test_contract_without_reservations_the_small_gangs_take_the_big_gangs_gpus(fake: FakeApiServer) -> None:
    """The same start with reservations turned off (depth 0, no age): the first small gang is
    bound on the free GPUs the big gang needs, which is what the reservation prevents."""
    from ringleader.scheduler import NO_RESERVATIONS

    fake.put("nodes", node("gpu-0"))
    fake.put("podgroups", podgroup("old", 4))
    for i in range(4):
        fake.put("pods", pod(f"old-worker-{i}", gang="old", nodeName="gpu-0") | {"status": {"phase": "Running"}})
    fake.put("podgroups", podgroup("big", 8))
    for i in range(8):
        fake.put("pods", pod(f"big-worker-{i}", gang="big", priority=1000))
    gang(fake, "small0", 2)
    s = Scheduler(Api(load_client(host=fake.url)), "no-res", backfill=NO_RESERVATIONS)
    s.sync()
    assert s.elector.try_acquire_or_renew()
    assert [(r.gang, r.ok) for r in s.cycle()] == [("default/small0", True)]


RACK, BLOCK = "cloud.provider.com/topology-rack", "cloud.provider.com/topology-block"  # Kueue's example keys


def racked(fake: FakeApiServer, name: str, rack: str) -> None:
    fake.put("nodes", node(name, labels={RACK: rack, BLOCK: "block-1"}))


def test_contract_a_gang_lands_under_one_rack_per_the_node_labels(fake: FakeApiServer) -> None:
    """Racks from Kueue-style node labels: a 2-node gang goes to the rack that holds it whole,
    not to the first free nodes of two racks; a gang that requires one rack (Kueue's pod-set
    annotation, a label key) and fits under none waits, saying so; relabelling a node (read
    from the watch) makes room under one rack and the gang starts there."""
    racked(fake, "n0", "rack-a")
    racked(fake, "n1", "rack-a")
    racked(fake, "n2", "rack-b")
    racked(fake, "n3", "rack-b")
    fake.put("pods", pod("busy", gpus=4, nodeName="n1"))  # someone else's: rack-a has one whole node free
    gang(fake, "two", 2, gpus=8)
    s = scheduler(fake)
    assert s.cache.tree is not None and s.cache.tree.level_names == ("topology-rack", "topology-block")
    assert [r.ok for r in s.cycle()] == [True]
    assert {b.body["target"]["name"] for b in fake.calls("bind")} == {"n2", "n3"}
    fake.put("podgroups", podgroup("three", 2))
    for i in range(2):
        member = pod(f"three-worker-{i}", gang="three", gpus=4)
        member["metadata"]["annotations"] = {"kueue.x-k8s.io/podset-required-topology": RACK}
        fake.put("pods", member)
    # a 2 x 4 gang that must stay under one rack (Kueue's annotation names the label key): it does
    s.sync()
    assert [r.ok for r in s.cycle()] == [True]
    three = {b.body["target"]["name"] for b in fake.calls("bind") if b.body["metadata"]["name"].startswith("three")}
    assert len({s.cache.tree.by_node[n][0] for n in three}) == 1
    fake.put("podgroups", podgroup("wide", 2))
    for i in range(2):
        member = pod(f"wide-worker-{i}", gang="wide", gpus=8)
        member["metadata"]["annotations"] = {names.TOPOLOGY_REQUIRED_ANNOTATIONS[0]: "topology-rack"}
        fake.put("pods", member)
    racked(fake, "n4", "rack-c")
    racked(fake, "n5", "rack-d")  # two whole free nodes, in two racks
    s.sync()
    assert s.cycle() == []
    reason = fake.get("podgroups", "wide")["metadata"]["annotations"][names.PENDING_ANNOTATION]
    assert "under one topology-rack" in reason and "most free under any topology-rack: 1" in reason, reason
    racked(fake, "n5", "rack-c")  # the labels change: the tree is rebuilt from the watch
    s.sync()
    assert [r.ok for r in s.cycle()] == [True]
    wide = {b.body["target"]["name"] for b in fake.calls("bind") if b.body["metadata"]["name"].startswith("wide")}
    assert wide == {"n4", "n5"}


def test_contract_the_tree_is_rebuilt_only_when_network_labels_change(fake: FakeApiServer) -> None:
    racked(fake, "n0", "rack-a")
    racked(fake, "n1", "rack-b")
    s = scheduler(fake)
    tree = s.cache.state and s.cache.tree
    beat = fake.get("nodes", "n0")
    beat["metadata"]["labels"]["example.com/other"] = "x"  # not a network label
    fake.put("nodes", beat)
    s.sync()
    assert s.cache.state and s.cache.tree is tree
    racked(fake, "n1", "rack-a")
    s.sync()
    assert s.cache.state and s.cache.tree is not tree and s.cache.tree.common_level(["n0", "n1"]) == 0


def hypernode(name: str, tier: int, members: list[dict[str, object]]) -> dict[str, object]:
    return {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": name},
            "spec": {"tier": tier, "members": members}}  # fmt: skip


def test_contract_the_tree_from_volcano_hypernodes_as_the_installed_role(
    fake: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    """networkHyperNodes: the scheduler (as its installed role) also lists and watches Volcano's
    HyperNodes and places by their tiers: the 2-node gang goes under the HyperNode that holds it;
    a HyperNode changed on the watch rebuilds the tree."""
    from kubernetes import client

    for i in range(4):
        fake.put("nodes", node(f"n{i}"))
    fake.put("hypernodes", hypernode("rack-a", 1, [{"type": "Node", "selector": {"exactMatch": {"name": "n0"}}},
                                                  {"type": "Node", "selector": {"exactMatch": {"name": "n1"}}}]))
    fake.put("hypernodes", hypernode("rack-b", 1, [{"type": "Node", "selector": {"regexMatch": {"pattern": "n[23]"}}}]))
    fake.put("hypernodes", hypernode("spine", 2, [{"type": "HyperNode", "selector": {"exactMatch": {"name": r}}}
                                                  for r in ("rack-a", "rack-b")]))  # fmt: skip
    fake.put("pods", pod("busy", gpus=4, nodeName="n1"))
    gang(fake, "two", 2, gpus=8)
    objects = manifests.install()
    role = next(o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "ringleader-scheduler")
    lease = next(o for o in objects if o["kind"] == "Role")
    rules = [(r, None) for r in role["rules"]] + [(r, names.SYSTEM_NAMESPACE) for r in lease["rules"]]
    user = "system:serviceaccount:ringleader-system:ringleader-scheduler"
    fake.grant(user, rules)
    configuration = client.Configuration()
    configuration.host = fake.url
    configuration.api_key = {"BearerToken": f"Bearer {user}"}
    s = Scheduler(Api(client.ApiClient(configuration)), "sched-hn", hypernodes=True)
    s.sync()
    assert s.elector.try_acquire_or_renew()
    assert s.cache.state and s.cache.tree is not None and s.cache.tree.level_names == ("tier-1", "tier-2")
    assert [r.ok for r in s.cycle()] == [True]
    assert {b.body["target"]["name"] for b in fake.calls("bind")} == {"n2", "n3"}
    assert any(r.path.endswith("/hypernodes") for r in fake.requests)
    assert not [r for r in fake.requests if r.user and not permitted(r, rules)]
    fake.put("hypernodes", hypernode("rack-b", 1, [{"type": "Node", "selector": {"exactMatch": {"name": "n2"}}},
                                                  {"type": "Node", "selector": {"exactMatch": {"name": "n1"}}}]))
    with caplog.at_level(logging.WARNING, logger="ringleader.kube.cache"):
        s.sync()  # n1 now under two racks: refused in one line naming it, the scheduler places flat meanwhile
    assert s.cache.state and s.cache.tree is None
    assert ["node 'n1' is under two switches" in r.getMessage() for r in caplog.records] == [True]
    fake.put("hypernodes", hypernode("rack-a", 1, [{"type": "Node", "selector": {"exactMatch": {"name": "n0"}}}]))
    s.sync()
    assert s.cache.state and s.cache.tree is not None and s.cache.tree.by_node["n1"][0] == "rack-b"


def running_gang(fake: FakeApiServer, name: str, node_name: str, pods: int, run_time_s: float) -> None:
    """A gang running on ``node_name`` since now, its run time written on its pods."""
    from datetime import UTC, datetime

    stamp = datetime.fromtimestamp(time.time(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    fake.put("podgroups", podgroup(name, pods))
    for i in range(pods):
        worker = pod(f"{name}-worker-{i}", gang=name, nodeName=node_name)
        worker["metadata"]["annotations"] = {names.RUN_TIME_ANNOTATION: f"{run_time_s:g}"}
        fake.put("pods", worker | {"status": {"phase": "Running", "startTime": stamp}})


def test_contract_a_gang_that_finishes_sooner_by_waiting_waits_then_lands_on_one_node(fake: FakeApiServer) -> None:
    """The start rules on Kubernetes: the workers' annotations (what `submit --run-time` writes)
    make the gang wait for one node freeing in ~10 min rather than bind spread over two, with
    both predicted finishes in its pending reason; once the node frees it is bound there whole.
    Without them (rule "now") the same gang binds spread at once."""
    fake.put("nodes", node("gpu-0"))
    fake.put("nodes", node("gpu-1"))
    running_gang(fake, "a", "gpu-0", 6, 600)
    running_gang(fake, "b", "gpu-1", 6, 36_000)
    fake.put("podgroups", podgroup("vgg", 4))
    for i in range(4):
        worker = pod(f"vgg-worker-{i}", gang="vgg")
        worker["metadata"]["annotations"] = {names.START_ANNOTATION: "finish", names.RUN_TIME_ANNOTATION: "3600"}
        fake.put("pods", worker)
    s = scheduler(fake)
    assert s.cycle() == [] and not fake.calls("bind")
    note = fake.get("podgroups", "vgg")["metadata"]["annotations"][names.PENDING_ANNOTATION]
    assert "waits: it finishes sooner" in note and "start in ~10 min on gpu-0[4w" in note
    assert s._reservations["default/vgg"].placement.nodes == ("gpu-0",)
    for i in range(6):
        ended = fake.get("pods", f"a-worker-{i}")
        ended["status"]["phase"] = "Succeeded"
        fake.put("pods", ended)
    s.sync()
    assert [(r.gang, r.ok) for r in s.cycle()] == [("default/vgg", True)]
    assert {fake.get("pods", f"vgg-worker-{i}")["spec"]["nodeName"] for i in range(4)} == {"gpu-0"}


def test_contract_a_risk_neutral_gang_waits_where_only_the_predictions_say_so(fake: FakeApiServer) -> None:
    """--risk on Kubernetes: gpu-0 frees in 3.2 h, when waiting for it wins on the model's
    predictions but not at the pessimistic end of their ranges. Without a risk annotation (the
    default, neutral) the gang waits; with the one `submit --risk averse` writes, it binds spread."""
    fake.put("nodes", node("gpu-0"))
    fake.put("nodes", node("gpu-1"))
    running_gang(fake, "a", "gpu-0", 6, 11_520)
    running_gang(fake, "b", "gpu-1", 6, 36_000)
    for name, risk in (("neutral", {}), ("averse", {names.RISK_ANNOTATION: "averse"})):
        fake.put("podgroups", podgroup(name, 4))
        for i in range(4):
            worker = pod(f"{name}-worker-{i}", gang=name)
            worker["metadata"]["annotations"] = {names.START_ANNOTATION: "finish", names.RUN_TIME_ANNOTATION: "3600",
                                                 names.MODEL_ANNOTATION: "vgg16", **risk}  # fmt: skip
            fake.put("pods", worker)
        s = scheduler(fake)
        results = s.cycle()
        if name == "neutral":
            assert results == [] and not fake.calls("bind")
            note = fake.get("podgroups", name)["metadata"]["annotations"][names.PENDING_ANNOTATION]
            assert "waits: it finishes sooner" in note and "(risk neutral)" in note
            for i in range(4):
                fake.remove("pods", "default", f"{name}-worker-{i}")
            fake.remove("podgroups", "default", name)
        else:
            assert [(r.gang, r.ok) for r in results] == [("default/averse", True)]
            assert {fake.get("pods", f"averse-worker-{i}")["spec"]["nodeName"] for i in range(4)} == {"gpu-0", "gpu-1"}


def calibrated_gang(fake: FakeApiServer, name: str, calibration: str) -> None:
    """The 4-worker VGG16 gang of the start-rule test, with a calibration written on its workers
    (what `submit --model vgg16 --calibration FILE` writes), beside gangs a (600 s) and b."""
    fake.put("nodes", node("gpu-0"))
    fake.put("nodes", node("gpu-1"))
    running_gang(fake, "a", "gpu-0", 6, 600)
    running_gang(fake, "b", "gpu-1", 6, 36_000)
    fake.put("podgroups", podgroup(name, 4))
    for i in range(4):
        worker = pod(f"{name}-worker-{i}", gang=name)
        worker["metadata"]["annotations"] = {names.START_ANNOTATION: "finish", names.RUN_TIME_ANNOTATION: "3600",
                                             names.MODEL_ANNOTATION: "vgg16", names.CALIBRATION_ANNOTATION: calibration}
        fake.put("pods", worker)


def test_contract_a_gangs_calibration_prices_its_placements(fake: FakeApiServer) -> None:
    """Measured where the network is as fast as NVLink, spread costs nothing: the gang that
    waits for one node without a calibration binds spread at once."""
    from kube.test_objects_contract import FAST_NETWORK

    calibrated_gang(fake, "fast", json.dumps(FAST_NETWORK))
    assert [(r.gang, r.ok) for r in scheduler(fake).cycle()] == [("default/fast", True)]
    assert {fake.get("pods", f"fast-worker-{i}")["spec"]["nodeName"] for i in range(4)} == {"gpu-0", "gpu-1"}


def test_contract_a_calibration_the_scheduler_cannot_read_prices_nothing(fake: FakeApiServer) -> None:
    """A hand-written pod's calibration that is not one is ignored, and said: the gang is decided
    with the published rates, and the scheduler goes on."""
    calibrated_gang(fake, "odd", '{"kind": "calibration", "links": 7}')
    assert scheduler(fake).cycle() == [] and not fake.calls("bind")
    note = fake.get("podgroups", "odd")["metadata"]["annotations"][names.PENDING_ANNOTATION]
    assert "waits: it finishes sooner" in note, note
    assert "its calibration (ringleader.io/calibration) is ignored: " in note, note


def test_contract_without_a_start_rule_the_gang_binds_spread_at_once(fake: FakeApiServer) -> None:
    fake.put("nodes", node("gpu-0"))
    fake.put("nodes", node("gpu-1"))
    running_gang(fake, "a", "gpu-0", 6, 600)
    running_gang(fake, "b", "gpu-1", 6, 36_000)
    gang(fake, "vgg", 4)
    s = scheduler(fake)
    assert [(r.gang, r.ok) for r in s.cycle()] == [("default/vgg", True)]
    assert {fake.get("pods", f"vgg-worker-{i}")["spec"]["nodeName"] for i in range(4)} == {"gpu-0", "gpu-1"}


def test_contract_a_priority_gang_preempts_one_whole_gang_as_kube_scheduler_does(fake: FakeApiServer) -> None:
    """Gang preemption on Kubernetes: a gang with ringleader.io/preempt at priority 10 stops the
    one gang of lower priority whose node then gives it four NVLinked GPUs: every pod of that
    gang gets DisruptionTarget=True (PreemptionByScheduler) and a graceful delete with its own
    grace; nothing is bound until its kubelet has removed them; then the preemptor is bound
    there whole. A non-preemptible gang and one of equal priority are never touched."""
    fake.put("nodes", node("gpu-0"))
    fake.put("nodes", node("gpu-1"))
    running_gang(fake, "low", "gpu-0", 8, 36_000)
    running_gang(fake, "kept", "gpu-1", 8, 36_000)
    for i in range(8):
        kept = fake.get("pods", f"kept-worker-{i}")
        kept["metadata"]["annotations"][names.PREEMPTIBLE_ANNOTATION] = "false"
        fake.put("pods", kept)
    fake.put("podgroups", podgroup("urgent", 4))
    for i in range(4):
        worker = pod(f"urgent-worker-{i}", gang="urgent", priority=10, terminationGracePeriodSeconds=30)
        worker["metadata"]["annotations"] = {names.PREEMPT_ANNOTATION: "true"}
        fake.put("pods", worker)
    s = scheduler(fake)
    assert s.cycle() == [] and not fake.calls("bind")
    for i in range(8):
        victim = fake.get("pods", f"low-worker-{i}")
        assert victim["metadata"].get("deletionTimestamp") and victim["metadata"]["deletionGracePeriodSeconds"] == 30
        [condition] = [c for c in victim["status"]["conditions"] if c["type"] == "DisruptionTarget"]
        assert condition["reason"] == "PreemptionByScheduler"
        # the words every engine's victim reads, as `list -o wide` reads them back
        assert condition["message"].startswith("by job default/urgent (priority 10), which starts on gpu-0[4w")
        said = read_preempted(condition["message"])
        assert said is not None and (said.by, said.why) == ("default/urgent", "priority 10")
        assert not fake.get("pods", f"kept-worker-{i}")["metadata"].get("deletionTimestamp")
    # the victim's next run is a restart, as on every engine, which uses up none of --max-restarts
    counts = fake.get("podgroups", "low")["metadata"]["annotations"]
    assert (counts[names.RESTARTS_ANNOTATION], counts[names.PREEMPTIONS_ANNOTATION]) == ("1", "1")
    assert job_view({"metadata": {"name": "low"}}, [], fake.get("podgroups", "low"), ()).restarts == 1
    note = fake.get("podgroups", "urgent")["metadata"]["annotations"][names.PENDING_ANNOTATION]
    assert "preempts job default/low (priority 0, GPUs 0-7 on gpu-0): then starts on gpu-0[4w" in note
    # the next cycle, victims still stopping: nobody else is preempted, nothing bound
    s.sync()
    assert s.cycle() == [] and not fake.calls("bind")
    assert sum(1 for r in fake.requests if r.verb == "delete") == 8
    for i in range(8):
        fake.finish_deletion(f"low-worker-{i}")
    s.sync()
    assert [(r.gang, r.ok) for r in s.cycle()] == [("default/urgent", True)]
    assert {fake.get("pods", f"urgent-worker-{i}")["spec"]["nodeName"] for i in range(4)} == {"gpu-0"}


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])
def test_contract_a_stopped_scheduler_gives_its_lease_up(fake: FakeApiServer, tmp_path: Path,
                                                         signal_name: str) -> None:  # fmt: skip
    """A pod is stopped with SIGTERM (PID 1 in its container: no default action), a terminal
    with SIGINT: either way the replica releases the Lease, so a standby leads within a second
    or two instead of after the lease's whole duration."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [sys.executable, "-m", "ringleader.cli.main", "kube", "scheduler", "--server", fake.url,
            "--identity", "sched-a", "--metrics-port", str(port)]  # fmt: skip
    # Its log to a file, not a pipe nobody reads while it runs: a full pipe would block its exit.
    log = tmp_path / "scheduler.log"
    with log.open("w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err,
                                env={**os.environ, "RINGLEADER_HOME": str(tmp_path)})  # fmt: skip
    try:
        def leading() -> bool:
            assert proc.poll() is None, log.read_text()[-3000:]
            return _holder(fake) == "sched-a"

        wait_for(leading, what="the scheduler to take the Lease")
        proc.send_signal(getattr(signal, signal_name))
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]  # generous: two HTTP calls on a busy box
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lease = fake.get("leases", names.LEASE_NAME, names.SYSTEM_NAMESPACE)
    assert lease is not None and lease["spec"]["holderIdentity"] == ""


def _holder(fake: FakeApiServer) -> str | None:
    lease = fake.get("leases", names.LEASE_NAME, names.SYSTEM_NAMESPACE)
    return None if lease is None else (lease.get("spec") or {}).get("holderIdentity")


def queues_config(**queues: dict[str, object]) -> dict[str, object]:
    """The team queues' ConfigMap as `ringleader queue create` writes it."""
    import json

    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": names.QUEUES_CONFIG, "namespace": names.SYSTEM_NAMESPACE},
            "data": {name: json.dumps(q) for name, q in queues.items()}}  # fmt: skip


def queued_gang(fake: FakeApiServer, name: str, queue: str, pods: int, node_name: str | None = None,
                started_s: float | None = None, preemptible: bool = True,
                runs: list[tuple[float, float]] | None = None) -> None:  # fmt: skip
    """A gang of team ``queue``: running on ``node_name`` since ``started_s`` (default now), or
    waiting; ``--non-preemptible`` as submit writes it on its pods, and ``runs`` the runs it ended
    before, as the scheduler keeps them on its PodGroup."""
    from datetime import UTC, datetime

    group = podgroup(name, pods)
    if runs:
        group["metadata"]["annotations"] = {names.RUNS_ANNOTATION: json.dumps(runs)}
    fake.put("podgroups", group)
    at = time.time() if started_s is None else started_s
    stamp = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for i in range(pods):
        worker = pod(f"{name}-worker-{i}", gang=name, **({"nodeName": node_name} if node_name else {}))
        worker["metadata"]["annotations"] = {names.QUEUE_ANNOTATION: queue}
        if not preemptible:
            worker["metadata"]["annotations"][names.PREEMPTIBLE_ANNOTATION] = "false"
        if node_name:
            worker["status"] = {"phase": "Running", "startTime": stamp}
        fake.put("pods", worker)


def test_contract_a_borrowing_gang_is_reclaimed_when_the_lender_submits(fake: FakeApiServer) -> None:
    """Team queues on Kubernetes, from the ConfigMap the scheduler watches: team-b runs two gangs
    of 8, borrowing team-a's idle quota; team-b's next gang waits with its queue's numbers;
    team-a's gang of 4 takes its quota back by preempting one whole borrowing gang (every pod
    DisruptionTarget and deleted with its grace), then is bound on the GPUs it freed."""
    fake.put("nodes", node("gpu-0"))
    fake.put("nodes", node("gpu-1"))
    quota = {"quota": [["*", 8]], "weight": 1.0, "cohort": "lab"}
    fake.put("configmaps", queues_config(**{"team-a": quota, "team-b": quota}))
    queued_gang(fake, "b1", "team-b", 8, "gpu-0")
    queued_gang(fake, "b2", "team-b", 8, "gpu-1")
    queued_gang(fake, "b3", "team-b", 2)
    s = scheduler(fake)
    assert [q.name for q in s.cache.queues] == ["team-a", "team-b"]
    assert s.cycle() == [] and not fake.calls("bind")
    note = fake.get("podgroups", "b3")["metadata"]["annotations"][names.PENDING_ANNOTATION]
    assert "queue team-b holds 16 of its quota of 8 GPUs (8 borrowed); it needs 2 more" in note, note
    queued_gang(fake, "a1", "team-a", 4)
    s.sync()
    assert s.cycle() == [] and not fake.calls("bind")
    victims = {p.split("-worker-")[0] for verb, p in writes(fake) if verb == "delete"}
    assert len(victims) == 1 and victims <= {"b1", "b2"}
    [victim] = victims
    for i in range(8):
        gone = fake.get("pods", f"{victim}-worker-{i}")
        [condition] = [c for c in gone["status"]["conditions"] if c["type"] == "DisruptionTarget"]
        assert condition["message"].startswith("by job default/a1 of queue team-a, which takes back the quota")
        fake.finish_deletion(f"{victim}-worker-{i}")
    s.sync()
    # a1 first (within its quota); then b3 borrows 2 of the 4 GPUs of team-a's quota left idle
    assert [(r.gang, r.ok) for r in s.cycle()] == [("default/a1", True), ("default/b3", True)]
    freed = "gpu-0" if victim == "b1" else "gpu-1"
    assert {fake.get("pods", f"a1-worker-{i}")["spec"]["nodeName"] for i in range(4)} == {freed}
    teams = s.cache.team_queues(time.time())
    assert (teams.use["team-a"], teams.use["team-b"], teams.borrowed(teams.queues["team-b"])) == (
        {"*": 4}, {"*": 10}, {"*": 2})  # fmt: skip


# 2026-12-06 10:00 UTC, on the clock the scheduler reads: the running gangs' pods started then
START = 1_796_551_200.0
LAS_QUEUE = {"quota": [["*", 16]], "weight": 1.0, "order": "las"}


def scheduler_at(fake: FakeApiServer, clock: ManualClock) -> Scheduler:
    """A scheduler on ``clock``, leading; its Lease taken for longer than the test moves time."""
    s = Scheduler(Api(load_client(host=fake.url)), "sched-a", clock=clock, lease_seconds=24 * 3600)
    s.sync()
    assert s.elector.try_acquire_or_renew()
    return s


def preempted_words(fake: FakeApiServer, gang_name: str, pods: int) -> list[str]:
    """The DisruptionTarget message of each of the gang's pods being deleted (none: untouched)."""
    said = []
    for i in range(pods):
        found = fake.get("pods", f"{gang_name}-worker-{i}")
        if found["metadata"].get("deletionTimestamp"):
            said += [c["message"] for c in found["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    return said


def test_contract_a_las_queue_stops_the_preemptible_long_gang_after_the_minimum_run(fake: FakeApiServer) -> None:
    """Preemption for order on Kubernetes: in a queue ordered las, a new gang stops the whole
    preemptible gang that attained more GPU service (DisruptionTarget with the words every engine
    says, deleted with its grace, a preemption counted on its PodGroup), never the
    --non-preemptible one beside it, and nobody within the minimum run (30 min) of its start,
    kubelet's startTime on the scheduler's clock."""
    fake.put("nodes", node("gpu-0"))
    fake.put("nodes", node("gpu-1"))
    fake.put("configmaps", queues_config(train=LAS_QUEUE))
    queued_gang(fake, "long", "train", 8, "gpu-0", started_s=START)
    queued_gang(fake, "kept", "train", 8, "gpu-1", started_s=START, preemptible=False)
    clock = ManualClock(START + 600)
    s = scheduler_at(fake, clock)
    queued_gang(fake, "short", "train", 8)
    s.sync()
    assert s.cycle() == [] and not fake.calls("delete")  # ten minutes in: within the minimum run
    clock.advance(1260)  # 31 min: each has attained 8 x 31 GPU-min, LAS level 2; short none
    s.sync()
    assert s.cycle() == [] and not fake.calls("bind")
    [said] = set(preempted_words(fake, "long", 8))
    assert said.startswith("by job default/short (priority 0), for order: queue train is ordered las and job "
                           "default/short has attained 0.0 GPU-h (level 0), ranked before this job"), said
    read = read_preempted(said)  # as `list -o wide` reads it back
    assert read is not None and read.why == "for order"
    assert preempted_words(fake, "kept", 8) == []  # --non-preemptible: never
    notes = fake.get("podgroups", "long")["metadata"]["annotations"]
    assert notes[names.PREEMPTIONS_ANNOTATION] == "1"
    [(began, ended)] = json.loads(notes[names.RUNS_ANNOTATION])  # the run it ended, counted when it waits
    assert (began, ended) == (START, START + 1860)
    for i in range(8):
        fake.finish_deletion(f"long-worker-{i}")
    s.sync()
    assert [(r.gang, r.ok) for r in s.cycle()] == [("default/short", True)]
    assert {fake.get("pods", f"short-worker-{i}")["spec"]["nodeName"] for i in range(8)} == {"gpu-0"}


def test_contract_a_running_gangs_earlier_runs_count_from_its_podgroup(fake: FakeApiServer) -> None:
    """A scheduler started anew reads a running gang's GPU service from its PodGroup's runs (what
    it ran before a preemption) and this run's start: of two gangs running 31 min, only the one
    with an earlier run ranks after the waiting gang, which ran 8,000 GPU-s before (level 2)."""
    fake.put("nodes", node("gpu-0"))
    fake.put("nodes", node("gpu-1"))
    fake.put("configmaps", queues_config(train=LAS_QUEUE))
    queued_gang(fake, "again", "train", 8, "gpu-0", started_s=START, runs=[(START - 4000, START - 3000)])
    queued_gang(fake, "once", "train", 8, "gpu-1", started_s=START)
    queued_gang(fake, "back", "train", 8, runs=[(START - 1000, START)])
    s = scheduler_at(fake, ManualClock(START + 1860))
    assert s.cycle() == []
    assert preempted_words(fake, "once", 8) == []  # 14,880 GPU-s: level 2, as the waiting gang
    [said] = set(preempted_words(fake, "again", 8))  # 22,880 GPU-s: level 3
    assert "for order: queue train is ordered las and job default/back has attained 2.2 GPU-h (level 2)" in said


def test_contract_fair_share_stops_a_gang_of_the_queue_above_its_share(fake: FakeApiServer) -> None:
    """Kueue's fair-sharing preemption on Kubernetes: two queues of weight 1 in one cohort, each
    with a quota of the whole cluster; team-a runs both gangs of 8 (borrowing nothing), team-b's
    gang of 8 waits. Within the minimum run nobody is stopped; after it, one of team-a's gangs
    is (team-a keeps 8 GPUs, team-b's share once started), its pods saying it was fair share."""
    fake.put("nodes", node("gpu-0"))
    fake.put("nodes", node("gpu-1"))
    quota = {"quota": [["*", 16]], "weight": 1.0, "cohort": "lab"}
    fake.put("configmaps", queues_config(**{"team-a": quota, "team-b": quota}))
    queued_gang(fake, "a1", "team-a", 8, "gpu-0", started_s=START)
    queued_gang(fake, "a2", "team-a", 8, "gpu-1", started_s=START)
    queued_gang(fake, "b1", "team-b", 8)
    clock = ManualClock(START + 600)
    s = scheduler_at(fake, clock)
    assert s.cycle() == [] and not fake.calls("delete")  # within the minimum run
    clock.advance(1260)
    s.sync()
    assert s.cycle() == [] and not fake.calls("bind")
    victims = {p.split("-worker-")[0] for verb, p in writes(fake) if verb == "delete"}
    assert len(victims) == 1 and victims <= {"a1", "a2"}
    [said] = set(preempted_words(fake, victims.pop(), 8))
    assert said.startswith("by job default/b1 (priority 0), fair share (LessThanOrEqualToFinalShare): queue team-a "
                           "at 100% of the GPUs cohort lab holds, above its 50% share; queue team-b at 0% of its "
                           "50%"), said
    read = read_preempted(said)  # as `list -o wide` reads it back
    assert read is not None and read.why == "fair share"


NCCL_LOST = "node:12:34 [0] NCCL WARN NET/Socket : Connection closed by remote peer"


def restartable_gang(fake: FakeApiServer, name: str, pods: int, max_restarts: int) -> None:
    """A gang's worker pods as mpi-operator makes them from a --max-restarts template."""
    for i in range(pods):
        worker = pod(f"{name}-worker-{i}", gang=name)
        worker["metadata"]["annotations"] = {names.MAX_RESTARTS_ANNOTATION: str(max_restarts)}
        fake.put("pods", worker)


def fails(fake: FakeApiServer, name: str, message: str, reason: str = "") -> None:
    """kubelet: the pod's container exits 1, the end of its log kept in its status (and the pod's
    ``reason`` where the node failed under it: NodeLost)."""
    failed = fake.get("pods", name)
    failed["status"] = {"phase": "Failed", "containerStatuses": [{"name": "main", "state": {"terminated": {
        "exitCode": 1, "reason": "Error", "message": message}}}]}  # fmt: skip
    if reason:
        failed["status"]["reason"] = reason
    fake.put("pods", failed)


def test_contract_a_failed_gang_restarts_whole_and_a_node_blamed_twice_is_cordoned(fake: FakeApiServer) -> None:
    """--max-restarts on Kubernetes: a worker fails with an NCCL connection error; the scheduler
    blames its node (annotation), raises the gang's restart count on its PodGroup, says why in
    an Event, and deletes every pod of the gang with its grace. mpi-operator's new pods are bound
    with the new count (their RINGLEADER_RESTARTS). The gang's own log is its user's to write:
    a second failure there cordons the node only on what the node says itself (the pod's status
    NodeLost), with the reason, and the gang's next run goes to the other node."""
    fake.put("nodes", node("gpu-0"))
    fake.put("nodes", node("gpu-1"))
    fake.put("podgroups", podgroup("train", 4))
    restartable_gang(fake, "train", 4, max_restarts=3)
    s = scheduler(fake)
    assert [(r.gang, r.ok) for r in s.cycle()] == [("default/train", True)]
    [first] = {fake.get("pods", f"train-worker-{i}")["spec"]["nodeName"] for i in range(4)}
    [other] = {"gpu-0", "gpu-1"} - {first}
    for run in (1, 2):
        fails(fake, "train-worker-1", NCCL_LOST, "NodeLost" if run == 2 else "")
        s.sync()
        assert s.cycle() == []  # the members are being deleted: nothing to bind yet
        deleted = sorted(p for verb, p in writes(fake) if verb == "delete")
        assert deleted == sorted(f"train-worker-{i}" for i in range(4) for _ in range(run)), deleted
        group = fake.get("podgroups", "train")
        assert group["metadata"]["annotations"][names.RESTARTS_ANNOTATION] == str(run)
        said = [o["message"] for (plural, _, _), o in fake.objects.items()
                if plural == "events" and o["reason"] == "Restarting"]  # fmt: skip
        why = f"an NCCL connection error on {first}: {NCCL_LOST}" if run == 1 else (
            f"node {first} failed under it: the pod's status says NodeLost")  # fmt: skip
        assert said[-1].startswith(f"train-worker-1 failed: {why}")
        assert f"restart {run} of 3 (--max-restarts)" in said[-1]
        for i in range(4):  # kubelet stops them; mpi-operator makes them again
            fake.finish_deletion(f"train-worker-{i}")
        restartable_gang(fake, "train", 4, max_restarts=3)
        s.sync()
        assert [(r.gang, r.ok) for r in s.cycle()] == [("default/train", True)]
        bound = [fake.get("pods", f"train-worker-{i}") for i in range(4)]
        assert {p["metadata"]["annotations"][names.RESTARTS_ANNOTATION] for p in bound} == {str(run)}
        placed = {p["spec"]["nodeName"] for p in bound}
        if run == 1:
            faults = json.loads(fake.get("nodes", first)["metadata"]["annotations"][names.FAULTS_ANNOTATION])
            assert list(faults) == ["default/train#0"] and not fake.get("nodes", first)["spec"].get("unschedulable")
            assert placed == {first}  # one failure alone does not keep the gang off the node
    blamed = fake.get("nodes", first)
    assert blamed["spec"]["unschedulable"] is True
    assert blamed["metadata"]["annotations"][names.CORDON_REASON_ANNOTATION] == (
        f"blamed for 2 failures, the last of gang default/train: node {first} failed under it: the pod's status says "
        "NodeLost")  # fmt: skip
    assert placed == {other}


def test_contract_a_preemption_uses_up_no_restart(fake: FakeApiServer) -> None:
    """A gang preempted once (its PodGroup counts one restart, a preemption) and allowed one
    restart after a failure still gets it: its run after the failure is its second restart, and
    the Event counts failures only."""
    fake.put("nodes", node("gpu-0"))
    group = podgroup("train", 4)
    group["metadata"]["annotations"] = {names.RESTARTS_ANNOTATION: "1", names.PREEMPTIONS_ANNOTATION: "1"}
    fake.put("podgroups", group)
    restartable_gang(fake, "train", 4, max_restarts=1)
    s = scheduler(fake)
    assert [(r.gang, r.ok) for r in s.cycle()] == [("default/train", True)]
    fails(fake, "train-worker-1", NCCL_LOST)
    s.sync()
    assert s.cycle() == []
    assert fake.get("podgroups", "train")["metadata"]["annotations"][names.RESTARTS_ANNOTATION] == "2"
    said = [o["message"] for (plural, _, _), o in fake.objects.items()
            if plural == "events" and o["reason"] == "Restarting"]  # fmt: skip
    assert len(said) == 1 and "restart 1 of 1 (--max-restarts)" in said[0], said


def test_contract_a_pod_deleted_on_purpose_is_no_failure() -> None:
    """kubelet marks a pod it stopped for a delete (a preemption, a restart, the job deleted)
    Failed: that is not the program failing, and restarts nothing."""
    from ringleader.engines.kubernetes.restarts import pod_failure

    stopped = pod("train-worker-0", gang="train", nodeName="gpu-0")
    stopped["metadata"]["annotations"] = {names.MAX_RESTARTS_ANNOTATION: "3", names.RESTARTS_ANNOTATION: "1"}
    stopped["status"] = {"phase": "Failed", "containerStatuses": [{"name": "main", "state": {"terminated": {
        "exitCode": 143, "reason": "Error"}}}]}  # fmt: skip
    failed = pod_failure(stopped)
    assert failed is not None and (failed.run, failed.max_restarts, failed.exit_code) == (1, 3, 143)
    stopped["metadata"]["deletionTimestamp"] = "2026-11-27T10:00:00Z"
    assert pod_failure(stopped) is None


def test_contract_queue_usage_missing_or_bad_is_said_and_never_stops_the_cycle(
        fake: FakeApiServer, caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    """The queues' usage ConfigMap absent (an install from before it): said once in the log, not
    written, the cycle goes on. Made with an entry not as the scheduler writes it: that entry is
    left out with one line naming the queue, and the next cycle writes it clean, counting the
    running gang's GPU-seconds from its start."""
    fake.put("nodes", node("gpu-0"))
    fake.put("configmaps", queues_config(**{"team-a": {"quota": [["*", 8]], "weight": 1.0}}))
    queued_gang(fake, "r1", "team-a", 4, "gpu-0", started_s=time.time() - 600)
    s = scheduler(fake)
    with caplog.at_level(logging.WARNING, logger="ringleader.kube.scheduler"):
        assert s.cycle() == [] and s.cycle() == []
    assert [r.getMessage() for r in caplog.records].count(
        f"fair-share usage not kept: the ConfigMap {names.SYSTEM_NAMESPACE}/{names.QUEUE_USAGE_CONFIG} is missing; "
        "apply `ringleader kube manifests` again") == 1  # fmt: skip
    assert not fake.calls("update", plural="configmaps")
    caplog.clear()
    fake.put("configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "data": {"team-a": "ten"},
                            "metadata": {"name": names.QUEUE_USAGE_CONFIG, "namespace": names.SYSTEM_NAMESPACE}})
    with caplog.at_level(logging.WARNING, logger="ringleader.kube.cache"):
        s.sync()
    assert ["queue team-a: 'ten' is not" in r.getMessage() for r in caplog.records] == [True]
    assert s.cycle() == []
    kept = json.loads(fake.get("configmaps", names.QUEUE_USAGE_CONFIG, names.SYSTEM_NAMESPACE)["data"]["team-a"])
    assert 4 * 590 < kept["gpu_s"] < 4 * 700, kept
