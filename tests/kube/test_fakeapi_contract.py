"""Contract tests of the contract tests' fake API server itself: through the official client it
refuses and behaves as a real API server does on everything ringleader relies on, so a test
that passes against it cannot pass on something a real server would refuse."""

from __future__ import annotations

import threading
import time

import pytest

from kube.fakeapi import NOT_READY_TAINT, FakeApiServer, label_selector, qos_class
from kube.kubeobjs import node, pod, podgroup
from ringleader.engines.kubernetes import names
from ringleader.engines.kubernetes.client import Api, ApiError, JobsApi, load_client


def api_as(fake: FakeApiServer, token: str | None = None) -> JobsApi:
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = fake.url
    if token:
        configuration.api_key = {"BearerToken": f"Bearer {token}"}
    return JobsApi(client.ApiClient(configuration))


def test_contract_label_selectors_whole_syntax(fake: FakeApiServer) -> None:
    fake.put("pods", pod("a", gang="g1"))
    fake.put("pods", pod("b", gang="g2", topology=False))
    fake.put("pods", pod("c"))
    api = api_as(fake)

    def names_of(selector: str) -> list[str]:
        return sorted(p["metadata"]["name"] for p in api.pods("default", selector))

    assert names_of(names.PODGROUP_LABEL) == ["a", "b"]  # the label exists
    assert names_of(f"!{names.PODGROUP_LABEL}") == ["c"]
    assert names_of(f"{names.PODGROUP_LABEL} in (g1, g3)") == ["a"]
    assert names_of(f"{names.PODGROUP_LABEL} notin (g1)") == ["b", "c"]
    assert names_of(f"{names.PODGROUP_LABEL}!=g1,{names.TOPOLOGY_LABEL}") == ["c"]
    with pytest.raises(ApiError) as bad:
        api.pods("default", "a in b")
    assert bad.value.status == 400
    assert label_selector("")({"x": "y"})


def test_contract_field_selectors_only_on_indexed_fields(fake: FakeApiServer) -> None:
    fake.put("pods", pod("run", nodeName="n1") | {"status": {"phase": "Running"}})
    fake.put("pods", pod("wait"))
    api = api_as(fake)
    body = api._json(api.core.list_namespaced_pod, "default", field_selector="spec.nodeName=n1")
    assert [p["metadata"]["name"] for p in body["items"]] == ["run"]
    body = api._json(api.core.list_namespaced_pod, "default",
                     field_selector="status.phase!=Running,spec.schedulerName=ringleader")
    assert [p["metadata"]["name"] for p in body["items"]] == ["wait"]
    for unsupported in ("spec.priority=0", "metadata.labels=x", "status.qosClass=BestEffort"):
        with pytest.raises(ApiError) as bad:
            api._json(api.core.list_namespaced_pod, "default", field_selector=unsupported)
        assert bad.value.status == 400 and "field label not supported" in bad.value.message
    with pytest.raises(ApiError):  # a PodGroup has only the object meta fields
        api._json(api.custom.list_cluster_custom_object, names.PODGROUP_GROUP, names.PODGROUP_VERSION,
                  names.PODGROUP_PLURAL, field_selector="status.phase=Pending")  # fmt: skip


def test_contract_strategic_merge_only_on_builtin_kinds(fake: FakeApiServer) -> None:
    fake.put("podgroups", podgroup("g", 2))
    initialized = {"type": "Initialized", "status": "True"}
    fake.put("pods", pod("p") | {"status": {"phase": "Pending", "conditions": [initialized]}})
    api = api_as(fake)
    group = (names.PODGROUP_GROUP, names.PODGROUP_VERSION, "default", names.PODGROUP_PLURAL, "g")
    with pytest.raises(ApiError) as refused:
        api._json(api.custom.patch_namespaced_custom_object, *group, {"metadata": {"annotations": {"a": "1"}}},
                  _content_type="application/strategic-merge-patch+json")  # fmt: skip
    assert refused.value.status == 415
    api.podgroup_annotate("default", "g", {"a": "1"})  # the client's default for custom objects: a merge patch
    assert fake.get("podgroups", "g")["metadata"]["annotations"] == {"a": "1"}
    # Built-in kinds: strategic merge, lists merged by their key; status only through /status.
    api.pod_unschedulable("default", "p", "waits", "2026-11-24T00:00:00Z")
    assert [c["type"] for c in fake.get("pods", "p")["status"]["conditions"]] == ["Initialized", "PodScheduled"]
    api._json(api.core.patch_namespaced_pod, "p", "default", {"status": {"phase": "Running"}})
    assert fake.get("pods", "p")["status"]["phase"] == "Pending"
    # JSON patches (a list of operations) on both kinds, all or nothing.
    api._json(api.custom.patch_namespaced_custom_object, *group, [{"op": "replace", "path": "/spec/minMember",
                                                                    "value": 3}],
              _content_type="application/json-patch+json")  # fmt: skip
    assert fake.get("podgroups", "g")["spec"]["minMember"] == 3
    with pytest.raises(ApiError) as missing:
        api._json(api.core.patch_namespaced_pod, "p", "default",
                  [{"op": "add", "path": "/metadata/labels/x", "value": "1"},
                   {"op": "remove", "path": "/spec/nothing"}])  # fmt: skip
    assert missing.value.status == 422 and "x" not in fake.get("pods", "p")["metadata"]["labels"]


