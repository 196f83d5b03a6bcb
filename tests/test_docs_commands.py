"""Every command block of README.md, examples/README.md and docs/*.md runs as written.

Each document starts from a fresh state: its own HOME and RINGLEADER_HOME, a scratch working
folder holding the repository's examples and benchmarks, and `ringleader`/`python` on PATH. Its
command blocks then run in order, as a reader would type them; a command fails the test when it
exits non-zero or when the output the document shows under a `$ ` prompt no longer appears
(whitespace collapsed, `...` standing for anything). What needs root, a GPU, Kubernetes or
Slurm, or runs for minutes, is skipped with its reason printed (`pytest -rs` lists them).

What counts as a command block: a fenced block tagged `bash`, `sh`, `shell` or `console`, or
untagged, whose first line is a command (`$ ` prompt, or a first word on PATH or a shell word).
Blocks tagged `text`, `yaml`, ... are illustrations and are not run; blocks tagged `python` that
use ringleader run as Python, each in a scratch folder holding the repository's examples.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = ["README.md", "examples/README.md", *sorted(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md"))]
RUN_TAGS = {"", "bash", "sh", "shell", "console"}
SHELL_WORDS = {"source", "export", "for", "while", "if", "cd", "eval", "make", "pip"}
# A command of the docs may take minutes on a 2-core machine other test files load too; the limit
# ends a hang, and the whole document gets the sum of several.
TIMEOUT_S = 600


def _cannot_emulate() -> str | None:
    """Why `cluster up` cannot run here (as tests/engines/hosts decide), None when it can."""
    if os.geteuid() != 0:
        return "needs root: network namespaces, a bridge, tc and sshd per node"
    for tool in ("ip", "tc", "ssh", "ssh-keygen", "/usr/sbin/sshd", "mpirun"):
        if shutil.which(tool) is None:
            return f"needs {tool} for the emulated cluster (make setup installs it)"
    return None


# (pattern on the command, reason): the first match skips the command.
SKIPS: list[tuple[str, str]] = [
    (r"\bkubectl\b|--engine[ =]kubernetes|\bengine use kubernetes\b|\bkube manifests\b", "needs Kubernetes"),
    (r"\bsbatch\b|\bsrun\b|--engine[ =]slurm|\bengine use slurm\b|\bslurm gres-conf\b"
     r"|^(sacctmgr|sshare|sprio|squeue)\b", "needs Slurm"),
    (r"--backend[ =]nccl|\bnvidia-smi\b", "needs a GPU"),
    (r"\bpip install\b", "needs the network (installs a package)"),
    (r"--image[ =]", "needs a container image the reader builds or pulls first (podman or docker)"),
    (r"^python3 scripts/base_image\.py\b", "needs root and debootstrap, and minutes (tests/kube/test_image.py "
                                           "builds the base with its code)"),
    (r"^podman (build|run|push)\b", "needs root, a registry or the local base, and minutes "
                                    "(tests/kube/test_image.py builds the Containerfile from the local base)"),
    (r"^make (demo|test)\b", "long: sets up and runs the demo or the whole suite"),
    (r"^make lab-", "long: a lab end to end (minutes; tests/bench/test_labs.py checks its committed output)"),
    (r"\bcluster up .*--scale 0\.04", "long: the reference scenario on the emulated cluster (make demo runs it)"),
    *([(r"\bcluster (up|down)\b", reason)] if (reason := _cannot_emulate()) else []),
    (r"--cluster examples/sim/cluster-64x8", "long: the 64-node simulation (minutes)"),
    (r"^for .*simulate", "long: a sweep of 12 simulations"),
    (r"bench train --model resnet50", "long: ResNet-50 training on CPU over MPI (the README's short line 12 s on 2 "
                                      "idle cores, over 2 min beside other load; the batch-32 line 20-25 min)"),
    (r"bench allreduce -b 8 -e 128M", "long: the full sweep to 128 MiB"),
    (r"bench pipeline", "long: three training runs over the JPEGs (80 s on 2 cores)"),
    (r"bench scaling .*--workers 1,2,4", "long: a scaling study of 6 training runs"),
]
# A skipped command that sets the context skips the rest of its block (until the pattern given).
CONTEXT = [(r"\bcluster up\b", r"\bcluster down\b"), (r"\bengine use (slurm|kubernetes)\b", None)]


@dataclass
class Command:
    """One command as typed (continuation lines joined) and the output the document shows."""

    doc: str
    line: int
    text: str
    shown: list[str] = field(default_factory=list)


def _complete(text: str) -> bool:
    return subprocess.run(["bash", "-n", "-c", text], capture_output=True).returncode == 0


def _is_command(first: str) -> bool:
    if first.startswith("$ "):
        return True
    word = first.split()[0] if first.split() else ""
    while "=" in word and re.match(r"^[A-Z_][A-Z0-9_]*=", word):  # VAR=value prefixes
        rest = first.split()
        first = " ".join(rest[1:])
        word = first.split()[0] if first.split() else ""
    return word in SHELL_WORDS or word == "ringleader" or shutil.which(word) is not None


def command_blocks(doc: str) -> list[list[Command]]:
    """The fenced command blocks of one document, each a list of commands in order."""
    lines = (REPO / doc).read_text().splitlines()
    blocks: list[list[Command]] = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^\s*```(\w*)", lines[i])
        if not fence:
            i += 1
            continue
        tag, start = fence.group(1), i + 1
        i += 1
        while i < len(lines) and not lines[i].strip().startswith("```"):
            i += 1
        body = lines[start:i]
        i += 1
        content = [s for s in body if s.strip() and not s.lstrip().startswith("#")]
        if tag in RUN_TAGS and content and _is_command(content[0].strip()):
            blocks.append(_commands(doc, start + 1, body))
    return blocks


def _commands(doc: str, first_line: int, body: list[str]) -> list[Command]:
    prompted = any(s.startswith("$ ") for s in body)
    out: list[Command] = []
    pending: Command | None = None
    for n, raw in enumerate(body, first_line):
        if pending is not None:  # a command not complete yet: continuation, loop, quote, `&`
            pending.text += "\n" + raw
            if _ready(pending.text):
                out.append(pending)
                pending = None
            continue
        if prompted and not raw.startswith("$ "):
            if out and raw.strip():
                out[-1].shown.append(raw)
            continue
        text = raw[2:] if prompted else raw
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        cmd = Command(doc, n, text)
        if _ready(text):
            out.append(cmd)
        else:
            pending = cmd
    assert pending is None, f"{doc}:{pending.line}: a command block ends inside a command"
    return out


def _ready(text: str) -> bool:
    last = re.sub(r"\s+#[^'\"]*$", "", text.rstrip())  # a trailing comment
    if last.endswith("\\") or (last.endswith("&") and not last.endswith("&&")):
        return False
    return _complete(text)


def _skip_reason(text: str) -> str | None:
    flat = " ".join(text.split())
    for pattern, reason in SKIPS:
        if re.search(pattern, flat):
            return reason
    return None


def _shown_matches(shown: list[str], output: str) -> str | None:
    """None when every shown line appears, in order, in the output; else the first missing one."""
    actual = [" ".join(s.split()) for s in output.splitlines()]
    pos = 0
    for want in shown:
        parts = [re.escape(p) for p in " ".join(want.split()).split("...")]
        pattern = re.compile(".*?".join(parts))
        while pos < len(actual) and not pattern.fullmatch(actual[pos]):
            pos += 1
        if pos == len(actual):
            return want
        pos += 1
    return None


class Reader:
    """A reader's shell: a fresh home, a scratch folder with the repository's examples."""

    def __init__(self, root: Path) -> None:
        self.cwd = root / "work"
        home = root / "home"
        for d in (self.cwd, home):
            d.mkdir(mode=0o700)
        for name in ("examples", "benchmarks", "scripts"):
            shutil.copytree(REPO / name, self.cwd / name, symlinks=True)
        (self.cwd / ".venv").symlink_to(sys.prefix)  # `source .venv/bin/activate`
        venv_bin = Path(sys.prefix) / "bin"  # python, python3 and ringleader, as `make setup` leaves them
        # No OMPI_ALLOW_RUN_AS_ROOT: a reader as root (the README's quick start) has none either.
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("RINGLEADER_", "OMPI_ALLOW_RUN_AS_ROOT"))}
        self.env.update(HOME=str(home), RINGLEADER_HOME=str(home / ".ringleader"),
                        PATH=f"{venv_bin}:{os.environ['PATH']}",
                        PYTHONPATH=str(REPO / "src"), RINGLEADER_GRACE_S="2", COLUMNS="200")  # fmt: skip
        self.env_file = root / "env"

    def delete_live_jobs(self) -> None:
        home = Path(self.env["RINGLEADER_HOME"])
        if (home / "state.db").exists():
            from ringleader.engines.embedded.engine import Runtime

            rt = Runtime.open(home)
            live = [j.name for j in rt.list_jobs() if not j.status.is_terminal()]
            if live:
                rt.delete(live)

    def run(self, text: str) -> subprocess.CompletedProcess[str]:
        """Runs one command in bash; what it exports or sources stays for the next one."""
        # set -e: in `a ; b` a failing `a` fails the line, not only a failing `b`.
        script = f"set -eo pipefail\n{text}\n__rc=$?\nwait\nenv -0 > {shlex.quote(str(self.env_file))}\nexit $__rc\n"
        proc = subprocess.run(["bash", "-c", script], cwd=self.cwd, env=self.env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=TIMEOUT_S)  # fmt: skip
        if self.env_file.exists():
            pairs = (e.split("=", 1) for e in self.env_file.read_text().split("\0") if "=" in e)
            self.env = dict(pairs)
            self.cwd = Path(self.env.get("PWD", self.cwd))
            self.env_file.unlink()
        return proc


def plan(doc: str) -> list[tuple[Command, str | None]]:
    """Every command of the document in order, with the reason it is skipped (None: it runs)."""
    steps: list[tuple[Command, str | None]] = []
    for block in command_blocks(doc):
        context: str | None = None
        until: str | None = None
        for cmd in block:
            if context is not None:
                steps.append((cmd, f"runs where {context}"))
                if until and re.search(until, cmd.text):
                    context = until = None
                continue
            reason = _skip_reason(cmd.text)
            steps.append((cmd, reason))
            for starts, ends in CONTEXT:
                if reason and re.search(starts, cmd.text):
                    context, until = f"`{' '.join(cmd.text.split()[:3])}` set up ({reason})", ends
    return steps


def _where(cmd: Command) -> str:
    return f"{cmd.doc}:{cmd.line}: {cmd.text.splitlines()[0]}"


SKIPPED = [(_where(c), r) for doc in DOCS for c, r in plan(doc) if r]


@pytest.mark.slow
@pytest.mark.timeout(3 * TIMEOUT_S)
@pytest.mark.parametrize("doc", DOCS)
def test_every_command_of_the_document_runs_as_shown(doc: str, tmp_path: Path) -> None:
    reader = Reader(tmp_path)
    try:
        for cmd, reason in plan(doc):
            if reason:
                continue
            where = _where(cmd)
            t0 = time.monotonic()
            proc = reader.run(cmd.text)
            print(f"{time.monotonic() - t0:5.1f}s  {where}")
            assert proc.returncode == 0, f"{where}\nexit {proc.returncode}\n{proc.stdout[-3000:]}"
            missing = _shown_matches(cmd.shown, proc.stdout)
            assert missing is None, f"{where}\nshown but not printed: {missing!r}\n{proc.stdout[-3000:]}"
    finally:
        reader.delete_live_jobs()


PYTHON_BLOCKS = [(doc, i, m.group(1)) for doc in DOCS
                 for i, m in enumerate(re.finditer(r"```python\n(.*?)```", (REPO / doc).read_text(), re.S))
                 if "ringleader" in m.group(1)]  # fmt: skip


@pytest.mark.parametrize(("doc", "index", "code"), PYTHON_BLOCKS, ids=[f"{d}#{i}" for d, i, _ in PYTHON_BLOCKS])
def test_python_fragment_runs_as_shown(doc: str, index: int, code: str, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A reader pastes the fragment into Python, in a folder holding the repository's examples."""
    del index
    (tmp_path / "examples").symlink_to(REPO / "examples")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, doc, "exec"), {})


@pytest.mark.parametrize(("where", "reason"), SKIPPED, ids=[w for w, _ in SKIPPED])
def test_skipped_command(where: str, reason: str) -> None:
    """One skip per command not run here, its reason printed by `pytest -rs`."""
    pytest.skip(f"{where}: {reason}")


def test_command_blocks_are_found() -> None:
    """The parser sees the commands readers see: a change here means a block went unnoticed."""
    readme = [c.text.split()[1] for b in command_blocks("README.md") for c in b if c.text.startswith("ringleader")]
    assert readme[:3] == ["cluster", "submit", "cluster"], readme
    bench = [c for b in command_blocks("docs/bench.md") for c in b]
    assert any("&\n" in c.text for c in bench), "the two background ranks run as one command"
    assert not command_blocks("docs/architecture.md"), "the folder tree is not a command"
    shown = [c for b in command_blocks("README.md") for c in b if c.shown]
    assert shown[1].shown[1].startswith("Result:"), shown
    assert _shown_matches(["Runner-up: a (objective ... kept)"], "x\nRunner-up:  a (objective 1 2 kept)") is None
    assert _shown_matches(["Result: Success"], "Result: Failure") == "Result: Success"
