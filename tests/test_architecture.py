"""The architecture rules of docs/architecture.md, checked on every import in the source tree,
including imports inside functions and under TYPE_CHECKING (a lazy import is still an arrow)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "ringleader"

# Lowest first: a unit may import only units of a lower layer, or its own.
LAYERS: list[set[str]] = [
    {"clock", "errors", "reference", "settings", "statefolder"},
    {"inputs"},  # bounded, strict reading of input files: below every reader of one
    {"topology"},
    {"scheduler"},
    {"model"},
    {"sim", "jobs", "htmlreport"},
    {"runtime"},
    {"engines"},  # engines/__init__.py and engines/base.py: the registry and the interface
    {"engines.embedded", "engines.slurm", "engines.kubernetes"},
    {"bench"},
    {"cli"},
]
LAYER_OF = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}


def unit_of(module: str) -> str:
    """`ringleader.engines.slurm.launch` -> `engines.slurm`; `ringleader.jobs.spec` -> `jobs`."""
    parts = module.split(".")[1:]
    if not parts:
        return "ringleader"
    if parts[0] == "engines" and len(parts) > 1 and parts[1] not in ("base",):
        return f"engines.{parts[1]}"
    return parts[0]


def module_name(path: Path) -> str:
    return ".".join(path.with_suffix("").relative_to(SRC).parts).removesuffix(".__init__")


def imports(path: Path) -> list[tuple[int, str]]:
    """Every ringleader module ``path`` imports, with its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ringleader"):
            where = PACKAGE.joinpath(*node.module.split(".")[1:])
            if node.module == "ringleader":  # `from ringleader import settings`: each module is a unit
                found += [(node.lineno, f"ringleader.{a.name}") for a in node.names
                          if (where / f"{a.name}.py").is_file() or (where / a.name).is_dir()]  # fmt: skip
                continue
            found.append((node.lineno, node.module))
            # `from ringleader.engines import embedded` names a subpackage
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names
                      if (where / a.name).is_dir()]  # fmt: skip
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("ringleader")]
    return found


def arrows() -> list[tuple[str, int, str, str]]:
    """(file, line, importing unit, imported unit) for every import across units."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        mine = unit_of(module_name(path))
        for line, target in imports(path):
            theirs = unit_of(target)
            if theirs != mine:
                out.append((str(path.relative_to(SRC)), line, mine, theirs))
    return out


def test_every_unit_has_a_layer() -> None:
    units = {unit_of(module_name(p)) for p in PACKAGE.rglob("*.py")} - {"ringleader"}
    assert units <= set(LAYER_OF), f"give these a layer in LAYERS: {sorted(units - set(LAYER_OF))}"


def test_no_import_runs_from_a_lower_layer_to_a_higher_one() -> None:
    upward = [f"{f}:{line}: {a} imports {b}" for f, line, a, b in arrows()
              if b != "ringleader" and LAYER_OF[b] > LAYER_OF[a]]  # fmt: skip
    assert not upward, "\n".join(upward)


def test_no_engine_imports_another() -> None:
    across = [f"{f}:{line}: {a} imports {b}" for f, line, a, b in arrows()
              if a.startswith("engines.") and b.startswith("engines.")]  # fmt: skip
    assert not across, "\n".join(across)


@pytest.mark.parametrize(
    ("unit", "allowed"),
    [
        ("scheduler", {"topology", "errors", "reference"}),  # pure: no engine, no model, no I/O layer
        ("jobs", {"scheduler", "topology", "model", "errors", "reference", "settings"}),  # settings: a job's grace
        ("runtime", {"jobs", "scheduler", "topology", "errors", "reference", "settings"}),
    ],
)
def test_what_each_lower_unit_may_import(unit: str, allowed: set[str]) -> None:
    extra = [f"{f}:{line}: imports {b}" for f, line, a, b in arrows() if a == unit and b not in allowed]
    assert not extra, "\n".join(extra)


def test_rank_wrapper_imports_only_the_standard_library() -> None:
    """It starts once per rank on every host, and travels to ssh hosts as its own source: no
    ringleader import anywhere in it (the head's relay of ssh hosts' output imports it instead)."""
    tree = ast.parse((PACKAGE / "runtime" / "rank.py").read_text())
    ours = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)
            and "ringleader" in ast.unparse(n)]  # fmt: skip
    assert not ours, ours


def module_arrows(path: Path) -> set[str]:
    """The ringleader modules ``path`` imports, lazily too: `from ringleader.engines.slurm import
    slurmcli` is an arrow to the module slurmcli, `from ringleader.jobs.spec import JobSpec` one
    to ringleader.jobs.spec."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ringleader"):
            where = PACKAGE.joinpath(*node.module.split(".")[1:])
            for alias in node.names:
                below = where / alias.name
                found.add(f"{node.module}.{alias.name}" if below.with_suffix(".py").is_file() or below.is_dir()
                          else node.module)  # fmt: skip
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("ringleader")}
    return found


