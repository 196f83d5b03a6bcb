"""Contract tests: `--engine kubernetes` job commands against the fake API server, through the
CLI a user types. The fake plays mpi-operator's part (it makes the pods of an MPIJob) and
kubelet's (phases, logs); the scheduler is ringleader's own."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml

from kube.fakeapi import FakeApiServer, permitted
from kube.kubeobjs import node
from ringleader.cli.main import main
from ringleader.engines.kubernetes import manifests, names
from ringleader.engines.kubernetes.client import Api, load_client
from ringleader.engines.kubernetes.scheduler import Scheduler


@pytest.fixture
def run(fake: FakeApiServer, tmp_path, monkeypatch, capsys):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RINGLEADER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RINGLEADER_KUBE_SERVER", fake.url)
    monkeypatch.setenv("RINGLEADER_KUBE_NAMESPACE", "team-a")
    # the install's ConfigMap that says how GPUs reach workers (`kube manifests`)
    fake.put("configmaps", next(o for o in manifests.install() if o["metadata"]["name"] == names.CLUSTER_CONFIG))

    def invoke(*args: str) -> tuple[int, str]:
        """The exit code and stdout+stderr of `ringleader ARGS`, through the real entry point."""
        capsys.readouterr()
        code = main(list(args))
        captured = capsys.readouterr()
        return code, captured.out + captured.err

    return invoke


LAUNCHER_POD_SUFFIX = "x7k2p"  # the launcher is a batch Job: its pod gets a generated suffix


def operator_makes_pods(fake: FakeApiServer, job_name: str, namespace: str = "team-a", role: str = "Worker") -> None:
    """What mpi-operator does for an MPIJob: a pod per worker replica from its template, and
    (with launcherCreationPolicy WaitForWorkersReady, once they are Ready) the launcher's Job,
    whose pod is `<job>-launcher-<suffix>`."""
    job = fake.get("mpijobs", job_name, namespace)
    assert job["spec"]["launcherCreationPolicy"] == "WaitForWorkersReady"
    replica = job["spec"]["mpiReplicaSpecs"][role]
    if True:
        for i in range(replica["replicas"]):
            template = copy.deepcopy(replica["template"])
            name = f"{job_name}-worker-{i}" if role == "Worker" else f"{job_name}-launcher-{LAUNCHER_POD_SUFFIX}"
            labels = {**template["metadata"]["labels"], names.JOB_ROLE_LABEL: role.lower()}
            if role == "Launcher":  # mpi-operator's "no GPU" for a launcher that runs no rank
                template["spec"]["containers"][0]["env"] += [{"name": "NVIDIA_VISIBLE_DEVICES"},
                                                             {"name": "NVIDIA_DRIVER_CAPABILITIES"}]
            notes = template["metadata"].get("annotations") or {}  # mpi-operator copies the template's
            fake.put("pods", {"apiVersion": "v1", "kind": "Pod",
                              "metadata": {"name": name, "namespace": namespace, "labels": labels,
                                           **({"annotations": notes} if notes else {})},
                              "spec": template["spec"], "status": {"phase": "Pending"}})  # fmt: skip


def test_contract_submit_dry_run_yaml_is_the_manifests(run, fake: FakeApiServer) -> None:  # type: ignore[no-untyped-def]
    fake.put("nodes", node("gpu-0"))
    code, out = run("submit", "mpi", "--engine", "kubernetes", "--name", "vgg", "--workers", "4", "--gpus", "1",
                    "--gputopology=true", "--dry-run", "-o", "yaml", "mpirun -np 4 python train.py")  # fmt: skip
    assert code == 0, out
    assert "note: 4 ranks per worker pod" in out  # the plan's NVLink quad: one pod (on stderr)
    docs = list(yaml.safe_load_all("\n".join(ln for ln in out.splitlines() if not ln.startswith("note: "))))
    assert [d["kind"] for d in docs] == ["MPIJob", "PodGroup"]
    assert docs[0]["metadata"]["namespace"] == "team-a"
    assert "&id" not in out  # no YAML anchors: every object spelled out
    assert not fake.calls("create")  # a dry run writes nothing


def test_contract_submit_get_list_logs_delete(run, fake: FakeApiServer) -> None:  # type: ignore[no-untyped-def]
    for i in range(2):
        fake.put("nodes", node(f"gpu-{i}"))
    code, out = run("submit", "mpi", "--engine", "kubernetes", "--name", "vgg", "--workers", "4", "--gpus", "1",
                    "--gputopology=true", "--image", "tf:2.3", "mpirun -np 4 python train.py")  # fmt: skip
    assert code == 0, out
    creates = [r.path for r in fake.calls("create")]
    assert creates == ["/apis/kubeflow.org/v2beta1/namespaces/team-a/mpijobs",
                       "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/team-a/podgroups"]  # fmt: skip
    group = fake.get("podgroups", "vgg", "team-a")
    job = fake.get("mpijobs", "vgg", "team-a")
    assert group["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    # the plan puts the 4 ranks on one node's NVLink quad: one worker pod holds them (NCCL P2P
    # between ranks needs one host and one IPC namespace), the gang is the worker pods
    assert job["spec"]["slotsPerWorker"] == 4 and job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 1
    assert group["spec"]["minMember"] == 1
    assert "4 ranks per worker pod" in out
    code, out = run("submit", "mpi", "--engine", "kubernetes", "--name", "vgg", "--workers", "1", "python x.py")
    assert code == 1 and "already exists" in out

    operator_makes_pods(fake, "vgg")
    sched = Scheduler(Api(load_client(host=fake.url)), "s")
    sched.sync()
    assert sched.elector.try_acquire_or_renew()
    assert [r.ok for r in sched.cycle()] == [True]
    fake.get("pods", "vgg-worker-0", "team-a")["status"] = {"phase": "Running"}
    operator_makes_pods(fake, "vgg", role="Launcher")  # the workers are Ready: now the launcher
    launcher_pod = f"vgg-launcher-{LAUNCHER_POD_SUFFIX}"
    sched.sync()
    assert [r.ok for r in sched.cycle()] == [True]
    launcher = fake.get("pods", launcher_pod, "team-a")
    assert launcher["spec"]["nodeName"] == fake.get("pods", "vgg-worker-0", "team-a")["spec"]["nodeName"]
    launcher["status"] = {"phase": "Running"}
    fake.pod_logs[f"team-a/{launcher_pod}"] = "step 1\nstep 2\n"
    fake.pod_logs["team-a/vgg-worker-0"] = "sshd\n"

    code, out = run("get", "--engine", "kubernetes", "vgg")
    assert code == 0, out
    assert "vgg-worker-0" in out and launcher_pod in out
    placement = next(line for line in out.splitlines() if line.startswith("Placement"))
    assert "4w: GPU" in placement  # all four workers on one node's NVLink quad
    code, out = run("logs", "--engine", "kubernetes", "vgg", "-i", "launcher")
    assert code == 0 and out == "step 1\nstep 2\n", out
    code, out = run("logs", "--engine", "kubernetes", "vgg", "-i", "worker-0")
    assert code == 0 and out == "sshd\n", out
    code, out = run("list", "--engine", "kubernetes")
    assert code == 0 and "vgg" in out and "MPIJOB" in out
    code, out = run("logs", "--engine", "kubernetes", "vgg", "--tail", "1")
    assert code == 0 and out == "step 1\nstep 2\n"  # the fake ignores tailLines; the request carries it
    log_call = [r for r in fake.requests if r.path.endswith("/log")][-1]
    assert log_call.query["tailLines"] == "1"
    code, out = run("logs", "--engine", "kubernetes", "-f", "vgg")
    assert code == 0 and out == "step 1\nstep 2\n"
    assert [r for r in fake.requests if r.path.endswith("/log")][-1].query["follow"] == "true"
    code, out = run("top", "job", "--engine", "kubernetes", "vgg")
    assert code == 0 and "vgg-worker-0" in out
    code, out = run("top", "node", "--engine", "kubernetes")
    assert code == 0 and "gpu-0" in out
    code, out = run("delete", "--engine", "kubernetes", "vgg")
    assert code == 0 and "deleted" in out
    assert fake.get("mpijobs", "vgg", "team-a") is None
    code, out = run("get", "--engine", "kubernetes", "vgg")
    assert code == 1 and "not found" in out


def test_contract_secret_env_is_created_as_a_secret_owned_by_the_job(run, fake: FakeApiServer) -> None:  # type: ignore[no-untyped-def]
    fake.put("nodes", node("gpu-0", mode=None))
    code, out = run("submit", "mpi", "--engine", "kubernetes", "--name", "tok", "--workers", "2", "--gpus", "1",
                    "-e", "WANDB_API_KEY=k-123", "-e", "EPOCHS=3", "--", "python", "train.py")  # fmt: skip
    assert code == 0, out
    creates = [r.path for r in fake.calls("create")]
    assert creates == ["/apis/kubeflow.org/v2beta1/namespaces/team-a/mpijobs", "/api/v1/namespaces/team-a/secrets",
                       "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/team-a/podgroups"]  # fmt: skip
    assert "k-123" not in str(fake.calls("create")[0].body)  # the MPIJob: readable by whoever may read jobs
    secret = fake.get("secrets", "tok-env", "team-a")
    assert secret["stringData"] == {"WANDB_API_KEY": "k-123"}
    assert secret["metadata"]["ownerReferences"][0]["uid"] == fake.get("mpijobs", "tok", "team-a")["metadata"]["uid"]


@pytest.mark.parametrize("dry_run", [False, True])
def test_contract_a_name_too_long_for_its_worker_pods_is_one_line(run, fake: FakeApiServer, dry_run: bool) -> None:  # type: ignore[no-untyped-def]
    fake.put("nodes", node("cpu-0", mode="default", gpus_preset=None))
    name = "n" * 54  # n...n-worker-9 is 63 characters: ten workers fit, sixteen do not
    fits = run("submit", "mpi", "--engine", "kubernetes", "--name", name, "--workers", "10", "--dry-run", "true")
    assert fits[0] == 0, fits[1]
    args = ["submit", "mpi", "--engine", "kubernetes", "--name", name, "--workers", "16", *(["--dry-run"] * dry_run)]
    code, out = run(*args, "true")
    assert code == 2 and out.count("\n") == 1, out
    assert out.startswith(f"error: job name '{name}' is too long for Kubernetes with 16 worker(s)")
    assert f"'{name}-worker-15', 64 characters" in out and "To fix: use a --name of at most 53 characters" in out
    assert not fake.calls("create")


def test_contract_unreachable_cluster_is_one_line(run, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RINGLEADER_KUBE_SERVER", "http://127.0.0.1:9")
    code, out = run("list", "--engine", "kubernetes")
    assert code == 1
    assert out.startswith("error: cannot reach the API server") and out.count("\n") == 1


# Kubernetes' `edit` ClusterRole, the part of it the engine's calls touch (pods, their logs,
# secrets, events), as the API server defines it; bound in one namespace only.
EDIT_ROLE = [
    {"apiGroups": [""], "resources": ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy",
                                      "configmaps", "secrets", "services", "persistentvolumeclaims"],
     "verbs": ["create", "delete", "deletecollection", "patch", "update"]},
    {"apiGroups": [""], "resources": ["pods", "pods/log", "pods/status", "configmaps", "events", "secrets",
                                      "services", "persistentvolumeclaims"], "verbs": ["get", "list", "watch"]},
]  # fmt: skip


SCHEDULER_ROLE = "ringleader-scheduler"
SCHEDULER_ACCOUNT = "system:serviceaccount:ringleader-system:ringleader-scheduler"


def as_namespace_user(fake: FakeApiServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """RBAC on, as a cluster has it: alice with `edit` in team-a (which the install's ClusterRole
    ringleader-jobs aggregates into) and the install's read of its cluster ConfigMap, nothing
    outside team-a; the scheduler's ServiceAccount with the install's roles. The CLI then talks
    to the cluster as alice, through a kubeconfig with her token."""
    installed = manifests.install()
    jobs_role = next(o for o in installed if o["metadata"]["name"] == manifests.USER_ROLE)
    assert jobs_role["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    config_role = next(o for o in installed if o["kind"] == "Role" and o["metadata"]["name"] == names.CLUSTER_CONFIG)
    fake.grant("alice", [(r, "team-a") for r in EDIT_ROLE + jobs_role["rules"]]
               + [(r, names.SYSTEM_NAMESPACE) for r in config_role["rules"]])  # fmt: skip
    sched_role = next(o for o in installed if o["kind"] == "ClusterRole" and o["metadata"]["name"] == SCHEDULER_ROLE)
    lease = next(o for o in installed if o["kind"] == "Role" and o["metadata"]["name"] == SCHEDULER_ROLE)
    fake.grant(SCHEDULER_ACCOUNT, [(r, None) for r in sched_role["rules"]]
               + [(r, names.SYSTEM_NAMESPACE) for r in lease["rules"]])  # fmt: skip
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "alice",
        "clusters": [{"name": "fake", "cluster": {"server": fake.url}}],
        "users": [{"name": "alice", "user": {"token": "alice"}}],
        "contexts": [{"name": "alice", "context": {"cluster": "fake", "user": "alice", "namespace": "team-a"}}],
    }))  # fmt: skip
    monkeypatch.delenv("RINGLEADER_KUBE_SERVER")
    monkeypatch.delenv("RINGLEADER_KUBE_NAMESPACE")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    # the client read KUBECONFIG when it was first imported: point its default at the file too
    from kubernetes.config import kube_config

    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))


def scheduler_as_its_account(fake: FakeApiServer) -> Scheduler:
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = fake.url
    configuration.api_key = {"BearerToken": f"Bearer {SCHEDULER_ACCOUNT}"}
    return Scheduler(Api(client.ApiClient(configuration)), "s")


def test_contract_a_namespace_only_user_submits_gets_logs_and_deletes(run, fake: FakeApiServer, monkeypatch,
                                                                      tmp_path) -> None:  # type: ignore[no-untyped-def]
    fake.put("nodes", node("gpu-0", mode=None))
    as_namespace_user(fake, monkeypatch, tmp_path)
    code, out = run("submit", "mpi", "--engine", "kubernetes", "--name", "vgg", "--workers", "2", "--gpus", "1",
                    "-e", "HF_TOKEN=t", "mpirun -np 2 python train.py")  # fmt: skip
    assert code == 0, out
    assert "no placement preview: you may not list nodes and pods cluster-wide (403)" in out
    assert fake.get("mpijobs", "vgg", "team-a") is not None and fake.get("secrets", "vgg-env", "team-a")
    assert any(r.path == "/api/v1/nodes" and r.user == "alice" for r in fake.requests)  # tried, refused

    operator_makes_pods(fake, "vgg")  # mpi-operator and the scheduler are the cluster's
    sched = scheduler_as_its_account(fake)
    sched.sync()
    assert sched.elector.try_acquire_or_renew()
    assert [r.ok for r in sched.cycle()] == [True]
    operator_makes_pods(fake, "vgg", role="Launcher")
    sched.sync()
    sched.cycle()
    fake.pod_logs[f"team-a/vgg-launcher-{LAUNCHER_POD_SUFFIX}"] = "step 1\n"

    for args, expect in ((("get", "vgg"), "vgg-worker-"), (("list",), "vgg"), (("logs", "vgg"), "step 1"),
                         (("logs", "vgg", "-i", "launcher"), "step 1"), (("delete", "vgg"), "deleted")):  # fmt: skip
        code, out = run(args[0], "--engine", "kubernetes", *args[1:])
        assert code == 0 and expect in out, (args, out)
    assert fake.get("mpijobs", "vgg", "team-a") is None
    mine = [r for r in fake.requests if r.user == "alice"]
    outside = {r.path for r in mine if "/namespaces/team-a/" not in r.path
               and not r.path.endswith(f"/configmaps/{names.CLUSTER_CONFIG}")}  # fmt: skip
    assert outside == {"/api/v1/nodes"}  # only the preview reached outside team-a, and was refused
    assert not [r for r in fake.requests if r.user == SCHEDULER_ACCOUNT and not permitted(
        r, fake.users[SCHEDULER_ACCOUNT])]  # the scheduler needed nothing beyond its install roles


def test_contract_the_fake_refuses_what_rbac_does_not_grant(run, fake: FakeApiServer, monkeypatch,
                                                             tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The check can fail: the same user in another namespace is refused in one line."""
    as_namespace_user(fake, monkeypatch, tmp_path)
    code, out = run("list", "--engine", "kubernetes")
    assert code == 0
    code, out = run("submit", "mpi", "--engine", "kubernetes", "-n", "team-b", "--name", "x", "python x.py")
    assert code == 1 and out.count("\n") == 1, out
    assert 'User "alice" cannot get resource "mpijobs"' in out and 'namespace "team-b"' in out
    assert "To fix: ask for the edit role in that namespace" in out  # not the scheduler's RBAC
    assert not fake.calls("create")


