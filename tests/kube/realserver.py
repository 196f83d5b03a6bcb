"""A real Kubernetes v1.36 control plane for the tests: etcd, kube-apiserver and
kube-controller-manager (kube-scheduler where a test asks for it) from the binaries in
``../shared/kubernetes-1.36``, with ringleader's install and the training CRDs applied.

There is no kubelet: pods are bound but never run, and a test writes their status as a kubelet
would (``set_pod_status``). The binaries are unpacked once per host into a cache folder and checked
against the published SHA-256 sums; each control plane lives in a private folder of its own, on
free ports, with static tokens for the people and controllers and RBAC on, so the parallel test
workers of one run never meet."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import lzma
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from refdata import SHARED
from ringleader.cli.main import main
from ringleader.clock import SYSTEM_CLOCK, Clock
from ringleader.engines.kubernetes import manifests, names
from ringleader.engines.kubernetes.client import Api
from ringleader.engines.kubernetes.scheduler import Scheduler
from waiting import WAIT_S, wait_for

KUBERNETES = SHARED / "kubernetes-1.36"
CRDS = SHARED / "reference" / "kubernetes"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
# The node lifecycle controllers would mark every node Unknown and evict its pods: no kubelet
# ever reports here. The IPAM controller needs a cluster CIDR nobody uses.
CONTROLLERS = "*,-node-lifecycle-controller,-taint-eviction-controller,-node-ipam-controller," \
              "-cloud-node-lifecycle-controller"  # fmt: skip
# People with static tokens: the administrator (system:masters) and plain users, who hold only
# what RBAC grants them in a test.
USERS = ("admin", "alice", "bob", "eve")
START_TIMEOUT_S = 120.0  # a busy 2-core host shares its cores with several test workers


def why_absent() -> str | None:
    """Why a control plane cannot start here (None: it can)."""
    if not (KUBERNETES / "bin").is_dir():
        return f"the Kubernetes v1.36 binaries are not present at {KUBERNETES} (checkout without ../shared)"
    if not CRDS.is_dir():
        return f"the reference CRDs are not present at {CRDS} (checkout without ../shared)"
    return None


def _cache_folder() -> Path:
    sums = (KUBERNETES / "SHA256SUMS.unpacked").read_bytes()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "ringleader-tests" / f"kubernetes-{hashlib.sha256(sums).hexdigest()[:12]}"


def unpacked_binaries() -> Path:
    """The folder holding the four binaries, unpacked once per host and verified against
    SHA256SUMS.unpacked; the CRDs beside them as JSON (the YAML is megabytes to parse)."""
    folder = _cache_folder()
    stamp = folder / "verified"
    sums = (KUBERNETES / "SHA256SUMS.unpacked").read_text()
    if stamp.exists() and stamp.read_text() == sums:
        return folder
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker unpacking: wait for it, then use its copy
        if stamp.exists() and stamp.read_text() == sums:
            return folder
        expected = dict(reversed(line.split()) for line in sums.splitlines() if line.strip())
        for name in BINARIES:
            part = folder / f".{name}.part"
            digest = hashlib.sha256()
            with lzma.open(KUBERNETES / "bin" / f"{name}.xz") as packed, part.open("wb") as out:
                while chunk := packed.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
            if digest.hexdigest() != expected[name]:
                part.unlink()
                raise RuntimeError(f"{name}: sha256 {digest.hexdigest()} is not {expected[name]} "
                                   f"(SHA256SUMS.unpacked): the copy in {KUBERNETES} is damaged")  # fmt: skip
            part.chmod(0o755)
            part.rename(folder / name)
        crds = [doc for path in sorted(CRDS.glob("*.yaml"))
                for doc in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader) if doc]  # fmt: skip
        (folder / "crds.json").write_text(json.dumps(crds))
        stamp.write_text(sums)
    return folder


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def plural(kind: str) -> str:
    """The resource name of a kind, as the API server spells the built-in ones we create."""
    lower = kind.lower()
    if lower.endswith("y"):
        return lower[:-1] + "ies"
    return lower + ("es" if lower.endswith("s") else "s")


def api_path(obj: Mapping[str, Any], name: str | None = None) -> str:
    """The collection (or, with ``name``, the object) path of an object."""
    version = obj["apiVersion"]
    prefix = f"/api/{version}" if "/" not in version else f"/apis/{version}"
    namespace = (obj.get("metadata") or {}).get("namespace")
    path = f"{prefix}/namespaces/{namespace}" if namespace else prefix
    path += "/" + plural(obj["kind"])
    return f"{path}/{name}" if name else path


class RequestFailed(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


@dataclass
class ControlPlane:
    """A started control plane. ``url`` is the API server's; ``tokens`` the static bearer tokens
    by user name; ``client(user)`` an official ``ApiClient`` for one of them."""

    folder: Path
    binaries: Path
    url: str = ""
    tokens: dict[str, str] = field(default_factory=dict)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    started_s: float = 0.0

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, kube_scheduler: bool = False, install: Sequence[Mapping[str, Any]] = ()) -> ControlPlane:
        began = time.monotonic()
        self.folder.chmod(0o700)
        self._credentials()
        etcd_client, etcd_peer, secure = free_port(), free_port(), free_port()
        self.url = f"https://127.0.0.1:{secure}"
        self._spawn("etcd", [
            "--data-dir", str(self.folder / "etcd-data"), "--name", "default",
            "--listen-client-urls", f"http://127.0.0.1:{etcd_client}",
            "--advertise-client-urls", f"http://127.0.0.1:{etcd_client}",
            "--listen-peer-urls", f"http://127.0.0.1:{etcd_peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{etcd_peer}",
            "--initial-cluster", f"default=http://127.0.0.1:{etcd_peer}",
            "--listen-metrics-urls", "", "--log-level", "warn", "--quota-backend-bytes", str(2 << 30),
        ])  # fmt: skip
        self._spawn("kube-apiserver", [
            f"--etcd-servers=http://127.0.0.1:{etcd_client}", f"--secure-port={secure}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--cert-dir={self.folder / 'certs'}",
            "--authorization-mode=Node,RBAC", f"--token-auth-file={self.folder / 'tokens.csv'}",
            f"--service-account-key-file={self.folder / 'sa.pub'}",
            f"--service-account-signing-key-file={self.folder / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc", "--service-cluster-ip-range=10.96.0.0/16",
            "--enable-priority-and-fairness=true", "--v=0",
        ])  # fmt: skip
        self._until_ready()
        self._spawn("kube-controller-manager", [
            f"--kubeconfig={self.kubeconfig('system:kube-controller-manager')}",
            f"--service-account-private-key-file={self.folder / 'sa.key'}", "--use-service-account-credentials=true",
            "--leader-elect=false", "--secure-port=0", f"--controllers={CONTROLLERS}", "--v=0",
        ])  # fmt: skip
        if kube_scheduler:
            self.start_kube_scheduler()
        self.apply(json.loads((self.binaries / "crds.json").read_text()))
        for crd in json.loads((self.binaries / "crds.json").read_text()):
            self._until_established(crd["metadata"]["name"])
        # GPU Operator's RuntimeClass, which the install's policies and the agent name
        self.apply([{"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"},
                     "handler": "nvidia"}])  # fmt: skip
        self.apply(install)
        self.started_s = time.monotonic() - began
        return self

    def start_kube_scheduler(self, *flags: str, name: str = "kube-scheduler") -> subprocess.Popen[bytes]:
        return self._spawn(name, [f"--kubeconfig={self.kubeconfig('system:kube-scheduler')}",
                                  "--leader-elect=false", "--secure-port=0", "--v=0", *flags])  # fmt: skip

    def stop(self) -> None:
        """Stop what this control plane started, by pid, the controllers before the store."""
        for name in reversed(list(self.processes)):
            self.stop_process(name)

    def stop_process(self, name: str) -> None:
        proc = self.processes.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        binary = "kube-scheduler" if name.startswith("kube-scheduler") else name
        with (self.folder / f"{name}.log").open("wb") as log:
            proc = subprocess.Popen([str(self.binaries / binary), *args], stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, cwd=self.folder)  # fmt: skip
        self.processes[name] = proc
        return proc

    def log(self, name: str) -> str:
        path = self.folder / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def _credentials(self) -> None:
        key, pub = self.folder / "sa.key", self.folder / "sa.pub"
        subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
        subprocess.run(["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(pub)], check=True,
                       capture_output=True)  # fmt: skip
        lines = []
        groups = {"admin": "system:masters"}
        for user in (*USERS, "system:kube-controller-manager", "system:kube-scheduler"):
            token = os.urandom(16).hex()
            self.tokens[user] = token
            lines.append(f'{token},{user},uid-{user}' + (f',"{groups[user]}"' if user in groups else ""))
        (self.folder / "tokens.csv").write_text("\n".join(lines) + "\n")

    def _until_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            for name, proc in self.processes.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.log(name)}")
            with contextlib.suppress(OSError, RequestFailed):
                if self.request("GET", "/readyz", raw=True) == "ok":
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"kube-apiserver not ready after {START_TIMEOUT_S:.0f} s:\n"
                                   f"{self.log('kube-apiserver')}")  # fmt: skip
            time.sleep(0.2)

    def _until_established(self, crd: str) -> None:
        def established() -> bool:  # a CRD just made may read "conditions": null for a while
            got = self.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}")
            conditions = (got.get("status") or {}).get("conditions") or ()
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        self.until(established, f"CRD {crd} established")

    # -- access ------------------------------------------------------------------------------------

    def kubeconfig(self, user: str, namespace: str = "default", token: str | None = None) -> Path:
        """A kubeconfig file for ``user`` (a static token's, or ``token`` given), trusting the
        API server's self-signed certificate."""
        path = self.folder / f"kubeconfig-{user.replace(':', '-')}"
        authority = str(self.folder / "certs" / "apiserver.crt")
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url, "certificate-authority": authority}}],
            "users": [{"name": user, "user": {"token": token or self.tokens[user]}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": user, "namespace": namespace}}],
        }  # fmt: skip
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def client(self, user: str = "admin", token: str | None = None) -> Any:
        """An official ``ApiClient`` authenticated as ``user`` (or by ``token``)."""
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.url
        configuration.ssl_ca_cert = str(self.folder / "certs" / "apiserver.crt")
        configuration.api_key = {"authorization": token or self.tokens[user]}
        configuration.api_key_prefix = {"authorization": "Bearer"}
        return client.ApiClient(configuration)

    def service_account_token(self, namespace: str, name: str, seconds: int = 3600) -> str:
        """A bound token of a ServiceAccount, as its pods would get (TokenRequest)."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"expirationSeconds": seconds}}  # fmt: skip
        answer = self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", body)
        return str(answer["status"]["token"])

    def request(self, method: str, path: str, body: Any = None, user: str = "admin", raw: bool = False,
                content_type: str = "application/json", query: Mapping[str, str] | None = None) -> Any:  # fmt: skip
        """One HTTP request as ``user``: the parsed JSON answer (the text with ``raw``); raises
        RequestFailed on an HTTP error."""
        context = ssl.create_default_context(cafile=str(self.folder / "certs" / "apiserver.crt"))
        url = self.url + path + (("?" + urllib.parse.urlencode(query)) if query else "")
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method, headers={
            "Authorization": f"Bearer {self.tokens[user]}", "Content-Type": content_type, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, context=context, timeout=WAIT_S) as resp:
                text = resp.read().decode()
        except urllib.error.HTTPError as exc:
            raise RequestFailed(exc.code, exc.read().decode(errors="replace")) from None
        return text if raw else (json.loads(text) if text else {})

    # -- objects -----------------------------------------------------------------------------------

    def apply(self, objects: Sequence[Mapping[str, Any]], user: str = "admin") -> None:
        """Create each object (replace it where it exists), in order."""
        for obj in objects:
            try:
                self.request("POST", api_path(obj), obj, user=user)
            except RequestFailed as exc:
                if exc.status != 409:
                    raise
                path = api_path(obj, obj["metadata"]["name"])
                current = self.request("GET", path, user=user)
                replaced = {**obj, "metadata": {**obj["metadata"],
                                                "resourceVersion": current["metadata"]["resourceVersion"]}}
                self.request("PUT", path, replaced, user=user)

    def get(self, obj_path: str, user: str = "admin") -> dict[str, Any] | None:
        try:
            return dict(self.request("GET", obj_path, user=user))
        except RequestFailed as exc:
            if exc.status == 404:
                return None
            raise

    def patch(self, obj_path: str, body: Any, user: str = "admin", kind: str = "merge") -> dict[str, Any]:
        return dict(self.request("PATCH", obj_path, body, user=user,
                                 content_type=f"application/{kind}-patch+json"))  # fmt: skip

    def namespace(self, name: str) -> None:
        """A namespace whose pods may be created: its default ServiceAccount made by the
        controller-manager (the ServiceAccount admission refuses pods until then)."""
        self.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}])
        self.until(lambda: self.get(f"/api/v1/namespaces/{name}/serviceaccounts/default") is not None,
                   f"the default ServiceAccount of {name}")  # fmt: skip

    def add_node(self, node: Mapping[str, Any]) -> None:
        """A Node as its kubelet and ringleader's agent leave it: created, its status (capacity,
        Ready) written through the status subresource, and the not-ready taint the API server
        put on at creation removed (no node lifecycle controller runs to do it)."""
        name = node["metadata"]["name"]
        self.apply([{k: v for k, v in node.items() if k != "status"}])
        self.request("PATCH", f"/api/v1/nodes/{name}/status", {"status": node["status"]},
                     content_type="application/merge-patch+json")  # fmt: skip
        self.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": (node.get("spec") or {}).get("taints") or None}})

    def set_pod_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> dict[str, Any]:
        """Write a pod's status as its kubelet does: through the status subresource."""
        return self.patch(f"/api/v1/namespaces/{namespace}/pods/{name}/status", {"status": status})

    def until(self, check: Any, what: str, seconds: float = WAIT_S) -> Any:
        """``check()``'s first true value (``wait_for``: the deadline only ends a hang)."""
        return wait_for(check, seconds, what)


