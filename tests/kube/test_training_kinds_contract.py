"""Contract tests: the training kinds users run besides MPIJob (PyTorchJob, JobSet, Kubeflow
Trainer v2's TrainJob), as examples/kubernetes writes them, placed by ringleader's scheduler with
an MPIJob's guarantees: the whole gang or nothing, NVLink-best GPUs, ranks in the controller's
order, a pending reason with numbers. The controllers are stand-ins (tests/kube/kubeobjs.py)
that name and label pods as the real ones do; the objects are checked against the official CRDs."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube.fakeapi import FakeApiServer
from kube.kubeobjs import jobset_pods, node, pytorchjob_pods, trainjob_objects
from kube.test_objects_contract import validate_builtin, validate_crd
from kube.test_scheduler_contract import scheduler
from ringleader.engines.kubernetes import names
from ringleader.engines.kubernetes.delivery import env_policy

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "kubernetes"
CRDS = {  # kind: (official CRD file, version)
    "PodGroup": ("scheduling.x-k8s.io_podgroups.yaml", "v1alpha1"),
    "PyTorchJob": ("kubeflow.org_pytorchjobs.yaml", "v1"),
    "JobSet": ("jobset.x-k8s.io_jobsets.yaml", "v1alpha2"),
    "ClusterTrainingRuntime": ("trainer.kubeflow.org_clustertrainingruntimes.yaml", "v1alpha1"),
    "TrainJob": ("trainer.kubeflow.org_trainjobs.yaml", "v1alpha1"),
}
QUADS = ({0, 1, 2, 3}, {4, 5, 6, 7})  # a DGX-1V's two fully NVLinked quads


def example(filename: str) -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all((EXAMPLES / filename).read_text())}


def cluster(fake: FakeApiServer, nodes: int = 2) -> None:
    for i in range(nodes):
        fake.put("nodes", node(f"gpu-{i}"))


def bound(fake: FakeApiServer) -> dict[str, tuple[str, set[int], int]]:
    """pod -> (node, GPU ids, worker index) of every Binding sent."""
    out = {}
    for b in fake.calls("bind"):
        notes = b.body["metadata"]["annotations"]
        ids = {int(i) for i in notes[names.GPU_IDS_ANNOTATION].split(",")}
        out[b.body["metadata"]["name"]] = (b.body["target"]["name"], ids, int(notes[names.WORKER_INDEX_ANNOTATION]))
    return out


def placed_whole(fake: FakeApiServer, group: dict[str, Any],
                 pods: list[dict[str, Any]]) -> dict[str, tuple[str, set[int], int]]:
    """The gang on two DGX-1Vs, decided in one cycle and bound whole: its Bindings (bound())."""
    cluster(fake)
    fake.put("podgroups", group)
    for pod in pods:
        fake.put("pods", pod)
    assert [r.ok for r in scheduler(fake).cycle()] == [True]
    return bound(fake)


@pytest.mark.parametrize("filename", ["pytorchjob.yaml", "jobset.yaml", "trainjob.yaml"])
def test_contract_the_examples_match_the_official_crds_and_the_env_policy(filename: str) -> None:
    objects = example(filename)
    for kind, obj in objects.items():
        validate_crd(obj, *CRDS[kind])
    if "TrainJob" in objects:
        jobset, group = trainjob_objects(objects["ClusterTrainingRuntime"], objects["TrainJob"])
        validate_crd(jobset, *CRDS["JobSet"])
        validate_crd(group, *CRDS["PodGroup"])
        pods = jobset_pods(jobset)
    elif "JobSet" in objects:
        pods = jobset_pods(objects["JobSet"])
    else:
        pods = pytorchjob_pods(objects["PyTorchJob"])
    from kube.test_admission_contract import admit  # cel-python: skips there when absent

    policy, _ = env_policy(names.DEFAULT_RUNTIME_CLASS)
    for pod in pods:
        pod["metadata"]["namespace"] = "team-a"
        validate_builtin({k: v for k, v in pod.items() if k != "status"})
        assert admit(policy, pod) == "allowed", pod["metadata"]["name"]


def test_contract_a_pytorchjob_binds_whole_on_one_nvlink_quad_master_as_rank_0(fake: FakeApiServer) -> None:
    objects = example("pytorchjob.yaml")
    placed = placed_whole(fake, objects["PodGroup"], pytorchjob_pods(objects["PyTorchJob"]))
    assert len(placed) == 4 and len({n for n, _, _ in placed.values()}) == 1
    assert set().union(*(ids for _, ids, _ in placed.values())) in QUADS
    # the operator's ranks: the master is RANK 0, worker i is RANK i+1
    assert {pod: index for pod, (_, _, index) in placed.items()} == {
        "resnet-ddp-master-0": 0, "resnet-ddp-worker-0": 1, "resnet-ddp-worker-1": 2, "resnet-ddp-worker-2": 3}


def test_contract_a_jobset_keeps_each_nodes_ranks_together_in_completion_order(fake: FakeApiServer) -> None:
    """16 one-GPU ranks on two 8-GPU nodes: ranks 0-7 on one node, 8-15 on the other, each pod's
    worker index its completion index (pod names sort 0, 1, 10, 11, ... and their suffixes are
    random: neither is rank order)."""
    objects = example("jobset.yaml")
    jobset = copy.deepcopy(objects["JobSet"])
    job = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    job.update(parallelism=16, completions=16)
    job["template"]["spec"]["containers"][0]["resources"]["limits"][names.GPU_RESOURCE] = 1
    job["template"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "2", "memory": "8Gi"}
    group = copy.deepcopy(objects["PodGroup"])
    group["spec"]["minMember"] = 16
    validate_crd(jobset, *CRDS["JobSet"])
    pods = jobset_pods(jobset)
    placed = placed_whole(fake, group, pods)
    completion = {p["metadata"]["name"]: int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"])
                  for p in pods}  # fmt: skip
    assert {pod: index for pod, (_, _, index) in placed.items()} == completion
    by_rank = {completion[pod]: node_name for pod, (node_name, _, _) in placed.items()}
    assert len({by_rank[r] for r in range(8)}) == 1 and len({by_rank[r] for r in range(8, 16)}) == 1
    assert by_rank[0] != by_rank[8]


def test_contract_the_jobset_example_gives_each_pod_one_nvlink_quad(fake: FakeApiServer) -> None:
    objects = example("jobset.yaml")
    placed = placed_whole(fake, objects["PodGroup"], jobset_pods(objects["JobSet"]))
    assert len(placed) == 2 and all(ids in QUADS for _, ids, _ in placed.values())
    assert sorted(index for _, _, index in placed.values()) == [0, 1]


def test_contract_a_trainjob_through_its_runtime_binds_whole(fake: FakeApiServer) -> None:
    objects = example("trainjob.yaml")
    jobset, group = trainjob_objects(objects["ClusterTrainingRuntime"], objects["TrainJob"])
    cluster(fake)
    pods = jobset_pods(jobset)
    for pod in pods[:1]:  # one of two nodes made so far: the gang waits for its other member
        fake.put("pods", pod)
    fake.put("podgroups", group)
    s = scheduler(fake)
    assert s.cycle() == [] and not fake.calls("bind")
    fake.put("pods", pods[1])
    s.sync()
    assert [r.ok for r in s.cycle()] == [True]
    placed = bound(fake)
    assert len(placed) == 2 and len({n for n, _, _ in placed.values()}) == 1
    assert all(len(ids) == 2 and any(ids <= quad for quad in QUADS) for _, ids, _ in placed.values())


def test_contract_a_jobset_that_cannot_fit_binds_nothing_and_says_why(fake: FakeApiServer) -> None:
    objects = example("jobset.yaml")
    jobset = copy.deepcopy(objects["JobSet"])
    job = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    job.update(parallelism=3, completions=3)
    job["template"]["spec"]["containers"][0]["resources"]["limits"][names.GPU_RESOURCE] = 8
    group = copy.deepcopy(objects["PodGroup"])
    group["spec"]["minMember"] = 3
    cluster(fake)
    fake.put("podgroups", group)
    for pod in jobset_pods(jobset):
        fake.put("pods", pod)
    assert scheduler(fake).cycle() == []
    assert not fake.calls("bind")
    reason = fake.get("podgroups", "llama-ft")["metadata"]["annotations"][names.PENDING_ANNOTATION]
    assert "3 worker(s) x 8 GPU(s) = 24 GPUs" in reason


def test_rank_order_reads_each_controllers_numbering() -> None:
    from ringleader.engines.kubernetes.objects import rank_order

    def ranked(pods: list[tuple[str, dict[str, str], dict[str, str]]]) -> list[str]:
        return [name for name, _, _ in sorted(pods, key=lambda p: rank_order(*p))]

    # an Indexed Job on Kubernetes before 1.28: the completion index as an annotation only
    job = [(f"train-{i}-{s}", {}, {names.COMPLETION_INDEX_KEY: str(i)}) for i, s in ((10, "aaaaa"), (2, "zzzzz"))]
    assert ranked(job) == ["train-2-zzzzz", "train-10-aaaaa"]
    # a JobSet of two Jobs: the second Job's pods after all of the first's
    jobset = [(f"x-w-{j}-{c}-q", {names.JOBSET_GLOBAL_INDEX_LABEL: str(j), names.COMPLETION_INDEX_KEY: str(c)}, {})
              for j, c in ((1, 0), (0, 1), (0, 0))]  # fmt: skip
    assert ranked(jobset) == ["x-w-0-0-q", "x-w-0-1-q", "x-w-1-0-q"]
    # mpi-operator's workers by replica index; a pod of no controller by the number its name ends in
    mpi = [(f"m-worker-{i}", {names.JOB_ROLE_LABEL: "worker", names.REPLICA_INDEX_LABEL: str(i)}, {}) for i in (11, 3)]
    assert ranked(mpi) == ["m-worker-3", "m-worker-11"]
    assert ranked([("p-10", {}, {}), ("p-9", {}, {}), ("p-x", {}, {})]) == ["p-9", "p-10", "p-x"]
