"""`ringleader topo NODE --png|--svg`: the node's GPUs, link kinds and the job holding each GPU."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from ringleader.cli.main import main

PY = sys.executable
REF = Path(__file__).resolve().parents[3] / "shared" / "reference" / "topologies"


def _svg_text(path: Path) -> str:
    return path.read_text()


@pytest.fixture(autouse=True)
def _svg_text_as_text():
    import matplotlib

    old = matplotlib.rcParams["svg.fonttype"]
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text, so the test can read it
    yield
    matplotlib.rcParams["svg.fonttype"] = old


def test_drawing_shows_links_and_who_holds_each_gpu(seeds_cli, tmp_path, monkeypatch, capsys) -> None:
    seeds_cli.ok("submit", "mpi", "--name", "vgg", "--workers", "2", "--gpus", "2", "--gputopology=true",
                 "--", PY, "-c", "import time; time.sleep(60)")  # fmt: skip
    monkeypatch.setenv("RINGLEADER_HOME", str(seeds_cli.home))
    png, svg = tmp_path / "n.png", tmp_path / "n.svg"
    assert main(["topo", "cn-shanghai-172", "--png", str(png), "--svg", str(svg)]) == 0
    out = capsys.readouterr()
    assert out.out.startswith("\tGPU0\tGPU1")  # the nvidia-smi matrix still prints
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    text = _svg_text(svg)
    assert "cn-shanghai-172: 8 x V100, 4/8 GPUs allocated" in text
    assert text.count(">vgg<") == 4 and text.count(">idle<") == 4
    assert {"NV1", "NV2"} <= set(re.findall(r">(NV\d+)<", text))
    assert "12 SYS pair(s) not drawn (across CPU sockets)" in text
    seeds_cli.ok("delete", "vgg")


def test_drawing_needs_one_node_and_a_writable_path(seeds_cli, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("RINGLEADER_HOME", str(seeds_cli.home))
    assert main(["topo", "--png", str(tmp_path / "x.png")]) == 2
    assert main(["topo", "cn-shanghai-172", "--png", str(tmp_path / "no" / "such" / "x.png")]) == 2
    assert main(["topo", "cn-shanghai-172", "--png", str(tmp_path / "x.bmpx")]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 3 and all(e.startswith("error: ") and "To fix:" in e for e in errors)
    assert main(["topo", "--presets", "dgx1v", "--svg", str(tmp_path / "p.svg")]) == 0
    assert "dgx1v: 8 x V100 (preset)" in _svg_text(tmp_path / "p.svg")


def test_nvswitch_and_nics_from_a_real_nvidia_smi_output(tmp_path) -> None:
    source = REF / "a100_sxm_8gpu_nv12_17nics.txt"
    if not source.is_file():
        pytest.skip(f"shared reference outputs not found at {REF}")
    from ringleader.topology.draw import draw_node
    from ringleader.topology.smi import parse_topo_text

    topo = parse_topo_text(source.read_text(), gpu_model="A100")
    text = _svg_text(draw_node(topo, tmp_path / "a100.svg", "a100", {0: "bert"}))
    assert "every pair" in text and "NV12" in text  # one NVSwitch hub, not 28 lines
    assert len(set(re.findall(r"NIC(\d+)", text))) == len(topo.nics) == 17
    assert text.count(">bert<") == 1