def test_contract_n_picks_the_namespace_of_every_job_command(run, fake: FakeApiServer) -> None:  # type: ignore[no-untyped-def]
    fake.put("nodes", node("gpu-0", mode=None))
    code, out = run("submit", "mpi", "--engine", "kubernetes", "-n", "team-b", "--name", "x", "--workers", "2",
                    "python x.py")  # fmt: skip
    assert code == 0, out
    assert fake.get("mpijobs", "x", "team-b") is not None and fake.get("podgroups", "x", "team-b") is not None
    code, out = run("get", "--engine", "kubernetes", "x")  # the context's namespace (team-a) has no such job
    assert code == 1 and "not found in namespace team-a" in out
    for args in (("get", "-n", "team-b", "x"), ("list", "--namespace", "team-b"), ("delete", "-n", "team-b", "x")):
        code, out = run(args[0], "--engine", "kubernetes", *args[1:])
        assert code == 0 and "x" in out, (args, out)
    assert fake.get("mpijobs", "x", "team-b") is None
    code, out = run("list", "--engine", "kubernetes", "-n", "Team_B")
    assert code == 2 and out.startswith("error: -n 'Team_B' is not a namespace name"), out
    code, out = run("cluster", "get", "-n", "team-b")
    assert code == 2 and "-n/--namespace does not apply to `cluster get`" in out, out


