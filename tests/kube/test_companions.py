"""arena's --tensorboard and --sync-mode as the kubernetes engine renders them (companions.py):
where TensorBoard reads the job's summaries, the code sync's init container in every pod, the
objects valid for the API server (kubernetes-validate, strict), and each bad value refused in one
line. The real API server takes them in tests/kube/test_real_companions.py."""

from __future__ import annotations

from typing import Any

import pytest

from kube.kubeobjs import template_pods
from ringleader.cli.arena_flags import read_arena_flags
from ringleader.engines.kubernetes import companions, manifests, names
from ringleader.errors import UsageError
from ringleader.jobs.spec import ContainerOptions, JobSpec, KubeOptions

kubernetes_validate = pytest.importorskip("kubernetes_validate")

REPO = "https://github.com/tensorflow/benchmarks.git"


def job(kube: KubeOptions, kind: str = "mpi", **more: Any) -> JobSpec:
    return JobSpec("tb", 2, 1, ["python", "train.py"], kind=kind, kube=kube, **more).validate()


def mounts(template: dict[str, Any]) -> dict[str, str]:
    return {m["mountPath"]: m["name"] for m in template["spec"]["containers"][0]["volumeMounts"]}


@pytest.mark.parametrize(
    ("logdir", "more", "source", "beside_rank0"),
    [
        # arena's default: a folder of each node at /training_logs; TensorBoard reads rank 0's node's
        (None, {}, {"hostPath": {"path": "/var/log/ringleader-training/team-a/tb", "type": "DirectoryOrCreate"}},
         True),
        # on the job's -d volume: TensorBoard mounts the claim, read-only, wherever it runs
        ("/data/logs", {"container": ContainerOptions(data=(("runs", "/data"),))},
         {"persistentVolumeClaim": {"claimName": "runs", "readOnly": True}}, False),
        # on a node's folder the job mounts (--data-dir): that folder, beside rank 0
        ("/mnt/logs/run1", {"kube": {"data_dirs": ("/srv/logs:/mnt/logs",)}},
         {"hostPath": {"path": "/srv/logs", "type": "Directory"}}, True),
        # a URL: TensorBoard reads it itself
        ("hdfs://namenode:8020/logs", {}, None, False),
    ],
)  # fmt: skip
def test_tensorboard_reads_the_logdir_where_the_job_writes_it(logdir: str | None, more: dict[str, Any],
                                                              source: dict[str, Any] | None,
                                                              beside_rank0: bool) -> None:  # fmt: skip
    kube = KubeOptions(tensorboard=True, logdir=logdir, **more.pop("kube", {}))
    spec = job(kube, **more)
    owner = manifests.owner_reference(spec, "uid-1")
    deployment, service = companions.tensorboard(spec, "team-a", owner)
    for obj in (deployment, service):
        kubernetes_validate.validate(obj, "1.30", strict=True)
        assert obj["metadata"]["ownerReferences"] == [owner]
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["command"] == ["tensorboard", "--logdir", logdir or "/training_logs", "--host", "0.0.0.0",
                                    "--port", "6006"]  # fmt: skip
    assert container["image"] == "tensorflow/tensorflow:2.16.1"  # TensorFlow's own, which has tensorboard
    assert ({k: v for k, v in pod["volumes"][0].items() if k != "name"} if source else pod.get("volumes")) == source
    assert ("affinity" in pod) is beside_rank0
    assert service["spec"]["type"] == "NodePort" and service["spec"]["ports"][0]["port"] == 6006
    assert service["spec"]["selector"] == deployment["spec"]["template"]["metadata"]["labels"]
    assert names.JOB_LABEL not in service["spec"]["selector"]  # its pod is none of the job's
    # the job's own pods write where it reads: a node's folder is mounted at --logdir only when it is TensorBoard's own
    for template in template_pods(manifests.mpijob(spec, "team-a")).values():
        assert (mounts(template).get("/training_logs") == companions.LOG_VOLUME) is (logdir is None)


