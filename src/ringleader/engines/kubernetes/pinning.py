"""DRA delivery's last step: pin a decided gang (docs/kubernetes.md, "dra").

For each worker pod of a gang ``place()`` decided: its claim (generated from the job's
ResourceClaimTemplate, named in the pod's status) is allocated to the exact devices chosen,
found by UUID in the node's ResourceSlices; the pod gets required node affinity to its node and
the decision's annotations. Only once every member is pinned are the gates removed, so
kube-scheduler never starts part of a gang. Every device is resolved before anything is written;
a write that fails undoes the allocations made so far.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ringleader.engines.kubernetes import names
from ringleader.engines.kubernetes.client import Api, ApiError
from ringleader.engines.kubernetes.delivery import Device, claim_allocation, node_devices, pin_patch, ungate_patch

RESOURCE_GROUP, RESOURCE_VERSION = names.DRA_GROUP, names.DRA_VERSION


class PinError(Exception):
    """A gang that cannot be pinned as decided (the caller decides it again later)."""


@dataclass(frozen=True)
class Pin:
    """One worker pod and what the decision gives it."""

    namespace: str
    pod: str
    node: str
    gpu_ids: tuple[int, ...]  # indexes into the node's published topology
    annotations: Mapping[str, str]


class DraApi(Api):
    """The calls pinning makes: ResourceSlices, claims and their status, a pod patch."""

    def resource_slices(self) -> list[dict[str, Any]]:
        body = self._json(self.custom.list_cluster_custom_object, RESOURCE_GROUP, RESOURCE_VERSION, "resourceslices")
        return list(body.get("items") or [])

    def resource_claims(self) -> list[dict[str, Any]]:
        """Every namespace's claims: the devices kube-scheduler (or anyone) allocated already."""
        body = self._json(self.custom.list_cluster_custom_object, RESOURCE_GROUP, RESOURCE_VERSION, "resourceclaims")
        return list(body.get("items") or [])

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        body: dict[str, Any] = self._json(self.core.read_namespaced_pod, name, namespace)
        return body

    def read_claim(self, namespace: str, name: str) -> dict[str, Any]:
        body: dict[str, Any] = self._json(self.custom.get_namespaced_custom_object, RESOURCE_GROUP,
                                          RESOURCE_VERSION, namespace, "resourceclaims", name)  # fmt: skip
        return body

    def replace_claim_status(self, namespace: str, name: str, claim: Mapping[str, Any]) -> None:
        self._json(self.custom.replace_namespaced_custom_object_status, RESOURCE_GROUP, RESOURCE_VERSION,
                   namespace, "resourceclaims", name, dict(claim))  # fmt: skip

    def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self._json(self.core.patch_namespaced_pod, name, namespace, dict(patch))


def _claim_name(pod: Mapping[str, Any]) -> str | None:
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or ():
        if status.get("name") == names.DRA_REQUEST:
            return status.get("resourceClaimName") or None
    return None


def _devices(api: DraApi, pin: Pin, slices: Sequence[Mapping[str, Any]]) -> list[Device]:
    """The DRA devices of ``pin``'s GPU ids: index -> UUID (the agent's annotation) -> device."""
    notes = (api.get_node(pin.node).get("metadata") or {}).get("annotations") or {}
    uuids = [u for u in notes.get(names.GPU_UUIDS_ANNOTATION, "").split(",") if u]
    published = {d.uuid: d for d in node_devices(slices, pin.node)}
    devices = []
    for gpu in pin.gpu_ids:
        if gpu >= len(uuids):
            raise PinError(f"node {pin.node}: no UUID published for GPU {gpu} (is the ringleader agent running?)")
        if uuids[gpu] not in published:
            raise PinError(f"node {pin.node}: the DRA driver publishes no device with UUID {uuids[gpu]}")
        devices.append(published[uuids[gpu]])
    return devices


def allocated_devices(claims: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, str], str]:
    """(driver, pool, device) -> "namespace/claim" of every device some claim holds."""
    taken = {}
    for claim in claims:
        meta = claim.get("metadata") or {}
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or ():
            key = (str(result.get("driver")), str(result.get("pool")), str(result.get("device")))
            taken[key] = f"{meta.get('namespace')}/{meta.get('name')}"
    return taken


def pin_gang(api: DraApi, pins: Sequence[Pin]) -> None:
    """Allocate, pin, then ungate every member of one gang; PinError (nothing left allocated)
    when a member cannot be pinned as decided: among others, a device that some other claim
    holds (kube-scheduler allocates claims of pods ringleader does not place, from the same
    slices), which would otherwise be handed out twice."""
    slices = api.resource_slices()
    taken = allocated_devices(api.resource_claims())
    plan = []
    for pin in pins:
        claim = _claim_name(api.read_pod(pin.namespace, pin.pod))
        if claim is None:
            raise PinError(f"pod {pin.namespace}/{pin.pod}: its ResourceClaim is not created yet")
        devices = _devices(api, pin, slices)
        for device in devices:
            holder = taken.get((names.DRA_DRIVER, device.pool, device.name))
            if holder is not None and holder != f"{pin.namespace}/{claim}":
                raise PinError(f"node {pin.node}: device {device.name} ({device.uuid}) is allocated to claim {holder}")
        plan.append((pin, claim, devices))
    done: list[tuple[Pin, str]] = []
    try:
        for pin, claim, devices in plan:
            body = api.read_claim(pin.namespace, claim)
            if (body.get("status") or {}).get("allocation"):
                raise PinError(f"claim {pin.namespace}/{claim} is already allocated")
            body["status"] = {**(body.get("status") or {}), **claim_allocation(pin.node, devices)}
            api.replace_claim_status(pin.namespace, claim, body)
            done.append((pin, claim))
            api.patch_pod(pin.namespace, pin.pod, pin_patch(pin.node, pin.annotations))
    except (ApiError, PinError):
        for pin, claim in done:  # a claim nobody reserved yet may be deallocated
            body = api.read_claim(pin.namespace, claim)
            body["status"] = {k: v for k, v in (body.get("status") or {}).items() if k != "allocation"}
            api.replace_claim_status(pin.namespace, claim, body)
        raise
    for pin in pins:
        api.patch_pod(pin.namespace, pin.pod, ungate_patch())