class KubeletLogs:
    """The one kubelet endpoint the API server calls for `kubectl logs`: ``GET /containerLogs/
    <namespace>/<pod>/<container>`` over HTTPS on the port a node's status names (the API
    server checks no kubelet certificate unless told a CA). Serves ``logs`` ("ns/pod" -> text);
    404 for any other pod."""

    def __init__(self, folder: Path) -> None:
        import http.server
        import ssl
        import threading

        cert, key = folder / "kubelet.crt", folder / "kubelet.key"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kubelet", "-days",
                        "1", "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)  # fmt: skip
        self.logs: dict[str, str] = {}
        self.asked: list[str] = []
        logs, asked = self.logs, self.asked

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                asked.append(self.path)
                parts = self.path.split("?")[0].split("/")
                text = logs.get(f"{parts[2]}/{parts[3]}") if len(parts) >= 5 and parts[1] == "containerLogs" else None
                body = (text or "not found").encode()
                self.send_response(200 if text is not None else 404)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def node_status(self) -> dict[str, Any]:
        """What a node's status says of its kubelet, for the API server to reach it here."""
        return {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}}}  # fmt: skip

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def control_plane(folder: Path, kube_scheduler: bool = False,
                  install: Sequence[Mapping[str, Any]] = ()) -> Iterator[ControlPlane]:  # fmt: skip
    """A started control plane in ``folder`` (made private), stopped on leaving."""
    folder.mkdir(parents=True, exist_ok=True)
    plane = ControlPlane(folder, unpacked_binaries())
    try:
        plane.start(kube_scheduler=kube_scheduler, install=install)
        yield plane
    finally:
        plane.stop()
        shutil.rmtree(folder / "etcd-data", ignore_errors=True)


