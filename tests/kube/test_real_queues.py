"""Team queues, priority and the job kept whole, against a real v1.36 control plane
(tests/kube/realserver.py): jobs submitted by plain users through the engine, their pods made as
mpi-operator and the Training Operator make them, ringleader's scheduler under its own
ServiceAccount's token, the install's admission policies enforced by the API server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kube.kubeobjs import node
from kube.realserver import ControlPlane, RequestFailed, leading_scheduler
from ringleader.clock import ManualClock
from ringleader.engines.kubernetes import manifests, names
from ringleader.engines.kubernetes.client import Api, ApiError
from ringleader.engines.kubernetes.engine import EngineApi, KubernetesEngine
from ringleader.engines.kubernetes.scheduler import Scheduler
from ringleader.engines.kubernetes.usage import KEEP_EVERY_S
from ringleader.errors import ConflictError, UsageError
from ringleader.jobs.queues import line_of
from ringleader.jobs.spec import JobSpec, KubeOptions
from ringleader.jobs.states import JobStatus
from ringleader.scheduler import Placement, WorkerSlot
from ringleader.scheduler.order import QueueOrder
from ringleader.scheduler.teams import TeamQueue

pytestmark = pytest.mark.slow  # multi-process runs of seconds each: run early (tests/conftest.py)

GROUPS = f"/apis/{names.PODGROUP_GROUP}/{names.PODGROUP_VERSION}"
QUOTA = (("*", 8),)
LAB = ("team-a", "team-b")  # one namespace per team, each team's queue for its own namespace
STARTED = datetime(2026, 12, 6, 10, tzinfo=UTC).timestamp()  # when kubelet started the pods ``run`` starts


@pytest.fixture(scope="module")
def lab(real: ControlPlane) -> Iterator[ControlPlane]:
    """Two 8-GPU nodes; namespaces team-a (alice edits it) and team-b (bob edits it); a queue per
    team of 8 GPUs in one cohort, each for its own namespace; PriorityClasses low and high."""
    for name in ("gpu-0", "gpu-1"):
        real.add_node(node(name, mode=None))  # serving every job
    for namespace, user in zip(LAB, ("alice", "bob"), strict=True):
        real.namespace(namespace)
        rbac = "rbac.authorization.k8s.io"
        real.apply([{"apiVersion": f"{rbac}/v1", "kind": "RoleBinding",
                     "metadata": {"name": f"{user}-edit", "namespace": namespace},
                     "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": "edit"},
                     "subjects": [{"apiGroup": rbac, "kind": "User", "name": user}]}])  # fmt: skip
    for name, value in (("low", 10), ("high", 1000)):
        real.apply([{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                     "value": value}])  # fmt: skip
    admin = engine(real, "admin", "default")
    for team in LAB:
        admin.create_queue(TeamQueue(team, QUOTA, cohort="lab", namespaces=(team,)), overwrite=True)
    yield real


def engine(real: ControlPlane, user: str, namespace: str) -> KubernetesEngine:
    return KubernetesEngine(EngineApi(real.client(user)), namespace)


@pytest.fixture
def sched(lab: ControlPlane) -> Iterator[Scheduler]:
    yield from cleaned_after(lab, leading_scheduler(lab, "sched-queues"))


@pytest.fixture
def clock() -> ManualClock:
    """The clock of ``clocked``'s cycles, from now: the control plane's controllers read the times
    the scheduler writes (kube-controller-manager clears a DisruptionTarget set longer than 2 min
    ago on a pod not yet being deleted). Half a second past a whole second: the official client
    writes a Lease's MicroTime without its fraction where that is zero, which the server refuses."""
    return ManualClock(int(time.time()) + 0.5)


@pytest.fixture
def clocked(lab: ControlPlane, clock: ManualClock) -> Iterator[Scheduler]:
    """The scheduler on ``clock``: a test moves time past the minimum run instead of waiting."""
    yield from cleaned_after(lab, leading_scheduler(lab, "sched-clocked", clock=clock))


def cleaned_after(lab: ControlPlane, s: Scheduler) -> Iterator[Scheduler]:
    """``s`` for one test; then its Lease given up, and the test's jobs, groups and pods gone."""
    yield s
    s.elector.release()
    for namespace in LAB:  # the test's jobs, groups and pods gone (the garbage collector races us)
        kinds = [f"/apis/kubeflow.org/{names.MPIJOB_VERSION}/namespaces/{namespace}/mpijobs",
                 f"/apis/kubeflow.org/{names.PYTORCHJOB_VERSION}/namespaces/{namespace}/pytorchjobs",
                 f"{GROUPS}/namespaces/{namespace}/{names.PODGROUP_PLURAL}", f"/api/v1/namespaces/{namespace}/pods"]
        for path in kinds:
            for item in lab.request("GET", path)["items"]:
                gone(lab, f"{path}/{item['metadata']['name']}")
        lab.until(lambda paths=kinds: not any(lab.request("GET", p)["items"] for p in paths), f"{namespace} emptied")


def gone(real: ControlPlane, path: str) -> None:
    """The object deleted now (a pod: as kubelet does once its containers stopped)."""
    try:
        real.request("DELETE", path, {"gracePeriodSeconds": 0})
    except RequestFailed as exc:
        if exc.status != 404:
            raise


