"""Contract tests: the admission policies `kube manifests` installs, their CEL evaluated with
cel-python on the objects and requests the API server would pass them (object, oldObject,
request, variables). cel-python does not type-check the expressions against the schema or
estimate their cost, as the API server does when a policy is created."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kube.kubeobjs import template_pods
from ringleader.engines.kubernetes import manifests, names
from ringleader.engines.kubernetes.delivery import agent_policy, env_policy
from ringleader.jobs.spec import JobSpec

SPEC = JobSpec("vgg", 4, 1, ["mpirun", "-np", "4", "python", "train.py"], topology_aware=True)
celpy = pytest.importorskip("celpy", reason="cel-python is not installed (pip install -e '.[dev]')")


def admit(policy: dict[str, Any], obj: dict[str, Any], old: dict[str, Any] | None = None, op: str = "CREATE",
          user: str = "alice", extra: dict[str, list[str]] | None = None, sub: str = "") -> str:  # fmt: skip
    """What the policy answers: "allowed", "not matched", or the message of the first failed rule."""
    env = celpy.Environment()

    def run(expr: str, ctx: Any) -> Any:
        return env.program(env.compile(expr)).evaluate(ctx)

    info: dict[str, Any] = {"username": user, **({"extra": extra} if extra is not None else {})}
    ctx = celpy.json_to_cel({"object": obj, "oldObject": old,
                             "request": {"operation": op, "subResource": sub, "userInfo": info}})  # fmt: skip
    if not all(run(c["expression"], ctx) for c in policy["spec"].get("matchConditions", ())):
        return "not matched"
    variables = celpy.celtypes.MapType({})
    ctx["variables"] = variables
    for v in policy["spec"].get("variables", ()):
        variables[celpy.celtypes.StringType(v["name"])] = run(v["expression"], ctx)
    for rule in policy["spec"]["validations"]:
        if not run(rule["expression"], ctx):
            return str(rule["message"])
    return "allowed"


def _pod(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "team-a", **({"annotations": annotations} if annotations else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def test_contract_env_policy_admits_ringleaders_templates_and_refuses_every_other_gpu_route() -> None:
    policy, binding = env_policy("nvidia")
    assert binding["spec"]["validationActions"] == ["Deny"]
    trusted = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"]
    assert "gpu-operator" in trusted and names.SYSTEM_NAMESPACE in trusted
    for per_pod in (1, 2):
        for template in template_pods(manifests.mpijob(SPEC, "team-a", per_pod=per_pod)).values():
            assert admit(policy, template) == "allowed"
    # the launcher as mpi-operator creates it: its "no GPU" variables appended (empty values)
    launcher = template_pods(manifests.mpijob(SPEC, "team-a"))["Launcher"]
    launcher["spec"]["containers"][0]["env"] += [{"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
                                                 {"name": "NVIDIA_VISIBLE_DEVICES"},
                                                 {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": ""}]  # fmt: skip
    assert admit(policy, launcher) == "allowed"
    hidden = {"name": "c", "image": "i", "env": [{"name": "NVIDIA_VISIBLE_DEVICES"}]}
    assert admit(policy, _pod({"containers": [hidden]})) == "allowed"  # an empty value hides every GPU
    container = {"name": "c", "image": "nvcr.io/nvidia/pytorch:24.01-py3"}
    for env in ({"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}, {"name": "CUDA_VISIBLE_DEVICES", "value": "0"},
                {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "all"},
                {"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}):
        assert admit(policy, _pod({"containers": [{**container, "env": [env]}]})).startswith("NVIDIA_* and")
        init = {"containers": [container], "initContainers": [{**container, "env": [env]}]}
        assert admit(policy, _pod(init)).startswith("NVIDIA_* and")
    # the image's own ENV NVIDIA_VISIBLE_DEVICES=all only counts under the NVIDIA runtime: refused
    assert admit(policy, _pod({"runtimeClassName": "nvidia", "containers": [container]})).startswith("runtimeClassName")
    worker = template_pods(manifests.mpijob(SPEC, "team-a"))["Worker"]
    debug = copy.deepcopy(worker)  # `kubectl debug` adding a container that inherits the runtime
    debug["spec"]["ephemeralContainers"] = [{**container, "name": "debugger"}]
    assert admit(policy, debug, worker, op="UPDATE", sub="ephemeralcontainers") != "allowed"
    # pods of device-plugin nodes (they request nvidia.com/gpu) are the plugin's business
    plugin = {**container, "resources": {"limits": {"nvidia.com/gpu": 1}}}
    assert admit(policy, _pod({"runtimeClassName": "nvidia", "containers": [plugin]})) == "allowed"
    assert admit(policy, _pod({"containers": [{**container, "env": [{"name": "A", "value": "1"}]}]})) == "allowed"
    # the GPU ids: written by the Binding only, never by a create or an update of the pod
    stolen = copy.deepcopy(worker)
    stolen["metadata"]["annotations"] = {names.GPU_IDS_ANNOTATION: "0,1,2,3,4,5,6,7"}
    assert "written only by its scheduler's Binding" in admit(policy, stolen)
    bound = copy.deepcopy(worker)
    bound["metadata"]["annotations"] = {names.GPU_IDS_ANNOTATION: "2"}
    assert "cannot be changed" in admit(policy, stolen, bound, op="UPDATE")
    assert admit(policy, bound, bound, op="UPDATE") == "allowed"
    # the devices NVIDIA_VISIBLE_DEVICES reads (UUIDs): as protected as the ids
    env = {e["name"]: e for e in worker["spec"]["containers"][0]["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"]["valueFrom"]["fieldRef"]["fieldPath"].endswith(
        f"['{names.GPU_DEVICES_ANNOTATION}']")
    uuids = copy.deepcopy(worker)
    uuids["metadata"]["annotations"] = {names.GPU_DEVICES_ANNOTATION: "GPU-aaaa"}
    assert "written only by its scheduler's Binding" in admit(policy, uuids)
    other = copy.deepcopy(worker)
    other["metadata"]["annotations"] = {names.GPU_DEVICES_ANNOTATION: "GPU-bbbb"}
    assert "cannot be changed" in admit(policy, other, uuids, op="UPDATE")
    ids_field = copy.deepcopy(worker)  # the env from the ids annotation is no longer the template's
    ids_field["spec"]["containers"][0]["env"] = [
        {"name": "NVIDIA_VISIBLE_DEVICES",
         "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{names.GPU_IDS_ANNOTATION}']"}}}]
    assert admit(policy, ids_field).startswith("NVIDIA_* and")


def test_contract_the_agent_may_change_only_its_own_node() -> None:
    policy, _ = agent_policy("ringleader-agent")
    me = f"system:serviceaccount:{names.SYSTEM_NAMESPACE}:ringleader-agent"
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-0", "labels": {"zone": "a"},
            "annotations": {"other": "x"}}, "spec": {"podCIDR": "10.0.0.0/24"}}  # fmt: skip
    published = copy.deepcopy(node)
    published["metadata"]["annotations"][names.TOPOLOGY_ANNOTATION] = "{}"
    on = {"authentication.kubernetes.io/node-name": ["gpu-0"]}
    assert admit(policy, published, node, op="UPDATE", user=me, extra=on) == "allowed"
    assert admit(policy, published, node, op="UPDATE", user=me, extra=on, sub="status") == "allowed"
    with_uuids = copy.deepcopy(published)
    with_uuids["metadata"]["annotations"][names.GPU_UUIDS_ANNOTATION] = "GPU-1,GPU-2"
    assert admit(policy, with_uuids, published, op="UPDATE", user=me, extra=on) == "allowed"
    with_health = copy.deepcopy(with_uuids)
    with_health["metadata"]["annotations"][names.GPUS_UNHEALTHY_ANNOTATION] = "1"
    assert admit(policy, with_health, with_uuids, op="UPDATE", user=me, extra=on) == "allowed"
    other_note = copy.deepcopy(published)
    other_note["metadata"]["annotations"]["other"] = "y"
    assert "only the annotations" in admit(policy, other_note, node, op="UPDATE", user=me, extra=on)
    elsewhere = {"authentication.kubernetes.io/node-name": ["gpu-1"]}
    assert "only the node its pod runs on" in admit(policy, published, node, op="UPDATE", user=me, extra=elsewhere)
    assert "only the node its pod runs on" in admit(policy, published, node, op="UPDATE", user=me)  # a legacy token
    relabelled = copy.deepcopy(published)
    relabelled["metadata"]["labels"]["ack.node.gpu.schedule"] = "topology"
    assert "only the annotations" in admit(policy, relabelled, node, op="UPDATE", user=me, extra=on)
    untainted = copy.deepcopy(published)
    untainted["spec"]["taints"] = []
    assert "only the annotations" in admit(policy, untainted, node, op="UPDATE", user=me, extra=on)
    assert admit(policy, relabelled, node, op="UPDATE", user="kubernetes-admin") == "not matched"
