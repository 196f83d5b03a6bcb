"""The conventions kubectl and arena users rely on: RFC 3339 times in JSON/YAML, exit 1 for
runtime errors and 2 for usage errors, one-line errors for every click usage error, `-o wide`
on list commands, AGE as the time since creation, tables that fold rather than cut."""

from __future__ import annotations

import json
import re
import sys
import time
from datetime import datetime

import click
import pytest
import yaml

from clijobs import wait_for
from ringleader.cli.main import COMMANDS, main
from ringleader.cli.main import cli as root

PY = sys.executable
# RFC 3339 section 5.6 date-time, as kubectl prints it (UTC, "Z"), fractions allowed.
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def _times(value, path=""):
    """Every (path, value) whose key ends in _at or is "at", anywhere in a JSON document."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "at" or k.endswith("_at"):
                yield f"{path}.{k}", v
            yield from _times(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _times(v, f"{path}[{i}]")


def _wait_done(cli, name: str) -> dict:
    return wait_for(cli, name, "SUCCEEDED", "FAILED")


def test_times_are_rfc3339_and_age_counts_from_creation(seeds_cli) -> None:
    seeds_cli.ok("submit", "mpi", "--name", "quick", "--workers", "2", "--gpus", "1", "--", PY, "-c", "pass")
    job = _wait_done(seeds_cli, "quick")
    documents = [job, json.loads(seeds_cli.ok("list", "-o", "json")),
                 yaml.safe_load(seeds_cli.ok("get", "quick", "-o", "yaml")),
                 json.loads(seeds_cli.ok("top", "job", "-o", "json"))]  # fmt: skip
    for doc in documents:
        found = dict(_times(doc))
        assert {k for k in found if k.endswith(("created_at", "started_at", "ended_at"))}, found
        for where, value in found.items():
            assert isinstance(value, str) and RFC3339.match(value), (where, value)
            assert datetime.fromisoformat(value).tzinfo is not None
    created = datetime.fromisoformat(job["created_at"]).timestamp()
    assert abs(created - time.time()) < 120  # UTC, not local time mislabelled
    time.sleep(2.2)
    # AGE (top job) is the time since creation; DURATION (list) the run's own length.
    top = seeds_cli.ok("top", "job").splitlines()
    age = top[1].split()[top[0].split().index("AGE")]
    lst = seeds_cli.ok("list").splitlines()
    dur = lst[1].split()[lst[0].split().index("DURATION")]
    assert int(age.rstrip("s")) >= 2 and int(dur.rstrip("s")) < int(age.rstrip("s")), (age, dur)


def test_list_and_top_job_show_gpu_allocated_and_wide_columns(seeds_cli) -> None:
    seeds_cli.ok("submit", "mpi", "--name", "hold", "--workers", "2", "--gpus", "2", "--gputopology=true",
                 "--", PY, "-c", "import time; time.sleep(30)")  # fmt: skip
    table = seeds_cli.ok("list").splitlines()
    assert table[0].split() == ["NAME", "STATUS", "TRAINER", "DURATION", "GPU(Requested)", "GPU(Allocated)", "NODE",
                                "QUEUE", "REASON"]  # arena's columns, then squeue's two
    row = table[1].split()
    assert row[0] == "hold" and row[4] == "4" and row[5] == ("4" if row[1] == "RUNNING" else "0")
    wide = seeds_cli.ok("list", "-o", "wide").splitlines()
    assert wide[0].split()[-6:] == ["PRIORITY", "AGE", "GPU_IDS", "BOTTLENECK", "RESTARTS", "PREEMPTION"]
    assert re.search(r"\S+:\d+,\d+", wide[1]), wide[1]  # node:gpu ids of the placement
    top = seeds_cli.ok("top", "job", "-o", "wide").splitlines()
    assert top[0].split()[:4] == ["NAME", "STATUS", "TRAINER", "AGE"] and "GPU_IDS" in top[0]
    seeds_cli.ok("delete", "hold")


def test_not_found_is_a_runtime_error_and_bad_usage_exit_2(cli) -> None:
    missing = cli("get", "no-such-job")
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1, missing.stderr
    assert missing.stderr.startswith("error: job 'no-such-job' not found. To fix:")
    bad = cli("get", "a", "-o", "xml")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr


def _commands(group: click.Group, path: tuple[str, ...] = ()):
    for name, cmd in sorted(group.commands.items()):
        yield (*path, name), cmd
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, (*path, name))


def _every_command() -> list[tuple[tuple[str, ...], click.Command]]:
    """Every command and subcommand, each command module loaded as its commands are looked up."""
    ctx = click.Context(root)
    for name in COMMANDS:
        root.get_command(ctx, name)
    return list(_commands(root))


ALL = _every_command()


@pytest.mark.parametrize("path", [p for p, _ in ALL], ids=" ".join)
def test_every_click_usage_error_is_one_line(path: tuple[str, ...], tmp_path, monkeypatch, capsys) -> None:
    """An unknown option, a missing argument or required option, a bad choice or number: one
    line naming the problem and the command's --help, exit 2, for every command."""
    monkeypatch.setenv("RINGLEADER_HOME", str(tmp_path / "home"))
    cmd = dict(ALL)[path]
    cases = [[*path, "--no-such-option"]]
    if any(p.required for p in cmd.params):
        cases.append(list(path))  # a missing argument or option
    for p in cmd.params:
        if isinstance(p, click.Option) and isinstance(p.type, click.Choice):
            cases.append([*path, p.opts[0], "no-such-choice"])
        elif isinstance(p, click.Option) and isinstance(p.type, click.types.IntParamType) and not p.is_flag:
            cases.append([*path, p.opts[0], "not-a-number"])
    for argv in cases:
        capsys.readouterr()
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2, (argv, code, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (argv, err)
        assert "To fix: see `ringleader " in lines[0] and "--help`" in lines[0], (argv, err)
    assert not (tmp_path / "home").exists()  # a refused command wrote nothing


def test_unknown_command_and_bare_group(capsys) -> None:
    assert main(["no-such-command"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No such command 'no-such-command'" in err and "`ringleader --help`" in err
    assert main(["top"]) == 0  # a group alone prints its help, as kubectl's do
    assert "Commands:" in capsys.readouterr().out


def on_a_terminal(monkeypatch, columns: int) -> None:
    import sys

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setenv("TERM", "xterm")  # not "dumb": rich takes a dumb terminal as 80 wide
    monkeypatch.setenv("COLUMNS", str(columns))


def plain(out: str) -> str:
    """What the terminal shows: the text without its bold codes."""
    return re.sub(r"\x1b\[[0-9;]*m", "", out)


def test_tables_fold_long_cells_instead_of_cutting_them(monkeypatch, capsys) -> None:
    from ringleader.cli.output import console, table

    on_a_terminal(monkeypatch, 80)
    long = "a-very-long-placement-description-" * 4
    headers = ["NAME", "BACKEND", "AVG THROUGHPUT (IMAGES/S)", "PLACEMENT"]
    console().print(table(headers, [["x", "gloo", "1234.5", long]]))
    out = plain(capsys.readouterr().out)
    assert "…" not in out and all(len(line) <= 80 for line in out.splitlines())
    assert long in "".join(line.strip().split()[-1] for line in out.splitlines()[1:])
    assert "1234.5" in out and "gloo" in out


def test_narrow_tables_keep_short_columns_whole_and_wrap_long_ones(monkeypatch, capsys) -> None:
    from ringleader.cli.output import console, table

    on_a_terminal(monkeypatch, 60)
    rows = [["vgg", "SUCCEEDED", "4", "cn-shanghai-172[2w: GPU 1,2] + cn-shanghai-173[2w: GPU 0,3]"]]
    console().print(table(["NAME", "STATUS", "GPUS", "PLACEMENT"], rows))
    lines = plain(capsys.readouterr().out).splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "GPUS", "PLACEMENT"]
    assert lines[1].split()[:3] == ["vgg", "SUCCEEDED", "4"] and all(len(ln) <= 60 for ln in lines)
    placement = " ".join(ln[lines[0].index("PLACEMENT"):].strip() for ln in lines[1:])
    assert placement == rows[0][3]  # wrapped at spaces, nothing lost


def test_piped_tables_never_wrap_whatever_their_width(monkeypatch, capsys) -> None:
    """grep and awk read one row per line: `-o wide` piped once folded `cn-shanghai-17⏎2`."""
    from ringleader.cli.output import console, table

    monkeypatch.setenv("COLUMNS", "40")
    rows = [["vgg", "RUNNING", "cn-shanghai-172[2w: GPU 1,2] + cn-shanghai-173[2w: GPU 0,3]", "NV1 25 GB/s"]]
    console().print(table(["NAME", "STATUS", "PLACEMENT", "BOTTLENECK"], rows))
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[1].split()[:2] == ["vgg", "RUNNING"] and rows[0][2] in lines[1]


def test_dry_run_says_whether_the_runner_up_tied_or_what_it_lost_on(seeds_cli) -> None:
    dry = ["submit", "mpi", "--name", "t", "--workers", "2", "--gpus", "1", "--gputopology", "--dry-run", "--", "true"]
    runner = next(ln for ln in seeds_cli.ok(*dry).splitlines() if ln.startswith("Runner-up:"))
    assert runner.endswith("(tied on every objective term; the first in node order was kept)"), runner
    seeds_cli.ok("submit", "mpi", "--name", "hold", "--workers", "1", "--gpus", "1", "--",
                 PY, "-c", "import time; time.sleep(30)")  # fmt: skip
    runner = next(ln for ln in seeds_cli.ok(*dry).splitlines() if ln.startswith("Runner-up:"))
    assert re.search(r"\(lost on \S+: \S+ vs \S+; objective ", runner), runner
    seeds_cli.ok("delete", "hold")
