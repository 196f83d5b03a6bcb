"""Bad input: one line on stderr, the state database unchanged; exit code 2 for a usage error,
1 for a runtime error (a name that does not exist, a clash with existing state), as kubectl."""

from __future__ import annotations

import os
import sqlite3
import sys

import pytest

from ringleader.cli.main import main
from ringleader.engines.embedded import store
from ringleader.engines.embedded.engine import Runtime

PY = sys.executable
MATRIX_BAD = (
    "nodes:\n  - name: m\n    emulated: true\n    matrix: |\n      \tGPU0\tGPU1\n      GPU0\tX\tNV1\n"
    "      GPU1\tPIX\tX\n"
)

CASES = {
    "invalid-name": ["submit", "mpi", "--name", "Bad_Name", "--", PY, "-c", "pass"],
    "name-too-long": ["submit", "mpi", "--name", "a" * 64, "--", PY, "-c", "pass"],
    "duplicate-name": ["submit", "mpi", "--name", "dup", "--", PY, "-c", "pass"],
    "zero-workers": ["submit", "mpi", "--name", "w0", "--workers", "0", "--", PY, "-c", "pass"],
    "negative-gpus": ["submit", "mpi", "--name", "g", "--gpus=-1", "--", PY, "-c", "pass"],
    "gpus-beyond-any-node": ["submit", "mpi", "--name", "g9", "--gpus", "9", "--", PY, "-c", "pass"],
    "never-fits": ["submit", "mpi", "--name", "g17", "--workers", "17", "--gpus", "1", "--", PY, "-c", "pass"],
    "np-disagrees": ["submit", "mpi", "--name", "np", "--workers", "2", f"mpirun -np 3 {PY} -c pass"],
    "bad-env": ["submit", "mpi", "--name", "env", "-e", "NOEQUALS", "--", PY, "-c", "pass"],
    "missing-program": ["submit", "mpi", "--name", "miss", "--", "no-such-program-xyz"],
    "mpirun-missing-program": ["submit", "mpi", "--name", "mmiss", "mpirun -np 1 no-such-program-xyz"],
    "too-many-processes": ["submit", "mpi", "--name", "huge", "--workers", "100000", "--", PY, "-c", "pass"],
    "bad-gputopology": ["submit", "mpi", "--name", "bt", "--gputopology=maybe", "--", PY, "-c", "pass"],
    "dry-run-never-fits": ["submit", "mpi", "--name", "d", "--gpus", "9", "--dry-run", "-o", "json", "--", "true"],
    "unknown-job": ["get", "no-such-job"],
    "unknown-job-logs": ["logs", "no-such-job"],
    "unknown-job-delete": ["delete", "dup", "no-such-job"],
    "unknown-node-label": ["node", "label", "nope", "gpu-schedule=topology"],
    "bad-label-value": ["node", "label", "cn-shanghai-172", "gpu-schedule=sometimes"],
    "label-without-overwrite": ["node", "label", "cn-shanghai-173", "gpu-schedule=topology"],
    "bad-label-syntax": ["node", "label", "cn-shanghai-172", "gpu-schedule"],
    "unknown-node-topo": ["topo", "nope"],
    "unknown-preset-topo": ["topo", "--presets", "nope"],
    "bad-prune-span": ["prune", "--since", "soon"],
    "missing-cluster-file": ["cluster", "apply", "-f", "/nonexistent/cluster.yaml"],
    # One word after -- is a program's name, never a shell line (it names no program here).
    "one-word-after-dashes": ["submit", "mpi", "--name", "sh1", "--", "true;touch /tmp/ringleader-never-made"],
    # A word of --mpi-args that is no mpirun option would stand where mpirun reads its program.
    "mpi-args-with-a-program": ["submit", "mpi", "--name", "hv", "--", "horovodrun", "-np", "1", "--mpi-args",
                                "--mca btl ^openib python3 other.py", PY, "-c", "pass"],
    # Numbers outside what they mean, NaN and infinity: one usage line, never a traceback or a hang.
    "refresh-nan": ["top", "node", "-r", "nan"],
    "refresh-inf": ["top", "job", "-r", "inf"],
    "instance-of-an-empty-name": ["top", "job", "", "-i", "worker-1"],  # the fuzz test's find: a traceback
    "predict-unknown-backend": ["predict", "--model", "resnet50", "--workers", "1", "--backend", "smoke"],
    "predict-huge-batch": ["predict", "--model", "resnet50", "--workers", "1", "--batch-size", str(2**62)],
    "trace-of-10^20-jobs": ["simulate", "gen-trace", "--jobs", str(10**20), "--arrival-rate", "1", "--out", "t.csv"],
    "bucket-nan": ["bench", "train", "--bucket-mb", "nan"],
    "kube-image-with-a-newline": ["kube", "manifests", "--image", "ringleader\nevil"],
    "kube-image-with-a-space": ["kube", "manifests", "--image", "ringleader evil"],
    "kube-bad-trusted-namespace": ["kube", "manifests", "--trusted-namespace", "Bad NS"],
    # ringleader's own annotations are its scheduler's decisions: a job never sets one.
    "kube-own-annotation": ["submit", "mpi", "--name", "own", "--engine", "kubernetes", "--dry-run", "-a",
                            "ringleader.io/dra-gpus=8", "--", "true"],
    "kube-own-label": ["submit", "mpi", "--name", "own", "--engine", "kubernetes", "--dry-run", "-l",
                       "gpu.ringleader.io/x=1", "--", "true"],
    "missing-working-dir": ["submit", "mpi", "--name", "wd", "--working-dir", "/nonexistent", "--", "true"],
    "working-dir-a-file": ["submit", "mpi", "--name", "wd", "--working-dir", "/etc/hostname", "--", "true"],
    "level-the-cluster-lacks": ["submit", "mpi", "--name", "lv", "--topology-required", "rack", "--", "true"],
    # Labels are Kubernetes labels on every engine: at most 63 characters, no space, newline, unicode.
    "label-value-too-long": ["node", "label", "cn-shanghai-172", "zone=" + "z" * 64],
    "label-value-with-a-space": ["node", "label", "cn-shanghai-172", "zone=a b"],
    "label-value-with-a-newline": ["node", "label", "cn-shanghai-172", "zone=a\nb"],
    "label-value-unicode": ["node", "label", "cn-shanghai-172", "zone=\u00e9t\u00e9"],
}
NODE = "nodes:\n  - name: a\n    preset: dgx1v\n    emulated: true\n"
FILES = {
    "label-with-a-semicolon": NODE + "    labels: {zone: 'a;b'}\n",
    "nvlink-domain-with-a-command": NODE + "    nvlink_domain: '$(reboot)'\n",
    "switch-with-a-command": NODE + "network:\n  switches:\n    - name: 'leaf;rm'\n      nodes: [a]\n",
    "unknown-bandwidth-matrix": NODE + "    bandwidth: [[0, 1], [1, 0]]\n    bandwidth_matrix: sideways\n",
    "unknown-preset": "nodes:\n  - name: a\n    preset: dgx9000\n    emulated: true\n",
    "malformed-yaml": "nodes:\n  - name: a\n    preset: [dgx1v\n",
    "malformed-matrix": MATRIX_BAD,
    "bad-node-name": "nodes:\n  - name: Node_A\n    preset: dgx1v\n    emulated: true\n",
    "real-remote-node": "nodes:\n  - name: far\n    preset: dgx1v\n",
    "no-nodes": "cluster: {}\n",
    "node-over-gpu-limit": "nodes:\n  - name: a\n    emulated: true\n    matrix: "
    + str([["X" if i == j else "NV18" for j in range(65)] for i in range(65)]).replace("'", "")
    + "\n",
}


