"""ringleader's scheduler against a real v1.36 control plane (tests/kube/realserver.py), under
its own ServiceAccount's token and the install's RBAC: gangs bound whole or not at all, a failed
worker restarting its whole gang, leader failover between two replicas."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube.kubeobjs import node, pod, podgroup
from kube.realserver import ControlPlane, RequestFailed, free_port, leading_scheduler, scheduler_token
from ringleader.engines.kubernetes import names
from ringleader.engines.kubernetes.scheduler import Scheduler

pytestmark = pytest.mark.slow  # multi-process runs of seconds each: run early (tests/conftest.py)

GROUPS = f"/apis/{names.PODGROUP_GROUP}/{names.PODGROUP_VERSION}"
UUIDS = [f"GPU-{g:08x}-aaaa-bbbb-cccc-{g:012x}" for g in range(8)]


@dataclass
class Scene:
    """One test's namespace and nodes on the module's control plane; what a kubelet and the
    training operator would do to its pods, done by hand."""

    real: ControlPlane
    namespace: str
    nodes: list[str] = field(default_factory=list)

    def add_nodes(self, *names_: str) -> None:
        for name in names_:
            obj = node(name)
            obj["metadata"]["annotations"][names.GPU_UUIDS_ANNOTATION] = ",".join(UUIDS)  # the agent's
            self.real.add_node(obj)
            self.nodes.append(name)

    def pods_path(self, name: str = "") -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods" + (f"/{name}" if name else "")

    def gang(self, name: str, workers: int, gpus: int = 1, annotations: dict[str, str] | None = None,
             group: bool = True) -> None:  # fmt: skip
        if group:
            self.real.request("POST", f"{GROUPS}/namespaces/{self.namespace}/{names.PODGROUP_PLURAL}",
                              podgroup(name, workers, self.namespace))  # fmt: skip
        for i in range(workers):
            self.create_pod(f"{name}-worker-{i}", name, gpus, annotations)

    def create_pod(self, name: str, gang: str, gpus: int = 1, annotations: dict[str, str] | None = None) -> None:
        body = pod(name, gang=gang, gpus=gpus, namespace=self.namespace)
        del body["metadata"]["uid"], body["status"]  # the API server's to set
        body["metadata"]["annotations"] = dict(annotations or {})
        self.real.request("POST", self.pods_path(), body)

    def get(self, name: str) -> dict[str, Any]:
        found = self.real.get(self.pods_path(name))
        assert found is not None, f"pod {name} is gone"
        return found

    def run(self, name: str) -> None:
        """kubelet: the pod's container started."""
        self.real.set_pod_status(self.namespace, name, {"phase": "Running", "containerStatuses": [
            {"name": "main", "ready": True, "restartCount": 0, "image": "busybox", "imageID": "", "started": True,
             "state": {"running": {"startedAt": "2026-12-06T10:00:00Z"}}, "lastState": {}}]})  # fmt: skip

    def fail(self, name: str, message: str, exit_code: int = 1, reason: str = "") -> None:
        """kubelet: the container exited non-zero (restartPolicy Never): the pod is Failed, the
        end of its log kept in the container's terminated state (and the pod's ``reason`` where
        the node failed under it: NodeLost)."""
        status = {"phase": "Failed", "containerStatuses": [
            {"name": "main", "ready": False, "restartCount": 0, "image": "busybox", "imageID": "", "started": False,
             "state": {"terminated": {"exitCode": exit_code, "reason": "Error", "message": message,
                                      "startedAt": "2026-12-06T10:00:00Z", "finishedAt": "2026-12-06T10:05:00Z"}},
             "lastState": {}}]}  # fmt: skip
        if reason:
            status["reason"] = reason
        self.real.set_pod_status(self.namespace, name, status)

    def finish_deletion(self, name: str) -> None:
        """kubelet: the pod's containers stopped, the pod goes (a delete with grace 0)."""
        try:
            self.real.request("DELETE", self.pods_path(name), {"gracePeriodSeconds": 0})
        except RequestFailed as exc:
            if exc.status != 404:
                raise

    def events(self, reason: str) -> list[str]:
        items = self.real.request("GET", f"/api/v1/namespaces/{self.namespace}/events")["items"]
        return [e["message"] for e in items if e["reason"] == reason]

    def group(self, name: str) -> dict[str, Any]:
        found = self.real.get(f"{GROUPS}/namespaces/{self.namespace}/{names.PODGROUP_PLURAL}/{name}")
        assert found is not None
        return found

    def clean(self) -> None:
        """Everything this test made goes: Jobs first (their pods orphaned, so none is made
        again), then every pod at once, as their kubelet would finish them, then the nodes."""
        jobs = f"/apis/batch/v1/namespaces/{self.namespace}/jobs"
        for item in self.real.request("GET", jobs)["items"]:
            self.real.request("DELETE", f"{jobs}/{item['metadata']['name']}", {"propagationPolicy": "Orphan"})
        for item in self.real.request("GET", self.pods_path())["items"]:
            self.finish_deletion(item["metadata"]["name"])
        for name in self.nodes:
            self.real.request("DELETE", f"/api/v1/nodes/{name}")


