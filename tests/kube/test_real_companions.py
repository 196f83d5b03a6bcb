"""Against a real v1.36 control plane (tests/kube/realserver.py): arena's --tensorboard and
--sync-mode on the kubernetes engine, submitted through the CLI by a namespace editor. The real
API server validates the pods made of the job's templates (the code sync's init container, the
volumes) and TensorBoard's Deployment and NodePort Service; the real controller manager makes
TensorBoard's pod and, once the job is deleted, its garbage collector deletes what was owned."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.test_arena_doc_lines import DOC_LINES, pasted
from kube.kubeobjs import node
from kube.realserver import ControlPlane, namespace_user_cli
from ringleader.engines.kubernetes import companions, names

NAMESPACE = "team-tb"
REPO = "https://github.com/tensorflow/benchmarks.git"
MPIJOBS = f"/apis/{names.MPIJOB_GROUP}/{names.MPIJOB_VERSION}/namespaces/{NAMESPACE}/mpijobs"


@pytest.fixture
def cli(real: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> Iterator[Callable[..., tuple[int, str]]]:  # fmt: skip
    """`ringleader CMD --engine kubernetes ...` as alice, who holds the built-in `edit` role in
    team-tb only (her kubeconfig), on a cluster with one GPU node."""
    real.namespace(NAMESPACE)
    rbac = "rbac.authorization.k8s.io"
    real.apply([{"apiVersion": f"{rbac}/v1", "kind": "RoleBinding",
                 "metadata": {"name": "alice-edit", "namespace": NAMESPACE},
                 "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": "edit"},
                 "subjects": [{"apiGroup": rbac, "kind": "User", "name": "alice"}]}])  # fmt: skip
    real.add_node(node("tb-gpu-0", mode=None))
    run = namespace_user_cli(real, "alice", NAMESPACE, tmp_path / "home", monkeypatch, capsys)
    real.until(lambda: _may_submit(real), "the edit role's rights for alice")
    yield run


def _may_submit(real: ControlPlane) -> bool:
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": "alice", "resourceAttributes": {"namespace": NAMESPACE, "verb": "create",
                                                               "group": names.MPIJOB_GROUP,
                                                               "resource": names.MPIJOB_PLURAL}}}  # fmt: skip
    return bool(real.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)["status"].get(
        "allowed"))


def _worker_pod(real: ControlPlane, job: dict[str, Any], index: int) -> dict[str, Any]:
    """A worker pod made of the MPIJob's template as mpi-operator makes it, created as alice: the
    real API server validates its init container, volumes and mounts."""
    replica = job["spec"]["mpiReplicaSpecs"]["Worker"]
    template = copy.deepcopy(replica["template"])
    labels = {**template["metadata"]["labels"], names.JOB_ROLE_LABEL: "worker", names.REPLICA_INDEX_LABEL: str(index)}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {**template["metadata"], "name": f"{job['metadata']['name']}-worker-{index}",
                        "labels": labels},
           "spec": {**template["spec"], "restartPolicy": replica["restartPolicy"]}}  # fmt: skip
    made: dict[str, Any] = real.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod, user="alice")
    return made


def _tensorboard_pods(real: ControlPlane, job: str) -> list[dict[str, Any]]:
    selector = f"{companions.TENSORBOARD_LABEL}={job}"
    items: list[dict[str, Any]] = real.request(
        "GET", f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={selector}")["items"]
    return items


def test_real_tensorboard_and_code_sync_are_made_shown_and_deleted_with_the_job(
        real: ControlPlane, cli: Callable[..., tuple[int, str]]) -> None:  # fmt: skip
    code, out = cli("submit", "mpi", "--name", "tb", "--workers", "2", "--gpus", "1", "--working-dir", "/work",
                    "-e", "GIT_SYNC_BRANCH=cnn_tf_v1.9_compatible", "--syncMode=git", f"--sync-source={REPO}",
                    "--tensorboard", "mpirun python code/benchmarks/scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.py "
                    "--train_dir=/training_logs")  # fmt: skip
    assert code == 0, out
    job = real.request("GET", f"{MPIJOBS}/tb")
    uid = job["metadata"]["uid"]
    # TensorBoard: a Deployment and a NodePort Service the job owns, the port allocated by the server
    deployment = real.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/tb-tensorboard")
    service = real.get(f"/api/v1/namespaces/{NAMESPACE}/services/tb-tensorboard")
    assert deployment is not None and service is not None
    for made in (deployment, service):
        [owner] = made["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == ("MPIJob", uid, True)
    assert service["spec"]["type"] == "NodePort"
    node_port = service["spec"]["ports"][0]["nodePort"]
    # the code sync: every pod clones the repository into /work/code before its container starts
    worker = _worker_pod(real, job, 0)
    [init] = worker["spec"]["initContainers"]
    env = {e["name"]: e.get("value") for e in init["env"]}
    assert env["GIT_SYNC_REPO"] == REPO and env["GIT_SYNC_DEST"] == "benchmarks"
    assert env["GIT_SYNC_BRANCH"] == "cnn_tf_v1.9_compatible"  # the job's -e reach it, as arena's do
    mounts = {m["mountPath"]: m["name"] for m in worker["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["/work/code"] == companions.CODE_VOLUME and mounts["/training_logs"] == companions.LOG_VOLUME
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    assert [c["name"] for c in launcher["initContainers"]] == ["init-code"]
    # the real Deployment controller makes TensorBoard's pod, beside rank 0 (the logs are on its node)
    [pod] = real.until(lambda: _tensorboard_pods(real, "tb") or None, "TensorBoard's pod")
    affinity = pod["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert affinity["labelSelector"]["matchLabels"][names.JOB_LABEL] == "tb"
    code, out = cli("get", "tb")
    assert code == 0 and "TensorBoard:" in out and f"port {node_port} of any node" in out, out
    # once its pod runs, the address of its node, as arena's `get` shows it
    real.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods/{pod['metadata']['name']}/binding",
                 {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod["metadata"]["name"]},
                  "target": {"apiVersion": "v1", "kind": "Node", "name": "tb-gpu-0"}})  # fmt: skip
    real.set_pod_status(NAMESPACE, pod["metadata"]["name"], {"phase": "Running", "hostIP": "10.0.0.7"})
    code, out = cli("get", "tb")
    assert code == 0 and f"http://10.0.0.7:{node_port}" in out, out
    for listed in (("get", "tb"), ("list",)):
        code, out = cli(*listed, "-o", "json")
        assert code == 0 and f'"TensorBoard": "http://10.0.0.7:{node_port}"' in out, (listed, out)
    # deleting the job deletes them: the real garbage collector follows the owner references
    code, out = cli("delete", "tb")
    assert code == 0, out
    real.until(lambda: real.get(f"/api/v1/namespaces/{NAMESPACE}/services/tb-tensorboard") is None,
               "the Service deleted with the job")  # fmt: skip
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    stopping = real.until(lambda: [p for p in _tensorboard_pods(real, "tb") if p["metadata"].get("deletionTimestamp")],
                          "TensorBoard's pod deleted with the job")  # fmt: skip
    for stopped in stopping:  # its kubelet stopped it (none runs here)
        real.request("DELETE", f"{pods}/{stopped['metadata']['name']}", {"gracePeriodSeconds": 0})
    real.until(lambda: real.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/tb-tensorboard") is None,
               "the Deployment deleted with the job")  # fmt: skip
    real.until(lambda: real.get(f"{MPIJOBS}/tb") is None, "the MPIJob gone once what it owns is")
    real.request("DELETE", f"{pods}/tb-worker-0", {"gracePeriodSeconds": 0})  # made here, owned by nobody


def test_real_an_rsync_job_on_a_volume_is_accepted_and_its_tensorboard_reads_the_claim(
        real: ControlPlane, cli: Callable[..., tuple[int, str]]) -> None:  # fmt: skip
    """rsync into /code (no --working-dir), --logdir on a -d volume: TensorBoard mounts the claim
    (no node of its own to be on), and the pod of the job's template is valid."""
    code, out = cli("submit", "mpi", "--name", "rs", "--workers", "1", "--gpus", "1", "-d", "logs-pvc:/data",
                    "--sync-mode", "rsync", "--sync-source", "10.0.0.5::backup/code", "--tensorboard",
                    "--logdir", "/data/run1", "--tensorboardImage", "tensorflow/tensorflow:2.15.0",
                    "mpirun python /code/train.py")  # fmt: skip
    assert code == 0, out
    job = real.request("GET", f"{MPIJOBS}/rs")
    worker = _worker_pod(real, job, 0)
    [init] = worker["spec"]["initContainers"]
    assert init["command"] == ["rsync", "-avP", "10.0.0.5::backup/code", "/code"]
    assert {"name": companions.CODE_VOLUME, "mountPath": "/code"} in worker["spec"]["containers"][0]["volumeMounts"]
    deployment = real.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/rs-tensorboard")
    assert deployment is not None
    pod = deployment["spec"]["template"]["spec"]
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "logs-pvc" and "affinity" not in pod
    assert pod["containers"][0]["image"] == "tensorflow/tensorflow:2.15.0"
    assert pod["containers"][0]["command"][:3] == ["tensorboard", "--logdir", "/data/run1"]
    assert cli("delete", "rs")[0] == 0
    real.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/rs-worker-0", {"gracePeriodSeconds": 0})


