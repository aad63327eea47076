"""`hlogap bound` against the seeds' worked numbers (How to Scale Your Model, ch. 1 and 9)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hlogap.bounds.instruction import bound_instruction


def matmul(batch: int, d: int = 8192, f: int = 8192, weight: str = "bf16") -> str:
    return (
        f"%dot = bf16[{batch},{f}]{{1,0}} dot(bf16[{batch},{d}]{{1,0}} %x, "
        f"{weight}[{d},{f}]{{1,0}} %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}"
    )


def test_ffw_up_projection_on_tpu_v2_is_95_6_ms_and_compute_bound() -> None:
    # Seeds ch.9: bf16[8,1024,8192] x bf16[8192,16384] per core, 23e12 FLOP/s -> 95.6 ms (96 ms
    # measured).
    hlo = (
        "%fusion = bf16[8,1024,16384]{2,1,0} dot(bf16[8,1024,8192]{2,1,0} %x, "
        "bf16[8192,16384]{1,0} %w), lhs_contracting_dims={2}, rhs_contracting_dims={0}"
    )
    result = bound_instruction(hlo, "tpu-v2")
    assert result.cost.flops == 2 * 8 * 1024 * 8192 * 16384
    assert result.bound.bound_by == "compute"
    assert result.bound.lower_s * 1e3 == pytest.approx(95.6, abs=0.1)


def test_dot_product_intensity_is_one_half() -> None:
    n = 1 << 20
    hlo = (
        f"%d = bf16[] dot(bf16[{n}]{{0}} %x, bf16[{n}]{{0}} %y), "
        "lhs_contracting_dims={0}, rhs_contracting_dims={0}"
    )
    for chip in ("tpu-v5e", "h100-sxm", "mi300x"):
        result = bound_instruction(hlo, chip)
        assert result.intensity == pytest.approx(0.5, rel=1e-3)
        assert result.bound.bound_by == "memory"


@pytest.mark.parametrize(
    ("chip", "weight", "critical"),
    [("tpu-v5e", "bf16", 240), ("tpu-v5e", "s8", 120), ("h100-sxm", "bf16", 298)],
)
def test_critical_batch_size(chip: str, weight: str, critical: int) -> None:
    # Seeds ch.1: [B,D]x[D,F] has intensity ~B (bf16 weights) or ~2B (int8 weights), so it turns
    # compute-bound at B ~ peak / bandwidth (v5e: ~240, ~120 with int8 weights; H100: ~298).
    below = bound_instruction(matmul(int(critical * 0.8), weight=weight), chip)
    above = bound_instruction(matmul(int(critical * 1.25), weight=weight), chip)
    assert below.bound.bound_by == "memory"
    assert above.bound.bound_by == "compute"
    assert below.cost.matrix_dtype == "bf16"  # bf16 x s8 runs at the bf16 peak


def test_reduce_scatter_on_tpu_v2_is_1_1_ms_and_communication_bound() -> None:
    # Seeds ch.9: the 134 MB bf16[8,1024,8192] shard, reduce-scattered over the 2-way model axis
    # on TPU v2 ICI (1.2e11 B/s bidirectional): ~1.1 ms, 1.13 ms measured.
    hlo = (
        "%fusion.1 = bf16[8,1024,4096]{2,1,0:T(8,128)(2,1)} fusion(bf16[8,1024,8192]"
        "{2,1,0:T(8,128)(2,1)} %fusion.31), kind=kCustom, calls=%all-reduce-scatter.1"
    )
    result = bound_instruction(hlo, "tpu-v2")
    assert result.bound.bound_by == "communication"
    assert result.cost.comm_bytes == pytest.approx(8 * 1024 * 8192 * 2 / 2)
    assert result.bound.lower_s * 1e3 == pytest.approx(1.1, abs=0.05)
    assert result.bound.lower_s <= 1.13e-3  # the measured time: a bound never exceeds it


def test_all_reduce_over_eight_devices_is_communication_bound() -> None:
    hlo = (
        "%all-reduce = bf16[8,32768]{1,0} all-reduce(bf16[8,32768]{1,0} %p), channel_id=1, "
        "replica_groups={{0,16,32,48,64,80,96,112}}, to_apply=%add"
    )
    result = bound_instruction(hlo, "tpu-v5e")
    nbytes = 8 * 32768 * 2
    assert result.cost.comm_bytes == pytest.approx(2 * 7 / 8 * nbytes)
    assert result.bound.bound_by == "communication"


def test_cli_json_has_the_contract_keys() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "hlogap", "bound", matmul(512), "--chip", "tpu-v5e", "-f", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    doc = json.loads(out.stdout)
    assert set(doc) >= {
        "name",
        "opcode",
        "flops",
        "bytes",
        "comm_bytes",
        "intensity",
        "t_compute_us",
        "t_memory_us",
        "t_comm_us",
        "bound_us",
        "bound_by",
        "hints",
    }
    assert doc["bound_us"] == pytest.approx(max(doc["t_compute_us"], doc["t_memory_us"]))


def test_stdin_input() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "hlogap", "bound", "-", "--chip", "h100-sxm", "-f", "json"],
        input=matmul(64),
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout)["flops"] == 2 * 64 * 8192 * 8192