def _prepare(cli) -> None:
    cli.ok("node", "label", "cn-shanghai-173", "gpu-schedule=default")
    cli.ok("submit", "mpi", "--name", "dup", "--", PY, "-c", "pass")
    assert Runtime.open(cli.home).wait("dup", 60).status.value == "SUCCEEDED"


# These also run as separate `ringleader` processes; the rest call the same entry point in-process.
IN_SUBPROCESS = {"invalid-name", "duplicate-name", "np-disagrees", "malformed-yaml", "unknown-job"}
# Runtime errors, exit 1 as kubectl's NotFound and AlreadyExists; every other case is a usage error.
RUNTIME = {"duplicate-name", "unknown-job", "unknown-job-logs", "unknown-job-delete", "unknown-node-label",
           "label-without-overwrite", "unknown-node-topo"}  # fmt: skip


def _check_refused(cli, args: list[str], capsys, separate: bool, expected: int = 2) -> None:
    before = cli.dump()
    if separate:
        out = cli(*args)
        code, stderr = out.returncode, out.stderr
    else:
        capsys.readouterr()
        code = main(args)
        stderr = capsys.readouterr().err
    assert code == expected, f"{args}: rc={code}\n{stderr}"
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(("error:", "Error:")), stderr
    assert cli.dump() == before