@pytest.fixture
def scene(real: ControlPlane, request: pytest.FixtureRequest) -> Iterator[Scene]:
    namespace = request.node.name.removeprefix("test_real_").replace("_", "-")[:50].strip("-")
    real.namespace(namespace)
    made = Scene(real, namespace)
    yield made
    made.clean()




@pytest.fixture
def sched(real: ControlPlane) -> Iterator[Scheduler]:
    s = leading_scheduler(real, "sched-a")
    yield s
    s.elector.release()


def test_real_a_gang_binds_whole_on_one_nvlink_quad(scene: Scene, sched: Scheduler) -> None:
    """The reference gang, 4 workers of 1 GPU on two DGX-1V nodes: one Binding per worker, all
    on one node, on one NVLink quad; the GPU ids and UUIDs on each pod, written by the API server
    from the Binding with the node; the PodGroup Scheduled."""
    scene.add_nodes("quad-0", "quad-1")
    scene.gang("vgg", 4)
    sched.sync()
    assert [(r.gang, r.ok) for r in sched.cycle()] == [(f"{scene.namespace}/vgg", True)]
    bound = [scene.get(f"vgg-worker-{i}") for i in range(4)]
    assert len({p["spec"]["nodeName"] for p in bound}) == 1
    ids = sorted(int(p["metadata"]["annotations"][names.GPU_IDS_ANNOTATION]) for p in bound)
    assert ids in ([0, 1, 2, 3], [4, 5, 6, 7])
    for p in bound:
        notes = p["metadata"]["annotations"]
        assert notes[names.GPU_DEVICES_ANNOTATION] == UUIDS[int(notes[names.GPU_IDS_ANNOTATION])]
        assert notes[names.GPU_IDS_UID_ANNOTATION] == p["metadata"]["uid"]
        assert any(c["type"] == "PodScheduled" and c["status"] == "True" for c in p["status"]["conditions"])
    assert scene.group("vgg")["status"]["phase"] == "Scheduled"


def test_real_a_gang_is_bound_all_or_nothing(scene: Scene, sched: Scheduler) -> None:
    """A gang larger than the free GPUs binds no pod and says why on each; a gang short of
    members waits for them; a gang one of whose Bindings the API server refuses (the pod was
    replaced: its uid precondition fails) is undone, its bound members deleted."""
    scene.add_nodes("aon-0")
    scene.gang("big", 12)
    scene.real.request("POST", f"{GROUPS}/namespaces/{scene.namespace}/{names.PODGROUP_PLURAL}",
                       podgroup("short", 4, scene.namespace))  # fmt: skip
    for i in range(3):
        scene.create_pod(f"short-worker-{i}", "short")
    sched.sync()
    assert sched.cycle() == []
    assert not any(scene.get(f"big-worker-{i}")["spec"].get("nodeName") for i in range(12))
    condition = scene.get("big-worker-5")["status"]["conditions"]
    assert [(c["type"], c["status"], c["reason"]) for c in condition] == [("PodScheduled", "False", "Unschedulable")]
    assert "12 worker(s) x 1 GPU(s) = 12 GPUs" in condition[0]["message"]
    assert not any(scene.get(f"short-worker-{i}")["spec"].get("nodeName") for i in range(3))
    # The fourth member comes: the gang of 4 is bound whole; the big one still waits.
    scene.create_pod("short-worker-3", "short")
    sched.sync()
    assert [(r.gang, r.ok) for r in sched.cycle()] == [(f"{scene.namespace}/short", True)]
    assert {scene.get(f"short-worker-{i}")["spec"].get("nodeName") for i in range(4)} == {"aon-0"}
    # A member replaced after the scheduler saw it: its Binding is refused, the gang undone.
    scene.gang("redo", 4)
    sched.sync()
    scene.finish_deletion("redo-worker-2")
    scene.create_pod("redo-worker-2", "redo")
    [result] = sched.cycle()
    assert not result.ok and "redo-worker-2" in result.error
    for i in (0, 1):  # bound before the refusal: deleted, to be made again by their controller
        assert scene.get(f"redo-worker-{i}")["metadata"].get("deletionTimestamp")
    assert not scene.get("redo-worker-2")["spec"].get("nodeName")
    assert not scene.get("redo-worker-3")["spec"].get("nodeName")


