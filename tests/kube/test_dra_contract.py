"""Contract tests: pinning a decided gang on the DRA path against the fake API server, which
plays the parts of the resourceclaim controller (a claim per worker pod, named in its status)
and NVIDIA's DRA driver (a ResourceSlice per node)."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest

from kube.fakeapi import FakeApiServer, permitted
from kube.kubeobjs import node, podgroup
from ringleader.engines.kubernetes import manifests, names
from ringleader.engines.kubernetes.cache import Cache
from ringleader.engines.kubernetes.client import Api, load_client
from ringleader.engines.kubernetes.delivery import Delivery
from ringleader.engines.kubernetes.objects import pod_info
from ringleader.engines.kubernetes.pinning import DraApi, Pin, PinError, pin_gang
from ringleader.engines.kubernetes.scheduler import Scheduler
from ringleader.jobs.spec import JobSpec

kubernetes_validate = pytest.importorskip("kubernetes_validate")

UUIDS = [f"GPU-{i:08x}-aaaa-bbbb-cccc-dddddddddddd" for i in range(8)]


def dra_cluster(fake: FakeApiServer, workers: int = 2) -> list[str]:
    """gpu-0 with the agent's annotations and the driver's slice (device names by minor number,
    which here run opposite to the NVML indexes), and the job's gated worker pods with claims."""
    gpu0 = node("gpu-0")
    gpu0["metadata"]["annotations"][names.GPU_UUIDS_ANNOTATION] = ",".join(UUIDS)
    fake.put("nodes", gpu0)
    fake.put("resourceslices", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "gpu-0-gpu.nvidia.com-x"},
        "spec": {"driver": names.DRA_DRIVER, "nodeName": "gpu-0", "pool": {"name": "gpu-0", "generation": 1,
                                                                          "resourceSliceCount": 1},
                 "devices": [{"name": f"gpu-{7 - i}", "attributes": {"type": {"string": "gpu"},
                                                                     "uuid": {"string": UUIDS[i]}}} for i in range(8)]},
    })  # fmt: skip
    return dra_cluster_gang(fake, "vgg", workers)


def dra_cluster_gang(fake: FakeApiServer, job_name: str, workers: int) -> list[str]:
    """A DRA job's gated worker pods of 2 GPUs each, with their claims, as the controllers make them."""
    spec = JobSpec(job_name, workers, 2, ["python", "t.py"], topology_aware=True)
    job = manifests.mpijob(spec, "team-a", delivery=Delivery("dra"))
    template = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    claim_spec = {"devices": {"requests": [{"name": names.DRA_REQUEST, "exactly": {
        "deviceClassName": names.DRA_DEVICE_CLASS, "allocationMode": "ExactCount", "count": 2}}]}}  # fmt: skip
    pods = []
    for i in range(workers):
        name, claim = f"{job_name}-worker-{i}", f"{job_name}-worker-{i}-gpus-k2x9z"
        uid = f"uid-{i}" if job_name == "vgg" else f"uid-{name}"
        fake.put("resourceclaims", {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                                    "metadata": {"name": claim, "namespace": "team-a"}, "spec": claim_spec})
        fake.put("pods", {"apiVersion": "v1", "kind": "Pod",
                          "metadata": {"name": name, "namespace": "team-a", "uid": uid,
                                       **copy.deepcopy(template["metadata"])},
                          "spec": copy.deepcopy(template["spec"]),
                          "status": {"phase": "Pending", "resourceClaimStatuses": [
                              {"name": names.DRA_REQUEST, "resourceClaimName": claim}]}})  # fmt: skip
        pods.append(name)
    return pods


def pins(pods: list[str], ids: list[tuple[int, ...]]) -> list[Pin]:
    return [Pin("team-a", p, "gpu-0", g, {names.GPU_IDS_ANNOTATION: ",".join(map(str, g)),
                                          names.WORKER_INDEX_ANNOTATION: str(i)})
            for i, (p, g) in enumerate(zip(pods, ids, strict=True))]  # fmt: skip


def _results(claim: dict[str, Any]) -> list[str]:
    return [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]]


