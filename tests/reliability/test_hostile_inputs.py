"""Hostile input files and arguments, through the real command in a process whose address space
is capped (RLIMIT_AS): each is refused in one line (exit 2), never a traceback, a hang or a
memory blow-up. Also the fuzzing of every input file's schema (hypothesis)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
CLUSTER = str(REPO / "examples" / "sim" / "cluster-2x8-v100.yaml")
TRACE = str(REPO / "examples" / "sim" / "trace-2x8-v100.csv")
MEMORY_CAP = 1 << 30  # the interpreter, click, pydantic and yaml fit well within 1 GiB
HEADER = "name,arrival_s,workers,gpus,model,batch_size,iterations,priority\n"
# More examples for a longer fuzzing run: RINGLEADER_FUZZ_EXAMPLES=2000 (docs/runtime.md).
FUZZ_EXAMPLES = int(os.environ.get("RINGLEADER_FUZZ_EXAMPLES", "0"))


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RINGLEADER_HOME": str(home)}
    env.pop("RINGLEADER_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "ringleader.cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=120, preexec_fn=_cap_memory, cwd=REPO)  # fmt: skip


def refused(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr[-2000:]
    return done.stderr


LAUGHS = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9) if prev else ', '.join(['lol'] * 9)}]\n"
    for prev, name in zip(["", "a", "b", "c", "d", "e", "f", "g"], "abcdefgh", strict=True)
) + "nodes:\n  - name: n\n    preset: dgx1v\n    emulated: true\n    gpu_model: *h\n"  # fmt: skip


def test_billion_laughs_cluster_file_is_refused_within_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "laughs.yaml"
    path.write_text(LAUGHS)
    assert len(LAUGHS) < 600
    err = refused(run(tmp_path / "home", "cluster", "apply", "-f", str(path)))
    assert str(path) in err and "line 2: YAML aliases" in err
    assert not (tmp_path / "home").exists()


DEEP_YAML = "nodes: " + "[" * 100_000 + "]" * 100_000 + "\n"
DEEP_JSON = '{"kind": "calibration", "links": ' + "[" * 100_000 + "]" * 100_000 + "}"
BIG_INT_YAML = "nodes:\n  - name: n\n    preset: dgx1v\n    emulated: true\n    count: " + "9" * 5000 + "\n"
BIG_INT_JSON = '{"kind": "calibration", "version": ' + "9" * 5000 + "}"
PREDICT = ["predict", "--model", "vgg16", "--workers", "2"]


@pytest.mark.parametrize(
    ("args", "content", "expected"),
    [
        (["cluster", "apply", "-f", "{f}"], DEEP_YAML, "line 1: nested deeper than 32 levels"),
        ([*PREDICT, "--cluster", "{f}"], DEEP_YAML, "line 1: nested deeper than 32 levels"),
        (["simulate", "--cluster", "{f}", "--trace", TRACE], DEEP_YAML, "nested deeper than 32 levels"),
        (["calibrate", "{f}"], DEEP_JSON, "nested deeper than 32 levels"),
        ([*PREDICT, "--calibration", "{f}"], DEEP_JSON, "nested deeper than 32 levels"),
        (["cluster", "apply", "-f", "{f}"], BIG_INT_YAML, "line 5: nodes[0].count: integer of more than 18 digits"),
        ([*PREDICT, "--cluster", "{f}"], BIG_INT_YAML, "integer of more than 18 digits"),
        (["simulate", "--cluster", "{f}", "--trace", TRACE], BIG_INT_YAML, "integer of more than 18 digits"),
        (["calibrate", "{f}"], BIG_INT_JSON, "line 1: integer of more than 18 digits"),
        ([*PREDICT, "--calibration", "{f}"], BIG_INT_JSON, "line 1: integer of more than 18 digits"),
        ([*PREDICT, "--calibration", "{f}"], '{"kind": "calibration", "overlap": NaN}', "NaN is not a JSON number"),
        ([*PREDICT, "--calibration", "{f}"], '{"kind": "calibration",\n"links": {},\n"links": {}}',
         "line 3: key 'links' given twice"),
        ([*PREDICT, "--calibration", "{f}"], '{"kind": "calibration", "link": {}}',
         "unknown key 'link' at the top level (did you mean 'links'?)"),
        (["simulate", "--cluster", CLUSTER, "--trace", "{f}"], HEADER + "j,0," + "1" * 400 + ",1,vgg16,64,100,0\n",
         "line 2: workers=1111"),
        (["simulate", "--cluster", CLUSTER, "--trace", "{f}"], HEADER + "j," + "1" * 400 + ",1,1,vgg16,64,100,0\n",
         "line 2: arrival_s=1111"),
        (["simulate", "--cluster", CLUSTER, "--trace", "{f}"], HEADER + "j,0,1,1," + "x" * 200_000 + ",64,1,0\n",
         "line 2: not CSV (field larger than field limit"),
    ],
)  # fmt: skip
def test_deep_or_huge_values_in_every_input_file_are_one_line(
    tmp_path: Path, args: list[str], content: str, expected: str
) -> None:
    path = tmp_path / "input"
    path.write_text(content)
    err = refused(run(tmp_path / "home", *[a.replace("{f}", str(path)) for a in args]))
    assert str(path) in err and expected in err, err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([*PREDICT, "--gpus", "-3"], "Invalid value for '--gpus': -3 is not in the range 1<=x<=1024"),
        ([*PREDICT, "--batch-size", "0"], "'--batch-size'"),
        ([*PREDICT, "--data-rate", "nan"], "'--data-rate': 'nan' is not a finite number > 0"),
        ([*PREDICT, "--overlap", "inf"], "'--overlap': 'inf' is not a finite number >= 0 and <= 1"),
        (["predict", "--model", "resnet5O", "--workers", "2"], "unknown model 'resnet5O' (did you mean 'resnet50'?)"),
        (["bench", "train", "--model", "resnet5O"], "unknown model 'resnet5O' (did you mean 'resnet50'?)"),
        (["bench", "allreduce", "--collective", "broadcast", "--root", "99", "-np", "2"],
         "root 99 is not a rank of 2. To fix: pass a root in 0..1"),
    ],
)  # fmt: skip
def test_bad_arguments_are_one_usage_error(tmp_path: Path, args: list[str], expected: str) -> None:
    done = run(tmp_path / "home", *args)
    assert expected in refused(done)
    assert done.stdout == ""  # nothing measured or printed before the refusal


# -- fuzzing ------------------------------------------------------------------------------------
# The files are generated from each schema's own keys with values of every YAML/JSON type, in
# process (each example costs microseconds), and a sample of them through the capped command.

scalars = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70), st.floats(), st.text(max_size=8), st.booleans(), st.none(),
    st.sampled_from(["2001-12-14", "0x1f", "1e300", ".nan", "-.inf", "dgx1v", "X", "NV1", "a", "*x", "&x y",
                     "!!binary x"]),
)  # fmt: skip
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                           max_size=3), max_leaves=8)
NODE_KEYS = ["name", "preset", "matrix", "matrix_file", "bandwidth", "bandwidth_file", "bandwidth_matrix",
             "nvlink_domain", "network_gbps", "emulated", "labels", "count", "gpu_model", "address", "user", "port",
             "identity_file", "bogus"]  # fmt: skip
CAL_KEYS = ["kind", "version", "sources", "links", "compute", "overlap", "sync", "checks", "rows", "bogus"]


def _yaml_text(doc: object) -> str:
    """``doc`` as YAML flow text, with scalars written unquoted half the time (as people do), so
    YAML's own typing (dates, octal, .nan) and its syntax (*alias, &anchor, !tag) get exercised."""
    if isinstance(doc, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_yaml_text(v)}" for k, v in doc.items()) + "}"
    if isinstance(doc, list):
        return "[" + ", ".join(_yaml_text(v) for v in doc) + "]"
    if isinstance(doc, str) and doc and len(doc) % 2 and all(c.isprintable() and c not in ",[]{}#:'\"" for c in doc):
        return doc
    return json.dumps(doc)