NCCL_LOST = "node:12:34 [0] NCCL WARN NET/Socket : Connection closed by remote peer"


def test_real_a_failed_worker_restarts_its_gang_and_a_node_blamed_twice_is_cordoned(
        scene: Scene, sched: Scheduler) -> None:  # fmt: skip
    """--max-restarts on a real server: a worker's kubelet writes it Failed (exit 1, an NCCL
    connection error at the end of its log); the scheduler blames the node, counts the restart on
    the PodGroup, says why in an Event and deletes the whole gang; the training operator's new
    pods are bound with the count. The gang's own log is its user's to write: a second failure
    there cordons the node only on what the node says itself (the pod's status NodeLost), and
    the gang's next run goes to the other node."""
    scene.add_nodes("blame-0", "blame-1")
    restarts = {names.MAX_RESTARTS_ANNOTATION: "3"}
    scene.gang("train", 4, annotations=restarts)
    sched.sync()
    assert [r.ok for r in sched.cycle()] == [True]
    [first] = {scene.get(f"train-worker-{i}")["spec"]["nodeName"] for i in range(4)}
    [other] = {"blame-0", "blame-1"} - {first}
    for run in (1, 2):
        for i in range(4):
            scene.run(f"train-worker-{i}")
        sched.sync()
        scene.fail("train-worker-1", NCCL_LOST, reason="NodeLost" if run == 2 else "")
        sched.sync()
        assert sched.cycle() == []  # the gang is being deleted: nothing to bind yet
        assert scene.group("train")["metadata"]["annotations"][names.RESTARTS_ANNOTATION] == str(run)
        said = scene.events("Restarting")
        why = f"an NCCL connection error on {first}" if run == 1 else (
            f"node {first} failed under it: the pod's status says NodeLost")  # fmt: skip
        assert len(said) == run and any(m.startswith(f"train-worker-1 failed: {why}")
                                        and f"restart {run} of 3 (--max-restarts)" in m for m in said), said
        for i in (0, 2, 3):  # deleted with their grace: they stay until their kubelet stops them
            assert scene.get(f"train-worker-{i}")["metadata"].get("deletionTimestamp")
        for i in range(4):
            scene.finish_deletion(f"train-worker-{i}")
            scene.create_pod(f"train-worker-{i}", "train", annotations=restarts)  # the operator, again
        sched.sync()
        assert [r.ok for r in sched.cycle()] == [True]
        bound = [scene.get(f"train-worker-{i}") for i in range(4)]
        assert {p["metadata"]["annotations"][names.RESTARTS_ANNOTATION] for p in bound} == {str(run)}
        placed = {p["spec"]["nodeName"] for p in bound}
        if run == 1:
            blamed = scene.real.get(f"/api/v1/nodes/{first}")
            assert blamed is not None and not blamed["spec"].get("unschedulable")
            assert list(json.loads(blamed["metadata"]["annotations"][names.FAULTS_ANNOTATION])) == [
                f"{scene.namespace}/train#0"]  # fmt: skip
            assert placed == {first}
    cordoned = scene.real.get(f"/api/v1/nodes/{first}")
    assert cordoned is not None and cordoned["spec"]["unschedulable"] is True
    assert cordoned["metadata"]["annotations"][names.CORDON_REASON_ANNOTATION] == (
        f"blamed for 2 failures, the last of gang {scene.namespace}/train: node {first} failed under it: the pod's "
        "status says NodeLost")  # fmt: skip
    assert placed == {other}