def submit(real: ControlPlane, user: str, namespace: str, name: str, workers: int, kind: str = "mpi",
           **options: Any) -> dict[str, Any]:  # fmt: skip
    """`ringleader submit` as ``user``: the job's object as the API server keeps it."""
    command = ["python", "train.py"] if kind == "pytorch" else ["mpirun", "python", "train.py"]
    engine(real, user, namespace).submit(JobSpec(name, workers, 1, command, kind=kind, **options))
    plural, version = ("pytorchjobs", names.PYTORCHJOB_VERSION) if kind == "pytorch" else ("mpijobs",
                                                                                            names.MPIJOB_VERSION)
    found = real.get(f"/apis/kubeflow.org/{version}/namespaces/{namespace}/{plural}/{name}")
    assert found is not None
    return found


def operator_pods(real: ControlPlane, job: dict[str, Any], launcher: bool = False) -> list[str]:
    """What mpi-operator (the workers; the launcher once they run) or the Training Operator makes
    of the job's templates, with their labels and names; the pods' names."""
    meta = job["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    if job["kind"] == "MPIJob":
        replicas = job["spec"]["mpiReplicaSpecs"]
        roles = [("Launcher", "launcher")] if launcher else [("Worker", "worker")]
    else:
        replicas = job["spec"]["pytorchReplicaSpecs"]
        roles = [("Master", "master"), ("Worker", "worker")]
    made = []
    for kind, role in roles:
        template = replicas[kind]["template"]
        for i in range(int(replicas[kind].get("replicas", 1))):
            pod_name = f"{name}-launcher-7x2kq" if role == "launcher" else f"{name}-{role}-{i}"
            labels = {**template["metadata"].get("labels", {}), names.JOB_NAME_LABEL: name,
                      names.JOB_ROLE_LABEL: role, names.REPLICA_TYPE_LABEL: role,
                      names.REPLICA_INDEX_LABEL: str(i)}  # fmt: skip
            body = {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": pod_name, "labels": labels,
                                 "annotations": dict(template["metadata"].get("annotations", {}))},
                    "spec": template["spec"]}  # fmt: skip
            real.request("POST", f"/api/v1/namespaces/{namespace}/pods", body)
            made.append(pod_name)
    return made


def run(real: ControlPlane, namespace: str, pods: list[str], at: float = STARTED) -> None:
    """kubelet: each bound pod's container started (at ``at``, to the second)."""
    stamp = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for name in pods:
        real.patch(f"/api/v1/namespaces/{namespace}/pods/{name}/status", {"status": {
            "phase": "Running", "startTime": stamp, "containerStatuses": [{
                "name": "main", "ready": True, "restartCount": 0, "image": "x", "imageID": "", "started": True,
                "state": {"running": {"startedAt": stamp}}, "lastState": {}}]}})  # fmt: skip


def seen_whole(real: ControlPlane, sched: Scheduler, key: str, members: int) -> None:
    """Sync the scheduler's cache until it holds gang ``key``'s PodGroup and ``members`` of its
    pods waiting: one watch round is no barrier on a loaded API server (its watch may deliver a
    new object after the round's second)."""

    def whole() -> bool:
        sched.sync()
        return any(g.key == key and not g.group_missing and len(g.pending) >= members for g in sched.cache.gangs())

    real.until(whole, f"the scheduler's cache to see gang {key} whole")


def start(real: ControlPlane, sched: Scheduler, job: dict[str, Any], at: float = STARTED) -> None:
    """The job's gang bound whole and running; an MPIJob's launcher then made, bound and running."""
    namespace = job["metadata"]["namespace"]
    pods = operator_pods(real, job)
    key = f"{namespace}/{job['metadata']['name']}"
    seen_whole(real, sched, key, len(pods))
    assert [(r.gang, r.ok) for r in sched.cycle()] == [(key, True)]
    run(real, namespace, pods, at)
    if job["kind"] == "MPIJob":
        launcher = operator_pods(real, job, launcher=True)
        seen_whole(real, sched, key, len(launcher))
        assert [(r.gang, r.ok) for r in sched.cycle()] == [(key, True)]
        run(real, namespace, launcher, at)
    sched.sync()


def preempted(real: ControlPlane, namespace: str) -> set[str]:
    """The gangs of ``namespace`` whose pods are being deleted, DisruptionTarget set."""
    found = set()
    for pod in real.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]:
        conditions = {c["type"] for c in pod.get("status", {}).get("conditions", ())}
        if pod["metadata"].get("deletionTimestamp") and "DisruptionTarget" in conditions:
            found.add(pod["metadata"]["labels"][names.PODGROUP_LABEL])
    return found