# arena's own doc lines (tests/cli/test_arena_doc_lines.py) on the kubernetes engine, where its
# --tensorboard and --sync-mode work: each plans (--dry-run: the objects shown, nothing made), or is
# refused in one line where a flag cannot mean arena's here.
REFUSED_ON_KUBERNETES = {"config-file": "error: --config-file mounts a file of this host, and pods mount volumes only"}


@pytest.mark.parametrize("doc", list(DOC_LINES))
def test_real_arenas_doc_lines_plan_on_kubernetes_and_the_server_takes_their_objects(
        real: ControlPlane, cli: Callable[..., tuple[int, str]], doc: str) -> None:  # fmt: skip
    """Each planned line's objects pass the real API server's validation and admission as alice's
    (a server-side dry run): the job's pods as its operator would make them, TensorBoard's
    Deployment and Service, the code sync's init container."""
    words = pasted(DOC_LINES[doc])
    if doc == "preempted":  # its doc's cluster has arena's PriorityClasses
        real.apply([{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "medium"},
                     "value": 100}])  # fmt: skip
    code, out = cli(*words[1:], "--dry-run", "-o", "json")
    if doc in REFUSED_ON_KUBERNETES:
        assert code == 2 and out.startswith(REFUSED_ON_KUBERNETES[doc]) and out.count("\n") == 1, out
        return
    assert code == 0, out
    plan, _ = json.JSONDecoder().raw_decode(out)  # the notes on stderr follow it
    objects = list(yaml.safe_load_all(plan["manifests"]))
    kinds = [o["kind"] for o in objects]
    assert ("Deployment" in kinds and "Service" in kinds) is ("--tensorboard" in words), kinds
    [job] = [o for o in objects if o["kind"] == "MPIJob"]
    synced = any(w.startswith(("--sync-mode", "--syncMode")) for w in words)
    for role, replica in job["spec"]["mpiReplicaSpecs"].items():
        inits = replica["template"]["spec"].get("initContainers") or []
        assert [c["name"] for c in inits] == (["init-code"] if synced else []), role
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {**replica["template"]["metadata"],
                                                                 "name": f"{job['metadata']['name']}-{role.lower()}"},
               "spec": {**replica["template"]["spec"], "restartPolicy": replica["restartPolicy"]}}  # fmt: skip
        real.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod, user="alice", query={"dryRun": "All"})
    for obj in objects:
        if obj["kind"] in ("Deployment", "Service"):
            plural = {"Deployment": "/apis/apps/v1", "Service": "/api/v1"}[obj["kind"]]
            real.request("POST", f"{plural}/namespaces/{NAMESPACE}/{obj['kind'].lower()}s", obj, user="alice",
                         query={"dryRun": "All"})  # fmt: skip
    assert real.get(f"{MPIJOBS}/{job['metadata']['name']}") is None  # nothing made
