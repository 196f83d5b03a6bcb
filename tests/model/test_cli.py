"""`ringleader predict` and `ringleader calibrate`: output, JSON, bad input exit codes."""

from __future__ import annotations

import json

import pytest

from ringleader.cli.main import main


@pytest.fixture(autouse=True)
def private_home(tmp_path, monkeypatch):
    """predict reads the applied cluster: each test gets its own (empty) state."""
    monkeypatch.setenv("RINGLEADER_HOME", str(tmp_path / "home"))


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_predict_table_lists_every_policy(capsys):
    code, out, _ = run(capsys, "predict", "--model", "vgg16", "--workers", "4")
    assert code == 0
    assert "topology" in out and "default" in out
    assert "node-a[4w: GPU 0,1,2,3]" in out and "communication" in out
    # each prediction with the range 8 in 10 held-out published rows of its kind fell in
    assert "LIKELY (8 IN 10)" in " ".join(out.split())


def test_predict_json_topology_vs_default(capsys):
    code, out, _ = run(capsys, "predict", "--model", "vgg16", "--workers", "4", "--policy", "topology",
                       "--policy", "default", "-o", "json")  # fmt: skip
    assert code == 0
    preds = {p["policy"]: p for p in json.loads(out)["predictions"]}
    assert set(preds) == {"topology", "default"}
    assert preds["topology"]["nodes"] == 1 and preds["default"]["nodes"] == 2
    assert preds["topology"]["images_per_s"] > 4 * preds["default"]["images_per_s"]
    assert preds["default"]["bound"] == "communication"
    assert preds["default"]["allreduce"]["bottleneck"] == "network"


def test_predict_a_given_placement(capsys):
    code, out, _ = run(capsys, "predict", "--model", "resnet50", "--placement", "node-a:0,1+node-b:0,1",
                       "-o", "json")  # fmt: skip
    assert code == 0
    (pred,) = json.loads(out)["predictions"]
    assert pred["policy"] == "given" and pred["ranks"] == 4 and pred["nodes"] == 2


def test_gradient_accumulation_makes_a_spread_gang_nearly_as_fast(capsys):
    """VGG-16 over two nodes on the default 25 Gb/s network: at 16 micro-batches a step the
    allreduce is paid once per 16, and the spread placement keeps most of the packed one's rate."""
    def ratio(*extra: str) -> float:
        code, out, _ = run(capsys, "predict", "--model", "vgg16", "--workers", "4", "--policy", "topology",
                           "--policy", "default", "-o", "json", *extra)  # fmt: skip
        assert code == 0
        preds = {p["policy"]: p for p in json.loads(out)["predictions"]}
        assert preds["default"]["accumulation"] == (int(extra[-1]) if extra else 1)
        return float(preds["default"]["images_per_s"] / preds["topology"]["images_per_s"])

    assert ratio() < 0.25 < 0.5 < ratio("--accumulation-steps", "16")


def test_predict_with_a_cluster_file(tmp_path, capsys):
    f = tmp_path / "c.yaml"
    f.write_text("nodes:\n  - name: h\n    preset: dgx-a100\n    count: 2\n    network_gbps: 100\n")
    code, out, _ = run(capsys, "predict", "--model", "resnet50", "--workers", "8", "--gpus", "2",
                       "--policy", "topology", "-o", "json", "--cluster", str(f))  # fmt: skip
    assert code == 0
    (pred,) = json.loads(out)["predictions"]
    assert pred["gpu_type"] == "A100" and pred["ranks"] == 16 and pred["nodes"] == 2


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--model", "lenet", "--workers", "4"], "unknown model 'lenet'"),
        (["--model", "vgg16", "--workers", "4", "--fabric", "carrier-pigeon"], "unknown fabric 'carrier-pigeon'"),
        (["--model", "vgg16", "--workers", "4", "--network-efficiency", "1.5"],
         "'--network-efficiency': '1.5' is not a finite number > 0 and <= 1"),
        (["--model", "vgg16", "--workers", "4", "--gpu-type", "TPU"], "unknown GPU type 'TPU'"),
        (["--model", "vgg16"], "--workers is required"),
        (["--model", "vgg16", "--placement", "node-z:0"], "unknown node 'node-z'"),
        (["--model", "vgg16", "--placement", "node-a:0,9"], "GPU ids must be distinct"),
        (["--model", "vgg16", "--workers", "2", "--policy", "nope"], "unknown policy 'nope'"),
        (["--model", "vgg16", "--workers", "2", "--precision", "int3"], "unknown precision"),
        (["--model", "vgg16", "--workers", "2", "--accumulation-steps", "0"], "--accumulation-steps"),
    ],
)
def test_predict_bad_input_is_one_line_and_exit_2(capsys, argv, needle):
    code, _, err = run(capsys, "predict", *argv)
    assert code == 2
    assert needle in err and len(err.strip().splitlines()) == 1