@pytest.mark.parametrize("borrower_kind", ["mpi", "pytorch"])
def test_real_a_borrowing_gang_launcher_and_all_is_reclaimed_by_the_lender(
        lab: ControlPlane, sched: Scheduler, borrower_kind: str) -> None:  # fmt: skip
    """team-b's two gangs of 8 borrow team-a's idle quota (an MPIJob's launcher, which names no
    queue, counts in its gang's queue, never in the default one); team-a's gang of 4 takes its
    quota back by preempting one whole borrowing gang."""
    borrowers = [f"{borrower_kind}-b1", f"{borrower_kind}-b2"]
    for job in borrowers:
        start(lab, sched, submit(lab, "bob", "team-b", job, 8, kind=borrower_kind, queue="team-b"))
    teams = sched.cache.team_queues(time.time())
    assert (teams.use.get("team-b"), teams.borrowed(teams.queues["team-b"])) == ({"*": 16}, {"*": 8})
    lender = operator_pods(lab, submit(lab, "alice", "team-a", f"{borrower_kind}-a1", 4, queue="team-a"))
    seen_whole(lab, sched, f"team-a/{borrower_kind}-a1", len(lender))
    assert sched.cycle() == []  # its GPUs are being freed
    [victim] = preempted(lab, "team-b")
    assert victim in borrowers
    left = sched.cache.team_queues(time.time())
    assert left.use.get("team-b") == {"*": 8}  # the victim gave its GPUs back to the cohort
    # the run it ended is on its PodGroup, from its pods' start (kubelet's startTime) to now: the
    # GPU service a queue ordered las reads when its new pods wait
    group = lab.get(f"{GROUPS}/namespaces/team-b/{names.PODGROUP_PLURAL}/{victim}")
    assert group is not None
    [(began, ended)] = json.loads(group["metadata"]["annotations"][names.RUNS_ANNOTATION])
    assert began == STARTED and ended > began


def test_real_a_queue_is_for_its_namespaces_only(lab: ControlPlane, sched: Scheduler) -> None:
    """bob, who edits team-b, names team-a's queue: submit refuses it in one line before anything
    is made; a gang made by hand naming it waits, saying why, and counts in no queue of team-a's."""
    with pytest.raises(UsageError) as refused:
        engine(lab, "bob", "team-b").submit(JobSpec("sly", 2, 1, ["mpirun", "python", "t.py"], queue="team-a"))
    assert "queue team-a is for namespace(s) team-a, not team-b" in refused.value.one_line()
    assert lab.get("/apis/kubeflow.org/v2beta1/namespaces/team-b/mpijobs/sly") is None
    job = submit(lab, "bob", "team-b", "sly", 2)  # a queue of its own, then changed on the pods
    for template in job["spec"]["mpiReplicaSpecs"].values():
        template["template"]["metadata"].setdefault("annotations", {})[names.QUEUE_ANNOTATION] = "team-a"
    lab.request("DELETE", f"{GROUPS}/namespaces/team-b/{names.PODGROUP_PLURAL}/sly")
    lab.request("POST", f"{GROUPS}/namespaces/team-b/{names.PODGROUP_PLURAL}",
                {"apiVersion": f"{names.PODGROUP_GROUP}/{names.PODGROUP_VERSION}", "kind": "PodGroup",
                 "metadata": {"name": "sly", "namespace": "team-b"}, "spec": {"minMember": 2}}, user="bob")  # fmt: skip
    operator_pods(lab, job)
    sched.sync()
    assert sched.cycle() == []
    group = lab.get(f"{GROUPS}/namespaces/team-b/{names.PODGROUP_PLURAL}/sly")
    assert group is not None
    reason = group["metadata"]["annotations"][names.PENDING_ANNOTATION]
    assert reason.startswith("queue team-a is for namespace(s) team-a, not team-b"), reason


def test_real_a_queue_ordered_srtf_starts_its_shorter_gang_first(lab: ControlPlane, sched: Scheduler) -> None:
    """`queue create --order srtf`, kept in the queues' ConfigMap: once the gang holding the
    queue's quota is gone, the waiting gang with the shorter --run-time starts, though it was
    submitted last; `queue list` says the order."""
    admin = engine(lab, "admin", "default")
    admin.create_queue(TeamQueue("short-first", (("*", 4),), namespaces=("team-a",), order=QueueOrder.SRTF),
                       overwrite=True)  # in no cohort: the other tests' queues lend it nothing
    sched.sync()
    held = submit(lab, "alice", "team-a", "held", 4, queue="short-first")
    start(lab, sched, held)
    for name, run_time_s in (("long", 5 * 3600.0), ("short", 600.0)):
        job = submit(lab, "alice", "team-a", name, 4, queue="short-first", run_time_s=run_time_s)
        seen_whole(lab, sched, f"team-a/{name}", len(operator_pods(lab, job)))
    assert sched.cycle() == []  # both over the queue's quota
    for pod in lab.request("GET", "/api/v1/namespaces/team-a/pods")["items"]:
        if pod["metadata"]["name"].startswith("held-"):
            gone(lab, f"/api/v1/namespaces/team-a/pods/{pod['metadata']['name']}")

    def held_gone() -> bool:
        sched.sync()
        return not any(p.gang_key == "team-a/held" for p in sched.cache.pods.values())

    lab.until(held_gone, "the scheduler's cache to see the held gang gone")
    assert [(r.gang, r.ok) for r in sched.cycle()] == [("team-a/short", True)]
    assert {q.name: q.order for q in admin.queues()}["short-first"] is QueueOrder.SRTF


