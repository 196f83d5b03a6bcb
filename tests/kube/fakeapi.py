"""A fake Kubernetes API server for contract tests: real HTTP on localhost, the REST paths and
JSON shapes the official client sends and expects, one in-memory store with a global
resourceVersion and an event log for watches. It records every request, so tests assert the
exact calls; faults are injected per call (a bind refused, a 429 of priority and fairness with
its Retry-After, a watch's version expired, a watch that goes silent).

Strict as a real API server on what ringleader relies on:
- label selectors with the whole syntax (=, ==, !=, in, notin, key, !key); field selectors only
  on the fields the server indexes for that resource (pods: kubernetes' pod ToSelectableFields;
  others -> 400);
- lists paged with limit/continue over one snapshot, 410 Expired for a continue token older
  than the compacted history; watches that long-poll until timeoutSeconds, send a BOOKMARK when
  asked (allowWatchBookmarks), and report an object leaving a field selection as DELETED
  carrying its PREVIOUS state (a pod that turned Failed arrives as DELETED with phase Running),
  as the API server's watch cache does;
- graceful deletion: a pod on a node gets a deletionTimestamp and stays until its kubelet
  finishes (``finish_deletion``), an unbound or finished pod goes at once; no Binding of a pod
  being deleted;
- the Binding's annotations land on the pod with its node and PodScheduled=True;
- strategic merge patches on built-in kinds (lists merged by their patch merge key), merge
  patches only on custom resources (a strategic one is 415), JSON patches (RFC 6902) on both,
  status only through /status;
- new pods get their QoS class, new nodes the not-ready taint until ``make_ready``;
- RBAC once users are registered (``grant``): a request outside the user's rules is 403, one
  without a known token is 401; as 1.36's DRAResourceClaimGranularStatusAuthorization, a
  write of a ResourceClaim's status.allocation also needs ``update`` on resourceclaims/binding;
- a custom resource whose CRD is not installed (``not_served``) is a 404 on every request;
- a ResourceClaim's status.allocation is immutable once set (it may be cleared), and
  ``prebind_claim`` does what kube-scheduler's DRA PreBind does to an allocated claim (1.36,
  DRADeviceBindingConditions: allocationTimestamp added where missing, the pod reserved).

It is a fake: no admission beyond that, no schema validation, no server-side apply.
"""

from __future__ import annotations

import base64
import bisect
import copy
import json
import re
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$"
)
CLUSTER_SCOPED = {"nodes", "namespaces", "resourceslices", "hypernodes"}
BUILTIN_GROUPS = {"", "coordination.k8s.io", "events.k8s.io", "rbac.authorization.k8s.io", "apps", "batch",
                  "resource.k8s.io", "admissionregistration.k8s.io", "scheduling.k8s.io", "node.k8s.io", "policy"}
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
# The fields each resource can be selected by (kubernetes pkg/registry/core/pod/strategy.go
# ToSelectableFields for pods, pkg/registry/core/node/strategy.go for nodes; every other
# resource: the object meta fields only). Any other field is a 400.
_POD_FIELDS: dict[str, Callable[[dict[str, Any]], str]] = {
    "spec.nodeName": lambda o: o.get("spec", {}).get("nodeName") or "",
    "spec.restartPolicy": lambda o: o.get("spec", {}).get("restartPolicy") or "",
    "spec.schedulerName": lambda o: o.get("spec", {}).get("schedulerName") or "",
    "spec.serviceAccountName": lambda o: o.get("spec", {}).get("serviceAccountName") or "",
    "spec.hostNetwork": lambda o: str(bool(o.get("spec", {}).get("hostNetwork"))).lower(),
    "status.phase": lambda o: (o.get("status") or {}).get("phase") or "",
    "status.podIP": lambda o: (o.get("status") or {}).get("podIP") or "",
    "status.nominatedNodeName": lambda o: (o.get("status") or {}).get("nominatedNodeName") or "",
}
_META_FIELDS: dict[str, Callable[[dict[str, Any]], str]] = {
    "metadata.name": lambda o: o.get("metadata", {}).get("name") or "",
    "metadata.namespace": lambda o: o.get("metadata", {}).get("namespace") or "",
}
_FIELDS = {
    "pods": {**_META_FIELDS, **_POD_FIELDS},
    "nodes": {**_META_FIELDS,
              "spec.unschedulable": lambda o: str(bool(o.get("spec", {}).get("unschedulable"))).lower()},
}  # fmt: skip
# Strategic merge: lists merged by these keys (the API types' patchMergeKey); others replaced.
_MERGE_KEYS = {"conditions": "type", "containers": "name", "initContainers": "name", "env": "name",
               "volumes": "name", "volumeMounts": "mountPath", "ownerReferences": "uid"}  # fmt: skip


