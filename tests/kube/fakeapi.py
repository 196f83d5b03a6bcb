"""A fake Kubernetes API server for contract tests: real HTTP on localhost, the REST paths and
JSON shapes the official client sends and expects, one in-memory store with a global
resourceVersion and an event log for watches. It records every request, so tests assert the
exact calls; faults are injected per call (a bind refused, a watch's version expired).

It is a fake: no admission, no validation beyond what the tests need, no server-side apply.
"""

from __future__ import annotations

import copy
import json
import re
import socket
import sys
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$"
)
CLUSTER_SCOPED = {"nodes", "namespaces", "resourceslices"}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    user: str = ""  # the bearer token, "" when none

    @property
    def verb(self) -> str:
        """kubectl-like verb: list, watch, get, create, patch, update, delete, bind."""
        if self.method == "GET":
            if self.query.get("watch") in ("true", "1"):
                return "watch"
            return "get" if _PATH.match(self.path) and _PATH.match(self.path).group("name") else "list"  # type: ignore[union-attr]
        if self.path.endswith("/binding"):
            return "bind"
        return {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}[self.method]


def merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 JSON merge patch (what strategic merge does for maps), plus strategic merge's
    ``{"$patch": "delete", "name": N}`` in a list merged by name (pods' schedulingGates)."""
    for key, value in patch.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) and v.get("$patch") == "delete"
                                                     for v in value):  # fmt: skip
            gone = {v.get("name") for v in value}
            target[key] = [v for v in target.get(key) or () if v.get("name") not in gone]
            if not target[key]:
                target.pop(key)
        elif value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


