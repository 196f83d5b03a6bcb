"""The mpirun rewrite: ringleader owns -np and the host options, keeps everything else."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from ringleader.engines.embedded.supervisor import rewrite_mpirun
from ringleader.errors import UsageError
from ringleader.jobs.commandline import check_np
from ringleader.jobs.line import is_mpirun, read_line
from ringleader.runtime.plan import RANK_FILE

SEED = (
    'mpirun --allow-run-as-root -np "4" -bind-to none -map-by slot -x NCCL_DEBUG=INFO '
    "-x NCCL_SOCKET_IFNAME=eth0 -x LD_LIBRARY_PATH -x PATH --mca pml ob1 --mca btl_tcp_if_include eth0 "
    "--mca oob_tcp_if_include eth0 --mca orte_keep_fqdn_hostnames t --mca btl ^openib "
    "python /tensorflow/benchmarks/scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.py --model=vgg16 "
    "--batch_size=64 --variable_update=horovod"
)


def test_seed_line_is_split_into_options_and_program() -> None:
    line = read_line(shlex.split(SEED))
    kept, np_value, program = line.kept, line.np, line.program
    assert np_value == "4"
    assert program[0] == "python" and program[-1] == "--variable_update=horovod"
    assert kept[kept.index("--mca") + 1 : kept.index("--mca") + 3] == ["pml", "ob1"]
    assert "-np" not in kept


def test_rewrite_owns_np_and_hosts_and_wraps_each_rank() -> None:
    argv = shlex.split(SEED.replace("-np \"4\"", "-np 4 -H a,b --hostfile hosts.txt"))
    out = rewrite_mpirun(read_line(argv), 4, emulated=True, plan=Path("/p/plan.json"), grace_s=5.0)
    assert out[:5] == ["mpirun", "-np", "4", "--host", "localhost:4"]
    assert "-H" not in out and "--hostfile" not in out and "hosts.txt" not in out
    assert out.count("-np") == 1
    assert "--oversubscribe" in out
    assert "--bind-to" not in out  # the user's -bind-to none is kept, not doubled
    assert out.count("--allow-run-as-root") == 1
    for opt in ("-map-by", "NCCL_DEBUG=INFO", "btl_tcp_if_include", "^openib"):
        assert opt in out
    wrap = out.index(RANK_FILE)
    assert out[wrap + 1] == "/p/plan.json" and out[wrap + 2] == "--"
    assert out[wrap + 3 :] == shlex.split(SEED)[-5:]


def test_mpirun_is_told_to_stop_its_ranks_as_every_launcher_does() -> None:
    line = read_line(["mpirun", "-np", "2", "--mca", "ess_base_forward_signals", "SIGALRM",
                      "--mca", "odls_base_sigkill_timeout", "1", "python", "train.py"])  # fmt: skip
    argv = rewrite_mpirun(line, 2, True, Path("plan.json"), 6.5)
    pairs = {argv[i + 1]: argv[i + 2] for i, word in enumerate(argv) if word == "--mca"}
    assert pairs["ess_base_forward_signals"] == "SIGALRM,SIGURG"  # the user's own forwarded signal kept
    assert pairs["odls_base_signal_direct_children_only"] == "1"
    assert pairs["odls_base_sigkill_timeout"] == "7"  # not the user's 1 s: mpirun never cuts the grace
    assert argv.count("--mca") == 3 and argv[-2:] == ["python", "train.py"]


def test_rewrite_adds_what_emulated_nodes_need() -> None:
    out = rewrite_mpirun(read_line(["mpirun", "python", "t.py"]), 2, emulated=True, plan=Path("p"), grace_s=5.0)
    assert "--oversubscribe" in out and out[out.index("--bind-to") + 1] == "none"
    if os.geteuid() == 0:
        assert "--allow-run-as-root" in out


def test_np_must_agree_with_workers() -> None:
    check_np(read_line(["mpirun", "-np", "2", "python", "x.py"]), 2)
    check_np(read_line(["mpirun", "python", "x.py"]), 3)
    with pytest.raises(UsageError, match="disagrees with --workers 3"):
        check_np(read_line(["mpirun", "-np", "2", "python", "x.py"]), 3)
    with pytest.raises(UsageError, match="names no program"):
        check_np(read_line(["mpirun", "-np", "2"]), 2)


def test_only_mpi_launchers_are_rewritten() -> None:
    assert is_mpirun(["/usr/bin/mpirun", "x"]) and is_mpirun(["mpiexec"])
    assert not is_mpirun(["python", "mpirun"])