def check_one_line(exc: Exception) -> None:
    from ringleader.errors import RingleaderError

    assert isinstance(exc, RingleaderError), repr(exc)
    assert "\n" not in exc.one_line() and exc.exit_code == 2, exc.one_line()


@settings(max_examples=FUZZ_EXAMPLES or 300, deadline=None)
@given(st.dictionaries(st.sampled_from(["nodes", "bogus"]), st.lists(
    st.fixed_dictionaries({"name": st.sampled_from(["a", "b", 7])}, optional={"preset": st.just("dgx1v")})
    .flatmap(lambda base: st.dictionaries(st.sampled_from(NODE_KEYS), values, max_size=4).map(lambda d: {**base, **d})),
    max_size=3), max_size=2))  # fmt: skip
def test_cluster_files_load_or_give_one_line(doc: dict[str, object]) -> None:
    from ringleader.topology import load_cluster_text

    try:
        load_cluster_text(_yaml_text(doc), REPO, origin="fuzz.yaml")
    except Exception as exc:
        check_one_line(exc)


@settings(max_examples=FUZZ_EXAMPLES or 300, deadline=None)
@given(st.fixed_dictionaries({"kind": st.just("calibration")}, optional={k: values for k in CAL_KEYS[1:]}),
       st.dictionaries(st.sampled_from(["gbs", "latency_us", "points", "rel_rmse", "x"]), scalars, max_size=4))
