"""arena's own `submit mpi` lines, pasted from its docs (kubeflow/arena docs/, `arena` written
`ringleader`, nothing else changed): each one plans, or is refused in one line that names what
to use instead; no flag of arena's is silently ignored. On a host with no container runtime:
`--image --dry-run` needs none. On the kubernetes engine, where their --tensorboard and
--sync-mode work: tests/kube/test_real_companions.py."""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

import pytest

from cli.conftest import Cli

# docs/training/mpijob/*.md, docs/isolate-users-in-namespace.md, docs/training/common/image-pull-secret.md
DOC_LINES = {
    "distributed": r"""ringleader submit mpi --name=mpi-dist --gpus=1 --workers=2 \
        --image=uber/horovod:0.13.11-tf1.10.0-torch0.4.0-py3.5 --env=GIT_SYNC_BRANCH=cnn_tf_v1.9_compatible \
        --sync-mode=git --sync-source=https://github.com/tensorflow/benchmarks.git --tensorboard \
        "mpirun python code/benchmarks/scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.py --model resnet101 --batch_size 64 --variable_update horovod --train_dir=/training_logs --summary_verbosity=3 --save_summaries_steps=10" """,  # noqa: E501
    "config-file": r"""ringleader submit mpi --name=mpi-dist --gpus=1 --workers=1 --image=centos:7 --tensorboard \
        --config-file /tmp/test-config.json:/etc/config/config.json "sleep 600" """,
    "preempted": r"""ringleader submit mpi --name=medium --priority=medium --gpus=1 --workers=1 \
        --image=registry.aliyuncs.com/tensorflow-samples/horovod:0.13.11-tf1.10.0-torch0.4.0-py3.5 \
        "mpirun tail -f /dev/null" """,
    "selector": r"""ringleader submit mpi --name=mpi-dist --gpus=1 --workers=1 --selector gpu_node=true \
        --image=registry.cn-hangzhou.aliyuncs.com/tensorflow-samples/horovod:0.13.11-tf1.10.0-torch0.4.0-py3.5 \
        --tensorboard \
        "mpirun python /benchmarks/scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.py --model resnet101 --batch_size 64     --variable_update horovod --train_dir=/training_logs --summary_verbosity=3 --save_summaries_steps=10" """,  # noqa: E501
    "toleration": r"""ringleader submit mpi --name=mpi-dist --gpus=1 --workers=1 --toleration ssd_node \
        --image=registry.cn-hangzhou.aliyuncs.com/tensorflow-samples/horovod:0.13.11-tf1.10.0-torch0.4.0-py3.5 \
        --tensorboard --loglevel debug \
        "mpirun python /benchmarks/scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.py --model resnet101 --batch_size 64     --variable_update horovod --train_dir=/training_logs --summary_verbosity=3 --save_summaries_steps=10" """,  # noqa: E501
    "rdma": r"""ringleader submit mpi --name=mpi-dist --rdma --gpus=1 --workers=2 \
        --image=uber/horovod:0.13.11-tf1.10.0-torch0.4.0-py3.5 --env=GIT_SYNC_BRANCH=cnn_tf_v1.9_compatible \
        --syncMode=git --syncSource=https://github.com/tensorflow/benchmarks.git --tensorboard \
        "mpirun python code/benchmarks/scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.py --model resnet101 --batch_size 64     --variable_update horovod --train_dir=/training_logs --summary_verbosity=3 --save_summaries_steps=10" """,  # noqa: E501
    "gputopology": r"""ringleader submit mpi --name=tensorflow-topo-4-vgg16 --gpus=1 --workers=4 --gputopology=true \
        --image=registry.cn-hangzhou.aliyuncs.com/kubernetes-image-hub/tensorflow-benchmark:tf2.3.0-py3.7-cuda10.1 \
        "mpirun --allow-run-as-root -np "4" -bind-to none -map-by slot -x NCCL_DEBUG=INFO -x NCCL_SOCKET_IFNAME=eth0 -x LD_LIBRARY_PATH -x PATH --mca pml ob1 --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 --mca orte_keep_fqdn_hostnames t --mca btl ^openib python /tensorflow/benchmarks/scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.py --model=vgg16 --batch_size=64 --variable_update=horovod" """,  # noqa: E501
    "namespace": r"""ringleader submit mpijob --name=mpi-test-tom --gpus=1 --workers=2 \
        --working-dir=/perseus-demo/tensorflow-demo/ \
        --image=registry.cn-hongkong.aliyuncs.com/ai-samples/horovod:0.13.11-tf1.10.0-torch0.4.0-py3.5 \
        'mpirun python /benchmarks/scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.py --model resnet101 --batch_size 64     --variable_update horovod --train_dir=/training_logs --summary_verbosity=3 --save_summaries_steps=10'""",  # noqa: E501
    "pull-secret": r"""ringleader submit mpi --name=mpi-dist-with-secret --gpus=1 --workers=2 \
        --image=registry.cn-beijing.aliyuncs.com/ai-samples/horovod:0.13.11-tf1.10.0-torch0.4.0-py3.5 \
        --env=GIT_SYNC_BRANCH=cnn_tf_v1.9_compatible --sync-mode=git \
        --sync-source=https://github.com/tensorflow/benchmarks.git --tensorboard \
        --tensorboard-image=registry.cn-beijing.aliyuncs.com/ai-samples/tensorflow:1.12.0-devel \
        --image-pull-secrets=lumo-secret \
        "mpirun python code/benchmarks/scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.py --model resnet101 --batch_size 64 --variable_update horovod --train_dir=/training_logs --summary_verbosity=3 --save_summaries_steps=10" """,  # noqa: E501
}