class BadRequest(Exception):
    def __init__(self, code: int, message: str, reason: str) -> None:
        super().__init__(message)
        self.code, self.message, self.reason = code, message, reason


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    content_type: str = ""
    user: str = ""  # the bearer token, "" when none
    at: float = field(default_factory=time.time)  # when it came in

    @property
    def verb(self) -> str:
        """kubectl-like verb: list, watch, get, create, patch, update, delete, bind."""
        if self.method == "GET":
            if self.query.get("watch") in ("true", "1"):
                return "watch"
            return "get" if _PATH.match(self.path) and _PATH.match(self.path).group("name") else "list"  # type: ignore[union-attr]
        if self.path.endswith("/binding") and "/pods/" in self.path:  # a pod's Binding; a claim's is an update
            return "bind"
        return {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}[self.method]


Rule = tuple[dict[str, Any], str | None]  # an RBAC rule and the namespace it applies in (None: all)


def permitted(request: Request, rules: list[Rule]) -> bool:
    """Whether RBAC ``rules`` allow ``request`` (verbs as the authorizer names them: a Binding
    is a create of pods/binding, a watch a watch)."""
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


def _allocation_write(request: Request, fake: FakeApiServer) -> Request | None:
    """The resourceclaims/binding update a write of a claim's status.allocation also needs
    (1.36's granular status authorization), or None for any other request."""
    m = _PATH.match(request.path)
    if not m or m["plural"] != "resourceclaims" or m["sub"] != "status" or request.method not in ("PUT", "PATCH"):
        return None
    with fake.lock:
        stored = fake.objects.get(("resourceclaims", m["ns"] or "", m["name"] or ""))
    before = ((stored or {}).get("status") or {}).get("allocation")
    body = request.body if isinstance(request.body, dict) else {}
    after = (body.get("status") or {}).get("allocation") if request.method == "PUT" else before
    if request.method == "PATCH" and "allocation" in (body.get("status") or {}):
        after = body["status"]["allocation"]
    if after == before:
        return None
    return Request("PUT", request.path.rsplit("/", 1)[0] + "/binding", {}, None, "", request.user)


def _check_immutable(plural: str, old: dict[str, Any], new: dict[str, Any]) -> None:
    """As the API server validates a ResourceClaim's status: an allocation, once set, may be
    cleared but not changed."""
    if plural != "resourceclaims":
        return
    before = (old.get("status") or {}).get("allocation")
    after = (new.get("status") or {}).get("allocation")
    if before is not None and after is not None and after != before:
        raise BadRequest(422, f'ResourceClaim.resource.k8s.io "{old["metadata"]["name"]}" is invalid: '
                              "status.allocation: Invalid value: field is immutable", "Invalid")


def merge(target: dict[str, Any], patch: dict[str, Any], strategic: bool = False) -> dict[str, Any]:
    """RFC 7386 JSON merge patch; with ``strategic``, lists with a patch merge key are merged
    item by item on that key (a condition of the same type replaced, others kept); and strategic
    merge's ``{"$patch": "delete", "name": N}`` in a list merged by name (pods' schedulingGates)."""
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
            merge(target[key], value, strategic)
        elif strategic and key in _MERGE_KEYS and isinstance(value, list) and isinstance(target.get(key), list):
            by = _MERGE_KEYS[key]
            items = target[key]
            for new in value:
                old = next((i for i in items if i.get(by) == new.get(by)), None)
                if old is None:
                    items.append(copy.deepcopy(new))
                else:
                    merge(old, new, strategic)
        else:
            target[key] = copy.deepcopy(value)
    return target