def test_calibration_files_load_or_give_one_line(doc: dict[str, object], link: dict[str, object]) -> None:
    from ringleader.inputs import load_json
    from ringleader.model.calibration import calibration_from_dict

    doc = {**doc, "links": {"network": link}} if "links" not in doc else doc
    try:
        calibration_from_dict(load_json(json.dumps(doc), "fuzz.json", "fix"), "fuzz.json")
    except Exception as exc:
        check_one_line(exc)


cells = st.one_of(st.sampled_from(["0", "1", "-1", "1.5", "nan", "inf", "1e400", "9" * 400, "", "vgg16", "j1", "1_0"]),
                  st.text(max_size=6))  # fmt: skip


@settings(max_examples=FUZZ_EXAMPLES or 300, deadline=None)
@given(st.lists(st.lists(cells, min_size=7, max_size=9), min_size=1, max_size=3))
def test_traces_load_or_give_one_line(rows: list[list[str]]) -> None:
    import csv
    import io

    from ringleader.sim.trace import parse_trace

    out = io.StringIO()
    csv.writer(out).writerows(rows)
    try:
        parse_trace(HEADER + out.getvalue(), origin="fuzz.csv")
    except Exception as exc:
        check_one_line(exc)


@settings(max_examples=FUZZ_EXAMPLES // 20 or 12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(st.sampled_from(["cluster", "calibration", "trace"]), st.binary(max_size=64), st.data())
def test_mangled_files_through_the_capped_command(tmp_path: Path, kind: str, noise: bytes, data: st.DataObject) -> None:
    """Real files with bytes spliced in, through the whole command under the memory cap: exit
    0, 1 or 2, never a traceback, at most one line on stderr for a refusal."""
    calibration = {"kind": "calibration", "links": {"network": {"gbs": 3.1, "latency_us": 30}}}
    raw = {"cluster": (REPO / "examples" / "seeds-cluster.yaml").read_bytes(), "trace": Path(TRACE).read_bytes(),
           "calibration": json.dumps(calibration).encode()}[kind]  # fmt: skip
    cut = data.draw(st.integers(0, len(raw)))
    path = tmp_path / f"input-{kind}"
    path.write_bytes(raw[:cut] + noise + raw[cut:])
    args = {"cluster": ["cluster", "apply", "-f", str(path)],
            "trace": ["simulate", "--cluster", CLUSTER, "--trace", str(path), "--policies", "topology"],
            "calibration": [*PREDICT, "--calibration", str(path)]}[kind]  # fmt: skip
    done = run(tmp_path / "home", *args)
    assert done.returncode in (0, 1, 2), done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    if done.returncode:
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr[-2000:]
