"""Contract tests: pinning a decided gang on the DRA path against the fake API server, which
plays the parts of the resourceclaim controller (a claim per worker pod, named in its status)
and NVIDIA's DRA driver (a ResourceSlice per node)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kube.fakeapi import FakeApiServer
from kube.kubeobjs import node
from ringleader.engines.kubernetes import manifests, names
from ringleader.engines.kubernetes.client import load_client
from ringleader.engines.kubernetes.delivery import Delivery
from ringleader.engines.kubernetes.objects import pod_info
from ringleader.engines.kubernetes.pinning import DraApi, Pin, PinError, pin_gang
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
    job = manifests.mpijob(JobSpec("vgg", workers, 2, ["python", "t.py"]), "team-a", delivery=Delivery("dra"))
    template = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    claim_spec = {"devices": {"requests": [{"name": names.DRA_REQUEST, "exactly": {
        "deviceClassName": names.DRA_DEVICE_CLASS, "allocationMode": "ExactCount", "count": 2}}]}}  # fmt: skip
    pods = []
    for i in range(workers):
        name, claim = f"vgg-worker-{i}", f"vgg-worker-{i}-gpus-k2x9z"
        fake.put("resourceclaims", {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                                    "metadata": {"name": claim, "namespace": "team-a"}, "spec": claim_spec})
        fake.put("pods", {"apiVersion": "v1", "kind": "Pod",
                          "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{i}",
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
    """The scheduler's view of a DRA worker: gated and pending its pin, then holding its GPUs on
    the node kube-scheduler bound it to (its claim is not on the pod; the template says how many)."""
    job = manifests.mpijob(JobSpec("vgg", 4, 2, ["true"]), "team-a", delivery=Delivery("dra"), per_pod=2)
    template = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    meta = {"name": "vgg-worker-0", "namespace": "team-a", "uid": "u0", **copy.deepcopy(template["metadata"])}
    obj = {"metadata": meta, "spec": copy.deepcopy(template["spec"]), "status": {"phase": "Pending"}}
    info = pod_info(obj)
    assert info.gated and info.gpus == 4 and info.node is None
    obj["spec"].pop("schedulingGates")
    obj["spec"]["nodeName"] = "gpu-0"
    info = pod_info(obj)
    assert not info.gated and info.holds_resources and info.gpus == 4
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
    assert pod_info({"metadata": {"name": "l", **launcher["metadata"]}, "spec": launcher["spec"]}).gpus == 0
