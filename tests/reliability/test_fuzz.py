"""Fuzzing the inputs a user controls: no input may produce a traceback, an exit code other than
0/1/2, or (when refused) any change of state.

Size: cluster files 300 and mangled seed cluster files 200 examples; the job commands' own
words 250; every leaf command of the CLI (but NOT_FUZZED, which start ranks, namespaces or
servers) with its own options and hostile values 400; every text format read (nvidia-smi topo -m,
p2pBandwidthLatencyTest, Slurm topology.conf and topology.yaml, ibnetdiscover) mangled 300 (these
need ../shared/reference). With tests/reliability/test_hostile_inputs.py (calibration files,
traces, capped commands): about 15 s on 2 cores, in `make test`."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable
from pathlib import Path

import click
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


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
          HealthCheck.too_slow])  # fmt: skip
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


# -- every command: its own options, with values a typo, a script or an attacker would give --------

# Commands that start what outlives a fuzz example or reaches beyond this folder, by design: the
# benches run ranks for minutes, `cluster up|down` makes network namespaces, the Kubernetes
# scheduler and agent serve until stopped, `simulate run` runs a whole trace, `state import`
# replaces the state. Their refusals of bad values are in tests/cli/test_bad_input.py.
NOT_FUZZED = {("bench", "allreduce"), ("bench", "train"), ("bench", "pipeline"), ("bench", "scaling"),
              ("cluster", "up"), ("cluster", "down"), ("kube", "scheduler"), ("kube", "agent"),
              ("simulate", "run"), ("state", "import"), ("data", "synth"), ("env",)}  # fmt: skip
# Options that redraw or follow until Ctrl-C: each example must end.
ENDLESS = {"-r", "--refresh", "-f", "--follow"}


def every_command() -> list[tuple[tuple[str, ...], list[str]]]:
    """Every leaf command of the CLI (groups walked as `ringleader --help` lists them) and the
    option names it takes."""
    from ringleader.cli.main import cli

    ctx = click.Context(cli)
    found: list[tuple[tuple[str, ...], list[str]]] = []

    def walk(path: tuple[str, ...], command: click.Command) -> None:
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None, name
                walk((*path, name), sub)
        elif path not in NOT_FUZZED:
            options = [o for p in command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")]
            found.append((path, [o for o in options if o not in ENDLESS]))

    walk((), cli)
    return found


COMMANDS = every_command()
# Paths are relative (each example runs in its own folder): an output option given an absolute
# path would write wherever it names (`state export /x` did).
VALUES = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "-1", "0", "1", "2.5", "1e308", str(2**63), str(10**20), "", " ", "a b",
                     "x\ny", "\x1b]0;t\x07", "\u202eexe", "été", "../../etc", "missing/file", "rank.json",
                     "json", "yaml", "wide", "topology", "k=v", "a;b", "$(id)", "--", "-", "local", "cn-shanghai-172",
                     "resnet50", "gloo", "smoke", "30s", "soon"]),
    st.text(st.characters(blacklist_characters="\x00/"), max_size=6),  # no argv holds NUL; no absolute path
)  # fmt: skip


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
          HealthCheck.too_slow])  # fmt: skip
@given(st.data())
def test_every_commands_options_never_trace_back_nor_change_state_when_refused(
    fuzz_home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, data: st.DataObject
) -> None:
    """Every command the CLI has (but NOT_FUZZED), with its own options in any order and values
    from VALUES: exit 0, 1 or 2, never a traceback; refused, one line and the state unchanged."""
    path, options = data.draw(st.sampled_from(COMMANDS), label="command")
    words = data.draw(st.lists(st.sampled_from(options) | VALUES, max_size=6) if options else
                      st.lists(VALUES, max_size=3), label="args")  # fmt: skip
    monkeypatch.setenv("RINGLEADER_HOME", str(fuzz_home))
    monkeypatch.setenv("RINGLEADER_ENGINE", "embedded")
    monkeypatch.chdir(tmp_path)  # whatever a command writes lands here
    args = [*path, *words]
    if path[0] == "submit":
        args.append("--dry-run")  # never start a job here
    before = dump_db(fuzz_home)
    code, err = run_cli(args)
    assert code in (0, 1, 2), (args, code, err)
    assert "Traceback" not in err, (args, err)
    if code == 2:
        assert err.count("\n") == 1 and err.endswith("\n") and err.startswith("error: "), (args, err)
    if code != 0:
        assert dump_db(fuzz_home) == before, args


# -- every input file format: mangled, it loads or is one line ------------------------------------

SHARED = REPO.parent / "shared" / "reference"


def _formats() -> list[tuple[str, Callable[[str], object], str]]:
    """(name, parser, a real file of that format) for every text format ringleader reads."""
    from ringleader.topology.bandwidth import parse_bandwidth_text
    from ringleader.topology.network_formats import load_network_text
    from ringleader.topology.smi import parse_topo_text

    seeds = [
        ("nvidia-smi topo -m", parse_topo_text, SHARED / "topologies" / "pcie_4x_a10_sys_2nics.txt"),
        ("slurm topology.conf", lambda t: load_network_text(t, "topology.conf"),
         SHARED / "network" / "slurm" / "psmn_x5_tree.topology.conf"),
        ("slurm topology.yaml", lambda t: load_network_text(t, "topology.yaml"),
         SHARED / "network" / "slurm" / "slurm_man_example.topology.yaml"),
        ("ibnetdiscover", lambda t: load_network_text(t, "ibnetdiscover"),
         SHARED / "network" / "ibnetdiscover" / "psmn_x5_qdr_mixed.ibnetdiscover.txt"),
    ]
    bandwidth = sorted((SHARED / "topologies" / "bandwidth").glob("*")) if SHARED.is_dir() else []
    if bandwidth:
        seeds.append(("p2pBandwidthLatencyTest", parse_bandwidth_text, bandwidth[0]))
    return [(name, parse, path.read_text(errors="replace")[:20000]) for name, parse, path in seeds if path.is_file()]


FORMATS = _formats()


@pytest.mark.skipif(not FORMATS, reason="the reference files are in ../shared/reference (not in this clone)")
@settings(max_examples=300, deadline=None)
@given(st.data())
def test_every_input_format_mangled_loads_or_is_one_line(data: st.DataObject) -> None:
    name, parse, text = data.draw(st.sampled_from(FORMATS), label="format")
    cut = data.draw(st.integers(0, len(text)), label="cut")
    drop = data.draw(st.integers(0, 40), label="dropped")
    noise = data.draw(st.text(max_size=40) | st.sampled_from(["\t", "\n\n", "X", "NV999", "-1", "nan", "]["]))
    try:
        parse(text[:cut] + noise + text[cut + drop:])
    except RingleaderError as exc:
        assert "\n" not in exc.one_line(), name
