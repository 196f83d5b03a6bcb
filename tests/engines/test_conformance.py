"""Engine conformance: one table of users' jobs, run on every engine this test run can reach, each
expecting the same outcome or the same refusal.

    embedded     processes on this host, nodes emulated (always)
    ssh-hosts    the embedded engine's ssh hosts: an emulated cluster of network namespaces with
                 real sshd, mpirun over ssh (root)
    slurm        real slurmctld and slurmd daemons, one network namespace per node, slurmdbd on a
                 private MariaDB for accounts and QOS (root, slurm-wlm, slurmdbd, mariadb-server)
    kubernetes   a real v1.36 API server and controller manager (the contract fake where
                 ../shared/kubernetes-1.36 is absent): no kubelet runs pods there, so a row checks
                 what the launcher would run (`submit --dry-run -o yaml`) and the refusals

A new engine joins by adding a target below; every row then runs on it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringleader.engines.base import Engine
from ringleader.errors import UsageError
from ringleader.jobs.line import read_line
from ringleader.jobs.pending import WAITING
from ringleader.jobs.spec import ContainerOptions, JobSpec, KubeOptions
from ringleader.jobs.states import JobStatus
from ringleader.scheduler.teams import TeamQueue
from ringleader.scheduler.types import Workload
from waiting import wait_for

pytestmark = pytest.mark.slow
PY = sys.executable
BIN = str(Path(PY).parent)

# The reference study's own line (Alibaba's ACK GPU topology-aware scheduling example, VGG16 over
# Horovod on 4 workers), word for word; its program is TensorFlow's tf_cnn_benchmarks at the path
# of the study's image.
REFERENCE_LINE = (
    'mpirun --allow-run-as-root -np "4" -bind-to none -map-by slot -x NCCL_DEBUG=INFO -x NCCL_SOCKET_IFNAME=eth0 '
    "-x LD_LIBRARY_PATH -x PATH --mca pml ob1 --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 "
    "--mca orte_keep_fqdn_hostnames t --mca btl ^openib python "
    "/tensorflow/benchmarks/scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.py --model=vgg16 --batch_size=64 "
    "--variable_update=horovod"
)
TF_CNN = Path("/tensorflow/benchmarks/scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.py")
# Neither TensorFlow nor Horovod is installed here: at that path, a program that takes the same
# flags, allreduces a gradient over the MPI world the line starts, and reports as it does.
TF_CNN_STAND_IN = """import sys, time
from mpi4py import MPI
import numpy as np
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:])
comm = MPI.COMM_WORLD
grad = np.full(1 << 16, comm.Get_rank() + 1.0, dtype=np.float32)
start = time.time()
total = np.empty_like(grad)
comm.Allreduce(grad, total)
n = comm.Get_size()
assert total[0] == n * (n + 1) / 2, total[0]
if comm.Get_rank() == 0:
    print("Model: %s, batch %s per worker, %d workers" % (args["model"], args["batch_size"], n))
    print("total images/sec: %.2f" % (n * int(args["batch_size"]) / (time.time() - start)))
"""
SHOW_ENV = "import json, os; print('ENV ' + json.dumps({k: os.environ.get(k) for k in ('RANK', 'WORLD_SIZE', " \
    "'LOCAL_RANK', 'FROM_X', 'FROM_E', 'HOROVOD_FUSION_THRESHOLD', 'NCCL_SOCKET_IFNAME')}))"  # fmt: skip
TORCH_ALLREDUCE = """import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(4) * (dist.get_rank() + 1)
dist.all_reduce(t)
n = dist.get_world_size()
assert t[0].item() == n * (n + 1) / 2
print("allreduce ok rank %d of %d" % (dist.get_rank(), n))
dist.destroy_process_group()
"""
CLUSTER = """nodes:
  - name: node-a
    preset: pcie-4gpu-workstation
    emulated: true
  - name: node-b
    preset: pcie-4gpu-workstation
    emulated: true
"""
# What the field rows also need of a cluster: a GPU model (--steps times the model's step) and a
# network level (--topology-required/--topology-preferred name one).
GPU_MODEL = "    gpu_model: V100\n"
NETWORK = """network:
  levels:
    - {name: rack, oversubscription: 1}
  switches:
    - {name: rack-0, nodes: [node-a, node-b]}