def test_tensorboard_tolerates_what_the_job_tolerates_and_pulls_with_its_secrets() -> None:
    kube = KubeOptions(tensorboard=True, tolerations=("gpu=yes:NoSchedule",), image_pull_secrets=("regcred",))
    spec = job(kube)
    deployment, _ = companions.tensorboard(spec, "team-a", None, manifests.tolerations(kube.tolerations))
    pod = deployment["spec"]["template"]["spec"]
    assert pod["tolerations"] == [{"key": "gpu", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    kubernetes_validate.validate(deployment, "1.30", strict=True)


def test_tensorboard_of_a_pytorchjob_sits_beside_its_master() -> None:
    spec = job(KubeOptions(tensorboard=True), kind="pytorch")
    deployment, _ = companions.tensorboard(spec, "team-a", None)
    [term] = deployment["spec"]["template"]["spec"]["affinity"]["podAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["labelSelector"]["matchLabels"] == {names.JOB_LABEL: "tb", names.REPLICA_INDEX_LABEL: "0",
                                                    names.REPLICA_TYPE_LABEL: "master"}  # fmt: skip
    assert "ownerReferences" not in deployment["metadata"]  # a dry run's: the job has no uid yet
    pods = manifests.pytorchjob(spec, "team-a")["spec"]["pytorchReplicaSpecs"]
    assert mounts(pods["Master"]["template"])["/training_logs"] == companions.LOG_VOLUME


def test_no_tensorboard_and_no_code_sync_unless_asked() -> None:
    spec = job(KubeOptions(cpu="2"))
    assert companions.tensorboard(spec, "team-a", None) == []
    for template in template_pods(manifests.mpijob(spec, "team-a")).values():
        assert "initContainers" not in template["spec"]
        assert set(mounts(template)) == {"/dev/shm"}


@pytest.mark.parametrize("kind", ["mpi", "pytorch"])
def test_git_sync_clones_into_the_working_dirs_code_folder_in_every_pod(kind: str) -> None:
    spec = job(KubeOptions(sync_mode="git", sync_source=REPO + "/"), kind=kind, workdir="/root",
               env={"GIT_SYNC_BRANCH": "cnn_tf_v1.9_compatible"})  # fmt: skip
    obj = manifests.training_job(spec, "team-a")
    replicas = obj["spec"].get("mpiReplicaSpecs") or obj["spec"]["pytorchReplicaSpecs"]
    for role, replica in replicas.items():
        pod = replica["template"]["spec"]
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": pod},
                                     "1.30", strict=True)  # fmt: skip
        [init] = pod["initContainers"]
        env = {e["name"]: e.get("value") for e in init["env"]}
        assert init["image"] == "registry.k8s.io/git-sync/git-sync:v3.3.5", role
        assert (env["GIT_SYNC_REPO"], env["GIT_SYNC_DEST"], env["GIT_SYNC_ROOT"], env["GIT_SYNC_ONE_TIME"]) == (
            REPO + "/", "benchmarks", "/code", "true")  # fmt: skip
        assert env["GIT_SYNC_BRANCH"] == "cnn_tf_v1.9_compatible"  # the job's -e choose what is cloned
        assert env["NVIDIA_VISIBLE_DEVICES"] == "void"  # it sees no GPU, whatever the node's runtime
        assert init["volumeMounts"] == [{"name": companions.CODE_VOLUME, "mountPath": "/code"}]
        assert mounts(replica["template"])["/root/code"] == companions.CODE_VOLUME
        assert {"name": companions.CODE_VOLUME, "emptyDir": {}} in pod["volumes"]


def test_rsync_copies_into_code_and_sync_image_replaces_the_default() -> None:
    spec = job(KubeOptions(sync_mode="rsync", sync_source="10.0.0.5::backup/code", sync_image="example.com/rsync:3"),
               container=ContainerOptions(image_pull_policy="IfNotPresent"))  # fmt: skip
    worker = template_pods(manifests.mpijob(spec, "team-a"))["Worker"]
    [init] = worker["spec"]["initContainers"]
    assert init["command"] == ["rsync", "-avP", "10.0.0.5::backup/code", "/code"]
    assert init["image"] == "example.com/rsync:3" and init["imagePullPolicy"] == "IfNotPresent"
    assert mounts(worker)["/code"] == companions.CODE_VOLUME  # no --working-dir: /code, as arena's


@pytest.mark.parametrize(
    ("kube", "said"),
    [
        (KubeOptions(logdir="/logs"), "--logdir is the TensorBoard's, and no --tensorboard was given"),
        (KubeOptions(tensorboard_image="tf:2"), "--tensorboard-image is the TensorBoard's"),
        (KubeOptions(tensorboard=True, logdir="logs"), "--logdir 'logs' is neither an absolute path nor a URL"),
        (KubeOptions(tensorboard=True, tensorboard_image="TF:latest"), "--tensorboard-image 'TF:latest' is not an"),
        (KubeOptions(sync_mode="hdfs", sync_source="hdfs://nn/code"), "--sync-mode hdfs is not a code sync"),
        (KubeOptions(sync_mode="svn", sync_source="x"), "--sync-mode 'svn' is not a code sync"),
        (KubeOptions(sync_mode="git"), "--sync-mode git needs --sync-source"),
        (KubeOptions(sync_source=REPO), "--sync-source is the code sync's, and no --sync-mode was given"),
        (KubeOptions(sync_mode="git", sync_source=REPO, sync_image="Bad Image"), "--sync-image 'Bad Image' is not"),
    ],
)  # fmt: skip
def test_a_bad_tensorboard_or_code_sync_is_refused_in_one_line(kube: KubeOptions, said: str) -> None:
    with pytest.raises(UsageError) as refused:
        job(kube)
    assert refused.value.one_line().startswith(said) and refused.value.fix
    assert "\n" not in refused.value.one_line()


@pytest.mark.parametrize("name", ["a" * 52, "7b-run"])
def test_a_name_tensorboards_service_could_not_have_is_refused_before_anything_is_made(name: str) -> None:
    spec = JobSpec(name, 1, 1, ["python", "t.py"], kube=KubeOptions(tensorboard=True)).validate()
    with pytest.raises(UsageError) as refused:
        manifests.check_job_name_fits(spec)
    assert refused.value.one_line().startswith(f"--tensorboard: its Service would be named '{name}-tensorboard'")
    assert "use a --name that starts with a letter, of at most 51 characters" in refused.value.one_line()
    manifests.check_job_name_fits(JobSpec(name, 1, 1, ["python", "t.py"]).validate())  # without TensorBoard: fine


def test_the_address_is_the_node_port_on_tensorboards_node() -> None:
    service = {"spec": {"type": "NodePort", "ports": [{"port": 6006, "nodePort": 31234}]}}
    assert companions.tensorboard_address(None, []) is None
    assert companions.tensorboard_address({"spec": {"ports": [{"port": 6006}]}}, []) is None
    assert companions.tensorboard_address(service, [{"status": {"phase": "Pending"}}]) == (
        "port 31234 of any node (TensorBoard's pod is not placed yet)")  # fmt: skip
    assert companions.tensorboard_address(service, [{"status": {"hostIP": "10.0.0.7"}}]) == "http://10.0.0.7:31234"


def test_arenas_camel_case_spellings_are_the_same_options() -> None:
    words = ["--syncMode=git", "--syncSource", REPO, "--syncImage", "x:1", "--tensorboardImage", "tf:2", "python t.py"]
    arity = {"--sync-source": 1, "--sync-image": 1, "--tensorboard-image": 1}
    assert read_arena_flags(words, arity) == ["--sync-mode=git", "--sync-source", REPO, "--sync-image", "x:1",
                                              "--tensorboard-image", "tf:2", "python t.py"]  # fmt: skip