# What each line gets on the embedded engine: the plan, or the one line that refuses it.
EXPECTED = {
    "distributed": "error: --tensorboard is not supported by the embedded engine. To fix: leave --tensorboard out, "
                   "or use --engine kubernetes",
    "config-file": "error: --tensorboard is not supported by the embedded engine",
    "preempted": "error: --priority 'medium' names a Kubernetes PriorityClass (arena's meaning)",
    "selector": "error: --selector is not supported by the embedded engine",
    "toleration": "error: --toleration is not supported by the embedded engine",
    "rdma": "error: --tensorboard is not supported by the embedded engine",
    "gputopology": "Plan for job tensorflow-topo-4-vgg16",
    "namespace": "error: --working-dir '/perseus-demo/tensorflow-demo/' is not a folder here",
    "pull-secret": "error: --image-pull-secret is not supported by the embedded engine",
}


def pasted(text: str) -> list[str]:
    """The words a shell reads from a doc's line (a backslash-newline continues it)."""
    return shlex.split(text.replace("\\\n", " "))


@pytest.fixture
def no_runtime(seeds_cli: Cli, tmp_path: Path) -> Cli:
    """The seeds' cluster on a host whose PATH has mpirun but neither podman nor docker."""
    bare = tmp_path / "bin"
    bare.mkdir()
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("Open MPI's mpirun is not installed (make setup installs openmpi-bin)")
    os.symlink(mpirun, bare / "mpirun")
    seeds_cli.env["PATH"] = str(bare)
    return seeds_cli


@pytest.mark.parametrize("doc", list(DOC_LINES))
def test_arenas_doc_line_plans_or_is_refused_in_one_line(no_runtime: Cli, doc: str, tmp_path: Path) -> None:
    # The host file arena's line mounts, made here: whether /tmp holds one must not decide the answer.
    config = tmp_path / "test-config.json"
    config.write_text("{}")
    words = [word.replace("/tmp/test-config.json", str(config)) for word in pasted(DOC_LINES[doc])]
    assert words[:2] == ["ringleader", "submit"]
    out = no_runtime(*words[1:], "--dry-run")  # arena reads flags after the quoted command; so does ringleader
    if out.returncode == 0:
        assert out.stdout.startswith(EXPECTED[doc]), out.stdout
    else:
        assert out.returncode in (1, 2) and out.stdout == "", (out.returncode, out.stdout)
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
        assert out.stderr.startswith(EXPECTED[doc]) and ". To fix: " in out.stderr, out.stderr
    assert no_runtime.job_names() == []  # nothing submitted