def circles(modules: dict[str, set[str]]) -> list[list[str]]:
    """The import circles among ``modules`` (module -> what it imports): every strongly connected
    set of two or more modules, found by Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(modules[module]):
            if target not in modules:
                continue
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            members = []
            while True:
                member = stack.pop()
                members.append(member)
                if member == module:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    for module in sorted(modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_circle_between_modules() -> None:
    """Lazy imports and packages' __init__ files included, inside a package or across packages:
    a circle is one module in several files, which no one can read, move or test apart (the
    scheduler's policy registry once was one: framework imported the policies to register them)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {name: module_arrows(path) - {name} for name, path in modules.items()}
    assert not circles(graph), circles(graph)


def test_the_circle_check_finds_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_rules_catch_an_upward_import(tmp_path: Path) -> None:
    """The checker itself: an engine importing another, and the scheduler importing an engine."""
    assert unit_of("ringleader.engines.slurm.launch") == "engines.slurm"
    assert unit_of("ringleader.engines.base") == "engines"
    assert LAYER_OF[unit_of("ringleader.engines.embedded.engine")] > LAYER_OF["scheduler"]
    bad = tmp_path / "m.py"
    bad.write_text("def f():\n    from ringleader.engines.embedded import store\n")
    assert imports(bad) == [(2, "ringleader.engines.embedded")]
    bad.write_text("from ringleader.engines import slurm\n")
    assert unit_of(imports(bad)[-1][1]) == "engines.slurm"


def test_docs_architecture_names_every_module() -> None:
    """docs/architecture.md lists every module of the package, so a reader finds each one."""
    text = (SRC.parent / "docs" / "architecture.md").read_text()
    missing = [str(p.relative_to(PACKAGE)) for p in sorted(PACKAGE.rglob("*.py"))
               if f"| `{p.relative_to(PACKAGE)}` |" not in text]  # fmt: skip
    assert not missing, f"name these in docs/architecture.md, 'Every module': {missing}"


# The parts of the queue's pass: only scheduler/cycle.py runs them for an engine or the simulator.
QUEUE_PASS = {"schedule_queue", "QueuePass", "queue_order"}
# Words of the verdict on a failed run, each written in jobs/failures.py alone.
VERDICT_WORDS = ("(--max-restarts)", "blamed for ", "requeued (restart", "(resume from your checkpoint)",
                 "` ends it")  # fmt: skip


def names_used(path: Path) -> set[str]:
    """Every name ``path`` imports, reads or calls (``x.QueuePass`` counts as QueuePass)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
    return found


def strings_in(path: Path) -> list[str]:
    """The literal parts of every f-string of ``path``: the words of a message with values in it
    (docstrings and help texts that speak of the same things are not messages)."""
    return [part.value for n in ast.walk(ast.parse(path.read_text(), str(path))) if isinstance(n, ast.JoinedStr)
            for part in n.values if isinstance(part, ast.Constant) and isinstance(part.value, str)]  # fmt: skip


def test_every_engine_runs_the_queue_through_the_one_cycle() -> None:
    """Engines and the simulator build a snapshot and act on the cycle's decisions
    (scheduler/cycle.py): none runs the pass's parts itself, which is how the same loop came to
    be written four times, one copy drifting from the others."""
    hosts = [*(PACKAGE / "engines").rglob("*.py"), *(PACKAGE / "sim").rglob("*.py")]
    direct = [f"{p.relative_to(PACKAGE)}: {sorted(names_used(p) & QUEUE_PASS)}" for p in hosts
              if names_used(p) & QUEUE_PASS]  # fmt: skip
    assert not direct, direct


def test_the_verdict_on_a_failed_run_is_worded_in_one_module() -> None:
    """Restarting, NodeCordoned and Requeued say the same on every engine: their words are
    written in jobs/failures.py and nowhere else."""
    home = PACKAGE / "jobs" / "failures.py"
    assert all(any(w in s for s in strings_in(home)) for w in VERDICT_WORDS)
    elsewhere = [f"{p.relative_to(PACKAGE)}: {w!r}" for p in sorted(PACKAGE.rglob("*.py")) if p != home
                 for w in VERDICT_WORDS if any(w in s for s in strings_in(p))]  # fmt: skip
    assert not elsewhere, elsewhere


def test_the_rule_checks_find_a_copy(tmp_path: Path) -> None:
    """The two checks above, on a module that breaks them."""
    copy = tmp_path / "m.py"
    copy.write_text("from ringleader.scheduler import queue_order\n"
                    "def f(x):\n    return f'restart {x} of 3 (--max-restarts)'\n")  # fmt: skip
    assert names_used(copy) & QUEUE_PASS == {"queue_order"}
    assert any("(--max-restarts)" in s for s in strings_in(copy))