def test_real_a_las_queue_stops_the_preemptible_long_gang_after_the_minimum_run(
        lab: ControlPlane, clocked: Scheduler, clock: ManualClock) -> None:  # fmt: skip
    """`queue create --order las`: ten minutes after two gangs of 8 started (kubelet's
    startTime), a new gang of the queue waits, both within the minimum run; at 31 minutes it
    stops the whole preemptible gang, which attained more GPU service, never the
    --non-preemptible one, with the words every engine says; the run it ended is on its
    PodGroup; once its pods are gone the new gang is bound where it ran."""
    admin = engine(lab, "admin", "default")
    admin.create_queue(TeamQueue("least-first", (("*", 16),), namespaces=("team-a",), order=QueueOrder.LAS),
                       overwrite=True)  # in no cohort: the other tests' queues lend it nothing
    clocked.sync()
    started = clock.now() - 0.5  # kubelet's startTime is to the second
    start(lab, clocked, submit(lab, "alice", "team-a", "long", 8, queue="least-first"), started)
    start(lab, clocked, submit(lab, "alice", "team-a", "kept", 8, queue="least-first", preemptible=False), started)
    clock.advance(600)
    pods = operator_pods(lab, submit(lab, "alice", "team-a", "short", 8, queue="least-first"))
    seen_whole(lab, clocked, "team-a/short", len(pods))
    assert clocked.cycle() == [] and preempted(lab, "team-a") == set()  # within the minimum run
    clock.advance(1260)  # 31 min: 8 x 31 GPU-min each, LAS level 2; short attained none
    assert clocked.cycle() == []
    assert preempted(lab, "team-a") == {"long"}
    for pod in lab.request("GET", "/api/v1/namespaces/team-a/pods")["items"]:
        said = [c["message"] for c in pod["status"].get("conditions", ()) if c["type"] == "DisruptionTarget"]
        if pod["metadata"]["name"].startswith("long-"):
            assert said and said[0].startswith("by job team-a/short (priority 0), for order: queue least-first is "
                                               "ordered las and job team-a/short has attained 0.0 GPU-h (level 0)")
            gone(lab, f"/api/v1/namespaces/team-a/pods/{pod['metadata']['name']}")
    group = lab.get(f"{GROUPS}/namespaces/team-a/{names.PODGROUP_PLURAL}/long")
    assert group is not None
    assert json.loads(group["metadata"]["annotations"][names.RUNS_ANNOTATION]) == [[started, started + 1860.5]]

    def long_gone() -> bool:
        clocked.sync()
        return not any(p.gang_key == "team-a/long" for p in clocked.cache.pods.values())

    lab.until(long_gone, "the scheduler's cache to see the preempted gang gone")
    assert [(r.gang, r.ok) for r in clocked.cycle()] == [("team-a/short", True)]


