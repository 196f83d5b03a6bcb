"""Contract tests: every object ringleader writes is valid for the API server that receives it.

MPIJob and PodGroup against the official CRDs' openAPIV3Schema (../shared/reference/kubernetes);
built-in kinds with kubernetes-validate for Kubernetes 1.30, strict (unknown fields refused).
Objects the scheduler sends are taken from the requests the fake API server received.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube.fakeapi import FakeApiServer
from kube.kubeobjs import node, pod, podgroup
from ringleader.engines.kubernetes import manifests, names
from ringleader.engines.kubernetes.client import Api, load_client
from ringleader.engines.kubernetes.scheduler import Scheduler
from ringleader.jobs.spec import JobSpec

jsonschema = pytest.importorskip("jsonschema")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

K8S_VERSION = "1.30"
CRDS = Path(__file__).resolve().parents[3] / "shared" / "reference" / "kubernetes"

SPEC = JobSpec(
    name="tensorflow-topo-4-vgg16", workers=4, gpus_per_worker=1, topology_aware=True,
    command=["mpirun", "--allow-run-as-root", "-np", "4", "-bind-to", "none", "-map-by", "slot",
             "python", "tf_cnn_benchmarks.py", "--model=vgg16"],
    env={"NCCL_DEBUG": "INFO"}, image="tensorflow-benchmark:tf2.3.0-py3.7-cuda10.1", model="vgg16",
)  # fmt: skip


def crd_schema(filename: str, version: str) -> dict[str, Any]:
    path = CRDS / filename
    if not path.exists():
        pytest.skip(f"official CRD not present at {path} (checkout without ../shared)")
    crd = yaml.safe_load(path.read_text())
    served = {v["name"]: v for v in crd["spec"]["versions"]}
    return served[version]["schema"]["openAPIV3Schema"]


def validate_crd(obj: dict[str, Any], filename: str, version: str) -> None:
    schema = crd_schema(filename, version)
    jsonschema.validate(obj, schema)


def validate_builtin(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_contract_mpijob_matches_official_crd() -> None:
    job = manifests.mpijob(SPEC, "default")
    validate_crd(job, "kubeflow.org_mpijobs.yaml", "v2beta1")
    # A plain program is wrapped in mpirun, and still valid.
    plain = manifests.mpijob(JobSpec("plain", 2, 2, ["python", "train.py"]), "team-a")
    validate_crd(plain, "kubeflow.org_mpijobs.yaml", "v2beta1")
    assert plain["spec"]["slotsPerWorker"] == 2


def test_contract_crd_schema_rejects_a_broken_mpijob() -> None:
    """The check can fail: a replica count of the wrong type is refused by the same schema."""
    job = manifests.mpijob(SPEC, "default")
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = "four"
    with pytest.raises(jsonschema.ValidationError):
        validate_crd(job, "kubeflow.org_mpijobs.yaml", "v2beta1")


def test_contract_podgroup_matches_official_crd() -> None:
    group = manifests.podgroup(SPEC, "default", owner_uid="0b9f1c3e-0000-4000-8000-000000000001")
    validate_crd(group, "scheduling.x-k8s.io_podgroups.yaml", "v1alpha1")
    assert group["spec"]["minMember"] == 5  # 4 workers and the launcher
    broken = copy.deepcopy(group)
    broken["spec"]["minMember"] = 0
    with pytest.raises(jsonschema.ValidationError):
        validate_crd(broken, "scheduling.x-k8s.io_podgroups.yaml", "v1alpha1")


def test_contract_mpijob_pod_templates_are_valid_pods() -> None:
    job = manifests.mpijob(SPEC, "default")
    for role, replica in job["spec"]["mpiReplicaSpecs"].items():
        template = replica["template"]
        validate_builtin({"apiVersion": "v1", "kind": "Pod",
                          "metadata": {"name": f"x-{role.lower()}", **template["metadata"]}, "spec": template["spec"]})


def test_contract_install_manifests_are_valid() -> None:
    objects = manifests.install(image="registry.example/ringleader:0.1.0")
    kinds = [o["kind"] for o in objects]
    for kind in ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                 "ConfigMap", "Deployment", "DaemonSet"):  # fmt: skip
        assert kind in kinds
    for obj in objects:
        validate_builtin(obj)
    # The multi-document text round-trips to the same objects.
    assert list(yaml.safe_load_all(manifests.dump_all(objects))) == objects


def test_contract_builtin_validation_can_fail() -> None:
    bad = manifests.install()[-1]
    bad["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = 3
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_builtin(bad)


def test_contract_objects_the_scheduler_sends_are_valid(fake: FakeApiServer) -> None:
    fake.put("nodes", node("gpu-0"))
    fake.put("podgroups", podgroup("vgg", 2))
    originals = {}
    for i in range(2):
        originals[f"vgg-worker-{i}"] = copy.deepcopy(fake.put("pods", pod(f"vgg-worker-{i}", gang="vgg")))
    fake.put("podgroups", podgroup("big", 20))
    for i in range(20):
        fake.put("pods", pod(f"big-worker-{i}", gang="big"))
    s = Scheduler(Api(load_client(host=fake.url)), "sched-a")
    s.sync()
    assert s.elector.try_acquire_or_renew()
    s.cycle()
    sent = [r for r in fake.requests if r.method in ("POST", "PUT", "PATCH")]
    kinds = set()
    for r in sent:
        if r.path.endswith("/binding"):
            validate_builtin(r.body)
            kinds.add("Binding")
        elif "/events" in r.path or "/leases" in r.path:
            validate_builtin(r.body)
            kinds.add(r.body["kind"])
        elif "/pods/" in r.path and r.path.endswith("/status"):
            kinds.add("Pod status")  # PodScheduled=False on the waiting gang's pods, and the pod stays valid
            waiting = fake.get("pods", r.path.split("/pods/")[1].split("/")[0])
            assert r.body["status"]["conditions"][0]["reason"] == "Unschedulable"
            validate_builtin({**waiting, "metadata": {"name": waiting["metadata"]["name"]}})
        elif "/pods/" in r.path and r.method == "PATCH":
            kinds.add("Pod patch")  # the GPU ids travel on the Binding: the scheduler patches no pod
    assert kinds == {"Binding", "Event", "Lease", "Pod status"}
    for name, original in originals.items():  # each bound pod as the API server leaves it, still valid
        bound = copy.deepcopy(fake.get("pods", name))
        bound["metadata"] = {k: v for k, v in bound["metadata"].items() if k != "resourceVersion"}
        assert bound["metadata"]["annotations"][names.GPU_IDS_UID_ANNOTATION] == original["metadata"]["uid"]
        validate_builtin(bound)


def test_contract_secret_looking_env_goes_into_a_secret_the_pods_reference() -> None:
    spec = JobSpec("tuned", 2, 1, ["python", "train.py"],
                   env={"HF_TOKEN": "hf_abc123", "DB_PASSWORD": "pw-42", "AWS_SECRET_ACCESS_KEY": "s3cr3t",
                        "BATCH_SIZE": "32"})  # fmt: skip
    job = manifests.mpijob(spec, "team-a")
    validate_crd(job, "kubeflow.org_mpijobs.yaml", "v2beta1")
    text = yaml.safe_dump(job)
    assert "hf_abc123" not in text and "pw-42" not in text and "s3cr3t" not in text
    for replica in job["spec"]["mpiReplicaSpecs"].values():
        env = {e["name"]: e for e in replica["template"]["spec"]["containers"][0]["env"]}
        assert env["BATCH_SIZE"] == {"name": "BATCH_SIZE", "value": "32"}
        for name in ("HF_TOKEN", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY"):
            assert env[name] == {"name": name, "valueFrom": {"secretKeyRef": {"name": "tuned-env", "key": name}}}
        template = replica["template"]
        validate_builtin({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", **template["metadata"]},
                          "spec": template["spec"]})  # fmt: skip
    secret = manifests.env_secret(spec, "team-a", owner_uid="0b9f1c3e-0000-4000-8000-000000000001")
    assert secret is not None
    validate_builtin(secret)
    assert secret["stringData"] == {"HF_TOKEN": "hf_abc123", "DB_PASSWORD": "pw-42", "AWS_SECRET_ACCESS_KEY": "s3cr3t"}
    assert secret["metadata"]["ownerReferences"][0]["kind"] == "MPIJob"
    assert manifests.env_secret(JobSpec("plain", 1, 0, ["true"], env={"N": "1"}), "team-a") is None