def test_real_a_restarted_gang_waits_until_its_last_runs_pods_are_gone(scene: Scene, sched: Scheduler) -> None:
    """Fencing: a gang whose node failed under it restarts only once every pod of its last run is
    gone. A pod deleted on an unreachable node stays Terminating (no kubelet confirms its
    containers stopped), and a new run's pods, named afresh as JobSet's Jobs name them, are not
    bound beside it; once it is gone (its kubelet back, or an administrator's force delete or
    out-of-service taint) they are."""
    scene.add_nodes("fence-0", "fence-1")
    restarts = {names.MAX_RESTARTS_ANNOTATION: "1"}
    scene.gang("fence", 2, annotations=restarts)
    sched.sync()
    assert [r.ok for r in sched.cycle()] == [True]
    for i in range(2):
        scene.run(f"fence-worker-{i}")
    sched.sync()
    scene.fail("fence-worker-1", "its node stopped answering", reason="NodeLost")
    sched.sync()
    assert sched.cycle() == []
    assert scene.get("fence-worker-0")["metadata"].get("deletionTimestamp")  # Terminating: it may still run
    for i in range(2):
        scene.create_pod(f"fence-run1-worker-{i}", "fence", annotations=restarts)  # the controller's new run
    for _ in range(2):  # however often the scheduler looks, the new run waits
        sched.sync()
        assert sched.cycle() == []
        assert not any(scene.get(f"fence-run1-worker-{i}")["spec"].get("nodeName") for i in range(2))
    for i in range(2):
        scene.finish_deletion(f"fence-worker-{i}")
    sched.sync()
    assert [r.ok for r in sched.cycle()] == [True]
    assert all(scene.get(f"fence-run1-worker-{i}")["spec"].get("nodeName") for i in range(2))


def test_real_a_standby_replica_leads_when_the_leader_stops(scene: Scene, real: ControlPlane,
                                                           tmp_path: Path) -> None:  # fmt: skip
    """Two replicas of `ringleader kube scheduler` under the scheduler's ServiceAccount: one
    leads; stopped (SIGTERM, as a pod is), it gives the Lease up and the standby leads and binds
    the next gang."""
    kubeconfig = real.kubeconfig("ringleader-scheduler", token=scheduler_token(real))
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "RINGLEADER_HOME": str(tmp_path)}
    replicas: dict[str, subprocess.Popen[bytes]] = {}
    logs = {}
    try:
        for identity in ("replica-a", "replica-b"):
            logs[identity] = tmp_path / f"{identity}.log"
            with logs[identity].open("w") as err:
                replicas[identity] = subprocess.Popen(
                    [sys.executable, "-m", "ringleader.cli.main", "kube", "scheduler", "--identity", identity,
                     "--metrics-port", str(free_port())], stdout=subprocess.DEVNULL, stderr=err, env=env)  # fmt: skip
            if identity == "replica-a":
                real.until(lambda: _holder(real) == "replica-a", "replica-a leading")
        scene.add_nodes("lead-0")
        scene.gang("first", 2)
        real.until(lambda: all(scene.get(f"first-worker-{i}")["spec"].get("nodeName") for i in range(2)),
                   f"the first gang bound by the leader: {logs['replica-a'].read_text()[-2000:]}", 90)  # fmt: skip
        replicas["replica-a"].send_signal(signal.SIGTERM)
        assert replicas["replica-a"].wait(timeout=60) == 0, logs["replica-a"].read_text()[-3000:]
        real.until(lambda: _holder(real) == "replica-b", "replica-b leading")
        scene.gang("second", 2)
        real.until(lambda: all(scene.get(f"second-worker-{i}")["spec"].get("nodeName") for i in range(2)),
                   f"the second gang bound by the standby: {logs['replica-b'].read_text()[-2000:]}", 90)  # fmt: skip
    finally:
        for proc in replicas.values():
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _holder(real: ControlPlane) -> str | None:
    lease = real.get(f"/apis/coordination.k8s.io/v1/namespaces/{names.SYSTEM_NAMESPACE}/leases/{names.LEASE_NAME}")
    return None if lease is None else (lease.get("spec") or {}).get("holderIdentity")


# -- training kinds whose pods the real Job controller makes -------------------------------------------
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "kubernetes"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOBSET = "jobset.sigs.k8s.io"


