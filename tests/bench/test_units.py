"""Pure pieces: sizes, bus factors, the MPI half-precision ops, fusion, verification."""

from __future__ import annotations

import pytest
import torch

from ringleader.bench.allreduce import AllreduceConfig, bus_factor, count_wrong, parse_size, sizes
from ringleader.bench.comm import _sum_bf16, _sum_f16, fusion_buckets
from ringleader.bench.ranks import RankInfo, discover
from ringleader.errors import UsageError


def test_parse_size() -> None:
    assert parse_size("8") == 8
    assert parse_size("64K") == 65536
    assert parse_size("128M") == 128 * 2**20
    assert parse_size("1G") == 2**30
    with pytest.raises(UsageError):
        parse_size("lots")


def test_bus_factors_follow_nccl_tests() -> None:
    assert bus_factor("allreduce", 4) == pytest.approx(1.5)
    assert bus_factor("allgather", 4) == pytest.approx(0.75)
    assert bus_factor("reducescatter", 2) == pytest.approx(0.5)
    assert bus_factor("broadcast", 8) == 1.0


def test_sizes_round_to_whole_elements_per_rank() -> None:
    cfg = AllreduceConfig(minbytes=8, maxbytes=64, factor=2, collective="allgather")
    assert sizes(cfg, 4, 4) == [(16, 4), (32, 8), (64, 16)]  # 8 B < one float per rank: skipped
    cfg = AllreduceConfig(minbytes=8, maxbytes=32, factor=2)
    assert sizes(cfg, 2, 2) == [(8, 4), (16, 8), (32, 16)]


def test_bf16_op_is_correctly_rounded() -> None:
    g = torch.Generator().manual_seed(0)
    a = (torch.randn(50000, generator=g) * torch.exp(torch.randn(50000, generator=g) * 6)).bfloat16()
    b = torch.randn(50000, generator=g).bfloat16()
    out = b.clone()
    _sum_bf16(a.view(torch.int16).numpy().tobytes(), memoryview(out.view(torch.int16).numpy()), None)
    assert torch.equal(out.view(torch.int16), (a + b).view(torch.int16))


def test_fp16_op_matches_torch() -> None:
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(20000, generator=g).half(), (torch.randn(20000, generator=g) * 50).half()
    out = b.clone()
    _sum_f16(a.view(torch.int16).numpy().tobytes(), memoryview(out.view(torch.int16).numpy()), None)
    assert torch.equal(out, a + b)


def test_fusion_buckets_respect_threshold_and_dtype() -> None:
    ts = [torch.zeros(10), torch.zeros(10), torch.zeros(100), torch.zeros(5).half(), torch.zeros(3)]
    buckets = fusion_buckets(ts, threshold_bytes=80)
    assert [len(b) for b in buckets] == [2, 1, 1, 1]


def test_count_wrong_catches_a_planted_value() -> None:
    expected = torch.arange(16, dtype=torch.float32)
    result = expected.clone()
    assert count_wrong(result, expected) == 0
    result[7] += 1
    result[3] = float("nan")
    assert count_wrong(result, expected) == 2


def test_rank_discovery_prefers_mpirun() -> None:
    env = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4",
           "OMPI_COMM_WORLD_LOCAL_RANK": "1", "RANK": "0", "WORLD_SIZE": "2"}  # fmt: skip
    assert discover(env) == RankInfo(1, 4, 1, "mpirun")
    assert discover({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}) == RankInfo(1, 2, 1, "env")
    assert not discover({}).in_job


def test_nodes_from_ranks_per_machine() -> None:
    from ringleader.bench.ranks import nodes

    assert nodes(8, {"OMPI_COMM_WORLD_LOCAL_SIZE": "4"}) == 2
    assert nodes(2, {"LOCAL_WORLD_SIZE": "2"}) == 1
    assert nodes(2, {}) == 1


def test_speedup_and_efficiency_rows() -> None:
    from ringleader.bench.scaling import markdown, table_rows

    pts = [{"backend": "gloo", "world_size": w, "images_per_sec_total": thr, "step_time_s": 0.1,
            "step_times_s": [0.1, 0.3], "nodes": 1} for w, thr in ((1, 100.0), (2, 150.0))]
    rows = table_rows(pts)
    assert [r["speedup"] for r in rows] == [1.0, 1.5]
    assert rows[1]["scaling_efficiency"] == 0.75 and rows[1]["avg_step_time_s"] == 0.2
    assert "| gloo | 1 | 2 | 0.2000 | 150.0 | 1.50 | 75% |" in markdown(rows, "t")
