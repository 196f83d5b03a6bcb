"""Real outputs, mangled the ways copy and paste mangle them: the parsers either return the
matrix the intact text shows or fail with one line naming the problem, never a traceback."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refdata import REFERENCE_TOPOLOGIES
from ringleader.errors import TopologyError
from ringleader.inputs import decode_text
from ringleader.topology import NodeTopology, parse_bandwidth_text, parse_topo_text

TOPO_FILES = sorted(REFERENCE_TOPOLOGIES.glob("*.txt")) if REFERENCE_TOPOLOGIES.exists() else []
BW_FILES = sorted((REFERENCE_TOPOLOGIES / "bandwidth").glob("*.txt")) if REFERENCE_TOPOLOGIES.exists() else []
needs_reference = pytest.mark.skipif(not TOPO_FILES, reason="reference material (../shared) not present")


def shown(topo: NodeTopology) -> tuple[object, ...]:
    return (topo.links, topo.nic_links, topo.numa, topo.numa_affinity, topo.gpu_numa_id)


def harmless(text: str, data: st.DataObject) -> str:
    """Changes that keep the meaning: ANSI codes around tokens, CRLF, tabs for spaces."""
    kind = data.draw(st.sampled_from(["ansi", "crlf", "tabs", "trailing"]))
    if kind == "ansi":
        return re.sub(r"(GPU\d+|NV\d+|SYS|PIX|X)\b", "\x1b[4m\\1\x1b[0m", text)
    if kind == "crlf":
        return text.replace("\n", "\r\n")
    if kind == "tabs":
        return re.sub(r" {2,}", "\t", text)
    return text.replace("\n", "   \n")


def mangled(text: str, data: st.DataObject) -> str:
    """Damage: cut anywhere, drop/duplicate/garble a character, drop or repeat a line."""
    kind = data.draw(st.sampled_from(["cut", "drop", "garble", "dup_line", "drop_line", "insert"]))
    at = data.draw(st.integers(0, max(0, len(text) - 1)))
    if kind == "cut":
        return text[:at]
    if kind == "drop":
        return text[:at] + text[at + 1 :]
    if kind == "garble":
        return text[:at] + data.draw(st.characters()) + text[at + 1 :]
    if kind == "insert":
        return text[:at] + data.draw(st.text(max_size=5)) + text[at:]
    lines = text.splitlines(keepends=True)
    i = data.draw(st.integers(0, max(0, len(lines) - 1)))
    return "".join(lines[: i + 1] + lines[i:]) if kind == "dup_line" else "".join(lines[:i] + lines[i + 1 :])


def one_line_or_value(parse, text: str):  # type: ignore[no-untyped-def]
    try:
        return parse(text)
    except TopologyError as exc:
        line = exc.one_line()
        assert "\n" not in line and exc.fix, line
        return None


@needs_reference
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_harmless_changes_parse_to_the_same_matrix(data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(TOPO_FILES))
    text = path.read_text()
    assert shown(parse_topo_text(harmless(text, data))) == shown(parse_topo_text(text))


@needs_reference
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_damaged_topology_text_parses_right_or_fails_in_one_line(data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(TOPO_FILES))
    text = path.read_text()
    damaged = mangled(text, data)
    got = one_line_or_value(parse_topo_text, damaged)
    if got is None or got.n_gpus != parse_topo_text(text).n_gpus:
        return  # refused in one line, or a header cut to fewer GPUs (a smaller, consistent matrix)
    original = parse_topo_text(text)
    # Link cells are checked against their mirror (GPU1-GPU0 against GPU0-GPU1, NIC rows against
    # GPU rows), so damage there is refused. A CPU or NUMA cell damaged into another valid list is
    # what the text now shows: it must be read as shown.
    assert got.links == original.links and got.nic_links == original.nic_links
    for i in range(got.n_gpus):
        row = next(ln.split() for ln in damaged.splitlines() if ln.split()[:1] == [f"GPU{i}"] and "X" in ln.split())
        assert got.cpu_affinity[i] in (original.cpu_affinity[i], *row)
        assert got.numa_affinity[i] == original.numa_affinity[i] or any(
            c[:1].isdigit() and c.replace(",", "-").split("-")[0] == str(got.numa_affinity[i][0]) for c in row
        )


@needs_reference
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_damaged_bandwidth_text_parses_or_fails_in_one_line(data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(BW_FILES))
    got = one_line_or_value(parse_bandwidth_text, mangled(path.read_text(), data))
    if got is not None:
        n = len(got)
        assert all(len(row) == n for row in got) and all(got[i][j] > 0 for i in range(n) for j in range(n) if i != j)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_decode_or_fail_in_one_line(data: bytes) -> None:
    text = one_line_or_value(lambda d: decode_text(d, "file 'x'"), data)  # type: ignore[arg-type]
    if text is not None:
        one_line_or_value(parse_topo_text, text)
        one_line_or_value(parse_bandwidth_text, text)