class FakeApiServer:
    def __init__(self) -> None:
        self.users: dict[str, list[Rule]] = {}  # bearer token -> rules; none: no authorization
        self.lock = threading.Lock()
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (plural, ns, name) -> obj
        self.log: list[tuple[int, str, str, str, dict[str, Any]]] = []  # (rv, plural, ns, type, obj)
        self.version = 100
        self.expired_below = 0  # watches from an older version get 410 Gone
        self.requests: list[Request] = []
        self.fail: dict[tuple[str, str], int] = {}  # (verb, name) -> HTTP status to answer once
        self.pod_logs: dict[str, str] = {}
        self.server = _QuietServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def grant(self, token: str, rules: list[Rule]) -> None:
        """Register a user (its bearer token) with RBAC rules; from then on every request is
        authorized: 401 without a known token, 403 outside the user's rules."""
        self.users[token] = list(rules)

    def start(self) -> FakeApiServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- the store --------------------------------------------------------------------------------------
    def put(self, plural: str, obj: dict[str, Any], event: str | None = None) -> dict[str, Any]:
        with self.lock:
            return self._put(plural, obj, event)

    def _put(self, plural: str, obj: dict[str, Any], event: str | None = None) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        ns = "" if plural in CLUSTER_SCOPED else meta.setdefault("namespace", "default")
        key = (plural, ns, meta["name"])
        self.version += 1
        meta["resourceVersion"] = str(self.version)
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta.setdefault("creationTimestamp", "2026-11-23T10:00:00Z")
        kind = event or ("MODIFIED" if key in self.objects else "ADDED")
        self.objects[key] = obj
        self.log.append((self.version, plural, ns, kind, copy.deepcopy(obj)))
        return obj

    def remove(self, plural: str, ns: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            obj = self.objects.pop((plural, ns, name), None)
            if obj is not None:
                self.version += 1
                obj["metadata"]["resourceVersion"] = str(self.version)
                self.log.append((self.version, plural, ns, "DELETED", copy.deepcopy(obj)))
            return obj

    def get(self, plural: str, name: str, ns: str = "") -> dict[str, Any] | None:
        return self.objects.get((plural, "" if plural in CLUSTER_SCOPED else ns or "default", name))

    def expire(self) -> None:
        """Compact history: any watch from a version before now answers 410 Gone."""
        with self.lock:
            self.expired_below = self.version + 1

    def calls(self, *verbs: str, plural: str | None = None) -> list[Request]:
        out = [r for r in self.requests if not verbs or r.verb in verbs]
        return [r for r in out if plural is None or f"/{plural}" in r.path]

    # -- HTTP ---------------------------------------------------------------------------------------------
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # Headers and body leave in separate writes: without this, Nagle's algorithm and
                # the client's delayed ACK add ~40 ms to every response.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, format: str, *args: object) -> None:
                del format, args

            def _body(self) -> Any:
                size = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(size) if size else b""
                return json.loads(raw) if raw else None

            def _send(self, code: int, body: Any, kind: str = "application/json") -> None:
                data = (body if isinstance(body, str) else json.dumps(body)).encode()
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _status(self, code: int, message: str, reason: str = "") -> None:
                self._send(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                                  "reason": reason, "code": code})  # fmt: skip

            def _serve(self, method: str) -> None:
                url = urlparse(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                body = self._body() if method in ("POST", "PUT", "PATCH", "DELETE") else None
                auth = self.headers.get("Authorization") or ""
                token = auth[len("Bearer "):] if auth.startswith("Bearer ") else ""
                request = Request(method, url.path, query, body, token)
                with fake.lock:
                    fake.requests.append(request)
                    target = (_PATH.match(url.path) or _EMPTY).group("name") or ""
                    injected = fake.fail.pop((request.verb, target), None)
                users = dict(fake.users)
                if users and request.user not in users:
                    self._status(401, "Unauthorized", "Unauthorized")
                    return
                if users and not permitted(request, users[request.user]):
                    self._status(403, forbidden(request, request.user), "Forbidden")
                    return
                if injected:
                    self._status(injected, f"injected failure {injected}", "InternalError")
                    return
                match = _PATH.match(url.path)
                if not match:
                    self._status(404, f"no route {url.path}")
                    return
                fake._route(self, request, match)

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def do_PUT(self) -> None:
                self._serve("PUT")

            def do_PATCH(self) -> None:
                self._serve("PATCH")

            def do_DELETE(self) -> None:
                self._serve("DELETE")

        return Handler

    def _route(self, h: Any, req: Request, m: re.Match[str]) -> None:
        plural, name, sub = m.group("plural"), m.group("name"), m.group("sub")
        ns = "" if plural in CLUSTER_SCOPED else (m.group("ns") or "")
        if req.method == "GET" and name is None:
            return self._list_or_watch(h, req, plural, ns)
        if req.method == "GET" and sub == "log":
            return h._send(200, self.pod_logs.get(f"{ns}/{name}", ""), "text/plain")
        with self.lock:
            key = (plural, ns, name or "")
            obj = self.objects.get(key)
            if req.method == "GET":
                return h._send(200, obj) if obj else h._status(404, f'{plural} "{name}" not found', "NotFound")
            if req.method == "POST" and sub == "binding":
                if obj is None:
                    return h._status(404, f'pods "{name}" not found', "NotFound")
                if obj["spec"].get("nodeName"):
                    return h._status(409, f"pod {name} is already assigned to node", "Conflict")
                bound_uid = (req.body.get("metadata") or {}).get("uid")
                if bound_uid and bound_uid != obj["metadata"]["uid"]:
                    return h._status(409, f"pod {name}: uid precondition failed", "Conflict")
                obj["spec"]["nodeName"] = req.body["target"]["name"]
                # As the API server's BindingREST: the Binding's annotations land on the pod with the node.
                notes = (req.body.get("metadata") or {}).get("annotations") or {}
                if notes:
                    obj["metadata"].setdefault("annotations", {}).update(notes)
                self._put(plural, obj)
                return h._send(201, {"kind": "Status", "status": "Success", "code": 201})
            if req.method == "POST":
                new = copy.deepcopy(req.body)
                meta = new.setdefault("metadata", {})
                if not meta.get("name") and meta.get("generateName"):
                    meta["name"] = f"{meta['generateName']}{self.version:x}"
                if plural not in CLUSTER_SCOPED:
                    meta["namespace"] = ns or meta.get("namespace") or "default"
                if (plural, "" if plural in CLUSTER_SCOPED else meta["namespace"], meta["name"]) in self.objects:
                    return h._status(409, f'{plural} "{meta["name"]}" already exists', "AlreadyExists")
                return h._send(201, self._put(plural, new))
            if obj is None:
                return h._status(404, f'{plural} "{name}" not found', "NotFound")
            if req.method == "PUT":
                if req.body["metadata"].get("resourceVersion") != obj["metadata"]["resourceVersion"]:
                    return h._status(409, "the object has been modified", "Conflict")
                return h._send(200, self._put(plural, copy.deepcopy(req.body)))
            if req.method == "PATCH":
                patch = req.body if sub != "status" else {"status": req.body.get("status")}
                spec_patch = patch.get("spec") or {}
                # As the API server: a pod's node affinity and selector change only while it is gated.
                if plural == "pods" and ({"affinity", "nodeSelector"} & set(spec_patch)) and not obj["spec"].get(
                        "schedulingGates"):  # fmt: skip
                    return h._status(422, f'Pod "{name}" is invalid: spec: Forbidden: pod updates may not change '
                                          "fields other than ... (node affinity only while scheduling gates remain)",
                                     "Invalid")  # fmt: skip
                return h._send(200, self._put(plural, merge(obj, patch)))
            if req.method == "DELETE":
                pre = ((req.body or {}).get("preconditions") or {}).get("uid")
                if pre and pre != obj["metadata"]["uid"]:
                    return h._status(409, "uid precondition failed", "Conflict")
        gone = self.remove(plural, ns, name or "")
        return h._send(200, gone)

    def _list_or_watch(self, h: Any, req: Request, plural: str, ns: str) -> None:
        selector = req.query.get("labelSelector", "")
        wanted = dict(p.split("=", 1) for p in selector.split(",") if "=" in p)

        def visible(obj_ns: str, obj: dict[str, Any]) -> bool:
            labels = obj.get("metadata", {}).get("labels") or {}
            return (not ns or obj_ns == ns) and all(labels.get(k) == v for k, v in wanted.items())

        with self.lock:
            if req.verb != "watch":
                items = [copy.deepcopy(o) for (p, o_ns, _), o in self.objects.items()
                         if p == plural and visible(o_ns, o)]  # fmt: skip
                return h._send(200, {"kind": "List", "apiVersion": "v1", "items": items,
                                     "metadata": {"resourceVersion": str(self.version)}})  # fmt: skip
            since = int(req.query.get("resourceVersion") or 0)
            if since < self.expired_below - 1:
                lines = [{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                                      "message": f"too old resource version: {since}"}}]  # fmt: skip
            else:
                lines = [{"type": t, "object": o} for rv, p, o_ns, t, o in self.log
                         if p == plural and rv > since and visible(o_ns, o)]  # fmt: skip
        # The watch ends after what has happened so far (a real one waits for more until its
        # timeoutSeconds): tests step the informers deterministically.
        text = "".join(json.dumps(line) + "\n" for line in lines)
        h._send(200, text)


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that closes a kept-alive connection is normal, not a traceback."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