def test_bad_input_is_refused_with_one_line_and_nothing_written(seeds_cli, write, capsys, monkeypatch) -> None:
    _prepare(seeds_cli)
    monkeypatch.setenv("RINGLEADER_HOME", str(seeds_cli.home))
    monkeypatch.chdir(seeds_cli.home)
    for name, args in CASES.items():
        _check_refused(seeds_cli, args, capsys, name in IN_SUBPROCESS, 1 if name in RUNTIME else 2)
    for name, text in FILES.items():
        args = ["cluster", "apply", "-f", str(write(f"{name}.yaml", text))]
        _check_refused(seeds_cli, args, capsys, name in IN_SUBPROCESS)


@pytest.mark.parametrize("newer", [True, False])
def test_unusable_state_database_gives_one_line_naming_the_file(cli, newer: bool) -> None:
    db = cli.home / "state.db"
    if newer:
        cli.ok("node", "label", "local", "team=a")  # creates the database
        conn = sqlite3.connect(db)
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(store.SCHEMA_VERSION + 1),))
        conn.commit()
        conn.close()
    else:
        cli.home.mkdir(parents=True)
        db.write_bytes(b"garbage" * 1000)
    before = db.read_bytes()
    out = cli("list")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and str(db) in lines[0] and "To fix:" in lines[0]
    assert db.read_bytes() == before
    if newer:  # let the fixture's cleanup open it
        conn = sqlite3.connect(db)
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(store.SCHEMA_VERSION),))
        conn.commit()
        conn.close()
    else:
        db.unlink()


def test_process_limit_names_itself_and_its_override(cli, capsys, monkeypatch) -> None:
    monkeypatch.setenv("RINGLEADER_HOME", str(cli.home))
    monkeypatch.setenv("RINGLEADER_MAX_PROCS", "2")
    capsys.readouterr()
    assert main(["submit", "mpi", "--name", "three", "--workers", "3", "--", PY, "-c", "pass"]) == 2
    err = capsys.readouterr().err
    assert "limit of 2" in err and "RINGLEADER_MAX_PROCS" in err and len(err.splitlines()) == 1
    # mpirun's own process counts too
    assert main(["submit", "mpi", "--name", "two", "--workers", "2", f"mpirun -np 2 {PY} -c pass"]) == 2
    assert not (cli.home / "state.db").exists()


@pytest.mark.parametrize("kind", ["file", "read-only"])
def test_unusable_home_is_one_line_not_a_traceback(cli, kind: str, tmp_path) -> None:
    if kind == "file":
        cli.home.write_text("not a folder")
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes anywhere")
        cli.home.mkdir()
        cli.home.chmod(0o500)
    try:
        out = cli("submit", "mpi", "--name", "x", "--", PY, "-c", "pass")
    finally:
        if kind != "file":
            cli.home.chmod(0o700)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "RINGLEADER_HOME" in lines[0], out.stderr
    if kind == "file":
        cli.home.unlink()


def test_bad_input_on_a_fresh_home_creates_no_database(cli, write, capsys, monkeypatch) -> None:
    monkeypatch.setenv("RINGLEADER_HOME", str(cli.home))
    bad_file = write("bad.yaml", "nodes:\n  - name: far\n    preset: dgx1v\n")
    for args in (
        ["submit", "mpi", "--name", "g", "--gpus", "99", "--", PY, "-c", "pass"],
        ["node", "label", "nope", "gpu-schedule=topology"],
        ["node", "label", "local", "gpu-schedule=sometimes"],
        ["cluster", "apply", "-f", str(bad_file)],
        ["delete", "nothing"],
    ):
        assert main(args) == (1 if args[0] == "delete" or args[2] == "nope" else 2), args
        assert not (cli.home / "state.db").exists(), args
    capsys.readouterr()


