"""Against a real v1.36 control plane (tests/kube/realserver.py): ringleader's install as an
administrator applies it, and what it grants the people who run jobs."""

from __future__ import annotations

import pytest

from kube.kubeobjs import node, podgroup
from kube.realserver import ControlPlane, RequestFailed
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