def test_real_fair_share_stops_a_gang_of_the_queue_above_its_share(
        lab: ControlPlane, clocked: Scheduler, clock: ManualClock) -> None:  # fmt: skip
    """Kueue's fair-sharing preemption: two queues of weight 1 in one cohort, each with the whole
    cluster as its quota; alice's queue runs both gangs of 8 (borrowing nothing, so no reclaim),
    bob's gang waits. Within the minimum run nobody is stopped; after it one of alice's gangs is,
    its pods saying it was for fair share, and bob's gang is bound where it ran."""
    admin = engine(lab, "admin", "default")
    for queue, namespace in (("fair-a", "team-a"), ("fair-b", "team-b")):
        admin.create_queue(TeamQueue(queue, (("*", 16),), cohort="fair", namespaces=(namespace,)), overwrite=True)
    clocked.sync()
    started = clock.now() - 0.5
    for name in ("a1", "a2"):
        start(lab, clocked, submit(lab, "alice", "team-a", name, 8, kind="pytorch", queue="fair-a"), started)
    clock.advance(600)
    pods = operator_pods(lab, submit(lab, "bob", "team-b", "b1", 8, kind="pytorch", queue="fair-b"))
    seen_whole(lab, clocked, "team-b/b1", len(pods))
    assert clocked.cycle() == [] and preempted(lab, "team-a") == set()  # within the minimum run
    clock.advance(1260)
    assert clocked.cycle() == []
    [victim] = preempted(lab, "team-a")
    for pod in lab.request("GET", "/api/v1/namespaces/team-a/pods")["items"]:
        if pod["metadata"]["name"].startswith(f"{victim}-"):
            [said] = [c["message"] for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget"]
            assert said.startswith("by job team-b/b1 (priority 0), fair share (LessThanOrEqualToFinalShare): queue "
                                   "fair-a at 100% of the GPUs cohort fair holds, above its 50% share"), said
            gone(lab, f"/api/v1/namespaces/team-a/pods/{pod['metadata']['name']}")

    def victim_gone() -> bool:
        clocked.sync()
        return not any(p.gang_key == f"team-a/{victim}" for p in clocked.cache.pods.values())

    lab.until(victim_gone, "the scheduler's cache to see the preempted gang gone")
    assert [(r.gang, r.ok) for r in clocked.cycle()] == [("team-b/b1", True)]


def test_real_priority_is_the_priority_class_and_preempt_is_carried(lab: ControlPlane, sched: Scheduler) -> None:
    """--priority is refused on Kubernetes naming -p/--priority-class; a gang of PriorityClass
    high with --preempt stops a lower gang of its own queue, and `get` shows both as submitted."""
    with pytest.raises(UsageError) as refused:
        engine(lab, "alice", "team-a").submit(JobSpec("p", 2, 1, ["mpirun", "python", "t.py"], priority=100))
    assert "-p/--priority-class" in refused.value.one_line()
    assert lab.get("/apis/kubeflow.org/v2beta1/namespaces/team-a/mpijobs/p") is None
    for name in ("low-0", "low-1"):
        start(lab, sched, submit(lab, "alice", "team-a", name, 8, kube=KubeOptions(priority_class="low")))
    urgent = submit(lab, "alice", "team-a", "urgent", 8, preempt=True, kube=KubeOptions(priority_class="high"))
    shown = engine(lab, "alice", "team-a").get("urgent").spec
    assert shown.preempt and shown.kube is not None and shown.kube.priority_class == "high"
    operator_pods(lab, urgent)
    assert engine(lab, "alice", "team-a").get("urgent").priority == 1000  # its PriorityClass's, as it is ordered
    sched.sync()
    assert sched.cycle() == []
    assert len(preempted(lab, "team-a")) == 1


def test_real_the_schedulers_own_annotations_are_its_own(lab: ControlPlane, sched: Scheduler) -> None:
    """A plain user may not write the scheduler's decision and restart count on a pod, its
    counters on a PodGroup, nor change the spec a PodGroup keeps; the scheduler may not change
    a node beyond its faults and cordon."""
    job = submit(lab, "alice", "team-a", "mine", 2)
    pods = operator_pods(lab, job)
    sched.sync()
    assert [r.ok for r in sched.cycle()] == [True]
    for key in (names.DECISION_ANNOTATION, names.RESTARTS_ANNOTATION):
        with pytest.raises(RequestFailed) as refused:
            lab.patch(f"/api/v1/namespaces/team-a/pods/{pods[0]}", {"metadata": {"annotations": {key: "9"}}},
                      user="alice")  # fmt: skip
        assert refused.value.status == 403 and "cannot be changed" in refused.value.body
    group_path = f"{GROUPS}/namespaces/team-a/{names.PODGROUP_PLURAL}/mine"
    for notes in ({names.RESTARTS_ANNOTATION: "0"}, {names.SPEC_ANNOTATION: json.dumps({"name": "mine"})}):
        with pytest.raises(RequestFailed) as refused:
            lab.patch(group_path, {"metadata": {"annotations": notes}}, user="alice")
        assert refused.value.status == 403, refused.value.body
    token = lab.service_account_token(names.SYSTEM_NAMESPACE, manifests.SCHEDULER_ACCOUNT)
    as_scheduler = Api(lab.client(token=token))
    as_scheduler.annotate_node("gpu-0", {names.FAULTS_ANNOTATION: "{}"})  # its own: allowed
    with pytest.raises(ApiError) as refused_node:
        as_scheduler.annotate_node("gpu-0", {names.TOPOLOGY_ANNOTATION: "{}"})
    assert refused_node.value.status == 403 and "may change on a node only" in refused_node.value.message


Run = Callable[..., subprocess.CompletedProcess[str]]


def cli_as(real: ControlPlane, user: str, namespace: str, home: Path) -> Run:
    """The real `ringleader` command with ``user``'s kubeconfig, on the kubernetes engine."""
    env = {**os.environ, "KUBECONFIG": str(real.kubeconfig(user, namespace=namespace)), "RINGLEADER_HOME": str(home),
           "RINGLEADER_ENGINE": "kubernetes"}  # fmt: skip

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "ringleader.cli.main", *args], env=env, capture_output=True,
                              text=True, timeout=120)  # fmt: skip

    return run


