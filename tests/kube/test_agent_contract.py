"""Contract tests: the node agent against the fake API server, and the scheduler reading what
it published."""

from __future__ import annotations

import threading

from kube.fakeapi import FakeApiServer
from kube.kubeobjs import pod, podgroup
from ringleader.engines.kubernetes import names
from ringleader.engines.kubernetes.agent import Found, publish, run_agent, smi_uuids
from ringleader.engines.kubernetes.client import Api, load_client
from ringleader.engines.kubernetes.objects import parse_topology
from ringleader.engines.kubernetes.scheduler import Scheduler
from ringleader.topology import preset
from ringleader.topology.node import EMPTY


def bare_node(name: str) -> dict:  # type: ignore[type-arg]
    """A node as kubelet registers it: no topology, no ringleader GPUs."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                       "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}  # fmt: skip


def test_contract_agent_publishes_topology_and_capacity_once(fake: FakeApiServer) -> None:
    fake.put("nodes", bare_node("gpu-0"))
    api = Api(load_client(host=fake.url))
    topo = preset("dgx1v")
    assert publish(api, "gpu-0", topo)
    writes = [(r.verb, r.path) for r in fake.requests if r.verb == "patch"]
    assert writes == [("patch", "/api/v1/nodes/gpu-0"), ("patch", "/api/v1/nodes/gpu-0/status")]
    stored = fake.get("nodes", "gpu-0")
    assert parse_topology(stored["metadata"]["annotations"][names.TOPOLOGY_ANNOTATION], "gpu-0") == topo
    assert stored["status"]["capacity"][names.GPU_RESOURCE] == "8"
    assert len(stored["metadata"]["annotations"][names.TOPOLOGY_ANNOTATION]) == 355  # the size docs/kubernetes.md gives
    # Nothing changed: no write at all.
    before = len(fake.calls("patch"))
    assert not publish(api, "gpu-0", topo)
    assert len(fake.calls("patch")) == before
    # The GPUs are gone (driver unloaded): the annotation is removed and the capacity is 0.
    assert publish(api, "gpu-0", EMPTY)
    stored = fake.get("nodes", "gpu-0")
    assert names.TOPOLOGY_ANNOTATION not in stored["metadata"]["annotations"]
    assert stored["status"]["capacity"][names.GPU_RESOURCE] == "0"


def test_contract_agent_loop_then_scheduler_places_on_published_topology(fake: FakeApiServer) -> None:
    fake.put("nodes", bare_node("gpu-0"))
    api = Api(load_client(host=fake.url))
    stop = threading.Event()
    looks = []

    def find() -> Found:
        looks.append(1)
        if len(looks) >= 2:
            stop.set()
        return Found(preset("dgx1v"), "test")

    run_agent(api, "gpu-0", interval=0.01, find=find, stop=stop)
    assert len(fake.calls("patch")) == 2  # two looks, one publication
    fake.put("podgroups", podgroup("pair", 2))
    for i in range(2):
        fake.put("pods", pod(f"pair-worker-{i}", gang="pair"))
    s = Scheduler(api, "s")
    s.sync()
    assert s.elector.try_acquire_or_renew()
    assert [r.ok for r in s.cycle()] == [True]
    ids = sorted(int(fake.get("pods", f"pair-worker-{i}")["metadata"]["annotations"][names.GPU_IDS_ANNOTATION])
                 for i in range(2))  # fmt: skip
    # Two GPUs joined by NV2 on a DGX-1V: the best pair the topology has.
    assert preset("dgx1v").links[ids[0]][ids[1]].nvlinks == 2


def test_contract_agent_publishes_gpu_uuids_in_index_order(fake: FakeApiServer) -> None:
    fake.put("nodes", bare_node("gpu-0"))
    api = Api(load_client(host=fake.url))
    uuids = tuple(f"GPU-{i:08x}-0000-0000-0000-000000000000" for i in range(8))
    assert publish(api, "gpu-0", preset("dgx1v"), uuids)
    annotations = fake.get("nodes", "gpu-0")["metadata"]["annotations"]
    assert annotations[names.GPU_UUIDS_ANNOTATION].split(",") == list(uuids)
    assert [r.verb for r in fake.requests if r.verb == "patch"] == ["patch", "patch"]  # both annotations in one
    assert not publish(api, "gpu-0", preset("dgx1v"), uuids)
    assert publish(api, "gpu-0", EMPTY)  # GPUs gone: no UUIDs either
    assert names.GPU_UUIDS_ANNOTATION not in fake.get("nodes", "gpu-0")["metadata"]["annotations"]


def test_uuids_from_nvidia_smi_listing() -> None:
    listing = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5a7c1d3e-1111-2222-3333-444455556666)\n"
               "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-9b8e2f4a-1111-2222-3333-444455556666)\n")  # fmt: skip
    assert smi_uuids(listing, 2) == ("GPU-5a7c1d3e-1111-2222-3333-444455556666",
                                     "GPU-9b8e2f4a-1111-2222-3333-444455556666")  # fmt: skip
    assert smi_uuids(listing, 3) == ()  # one GPU without a UUID: none trusted
    assert smi_uuids("GPU 0: NVIDIA A100 (UUID: GPU-abc)\n  MIG 1g.10gb Device 0: (UUID: MIG-x)\n", 1) == ("GPU-abc",)


def test_contract_agent_publishes_its_unhealthy_gpu_count_and_the_engine_reads_it(fake: FakeApiServer) -> None:
    from ringleader.engines.kubernetes.engine import EngineApi, KubernetesEngine, node_health

    fake.put("nodes", bare_node("gpu-0"))
    api = Api(load_client(host=fake.url))
    topo = preset("dgx1v")
    assert publish(api, "gpu-0", topo, unhealthy=0)
    assert fake.get("nodes", "gpu-0")["metadata"]["annotations"][names.GPUS_UNHEALTHY_ANNOTATION] == "0"
    assert not publish(api, "gpu-0", topo, unhealthy=0)  # unchanged: no write
    assert publish(api, "gpu-0", topo, unhealthy=2)  # a GPU lost its rows: written at the next look
    assert node_health(fake.get("nodes", "gpu-0")).unhealthy_gpus == 2
    assert publish(api, "gpu-0", topo, unhealthy=None)  # the agent cannot tell any more: n/a, not a stale 2
    assert node_health(fake.get("nodes", "gpu-0")).unhealthy_gpus is None
    engine = KubernetesEngine(EngineApi(load_client(host=fake.url)), "default")
    assert engine.node_health(names=["gpu-0"])["gpu-0"].status == "Ready"  # the keyword every engine takes