def test_contract_top_node_status_and_unhealthy_gpus_from_the_nodes(run, fake: FakeApiServer) -> None:  # type: ignore[no-untyped-def]
    """STATUS from each Node's Ready condition and cordon; UNHEALTHY from the agent's annotation,
    n/a where no agent published it."""
    ready = node("gpu-0")
    ready["metadata"]["annotations"][names.GPUS_UNHEALTHY_ANNOTATION] = "1"
    down = node("gpu-1")
    down["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "KubeletNotReady",
                                     "message": "container runtime network not ready"}]  # fmt: skip
    lost = node("gpu-2")
    lost["status"]["conditions"] = [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                                     "message": "Kubelet stopped posting node status."}]  # fmt: skip
    for obj in (ready, down, lost, node("gpu-3", unschedulable=True)):
        fake.put("nodes", obj)
    code, out = run("top", "node", "--engine", "kubernetes")
    assert code == 0, out
    rows = {ln.split()[0]: ln.split() for ln in out.splitlines()[1:5]}
    assert {n: r[2] for n, r in rows.items()} == {"gpu-0": "Ready", "gpu-1": "NotReady", "gpu-2": "Unreachable",
                                                  "gpu-3": "Cordoned"}  # fmt: skip
    assert rows["gpu-0"][5] == "1" and rows["gpu-1"][5] == "n/a"
    code, out = run("top", "node", "--engine", "kubernetes", "gpu-1", "gpu-2", "-o", "json")
    shown = {n["name"]: n for n in json.loads(out)}
    assert shown["gpu-1"]["reason"] == "KubeletNotReady: container runtime network not ready"
    assert shown["gpu-2"]["reason"].startswith("NodeStatusUnknown") and shown["gpu-2"]["unhealthy_gpus"] is None
    code, out = run("top", "node", "--engine", "kubernetes", "gpu-3", "-d")
    assert "Status:         Cordoned" in out and "Reason:         spec.unschedulable (kubectl cordon)" in out