def test_real_queue_view_reason_codes_line_and_hold(lab: ControlPlane, sched: Scheduler, tmp_path: Path) -> None:
    """What an operator reads of the queue on Kubernetes: each job's queue and its one-word
    reason (on its PodGroup, the scheduler's to write), the line `queue describe` shows, and a
    hold that the user sets on the gang's PodGroup and the scheduler's cycle honours."""
    alice = engine(lab, "alice", "team-a")
    as_alice = cli_as(lab, "alice", "team-a", tmp_path)
    start(lab, sched, submit(lab, "alice", "team-a", "first", 8, queue="team-a"))
    waiting = operator_pods(lab, submit(lab, "alice", "team-a", "second", 8, queue="team-a", preemptible=False))
    seen_whole(lab, sched, "team-a/second", len(waiting))
    assert sched.cycle() == []  # a --non-preemptible gang does not borrow: over its queue's quota
    listed = {v.name: v for v in alice.list_jobs()}
    assert (listed["second"].queue, listed["second"].reason_code) == ("team-a", "QuotaExceeded")
    assert listed["first"].reason_code is None and listed["first"].queue == "team-a"
    assert alice.get("second").reason_code == "QuotaExceeded"
    listed_cli = as_alice("list")  # the real command, as alice reads it
    assert listed_cli.returncode == 0, listed_cli.stderr
    rows = {line.split()[0]: line.split() for line in listed_cli.stdout.splitlines()}
    assert rows["NAME"][-2:] == ["QUEUE", "REASON"] and rows["second"][-2:] == ["team-a", "QuotaExceeded"]
    with pytest.raises(RequestFailed) as forged:  # the scheduler's word, not the user's
        lab.patch(f"{GROUPS}/namespaces/team-a/{names.PODGROUP_PLURAL}/second",
                  {"metadata": {"annotations": {names.PENDING_CODE_ANNOTATION: "Held"}}}, user="alice")
    assert forged.value.status == 403
    # held: the cycle skips it, and says so
    held_cli = as_alice("hold", "second")
    assert (held_cli.returncode, held_cli.stdout) == (0, "job 'second' held\n"), held_cli.stderr
    sched.sync()
    assert sched.cycle() == []
    held = alice.get("second")
    assert (held.reason_code, held.spec.hold) == ("Held", True)
    assert held.reason == "held: it is not started until `ringleader release second -n team-a`"
    views = engine(lab, "admin", "team-a").queues()  # `queue describe` reads the nodes: an administrator's
    line = line_of(views, alice.list_jobs([JobStatus.PENDING]), time.time())
    assert [(one.place, one.job.name) for one in line] == [(None, "second")]
    with pytest.raises(ConflictError) as twice:
        alice.hold("second")
    assert "job 'second' is already held" in twice.value.one_line()
    with pytest.raises(ConflictError) as running:
        alice.hold("first")
    assert "job 'first' is RUNNING: only a job that waits can be held" in running.value.one_line()
    released = as_alice("release", "second")
    assert (released.returncode, released.stdout) == (0, "job 'second' released\n"), released.stderr
    sched.sync()
    assert sched.cycle() == []
    assert alice.get("second").reason_code == "QuotaExceeded"
    assert [one.place for one in line_of(views, alice.list_jobs([JobStatus.PENDING]), time.time())] == [1]
    refused = as_alice("update", "second", "--priority", "10")  # a pod's priority is its PriorityClass's
    assert refused.returncode == 2 and refused.stderr.startswith("error: --priority N is not supported by the "
                                                                 "kubernetes engine"), refused.stderr
    previous = as_alice("logs", "second", "--previous")  # the operator makes new pods: their logs go with them
    assert previous.returncode == 2 and "--previous is not supported by the kubernetes engine" in previous.stderr


def test_real_a_gang_submitted_held_is_never_bound_until_released(lab: ControlPlane, sched: Scheduler) -> None:
    """`submit --hold` on an idle cluster: its PodGroup is born held, so the scheduler binds none
    of its pods; released, it starts."""
    alice = engine(lab, "alice", "team-a")
    pods = operator_pods(lab, submit(lab, "alice", "team-a", "later", 2, queue="team-a", hold=True))
    seen_whole(lab, sched, "team-a/later", len(pods))
    assert sched.cycle() == []
    assert alice.get("later").reason_code == "Held"
    assert not any(lab.request("GET", f"/api/v1/namespaces/team-a/pods/{p}")["spec"].get("nodeName") for p in pods)
    alice.release("later")
    sched.sync()
    assert [(r.gang, r.ok) for r in sched.cycle()] == [("team-a/later", True)]


def test_real_a_gang_that_would_fit_on_cordoned_nodes_says_cordoned(lab: ControlPlane, sched: Scheduler) -> None:
    """With both nodes cordoned (`kubectl cordon`) a one-GPU gang says so in one word and names
    the nodes, not "0 free GPU(s)"; uncordoned, it starts."""
    admin = engine(lab, "admin", "default")
    try:
        for name in ("gpu-0", "gpu-1"):
            admin.cordon_node(name, "disk swap")
        pods = operator_pods(lab, submit(lab, "alice", "team-a", "one", 1, queue="team-a"))
        seen_whole(lab, sched, "team-a/one", len(pods))
        lab.until(lambda: sched.sync() or all(sched.cache.nodes[n].taints for n in ("gpu-0", "gpu-1")),
                  "the scheduler to see both cordons")  # fmt: skip
        assert sched.cycle() == []
        view = engine(lab, "alice", "team-a").get("one")
        assert view.reason_code == "Cordoned"
        assert view.reason is not None and "it would fit on cordoned node(s) gpu-0, gpu-1" in view.reason
    finally:
        for name in ("gpu-0", "gpu-1"):
            admin.uncordon_node(name)
    lab.until(lambda: sched.sync() or not any(sched.cache.nodes[n].taints for n in ("gpu-0", "gpu-1")),
              "the scheduler to see the nodes back")  # fmt: skip
    assert [r.ok for r in sched.cycle()] == [True]


