"""Against a real v1.36 control plane (tests/kube/realserver.py): ringleader's install as an
administrator applies it, and what it grants the people who run jobs."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from kube.kubeobjs import node, podgroup
from kube.realserver import ControlPlane, KubeletLogs, RequestFailed, leading_scheduler, namespace_user_cli
from ringleader.engines.kubernetes import names


def edit_role_binding(user: str, namespace: str) -> dict[str, object]:
    """``user`` given the built-in `edit` role in ``namespace``, as an administrator does."""
    rbac = "rbac.authorization.k8s.io"
    return {"apiVersion": f"{rbac}/v1", "kind": "RoleBinding",
            "metadata": {"name": f"{user}-edit", "namespace": namespace},
            "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"apiGroup": rbac, "kind": "User", "name": user}]}  # fmt: skip


def test_real_a_namespace_editor_may_run_jobs_in_their_namespace_only(real: ControlPlane) -> None:
    """The install aggregates its jobs role into `edit`: a user given `edit` in one namespace
    creates PodGroups (and MPIJobs) there, and nothing in a namespace not theirs."""
    for ns in ("alice-ns", "bob-ns"):
        real.namespace(ns)
    real.apply([edit_role_binding("alice", "alice-ns")])
    group = f"/apis/{names.PODGROUP_GROUP}/{names.PODGROUP_VERSION}"
    real.until(lambda: _may(real, "alice", "alice-ns"), "the jobs role aggregated into edit")
    real.request("POST", f"{group}/namespaces/alice-ns/{names.PODGROUP_PLURAL}", podgroup("g", 2, "alice-ns"),
                 user="alice")  # fmt: skip
    mpijob = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "j"},
              "spec": {"mpiReplicaSpecs": {}}}  # fmt: skip
    real.request("POST", "/apis/kubeflow.org/v2beta1/namespaces/alice-ns/mpijobs", mpijob, user="alice")
    with pytest.raises(RequestFailed) as refused:
        real.request("POST", f"{group}/namespaces/bob-ns/{names.PODGROUP_PLURAL}", podgroup("g", 2, "bob-ns"),
                     user="alice")  # fmt: skip
    assert refused.value.status == 403
    # and the cluster's GPU delivery, which every submit reads, is readable by any user
    config = real.request("GET", f"/api/v1/namespaces/{names.SYSTEM_NAMESPACE}/configmaps/{names.CLUSTER_CONFIG}",
                          user="bob")  # fmt: skip
    assert config["data"]["gpuDelivery"] == "env"


def test_real_a_node_joins_schedulable_with_the_agents_topology(real: ControlPlane) -> None:
    real.add_node(node("gpu-a"))
    joined = real.get("/api/v1/nodes/gpu-a")
    assert joined is not None and not joined["spec"].get("taints")  # the API server's not-ready taint is gone
    assert joined["status"]["allocatable"][names.GPU_RESOURCE] == "8"
    assert names.TOPOLOGY_ANNOTATION in joined["metadata"]["annotations"]


def _may(real: ControlPlane, user: str, namespace: str) -> bool:
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": user, "resourceAttributes": {"namespace": namespace, "verb": "create",
                                                            "group": names.PODGROUP_GROUP,
                                                            "resource": names.PODGROUP_PLURAL}}}  # fmt: skip
    return bool(real.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)["status"].get(
        "allowed"))


def mpi_operator_makes_pods(real: ControlPlane, namespace: str, job_name: str, role: str) -> None:
    """What mpi-operator v2 does for an MPIJob: a pod per worker replica from its template (its
    role label added), and, once they are Ready (launcherCreationPolicy WaitForWorkersReady), the
    launcher as a batch Job from the Launcher template, whose pod the real Job controller makes
    (`<job>-launcher-<random>`)."""
    job = real.request("GET", f"/apis/kubeflow.org/v2beta1/namespaces/{namespace}/mpijobs/{job_name}")
    owner = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": job_name,
             "uid": job["metadata"]["uid"], "controller": True}  # fmt: skip
    replica = job["spec"]["mpiReplicaSpecs"][role]
    template = copy.deepcopy(replica["template"])
    template["metadata"]["labels"][names.JOB_ROLE_LABEL] = role.lower()
    template["spec"]["restartPolicy"] = replica["restartPolicy"]  # the operator's, from the replica spec
    if role == "Worker":
        for i in range(replica["replicas"]):
            real.request("POST", f"/api/v1/namespaces/{namespace}/pods", {
                "apiVersion": "v1", "kind": "Pod", "spec": template["spec"],
                "metadata": {**template["metadata"], "name": f"{job_name}-worker-{i}", "ownerReferences": [owner]}})
        return
    template["spec"]["containers"][0]["env"] += [{"name": "NVIDIA_VISIBLE_DEVICES"},  # mpi-operator's "no GPU"
                                                 {"name": "NVIDIA_DRIVER_CAPABILITIES"}]  # fmt: skip
    real.request("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": f"{job_name}-launcher", "ownerReferences": [owner]},
        "spec": {"backoffLimit": 0, "template": template}})


def test_real_a_namespace_user_submits_gets_reads_logs_and_deletes(
        real: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """Alice, with only `edit` in team-a and her own token, through the CLI: submit an MPIJob (the
    real CRD's schema checks it), get it once mpi-operator's pods are bound, read the launcher's
    log (from its kubelet, through the API server), delete it."""
    real.namespace("team-a")
    real.apply([edit_role_binding("alice", "team-a")])
    kubelet = KubeletLogs(tmp_path)
    try:
        gpu = node("user-gpu-0", mode=None)  # a node for jobs without --gputopology
        gpu["status"].update(kubelet.node_status())
        real.add_node(gpu)
        run = namespace_user_cli(real, "alice", "team-a", tmp_path / "home", monkeypatch, capsys)
        real.until(lambda: _may(real, "alice", "team-a"), "the jobs role aggregated into edit")
        code, out = run("submit", "mpi", "--name", "vgg", "--workers", "2", "--gpus", "1", "-e", "HF_TOKEN=t",
                        "mpirun -np 2 python train.py")  # fmt: skip
        assert code == 0, out
        assert real.get("/api/v1/namespaces/team-a/secrets/vgg-env") is not None
        mpi_operator_makes_pods(real, "team-a", "vgg", "Worker")
        sched = leading_scheduler(real, "sched-user")
        try:
            assert [r.ok for r in sched.cycle()] == [True]
            for item in real.request("GET", "/api/v1/namespaces/team-a/pods")["items"]:  # kubelet: they run
                real.set_pod_status("team-a", item["metadata"]["name"], {"phase": "Running", "conditions": [
                    {"type": "Ready", "status": "True"}]})  # fmt: skip
            mpi_operator_makes_pods(real, "team-a", "vgg", "Launcher")
            launcher = real.until(lambda: next((p["metadata"]["name"] for p in real.request(
            "GET", "/api/v1/namespaces/team-a/pods")["items"] if "-launcher-" in p["metadata"]["name"]), None),
                "the Job controller's launcher pod")  # fmt: skip
            sched.sync()
            assert [r.ok for r in sched.cycle()] == [True]
        finally:
            sched.elector.release()
        kubelet.logs[f"team-a/{launcher}"] = "step 1\nstep 2\n"
        for args, expect in ((("get", "vgg"), "vgg-worker-1"), (("list",), "vgg"), (("logs", "vgg"), "step 2"),
                             (("delete", "vgg"), "deleted")):  # fmt: skip
            code, out = run(*args)
            assert code == 0 and expect in out, (args, out)
        assert any(f"/containerLogs/team-a/{launcher}/" in path for path in kubelet.asked)
        # Deleted in the foreground: the job stays, marked, until its kubelet has stopped its pods.
        job = "/apis/kubeflow.org/v2beta1/namespaces/team-a/mpijobs/vgg"
        assert (real.get(job) or {}).get("metadata", {}).get("deletionTimestamp")
        in_team = "/api/v1/namespaces/team-a/pods"
        pods = real.until(lambda: [p for p in real.request("GET", in_team)["items"]
                                   if p["metadata"].get("deletionTimestamp")], "its pods being deleted")  # fmt: skip
        for pod in pods:  # their kubelet stopped them
            real.request("DELETE", f"{in_team}/{pod['metadata']['name']}", {"gracePeriodSeconds": 0})
        real.until(lambda: real.get(job) is None, "the MPIJob gone once its pods are")
        code, out = run("get", "vgg", "-n", "kube-system")  # not hers: one line, with the fix
        assert code == 1 and out.count("\n") == 1 and "cannot get" in out, out
    finally:
        kubelet.stop()
        for item in real.request("GET", "/api/v1/namespaces/team-a/pods")["items"]:
            real.request("DELETE", f"/api/v1/namespaces/team-a/pods/{item['metadata']['name']}",
                         {"gracePeriodSeconds": 0})  # fmt: skip