def test_predict_with_a_malformed_calibration(tmp_path, capsys):
    bad = tmp_path / "cal.json"
    bad.write_text('{"kind": "calibration", "links": {"network": {"gbs": -1}}}')
    code, _, err = run(capsys, "predict", "--model", "vgg16", "--workers", "4", "--calibration", str(bad))
    assert code == 2
    assert str(bad) in err and "links.network.gbs must be a positive number" in err
    bad.write_text("{not json")
    code, _, err = run(capsys, "predict", "--model", "vgg16", "--workers", "4", "--calibration", str(bad))
    assert code == 2 and "is not JSON" in err


def test_predict_uses_the_applied_cluster_and_names_the_bottleneck_as_submit_does(tmp_path, capsys):
    f = tmp_path / "c.yaml"
    f.write_text("nodes:\n  - name: big\n    preset: dgx-a100\n    count: 2\n    network_gbps: 200\n"
                 "    emulated: true\n")
    assert run(capsys, "cluster", "apply", "-f", str(f))[0] == 0
    code, out, _ = run(capsys, "predict", "--model", "resnet50", "--workers", "4", "--policy", "topology", "-o", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["cluster"].startswith("applied cluster")
    (pred,) = doc["predictions"]
    assert pred["placement"].startswith("big-") and pred["gpu_type"] == "A100"
    code, out, _ = run(capsys, "submit", "mpi", "--name", "j", "--workers", "4", "--gpus", "1", "--gputopology",
                       "--model", "resnet50", "--dry-run", "-o", "json", "--", "python", "t.py")  # fmt: skip
    assert code == 0
    plan = json.loads(out)
    # one vocabulary: the same link, in the same words, from submit, its prediction and predict
    assert plan["plan"]["chosen"]["bottleneck"] == pred["bottleneck"] == plan["prediction"]["bottleneck"]
    assert pred["bottleneck"].startswith("NV12 300 GB/s")


def test_fabric_and_network_efficiency_change_a_multi_node_prediction(tmp_path, capsys):
    f = tmp_path / "c.yaml"
    f.write_text("nodes:\n  - name: h\n    preset: dgx1v\n    count: 2\n    network_gbps: 100\n")
    base = ["predict", "--model", "vgg16", "--workers", "16", "--policy", "topology", "-o", "json", "--cluster", str(f)]

    def rate(*extra: str) -> float:
        code, out, _ = run(capsys, *base, *extra)
        assert code == 0
        return json.loads(out)["predictions"][0]["images_per_s"]

    tcp, ib = rate(), rate("--fabric", "infiniband")
    assert ib > 1.5 * tcp  # NCCL over sockets gets a fraction of what RDMA gets of 100 Gb/s
    assert rate("--fabric", "infiniband", "--network-efficiency", "0.2") < ib


def test_a_calibration_from_a_faster_fabric_is_named(tmp_path, capsys):
    """An InfiniBand calibration (12 GB/s) applied to the reference 25 Gb/s cluster used to
    predict near-perfect scaling without a word; one measured at 1 GB/s fits this cluster."""
    cal = tmp_path / "cal.json"
    argv = ("predict", "--model", "vgg16", "--workers", "4", "--policy", "default", "--calibration", str(cal))
    cal.write_text('{"kind": "calibration", "version": 1, "links": {"network": {"gbs": 12, "latency_us": 5}}}')
    code, out, err = run(capsys, *argv)
    assert code == 0 and "default" in out
    assert err.count("\n") == 1 and "warning: the calibration's network link (12 GB/s) is faster" in err
    assert "(3.12 GB/s)" in err
    cal.write_text('{"kind": "calibration", "version": 1, "links": {"network": {"gbs": 1, "latency_us": 5}}}')
    assert "warning" not in run(capsys, *argv)[2]