def test_contract_rbac_per_namespace(fake: FakeApiServer) -> None:
    edit = {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list", "watch"]}
    fake.grant("alice", [(edit, "team-a")])
    fake.put("pods", pod("mine", namespace="team-a"))
    alice = api_as(fake, "alice")
    assert [p["metadata"]["name"] for p in alice.pods("team-a", "")] == ["mine"]
    for call in (lambda: alice.pods("team-b", ""), lambda: alice.list("pods"), lambda: alice.get_node("n")):
        with pytest.raises(ApiError) as refused:
            call()
        assert refused.value.status == 403 and 'User "alice" cannot' in refused.value.message
    with pytest.raises(ApiError) as nobody:
        api_as(fake).pods("team-a", "")
    assert nobody.value.status == 401


def test_contract_graceful_deletion_and_no_binding_of_a_deleting_pod(fake: FakeApiServer) -> None:
    fake.put("pods", pod("bound", nodeName="n1") | {"status": {"phase": "Running"}})
    fake.put("pods", pod("unbound"))
    fake.put("pods", pod("ended", nodeName="n1") | {"status": {"phase": "Succeeded"}})
    api = api_as(fake)
    for name in ("bound", "unbound", "ended"):
        api.delete_pod("default", name, f"uid-{name}")
    assert fake.get("pods", "unbound") is None and fake.get("pods", "ended") is None
    bound = fake.get("pods", "bound")
    assert bound["metadata"]["deletionTimestamp"] and bound["metadata"]["deletionGracePeriodSeconds"] == 30
    fake.finish_deletion("bound")
    assert fake.get("pods", "bound") is None
    fake.put("pods", pod("going") | {"metadata": {"name": "going", "namespace": "default", "uid": "uid-going",
                                                  "deletionTimestamp": "2026-11-24T00:00:00Z"}})  # fmt: skip
    with pytest.raises(ApiError) as refused:
        api.bind("default", "going", "uid-going", "n1", {})
    assert refused.value.status == 409 and "being deleted" in refused.value.message


def test_contract_new_nodes_are_not_ready_and_pods_get_a_qos_class(fake: FakeApiServer) -> None:
    api = api_as(fake)
    api._json(api.core.create_node, node("fresh"))
    taints = fake.get("nodes", "fresh")["spec"]["taints"]
    assert taints == [{"key": NOT_READY_TAINT, "effect": "NoSchedule"}]
    fake.make_ready("fresh")
    assert fake.get("nodes", "fresh")["spec"]["taints"] == []
    api._json(api.core.create_namespaced_pod, "default", pod("limited"))  # limits alone: requests = limits
    assert fake.get("pods", "limited")["status"]["qosClass"] == "Guaranteed"
    assert qos_class({"spec": {"containers": [{"resources": {"limits": {names.GPU_RESOURCE: "1"}}}]}}) == "BestEffort"
    same = {"cpu": "1", "memory": "1Gi"}
    assert qos_class({"spec": {"containers": [{"resources": {"limits": same}}]}}) == "Guaranteed"
    assert qos_class({"spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}}) == "Burstable"


def test_contract_watch_long_polls_until_its_timeout(fake: FakeApiServer) -> None:
    """A watch stays open and delivers what happens while it is open, then ends at its
    timeoutSeconds with a bookmark of the version reached."""
    fake.put("nodes", node("n0"))
    api = Api(load_client(host=fake.url))
    _, version = api.list("nodes")
    threading.Timer(0.3, lambda: fake.put("nodes", node("n1"))).start()
    started = time.monotonic()
    events = list(api.watch("nodes", version, 2))
    took = time.monotonic() - started
    assert [(t, o["metadata"].get("name")) for t, o in events] == [("ADDED", "n1"), ("BOOKMARK", None)]
    assert took >= 1.8  # held open until its timeout; that it ended at all is the BOOKMARK above
    assert events[-1][1]["metadata"]["resourceVersion"] == fake.get("nodes", "n1")["metadata"]["resourceVersion"]