def test_the_tf_cnn_benchmarks_line_is_priced_from_its_own_flags(no_runtime: Cli) -> None:
    """--model=vgg16 --batch_size=64 of tf_cnn_benchmarks' own line give the prediction (no
    --model of ringleader's); the image's plan needs no container runtime, and says so."""
    out = no_runtime(*pasted(DOC_LINES["gputopology"])[1:], "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "Prediction:  predicted" in out.stdout and "images/s" in out.stdout, out.stdout
    assert "note: model vgg16 read from the line's --model=vgg16" in out.stderr
    assert "note: the plan only: --image registry.cn-hangzhou.aliyuncs.com" in out.stderr
    assert "no podman on PATH" in out.stderr
    refused = no_runtime(*pasted(DOC_LINES["gputopology"])[1:])  # to run it, a runtime is needed
    assert refused.returncode in (1, 2) and refused.stderr.count("\n") == 1
    assert refused.stderr.startswith("error: --image registry.cn-hangzhou")


@pytest.mark.parametrize(("model", "close"), [("vgg61", "vgg16"), ("resnet5O", "resnet50")])
def test_an_unknown_model_is_refused_at_submit_with_the_closest(seeds_cli: Cli, model: str, close: str) -> None:
    refused = seeds_cli("submit", "mpi", "--name", "m", "--workers", "1", "--model", model, "--", "true")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert f"unknown model {model!r} (did you mean {close!r}?)" in refused.stderr
    assert seeds_cli.job_names() == []  # nothing submitted


def test_model_and_batch_of_horovod_and_torchvision_scripts_are_read() -> None:
    from ringleader.jobs.hints import model_named, workload_hints

    horovod = ["python", "pytorch_synthetic_benchmark.py", "--model", "resnet101", "--batch-size", "32"]
    torchvision = ["torchrun", "train.py", "--model", "resnet50", "-b", "32", "--amp"]
    imagenet = ["python", "main.py", "-a", "resnet18", "-b", "128", "/data"]
    assert model_named(horovod) == ("resnet101", "--model resnet101")
    assert model_named(torchvision) == ("resnet50", "--model resnet50")
    assert model_named(imagenet) == ("resnet18", "-a resnet18")
    assert [workload_hints(c).batch_size for c in (horovod, torchvision, imagenet)] == [32, 32, 128]
    assert workload_hints(["tar", "-b", "20", "x"]).batch_size == 64  # -b alone is no batch


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (
            ["--selector", "gpu_node=true"],
            "error: --selector is not supported by the embedded engine. To fix: "
            "leave --selector out, or use --engine kubernetes",
        ),
        (["--queue"], "error: --queue takes a team queue's name here"),
        (
            ["--retry", "3"],
            "error: --retry is the Kubernetes launcher's backoffLimit, which the embedded engine has "
            "not. To fix: give --max-restarts 3",
        ),
        (["--queue=true"], "error: --queue takes a team queue's name here"),
        (["--hostNetwork"], "error: --hostNetwork: ringleader's pods do not share the host's network namespace"),
        (["--nproc-per-node", "4"], "error: --nproc-per-node: ringleader runs one process per worker"),
        (["--gputopology", "true", "--logdir", "/logs"],
         "error: --logdir is not supported by the embedded engine. To fix: leave --logdir out, or use --engine "
         "kubernetes"),
        (["--syncSource", "https://example.com/x.git"], "error: --sync-source is not supported by the embedded engine"),
        (["--config-file", "/etc/hostname:/etc/x"], "error: --config-file puts a file in each rank's container"),
    ],
)
def test_arena_flags_without_a_counterpart_here_are_refused_in_one_line(cli: Cli, flags: list[str],
                                                                      said: str) -> None:  # fmt: skip
    refused = cli("submit", "mpi", "--name", "x", *flags, "python train.py")
    assert refused.returncode == 2 and refused.stdout == "" and refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith(said), refused.stderr
    assert "--engine embedded" not in refused.stderr  # never the engine in use
    assert not (cli.home / "state.db").exists()


def test_arenas_spellings_of_ringleaders_options(seeds_cli: Cli, tmp_path: Path) -> None:
    """--workingDir, --running-timeout, --share-memory (pytorchjob), --shell bash, --loglevel and
    a refused flag's look-alike in the program's own words."""
    (tmp_path / "train.py").write_text("")
    plan = seeds_cli.ok("submit", "pytorchjob", "--name", "pt", "--workers", "2", "--gpus", "1", "--workingDir",
                        str(tmp_path), "--running-timeout", "1h", "--dry-run", "-o", "json",
                        "python train.py")  # fmt: skip
    assert '"job": "pt"' in plan
    seeds_cli.ok("submit", "mpi", "--name", "sh", "--shell", "bash", "--workers", "1", "--loglevel", "error",
                 'echo "${BASH_VERSION:+bash}" && echo $RANK', "--running-timeout", "10m")  # fmt: skip
    seeds_cli.ok("logs", "-f", "sh")
    assert seeds_cli.ok("logs", "sh") == "bash\n0\n"
    job = seeds_cli.ok("get", "sh", "-o", "json")
    assert '"time_limit_s": 600.0' in job
    # words after the command are the program's, --tensorboard included
    seeds_cli.ok("submit", "mpi", "--name", "tb", "--workers", "1", "--", "python3", "-c",
                 "import sys; print(sys.argv[1:])", "--tensorboard")  # fmt: skip
    seeds_cli.ok("logs", "-f", "tb")
    assert seeds_cli.ok("logs", "tb") == "['--tensorboard']\n"


def test_loglevel_error_leaves_the_notes_out(seeds_cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    torchrun = f"torchrun --nproc-per-node 2 {tmp_path}/train.py"
    line = ["--name", "n", "--workers", "2", "--gpus", "1", "--dry-run", torchrun]
    assert "note: torchrun replaced" in seeds_cli("submit", "mpi", *line).stderr
    quiet = seeds_cli("submit", "mpi", "--loglevel", "error", *line)
    assert quiet.returncode == 0 and "note:" not in quiet.stderr
