"""The scheduler's Prometheus metrics (text exposition format 0.0.4) and its /healthz, served
by a small threaded HTTP server: no dependency beyond the standard library."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Decision latency buckets (seconds): a gang decision takes milliseconds; 10 ms is the target.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.decisions = {"scheduled": 0, "unschedulable": 0, "unresolvable": 0}
        self.binds = {"ok": 0, "error": 0}
        self.rollbacks = 0
        self.relists = 0
        self.pending_gangs = 0
        self.reserved_gangs = 0
        self.leader = 0
        self._counts = [0] * (len(BUCKETS) + 1)
        self._sum = 0.0

    def decided(self, result: str, seconds: float) -> None:
        with self._lock:
            self.decisions[result] = self.decisions.get(result, 0) + 1
            self._counts[bisect.bisect_left(BUCKETS, seconds)] += 1
            self._sum += seconds

    def bound(self, ok: bool) -> None:
        with self._lock:
            self.binds["ok" if ok else "error"] += 1

    def rolled_back(self) -> None:
        with self._lock:
            self.rollbacks += 1

    def render(self) -> str:
        with self._lock:
            out = [
                "# HELP ringleader_gang_decisions_total Gang decisions by result.",
                "# TYPE ringleader_gang_decisions_total counter",
                *(f'ringleader_gang_decisions_total{{result="{k}"}} {v}' for k, v in self.decisions.items()),
                "# HELP ringleader_gang_decision_seconds Time of one gang decision, API calls excluded.",
                "# TYPE ringleader_gang_decision_seconds histogram",
            ]
            cumulative = 0
            for bound, count in zip((*map(str, BUCKETS), "+Inf"), self._counts, strict=True):
                cumulative += count
                out.append(f'ringleader_gang_decision_seconds_bucket{{le="{bound}"}} {cumulative}')
            out += [
                f"ringleader_gang_decision_seconds_sum {self._sum:.6f}",
                f"ringleader_gang_decision_seconds_count {cumulative}",
                "# HELP ringleader_pending_gangs Gangs waiting at the end of the last cycle.",
                "# TYPE ringleader_pending_gangs gauge",
                f"ringleader_pending_gangs {self.pending_gangs}",
                "# HELP ringleader_reserved_gangs Waiting gangs holding a reservation of the GPUs they will take.",
                "# TYPE ringleader_reserved_gangs gauge",
                f"ringleader_reserved_gangs {self.reserved_gangs}",
                "# HELP ringleader_binds_total Pod bindings posted, by result.",
                "# TYPE ringleader_binds_total counter",
                *(f'ringleader_binds_total{{result="{k}"}} {v}' for k, v in self.binds.items()),
                "# HELP ringleader_gang_rollbacks_total Gangs undone after a failed bind.",
                "# TYPE ringleader_gang_rollbacks_total counter",
                f"ringleader_gang_rollbacks_total {self.rollbacks}",
                "# HELP ringleader_relists_total Relists after a watch expired (410 Gone).",
                "# TYPE ringleader_relists_total counter",
                f"ringleader_relists_total {self.relists}",
                "# HELP ringleader_leader 1 while this replica holds the Lease.",
                "# TYPE ringleader_leader gauge",
                f"ringleader_leader {self.leader}",
            ]
        return "\n".join(out) + "\n"


def serve(metrics: Metrics, problem: Callable[[], str], host: str, port: int) -> ThreadingHTTPServer:
    """Serve /metrics and /healthz on a daemon thread; returns the server (``server_port`` is
    the bound port when ``port`` was 0). /healthz is 503 with ``problem()``'s words while it
    names one (informers not synced, or stalled: a liveness probe then restarts the scheduler)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                self._reply(200, metrics.render(), "text/plain; version=0.0.4; charset=utf-8")
            elif self.path in ("/healthz", "/livez", "/readyz"):
                why = problem()
                self._reply(503 if why else 200, f"{why}\n" if why else "ok\n", "text/plain")
            else:
                self._reply(404, "not found\n", "text/plain")

        def _reply(self, code: int, body: str, kind: str) -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # scrapes every few seconds: quiet
            del format, args

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