def test_real_a_queue_whose_gang_ran_goes_after_one_that_did_not_across_a_restart(
        lab: ControlPlane, clocked: Scheduler, clock: ManualClock) -> None:  # fmt: skip
    """Fair share remembers ended runs: alice's gang of 16 GPUs (the whole cluster) runs ten
    minutes and succeeds; the scheduler keeps her queue's GPU-seconds in its ConfigMap, beside
    what another writer kept there meanwhile. A scheduler started afresh, which never saw that
    run, reads them back: with a gang of each queue waiting (equal weights, GPUs for one), bob's
    starts, though alice's was submitted first."""
    admin = engine(lab, "admin", "default")
    for queue, namespace in (("usage-a", "team-a"), ("usage-b", "team-b")):
        admin.create_queue(TeamQueue(queue, (("*", 16),), namespaces=(namespace,)), overwrite=True)
    clocked.sync()
    started = clock.now() - 0.5  # kubelet's startTime is to the second
    first = submit(lab, "alice", "team-a", "ran", 16, kind="pytorch", queue="usage-a")
    start(lab, clocked, first, started)
    clock.advance(600)
    for pod in lab.request("GET", "/api/v1/namespaces/team-a/pods")["items"]:
        lab.set_pod_status("team-a", pod["metadata"]["name"], {"phase": "Succeeded"})

    def ran_ended() -> bool:
        clocked.sync()
        return not any(p.gang_key == "team-a/ran" for p in clocked.cache.pods.values())

    lab.until(ran_ended, "the scheduler's cache to see the gang end")
    # another writer keeps usage-b meanwhile (as a second replica might): the scheduler's write,
    # at the resourceVersion it last saw, is refused; it reads the ConfigMap again, and adds
    usage_path = f"/api/v1/namespaces/{names.SYSTEM_NAMESPACE}/configmaps/{names.QUEUE_USAGE_CONFIG}"
    other = json.dumps({"gpu_s": 100.0, "as_of": clock.now()})
    lab.patch(usage_path, {"data": {"usage-b": other}})
    assert clocked.cycle() == []  # nothing waits; the ended run is kept
    kept = lab.get(usage_path)
    assert kept is not None
    ran = json.loads(kept["data"]["usage-a"])
    assert ran["as_of"] == clock.now() and 16 * 599 < ran["gpu_s"] <= 16 * 600.5, ran
    assert json.loads(kept["data"]["usage-b"]) == {"gpu_s": 100.0, "as_of": clock.now()}
    listed = {view.name: view for view in admin.queues()}  # `queue list` reads it too
    assert listed["usage-a"].usage_gpu_h == pytest.approx(ran["gpu_s"] / 3600, rel=1e-3)
    clocked.elector.release()  # the scheduler restarted: a new one, with an empty cache
    restarted = leading_scheduler(lab, "sched-restarted", clock=clock)
    try:
        clock.advance(60)
        waiting = {}
        for user, namespace, name, queue in (("alice", "team-a", "again", "usage-a"), ("bob", "team-b", "other",
                                                                                       "usage-b")):
            waiting[name] = operator_pods(lab, submit(lab, user, namespace, name, 16, kind="pytorch", queue=queue))
            time.sleep(1.1)  # submitted a second apart: by age alone, alice's would go first
        for name, namespace in (("again", "team-a"), ("other", "team-b")):
            seen_whole(lab, restarted, f"{namespace}/{name}", len(waiting[name]))
        assert [(r.gang, r.ok) for r in restarted.cycle()] == [("team-b/other", True)]
        assert restarted.cache.queue_usage(clock.now())["usage-a"] == pytest.approx(ran["gpu_s"], rel=1e-3)
    finally:
        restarted.elector.release()


def test_real_a_deleted_queues_usage_is_forgotten_and_a_queue_made_again_starts_from_none(
        lab: ControlPlane, clocked: Scheduler, clock: ManualClock) -> None:  # fmt: skip
    """As the embedded engine forgets a deleted queue's usage: the scheduler's next write of the
    kept usage leaves out the queues no longer in the queues' ConfigMap (the others kept as they
    were, brought up to now), so a queue made again under that name starts with no usage."""
    admin = engine(lab, "admin", "default")
    for queue in ("usage-gone", "usage-stays"):
        admin.create_queue(TeamQueue(queue, (("*", 16),), namespaces=("team-a",)), overwrite=True)
    usage_path = f"/api/v1/namespaces/{names.SYSTEM_NAMESPACE}/configmaps/{names.QUEUE_USAGE_CONFIG}"
    old = clock.now() - KEEP_EVERY_S - 1  # due: the scheduler brings it up to now at its next cycle
    lab.patch(usage_path, {"data": {q: json.dumps({"gpu_s": 3600.0, "as_of": old})
                                    for q in ("usage-gone", "usage-stays")}})  # fmt: skip
    admin.delete_queue("usage-gone")

    def seen_gone() -> bool:
        clocked.sync()
        names_now = {q.name for q in clocked.cache.queues}
        return "usage-stays" in names_now and "usage-gone" not in names_now

    lab.until(seen_gone, "the scheduler to see the queue go")
    assert clocked.cycle() == []
    kept = (lab.get(usage_path) or {}).get("data") or {}
    assert "usage-gone" not in kept, kept
    stays = json.loads(kept["usage-stays"])
    assert stays["as_of"] == clock.now() and 0 < stays["gpu_s"] < 3600.0, stays  # decayed to now
    admin.create_queue(TeamQueue("usage-gone", (("*", 16),), namespaces=("team-a",)))
    listed = {view.name: view for view in admin.queues()}  # `queue list` reads it
    assert listed["usage-gone"].usage_gpu_h == 0.0
    assert listed["usage-stays"].usage_gpu_h == pytest.approx(stays["gpu_s"] / 3600, rel=1e-2)


