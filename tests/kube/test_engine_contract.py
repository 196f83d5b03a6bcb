"""Contract tests: `--engine kubernetes` job commands against the fake API server, through the
CLI a user types. The fake plays mpi-operator's part (it makes the pods of an MPIJob) and
kubelet's (phases, logs); the scheduler is ringleader's own."""

from __future__ import annotations

import copy

import pytest
import yaml

from kube.fakeapi import FakeApiServer
from kube.kubeobjs import node
from ringleader.cli.main import main
from ringleader.engines.kubernetes import names
from ringleader.engines.kubernetes.client import Api, load_client
from ringleader.engines.kubernetes.scheduler import Scheduler


@pytest.fixture
def run(fake: FakeApiServer, tmp_path, monkeypatch, capsys):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RINGLEADER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RINGLEADER_KUBE_SERVER", fake.url)
    monkeypatch.setenv("RINGLEADER_KUBE_NAMESPACE", "team-a")

    def invoke(*args: str) -> tuple[int, str]:
        """The exit code and stdout+stderr of `ringleader ARGS`, through the real entry point."""
        capsys.readouterr()
        code = main(list(args))
        captured = capsys.readouterr()
        return code, captured.out + captured.err

    return invoke


def operator_makes_pods(fake: FakeApiServer, job_name: str, namespace: str = "team-a") -> None:
    """What mpi-operator does for an MPIJob: one pod per replica, from the templates."""
    job = fake.get("mpijobs", job_name, namespace)
    for role, replica in job["spec"]["mpiReplicaSpecs"].items():
        for i in range(replica["replicas"]):
            template = copy.deepcopy(replica["template"])
            name = f"{job_name}-{role.lower()}" + (f"-{i}" if role == "Worker" else "")
            labels = {**template["metadata"]["labels"], names.JOB_ROLE_LABEL: role.lower()}
            fake.put("pods", {"apiVersion": "v1", "kind": "Pod",
                              "metadata": {"name": name, "namespace": namespace, "labels": labels},
                              "spec": template["spec"], "status": {"phase": "Pending"}})  # fmt: skip


def test_contract_submit_dry_run_yaml_is_the_manifests(run, fake: FakeApiServer) -> None:  # type: ignore[no-untyped-def]
    code, out = run("submit", "mpi", "--engine", "kubernetes", "--name", "vgg", "--workers", "4", "--gpus", "1",
                    "--gputopology=true", "--dry-run", "-o", "yaml", "mpirun -np 4 python train.py")  # fmt: skip
    assert code == 0, out
    docs = list(yaml.safe_load_all(out))
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
    assert group["metadata"]["ownerReferences"][0]["uid"] == fake.get("mpijobs", "vgg", "team-a")["metadata"]["uid"]
    assert group["spec"]["minMember"] == 5
    code, out = run("submit", "mpi", "--engine", "kubernetes", "--name", "vgg", "--workers", "1", "python x.py")
    assert code == 1 and "already exists" in out

    operator_makes_pods(fake, "vgg")
    sched = Scheduler(Api(load_client(host=fake.url)), "s")
    sched.sync()
    assert sched.elector.try_acquire_or_renew()
    assert [r.ok for r in sched.cycle()] == [True]
    launcher = fake.get("pods", "vgg-launcher", "team-a")
    launcher["status"] = {"phase": "Running"}
    fake.pod_logs["team-a/vgg-launcher"] = "step 1\nstep 2\n"

    code, out = run("get", "--engine", "kubernetes", "vgg")
    assert code == 0, out
    assert "vgg-worker-3" in out and "vgg-launcher" in out
    placement = next(line for line in out.splitlines() if line.startswith("Placement"))
    assert "4w: GPU" in placement  # all four workers on one node's NVLink quad
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