def jobset_controller(real: ControlPlane, namespace: str, jobset: dict[str, Any]) -> None:
    """What the JobSet controller does with a JobSet: one Indexed Job `<jobset>-<replicatedJob>-<i>`
    per replica, owned by it, its pods labelled with the JobSet's names and indexes; the real Job
    controller then makes the pods."""
    created = real.request("POST", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets", jobset)
    name = jobset["metadata"]["name"]
    global_index = 0
    for replicated in jobset["spec"]["replicatedJobs"]:
        for index in range(replicated.get("replicas", 1)):
            labels = {f"{JOBSET}/jobset-name": name, f"{JOBSET}/replicatedjob-name": replicated["name"],
                      f"{JOBSET}/job-index": str(index), f"{JOBSET}/job-global-index": str(global_index)}  # fmt: skip
            spec = copy.deepcopy(replicated["template"]["spec"])
            spec["template"]["spec"].setdefault("restartPolicy", "OnFailure")  # the JobSet webhook's default
            meta = spec["template"].setdefault("metadata", {})
            meta["labels"] = {**(meta.get("labels") or {}), **labels}
            real.request("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", {
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": f"{name}-{replicated['name']}-{index}", "labels": labels, "ownerReferences": [
                    {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": name,
                     "uid": created["metadata"]["uid"], "controller": True}]},
                "spec": spec})  # fmt: skip
            global_index += 1


def job_pods(scene: Scene, count: int) -> list[dict[str, Any]]:
    """The Job controller's pods, once it made ``count``."""
    return list(scene.real.until(lambda: (lambda items: items if len(items) == count else None)(
        scene.real.request("GET", scene.pods_path())["items"]), f"{count} pods made by the Job controller"))


def test_real_a_jobsets_pods_made_by_the_job_controller_bind_whole_in_completion_order(
        scene: Scene, sched: Scheduler) -> None:  # fmt: skip
    """The JobSet example with 4 one-GPU ranks: the pods the real Job controller names
    (`<job>-<index>-<random>`) are bound whole, each pod's worker index its completion index."""
    scene.add_nodes("js-0", "js-1")
    objects = {doc["kind"]: doc for doc in yaml.safe_load_all((EXAMPLES / "jobset.yaml").read_text())}
    jobset = copy.deepcopy(objects["JobSet"])
    job = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    job.update(parallelism=4, completions=4)
    job["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "2", "memory": "8Gi"},
                                                             "limits": {names.GPU_RESOURCE: 1}}  # fmt: skip
    group = copy.deepcopy(objects["PodGroup"])
    group["spec"]["minMember"] = 4
    scene.real.request("POST", f"{GROUPS}/namespaces/{scene.namespace}/{names.PODGROUP_PLURAL}", group)
    jobset_controller(scene.real, scene.namespace, jobset)
    pods = job_pods(scene, 4)
    sched.sync()
    assert [(r.gang, r.ok) for r in sched.cycle()] == [(f"{scene.namespace}/llama-ft", True)]
    for made in pods:
        bound = scene.get(made["metadata"]["name"])
        assert bound["spec"]["nodeName"] in ("js-0", "js-1")
        assert bound["metadata"]["annotations"][names.WORKER_INDEX_ANNOTATION] == \
            made["metadata"]["labels"][COMPLETION_INDEX]  # fmt: skip
    assert len({scene.get(p["metadata"]["name"])["spec"]["nodeName"] for p in pods}) == 1  # 4 GPUs: one node


def test_real_a_trainjobs_pods_through_its_runtime_bind_whole(scene: Scene, sched: Scheduler) -> None:
    """Kubeflow Trainer v2's TrainJob (checked by the official CRDs as created): its runtime's
    JobSet and PodGroup, the Job controller's pods, bound whole on one node's NVLink quads."""
    from kube.kubeobjs import trainjob_objects

    scene.add_nodes("tj-0", "tj-1")
    objects = {doc["kind"]: doc for doc in yaml.safe_load_all((EXAMPLES / "trainjob.yaml").read_text())}
    runtime, trainjob = objects["ClusterTrainingRuntime"], objects["TrainJob"]
    scene.real.apply([runtime])
    scene.real.request("POST", f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{scene.namespace}/trainjobs",
                       trainjob)  # fmt: skip
    jobset, group = trainjob_objects(runtime, trainjob)
    group["metadata"]["namespace"] = scene.namespace
    scene.real.request("POST", f"{GROUPS}/namespaces/{scene.namespace}/{names.PODGROUP_PLURAL}", group)
    jobset_controller(scene.real, scene.namespace, jobset)
    pods = job_pods(scene, group["spec"]["minMember"])
    sched.sync()
    assert [r.ok for r in sched.cycle()] == [True]
    placed = [scene.get(p["metadata"]["name"]) for p in pods]
    assert len({p["spec"]["nodeName"] for p in placed}) == 1
    for p in placed:
        ids = {int(i) for i in p["metadata"]["annotations"][names.GPU_IDS_ANNOTATION].split(",")}
        assert ids <= {0, 1, 2, 3} or ids <= {4, 5, 6, 7}