def test_contract_time_limit_and_graceful_delete(run, fake: FakeApiServer, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """--time-limit: every pod's activeDeadlineSeconds (kubelet stops it then, SIGTERM first) and
    the MPIJob's, which the scheduler reads as the gang's expected end; the pods' grace between
    SIGTERM and SIGKILL is RINGLEADER_GRACE_S; `delete` leaves them that grace, `delete --now`
    deletes the pods with kubectl --now's 1 s."""
    for i in range(2):
        fake.put("nodes", node(f"gpu-{i}"))
    monkeypatch.setenv("RINGLEADER_GRACE_S", "12.5")
    for job in ("slow", "quick"):
        code, out = run("submit", "mpi", "--engine", "kubernetes", "--name", job, "--workers", "2", "--gpus", "4",
                        "--gputopology=true", "--time-limit", "1h30m", "mpirun -np 2 python train.py")  # fmt: skip
        assert code == 0, out
        spec = fake.get("mpijobs", job, "team-a")["spec"]
        assert spec["runPolicy"]["activeDeadlineSeconds"] == 5400
        for role in ("Launcher", "Worker"):
            pod_spec = spec["mpiReplicaSpecs"][role]["template"]["spec"]
            assert pod_spec["activeDeadlineSeconds"] == 5400 and pod_spec["terminationGracePeriodSeconds"] == 13
        operator_makes_pods(fake, job)
    sched = Scheduler(Api(load_client(host=fake.url)), "s")
    sched.sync()
    assert sched.elector.try_acquire_or_renew()
    assert [r.ok for r in sched.cycle()] == [True, True]
    sched.sync()
    ends = {g.name: g.expected_end_s for g in sched._holding(1e9) if g.expected_end_s is not None}
    assert ends == {"team-a/slow": 1e9 + 5400, "team-a/quick": 1e9 + 5400}  # bound, not started: from now
    before = len(fake.requests)
    code, out = run("delete", "--engine", "kubernetes", "slow")
    assert code == 0 and "deleted" in out
    assert not [r for r in fake.requests[before:] if r.method == "DELETE" and "/pods/" in r.path]
    assert fake.get("pods", "slow-worker-0", "team-a").get("metadata", {}).get("deletionTimestamp") is None
    code, out = run("delete", "--engine", "kubernetes", "--now", "quick")
    assert code == 0 and "deleted" in out
    assert fake.get("mpijobs", "quick", "team-a") is None
    replicas = spec["mpiReplicaSpecs"]["Worker"]["replicas"]
    pods = [fake.get("pods", f"quick-worker-{i}", "team-a") for i in range(replicas)]
    assert pods and all(p["metadata"]["deletionGracePeriodSeconds"] == 1 for p in pods)


class Yaml11Loader(yaml.SafeLoader):
    """How kubectl reads YAML (sigs.k8s.io/yaml, YAML 1.1): y, Y, n and N are booleans too."""


Yaml11Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:y|Y|n|N)$"), list("yYnN"))
Yaml11Loader.add_constructor("tag:yaml.org,2002:bool", lambda loader, node: node.value in "yY" or
                             yaml.SafeLoader.construct_yaml_bool(loader, node))  # fmt: skip