def namespace_user_cli(real: ControlPlane, user: str, namespace: str, home: Path, monkeypatch: pytest.MonkeyPatch,
                       capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str]]:  # fmt: skip
    """`ringleader CMD --engine kubernetes ...` in this process as ``user``, who holds nothing but
    their own kubeconfig (its context in ``namespace``), with RINGLEADER_HOME at ``home``: each
    call gives the exit code and what was printed, stdout then stderr. The kubernetes client reads
    KUBECONFIG once, when imported, so its default path is pointed at the kubeconfig too."""
    kubeconfig = real.kubeconfig(user, namespace=namespace)
    monkeypatch.setenv("RINGLEADER_HOME", str(home))
    monkeypatch.delenv("RINGLEADER_KUBE_SERVER", raising=False)
    monkeypatch.delenv("RINGLEADER_KUBE_NAMESPACE", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    from kubernetes.config import kube_config

    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))

    def run(*args: str) -> tuple[int, str]:
        capsys.readouterr()
        where = 2 if args[0] == "submit" else 1  # `submit KIND`: the engine option follows the kind
        code = main([*args[:where], "--engine", "kubernetes", *args[where:]])
        captured = capsys.readouterr()
        return code, captured.out + captured.err

    return run


def scheduler_token(real: ControlPlane) -> str:
    """The token of ringleader's scheduler ServiceAccount, which its Deployment runs under."""
    return real.service_account_token(names.SYSTEM_NAMESPACE, manifests.SCHEDULER_ACCOUNT)


def leading_scheduler(real: ControlPlane, identity: str, dra: bool = False, clock: Clock = SYSTEM_CLOCK) -> Scheduler:
    """ringleader's scheduler as its Deployment runs it (under its ServiceAccount's token, so the
    install's RBAC is what it gets), its informers listed once and holding the Lease.

    The test drives its cycles by hand and nothing renews the Lease, so it is taken for an hour:
    with the daemon's 15 s a test slowed past that on a loaded machine would find its scheduler
    no longer leading, and every cycle would quietly do nothing. Failover, where the duration
    matters, is tested with the daemon itself. ``clock``: the time its cycles read (a test moves
    it past the minimum run), the Lease's too: moved less than an hour, it still leads."""
    s = Scheduler(Api(real.client(token=scheduler_token(real))), identity, dra=dra, lease_seconds=3600, clock=clock)
    s.sync()
    real.until(s.elector.try_acquire_or_renew, "the scheduler Lease")
    return s