_EMPTY = re.compile("(?P<name>)").match("")


# -- RBAC: the API server's authorizer, once users are registered (``grant``) ------------------------

Rule = tuple[dict[str, Any], str | None]  # an RBAC rule and the namespace it applies in (None: all)


def permitted(request: Request, rules: list[Rule]) -> bool:
    """Whether RBAC ``rules`` allow ``request`` (a Binding is a create of pods/binding)."""
    m = _PATH.match(request.path)
    if not m:
        return False
    resource = m["plural"] + (f"/{m['sub']}" if m["sub"] else "")
    verb = "create" if request.verb == "bind" else request.verb
    for rule, namespace in rules:
        if namespace is not None and m["ns"] != namespace:
            continue
        if (m["group"] or "") in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]:
            names_allowed = rule.get("resourceNames")
            if not names_allowed or m["name"] in names_allowed:
                return True
    return False


def forbidden(request: Request, user: str) -> str:
    """The API server's wording of a 403."""
    m = _PATH.match(request.path)
    if not m:
        return f'User "{user}" cannot {request.verb} {request.path}'
    resource = m["plural"] + (f"/{m['sub']}" if m["sub"] else "")
    scope = f'in the namespace "{m["ns"]}"' if m["ns"] else "at the cluster scope"
    verb = "create" if request.verb == "bind" else request.verb
    return (f'{resource} is forbidden: User "{user}" cannot {verb} resource "{resource}" in API group '
            f'"{m["group"] or ""}" {scope}')
