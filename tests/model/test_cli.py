"""`ringleader predict` and `ringleader calibrate`: output, JSON, bad input exit codes."""

from __future__ import annotations

import json

import pytest

from ringleader.cli.main import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_predict_table_lists_every_policy(capsys):
    code, out, _ = run(capsys, "predict", "--model", "vgg16", "--workers", "4")
    assert code == 0
    assert "topology" in out and "default" in out
    assert "node-a[4w: GPU 0,1,2,3]" in out and "communication" in out


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
        (["--model", "bert", "--workers", "4"], "unknown model 'bert'"),
        (["--model", "vgg16", "--workers", "4", "--gpu-type", "TPU"], "unknown GPU type 'TPU'"),
        (["--model", "vgg16"], "--workers is required"),
        (["--model", "vgg16", "--placement", "node-z:0"], "unknown node 'node-z'"),
        (["--model", "vgg16", "--placement", "node-a:0,9"], "GPU ids must be distinct"),
        (["--model", "vgg16", "--workers", "2", "--policy", "nope"], "unknown policy 'nope'"),
        (["--model", "vgg16", "--workers", "2", "--precision", "int3"], "unknown precision"),
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
