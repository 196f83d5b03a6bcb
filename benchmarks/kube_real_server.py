"""ringleader's scheduler beside kube-scheduler on one real Kubernetes v1.36 control plane.

The control plane of the tests (tests/kube/realserver.py: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler from ../shared/kubernetes-1.36) with ringleader's install;
N nodes of 8 GPUs (``ringleader.io/gpu``, the agent's topology annotation). ringleader's scheduler
runs as its Deployment runs it (`ringleader kube scheduler --config`, 8 bind threads, under its
ServiceAccount's token); kube-scheduler as the cluster's default scheduler. The same single-GPU
pods go to one or the other by ``schedulerName``:

1. Stream: pods created one after another every ``--interval`` s; create-to-bind latency from
   just before each create request to the moment a watch of this script sees the pod's node
   (the same watch for both schedulers), median and p99.
2. Backlog: ``--backlog`` pods created while the scheduler is stopped, then the scheduler
   started; binds/s from the first bind seen to the last.

kube-scheduler runs at its defaults (client QPS 50, burst 100) and at ``--kube-api-qps 1000
--kube-api-burst 1000``; each phase's pods are deleted before the next.

    python benchmarks/kube_real_server.py [--nodes 125] [--stream-pods 300] [--interval 0.05]
        [--backlog 1000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the tests' control plane

from kube.kubeobjs import node
from kube.realserver import ControlPlane, control_plane, free_port, why_absent
from ringleader.engines.kubernetes import manifests, names

NAMESPACE = "bench"
KUBE_QPS_1000 = ("--kube-api-qps=1000", "--kube-api-burst=1000")


def pod(name: str, scheduler: str) -> dict[str, Any]:
    limits = {names.GPU_RESOURCE: "1", "cpu": "1", "memory": "1Gi"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {names.TOPOLOGY_LABEL: "true"}},
            "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0, "containers": [
                {"name": "main", "image": "busybox", "resources": {"limits": limits}}]}}  # fmt: skip


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class BindWatch:
    """The time this process sees each pod of the namespace bound (one watch, for both schedulers)."""

    def __init__(self, real: ControlPlane) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(real.client())
        self.bound: dict[str, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from kubernetes.watch.watch import iter_resp_lines

        version = ""
        while not self.stop.is_set():
            if not version:
                listed = json.loads(self.core.list_namespaced_pod(NAMESPACE, _preload_content=False).data)
                version = listed["metadata"]["resourceVersion"]
            resp = self.core.list_namespaced_pod(NAMESPACE, watch=True, resource_version=version, timeout_seconds=5,
                                                 allow_watch_bookmarks=True, _preload_content=False)  # fmt: skip
            for line in iter_resp_lines(resp):
                if not line:
                    continue
                event = json.loads(line)
                obj = event["object"]
                if event["type"] == "ERROR":
                    version = ""
                    break
                version = obj["metadata"]["resourceVersion"]
                if (obj.get("spec") or {}).get("nodeName"):
                    self.bound.setdefault(obj["metadata"]["name"], time.monotonic())

    def until_bound(self, names_: list[str], seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if all(n in self.bound for n in names_):
                return True
            time.sleep(0.05)
        return False


def clear(real: ControlPlane, watch: BindWatch) -> None:
    real.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods", query={"gracePeriodSeconds": "0"})
    real.until(lambda: not real.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods")["items"], "pods deleted", 300)
    watch.bound.clear()


def stream(real: ControlPlane, watch: BindWatch, scheduler: str, count: int, interval_s: float) -> dict[str, Any]:
    created: dict[str, float] = {}
    next_at = time.monotonic()
    for i in range(count):
        name = f"{scheduler[:4]}-s-{i:05d}"
        created[name] = time.monotonic()
        real.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod(name, scheduler))
        next_at += interval_s
        time.sleep(max(0.0, next_at - time.monotonic()))
    all_bound = watch.until_bound(list(created), 300)
    waits = [watch.bound[n] - t for n, t in created.items() if n in watch.bound]
    return {"pods": count, "bound": len(waits), "all_bound": all_bound, "median_s": round(pct(waits, 0.5), 3),
            "p99_s": round(pct(waits, 0.99), 3), "max_s": round(max(waits), 3)}  # fmt: skip


def backlog(real: ControlPlane, watch: BindWatch, scheduler: str, count: int,
            start: Any, stop: Any) -> dict[str, Any]:  # fmt: skip
    """``count`` pods created with the scheduler stopped; then ``start()``; binds/s first to last."""
    stop()
    made = [f"{scheduler[:4]}-b-{i:05d}" for i in range(count)]
    for name in made:
        real.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod(name, scheduler))
    started = time.monotonic()
    start()
    all_bound = watch.until_bound(made, 600)
    times = sorted(watch.bound[n] for n in made if n in watch.bound)
    span = times[-1] - times[0] if len(times) > 1 else float("nan")
    return {"pods": count, "bound": len(times), "all_bound": all_bound,
            "binds_per_s": round((len(times) - 1) / span) if span == span and span > 0 else None,
            "first_bind_after_start_s": round(times[0] - started, 2) if times else None,
            "last_bind_after_start_s": round(times[-1] - started, 2) if times else None}  # fmt: skip


class Ringleader:
    """`ringleader kube scheduler` as its Deployment runs it, as a process of its own."""

    def __init__(self, real: ControlPlane, folder: Path) -> None:
        token = real.service_account_token(names.SYSTEM_NAMESPACE, manifests.SCHEDULER_ACCOUNT, 36000)
        self.env = {**os.environ, "KUBECONFIG": str(real.kubeconfig("ringleader-scheduler", token=token)),
                    "RINGLEADER_HOME": str(folder)}  # fmt: skip
        self.config = folder / "scheduler.yaml"
        self.config.write_text("leaseSeconds: 15\nbindThreads: 8\n")
        self.log = folder / "ringleader-scheduler.log"
        self.real = real
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("a") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "ringleader.cli.main", "kube", "scheduler", "--config",
                                          str(self.config), "--identity", "bench", "--metrics-port", str(free_port())],
                                         stdout=subprocess.DEVNULL, stderr=err, env=self.env)  # fmt: skip
        lease = f"/apis/coordination.k8s.io/v1/namespaces/{names.SYSTEM_NAMESPACE}/leases/{names.LEASE_NAME}"
        self.real.until(lambda: ((self.real.get(lease) or {}).get("spec") or {}).get("holderIdentity") == "bench",
                        "ringleader's scheduler leading", 120)  # fmt: skip

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(60)
        self.proc = None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=125)
    parser.add_argument("--stream-pods", type=int, default=300)
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between stream creates")
    parser.add_argument("--backlog", type=int, default=1000)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    why = why_absent()
    if why:
        sys.exit(f"error: {why}")
    report: dict[str, Any] = {"cpus": os.cpu_count(), "load_avg_before": os.getloadavg(), "nodes": args.nodes}
    with tempfile.TemporaryDirectory(prefix="ringleader-bench-") as tmp, \
            control_plane(Path(tmp) / "plane", kube_scheduler=True, install=manifests.install(replicas=0)) as real:
        report["control_plane_start_s"] = round(real.started_s, 1)
        real.namespace(NAMESPACE)
        for i in range(args.nodes):
            real.add_node(node(f"node-{i:04d}"))
        watch = BindWatch(real)
        ours = Ringleader(real, Path(tmp))
        ours.start()

        def kube_scheduler(*flags: str) -> None:
            real.stop_process("kube-scheduler")
            real.start_kube_scheduler(*flags)

        for label, start in (("kube-scheduler default", lambda: kube_scheduler()),
                             ("kube-scheduler QPS 1000", lambda: kube_scheduler(*KUBE_QPS_1000))):  # fmt: skip
            start()
            time.sleep(3)  # its informers synced
            report[f"stream {label}"] = stream(real, watch, "default-scheduler", args.stream_pods, args.interval)
            clear(real, watch)
            report[f"backlog {label}"] = backlog(real, watch, "default-scheduler", args.backlog, start,
                                                 lambda: real.stop_process("kube-scheduler"))  # fmt: skip
            clear(real, watch)
        report["stream ringleader"] = stream(real, watch, names.SCHEDULER_NAME, args.stream_pods, args.interval)
        clear(real, watch)
        report["backlog ringleader"] = backlog(real, watch, names.SCHEDULER_NAME, args.backlog, ours.start, ours.stop)
        ours.stop()
        watch.stop.set()
    report["load_avg_after"] = os.getloadavg()
    print(json.dumps(report, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
