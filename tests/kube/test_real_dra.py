"""DRA delivery on a real v1.36 control plane with kube-scheduler (tests/kube/realserver.py):
ringleader pins its gangs' claims beside the devices kube-scheduler allocated to other pods'
claims, from the same ResourceSlices, and kube-scheduler binds ringleader's workers where they
are pinned. The test plays NVIDIA's DRA driver (its DeviceClass and a node's ResourceSlice);
the resourceclaim controller (kube-controller-manager) makes each pod's claim."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from kube.kubeobjs import node, podgroup
from kube.realserver import ControlPlane, leading_scheduler
from ringleader.engines.kubernetes import manifests, names
from ringleader.engines.kubernetes.delivery import Delivery, claim_template
from ringleader.engines.kubernetes.scheduler import Scheduler
from ringleader.jobs.spec import JobSpec

KUBE_SCHEDULER = True
GPU_DELIVERY = "dra"
UUIDS = [f"GPU-{g:08x}-aaaa-bbbb-cccc-{g:012x}" for g in range(8)]
DRA_API = f"{names.DRA_GROUP}/{names.DRA_VERSION}"
RESOURCE = f"/apis/{DRA_API}"
NODE = "dra-0"


def devices_of(claim: dict[str, Any]) -> set[str]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return {r["device"] for r in (allocation.get("devices") or {}).get("results") or ()}


def claim_of(real: ControlPlane, namespace: str, pod_name: str) -> dict[str, Any] | None:
    found = real.get(f"/api/v1/namespaces/{namespace}/pods/{pod_name}")
    for status in ((found or {}).get("status") or {}).get("resourceClaimStatuses") or ():
        if status.get("resourceClaimName"):
            return real.get(f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{status['resourceClaimName']}")
    return None


@pytest.fixture(scope="module")
def cluster(real: ControlPlane) -> dict[str, set[str]]:
    """A node with 8 GPUs published by the driver, and a pod of another team's, placed by
    kube-scheduler, whose claim holds 2 of them."""
    driver = f'device.driver == "{names.DRA_DRIVER}"'
    real.apply([{"apiVersion": DRA_API, "kind": "DeviceClass", "metadata": {"name": names.DRA_DEVICE_CLASS},
                 "spec": {"selectors": [{"cel": {"expression": driver}}]}}])  # fmt: skip
    gpus = node(NODE)
    gpus["metadata"]["annotations"][names.GPU_UUIDS_ANNOTATION] = ",".join(UUIDS)  # the agent's
    real.add_node(gpus)
    real.apply([{"apiVersion": DRA_API, "kind": "ResourceSlice", "metadata": {"name": f"{NODE}-gpus"},
                 "spec": {"driver": names.DRA_DRIVER, "nodeName": NODE,
                          "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
                          "devices": [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"},
                                                                          "uuid": {"string": UUIDS[i]}}}
                                      for i in range(8)]}}])  # fmt: skip
    real.namespace("other")
    real.apply([
        {"apiVersion": DRA_API, "kind": "ResourceClaimTemplate",
         "metadata": {"name": "two-gpus", "namespace": "other"},
         "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
             "deviceClassName": names.DRA_DEVICE_CLASS, "allocationMode": "ExactCount", "count": 2}}]}}}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "inference", "namespace": "other"},
         "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {
             "requests": {"cpu": "1", "memory": "1Gi"}, "claims": [{"name": "gpu"}]}}],
             "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "two-gpus"}]}},
    ])  # fmt: skip
    real.until(lambda: (real.get("/api/v1/namespaces/other/pods/inference") or {}).get("spec", {}).get("nodeName"),
               f"kube-scheduler binding its own pod: {real.log('kube-scheduler')}", 90)  # fmt: skip
    taken = devices_of(claim_of(real, "other", "inference") or {})
    assert len(taken) == 2
    return {"kube-scheduler": taken}


@pytest.fixture
def team(real: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace for one test's jobs; at its end their pods go (as their kubelet would finish
    them) and, by the garbage collector, their claims, so the next test finds the devices free."""
    namespace = request.node.name.removeprefix("test_real_").replace("_", "-")[:40].strip("-")
    real.namespace(namespace)
    yield namespace
    pods = f"/api/v1/namespaces/{namespace}/pods"
    for item in real.request("GET", pods)["items"]:
        real.request("DELETE", f"{pods}/{item['metadata']['name']}", {"gracePeriodSeconds": 0})
    claims = f"{RESOURCE}/namespaces/{namespace}/resourceclaims"
    real.until(lambda: not real.request("GET", claims)["items"], f"the claims of {namespace} collected")


