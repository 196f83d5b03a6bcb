"""Contract tests: every object ringleader writes is valid for the API server that receives it.

MPIJob and PodGroup against the official CRDs' openAPIV3Schema (../shared/reference/kubernetes);
built-in kinds with kubernetes-validate, strict (unknown fields refused), for the oldest and newest
Kubernetes each delivery path supports (env: 1.30 and 1.37; dra: 1.34 and 1.37).
Objects the scheduler sends are taken from the requests the fake API server received.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube.fakeapi import FakeApiServer
from kube.kubeobjs import node, pod, podgroup, template_pods
from ringleader.engines.kubernetes import manifests, names
from ringleader.engines.kubernetes.client import Api, load_client
from ringleader.engines.kubernetes.delivery import (
    Delivery,
    claim_allocation,
    claim_template,
    node_devices,
    pin_patch,
    ungate_patch,
)
from ringleader.engines.kubernetes.scheduler import Scheduler
from ringleader.errors import UsageError
from ringleader.jobs.spec import ContainerOptions, JobSpec, KubeOptions
from ringleader.scheduler import Workload

jsonschema = pytest.importorskip("jsonschema")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

K8S_VERSIONS = ("1.30", "1.37")  # the oldest and newest the env path supports (see docs/kubernetes.md)
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
    return _crd_schema(path, version)


@functools.lru_cache(maxsize=8)
def _crd_schema(path: Path, version: str) -> dict[str, Any]:
    crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    served = {v["name"]: v for v in crd["spec"]["versions"]}
    return served[version]["schema"]["openAPIV3Schema"]


def validate_crd(obj: dict[str, Any], filename: str, version: str) -> None:
    schema = crd_schema(filename, version)
    jsonschema.validate(obj, schema)


def validate_builtin(obj: dict[str, Any]) -> None:
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(obj, version, strict=True)


def test_contract_mpijob_matches_official_crd() -> None:
    job = manifests.mpijob(SPEC, "default")
    validate_crd(job, "kubeflow.org_mpijobs.yaml", "v2beta1")
    # A plain program is wrapped in mpirun, and still valid.
    plain = manifests.mpijob(JobSpec("plain", 2, 2, ["python", "train.py"]), "team-a")
    validate_crd(plain, "kubeflow.org_mpijobs.yaml", "v2beta1")
    # one rank per pod: -np 2 over mpi-operator's hostfile puts one rank on each worker pod
    assert plain["spec"]["slotsPerWorker"] == 1 and plain["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2


def test_contract_crd_schema_rejects_a_broken_mpijob() -> None:
    """The check can fail: a replica count of the wrong type is refused by the same schema."""
    job = manifests.mpijob(SPEC, "default")
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = "four"
    with pytest.raises(jsonschema.ValidationError):
        validate_crd(job, "kubeflow.org_mpijobs.yaml", "v2beta1")


def test_contract_podgroup_matches_official_crd() -> None:
    group = manifests.podgroup(SPEC, "default", owner_uid="0b9f1c3e-0000-4000-8000-000000000001")
    validate_crd(group, "scheduling.x-k8s.io_podgroups.yaml", "v1alpha1")
    assert group["spec"]["minMember"] == 4  # the workers: the launcher is created once they are Ready
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
    bad = next(o for o in manifests.install() if o["kind"] == "DaemonSet")
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


# -- GPU delivery: both paths' objects, for the oldest and newest Kubernetes each supports ---------------

ENV_VERSIONS = ("1.30", "1.37")  # ValidatingAdmissionPolicy v1 and bound-token node names: 1.30
DRA_VERSIONS = ("1.34", "1.37")  # resource.k8s.io/v1: 1.34


@pytest.mark.parametrize(("delivery", "versions"), [
    (Delivery(), ENV_VERSIONS), (Delivery("env", None), ENV_VERSIONS), (Delivery("dra"), DRA_VERSIONS)])
def test_contract_install_validates_for_the_versions_it_claims(delivery: Delivery, versions: tuple[str, ...]) -> None:
    objects = manifests.install(image="registry.example/ringleader:0.1.0", delivery=delivery)
    for version in versions:
        for obj in objects:
            kubernetes_validate.validate(obj, version, strict=True)
    kinds = [o["kind"] for o in objects]
    agent = next(o for o in objects if o["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    assert agent.get("runtimeClassName") == delivery.runtime_class
    # NVIDIA_* guarded whatever the delivery, the scheduler's pod patches narrowed to pins (which
    # only DRA makes) and its node patches to cordons, the agent to its own node, the PodGroups'
    # counters the scheduler's: the same five policies in either install
    assert kinds.count("ValidatingAdmissionPolicy") == 5
    config = next(o for o in objects if o["metadata"]["name"] == names.CLUSTER_CONFIG and o["kind"] == "ConfigMap")
    assert Delivery.parse(config["data"]["gpuDelivery"], config["data"]["runtimeClass"]) == delivery
    # admissionregistration.k8s.io/v1 policies exist from 1.30 on: 1.29 has no such kind
    policy = next(o for o in objects if o["kind"] == "ValidatingAdmissionPolicy")
    with pytest.raises(kubernetes_validate.utils.SchemaNotFoundError):
        kubernetes_validate.validate(policy, "1.29", strict=True)


def test_contract_env_workers_name_the_runtime_class_and_take_ids_from_the_binding() -> None:
    pods = template_pods(manifests.mpijob(SPEC, "team-a", delivery=Delivery("env", "nvidia-cdi")))
    worker, launcher = pods["Worker"]["spec"], pods["Launcher"]["spec"]
    assert worker["runtimeClassName"] == "nvidia-cdi" and "runtimeClassName" not in launcher
    env = {e["name"]: e for e in worker["containers"][0]["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"]["valueFrom"]["fieldRef"]["fieldPath"] == manifests.GPU_IDS_FIELD
    assert names.GPU_DEVICES_ANNOTATION in manifests.GPU_IDS_FIELD  # UUIDs where published, else ids
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in launcher["containers"][0]["env"]
    # not BestEffort: requests by default, so the scheduler's room check counts them
    assert worker["containers"][0]["resources"]["requests"] == manifests.DEFAULT_WORKER_REQUESTS
    plain = template_pods(manifests.mpijob(SPEC, "team-a", delivery=Delivery("env", None)))["Worker"]["spec"]
    assert "runtimeClassName" not in plain
    cpu = template_pods(manifests.mpijob(JobSpec("cpu", 2, 0, ["true"]), "team-a"))["Worker"]["spec"]
    assert "runtimeClassName" not in cpu and manifests.NO_GPU_ENV in cpu["containers"][0]["env"]


def test_contract_dra_objects_match_resource_k8s_io_v1() -> None:
    job = manifests.mpijob(SPEC, "team-a", delivery=Delivery("dra"), per_pod=2)
    validate_crd(job, "kubeflow.org_mpijobs.yaml", "v2beta1")
    pods = template_pods(job)
    worker = pods["Worker"]["spec"]
    assert worker["schedulingGates"] == [{"name": names.GANG_GATE}] and worker["schedulerName"] == "default-scheduler"
    assert "runtimeClassName" not in worker
    assert not any(e["name"].startswith("NVIDIA_") for e in worker["containers"][0]["env"])  # CDI, not env
    assert worker["containers"][0]["resources"]["claims"] == [{"name": names.DRA_REQUEST}]
    assert names.PODGROUP_LABEL not in pods["Launcher"]["metadata"]["labels"]  # kube-scheduler places it
    template = claim_template(manifests.claim_template_name(SPEC), "team-a", 2, SPEC.name,
                              manifests.owner_reference(SPEC, "0b9f1c3e-0000-4000-8000-000000000001"))  # fmt: skip
    assert worker["resourceClaims"][0]["resourceClaimTemplateName"] == template["metadata"]["name"]
    slice_ = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "gpu-0-gpu.nvidia.com"},
              "spec": {"driver": names.DRA_DRIVER, "nodeName": "gpu-0", "pool": {"name": "gpu-0", "generation": 1,
                       "resourceSliceCount": 1},
                       "devices": [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"},
                                    "uuid": {"string": f"GPU-{i}aaa"}, "productName": {"string": "NVIDIA H100"}}}
                                   for i in range(4)]}}  # fmt: skip
    devices = [d for d in node_devices([slice_], "gpu-0") if d.uuid in ("GPU-2aaa", "GPU-3aaa")]
    assert [d.name for d in devices] == ["gpu-2", "gpu-3"] and node_devices([slice_], "gpu-1") == []
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "x-worker-0-gpus-k2x9z", "namespace": "team-a"},
             "spec": template["spec"]["spec"], "status": claim_allocation("gpu-0", devices)}  # fmt: skip
    for version in DRA_VERSIONS:
        for obj in (template, slice_, claim, pods["Worker"], pods["Launcher"]):
            kubernetes_validate.validate(obj, version, strict=True)
    pinned = copy.deepcopy(pods["Worker"])
    pin = pin_patch("gpu-0", {names.GPU_IDS_ANNOTATION: "2,3"})
    pinned["metadata"]["annotations"] = pin["metadata"]["annotations"]
    pinned["spec"]["affinity"] = pin["spec"]["affinity"]
    kubernetes_validate.validate(pinned, DRA_VERSIONS[0], strict=True)
    assert ungate_patch() == {"spec": {"schedulingGates": [{"$patch": "delete", "name": names.GANG_GATE}]}}
    broken = copy.deepcopy(template)
    broken["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, DRA_VERSIONS[0], strict=True)


def test_contract_kube_options_reach_the_pods() -> None:
    kube = KubeOptions(cpu="500m", memory="4Gi", selector=(("pool", "a100"),),
                       tolerations=("gpu=yes:NoSchedule", "all"),
                       image_pull_secrets=("regcred",), labels=(("team", "nlp"),), annotations=(("owner", "ann"),),
                       priority_class="high", retry=3, data_dirs=("/mnt/data:/data",))  # fmt: skip
    spec = JobSpec("opts", 4, 1, ["python", "t.py"], workdir="/workspace", kube=kube).validate()
    job = manifests.mpijob(spec, "team-a", per_pod=2)
    validate_crd(job, "kubeflow.org_mpijobs.yaml", "v2beta1")
    assert job["spec"]["runPolicy"]["backoffLimit"] == 3 and job["metadata"]["labels"]["team"] == "nlp"
    pods = template_pods(job)
    for template in pods.values():
        kubernetes_validate.validate(template, "1.30", strict=True)
        spec_ = template["spec"]
        assert spec_["nodeSelector"] == {"pool": "a100"} and spec_["priorityClassName"] == "high"
        assert spec_["tolerations"] == [{"key": "gpu", "operator": "Equal", "value": "yes", "effect": "NoSchedule"},
                                        {"operator": "Exists"}]  # fmt: skip
        assert spec_["imagePullSecrets"] == [{"name": "regcred"}]
        assert spec_["volumes"][0]["hostPath"]["path"] == "/mnt/data"
        assert spec_["containers"][0]["volumeMounts"][0]["mountPath"] == "/data"
        assert spec_["containers"][0]["workingDir"] == "/workspace"
        assert template["metadata"]["annotations"] == {"owner": "ann"}
        assert template["metadata"]["labels"]["team"] == "nlp"
    # two ranks per pod: twice one rank's requests
    requests = pods["Worker"]["spec"]["containers"][0]["resources"]["requests"]
    assert requests == {"cpu": "1000m", "memory": str(8 * 2**30)}
    for bad in (KubeOptions(cpu="lots"), KubeOptions(tolerations=("a:Never",)), KubeOptions(retry=-1),
                KubeOptions(selector=(("bad key", "v"),)), KubeOptions(data_dirs=("data:/data",))):
        with pytest.raises(UsageError):
            JobSpec("opts", 1, 0, ["true"], kube=bad).validate()


def test_contract_container_options_reach_the_pods() -> None:
    """The options shared with the embedded engine's containers, as pods take them."""
    opts = ContainerOptions(data=(("imagenet", "/data"),), shm_size=8 << 30, rdma=True, image_pull_policy="Always",
                            user="1000:1000")  # fmt: skip
    spec = JobSpec("c", 2, 1, ["python", "t.py"], container=opts).validate()
    job = manifests.mpijob(spec, "team-a")
    validate_crd(job, "kubeflow.org_mpijobs.yaml", "v2beta1")
    pods = template_pods(job)
    for template in pods.values():
        kubernetes_validate.validate(template, "1.30", strict=True)
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        assert volumes["data-0"]["persistentVolumeClaim"] == {"claimName": "imagenet"}
        assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": str(8 << 30)}
        container = template["spec"]["containers"][0]
        assert {m["mountPath"] for m in container["volumeMounts"]} == {"/data", "/dev/shm"}
        assert container["imagePullPolicy"] == "Always"
        assert container["securityContext"] == {"runAsUser": 1000, "runAsGroup": 1000,
                                                "capabilities": {"add": ["IPC_LOCK"]}}  # fmt: skip
    assert pods["Worker"]["spec"]["containers"][0]["resources"]["limits"][manifests.RDMA_RESOURCE] == 1
    assert "limits" not in pods["Launcher"]["spec"]["containers"][0]["resources"]
    # without --shm-size, /dev/shm is still memory, not the container's 64 MiB
    plain = template_pods(manifests.mpijob(JobSpec("p", 1, 1, ["true"]), "team-a"))["Worker"]["spec"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in plain["volumes"]
    with pytest.raises(UsageError, match="source is a PersistentVolumeClaim's name"):
        manifests.mpijob(JobSpec("d", 1, 0, ["true"], container=ContainerOptions(data=(("/mnt/x", "/x"),))), "ns")


def test_ranks_per_pod_is_the_largest_share_every_node_divides() -> None:
    spec = JobSpec("p", 12, 1, ["true"])
    assert manifests.ranks_per_pod(spec, ["a"] * 8 + ["b"] * 4) == 4
    assert manifests.ranks_per_pod(spec, ["a"] * 12) == 12
    assert manifests.ranks_per_pod(spec, ["a"] * 7 + ["b"] * 5) == 1
    assert manifests.ranks_per_pod(spec, []) == 1  # no plan: one rank per pod
    assert manifests.ranks_per_pod(JobSpec("c", 4, 0, ["true"]), ["a"] * 4) == 1  # CPU ranks: no NVLink to share


def test_network_levels_travel_on_the_worker_template_and_kueues_annotations_are_read_alike() -> None:
    from ringleader.engines.kubernetes.cache import Gang
    from ringleader.engines.kubernetes.decide import job_request
    from ringleader.engines.kubernetes.objects import pod_info

    spec = JobSpec("vgg", 2, 8, ["true"], topology_aware=True, topology_required="topology-rack",
                   topology_preferred="topology-block")  # fmt: skip
    worker = template_pods(manifests.mpijob(spec, "team-a"))["Worker"]
    info = pod_info(worker)
    assert (info.topology_required, info.topology_preferred) == ("topology-rack", "topology-block")
    kueue = copy.deepcopy(template_pods(manifests.mpijob(JobSpec("k", 2, 8, ["true"]), "team-a"))["Worker"])
    kueue["metadata"]["annotations"] = {"kueue.x-k8s.io/podset-required-topology": "cloud.provider.com/topology-rack"}
    request = job_request(Gang("team-a/k", 2, [pod_info(kueue)]))
    assert request.topology_required == "topology-rack" and request.topology_preferred is None
    assert pod_info(template_pods(manifests.mpijob(SPEC, "team-a"))["Worker"]).topology_required is None


def test_start_rules_travel_on_the_worker_template_and_a_bad_value_changes_nothing() -> None:
    from ringleader.engines.kubernetes.cache import Gang
    from ringleader.engines.kubernetes.decide import job_request
    from ringleader.engines.kubernetes.objects import pod_info

    spec = JobSpec("vgg", 4, 1, ["true"], topology_aware=True, run_time_s=3600.0, max_wait_s=900.0)
    worker = template_pods(manifests.mpijob(spec, "team-a"))["Worker"]
    request = job_request(Gang("team-a/vgg", 4, [pod_info(worker)]))
    assert (request.start_rule, request.work_s, request.max_wait_s) == ("finish", 3600.0, 900.0)
    plain = template_pods(manifests.mpijob(SPEC, "team-a"))["Worker"]
    assert names.START_ANNOTATION not in (plain["metadata"].get("annotations") or {})
    typo = copy.deepcopy(worker)
    typo["metadata"]["annotations"] |= {names.START_ANNOTATION: "soonest", names.RUN_TIME_ANNOTATION: "-5"}
    info = pod_info(typo)
    assert (info.start_rule, info.run_time_s) == ("now", None)
    neutral = JobSpec("vgg", 4, 1, ["true"], topology_aware=True, run_time_s=3600.0, risk="neutral")
    worker = template_pods(manifests.mpijob(neutral, "team-a"))["Worker"]
    assert worker["metadata"]["annotations"][names.RISK_ANNOTATION] == "neutral"
    assert job_request(Gang("team-a/vgg", 4, [pod_info(worker)])).risk == "neutral"
    assert names.RISK_ANNOTATION not in template_pods(manifests.mpijob(spec, "team-a"))["Worker"]["metadata"][
        "annotations"]  # fmt: skip
    averse = JobSpec("vgg", 4, 1, ["true"], topology_aware=True, run_time_s=3600.0, risk="averse")
    worker = template_pods(manifests.mpijob(averse, "team-a"))["Worker"]
    assert job_request(Gang("team-a/vgg", 4, [pod_info(worker)])).risk == "averse"
    worker["metadata"]["annotations"][names.RISK_ANNOTATION] = "bold"  # a hand-written pod's typo: the default
    assert job_request(Gang("team-a/vgg", 4, [pod_info(worker)])).risk == "neutral"


def test_contract_a_restartable_job_reads_its_restart_count_from_its_pod() -> None:
    """--max-restarts on Kubernetes: the workers carry the limit for the scheduler; every container
    reads the run's count from the annotation the scheduler binds it with (downward API) and
    keeps the end of its log in its status when it fails; mpirun passes the count to the ranks;
    the launcher's Job may lose a pod to each restart. Valid against the CRD and as Pods."""
    spec = JobSpec("again", 4, 1, ["python", "train.py"], max_restarts=3)
    job = manifests.mpijob(spec, "default")
    validate_crd(job, "kubeflow.org_mpijobs.yaml", "v2beta1")
    replicas = job["spec"]["mpiReplicaSpecs"]
    assert replicas["Worker"]["template"]["metadata"]["annotations"][names.MAX_RESTARTS_ANNOTATION] == "3"
    for role, replica in replicas.items():
        template = replica["template"]
        validate_builtin({"apiVersion": "v1", "kind": "Pod",
                          "metadata": {"name": f"x-{role.lower()}", **template["metadata"]}, "spec": template["spec"]})
        [container] = template["spec"]["containers"]
        env = {e["name"]: e for e in container["env"]}
        path = env["RINGLEADER_RESTARTS"]["valueFrom"]["fieldRef"]["fieldPath"]
        assert path == f"metadata.annotations['{names.RESTARTS_ANNOTATION}']"
        assert env["TORCHELASTIC_MAX_RESTARTS"]["value"] == "3"
        assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    command = replicas["Launcher"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("RINGLEADER_RESTARTS") - 1:][:2] == ["-x", "RINGLEADER_RESTARTS"]
    assert job["spec"]["runPolicy"]["backoffLimit"] == 6


FAST_NETWORK = {"kind": "calibration", "version": 1, "sources": [], "compute": [], "overlap": None, "sync": None,
                "links": {"network": {"gbs": 300.0, "latency_us": 1.0}}}  # fmt: skip


def test_the_model_and_a_calibration_travel_on_the_worker_template() -> None:
    """`submit --model vgg16 --calibration FILE`: the scheduler prices the gang's placements with
    both, read off its workers as the other start-rule settings are."""
    from ringleader.engines.kubernetes.cache import Gang
    from ringleader.engines.kubernetes.decide import job_request
    from ringleader.engines.kubernetes.objects import pod_info

    spec = JobSpec("vgg", 4, 1, ["true"], topology_aware=True, run_time_s=3600.0, model="vgg16",
                   calibration=FAST_NETWORK)  # fmt: skip
    worker = template_pods(manifests.mpijob(spec, "team-a"))["Worker"]
    info = pod_info(worker)
    assert json.loads(info.calibration or "") == FAST_NETWORK
    assert job_request(Gang("team-a/vgg", 4, [info])).model == "vgg16"
    # the batch and precision its command line names: the queue prices it as every engine does
    line = ["python", "train.py", "--batch_size=16", "--use_fp16", "--gradient_accumulation_steps=4"]
    fp16 = JobSpec("vgg", 4, 1, line, topology_aware=True, run_time_s=3600.0, model="vgg16")
    request = job_request(Gang("team-a/vgg", 4, [pod_info(template_pods(manifests.mpijob(fp16, "team-a"))["Worker"])]))
    shared = fp16.request()  # what the embedded, ssh-hosts and Slurm queues weigh
    assert request.workload == shared.workload == Workload(16, "fp16", 4)
    plain = template_pods(manifests.mpijob(JobSpec("p", 1, 1, ["true"]), "team-a"))["Worker"]
    typos = copy.deepcopy(plain)
    typos["metadata"].setdefault("annotations", {}).update(
        {names.BATCH_ANNOTATION: "²", names.PRECISION_ANNOTATION: "fp64"})  # fmt: skip
    assert pod_info(plain).workload is None and pod_info(typos).workload == Workload()  # a typo: the default
    assert pod_info(plain).calibration is None and job_request(Gang("team-a/p", 1, [pod_info(plain)])).model is None
    big = dict(FAST_NETWORK, sources=["x" * 1000] * 80)  # 80 KB: more than an annotation should carry
    with pytest.raises(UsageError, match="more than a pod annotation may carry"):
        manifests.mpijob(JobSpec("big", 4, 1, ["true"], calibration=big), "team-a")