"""


def with_model_and_rack(cluster: str) -> str:
    preset = "    preset: pcie-4gpu-workstation\n"
    return cluster.replace(preset, preset + GPU_MODEL) + NETWORK


@dataclass
class Target:
    """An engine under test and what can be observed of it."""

    name: str
    engine: Engine
    runs: bool  # ranks really run (not so on Kubernetes, where no kubelet runs pods)
    work: Path  # a folder the ranks share with the test (the file system is one here)
    level: str | None = None  # a network level its cluster declares (None: it declares no tree)

    def run(self, spec: JobSpec, timeout: float = 120) -> Any:
        """Submit; where ranks run, wait for the end and return the job; else the MPIJob the
        launcher would get (a dry run's manifests)."""
        if not self.runs:
            result = self.engine.submit(spec, dry_run=True)
            return yaml.safe_load_all(result.extra["manifests"]).__next__()
        self.engine.submit(spec)
        return self.engine.wait(spec.name, timeout=timeout)

    def log(self, job: str, instance: str) -> str:
        return self.engine.logs(job, instance)


def launcher_command(mpijob: dict[str, Any]) -> list[str]:
    spec = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    return list(spec["containers"][0]["command"])


def spec(name: str, command: list[str], workers: int = 2, gpus: int = 1, **kw: Any) -> JobSpec:
    return JobSpec(name=name, workers=workers, gpus_per_worker=gpus, command=command, **kw)


# -- the engines ------------------------------------------------------------------------------------


def _root_missing(*tools: str) -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    absent = [t for t in tools if shutil.which(t) is None]
    return f"{', '.join(absent)} not installed" if absent else None


@pytest.fixture(scope="module")
def shared_work() -> Iterator[Path]:
    # Outside pytest's private temp folders: Slurm's job steps and ssh sessions read it.
    work = Path(tempfile.mkdtemp(prefix="rl-conformance-"))
    work.chmod(0o755)
    yield work
    shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def reference_program() -> Iterator[Path | None]:
    """The study's program path, with the stand-in at it while this module runs (root only, and
    only where nothing is there already); None where it cannot be had."""
    if TF_CNN.exists():
        yield TF_CNN
        return
    if os.geteuid() != 0:
        yield None
        return
    top = Path("/tensorflow")
    made = not top.exists()
    TF_CNN.parent.mkdir(parents=True, exist_ok=True)
    TF_CNN.write_text(TF_CNN_STAND_IN)
    yield TF_CNN
    if made:
        shutil.rmtree(top, ignore_errors=True)
    else:
        TF_CNN.unlink()


def _embedded(home: Path, work: Path) -> Iterator[Target]:
    from ringleader.engines.embedded.engine import Runtime

    cluster = work / "cluster.yaml"
    cluster.write_text(with_model_and_rack(CLUSTER))
    rt = Runtime.open(home)
    rt.apply_cluster(cluster)
    yield Target("embedded", rt, True, work, level="rack")
    live = [v.name for v in rt.list_jobs() if not v.status.is_terminal()]
    if live:
        rt.delete(live)
    rt.close()


def _hosts(home: Path, work: Path) -> Iterator[Target]:
    from engines.hosts.conftest import TWO_NODES, missing
    from ringleader.engines.embedded.engine import Runtime

    why = missing()
    if why:
        pytest.skip(why)
    cluster = work / "hosts.yaml"
    cluster.write_text(with_model_and_rack(TWO_NODES))
    rt = Runtime.open(home)
    rt.cluster_up(cluster, scale=0.02)
    try:
        yield Target("ssh-hosts", rt, True, work, level="rack")
        live = [v.name for v in rt.list_jobs() if not v.status.is_terminal()]
        if live:
            rt.delete(live)
    finally:
        rt.cluster_down()
        rt.close()


def _slurm(home: Path, work: Path) -> Iterator[Target]:
    from engines.slurm.conftest import NODES, quad
    from ringleader.engines.slurm import SlurmEngine, sandboxdb
    from ringleader.engines.slurm.sandbox import Sandbox, missing

    why = missing() or sandboxdb.missing()
    if why:
        pytest.skip(f"real Slurm: {why}")
    root = Path(tempfile.mkdtemp(prefix="rl-slurm-"))
    # With slurmdbd: team queues on Slurm are its accounts and QOS.
    box = Sandbox.start(root, {name: quad() for name in NODES}, accounting=True)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("SLURM_CONF", str(box.conf))
            engine = SlurmEngine(home)
            yield Target("slurm", engine, True, work)
            live = [v.name for v in engine.list_jobs() if not v.status.is_terminal()]
            if live:
                engine.delete(live)
    finally:
        box.stop()
        shutil.rmtree(root, ignore_errors=True)


def _kubernetes(home: Path, work: Path) -> Iterator[Target]:
    """A real v1.36 control plane (tests/kube/realserver.py) with ringleader's install, as its
    administrator; the contract fake where ../shared/kubernetes-1.36 is absent."""
    pytest.importorskip("kubernetes", reason="the kubernetes client is not installed")
    from kube.fakeapi import FakeApiServer
    from kube.kubeobjs import node
    from kube.realserver import control_plane, why_absent
    from ringleader.engines.kubernetes import manifests
    from ringleader.engines.kubernetes.engine import EngineApi, KubernetesEngine, open_kubernetes
    from ringleader.topology.network_formats import label_keys

    # what a plan is made over: one serving --gputopology jobs, one the others, under one rack
    rack = {label_keys()["kueue"][0]: "rack-0"}
    nodes = [node("gpu-a", mode="topology", labels=rack), node("gpu-b", mode="default", labels=rack)]
    if why_absent() is None:
        folder = Path(tempfile.mkdtemp(prefix="rl-kube-"))
        with control_plane(folder, install=manifests.install(replicas=0)) as plane:
            plane.namespace("team-a")
            for made in nodes:
                plane.add_node(made)
            level = label_keys()["kueue"][0].rpartition("/")[2]
            yield Target("kubernetes", KubernetesEngine(EngineApi(plane.client("admin")), "team-a"), False, work, level)
        shutil.rmtree(folder, ignore_errors=True)
        return
    fake = FakeApiServer().start()
    for made in nodes:
        fake.put("nodes", made)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("RINGLEADER_KUBE_SERVER", fake.url)
            mp.setenv("RINGLEADER_KUBE_NAMESPACE", "team-a")
            yield Target("kubernetes", open_kubernetes(home), False, work)
    finally:
        fake.stop()


ENGINES: dict[str, Callable[[Path, Path], Iterator[Target]]] = {
    "embedded": _embedded, "ssh-hosts": _hosts, "slurm": _slurm, "kubernetes": _kubernetes,
}  # fmt: skip


@pytest.fixture(scope="module", params=list(ENGINES))
def target(request: pytest.FixtureRequest, shared_work: Path) -> Iterator[Target]:
    """One engine at a time (pytest runs every row on one before starting the next)."""
    name = request.param
    work = shared_work / name
    work.mkdir(mode=0o755)
    home = Path(tempfile.mkdtemp(prefix=f"rl-{name}-"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RINGLEADER_HOME", str(home))
        mp.setenv("RINGLEADER_GRACE_S", "2")
        # As a user with the env activated: `python` on every host is this env's.
        mp.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', os.defpath)}")
        mp.chdir(work)
        yield from ENGINES[name](home, work)
    shutil.rmtree(home, ignore_errors=True)


# -- the table --------------------------------------------------------------------------------------


def test_reference_study_line_word_for_word(target: Target, reference_program: Path | None) -> None:
    argv = shlex.split(REFERENCE_LINE)
    if not target.runs:
        launcher = launcher_command(target.run(spec("reference", argv, workers=4)))
        # What mpirun needs there: the gang's -np, the user's options as written, no host list
        # (mpi-operator's hostfile names the workers the scheduler bound).
        assert launcher == ["mpirun", "-np", "4", argv[1], *argv[4:]]
        return
    if reference_program is None:
        pytest.skip(f"{TF_CNN} is not there and only root may put the stand-in there")
    view = target.run(spec("reference", argv, workers=4))
    assert view.status is JobStatus.SUCCEEDED, (view.reason, view.events)
    chief = next(i.name for i in view.instances if i.is_chief).removeprefix("reference-")
    out = target.log("reference", chief)
    assert "Model: vgg16, batch 64 per worker, 4 workers" in out and "total images/sec" in out


def test_horovodrun_line_with_hosts_and_interface(target: Target) -> None:
    argv = ["horovodrun", "-np", "2", "-H", "server1:1,server2:1", "--network-interface", "eth0",
            "--fusion-threshold-mb", "32", "python", "-c", SHOW_ENV]  # fmt: skip
    if not target.runs:
        launcher = launcher_command(target.run(spec("hvd", argv)))
        assert "horovodrun" not in launcher  # one horovodrun per rank never
        # horovodrun's own first words: as root in an image, mpirun refuses to start without them
        assert launcher[:5] == ["mpirun", "-np", "2", "--allow-run-as-root", "--tag-output"]
        assert launcher[launcher.index("-np") + 1] == "2" and "-H" not in launcher
        assert launcher[-3:] == ["python", "-c", SHOW_ENV]
        return
    view = target.run(spec("hvd", argv))
    assert view.status is JobStatus.SUCCEEDED, (view.reason, view.events)
    for rank in range(2):
        env = _env_line(target.log("hvd", f"worker-{rank}"))
        assert env["RANK"] == str(rank) and env["WORLD_SIZE"] == "2"
        assert env["HOROVOD_FUSION_THRESHOLD"] == str(32 * 1024 * 1024)


def test_multi_node_torchrun_runs_one_process_per_worker(target: Target) -> None:
    script = target.work / "allreduce.py"
    script.write_text(TORCH_ALLREDUCE)
    argv = ["torchrun", "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d", "--rdzv-endpoint=head:29400",
            str(script)]  # fmt: skip
    if not target.runs:
        launcher = launcher_command(target.run(spec("tr", argv, topology_aware=False)))
        assert "torchrun" not in " ".join(launcher) and launcher[-1] == str(script)
        assert "RANK=\"$OMPI_COMM_WORLD_RANK\"" in " ".join(launcher)
        return
    # Gloo binds to the address its host name resolves to; the emulated nodes' names resolve to
    # loopback, so ranks are told the interface, as users of such clusters do.
    job = spec("tr", argv, gpus=4, env={"GLOO_SOCKET_IFNAME": "eth0"})  # 4 GPUs each: one worker per node
    view = target.run(job, timeout=180)
    assert view.status is JobStatus.SUCCEEDED, (view.reason, target.log("tr", "worker-0")[-2000:])
    assert len({i.node for i in view.instances if i.role == "worker"}) == 2
    for rank in range(2):
        assert f"allreduce ok rank {rank} of 2" in target.log("tr", f"worker-{rank}")


TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                      "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT",
                      "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS")  # fmt: skip


def test_every_variable_torchrun_sets(target: Target) -> None:
    """What torchrun's agent gives each worker, some training scripts read (one role, no restarts)."""
    show = f"import json, os; print('ENV ' + json.dumps({{k: os.environ.get(k) for k in {TORCHRUN_VARIABLES!r}}}))"
    argv = ["torchrun", "--nnodes=2", "--nproc-per-node=1", "--no-python", "python", "-c", show]
    if not target.runs:
        launcher = " ".join(launcher_command(target.run(spec("vars", argv))))
        missing = [v for v in TORCHRUN_VARIABLES if f"{v}=" not in launcher]
        assert not missing, launcher
        return
    view = target.run(spec("vars", argv, gpus=4))  # one worker per node: two groups
    assert view.status is JobStatus.SUCCEEDED, (view.reason, view.events)
    for rank in range(2):
        env = _env_line(target.log("vars", f"worker-{rank}"))
        assert all(env[v] is not None for v in TORCHRUN_VARIABLES), env
        assert (env["RANK"], env["ROLE_RANK"], env["GROUP_RANK"]) == (str(rank),) * 3
        assert (env["WORLD_SIZE"], env["ROLE_WORLD_SIZE"], env["GROUP_WORLD_SIZE"]) == ("2", "2", "2")
        assert (env["ROLE_NAME"], env["TORCHELASTIC_RESTART_COUNT"]) == ("default", "0")


def test_a_pytorch_job_runs_its_program_with_torchruns_variables(target: Target) -> None:
    """`submit pytorch` (arena's pytorchjob): the program once per worker with every variable
    torchrun sets, as a plain program under `submit mpi`; on Kubernetes a PyTorchJob (no sshd,
    no launcher) whose pods start it under torchrun, the operator's variables giving the ranks."""
    show = f"import json, os; print('ENV ' + json.dumps({{k: os.environ.get(k) for k in {TORCHRUN_VARIABLES!r}}}))"
    job = spec("ptj", ["python", "-c", show], gpus=4, kind="pytorch")
    if not target.runs:
        pytorchjob = target.run(job)
        assert pytorchjob["kind"] == "PyTorchJob"
        replicas = pytorchjob["spec"]["pytorchReplicaSpecs"]
        per_pod = int(pytorchjob["spec"]["nprocPerNode"])
        assert sum(r["replicas"] for r in replicas.values()) * per_pod == 2 and replicas["Master"]["replicas"] == 1
        for replica in replicas.values():
            pod = replica["template"]["spec"]
            assert "schedulerName" in pod and pod["schedulerName"] == "ringleader"
            command = pod["containers"][0]["command"]
            assert command[0] == "torchrun" and command[-3:] == ["python", "-c", show] and "--no-python" in command
        return
    view = target.run(job)
    assert view.status is JobStatus.SUCCEEDED, (view.reason, view.events)
    assert view.trainer == "PYTORCHJOB"
    for rank in range(2):
        env = _env_line(target.log("ptj", f"worker-{rank}"))
        assert all(env[v] is not None for v in TORCHRUN_VARIABLES), env
        assert (env["RANK"], env["WORLD_SIZE"]) == (str(rank), "2")


@pytest.mark.parametrize("argv", [["mpirun", "-np", "2", "python", "train.py"],
                                  ["horovodrun", "-np", "2", "python", "train.py"]])  # fmt: skip
def test_an_mpi_line_as_a_pytorch_job_is_refused_alike(target: Target, argv: list[str]) -> None:
    with pytest.raises(UsageError) as refused:
        target.engine.submit(spec("ptmpi", argv, kind="pytorch"), dry_run=True)
    assert refused.value.message == (f"a PyTorch job starts its program once per worker itself, and this is "
                                     f"a {argv[0]} line")  # fmt: skip
    assert refused.value.fix == f"give the program alone (python train.py ...), or submit the {argv[0]} line " \
                                "with `submit mpi`"  # fmt: skip


def test_x_name_is_the_value_where_mpirun_runs(target: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    """-x NAME passes NAME as mpirun's own environment has it: the submitter's where the ranks
    share the submitter's machine (recorded at submit), the image's in a pod (the reference
    study's -x PATH is the launcher pod's PATH, never a laptop's)."""
    monkeypatch.setenv("FROM_X", "at-submit")
    argv = ["mpirun", "-np", "2", "-x", "FROM_X", "-x", "PATH", "python", "-c", SHOW_ENV]
    job = spec("env", argv, env={"FROM_E": "given"})
    if not target.runs:
        mpijob = target.run(job)
        for role in ("Launcher", "Worker"):
            containers = mpijob["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["containers"]
            env = {e["name"]: e.get("value") for e in containers[0]["env"]}
            assert "FROM_X" not in env and "PATH" not in env and env["FROM_E"] == "given", (role, env)
        launcher = launcher_command(mpijob)
        assert launcher[launcher.index("FROM_X") - 1] == "-x" and launcher[launcher.index("PATH") - 1] == "-x"
        assert any(n.startswith("note: mpirun -x FROM_X, -x PATH: each rank gets the image's value")
                   for n in target.engine.notes)  # fmt: skip
        return
    target.engine.submit(job)
    monkeypatch.setenv("FROM_X", "changed-after-submit")  # a queued job must not read it at launch
    view = target.engine.wait("env", timeout=120)
    assert view.status is JobStatus.SUCCEEDED, (view.reason, view.events)
    for rank in range(2):
        env = _env_line(target.log("env", f"worker-{rank}"))
        assert (env["FROM_X"], env["FROM_E"]) == ("at-submit", "given")


def test_a_users_mpirun_line_starts_as_root(target: Target) -> None:
    """A line without --allow-run-as-root, run as root (this test run's user where ranks run; an
    image's user is not known at submit): every launcher adds what mpirun then needs."""
    job = spec("root", ["mpirun", "-np", "2", "python", "-c", SHOW_ENV])
    if not target.runs:
        launcher = launcher_command(target.run(job))
        assert launcher[:4] == ["mpirun", "-np", "2", "--allow-run-as-root"], launcher
        return
    if os.geteuid() != 0:
        pytest.skip("runs as root only where the test run is root")
    view = target.run(job)
    assert view.status is JobStatus.SUCCEEDED, (view.reason, view.events)
    for rank in range(2):
        assert _env_line(target.log("root", f"worker-{rank}"))["RANK"] == str(rank)


MPI_WORLD = "from mpi4py import MPI; w = MPI.COMM_WORLD; print('WORLD %d of %d' % (w.Get_rank(), w.Get_size()))"


def test_a_plain_mpi_program_is_one_world(target: Target) -> None:
    """No mpirun in the line: the job's ranks are still one MPI world, as under arena's mpirun
    launcher (the embedded engine starts a program that imports mpi4py under mpirun)."""
    job = spec("world", ["python", "-c", MPI_WORLD])
    if not target.runs:
        launcher = launcher_command(target.run(job))
        assert launcher[0] == "mpirun" and launcher[launcher.index("-np") + 1] == "2"
        return
    view = target.run(job)
    assert view.status is JobStatus.SUCCEEDED, (view.reason, target.log("world", "worker-0")[-2000:])
    for rank in range(2):
        assert f"WORLD {rank} of 2" in target.log("world", f"worker-{rank}")


DYNPROC = """from mpi4py import MPI
world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
half = world.Split(rank % 2, rank)
port = world.bcast(MPI.Open_port() if rank == 0 else None, root=0)
inter = half.Accept(port, root=0) if rank % 2 == 0 else half.Connect(port, root=0)
inter.Barrier()
inter.Disconnect()
world.Barrier()
if rank == 0:
    MPI.Close_port(port)
    port = MPI.Open_port()
    MPI.Publish_name("rl-conformance", port)
world.Barrier()
assert MPI.Lookup_name("rl-conformance")
world.Barrier()
if rank == 0:
    MPI.Unpublish_name("rl-conformance", port)
    MPI.Close_port(port)
print("DYNPROC ok rank %d of %d" % (rank, size), flush=True)
"""


def test_mpi_dynamic_process_management(target: Target) -> None:
    """What mpi4py's test_dynproc exercises (a port accepted and connected between two halves of
    the world, a name published and looked up): it needs the runtime mpirun provides, so it
    passes wherever the line's mpirun runs the job, as under plain mpirun."""
    script = target.work / "dynproc.py"
    script.write_text(DYNPROC)
    job = spec("dyn", ["mpirun", "-np", "2", "python", str(script)])
    if not target.runs:
        launcher = launcher_command(target.run(job))
        assert launcher[0] == "mpirun" and launcher[-2:] == ["python", str(script)]
        return
    view = target.run(job)
    assert view.status is JobStatus.SUCCEEDED, (view.reason, target.log("dyn", "worker-0")[-2000:])
    for rank in range(2):
        assert f"DYNPROC ok rank {rank} of 2" in target.log("dyn", f"worker-{rank}")


def test_torchrun_standalone_is_replaced_and_named(target: Target) -> None:
    argv = ["torchrun", "--standalone", "--nproc-per-node=2", "--no-python", "python", "-c", SHOW_ENV]
    if not target.runs:
        target.run(spec("alone", argv))
    else:
        view = target.run(spec("alone", argv))
        assert view.status is JobStatus.SUCCEEDED, (view.reason, view.events)
        assert {_env_line(target.log("alone", f"worker-{r}"))["RANK"] for r in range(2)} == {"0", "1"}
    assert any("--standalone --nproc-per-node=2 taken from the placement" in n for n in target.engine.notes)


def test_a_job_whose_every_rank_failed_ends(target: Target) -> None:
    """Ended once every rank has an exit code, whatever its launcher still does."""
    if not target.runs:
        pytest.skip("no kubelet runs pods on the Kubernetes leg")
    view = target.run(spec("allfail", ["python", "-c", "import os, sys; sys.exit(3 + int(os.environ['RANK']))"]),
                      timeout=90)  # fmt: skip
    assert view.status is JobStatus.FAILED
    assert view.reason is not None and "allfail-worker-" in view.reason and "exit code" in view.reason, view.reason


def test_shell_line_runs_as_a_shell_would(target: Target) -> None:
    from ringleader.jobs.commandline import read_command

    data = target.work / "data dir"
    data.mkdir(exist_ok=True)
    line = f"cd {shlex.quote(str(data))} && echo rank-$RANK of $WORLD_SIZE > out-$RANK.txt"
    argv = read_command([line])
    assert argv == ["/bin/sh", "-c", line]
    if not target.runs:
        launcher = launcher_command(target.run(spec("sh", argv)))
        assert launcher[-3:] == ["/bin/sh", "-c", line]  # per rank, after torchrun's variables are set
        return
    view = target.run(spec("sh", argv))
    assert view.status is JobStatus.SUCCEEDED, (view.reason, view.events)
    assert sorted(p.read_text() for p in data.glob("out-*.txt")) == ["rank-0 of 2\n", "rank-1 of 2\n"]


def test_crashing_rank_is_named_as_the_root_cause(target: Target) -> None:
    if not target.runs:
        pytest.skip("no kubelet runs pods on the Kubernetes leg")
    crash = "import os, sys, time\nif os.environ['RANK'] == '1':\n    time.sleep(0.5)\n    sys.exit(3)\n" \
        "time.sleep(60)\n"
    view = target.run(spec("crash", ["python", "-c", crash]))
    assert view.status is JobStatus.FAILED
    assert view.reason is not None and "crash-worker-1" in view.reason and "exit code 3" in view.reason, view.reason


def test_delete_mid_run_leaves_nothing_running(target: Target) -> None:
    marker = f"rl-conformance-{target.name}-{os.getpid()}"
    if not target.runs:
        pytest.skip("no kubelet runs pods on the Kubernetes leg (deleting the MPIJob: "
                    "tests/kube/test_engine_contract.py)")
    started = target.work / f"started-{marker}"
    code = f"import os, time; open({str(started)!r} + os.environ['RANK'], 'w').close(); time.sleep(300)"
    target.engine.submit(spec("del", ["python", "-c", code, marker]))
    def both_started() -> bool:
        view = target.engine.get("del")
        assert not view.status.is_terminal(), view
        return len(list(target.work.glob(f"started-{marker}*"))) >= 2

    wait_for(both_started, what="both ranks to start", every=0.2)
    target.engine.delete(["del"])
    wait_for(lambda: not _running(marker), what=lambda: f"nothing left running after delete: {_running(marker)}",
             every=0.2)  # fmt: skip
    assert all(v.name != "del" for v in target.engine.list_jobs())


def test_np_that_disagrees_with_workers_is_refused_alike(target: Target) -> None:
    job = spec("np", ["mpirun", "-np", "5", "python", "train.py"])
    with pytest.raises(UsageError) as refused:
        target.engine.submit(job, dry_run=not target.runs)
    assert refused.value.message == "mpirun -np 5 disagrees with --workers 2"
    assert refused.value.fix == "use -np 2 or drop -np (ringleader sets it)"
    if target.runs:
        assert all(v.name != "np" for v in target.engine.list_jobs())


def test_a_launcher_inside_a_shell_line_is_refused_alike(target: Target) -> None:
    argv = ["/bin/sh", "-c", "cd data && mpirun -np 2 python train.py > log.txt"]
    with pytest.raises(UsageError, match=r"the shell line starts mpirun, and each of the 2 ranks would run it"):
        target.engine.submit(spec("shmpi", argv), dry_run=True)


def test_get_predicts_a_model_hinted_job_alike(target: Target) -> None:
    """`get`'s prediction of a job submitted with --model, from the view the engine read: the
    batch and precision of its command line, and either images/s inside its likely range (GPUs
    of a known model: a Slurm node names it in its Features=) or the same one-line reason on
    every engine (an emulated workstation, or hosts listed without a gpu_model, declare none)."""
    if not target.runs:
        pytest.skip("no scheduler places pods on the Kubernetes leg (get's prediction: "
                    "tests/kube/test_engine_contract.py)")
    view = target.run(spec("hinted", ["python", "-c", "pass", "--batch_size=32"], model="resnet50"))
    assert view.status is JobStatus.SUCCEEDED, (view.reason, view.events)
    pred = target.engine.prediction(view)
    assert pred is not None and (pred["model"], pred["batch_size"], pred["precision"]) == ("resnet50", 32, "fp32")
    if "error" in pred:
        assert target.name in ("embedded", "ssh-hosts"), pred  # Slurm and Kubernetes nodes name their GPUs
        assert pred["error"].startswith("node 'node-a' declares no GPU model. To fix: pass a GPU type"), pred
    else:
        low, high = pred["likely_images_per_s"]
        assert low < pred["images_per_s"] < high, pred
    assert target.engine.prediction(target.run(spec("unhinted", ["python", "-c", "pass"]))) is None


# -- helpers ----------------------------------------------------------------------------------------


def _env_line(log: str) -> dict[str, str | None]:
    line = next(x for x in log.splitlines() if x.startswith("ENV "))
    return dict(json.loads(line[4:]))


def _running(marker: str) -> list[str]:
    found = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout.splitlines()
    return [p for p in found if "pgrep" not in p]


# -- every field of a job, on every engine ---------------------------------------------------------------

QUIET = ["python", "-c", "pass"]
LEVEL = "<the target's level>"  # a row's network level: the one the target's cluster declares
HOROVOD_LINE = ["horovodrun", "-np", "2", "-H", "server1:1,server2:1", "python", "-c", "pass"]


def _calibration() -> dict[str, Any]:
    from ringleader.model.calibration import Calibration

    return Calibration(sources=("conformance",)).as_dict()


def _support(name: str) -> Callable[[Any], bool]:
    return lambda supports: bool(getattr(supports, name))


# Each JobSpec field: the job that sets it to something other than its default (beside what it
# needs: --steps a model, --risk the "finish" rule), and whether an engine carries it, from what
# the engine declares (jobs.support.Support; None: every engine does). A field an engine does not
# declare must be refused in one line before anything is created; a field it declares must come
# back from its `get` equal to what was submitted.
FIELD_JOBS: dict[str, tuple[dict[str, Any], Callable[[Any], bool] | None]] = {
    "name": ({}, None),
    "workers": ({"workers": 2}, None),
    "gpus_per_worker": ({"gpus_per_worker": 2}, None),
    "command": ({"command": ["python", "-c", "print('carried')"]}, None),
    "env": ({"env": {"FROM_E": "carried"}}, None),
    "topology_aware": ({"topology_aware": True}, None),
    "priority": ({"priority": 5}, _support("priority")),
    "image": ({"image": "python:3.11"}, lambda s: s.image is not None),
    "model": ({"model": "vgg16"}, None),
    "workdir": ({"workdir": "/"}, None),
    "submit_env": ({"submit_env": {"PATH": f"{BIN}{os.pathsep}/usr/bin:/bin", "NCCL_DEBUG": "INFO"}}, None),
    "user_command": ({"command": HOROVOD_LINE, "workers": 2}, None),
    "time_limit_s": ({"time_limit_s": 3600.0}, _support("time_limit")),
    "container": ({"image": "python:3.11", "container": ContainerOptions(shm_size=1 << 30)},
                  lambda s: s.image is not None and "--shm-size" in s.container_options),
    "kube": ({"kube": KubeOptions(cpu="2")}, _support("kube_options")),
    "topology_required": ({"topology_required": LEVEL}, _support("network_tree")),
    "topology_preferred": ({"topology_preferred": LEVEL}, _support("network_tree")),
    "line": ({}, None),
    "grace_s": ({"grace_s": 7.0}, None),
    "start": ({"start": "best"}, _support("start_rules")),
    "run_time_s": ({"run_time_s": 600.0}, _support("start_rules")),
    "max_wait_s": ({"start": "best", "max_wait_s": 900.0}, _support("start_rules")),
    "risk": ({"start": "finish", "run_time_s": 600.0, "risk": "neutral"}, _support("start_rules")),
    "preempt": ({"preempt": True}, _support("preemption")),
    "preemptible": ({"preemptible": False}, None),
    "calibration": ({"calibration": _calibration()}, _support("calibration")),
    "steps": ({"model": "vgg16", "steps": 100}, _support("start_rules")),
    "queue": ({"queue": "team-a"}, None),
    "max_restarts": ({"max_restarts": 2}, None),
    "kind": ({"kind": "pytorch"}, None),
    "workload": ({"model": "vgg16", "workload": Workload(batch_size=32, precision="fp16", accumulation=2)}, None),
    "hold": ({"hold": True}, None),  # submitted held: it waits, reason Held, until released
}  # fmt: skip
# Each field of KubeOptions (arena's Kubernetes-only options) as a row of its own: carried whole on
# Kubernetes, refused in one line elsewhere, like the rest of the job's fields.
KUBE_FIELD_JOBS: dict[str, KubeOptions] = {
    "cpu": KubeOptions(cpu="2"), "memory": KubeOptions(memory="4Gi"), "selector": KubeOptions(selector=(("a", "b"),)),
    "tolerations": KubeOptions(tolerations=("all",)), "image_pull_secrets": KubeOptions(image_pull_secrets=("s",)),
    "labels": KubeOptions(labels=(("team", "a"),)), "annotations": KubeOptions(annotations=(("x.io/a", "b"),)),
    "priority_class": KubeOptions(priority_class="high"), "retry": KubeOptions(retry=0),
    "data_dirs": KubeOptions(data_dirs=("/data:/data",)), "tensorboard": KubeOptions(tensorboard=True),
    "tensorboard_image": KubeOptions(tensorboard=True, tensorboard_image="tensorflow/tensorflow:2.15.0"),
    "logdir": KubeOptions(tensorboard=True, logdir="/logs/run1"),
    "sync_mode": KubeOptions(sync_mode="git", sync_source="https://github.com/tensorflow/benchmarks.git"),
    "sync_source": KubeOptions(sync_mode="rsync", sync_source="10.0.0.5::backup/code"),
    "sync_image": KubeOptions(sync_mode="git", sync_source="https://example.com/x.git", sync_image="git-sync:v4"),
}  # fmt: skip
ROWS = {**FIELD_JOBS, **{f"kube.{k}": ({"kube": v}, _support("kube_options")) for k, v in KUBE_FIELD_JOBS.items()}}


def _expected(field_name: str, job: JobSpec) -> Any:
    """What `get` must show of the field: as submitted, or for what submit derives, what it derives."""
    if field_name.startswith("kube."):
        return job.kube
    if field_name == "line":
        return read_line(job.command)
    if field_name == "user_command":
        return job.command  # the horovodrun line as written; the command is rewritten
    return getattr(job, field_name)


def test_the_table_names_every_field_of_a_job() -> None:
    assert sorted(FIELD_JOBS) == sorted(f.name for f in dataclasses.fields(JobSpec))
    assert sorted(KUBE_FIELD_JOBS) == sorted(f.name for f in dataclasses.fields(KubeOptions))
    assert all(getattr(opts, k) != getattr(KubeOptions(), k) for k, opts in KUBE_FIELD_JOBS.items())


@pytest.mark.parametrize("field_name", list(ROWS))
def test_every_field_is_carried_or_refused_before_anything_is_made(target: Target, field_name: str) -> None:
    """Submitted with the field set, the job's `get` shows it as submitted where the engine says
    it carries it; elsewhere submit refuses it in one line and nothing of the job exists."""
    given, needs = ROWS[field_name]
    name = "f-" + field_name.replace("_", "-").replace(".", "-")
    given = {k: (target.level or "rack") if v == LEVEL else v for k, v in given.items()}
    job = JobSpec(**{"name": name, "workers": 1, "gpus_per_worker": 1, "command": QUIET, **given})
    if LEVEL in ROWS[field_name][0].values() and target.level is None:
        needs = lambda _: False  # noqa: E731  (its cluster declares no tree: the level is refused)
    if field_name == "queue":
        target.engine.create_queue(TeamQueue("team-a", (("*", 8),)), overwrite=True)
    if needs is not None and not needs(target.engine.supports):
        with pytest.raises(UsageError) as refused:
            target.engine.submit(job)
        assert "\n" not in refused.value.one_line() and refused.value.fix
        assert not target.engine.exists(name) and all(v.name != name for v in target.engine.list_jobs())
        return
    target.engine.submit(job)
    try:
        shown = target.engine.get(name).spec
        assert getattr(shown, field_name.partition(".")[0]) == _expected(field_name, job), shown
        assert shown == JobSpec.from_dict(json.loads(json.dumps(shown.to_dict())))  # whole through the codec
        if field_name == "hold":  # carried means held: it waits on a cluster with room, and says why
            held = target.engine.get(name)
            assert held.status in WAITING and held.reason_code == "Held", held
            planned = target.engine.submit(dataclasses.replace(job, name=f"{name}-plan"), dry_run=True).decision
            assert planned.reasons == (f"held: it is not started until `ringleader release {name}-plan`",), planned
        if target.name == "kubernetes" and field_name in ("queue", "preempt", "preemptible"):
            scheduled = _as_the_scheduler_sees_it(target.engine, name)
            assert (scheduled.queue, scheduled.may_preempt, scheduled.preemptible) == (
                job.queue, job.preempt, job.preemptible)  # fmt: skip
    finally:
        target.engine.delete([name])


def _as_the_scheduler_sees_it(engine: Any, name: str) -> Any:
    """The gang as ringleader's scheduler queues it once mpi-operator made its pods, its worker
    bound and its launcher (which names no queue) waiting: from the objects the engine created."""
    from kube.kubeobjs import template_pods
    from ringleader.engines.kubernetes.cache import Cache
    from ringleader.engines.kubernetes.decide import job_request

    pods = template_pods(engine.api.get_job("team-a", name))
    pods["Worker"]["spec"]["nodeName"] = "gpu-b"
    cache = Cache()
    cache.replace("podgroups", [engine.api.get_podgroup("team-a", name)])
    cache.replace("pods", [pods["Worker"], pods["Launcher"]])
    [gang] = cache.gangs()
    return job_request(gang)