HVD = "horovodrun -np 1 {} python -c pass"
SUBMIT_CHECKS = [
    (["--", "/usr"], "program '/usr' is a folder, not a program"),
    (["--", "{plain}"], "program '{plain}' is not executable. To fix: chmod +x"),
    (["--image", "", "--", "true"], "--image '' is not an image reference"),
    (["--image", "Python:3.11", "--", "true"], "--image 'Python:3.11' is not an image reference"),
    (["--image", "python:", "--", "true"], "is not an image reference"),
    (["--image", "python@sha256:abc", "--", "true"], "is not an image reference"),
    (["--image", "a//b", "--", "true"], "is not an image reference"),
    (["--image", "x" * 300, "--", "true"], "is not an image reference"),
    (["-d", "data", "--image", "x", "--", "true"], "--data 'data' is not SRC:DST"),
    (["--data", "/srv:rel", "--image", "x", "--", "true"], "--data '/srv:rel' is not SRC:DST"),
    (["--shm-size", "lots", "--image", "x", "--", "true"], "--shm-size 'lots' is not a size"),
    (["--shm-size", "0", "--image", "x", "--", "true"], "--shm-size '0' is not a size"),
    (["--container-user", "alice", "--image", "x", "--", "true"], "--container-user 'alice' is not UID[:GID]"),
    (["--image-pull-policy", "Sometimes", "--image", "x", "--", "true"], "--image-pull-policy"),
    ([HVD.format("--fusion-threshold-mb -1")], "horovodrun --fusion-threshold-mb -1: must be >= 0"),
    ([HVD.format("--fusion-threshold-mb 1.5")], "horovodrun --fusion-threshold-mb 1.5: not a whole number"),
    ([HVD.format("--cycle-time-ms inf")], "horovodrun --cycle-time-ms inf: must be a finite number"),
    ([HVD.format("--cycle-time-ms nan")], "horovodrun --cycle-time-ms nan: must be a finite number"),
    ([HVD.format("--cycle-time-ms -2")], "horovodrun --cycle-time-ms -2: must be >= 0"),
    ([HVD.format("--cache-capacity x")], "horovodrun --cache-capacity x: not a whole number"),
    ([HVD.format("--autotune-gaussian-process-noise 1.5")], "must be in [0, 1]"),
    ([HVD.format("--log-level LOUD")], "horovodrun --log-level LOUD: must be one of TRACE, DEBUG"),
]


@pytest.mark.parametrize(("args", "expected"), SUBMIT_CHECKS, ids=[e[:40] for _, e in SUBMIT_CHECKS])
def test_submit_refuses_what_exec_a_registry_or_horovodrun_would_refuse(
    cli, capsys, monkeypatch, tmp_path, args: list[str], expected: str
) -> None:
    monkeypatch.setenv("RINGLEADER_HOME", str(cli.home))
    plain = tmp_path / "train.sh"  # a script without its execute bits
    plain.write_text("echo hi\n")
    plain.chmod(0o644)
    args, expected = [a.replace("{plain}", str(plain)) for a in args], expected.replace("{plain}", str(plain))
    capsys.readouterr()
    code = main(["submit", "mpi", "--name", "checked", *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("error: ") and expected in err, err
    assert not (cli.home / "state.db").exists()


@pytest.mark.parametrize("image", ["python:3.11", "docker.io/library/python:3.11-slim", "localhost:5000/my/img",
                                   "nvcr.io/nvidia/pytorch:24.01-py3", "ghcr.io/org/a__b.c-d", "[::1]:5000/x:y",
                                   "img@sha256:" + "a" * 64, "Registry.Example.com/team/img:V1"])  # fmt: skip
def test_image_references_the_grammar_takes(image: str) -> None:
    from ringleader.jobs.spec import check_image_reference

    check_image_reference(image)


DAMAGE = [("created_at", 1e308), ("started_at", -5.0), ("placement", '{"nodes": 5}'), ("priority", 2**63 - 1),
          ("spec", "[]")]  # fmt: skip


@pytest.mark.parametrize(("column", "value"), DAMAGE)
def test_a_damaged_row_is_one_line_or_shown_never_a_traceback(cli, column: str, value: object) -> None:
    cli.ok("submit", "mpi", "--name", "hurt", "--", PY, "-c", "pass")
    Runtime.open(cli.home).wait("hurt", 60)
    conn = sqlite3.connect(cli.home / "state.db")
    conn.execute(f"UPDATE jobs SET {column} = ? WHERE name = 'hurt'", (value,))
    conn.commit()
    conn.close()
    for args in (["list"], ["get", "hurt"], ["get", "hurt", "-e"], ["list", "-o", "json"]):
        out = cli(*args)
        assert "Traceback" not in out.stderr, out.stderr
        if out.returncode != 0:
            lines = out.stderr.strip().splitlines()
            assert out.returncode == 2 and len(lines) == 1 and "is damaged" in lines[0] and "To fix:" in lines[0], out
    conn = sqlite3.connect(cli.home / "state.db")  # the repair the line names, for the fixture's cleanup
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("DELETE FROM jobs WHERE name = 'hurt'")
    conn.commit()
    conn.close()


def test_a_command_with_stdout_closed_is_one_line(cli) -> None:
    import subprocess

    out = subprocess.run([*cli.argv("list")], env=cli.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: os.close(1))  # fmt: skip
    assert out.returncode == 1 and out.stderr == "error: standard output is closed. To fix: run it with stdout open " \
        "(a terminal, a file, a pipe)\n"
