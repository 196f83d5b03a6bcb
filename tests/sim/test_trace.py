"""Trace CSV parsing (errors name the line) and the seeded generator."""

from __future__ import annotations

import itertools

import pytest

from ringleader.errors import UsageError
from ringleader.sim import format_trace, generate_trace, load_trace, parse_trace

HEADER = "name,arrival_s,workers,gpus,model,batch_size,iterations,priority\n"


def test_parse_good_trace_with_comments_and_optional_priority() -> None:
    text = (
        "# a comment\nname,arrival_s,workers,gpus,model,batch_size,iterations\n"
        "j1,0,4,1,vgg16,64,100\n\nj2,5.5,1,2,resnet50,32,10\n"
    )
    jobs = parse_trace(text)
    assert [(j.name, j.arrival_s, j.workers, j.gpus, j.priority, j.total_gpus) for j in jobs] == [
        ("j1", 0.0, 4, 1, 0, 4),
        ("j2", 5.5, 1, 2, 0, 2),
    ]


def test_a_trace_may_say_how_many_micro_batches_a_step_sums() -> None:
    text = "name,arrival_s,workers,gpus,model,batch_size,iterations,accumulation_steps\nj1,0,4,1,bertlarge,8,100,16\n"
    (summed,) = parse_trace(text)
    assert summed.accumulation == 16
    assert parse_trace(format_trace([summed])) == [summed]
    (plain,) = parse_trace("name,arrival_s,workers,gpus,model,batch_size,iterations\nj1,0,4,1,vgg16,64,100\n")
    assert plain.accumulation == 1 and "accumulation_steps" not in format_trace([plain])
    with pytest.raises(UsageError, match="line 2: accumulation_steps=0 must be >= 1"):
        parse_trace(text.replace(",16\n", ",0\n"))


def test_a_trace_may_say_the_precision_each_job_trains_in() -> None:
    text = "name,arrival_s,workers,gpus,model,batch_size,iterations,precision\nj1,0,4,1,resnet50,64,100,amp\n"
    (mixed,) = parse_trace(text)
    assert mixed.precision == "fp16"  # the model's name for it
    assert parse_trace(format_trace([mixed])) == [mixed]
    (plain,) = parse_trace(text.replace(",amp\n", ",\n"))
    assert plain.precision == "fp32" and "precision" not in format_trace([plain])
    with pytest.raises(UsageError, match="line 2: unknown precision 'fp8'"):
        parse_trace(text.replace(",amp\n", ",fp8\n"))


@pytest.mark.parametrize(
    ("body", "line", "words"),
    [
        ("j1,0,4,1,vgg16,64,100,0\nj2,x,1,1,vgg16,64,100,0\n", 3, "arrival_s='x'"),
        ("j1,0,4,1,vgg16,64\n", 2, "6 fields, expected 8"),
        ("j1,0,0,1,vgg16,64,100,0\n", 2, "workers=0 must be >= 1"),
        ("j1,0,1,1.5,vgg16,64,100,0\n", 2, "gpus='1.5' is not an integer"),
        ("j1,0,1,1,vgg16,64,100,0\nj1,3,1,1,vgg16,64,100,0\n", 3, "already used on line 2"),
        ("Bad_Name,0,1,1,vgg16,64,100,0\n", 2, "invalid job name"),
        ("j1,-1,1,1,vgg16,64,100,0\n", 2, "arrival_s=-1 must be >= 0"),
        ("j1,0,1,1,vgg16,64,100,high\n", 2, "priority='high'"),
    ],
)
def test_malformed_rows_name_their_line(body: str, line: int, words: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_trace(HEADER + body, origin="t.csv")
    assert info.value.message.startswith(f"t.csv line {line}: ")
    assert words in info.value.message
    assert "\n" not in info.value.one_line()
    assert info.value.exit_code == 2


def test_bad_header_and_empty() -> None:
    with pytest.raises(UsageError, match="line 1: bad header"):
        parse_trace("name,arrival,workers\n", origin="t.csv")
    with pytest.raises(UsageError, match="empty trace"):
        parse_trace("\n# nothing\n")


def test_generator_is_deterministic_and_round_trips(tmp_path) -> None:
    a = generate_trace(300, seed=7, arrival_rate_per_h=10.0)
    b = generate_trace(300, seed=7, arrival_rate_per_h=10.0)
    c = generate_trace(300, seed=8, arrival_rate_per_h=10.0)
    assert a == b
    assert a != c
    path = tmp_path / "t.csv"
    path.write_text(format_trace(a))
    assert load_trace(path) == a
    assert all(x.arrival_s <= y.arrival_s for x, y in itertools.pairwise(a))
    assert {j.total_gpus for j in a} == {1, 2, 4, 8, 16}
    # Poisson: the mean gap is close to 1/rate (360 s at 10 jobs/hour).
    assert 300 < a[-1].arrival_s / 300 < 420


def test_generator_caps_sizes_to_the_cluster() -> None:
    jobs = generate_trace(200, seed=1, arrival_rate_per_h=5.0, cluster_gpus=4)
    assert max(j.total_gpus for j in jobs) <= 4
    with pytest.raises(UsageError):
        generate_trace(0, seed=1, arrival_rate_per_h=5.0)
    with pytest.raises(UsageError):
        generate_trace(5, seed=1, arrival_rate_per_h=0.0)