def test_real_a_spread_gang_moves_to_the_node_that_freed_held_across_a_leader_change(
        lab: ControlPlane, clocked: Scheduler, clock: ManualClock) -> None:  # fmt: skip
    """Moves on Kubernetes (``jobs/moves.py``): two gangs of 6 take six GPUs of each node, so the
    gang of 4 (VGG16 as the queue prices it, ten minutes of work) starts spread 2 + 2. Once the
    first holder's pods are gone, the cycle moves it: its pods get DisruptionTarget with the
    move's numbers and are deleted, its restart and its target are kept on its PodGroup. The
    leader changes while the pods are made again: the new leader holds the target too (a gang of
    7 submitted meanwhile, which would take those GPUs, waits), binds the pods mpi-operator makes again
    on the node that freed, all four, and clears the hold."""
    now = clock.now()
    start(lab, clocked, submit(lab, "alice", "team-a", "hold-a", 6, topology_aware=True), now)
    start(lab, clocked, submit(lab, "alice", "team-a", "hold-b", 6, topology_aware=True), now)
    job = submit(lab, "alice", "team-a", "spread", 4, model="vgg16", run_time_s=600.0, topology_aware=True)
    start(lab, clocked, job, now)

    def nodes_of(gang: str) -> dict[str, str]:
        pods = lab.request("GET", "/api/v1/namespaces/team-a/pods")["items"]
        return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in pods
                if p["metadata"]["labels"].get(names.PODGROUP_LABEL) == gang
                and "launcher" not in p["metadata"]["name"]}  # fmt: skip

    assert len(set(nodes_of("spread").values())) == 2
    [freed] = set(nodes_of("hold-a").values())
    for pod in lab.request("GET", "/api/v1/namespaces/team-a/pods")["items"]:
        if pod["metadata"]["labels"].get(names.PODGROUP_LABEL) == "hold-a":
            gone(lab, f"/api/v1/namespaces/team-a/pods/{pod['metadata']['name']}")

    def hold_a_gone() -> bool:
        clocked.sync()
        return not any(p.gang_key == "team-a/hold-a" for p in clocked.cache.pods.values())

    lab.until(hold_a_gone, "the scheduler's cache to see hold-a gone")
    clock.advance(5)
    assert clocked.cycle() == []
    assert preempted(lab, "team-a") == {"spread"}
    for pod in lab.request("GET", "/api/v1/namespaces/team-a/pods")["items"]:
        if pod["metadata"]["labels"].get(names.PODGROUP_LABEL) == "spread":
            [said] = [c["message"] for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget"]
            assert said.startswith("moves: finishes sooner by ~") and f"move to node {freed} (" in said, said
            gone(lab, f"/api/v1/namespaces/team-a/pods/{pod['metadata']['name']}")
    group = lab.get(f"{GROUPS}/namespaces/team-a/{names.PODGROUP_PLURAL}/spread")
    assert group is not None and group["metadata"]["annotations"][names.RESTARTS_ANNOTATION] == "1"
    target = json.loads(group["metadata"]["annotations"][names.MOVE_TARGET_ANNOTATION])
    assert target["nodes"] == [freed] and len(target["workers"]) == 4
    clocked.elector.release()  # the leader changes while the moved gang's pods are made again
    leader = leading_scheduler(lab, "sched-next", clock=clock)
    try:

        def spread_gone() -> bool:
            leader.sync()
            return not any(p.gang_key == "team-a/spread" for p in leader.cache.pods.values())

        lab.until(spread_gone, "the new leader's cache to see the moved gang's pods gone")
        rival = submit(lab, "alice", "team-a", "rival", 7, topology_aware=True)
        seen_whole(lab, leader, "team-a/rival", len(operator_pods(lab, rival)))
        assert leader.cycle() == []  # 4 of the freed node's 8 GPUs held: 6 free, the rival waits
        pods = operator_pods(lab, job)  # mpi-operator makes the workers again
        seen_whole(lab, leader, "team-a/spread", len(pods))
        assert [(r.gang, r.ok) for r in leader.cycle()] == [("team-a/spread", True)]
        assert set(nodes_of("spread").values()) == {freed}
        group = lab.get(f"{GROUPS}/namespaces/team-a/{names.PODGROUP_PLURAL}/spread")
        assert group is not None and names.MOVE_TARGET_ANNOTATION not in group["metadata"]["annotations"]
        # A hold left on a running gang's PodGroup (a replica whose clearing failed) holds nothing
        # and is cleared by the next cycle.
        stale = Placement("team-a/hold-b", (WorkerSlot(0, freed, (7,)),)).as_dict()
        leader.api.podgroup_annotate("team-a", "hold-b", {names.MOVE_TARGET_ANNOTATION: json.dumps(stale)})

        def stale_seen() -> bool:
            leader.sync()
            return "team-a/hold-b" in leader.cache.moving

        lab.until(stale_seen, "the leader's cache to read the stale hold")
        assert leader.cycle() == []
        group = lab.get(f"{GROUPS}/namespaces/team-a/{names.PODGROUP_PLURAL}/hold-b")
        assert group is not None and names.MOVE_TARGET_ANNOTATION not in group["metadata"]["annotations"]
    finally:
        leader.elector.release()