_REQUIREMENT = re.compile(r"^\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9_./-]+)\s*"
                          r"(?:(?P<op>==|!=|=)\s*(?P<value>[A-Za-z0-9_.-]*)|"
                          r"\s(?P<set>in|notin)\s*\((?P<values>[^)]*)\))?\s*$")  # fmt: skip


def label_selector(text: str) -> Callable[[dict[str, str]], bool]:
    """A label selector as the API server parses it; BadRequest when malformed."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    tests: list[Callable[[dict[str, str]], bool]] = []
    for part in (p for p in parts if p.strip()):
        m = _REQUIREMENT.match(part)
        if not m or (m["neg"] and (m["op"] or m["set"])):
            raise BadRequest(400, f"unable to parse requirement: {part!r}", "BadRequest")
        key, op, value = m["key"], m["op"], m["value"]
        if m["neg"]:
            tests.append(lambda labels, k=key: k not in labels)
        elif op in ("=", "=="):
            tests.append(lambda labels, k=key, v=value: labels.get(k) == v)
        elif op == "!=":
            tests.append(lambda labels, k=key, v=value: labels.get(k) != v)
        elif m["set"]:
            values = {v.strip() for v in m["values"].split(",") if v.strip()}
            if m["set"] == "in":
                tests.append(lambda labels, k=key, vs=values: labels.get(k) in vs)
            else:
                tests.append(lambda labels, k=key, vs=values: labels.get(k) not in vs)
        else:
            tests.append(lambda labels, k=key: k in labels)
    return lambda labels: all(t(labels) for t in tests)


def field_selector(plural: str, text: str) -> Callable[[dict[str, Any]], bool]:
    fields = _FIELDS.get(plural, _META_FIELDS)
    tests: list[Callable[[dict[str, Any]], bool]] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        m = re.match(r"^([A-Za-z.]+)\s*(==|!=|=)\s*(.*)$", part)
        if not m:
            raise BadRequest(400, f"invalid field selector: {part!r}", "BadRequest")
        key, op, value = m.groups()
        if key not in fields:
            raise BadRequest(400, f'field label not supported: {key}', "BadRequest")
        get = fields[key]
        if op == "!=":
            tests.append(lambda o, g=get, v=value: g(o) != v)
        else:
            tests.append(lambda o, g=get, v=value: g(o) == v)
    return lambda obj: all(t(obj) for t in tests)


def json_patch(target: dict[str, Any], ops: Any, sub: str | None) -> dict[str, Any]:
    """RFC 6902 add/replace/remove/test on a copy of ``target`` (all or nothing; BadRequest
    when a path is missing or a test fails); through /status only status changes."""
    if not isinstance(ops, list):
        raise BadRequest(400, "a JSON patch is a list of operations", "BadRequest")
    result = copy.deepcopy(target)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in str(op.get("path", "")).split("/")[1:]]
        if not parts or (sub == "status") != (parts[0] == "status"):
            raise BadRequest(422, f"path {op.get('path')!r} is outside this resource's part", "Invalid")
        parent: Any = result
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent.get(part)
            if parent is None:
                raise BadRequest(422, f"path {op.get('path')!r} does not exist", "Invalid")
        last, kind = parts[-1], op.get("op")
        if kind == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != op.get("value"):
                raise BadRequest(422, f"test failed at {op.get('path')!r}", "Invalid")
        elif kind in ("add", "replace"):
            if isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                parent[index:index + (kind == "replace")] = [copy.deepcopy(op.get("value"))]
            else:
                if kind == "replace" and last not in parent:
                    raise BadRequest(422, f"path {op.get('path')!r} does not exist", "Invalid")
                parent[last] = copy.deepcopy(op.get("value"))
        elif kind == "remove":
            try:
                del parent[int(last) if isinstance(parent, list) else last]
            except (KeyError, IndexError):
                raise BadRequest(422, f"path {op.get('path')!r} does not exist", "Invalid") from None
        else:
            raise BadRequest(400, f"unsupported JSON patch operation {kind!r}", "BadRequest")
    return result


def qos_class(pod: dict[str, Any]) -> str:
    """The pod's QoS class as the API server sets it: Guaranteed when every container sets cpu
    and memory limits equal to its requests, BestEffort when none sets any, else Burstable."""
    containers = [*(pod.get("spec", {}).get("containers") or ()), *(pod.get("spec", {}).get("initContainers") or ())]
    any_set, guaranteed = False, True
    for c in containers:
        res = c.get("resources") or {}
        limits, requests = res.get("limits") or {}, {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for kind in ("cpu", "memory"):
            if kind in requests or kind in limits:
                any_set = True
            if kind not in limits or str(requests.get(kind)) != str(limits[kind]):
                guaranteed = False
    return "BestEffort" if not any_set else "Guaranteed" if guaranteed else "Burstable"


@dataclass
class _Watch:
    plural: str
    ns: str
    labels: Callable[[dict[str, str]], bool]
    fields: Callable[[dict[str, Any]], bool]

    def visible(self, obj_ns: str, obj: dict[str, Any] | None) -> bool:
        if obj is None or (self.ns and obj_ns != self.ns):
            return False
        return self.labels(obj.get("metadata", {}).get("labels") or {}) and self.fields(obj)

    def event(self, entry: tuple[int, str, str, str, dict[str, Any], dict[str, Any] | None]) -> dict[str, Any] | None:
        """The event this watch sees for a log entry: an object entering the selection is
        ADDED, one leaving it DELETED with the state it had while selected, only its
        resourceVersion the new one (as the API server's watch cache reports them: what the
        object became is outside the selection, so the watcher is not shown it)."""
        _, plural, ns, kind, obj, prev = entry
        if plural != self.plural:
            return None
        now, before = self.visible(ns, obj), self.visible(ns, prev)
        if kind == "DELETED":
            return {"type": "DELETED", "object": obj} if now else None
        if now:
            return {"type": "MODIFIED" if before else "ADDED", "object": obj}
        if not before or prev is None:
            return None
        left = copy.deepcopy(prev)
        left["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
        return {"type": "DELETED", "object": left}


class FakeApiServer:
    def __init__(self, watch_delay_s: float = 0.0) -> None:
        # How long a change takes to reach a watch (a real server: etcd, then its watch cache)
        self.watch_delay_s = watch_delay_s
        self.lock = threading.Lock()
        self.logged = threading.Condition(self.lock)
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (plural, ns, name) -> obj
        # (rv, plural, ns, type, obj, the object before) for watches
        self.log: list[tuple[int, str, str, str, dict[str, Any], dict[str, Any] | None]] = []
        self.version = 100
        self.expired_below = 0  # watches and continue tokens from an older version get 410
        self.requests: list[Request] = []
        self.fail: dict[tuple[str, str], int] = {}  # (verb, name) -> HTTP status to answer once
        self.pod_logs: dict[str, str] = {}
        # Custom resources whose CRD this cluster lacks (plurals): every request for them is a 404,
        # as a real server answers for a resource it does not serve.
        self.not_served: set[str] = set()
        self.stall_watches = threading.Event()  # set: watches answer headers, then nothing, never end
        self.users: dict[str, list[Rule]] = {}  # bearer token -> rules; none: no authorization
        self._latest: dict[tuple[str, str, str], dict[str, Any]] = {}  # key -> as last logged
        self._snapshots: dict[int, list[dict[str, Any]]] = {}  # first page's rv -> the listed objects
        self._stopping = threading.Event()
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
        self._stopping.set()
        with self.lock:
            self.logged.notify_all()
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
        prev = self.objects.get(key)
        kind = event or ("MODIFIED" if prev is not None else "ADDED")
        self.objects[key] = obj
        logged = copy.deepcopy(obj)
        self.log.append((self.version, plural, ns, kind, logged, self._latest.get(key)))
        self._latest[key] = logged
        self.logged.notify_all()
        return obj

    def remove(self, plural: str, ns: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            return self._remove(plural, ns, name)

    def _remove(self, plural: str, ns: str, name: str) -> dict[str, Any] | None:
        obj = self.objects.pop((plural, ns, name), None)
        if obj is not None:
            self.version += 1
            obj["metadata"]["resourceVersion"] = str(self.version)
            self.log.append((self.version, plural, ns, "DELETED", copy.deepcopy(obj), None))
            self._latest.pop((plural, ns, name), None)
            self.logged.notify_all()
        return obj

    def finish_deletion(self, name: str, ns: str = "default") -> None:
        """The kubelet has stopped a pod being deleted gracefully: it goes."""
        self.remove("pods", ns, name)

    def make_ready(self, name: str) -> None:
        """The node's kubelet reports Ready and the node lifecycle controller lifts the
        not-ready taint it was registered with."""
        with self.lock:
            node = self.objects[("nodes", "", name)]
            node.setdefault("spec", {})["taints"] = [t for t in node["spec"].get("taints") or ()
                                                      if t.get("key") != NOT_READY_TAINT]  # fmt: skip
            conditions = [c for c in node.setdefault("status", {}).get("conditions") or () if c.get("type") != "Ready"]
            node["status"]["conditions"] = [*conditions, {"type": "Ready", "status": "True"}]
            self._put("nodes", node)

    def get(self, plural: str, name: str, ns: str = "") -> dict[str, Any] | None:
        return self.objects.get((plural, "" if plural in CLUSTER_SCOPED else ns or "default", name))

    def expire(self) -> None:
        """Compact history: any watch or continue token from a version before now answers 410."""
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
                if code == 429:  # API priority and fairness rejects before running the request
                    self.send_header("Retry-After", "1")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _status(self, code: int, message: str, reason: str = "") -> None:
                self._send(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                                  "reason": reason, "code": code})  # fmt: skip

            def _stream(self) -> Callable[[dict[str, Any] | None], bool]:
                """Start a watch response; returns a writer of one event per call (None ends
                it), False once the client is gone."""
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

                def write(event: dict[str, Any] | None) -> bool:
                    data = b"" if event is None else (json.dumps(event) + "\n").encode()
                    try:
                        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                        self.wfile.flush()
                    except OSError:
                        return False
                    return True

                return write

            def _serve(self, method: str) -> None:
                url = urlparse(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                body = self._body() if method in ("POST", "PUT", "PATCH", "DELETE") else None
                auth = self.headers.get("Authorization") or ""
                token = auth[len("Bearer "):] if auth.startswith("Bearer ") else ""
                request = Request(method, url.path, query, body, (self.headers.get("Content-Type") or "").split(";")[0],
                                  token)  # fmt: skip
                with fake.lock:
                    fake.requests.append(request)
                    target = (_PATH.match(url.path) or _EMPTY).group("name") or ""
                    injected = fake.fail.pop((request.verb, target), None)
                    users = dict(fake.users)
                if users:
                    if token not in users:
                        self._status(401, "Unauthorized", "Unauthorized")
                        return
                    if not permitted(request, users[token]):
                        self._status(403, forbidden(request, token), "Forbidden")
                        return
                    binding = _allocation_write(request, fake)
                    if binding is not None and not permitted(binding, users[token]):
                        self._status(403, forbidden(binding, token), "Forbidden")
                        return
                if injected == 429:
                    self._status(429, "Too many requests, please try again later.", "TooManyRequests")
                    return
                if injected:
                    self._status(injected, f"injected failure {injected}", "InternalError")
                    return
                match = _PATH.match(url.path)
                if not match:
                    self._status(404, f"no route {url.path}")
                    return
                try:
                    fake._route(self, request, match)
                except BadRequest as exc:
                    self._status(exc.code, exc.message, exc.reason)

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
        if plural in self.not_served:
            return h._status(404, "the server could not find the requested resource", "NotFound")
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
                return self._bind(h, req, plural, obj, name or "")
            if req.method == "POST":
                return self._create(h, req, plural, ns)
            if obj is None:
                return h._status(404, f'{plural} "{name}" not found', "NotFound")
            if req.method == "PUT":
                if req.body["metadata"].get("resourceVersion") != obj["metadata"]["resourceVersion"]:
                    return h._status(409, "the object has been modified", "Conflict")
                _check_immutable(plural, obj, req.body)
                return h._send(200, self._put(plural, copy.deepcopy(req.body)))
            if req.method == "PATCH":
                return self._patch(h, req, plural, obj, m.group("group") or "", sub)
            if req.method == "DELETE":
                pre = ((req.body or {}).get("preconditions") or {}).get("uid")
                if pre and pre != obj["metadata"]["uid"]:
                    return h._status(409, "uid precondition failed", "Conflict")
                grace = self._grace(plural, obj, req)
                if grace:  # the pod's kubelet stops it first; finish_deletion() removes it
                    # A second deletion may only shorten the grace of one in progress, as the API
                    # server's BeforeDelete allows.
                    meta = obj["metadata"]
                    if not meta.get("deletionTimestamp") or grace < meta.get("deletionGracePeriodSeconds", grace):
                        meta["deletionTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                        meta["deletionGracePeriodSeconds"] = grace
                        self._put(plural, obj)
                    return h._send(200, obj)
                return h._send(200, self._remove(plural, ns, name or ""))
        return None

    def prebind_claim(self, namespace: str, name: str, pod_uid: str, pod_name: str) -> dict[str, Any]:
        """kube-scheduler's DRA PreBind on an allocated claim (1.36): allocationTimestamp added to
        an allocation that lacks one, the pod in reservedFor, written as one status update (which
        fails, as there, where that changes an allocation another writer set)."""
        with self.lock:
            claim = copy.deepcopy(self.objects[("resourceclaims", namespace, name)])
            status = claim.setdefault("status", {})
            allocation = status.get("allocation")
            if allocation is None:
                raise BadRequest(422, f"claim {name} is not allocated", "Invalid")
            allocation.setdefault("allocationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            status.setdefault("reservedFor", []).append({"resource": "pods", "name": pod_name, "uid": pod_uid})
            _check_immutable("resourceclaims", self.objects[("resourceclaims", namespace, name)], claim)
            return self._put("resourceclaims", claim)

    @staticmethod
    def _grace(plural: str, obj: dict[str, Any], req: Request) -> int:
        """Seconds a deletion waits for the kubelet: only a pod on a node that has not finished
        (kubernetes' pod strategy CheckGracefulDelete: unscheduled or terminal pods go at once)."""
        if plural != "pods" or not obj["spec"].get("nodeName"):
            return 0
        if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return 0
        asked = (req.body or {}).get("gracePeriodSeconds", req.query.get("gracePeriodSeconds"))
        if asked is not None:
            return int(asked)
        return int(obj["spec"].get("terminationGracePeriodSeconds", 30))

    def _bind(self, h: Any, req: Request, plural: str, obj: dict[str, Any] | None, name: str) -> None:
        if obj is None:
            return h._status(404, f'pods "{name}" not found', "NotFound")
        if obj["metadata"].get("deletionTimestamp"):
            return h._status(409, f"pod {name} is being deleted, cannot be assigned to a host", "Conflict")
        if obj["spec"].get("nodeName"):
            return h._status(409, f"pod {name} is already assigned to node", "Conflict")
        bound_uid = (req.body.get("metadata") or {}).get("uid")
        if bound_uid and bound_uid != obj["metadata"]["uid"]:
            return h._status(409, f"pod {name}: uid precondition failed", "Conflict")
        obj["spec"]["nodeName"] = req.body["target"]["name"]
        # As the API server's BindingREST: the Binding's annotations land on the pod with the
        # node, and PodScheduled turns True, in one update.
        notes = (req.body.get("metadata") or {}).get("annotations") or {}
        if notes:
            obj["metadata"].setdefault("annotations", {}).update(notes)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        merge(obj, {"status": {"conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now}]}},
              strategic=True)  # fmt: skip
        for condition in obj["status"]["conditions"]:
            if condition["type"] == "PodScheduled":
                condition.pop("reason", None)
                condition.pop("message", None)
        self._put(plural, obj)
        return h._send(201, {"kind": "Status", "status": "Success", "code": 201})

    def _create(self, h: Any, req: Request, plural: str, ns: str) -> None:
        new = copy.deepcopy(req.body)
        meta = new.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{self.version:x}"
        if plural not in CLUSTER_SCOPED:
            meta["namespace"] = ns or meta.get("namespace") or "default"
        if (plural, "" if plural in CLUSTER_SCOPED else meta["namespace"], meta["name"]) in self.objects:
            return h._status(409, f'{plural} "{meta["name"]}" already exists', "AlreadyExists")
        if plural == "pods":
            new.setdefault("status", {}).setdefault("phase", "Pending")
            new["status"]["qosClass"] = qos_class(new)
        if plural == "nodes":  # kubelet registers a node tainted not-ready until it reports Ready
            taints = new.setdefault("spec", {}).setdefault("taints", [])
            if not any(t.get("key") == NOT_READY_TAINT for t in taints):
                taints.append({"key": NOT_READY_TAINT, "effect": "NoSchedule"})
        return h._send(201, self._put(plural, new))

    def _patch(self, h: Any, req: Request, plural: str, obj: dict[str, Any], group: str, sub: str | None) -> None:
        builtin = group in BUILTIN_GROUPS
        if req.content_type == "application/strategic-merge-patch+json" and not builtin:
            return h._status(415, "the body of the request was in an unknown format - accepted media types include: "
                             "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                             "UnsupportedMediaType")  # fmt: skip
        if req.content_type == "application/json-patch+json":
            return h._send(200, self._put(plural, json_patch(obj, req.body, sub)))
        if req.content_type not in ("application/strategic-merge-patch+json", "application/merge-patch+json"):
            return h._status(415, f"unsupported patch type {req.content_type!r} (no server-side apply here)",
                             "UnsupportedMediaType")  # fmt: skip
        if not isinstance(req.body, dict):
            return h._status(400, "a merge patch is a JSON object", "BadRequest")
        # The status subresource changes status only; the main resource never changes status.
        patch = {"status": req.body.get("status")} if sub == "status" else {k: v for k, v in req.body.items()
                                                                             if k != "status"}  # fmt: skip
        spec_patch = patch.get("spec") or {}
        # As the API server: a pod's node affinity and selector change only while it is gated.
        if plural == "pods" and ({"affinity", "nodeSelector"} & set(spec_patch)) and not obj["spec"].get(
                "schedulingGates"):  # fmt: skip
            name = obj["metadata"]["name"]
            return h._status(422, f'Pod "{name}" is invalid: spec: Forbidden: pod updates may not change '
                                  "fields other than ... (node affinity only while scheduling gates remain)",
                             "Invalid")  # fmt: skip
        strategic = req.content_type == "application/strategic-merge-patch+json"
        return h._send(200, self._put(plural, merge(obj, patch, strategic)))

    def _list_or_watch(self, h: Any, req: Request, plural: str, ns: str) -> None:
        if req.verb == "watch" and "continue" in req.query:
            raise BadRequest(400, "continue is not supported with watch", "BadRequest")
        watch = _Watch(plural, ns, label_selector(req.query.get("labelSelector", "")),
                       field_selector(plural, req.query.get("fieldSelector", "")))  # fmt: skip
        if req.verb != "watch":
            return self._list(h, req, plural, watch)
        since = int(req.query.get("resourceVersion") or 0)
        timeout = float(req.query.get("timeoutSeconds") or 1800)
        deadline = time.monotonic() + timeout
        with self.lock:
            if since < self.expired_below - 1:
                return h._send(200, json.dumps({"type": "ERROR", "object": {
                    "kind": "Status", "code": 410, "reason": "Expired",
                    "message": f"too old resource version: {since}"}}) + "\n")  # fmt: skip
        write = h._stream()
        if self.stall_watches.is_set():  # a half-open connection: nothing more, ever
            while self.stall_watches.is_set() and not self._stopping.is_set():
                time.sleep(0.05)
            h.close_connection = True
            return None
        seen = since
        with self.lock:
            position = bisect.bisect_right(self.log, since, key=lambda entry: entry[0])
        while True:
            with self.lock:
                events = []
                for entry in self.log[position:]:
                    event = watch.event(entry)
                    if event is not None:
                        events.append(event)
                position = len(self.log)
                if self.log:
                    seen = max(seen, self.log[-1][0])
                left = deadline - time.monotonic()
                if not events and left > 0 and not self._stopping.is_set():
                    self.logged.wait(min(left, 0.5))
                    continue
            if events and self.watch_delay_s:
                time.sleep(self.watch_delay_s)
            for event in events:
                if not write(event):
                    return None
            if time.monotonic() >= deadline or self._stopping.is_set():
                break
        if req.query.get("allowWatchBookmarks") in ("true", "1"):
            write({"type": "BOOKMARK", "object": {"kind": _kind(plural), "apiVersion": "v1",
                                                  "metadata": {"resourceVersion": str(seen)}}})  # fmt: skip
        write(None)
        return None

    def _list(self, h: Any, req: Request, plural: str, watch: _Watch) -> None:
        limit = int(req.query.get("limit") or 0)
        token = req.query.get("continue")
        with self.lock:
            if token:
                try:
                    position = json.loads(base64.urlsafe_b64decode(token))
                    rv, start = int(position["rv"]), int(position["start"])
                except (ValueError, KeyError, TypeError):
                    raise BadRequest(400, "continue key is not valid", "BadRequest") from None
                if rv < self.expired_below - 1 or rv not in self._snapshots:
                    return h._status(410, "The provided continue parameter is too old to display a consistent list "
                                     "result. You can start a new list without the continue parameter.", "Expired")
                items = self._snapshots[rv]
            else:
                rv, start = self.version, 0
                items = [copy.deepcopy(o) for (p, o_ns, _), o in sorted(self.objects.items())
                         if p == plural and watch.visible(o_ns, o)]  # fmt: skip
            page = items[start:start + limit] if limit else items[start:]
            meta: dict[str, Any] = {"resourceVersion": str(rv)}
            if limit and start + limit < len(items):
                self._snapshots[rv] = items
                meta["continue"] = base64.urlsafe_b64encode(
                    json.dumps({"rv": rv, "start": start + limit}).encode()).decode()
                meta["remainingItemCount"] = len(items) - start - limit
        return h._send(200, {"kind": "List", "apiVersion": "v1", "items": page, "metadata": meta})


def _kind(plural: str) -> str:
    return {"pods": "Pod", "nodes": "Node", "podgroups": "PodGroup"}.get(plural, plural.rstrip("s").title())


def forbidden(request: Request, user: str) -> str:
    """The API server's wording of a 403."""
    m = _PATH.match(request.path)
    if not m:
        return f'User "{user}" cannot {request.verb} {request.path}'
    resource = m["plural"] + (f"/{m['sub']}" if m["sub"] else "")
    where = f'in the namespace "{m["ns"]}"' if m["ns"] else "at the cluster scope"
    verb = "create" if request.verb == "bind" else request.verb
    return (f'{resource} is forbidden: User "{user}" cannot {verb} resource "{resource}" in API group '
            f'"{m["group"] or ""}" {where}')


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that closes a kept-alive connection is normal, not a traceback."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


_EMPTY = re.compile("(?P<name>)").match("")