def test_contract_a_gang_is_allocated_pinned_then_ungated(fake: FakeApiServer) -> None:
    pods = dra_cluster(fake)
    api = DraApi(load_client(host=fake.url))
    pin_gang(api, pins(pods, [(0, 1), (2, 3)]))
    c0 = fake.get("resourceclaims", "vgg-worker-0-gpus-k2x9z", "team-a")
    c1 = fake.get("resourceclaims", "vgg-worker-1-gpus-k2x9z", "team-a")
    assert _results(c0) == ["gpu-7", "gpu-6"] and _results(c1) == ["gpu-5", "gpu-4"]  # by UUID, not by name
    term = c0["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]
    assert term == {"key": "metadata.name", "operator": "In", "values": ["gpu-0"]}
    for name in pods:
        pod = fake.get("pods", name, "team-a")
        assert "schedulingGates" not in pod["spec"]
        assert pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert pod["metadata"]["annotations"][names.WORKER_INDEX_ANNOTATION] == str(pods.index(name))
    # every member allocated and pinned before the first gate goes
    writes = [(r.method, r.path.rsplit("/", 2)[-2:]) for r in fake.requests if r.method in ("PUT", "PATCH")]
    first_ungate = next(i for i, r in enumerate(fake.requests) if r.method == "PATCH" and "schedulingGates" in
                        str((r.body or {}).get("spec")))  # fmt: skip
    assert len(writes) == 6 and all(r.method != "PUT" for r in fake.requests[first_ungate:])
    for version in ("1.34", "1.37"):
        for obj in (c0, fake.get("pods", pods[0], "team-a")):
            clean = copy.deepcopy(obj)
            clean["metadata"].pop("resourceVersion", None)
            kubernetes_validate.validate(clean, version, strict=True)


def test_contract_an_unresolvable_device_writes_nothing(fake: FakeApiServer) -> None:
    pods = dra_cluster(fake)
    gpu0 = fake.get("nodes", "gpu-0")
    gpu0["metadata"]["annotations"][names.GPU_UUIDS_ANNOTATION] = ",".join(UUIDS[:3])  # the agent knew 3
    api = DraApi(load_client(host=fake.url))
    with pytest.raises(PinError, match="no UUID published for GPU 3"):
        pin_gang(api, pins(pods, [(0, 1), (2, 3)]))
    assert not [r for r in fake.requests if r.method in ("PUT", "PATCH")]


def test_contract_a_failed_write_undoes_the_allocations(fake: FakeApiServer) -> None:
    pods = dra_cluster(fake)
    fake.fail[("update", "vgg-worker-1-gpus-k2x9z")] = 500
    api = DraApi(load_client(host=fake.url))
    with pytest.raises(Exception, match="500"):
        pin_gang(api, pins(pods, [(0, 1), (2, 3)]))
    for name in pods:
        claim = fake.get("resourceclaims", f"{name}-gpus-k2x9z", "team-a")
        assert "allocation" not in (claim.get("status") or {})
        assert fake.get("pods", name, "team-a")["spec"]["schedulingGates"] == [{"name": names.GANG_GATE}]


def test_contract_the_fake_refuses_node_affinity_on_an_ungated_pod(fake: FakeApiServer) -> None:
    """As the API server does: pinning after the gate is gone is refused (the check can fail)."""
    pods = dra_cluster(fake, workers=1)
    api = DraApi(load_client(host=fake.url))
    pin_gang(api, pins(pods, [(0, 1)]))
    with pytest.raises(Exception, match="422"):
        api.patch_pod("team-a", pods[0], {"spec": {"affinity": {"nodeAffinity": {}}}})


def test_dra_workers_are_read_with_their_claims_gpus() -> None:
    """The scheduler's view of a DRA worker: gated and pending its pin, then, pinned, holding its
    GPUs on the node kube-scheduler bound it to (its claim is not on the pod; the template says
    how many). The same pod not pinned by ringleader holds no GPU by its annotation: its claim
    holds what kube-scheduler allocated to it (claims.py), whatever the pod says."""
    job = manifests.mpijob(JobSpec("vgg", 4, 2, ["true"]), "team-a", delivery=Delivery("dra"), per_pod=2)
    template = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    meta = {"name": "vgg-worker-0", "namespace": "team-a", "uid": "u0", **copy.deepcopy(template["metadata"])}
    obj = {"metadata": meta, "spec": copy.deepcopy(template["spec"]), "status": {"phase": "Pending"}}
    info = pod_info(obj)
    assert info.gated and info.gpus == 4 and info.node is None
    obj["spec"].pop("schedulingGates")
    obj["spec"]["nodeName"] = "gpu-0"
    pinned = {names.GPU_IDS_ANNOTATION: "0,1,2,3", names.GPU_IDS_UID_ANNOTATION: "u0"}  # what the pin wrote
    obj["metadata"]["annotations"] = {**obj["metadata"]["annotations"], **pinned}
    info = pod_info(obj)
    assert not info.gated and info.holds_resources and info.gpus == 4
    for key in pinned:
        del obj["metadata"]["annotations"][key]
    assert pod_info(obj).gpus == 0
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
    assert pod_info({"metadata": {"name": "l", **launcher["metadata"]}, "spec": launcher["spec"]}).gpus == 0


@pytest.mark.parametrize("order", list(itertools.permutations(("nodes", "pods", "resourceslices", "resourceclaims"))),
                         ids=",".join)
def test_a_claims_devices_are_held_whichever_list_comes_first(order: tuple[str, ...]) -> None:
    """The informers list in parallel: the devices kube-scheduler allocated to another pod's claim
    (gpu-6 and gpu-7, GPUs 1 and 0 by their UUIDs) are taken in the scheduler's cache whichever
    of the nodes, pods, slices and claims it heard first; a gang never sees them free."""
    gpu0 = node("gpu-0")
    gpu0["metadata"]["annotations"][names.GPU_UUIDS_ANNOTATION] = ",".join(UUIDS)
    slice_ = {"metadata": {"name": "gpu-0-gpus"}, "spec": {
        "driver": names.DRA_DRIVER, "nodeName": "gpu-0", "pool": {"name": "gpu-0"},
        "devices": [{"name": f"gpu-{7 - i}", "attributes": {"uuid": {"string": UUIDS[i]}}} for i in range(8)]}}
    container = {"name": "main", "resources": {"claims": [{"name": "gpu"}]}}
    inference = {"metadata": {"name": "inference", "namespace": "team-b", "uid": "u-inf"},
                 "spec": {"nodeName": "gpu-0", "containers": [container],
                          "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "two-gpus"}]},
                 "status": {"phase": "Running"}}  # fmt: skip
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "inference", "uid": "u-inf", "controller": True}
    results = [{"request": "gpu", "driver": names.DRA_DRIVER, "pool": "gpu-0", "device": f"gpu-{d}"} for d in (6, 7)]
    claim = {"metadata": {"name": "inference-gpu-x7k2p", "namespace": "team-b", "ownerReferences": [owner]},
             "status": {"allocation": {"devices": {"results": results}}}}  # fmt: skip
    listed = {"nodes": [gpu0], "pods": [inference], "resourceslices": [slice_], "resourceclaims": [claim]}
    cache = Cache()
    for kind in order:
        cache.replace(kind, listed[kind])
    assert cache.state.node("gpu-0").free_gpus == (2, 3, 4, 5, 6, 7)


def _dra_scheduler(fake: FakeApiServer, token: str | None = None) -> Scheduler:
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = fake.url
    if token:
        configuration.api_key = {"BearerToken": f"Bearer {token}"}
    s = Scheduler(Api(client.ApiClient(configuration)), "sched-dra")
    s.sync()
    assert s.elector.try_acquire_or_renew()
    return s


def test_contract_the_scheduler_pins_a_gated_gang_then_ungates_it(fake: FakeApiServer) -> None:
    """End to end, as the installed DRA scheduler role (403 for anything else): a gated gang is
    the scheduler's, decided like a bound gang, its claims allocated to the decided GPUs, its
    pods pinned with the decision's annotations, and only then ungated; no Binding is written
    (kube-scheduler binds). A second gang that needs GPUs the first holds waits."""
    pods = dra_cluster(fake)
    fake.put("podgroups", podgroup("vgg", 2, namespace="team-a"))
    objects = manifests.install(delivery=Delivery("dra"))
    role = next(o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "ringleader-scheduler")
    lease = next(o for o in objects if o["kind"] == "Role")
    rules = [(r, None) for r in role["rules"]] + [(r, names.SYSTEM_NAMESPACE) for r in lease["rules"]]
    user = "system:serviceaccount:ringleader-system:ringleader-scheduler"
    fake.grant(user, rules)
    s = _dra_scheduler(fake, user)
    assert [(r.gang, r.ok) for r in s.cycle()] == [("team-a/vgg", True)]
    assert not [r for r in fake.requests if r.verb == "bind"]
    denied = [f"{r.method} {r.path}" for r in fake.requests if r.user and not permitted(r, rules)]
    assert not denied, denied
    chosen = []
    for i, name in enumerate(pods):
        pod = fake.get("pods", name, "team-a")
        notes = pod["metadata"]["annotations"]
        ids = tuple(int(g) for g in notes[names.GPU_IDS_ANNOTATION].split(","))
        chosen.append(ids)
        assert "schedulingGates" not in pod["spec"] and notes[names.WORKER_INDEX_ANNOTATION] == str(i)
        assert notes[names.GPU_DEVICES_ANNOTATION] == ",".join(UUIDS[g] for g in ids)
        assert notes[names.GPU_IDS_UID_ANNOTATION] == f"uid-{i}"
        claim = fake.get("resourceclaims", f"{name}-gpus-k2x9z", "team-a")
        assert _results(claim) == [f"gpu-{7 - g}" for g in ids]  # the driver's names of the decided GPUs
    assert len({g for ids in chosen for g in ids}) == 4
    first_ungate = next(i for i, r in enumerate(fake.requests) if r.method == "PATCH" and "schedulingGates" in
                        str((r.body or {}).get("spec")))  # fmt: skip
    assert all(r.method != "PUT" for r in fake.requests[first_ungate:])
    # The pinned pods, ungated and not yet bound, keep their GPUs in the cache; once
    # kube-scheduler binds them, the ids they were pinned with are theirs.
    s.sync()
    assert s.cache.state.node("gpu-0").n_free == 4
    for name in pods:
        bound = fake.get("pods", name, "team-a")
        bound["spec"]["nodeName"] = "gpu-0"
        fake.put("pods", bound)
    s.sync()
    assert not s.cache.assumed and s.cache.state.node("gpu-0").n_free == 4
    more = dra_cluster_gang(fake, "big", 3)
    fake.put("podgroups", podgroup("big", 3, namespace="team-a"))
    s.sync()
    outcomes = s.cycle()
    assert outcomes == [] and all(fake.get("pods", p, "team-a")["spec"].get("schedulingGates") for p in more)
    assert "0/1 nodes" in fake.get("pods", more[0], "team-a")["status"]["conditions"][0]["message"]


def test_contract_a_gang_that_cannot_be_pinned_is_undone_and_waits(fake: FakeApiServer) -> None:
    """A decided gang whose GPUs have no DRA device (the agent published too few UUIDs): nothing
    stays allocated or pinned, every member still gated, and it is decided again next cycle."""
    pods = dra_cluster(fake)
    fake.put("podgroups", podgroup("vgg", 2, namespace="team-a"))
    gpu0 = fake.get("nodes", "gpu-0")
    gpu0["metadata"]["annotations"][names.GPU_UUIDS_ANNOTATION] = ",".join(UUIDS[:1])
    fake.put("nodes", gpu0)
    s = _dra_scheduler(fake)
    [result] = s.cycle()
    assert not result.ok and "no UUID published" in result.error
    assert not s.cache.assumed
    for name in pods:
        assert fake.get("pods", name, "team-a")["spec"]["schedulingGates"] == [{"name": names.GANG_GATE}]
        assert "allocation" not in (fake.get("resourceclaims", f"{name}-gpus-k2x9z", "team-a").get("status") or {})
    gpu0["metadata"]["annotations"][names.GPU_UUIDS_ANNOTATION] = ",".join(UUIDS)
    fake.put("nodes", gpu0)
    s.sync()
    assert [r.ok for r in s.cycle()] == [True]


def test_contract_a_device_another_claim_holds_is_never_allocated_twice(fake: FakeApiServer) -> None:
    """kube-scheduler allocates the claims of pods ringleader does not place from the same
    slices: a device one of them holds is refused, and nothing is written."""
    pods = dra_cluster(fake)
    fake.put("resourceclaims", {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                                "metadata": {"name": "notebook-gpu", "namespace": "team-b"},
                                "spec": {}, "status": {"allocation": {"devices": {"results": [
                                    {"request": "gpu", "driver": names.DRA_DRIVER, "pool": "gpu-0",
                                     "device": "gpu-5"}]}}}})  # fmt: skip
    api = DraApi(load_client(host=fake.url))
    with pytest.raises(PinError, match=r"device gpu-5 .* is allocated to claim team-b/notebook-gpu"):
        pin_gang(api, pins(pods, [(0, 1), (2, 3)]))  # GPU 2 is device gpu-5 (names run opposite)
    assert not [r for r in fake.requests if r.method in ("PUT", "PATCH")]
    pin_gang(api, pins(pods, [(0, 1), (3, 4)]))  # around it
    assert _results(fake.get("resourceclaims", "vgg-worker-1-gpus-k2x9z", "team-a")) == ["gpu-4", "gpu-3"]


def test_contract_kube_scheduler_takes_the_allocation_as_written(fake: FakeApiServer) -> None:
    """On 1.36 kube-scheduler's PreBind adds allocationTimestamp to an allocation that lacks one,
    and the API server refuses that change of an allocation it did not make ("field is
    immutable"): the worker never binds. Written with its timestamp, the claim is reserved for
    its pod and nothing of the allocation changes."""
    pods = dra_cluster(fake)
    api = DraApi(load_client(host=fake.url))
    pin_gang(api, pins(pods, [(0, 1), (2, 3)]))
    for i, name in enumerate(pods):
        claim_name = f"{name}-gpus-k2x9z"
        written = fake.get("resourceclaims", claim_name, "team-a")["status"]["allocation"]
        reserved = fake.prebind_claim("team-a", claim_name, f"uid-{i}", name)
        assert reserved["status"]["allocation"] == written
        assert reserved["status"]["reservedFor"] == [{"resource": "pods", "name": name, "uid": f"uid-{i}"}]
