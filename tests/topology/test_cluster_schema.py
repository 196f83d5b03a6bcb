"""The cluster file is read strictly: YAML tricks, unknown or repeated keys and values YAML types
differently than they look are refused in one line naming the file, the line and the key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringleader.engines.embedded.nodes import label_node
from ringleader.errors import UsageError
from ringleader.topology import load_cluster_file, load_cluster_text, preset
from ringleader.topology.cluster import NodeSpec

REPO = Path(__file__).resolve().parents[2]
NODE = "nodes:\n  - name: a\n    preset: dgx1v\n    emulated: true\n"


def refused(text: str, tmp_path: Path) -> str:
    with pytest.raises(UsageError) as err:
        load_cluster_text(text, tmp_path, origin="c.yaml")
    line = err.value.one_line()
    assert "\n" not in line and err.value.fix and err.value.exit_code == 2, line
    return line


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a key the schema does not name, at the top level: it used to be ignored without a word
        ("network_gbps: .nan\n" + NODE, "c.yaml line 1: unknown key 'network_gbps' at the top level"),
        (NODE + "    netwrok_gbps: 25\n", "unknown key 'netwrok_gbps' in nodes[0] (did you mean 'network_gbps'?)"),
        # a key given twice: the last one used to win
        (NODE + "    emulated: false\n", "c.yaml line 5: key 'emulated' given twice in nodes[0] (first on line 4)"),
        ("nodes: []\n" + NODE, "c.yaml line 2: key 'nodes' given twice at the top level (first on line 1)"),
        # values YAML types differently than they look: no longer stringified into names
        (NODE.replace("name: a", "name: 2001-12-14"), "line 2: nodes[0].name must be a string, got 2001-12-14"),
        (NODE.replace("name: a", "name: 123"), "nodes[0].name must be a string, got 123. To fix: quote it: '123'"),
        (NODE.replace("name: a", "name: 0x1f"), "nodes[0].name must be a string, got 31"),
        (NODE + "    gpu_model: {model: V100}\n", "nodes[0].gpu_model must be a string, got {'model': 'V100'}"),
        (NODE + "    nvlink_domain: [a, b]\n", "nodes[0].nvlink_domain must be a string"),
        (NODE + "    labels: {rack: 3}\n", "nodes[0].labels.rack must be a string, got 3"),
        (NODE + "    labels: {version: 1.10}\n", "got 1.1. To fix: quote it: '1.1'"),
        (NODE + "    preset: 1\n", "given twice"),
        (NODE.replace("preset: dgx1v", "preset: 1"), "nodes[0].preset must be a string, got 1"),
        (NODE + "    port: 22\n", "'port' without `address`"),
        (NODE + "    network_gbps: 0\n", "nodes[0].network_gbps must be a positive number, got 0"),
        (NODE + "    network_gbps: 1.0e+300\n", "nodes[0].network_gbps must be <= 1e+06, got 1e+300"),
        (NODE + "    network_gbps: true\n", "nodes[0].network_gbps must be a number, got True"),
        (NODE + "    count: 1.0\n", "nodes[0].count must be a whole number, got 1.0"),
        # label keys `ringleader node label` refuses
        (NODE + "    labels: {'bad key': x}\n", "line 2: invalid label key 'bad key'"),
        (NODE + "    labels: {'-x': y}\n", "invalid label key '-x'"),
        (NODE + "    labels: {'': y}\n", "nodes[0].labels"),
        # YAML features a cluster file has no use for, each a way to hide what the file says
        ("x: &n [1]\nnodes:\n  - name: a\n    preset: dgx1v\n    labels: *n\n", "c.yaml line 5: YAML aliases"),
        (NODE + "    <<: {count: 2}\n", "c.yaml line 5: YAML merge keys (<<) are not allowed"),
        (NODE + "    gpu_model: !!binary aGk=\n", "YAML tag 'tag:yaml.org,2002:binary' at nodes[0].gpu_model"),
        (NODE + "    ? [a, b]\n    : 1\n", "c.yaml line 5: key a list or mapping in nodes[0] is not a plain string"),
        (NODE + "    count: " + "9" * 5000 + "\n", "c.yaml line 5: nodes[0].count: integer of more than 18 digits"),
        ("nodes: " + "[" * 10_000 + "]" * 10_000 + "\n", "c.yaml line 1: nested deeper than 32 levels"),
        ("nodes:\n  - name: a\n    preset: dgx1v\n---\nnodes: []\n", "not valid YAML"),
        ("nodes:\n  - name: a\x07\n    preset: dgx1v\n", "c.yaml line 2: character '\\x07' is not allowed in YAML"),
    ],
)
def test_hostile_cluster_files_are_refused_in_one_line(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in refused(text, tmp_path)


def test_a_date_or_number_as_a_string_is_a_name(tmp_path: Path) -> None:
    text = "nodes:\n  - name: '2001-12-14'\n    preset: dgx1v\n  - name: '123'\n    preset: dgx1v\n"
    assert [s.name for s in load_cluster_text(text, tmp_path)] == ["2001-12-14", "123"]


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from("aZ09-_./ :"), min_size=0, max_size=12))
def test_the_file_takes_exactly_the_label_keys_node_label_takes(key: str) -> None:
    """Both rules must agree: a label the file declares can be changed by `node label`, and a key
    `node label` refuses cannot slip in through the file."""
    import json

    text = f"nodes:\n  - name: a\n    preset: dgx1v\n    labels: {{{json.dumps(key)}: v}}\n"
    try:
        load_cluster_text(text, Path("."))
        by_file = True
    except UsageError:
        by_file = False
    try:
        label_node([NodeSpec("a", preset("dgx1v"))], "a", key, "v", overwrite=False)
        by_command = True
    except UsageError:
        by_command = False
    if key != "ack.node.gpu.schedule":  # node label's alias of gpu-schedule: the value rule differs
        assert by_file == by_command, key


def test_every_example_cluster_file_still_loads() -> None:
    # all but the queue files and examples/kubernetes (training jobs for kubectl, not clusters)
    examples = sorted(p for p in REPO.glob("examples/**/*.yaml")
                      if not p.name.startswith("queues-") and p.parent.name != "kubernetes")  # fmt: skip
    assert len(examples) >= 4
    for path in examples:
        assert load_cluster_file(path), path


def test_the_yaml_shown_in_the_docs_loads(tmp_path: Path) -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", (REPO / "docs" / "hosts.md").read_text(), flags=re.S)
    assert blocks
    for block in blocks:
        assert load_cluster_text(block, tmp_path)
