"""Fuzzing the inputs a user controls: no input may produce a traceback, an exit code other than
0/1/2, or (when refused) any change of state."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringleader.cli.main import main
from ringleader.errors import RingleaderError
from ringleader.topology.cluster import load_cluster_text
from statedb import dump_db

REPO = Path(__file__).resolve().parents[2]
SEEDS = (REPO / "examples" / "seeds-cluster.yaml").read_text()

yaml_scalars = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.booleans(), st.none(), st.just(".nan"), st.just("-1"),
)  # fmt: skip
node_keys = st.sampled_from([
    "name", "preset", "matrix", "network_gbps", "labels", "emulated", "count", "gpu_model", "address", "port",
    "user", "identity_file", "bogus",
])  # fmt: skip


def _yaml_value(v: object) -> str:
    return repr(v) if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(node_keys, yaml_scalars, max_size=6), max_size=3))
def test_cluster_files_parse_or_give_one_error(nodes: list[dict[str, object]]) -> None:
    text = "nodes:\n" + "".join(
        "  -" + "".join(f"{' ' if i == 0 else '    '}{k}: {_yaml_value(v)}\n" for i, (k, v) in enumerate(n.items()))
        if n else "  - {}\n"
        for n in nodes
    )  # fmt: skip
    try:
        load_cluster_text(text, REPO)
    except RingleaderError as exc:
        assert "\n" not in exc.one_line()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400) | st.text(max_size=400).map(str.encode))
def test_mangled_seed_cluster_bytes_parse_or_give_one_error(noise: bytes) -> None:
    raw = SEEDS.encode()
    cut = len(noise) % len(raw)
    try:
        text = (raw[:cut] + noise + raw[cut:]).decode("utf-8")
    except UnicodeDecodeError:
        return  # undecodable files are refused by read_bounded, tested in test_edges
    try:
        load_cluster_text(text, REPO)
    except RingleaderError as exc:
        assert "\n" not in exc.one_line()


def run_cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


words = st.one_of(
    st.sampled_from(["--name", "x", "--workers", "--gpus", "-1", "0", "99999999999999999999", "--priority", "-e",
                     "A=1", "=", "--dry-run", "-o", "json", "yaml", "wide", "--gputopology", "--", "mpirun", "-np",
                     "--engine", "slurm", "bogus", "-H", "a:2", "python3", "-c", "pass", "\n", "ok\n", ""]),
    st.text(max_size=8),
)  # fmt: skip
commands = st.sampled_from([
    ["submit", "mpi", "--dry-run"], ["get"], ["list"], ["logs"], ["delete"], ["top", "node"], ["top", "job"],
    ["topo"], ["node", "label"], ["predict"], ["engine", "use"], ["prune", "--since"],
])  # fmt: skip


@pytest.fixture(scope="module")
def fuzz_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("fuzz") / "home"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RINGLEADER_HOME", str(home))
        assert run_cli(["cluster", "apply", "-f", str(REPO / "examples" / "seeds-cluster.yaml")])[0] == 0
    return home


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(commands, st.lists(words, max_size=6))
def test_cli_arguments_never_trace_back_nor_change_state_when_refused(
    fuzz_home: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], args: list[str]
) -> None:
    monkeypatch.setenv("RINGLEADER_HOME", str(fuzz_home))
    monkeypatch.setenv("RINGLEADER_ENGINE", "embedded")
    if command[0] == "submit" and "--dry-run" not in args:
        args = [*args, "--dry-run"]  # never start a job here
    before = dump_db(fuzz_home)
    code, err = run_cli([*command, *args])
    assert code in (0, 1, 2), (command, args, code, err)
    assert "Traceback" not in err
    if code == 2:  # a usage error, click's own included: one line naming the problem and the fix
        assert err.count("\n") == 1 and err.endswith("\n") and err.startswith("error: "), (command, args, err)
    if code != 0:
        assert dump_db(fuzz_home) == before, (command, args)
    os.environ.pop("RINGLEADER_ENGINE", None)
