"""The horovod backend of `bench scaling`: Horovod itself (horovod.torch under horovodrun). Without
Horovod it is refused in one line naming the fix; with it, two real ranks train through
hvd.DistributedOptimizer."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from ringleader.bench.launch import launch, untag
from ringleader.bench.launchers import parse_json
from ringleader.bench.ranks import horovod_installed
from ringleader.bench.scaling import ScalingConfig
from ringleader.bench.train import TrainConfig
from ringleader.cli.main import main

from .conftest import TIMEOUT


@pytest.fixture
def no_horovod(monkeypatch: pytest.MonkeyPatch) -> None:
    """Python's own way to make a package unimportable, whether or not this venv has Horovod."""
    monkeypatch.setitem(sys.modules, "horovod", None)
    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)


@pytest.mark.usefixtures("no_horovod")
def test_horovod_alone_without_horovod_is_refused_with_the_fix(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    assert main(["bench", "scaling", "--backends", "horovod", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: the horovod backend needs Horovod")
    assert "make lab-horovod" in err and "scripts/install-horovod.sh" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.usefixtures("no_horovod")
def test_horovod_beside_other_backends_is_skipped_with_the_reason() -> None:
    cfg = ScalingConfig(backends=["gloo", "horovod"], workers=[1, 2], out="unused", train=TrainConfig(model="trivial"))
    cfg.validate()
    assert cfg.runnable == ["gloo"]
    assert cfg.skipped["horovod"].startswith("the horovod backend needs Horovod with PyTorch (horovod.torch)")


def test_horovodrun_tags_are_taken_off_rank_0s_lines() -> None:
    tagged = "[1,0]<stdout>:{\n[1,0]<stdout>:  \"a\": 1\n[1,1]<stdout>:rank 1\n[0]<stdout>:}\nplain\n"
    assert untag(tagged) == "{\n  \"a\": 1\n}\nplain\n"


def test_a_tag_open_mpi_puts_before_a_lone_newline_is_taken_off_too() -> None:
    """Open MPI tags each chunk it forwards: a rank's last "}" and its newline, written apart,
    arrive as "[1,0]<stdout>:}[1,0]<stdout>:" (seen in one run of 8): the JSON must still parse."""
    tagged = "[1,0]<stdout>:{\n[1,0]<stdout>:  \"a\": 1\n[1,0]<stdout>:}[1,0]<stdout>:\n"
    assert json.loads(untag(tagged)) == {"a": 1}


@pytest.mark.skipif(not horovod_installed(), reason="Horovod is not installed here (`make lab-horovod` installs it)")
@pytest.mark.timeout(TIMEOUT)
def test_two_horovod_ranks_train_through_horovodrun() -> None:
    cfg = TrainConfig(model="mnist", batch_size=8, num_batches=4, num_warmup_batches=1, image_size=16,
                      backend="horovod", output="json")  # fmt: skip
    done = launch("train", asdict(cfg), "horovod", 2, capture=True, timeout=TIMEOUT, threads=1)
    assert done.returncode == 0, done.stderr[-2000:]
    res = parse_json(done.stdout)
    assert (res["backend"], res["world_size"], res["nodes"]) == ("horovod", 2, 1)
    assert res["horovod_controller"] in ("mpi", "gloo")
    assert len(res["step_times_s"]) == 4 and res["images_per_sec_total"] > 0
    # each rank trained on its own batch (seeded by rank): the same weights after it only if
    # hvd.DistributedOptimizer averaged the gradients and broadcast_parameters started them equal
    assert len(res["weight_sums"]) == 2 and res["weight_sums"][0] == res["weight_sums"][1]