@pytest.fixture
def sched(real: ControlPlane) -> Iterator[Scheduler]:
    s = leading_scheduler(real, "sched-dra", dra=True)
    yield s
    s.elector.release()


def dra_job(real: ControlPlane, namespace: str, name: str, workers: int, gpus: int) -> list[str]:
    """What `submit --engine kubernetes` and mpi-operator make of a DRA job: its claim
    template, PodGroup and gated worker pods; then the claims the resourceclaim controller makes."""
    spec = JobSpec(name, workers, gpus, ["python", "t.py"], topology_aware=True)
    job = manifests.mpijob(spec, namespace, delivery=Delivery("dra"))
    template = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    real.apply([claim_template(manifests.claim_template_name(spec), namespace, gpus, name),
                podgroup(name, workers, namespace)])  # fmt: skip
    pods = []
    for i in range(workers):
        meta = copy.deepcopy(template["metadata"])
        real.apply([{"apiVersion": "v1", "kind": "Pod", "metadata": {**meta, "name": f"{name}-worker-{i}",
                                                                     "namespace": namespace},
                     "spec": copy.deepcopy(template["spec"])}])  # fmt: skip
        pods.append(f"{name}-worker-{i}")
    for p in pods:
        real.until(lambda p=p: claim_of(real, namespace, p), f"the resourceclaim controller's claim of {p}")
    return pods


def test_real_a_gang_fits_beside_the_devices_kube_scheduler_allocated(
        real: ControlPlane, cluster: dict[str, set[str]], team: str, sched: Scheduler) -> None:  # fmt: skip
    """6 GPUs (3 workers of 2) on a node where kube-scheduler's pod holds 2 of 8: ringleader
    pins the 6 free devices, kube-scheduler binds the workers there. A pod that only names a
    claim entry `gpus` and carries ringleader's GPU-count annotation, placed by hand, holds
    nothing (its claim allocates nothing): it keeps no gang out."""
    real.apply([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "squatter", "namespace": team,
                                                                 "annotations": {names.DRA_GPUS_ANNOTATION: "8"}},
                 "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}],
                          "resourceClaims": [{"name": names.DRA_REQUEST,
                                              "resourceClaimTemplateName": "none"}]}}])  # fmt: skip
    pods = dra_job(real, team, "train", 3, 2)
    sched.sync()
    assert [(r.gang, r.ok, r.error) for r in sched.cycle()] == [(f"{team}/train", True, "")]
    mine = [devices_of(claim_of(real, team, p) or {}) for p in pods]
    assert all(len(d) == 2 for d in mine) and not set().union(*mine) & cluster["kube-scheduler"]
    assert len(set().union(*mine)) == 6
    real.until(lambda: all((real.get(f"/api/v1/namespaces/{team}/pods/{p}") or {})["spec"].get("nodeName") == NODE
                           for p in pods), f"kube-scheduler binding the pinned workers: {real.log('kube-scheduler')}",
               90)  # fmt: skip


def test_real_a_gang_that_cannot_fit_beside_them_waits_as_unschedulable(
        real: ControlPlane, cluster: dict[str, set[str]], team: str, sched: Scheduler) -> None:  # fmt: skip
    """8 GPUs on that node, 2 of which kube-scheduler's pod holds: the gang waits, its PodGroup
    saying how many GPUs it needs; no claim is written."""
    pods = dra_job(real, team, "wide", 4, 2)
    sched.sync()
    assert sched.cycle() == []
    group = real.get(f"/apis/{names.PODGROUP_GROUP}/{names.PODGROUP_VERSION}/namespaces/{team}/"
                     f"{names.PODGROUP_PLURAL}/wide")  # fmt: skip
    assert group is not None and group["status"]["phase"] == "Pending"
    reason = group["metadata"]["annotations"][names.PENDING_ANNOTATION]
    assert "4 worker(s) x 2 GPU(s) = 8 GPUs" in reason and "bind" not in reason, reason
    assert not any(devices_of(claim_of(real, team, p) or {}) for p in pods)
