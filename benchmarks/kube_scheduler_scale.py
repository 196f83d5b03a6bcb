"""The Kubernetes scheduler at scale: gang decisions over its cache, then end to end against a
fake API server.

1. Decisions, API calls excluded: a cache of 5,000 nodes x 8 V100 (preset dgx1v, every node
   labelled ack.node.gpu.schedule=topology, agent topology annotation, 96 CPUs, 768 GiB) and
   1,000 pending gangs of 8 pods x 1 GPU (a PodGroup each, --gputopology). Each gang is decided
   by the queue's cycle (Kubernetes filters around ``place()``: ``decide.Members``) and assumed in
   the cache, as the scheduler's cycle does before it writes anything. Two clusters: all GPUs free, and half of
   them held at random by running single-GPU pods (fragmented free masks). Reported: pods placed
   per second over the whole queue, and p50/p99/max of one gang's decision + assume.
   Decisions go through the shared queue (``run_cycle``, one gang at a time, to time each). Both clusters again
   WITH levels: every node labelled with Kueue's example keys (cloud.provider.com/topology-rack,
   racks of 32 nodes; cloud.provider.com/topology-block, blocks of 16 racks), so the cache
   builds the network tree from the labels and ``place()`` counts racks and blocks too;
   reported beside them: gangs inside one rack.
2. End to end: the scheduler process against the tests' fake API server over real HTTP with the
   official client (one Binding per pod carrying its GPU ids, one Event per pod), and the bare
   request rate of that client and server (a GET in a loop) to say what bounds it. The fake
   counts every request it serves: writes per pod are counted there, not assumed.

    python benchmarks/kube_scheduler_scale.py [--nodes 5000] [--gangs 1000] [--e2e-gangs 100] [--only e2e]
        [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the contract tests' fake API server

from ringleader.engines.kubernetes import names
from ringleader.engines.kubernetes.cache import Cache
from ringleader.engines.kubernetes.decide import Members
from ringleader.engines.kubernetes.objects import topology_annotation
from ringleader.scheduler import BackfillConfig, Snapshot, run_cycle
from ringleader.topology import preset

TOPOLOGY = topology_annotation(preset("dgx1v"))


RACK_NODES, BLOCK_RACKS = 32, 16
RACK_KEY, BLOCK_KEY = "cloud.provider.com/topology-rack", "cloud.provider.com/topology-block"


def node(i: int, levels: bool = False) -> dict[str, Any]:
    alloc = {"cpu": "96", "memory": "768Gi", "pods": "110", names.GPU_RESOURCE: "8"}
    labels = {"ack.node.gpu.schedule": "topology"}
    if levels:
        rack = i // RACK_NODES
        labels |= {RACK_KEY: f"rack-{rack:03d}", BLOCK_KEY: f"block-{rack // BLOCK_RACKS:02d}"}
    return {"metadata": {"name": f"node-{i:05d}", "labels": labels,
                         "annotations": {names.TOPOLOGY_ANNOTATION: TOPOLOGY}},
            "spec": {}, "status": {"allocatable": alloc, "capacity": alloc,
                                   "conditions": [{"type": "Ready", "status": "True"}]}}  # fmt: skip


def pod(name: str, gang: str | None, node_name: str | None = None, gpu: int | None = None) -> dict[str, Any]:
    labels = {names.TOPOLOGY_LABEL: "true", **({names.PODGROUP_LABEL: gang} if gang else {})}
    meta: dict[str, Any] = {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": labels,
                            "creationTimestamp": "2026-11-23T10:00:00Z"}  # fmt: skip
    spec: dict[str, Any] = {"schedulerName": names.SCHEDULER_NAME, "containers": [
        {"name": "w", "image": "x", "resources": {"limits": {names.GPU_RESOURCE: "1", "cpu": "4", "memory": "16Gi"}}}]}
    if node_name is not None:
        spec["nodeName"] = node_name
        meta["annotations"] = {names.GPU_IDS_ANNOTATION: str(gpu)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": "Running" if node_name else "Pending"}}  # fmt: skip


def gangs(count: int, size: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    groups = [{"metadata": {"name": f"job-{g}", "namespace": "default"}, "spec": {"minMember": size}}
              for g in range(count)]  # fmt: skip
    pods = [pod(f"job-{g}-worker-{w}", f"job-{g}") for g in range(count) for w in range(size)]
    return groups, pods


def busy_pods(nodes: int, rng: random.Random) -> list[dict[str, Any]]:
    slots = [(n, g) for n in range(nodes) for g in range(8)]
    return [pod(f"busy-{n}-{g}", None, f"node-{n:05d}", g) for n, g in rng.sample(slots, len(slots) // 2)]


def pct(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def bench_decisions(n_nodes: int, n_gangs: int, size: int, half_busy: bool, seed: int,
                    levels: bool = False) -> dict[str, Any]:  # fmt: skip
    rng = random.Random(seed)
    groups, pending = gangs(n_gangs, size)
    cache = Cache()
    started = time.perf_counter()
    cache.replace("nodes", [node(i, levels) for i in range(n_nodes)])
    cache.replace("podgroups", groups)
    cache.replace("pods", pending + (busy_pods(n_nodes, rng) if half_busy else []))
    _ = cache.state
    load_s = time.perf_counter() - started
    queue = cache.gangs()
    config = BackfillConfig()
    latencies, cpu, placed, failed = [], [], 0, 0
    started = time.perf_counter()
    for gang in queue:
        t0, c0 = time.perf_counter(), time.thread_time()
        members = Members(cache)  # a gang that starts is assumed in the cache at once
        cycle = run_cycle(Snapshot(cache.state, [members.waiting(gang, 0)], time.time(), config=config))
        outcome = members.outcome(cycle.nominated[0])
        latencies.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
        placed += len(outcome.assignments)
        failed += not outcome.ok
    total = time.perf_counter() - started
    latencies.sort()
    cpu.sort()
    single_node = sum(1 for g in queue if len({cache.assumed[p.key].node for p in g.pending}) == 1)
    one_rack = sum(1 for g in queue if len({int(cache.assumed[p.key].node[5:]) // RACK_NODES for p in g.pending}) == 1)
    assert not levels or (cache.tree is not None and len(cache.tree.levels) == 2), "no tree from the labels"
    cluster = "half the GPUs busy (random)" if half_busy else "all GPUs free"
    return {
        "cluster": cluster + (", racks of 32 in blocks of 16 (labels)" if levels else ""),
        "gangs_in_one_rack": one_rack,
        "nodes": n_nodes, "gangs": len(queue), "pods_placed": placed, "gangs_failed": failed,
        "gangs_on_one_node": single_node, "cache_load_s": round(load_s, 2), "total_s": round(total, 3),
        "pods_per_s": round(placed / total), "p50_ms": round(pct(latencies, 0.5) * 1e3, 3),
        "p99_ms": round(pct(latencies, 0.99) * 1e3, 3), "max_ms": round(latencies[-1] * 1e3, 3),
        # CPU time of the deciding thread: what the decision costs, without the waits for a core
        # that a loaded machine adds to the wall-clock numbers (multiples of the 4 ms tick).
        "cpu_p50_ms": round(pct(cpu, 0.5) * 1e3, 3), "cpu_p99_ms": round(pct(cpu, 0.99) * 1e3, 3),
        "cpu_pods_per_s": round(placed / sum(cpu)),
    }  # fmt: skip


def _serve_fake(port_out: Any, stop: Any, counts_out: Any, watch_delay_s: float = 0.0) -> None:
    """The fake API server in its own process, so its request handling does not share the
    scheduler's interpreter lock. At the end it reports how many requests of each kind it
    served: (verb, resource) -> count, and when each pod was created and bound."""
    from collections import Counter

    from kube.fakeapi import FakeApiServer

    fake = FakeApiServer(watch_delay_s).start()
    port_out.put(fake.server.server_port)
    stop.wait()
    counts: Counter[str] = Counter()
    created, bound = {}, {}
    for r in fake.requests:
        resource = r.path.split("?")[0].rstrip("/").split("/")
        named = [p for p in resource if p in ("pods", "nodes", "podgroups", "events", "leases", "binding", "status")]
        counts[f"{r.verb} {'/'.join(named[-2:]) if named else r.path}"] += 1
        if r.verb == "create" and resource[-1] == "pods":
            created[r.body["metadata"]["name"]] = r.at
        elif r.verb == "bind":
            bound[resource[-2]] = r.at
    counts_out.put({"counts": dict(counts), "created": created, "bound": bound})
    fake.stop()


def bench_end_to_end(n_nodes: int, n_gangs: int, size: int, events: bool, writers: int) -> dict[str, Any]:
    import multiprocessing

    from ringleader.engines.kubernetes.client import Api, load_client
    from ringleader.engines.kubernetes.scheduler import Scheduler

    ctx = multiprocessing.get_context("fork")
    port_q, stop, counts_q = ctx.Queue(), ctx.Event(), ctx.Queue()
    server = ctx.Process(target=_serve_fake, args=(port_q, stop, counts_q), daemon=True)
    server.start()
    try:
        api = Api(load_client(host=f"http://127.0.0.1:{port_q.get(timeout=30)}"))
        # Every setup response is read: a create whose response is left unread may not have
        # happened yet when the scheduler lists (and leaves a connection behind).
        for i in range(n_nodes):
            api._json(api.core.create_node, node(i))
            # Registered with the not-ready taint; the node lifecycle controller lifts it.
            api._json(api.core.patch_node, f"node-{i:05d}", {"spec": {"taints": []}})
        groups, pending = gangs(n_gangs, size)
        for g in groups:
            api._json(api.custom.create_namespaced_custom_object, names.PODGROUP_GROUP, names.PODGROUP_VERSION,
                      "default", names.PODGROUP_PLURAL, g)  # fmt: skip
        for p in pending:
            api._json(api.core.create_namespaced_pod, "default", p)
        t0 = time.perf_counter()
        for _ in range(200):
            api.read_lease("default", "absent")  # a 404 GET: one bare round trip
        bare = 200 / (time.perf_counter() - t0)
        sched = Scheduler(api, "bench", lease_seconds=3600, events=events, writers=writers)  # no renewals mid-run
        sched.reports_async = True  # as the daemon runs: Events and PodGroup status off the bind path
        sched.sync()
        assert sched.elector.try_acquire_or_renew()
        t0 = time.perf_counter()
        results = sched.cycle()
        elapsed = time.perf_counter() - t0
        sched.flush_reports()
        everything = time.perf_counter() - t0
        binds = sched.metrics.binds["ok"]
        stop.set()
        counts = counts_q.get(timeout=60)["counts"]
        # Everything the cycle wrote (the setup's creates and the lease excluded).
        cycle = {k: v for k, v in counts.items()
                 if k.split()[0] in ("bind", "patch", "create", "delete") and not k.endswith(("leases", "nodes"))
                 and not (k.startswith("create") and k.split()[1] in ("pods", "podgroups"))}  # fmt: skip
        requests = sum(cycle.values())
        pod_writes = sum(v for k, v in cycle.items() if k.split()[1].startswith("pods"))
        return {
            "nodes": n_nodes, "gangs": n_gangs, "pods": n_gangs * size, "events": events, "writers": writers,
            "binds": binds, "elapsed_s": round(elapsed, 2), "binds_per_s": round(binds / elapsed),
            "all_written_s": round(everything, 2),
            "requests": requests, "requests_per_s": round(requests / everything), "bare_get_per_s": round(bare),
            "pod_writes_per_pod": round(pod_writes / max(binds, 1), 2), "writes": cycle,
            "all_bound": len(results) == n_gangs and all(r.ok for r in results),
            "decided_gangs": len(results), "failed": sorted({r.error for r in results if not r.ok})[:3],
        }  # fmt: skip
    finally:
        stop.set()
        server.join(10)


def bench_stream(n_nodes: int, n_pods: int, interval_s: float, watch_delay_s: float) -> dict[str, Any]:
    """Create-to-bind latency on a stream: the scheduler's daemon loop (``run``: informers,
    cycles, 8 bind threads, reports off the bind path) against the fake in its own process,
    whose watches deliver each change ``watch_delay_s`` late; single-GPU pods created one after
    another every ``interval_s``. The latency is the fake's own clock from a pod's create request
    to its Binding request."""
    import multiprocessing
    import threading

    from ringleader.engines.kubernetes.client import Api, load_client
    from ringleader.engines.kubernetes.scheduler import Scheduler

    ctx = multiprocessing.get_context("fork")
    port_q, stop, counts_q = ctx.Queue(), ctx.Event(), ctx.Queue()
    server = ctx.Process(target=_serve_fake, args=(port_q, stop, counts_q, watch_delay_s), daemon=True)
    server.start()
    try:
        url = f"http://127.0.0.1:{port_q.get(timeout=30)}"
        api = Api(load_client(host=url))
        for i in range(n_nodes):
            api._json(api.core.create_node, node(i))
            api._json(api.core.patch_node, f"node-{i:05d}", {"spec": {"taints": []}})
        sched = Scheduler(Api(load_client(host=url)), "bench", lease_seconds=3600, writers=8)
        daemon = threading.Thread(target=sched.run, kwargs={"watch_timeout": 60}, daemon=True)
        daemon.start()
        deadline = time.monotonic() + 60
        while not (sched.synced and sched.elector.leading) and time.monotonic() < deadline:
            time.sleep(0.05)
        next_at = time.monotonic()
        for i in range(n_pods):
            api._json(api.core.create_namespaced_pod, "default", pod(f"stream-{i:05d}", None))
            next_at += interval_s
            time.sleep(max(0.0, next_at - time.monotonic()))
        deadline = time.monotonic() + 120
        while sched.metrics.binds["ok"] < n_pods and time.monotonic() < deadline:
            time.sleep(0.05)
        sched.stop()
        daemon.join(60)
        stop.set()
        seen = counts_q.get(timeout=60)
        waits = sorted(seen["bound"][n] - at for n, at in seen["created"].items() if n in seen["bound"])
        return {
            "nodes": n_nodes, "pods": n_pods, "interval_s": interval_s, "watch_delay_s": watch_delay_s,
            "bound": len(waits), "median_s": round(pct(waits, 0.5), 3), "p99_s": round(pct(waits, 0.99), 3),
            "max_s": round(waits[-1], 3) if waits else None,
        }  # fmt: skip
    finally:
        stop.set()
        server.join(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--gangs", type=int, default=1000)
    parser.add_argument("--size", type=int, default=8, help="pods per gang (1 GPU each)")
    parser.add_argument("--e2e-nodes", type=int, default=500)
    parser.add_argument("--e2e-gangs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", default=None)
    parser.add_argument("--only", choices=("decisions", "e2e", "stream"), default=None)
    parser.add_argument("--stream-nodes", type=int, default=125)
    parser.add_argument("--stream-pods", type=int, default=1000)
    parser.add_argument("--stream-interval", type=float, default=0.05, help="seconds between pod creates")
    parser.add_argument("--watch-delay", type=float, default=0.02, help="seconds a watch event takes")
    args = parser.parse_args()
    if args.only == "stream":
        result = bench_stream(args.stream_nodes, args.stream_pods, args.stream_interval, args.watch_delay)
        result["load_avg"] = os.getloadavg()
        print(json.dumps(result))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2))
        return
    report: dict[str, Any] = {
        "python": platform.python_version(), "cpus": os.cpu_count(), "load_avg": os.getloadavg(),
        "decisions": [bench_decisions(args.nodes, args.gangs, args.size, half, args.seed, levels)
                      for levels in (False, True) for half in (False, True)] if args.only != "e2e" else [],
        "end_to_end": [bench_end_to_end(args.e2e_nodes, args.e2e_gangs, args.size, ev, w)
                       for ev in (True, False) for w in (1, 8)] if args.only != "decisions" else [],
    }  # fmt: skip
    report["load_avg_after"] = os.getloadavg()
    print("| cluster | gangs | pods placed | pods/s wall | p50 / p99 / max ms wall | pods/s CPU | p50 / p99 ms CPU "
          "| gangs on one node | gangs in one rack | cache load s |")
    print("|---|---:|---:|---:|---|---:|---|---:|---:|---:|")
    for d in report["decisions"]:
        print(f"| {d['cluster']} | {d['gangs']} | {d['pods_placed']} | {d['pods_per_s']:,} | {d['p50_ms']} / "
              f"{d['p99_ms']} / {d['max_ms']} | {d['cpu_pods_per_s']:,} | {d['cpu_p50_ms']} / {d['cpu_p99_ms']} | "
              f"{d['gangs_on_one_node']} | {d['gangs_in_one_rack']} | {d['cache_load_s']} |")  # fmt: skip
    print()
    print("| events | bind threads | pods | binds/s | all bound in s | all written in s | requests | requests/s "
          "| bare GET/s | pod writes/pod | all bound |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for e in report["end_to_end"]:
        print(f"| {'on' if e['events'] else 'off'} | {e['writers']} | {e['pods']} | {e['binds_per_s']} | "
              f"{e['elapsed_s']} | {e['all_written_s']} | {e['requests']} | {e['requests_per_s']} | "
              f"{e['bare_get_per_s']} | {e['pod_writes_per_pod']} | {e['all_bound']} |")  # fmt: skip
    for e in report["end_to_end"][:1]:
        print(f"requests the first cycle wrote: {e['writes']}")
    print(f"\nload average before {report['load_avg']}, after {report['load_avg_after']}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