@pytest.mark.parametrize("value", ["y", "N", "yes", "off", "1", "0.5", "null", "~", "2026-11-27"])
def test_contract_dry_run_yaml_keeps_strings_strings_for_kubectl(run, fake: FakeApiServer, value: str) -> None:  # type: ignore[no-untyped-def]
    fake.put("nodes", node("gpu-0", mode="default"))
    label = re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", value) is not None  # a label value may be it
    labels = ["-l", f"team={value}"] if label else []
    code, out = run("submit", "mpi", "--engine", "kubernetes", "--name", "q", "--workers", "1", "-a", f"note={value}",
                    *labels, "--dry-run", "-o", "yaml", "python train.py")  # fmt: skip
    assert code == 0, out
    text = "\n".join(ln for ln in out.splitlines() if not ln.startswith("note: "))
    job = next(yaml.load_all(text, Loader=Yaml11Loader))
    assert job["metadata"]["annotations"]["note"] == value
    assert not label or job["metadata"]["labels"]["team"] == value


def test_contract_arenas_p_is_the_pods_priority_class(run, fake: FakeApiServer) -> None:  # type: ignore[no-untyped-def]
    fake.put("nodes", node("gpu-0", mode="default"))
    code, out = run("submit", "mpi", "--engine", "kubernetes", "--name", "p", "--workers", "1", "-p", "high",
                    "--dry-run", "-o", "yaml", "python train.py")  # fmt: skip
    assert code == 0, out
    job = next(yaml.safe_load_all("\n".join(ln for ln in out.splitlines() if not ln.startswith("note: "))))
    for role in ("Launcher", "Worker"):
        assert job["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["priorityClassName"] == "high"
    code, out = run("submit", "mpi", "--engine", "embedded", "--name", "p", "--workers", "1", "-p", "high",
                    "--dry-run", "python train.py")  # fmt: skip
    assert code == 2 and out.count("\n") == 1 and "not supported by the embedded engine" in out, out


def test_contract_list_all_namespaces_as_arena_and_kubectl(run, fake: FakeApiServer) -> None:  # type: ignore[no-untyped-def]
    fake.put("nodes", node("gpu-0", mode="default"))
    assert run("submit", "mpi", "--engine", "kubernetes", "--name", "a", "--workers", "1", "python t.py")[0] == 0
    assert run("submit", "mpi", "--engine", "kubernetes", "-n", "team-b", "--name", "a", "--workers", "1",
               "python t.py")[0] == 0  # fmt: skip
    code, out = run("list", "--engine", "kubernetes", "-A")
    assert code == 0, out
    rows = [line.split()[:2] for line in out.splitlines()[1:] if line.strip()]
    assert out.splitlines()[0].split()[:2] == ["NAMESPACE", "NAME"] and sorted(rows) == [["team-a", "a"],
                                                                                        ["team-b", "a"]]  # fmt: skip
    assert run("list", "--engine", "kubernetes")[1].count("\na ") == 1  # the context's namespace alone
    listed = json.loads(run("list", "--engine", "kubernetes", "--allNamespaces", "-o", "json")[1])
    assert sorted(j["namespace"] for j in listed) == ["team-a", "team-b"]
    code, out = run("list", "--engine", "kubernetes", "-A", "-n", "team-a")
    assert code == 2 and out.startswith("error: -A and -n cannot go together")
    code, out = run("list", "--engine", "embedded", "-A")
    assert code == 2 and out.count("\n") == 1 and "-A/--all-namespaces is not supported by the embedded engine" in out


def test_contract_queue_commands_keep_the_queues_the_scheduler_watches(run, fake: FakeApiServer) -> None:  # type: ignore[no-untyped-def]
    """`queue create|list|delete --engine kubernetes` keep the team queues in the ConfigMap the
    scheduler watches; `submit --queue` names the queue on the MPIJob and its workers (which the
    scheduler reads), and a queue that does not exist is refused before anything is created."""
    fake.put("nodes", node("gpu-0", mode=None))
    code, out = run("queue", "create", "team-a", "--gpus", "8", "--cohort", "lab", "--engine", "kubernetes")
    assert (code, out) == (0, "queue/team-a created\n")
    code, out = run("queue", "create", "team-a", "--gpus", "4", "--engine", "kubernetes")
    assert code == 1 and out.startswith("error: queue 'team-a' already exists")
    kept = fake.get("configmaps", names.QUEUES_CONFIG, names.SYSTEM_NAMESPACE)
    assert json.loads(kept["data"]["team-a"]) == {"quota": [["*", 8]], "weight": 1.0, "cohort": "lab"}
    code, out = run("submit", "mpi", "--engine", "kubernetes", "--name", "nope", "--queue", "team-x", "--workers",
                    "2", "--gpus", "1", "python train.py")  # fmt: skip
    assert code == 1 and out.startswith("error: queue 'team-x' not found"), out
    assert not fake.calls("create", plural="mpijobs")
    code, out = run("submit", "mpi", "--engine", "kubernetes", "--name", "vgg", "--queue", "team-a", "--workers", "2",
                    "--gpus", "1", "python train.py")  # fmt: skip
    assert code == 0, out
    job = fake.get("mpijobs", "vgg", "team-a")
    assert job["metadata"]["annotations"][names.QUEUE_ANNOTATION] == "team-a"
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
    assert worker[names.QUEUE_ANNOTATION] == "team-a"
    operator_makes_pods(fake, "vgg")
    sched = Scheduler(Api(load_client(host=fake.url)), "sched-q")
    sched.sync()
    assert sched.elector.try_acquire_or_renew() and [r.ok for r in sched.cycle()] == [True]
    code, out = run("queue", "list", "-o", "json", "--engine", "kubernetes")
    listed = {q["name"]: q for q in json.loads(out)}
    assert (listed["team-a"]["held"], listed["team-a"]["pending"], listed["team-a"]["borrowed"]) == ({"*": 2}, 1, 0)
    code, out = run("queue", "delete", "team-a", "--engine", "kubernetes")
    assert code == 1 and "has 1 waiting or running job(s), team-a/vgg first" in out
    assert run("delete", "vgg", "--engine", "kubernetes")[0] == 0
    assert run("queue", "delete", "team-a", "--engine", "kubernetes") == (0, "queue/team-a deleted\n")
    assert json.loads(run("queue", "list", "-o", "json", "--engine", "kubernetes")[1])[0]["name"] == "default"


def test_contract_submit_pytorch_get_list_logs_delete(run, fake: FakeApiServer) -> None:  # type: ignore[no-untyped-def]
    """`submit pytorch` on Kubernetes: a PyTorchJob (valid against the official CRD, its pods
    admitted by the env policy) and its PodGroup; the Training Operator's pods (made by the
    stand-in as it names and labels them) bound whole by the scheduler, the master as rank 0;
    `get`, `list`, `logs` (the master's, rank 0's) and `delete` read it as they read an MPIJob."""
    from kube.kubeobjs import pytorchjob_pods
    from kube.test_admission_contract import admit
    from kube.test_objects_contract import validate_builtin, validate_crd
    from ringleader.engines.kubernetes.delivery import env_policy

    for i in range(2):
        fake.put("nodes", node(f"gpu-{i}"))
    code, out = run("submit", "pytorch", "--engine", "kubernetes", "--name", "bert", "--workers", "8", "--gpus", "2",
                    "--gputopology=true", "--image", "pt:2.3", "--", "python", "train.py", "--epochs", "1")  # fmt: skip
    assert code == 0, out
    assert [r.path for r in fake.calls("create")] == ["/apis/kubeflow.org/v1/namespaces/team-a/pytorchjobs",
                                                      "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/team-a/podgroups"]
    job = fake.get("pytorchjobs", "bert", "team-a")
    group = fake.get("podgroups", "bert", "team-a")
    assert group["metadata"]["ownerReferences"][0] == {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "bert", "uid": job["metadata"]["uid"],
        "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    sent = {k: v for k, v in job.items() if k in ("apiVersion", "kind", "metadata", "spec")}
    sent["metadata"] = {k: v for k, v in sent["metadata"].items() if k in ("name", "namespace", "labels",
                                                                          "annotations")}  # fmt: skip
    validate_crd(sent, "kubeflow.org_pytorchjobs.yaml", "v1")
    # 8 ranks x 2 GPUs: one 8-GPU node each for 4 ranks, so 2 pods of 4 ranks, a master and a worker
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert job["spec"]["nprocPerNode"] == "4" and group["spec"]["minMember"] == 2
    assert {k: r["replicas"] for k, r in replicas.items()} == {"Master": 1, "Worker": 1}
    container = replicas["Master"]["template"]["spec"]["containers"][0]
    assert container["name"] == "pytorch" and container["image"] == "pt:2.3"
    assert container["command"] == ["torchrun", "--nnodes=2", "--nproc-per-node=4", "--node-rank=$(RANK)",
                                    "--master-addr=$(MASTER_ADDR)", "--master-port=$(MASTER_PORT)",
                                    "--max-restarts=0", "--no-python", "python", "train.py", "--epochs", "1"]
    assert container["resources"]["limits"][names.GPU_RESOURCE] == 8
    pods = pytorchjob_pods(job, "team-a")
    policy, _ = env_policy(names.DEFAULT_RUNTIME_CLASS)
    for pod in pods:
        validate_builtin({k: v for k, v in pod.items() if k != "status"})
        assert admit(policy, pod) == "allowed"
        fake.put("pods", pod)

    sched = Scheduler(Api(load_client(host=fake.url)), "s")
    sched.sync()
    assert sched.elector.try_acquire_or_renew()
    assert [r.ok for r in sched.cycle()] == [True]
    binds = {b.body["metadata"]["name"]: b.body for b in fake.calls("bind")}
    assert binds["bert-master-0"]["metadata"]["annotations"][names.WORKER_INDEX_ANNOTATION] == "0"
    assert binds["bert-worker-0"]["metadata"]["annotations"][names.WORKER_INDEX_ANNOTATION] == "1"
    assert binds["bert-master-0"]["target"]["name"] != binds["bert-worker-0"]["target"]["name"]
    for pod in ("bert-master-0", "bert-worker-0"):
        fake.get("pods", pod, "team-a")["status"] = {"phase": "Running"}
    fake.pod_logs["team-a/bert-master-0"] = "epoch 1 loss 0.7\n"

    code, out = run("get", "--engine", "kubernetes", "bert")
    assert code == 0, out
    assert "Status: RUNNING" in out or "RUNNING" in out
    placement = next(line for line in out.splitlines() if line.startswith("Placement"))
    assert placement.count("4w: GPU") == 2  # 4 ranks on each node
    code, out = run("list", "--engine", "kubernetes")
    assert code == 0 and re.search(r"^bert\s+RUNNING\s+PYTORCHJOB", out, re.MULTILINE), out
    code, out = run("logs", "--engine", "kubernetes", "bert")
    assert code == 0 and out == "epoch 1 loss 0.7\n", out
    code, out = run("delete", "--engine", "kubernetes", "bert")
    assert code == 0 and "deleted" in out
    assert fake.get("pytorchjobs", "bert", "team-a") is None


def test_contract_a_cluster_without_the_training_operator(run, fake: FakeApiServer) -> None:  # type: ignore[no-untyped-def]
    """No PyTorchJob CRD: `submit pytorch` says so in one line and writes nothing; MPIJobs are
    listed as before."""
    fake.put("nodes", node("gpu-0"))
    fake.not_served.add("pytorchjobs")
    code, out = run("submit", "mpi", "--engine", "kubernetes", "--name", "vgg", "--workers", "2", "--gpus", "1",
                    "--gputopology=true", "mpirun -np 2 python train.py")  # fmt: skip
    assert code == 0, out
    code, out = run("submit", "pytorch", "--engine", "kubernetes", "--name", "bert", "--workers", "2", "--gpus", "1",
                    "--gputopology=true", "--", "python", "train.py")  # fmt: skip
    assert code == 1 and len(out.strip().splitlines()) == 1, out
    assert "this cluster has no PyTorchJob resource (kubeflow.org/v1)" in out and "Training Operator" in out
    assert fake.get("podgroups", "bert", "team-a") is None
    code, out = run("list", "--engine", "kubernetes")
    assert code == 0 and "vgg" in out and "bert" not in out
    code, out = run("get", "--engine", "kubernetes", "bert")
    assert code == 1 and "not found" in out


def test_contract_get_predicts_the_placed_gang_as_every_engine_does(run, fake: FakeApiServer) -> None:  # type: ignore[no-untyped-def]
    """`get` of a gang submitted with --model states the model's images/s for the placement the
    scheduler gave it, with its likely range and the other policy's placement beside it, as
    the embedded and Slurm engines state theirs; a job without --model states none."""
    for i in range(2):
        fake.put("nodes", node(f"gpu-{i}"))
    code, out = run("submit", "mpi", "--engine", "kubernetes", "--name", "vgg", "--workers", "4", "--gpus", "1",
                    "--gputopology=true", "--model", "vgg16", "mpirun -np 4 python tf_cnn_benchmarks.py "
                    "--batch_size=64")  # fmt: skip
    assert code == 0, out
    code, out = run("get", "--engine", "kubernetes", "vgg", "-o", "json")
    assert code == 0 and json.loads(out)["prediction"] is None  # not placed yet: nothing to predict
    operator_makes_pods(fake, "vgg")
    sched = Scheduler(Api(load_client(host=fake.url)), "s")
    sched.sync()
    assert sched.elector.try_acquire_or_renew()
    assert [r.ok for r in sched.cycle()] == [True]
    code, out = run("get", "--engine", "kubernetes", "vgg", "-o", "json")
    assert code == 0, out
    pred = json.loads(out)["prediction"]
    assert pred["model"] == "vgg16" and pred["batch_size"] == 64 and pred["images_per_s"] > 0
    low, high = pred["likely_images_per_s"]
    assert low < pred["images_per_s"] < high
    assert pred["alternative"]["policy"] == "default"
    code, out = run("get", "--engine", "kubernetes", "vgg")
    assert code == 0, out
    assert f"Prediction: predicted {pred['images_per_s']:.0f} images/s (likely" in " ".join(out.split()), out
