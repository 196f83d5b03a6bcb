"""Contract tests: the admission policies `kube manifests` installs, their CEL evaluated with
cel-python on the objects and requests the API server would pass them (object, oldObject,
request, variables). cel-python does not type-check the expressions against the schema or
estimate their cost, as the API server does when a policy is created."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kube.kubeobjs import node, template_pods
from ringleader.engines.kubernetes import manifests, names
from ringleader.engines.kubernetes.delivery import (
    SCHEDULER_USER,
    Delivery,
    agent_policy,
    env_policy,
    node_policy,
    podgroup_policy,
)
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
    # As the API server passes a request: no subResource key at all where there is none (a
    # policy reading it unguarded errors: "no such key: subResource", a 422 for the user).
    request = {"operation": op, "userInfo": info, **({"subResource": sub} if sub else {})}
    ctx = celpy.json_to_cel({"object": obj, "oldObject": old, "request": request})
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


def test_contract_a_request_for_no_gpu_is_no_device_plugin_pod() -> None:
    """`nvidia.com/gpu: 0` asks the device plugin for nothing and may land anywhere (by nodeName
    too): it does not make NVIDIA_VISIBLE_DEVICES=all or the NVIDIA runtime admissible."""
    policy, _ = env_policy("nvidia")
    everything = {"name": "c", "image": "i", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
    for zero in (0, "0", "00", "0.0", "+0"):
        asks = {**everything, "resources": {"limits": {"nvidia.com/gpu": zero}}}
        assert admit(policy, _pod({"containers": [asks]})).startswith("NVIDIA_* and"), zero
        plain = {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": zero}}}
        assert admit(policy, _pod({"runtimeClassName": "nvidia", "containers": [plain]})).startswith("runtimeClassName")
    one = {**everything, "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    assert admit(policy, _pod({"nodeName": "gpu-0", "containers": [one]})) == "allowed"  # the plugin's business


def test_contract_envfrom_cannot_bring_nvidia_variables_where_the_default_runtime_reads_them() -> None:
    """With no RuntimeClass (the nodes' default runtime is NVIDIA's), a ConfigMap holding
    NVIDIA_VISIBLE_DEVICES=all through envFrom would reach the runtime: each envFrom needs a
    prefix that no NVIDIA_* or CUDA_VISIBLE_DEVICES can come out of."""
    policy, _ = env_policy(None)
    for per_pod in (1, 2):
        for template in template_pods(manifests.mpijob(SPEC, "team-a", per_pod=per_pod)).values():
            assert admit(policy, template) == "allowed"
    source = {"configMapRef": {"name": "gpus"}}
    for prefix in (None, "", "N", "NVIDIA_", "NVIDIA_X", "CUDA_", "CUDA_VISIBLE_DEVICES"):
        env_from = {**source, **({"prefix": prefix} if prefix is not None else {})}
        pod = _pod({"containers": [{"name": "c", "image": "i", "envFrom": [env_from]}]})
        assert admit(policy, pod).startswith("envFrom without a prefix"), prefix
    for prefix in ("APP_", "CUDA_HOME_", "X"):
        pod = _pod({"containers": [{"name": "c", "image": "i", "envFrom": [{**source, "prefix": prefix}]}]})
        assert admit(policy, pod) == "allowed", prefix
    assert admit(env_policy("nvidia")[0], _pod({"containers": [{"name": "c", "image": "i", "envFrom": [source]}]})) \
        == "allowed"  # runc ignores the variables: only the NVIDIA RuntimeClass reads them, and it is guarded


def test_contract_with_dra_delivery_no_pod_but_the_agent_reaches_the_nvidia_runtime() -> None:
    """DRA delivery: the DRA driver gives workers their GPUs; the agent's NVIDIA RuntimeClass and
    NVIDIA_* stay refused to every other pod outside the trusted namespaces."""
    policy, binding = env_policy("nvidia", templates=False)
    trusted = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"]
    assert names.SYSTEM_NAMESPACE in trusted  # the agent's own namespace
    dra = manifests.mpijob(SPEC, "team-a", delivery=Delivery("dra", "nvidia"))
    for template in template_pods(dra).values():
        assert admit(policy, template) == "allowed"
    container = {"name": "c", "image": "i"}
    assert admit(policy, _pod({"runtimeClassName": "nvidia", "containers": [container]})).startswith("runtimeClassName")
    env = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    assert admit(policy, _pod({"containers": [{**container, "env": env}]})).startswith("NVIDIA_* and")
    worker = template_pods(manifests.mpijob(SPEC, "team-a"))["Worker"]  # an env-mode template, here
    assert admit(policy, worker) != "allowed"


def test_contract_only_a_pod_with_the_dra_claim_counts_as_holding_gpus() -> None:
    from ringleader.engines.kubernetes.objects import pod_info

    worker = template_pods(manifests.mpijob(SPEC, "team-a", delivery=Delivery("dra", "nvidia")))["Worker"]
    assert pod_info(worker).gpus == 1
    squatter = _pod({"nodeName": "gpu-0", "containers": [{"name": "c", "image": "busybox"}]},
                    {names.DRA_GPUS_ANNOTATION: "8"})  # fmt: skip
    assert pod_info(squatter).gpus == 0


def _patched(pod: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """``pod`` after the strategic-merge ``patch`` pinning writes (annotations merged, affinity
    set, a gate deleted by name), as the API server would apply it."""
    out = copy.deepcopy(pod)
    out["metadata"].setdefault("annotations", {}).update((patch.get("metadata") or {}).get("annotations") or {})
    spec = patch.get("spec") or {}
    if "affinity" in spec:
        out["spec"]["affinity"] = spec["affinity"]
    for gate in spec.get("schedulingGates") or ():
        if gate.get("$patch") == "delete":
            out["spec"]["schedulingGates"] = [g for g in out["spec"]["schedulingGates"] if g["name"] != gate["name"]]
    return out


def test_contract_the_dra_schedulers_pins_pass_and_nothing_else_it_could_patch() -> None:
    """With DRA the scheduler patches pods (RBAC: every pod). Its pin and ungate pass both
    policies; a change of image, label, other annotation, toleration or an added gate does not;
    nobody else may change the GPU annotations."""
    from ringleader.engines.kubernetes.delivery import SCHEDULER_USER, pin_patch, scheduler_policy, ungate_patch

    env, _ = env_policy("nvidia", templates=False)
    sched, binding = scheduler_policy()
    assert binding["spec"]["validationActions"] == ["Deny"]
    worker = template_pods(manifests.mpijob(SPEC, "team-a", delivery=Delivery("dra", "nvidia")))["Worker"]
    notes = {names.GPU_IDS_ANNOTATION: "0", names.GPU_DEVICES_ANNOTATION: "GPU-1", names.WORKER_INDEX_ANNOTATION: "0"}
    pinned = _patched(worker, pin_patch("gpu-0", notes))
    ungated = _patched(pinned, ungate_patch())
    assert "schedulingGates" in worker["spec"] and ungated["spec"]["schedulingGates"] == []
    for old, new in ((worker, pinned), (pinned, ungated)):
        for policy in (env, sched):
            assert admit(policy, new, old, op="UPDATE", user=SCHEDULER_USER) == "allowed"
    assert "cannot be changed" in admit(env, pinned, worker, op="UPDATE", user="alice")
    assert admit(sched, pinned, worker, op="UPDATE", user="alice") == "not matched"
    for change in ("image", "label", "annotation", "toleration", "gate"):
        bad = copy.deepcopy(pinned)
        if change == "image":
            bad["spec"]["containers"][0]["image"] = "evil:latest"
        elif change == "label":
            bad["metadata"]["labels"]["team"] = "b"
        elif change == "annotation":
            bad["metadata"]["annotations"]["example.com/owner"] = "mallory"
        elif change == "toleration":
            bad["spec"]["tolerations"] = [{"operator": "Exists"}]
        else:
            bad["spec"]["schedulingGates"] = [*bad["spec"]["schedulingGates"], {"name": "example.com/hold"}]
        assert admit(sched, bad, worker, op="UPDATE", user=SCHEDULER_USER).startswith(
            "ringleader's scheduler may change"), change


def test_contract_the_schedulers_decision_and_restart_count_are_the_bindings_only() -> None:
    """A user who edits pods writes neither the scheduler's decision nor the gang's restart count
    (its programs read RINGLEADER_RESTARTS from it) on a pod, at create or later."""
    policy, _ = env_policy("nvidia")
    worker = template_pods(manifests.mpijob(SPEC, "team-a"))["Worker"]
    for key in (names.DECISION_ANNOTATION, names.RESTARTS_ANNOTATION):
        forged = copy.deepcopy(worker)
        forged["metadata"]["annotations"] = {key: "0"}
        assert "written only by its scheduler's Binding" in admit(policy, forged)
        bound = copy.deepcopy(worker)
        bound["metadata"]["annotations"] = {key: "3"}
        assert "cannot be changed" in admit(policy, forged, bound, op="UPDATE")
        assert admit(policy, forged, bound, op="UPDATE", user=SCHEDULER_USER) == "allowed"


def test_contract_a_podgroups_counters_are_the_schedulers_and_its_spec_as_created() -> None:
    policy, binding = podgroup_policy()
    assert policy["spec"]["matchConstraints"]["resourceRules"][0]["apiGroups"] == [names.PODGROUP_GROUP]
    assert binding["spec"]["validationActions"] == ["Deny"]
    made = manifests.podgroup(SPEC, "team-a")
    assert admit(policy, made) == "allowed"
    counted = copy.deepcopy(made)
    counted["metadata"]["annotations"][names.RESTARTS_ANNOTATION] = "2"
    assert "written only by ringleader's scheduler" in admit(policy, counted)
    reset = copy.deepcopy(counted)
    reset["metadata"]["annotations"][names.RESTARTS_ANNOTATION] = "0"
    assert "neither changes on a PodGroup" in admit(policy, reset, counted, op="UPDATE")
    assert admit(policy, reset, counted, op="UPDATE", user=SCHEDULER_USER) == "not matched"
    held = copy.deepcopy(made)  # a move's hold: a user holding GPUs for a gang of theirs
    held["metadata"]["annotations"][names.MOVE_TARGET_ANNOTATION] = '{"workers": []}'
    assert "neither changes on a PodGroup" in admit(policy, held, made, op="UPDATE")
    assert admit(policy, held, made, op="UPDATE", user=SCHEDULER_USER) == "not matched"
    moved = copy.deepcopy(made)
    moved["metadata"]["annotations"][names.SPEC_ANNOTATION] = manifests.stored_spec(
        JobSpec("vgg", 4, 1, ["mpirun", "python", "train.py"], queue="team-b"))
    assert "neither changes on a PodGroup" in admit(policy, moved, made, op="UPDATE")
    labelled = copy.deepcopy(made)
    labelled["metadata"]["labels"]["example.com/team"] = "a"
    assert admit(policy, labelled, made, op="UPDATE") == "allowed"


def test_contract_the_schedulers_node_patches_are_cordons_only() -> None:
    policy, _ = node_policy()
    bare = node("gpu-0")
    blamed = copy.deepcopy(bare)
    blamed["metadata"]["annotations"][names.FAULTS_ANNOTATION] = "{}"
    assert admit(policy, blamed, bare, op="UPDATE", user=SCHEDULER_USER) == "allowed"
    cordoned = copy.deepcopy(blamed)
    cordoned["spec"]["unschedulable"] = True
    cordoned["metadata"]["annotations"][names.CORDON_REASON_ANNOTATION] = "blamed twice"
    assert admit(policy, cordoned, bare, op="UPDATE", user=SCHEDULER_USER) == "allowed"
    for change in ({"metadata": {"labels": {"ack.node.gpu.schedule": "default"}}},
                   {"metadata": {"annotations": {names.TOPOLOGY_ANNOTATION: "{}"}}},
                   {"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}}):  # fmt: skip
        changed = copy.deepcopy(bare)
        for part, values in change.items():
            changed[part].update(values) if part == "spec" else changed[part][next(iter(values))].update(
                next(iter(values.values())))
        assert "may change on a node only" in admit(policy, changed, bare, op="UPDATE", user=SCHEDULER_USER)
    assert admit(policy, cordoned, bare, op="UPDATE", user="admin") == "not matched"  # `node cordon` by a person
