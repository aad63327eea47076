"""The cost model op by op: the seeds' worked numbers, XLA's counting rules, bytes across HBM."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hlogap.cost import (
    OpCost,
    cost_computation,
    cost_instruction,
    cost_module,
    timed_computations,
    trip_count,
)
from hlogap.cost.custom_calls.attention import causal_pairs
from hlogap.cost.matmul import valid_taps
from hlogap.hlo.ir import Computation, DotDims, Instruction, Module, Shape
from hlogap.hlo.text import parse_instruction, parse_module


def cost(text: str, num_devices: int | None = None) -> OpCost:
    return cost_instruction(parse_instruction(text), num_devices=num_devices)


def module_cost(text: str, name: str) -> OpCost:
    module = parse_module(text)
    return cost_instruction(module.instructions()[name], module)


# --- the seeds' worked numbers ----------------------------------------------------------------


def test_ffw_up_projection_flops() -> None:
    c = cost(
        "%dot = bf16[8,1024,16384]{2,1,0} dot(bf16[8,1024,8192]{2,1,0} %x, "
        "bf16[8192,16384]{1,0} %w), lhs_contracting_dims={2}, rhs_contracting_dims={0}"
    )
    assert c.flops == 2 * 8 * 1024 * 8192 * 16384
    assert c.matrix_flops == c.flops and c.matrix_dtype == "bf16"
    assert c.hbm_read_bytes == 2 * (8 * 1024 * 8192 + 8192 * 16384)
    assert c.hbm_write_bytes == 2 * 8 * 1024 * 16384


def test_bf16_dot_product_intensity_is_one_half() -> None:
    n = 1 << 20
    c = cost(
        f"%d = bf16[] dot(bf16[{n}]{{0}} %a, bf16[{n}]{{0}} %b), "
        "lhs_contracting_dims={0}, rhs_contracting_dims={0}"
    )
    assert c.flops == 2 * n
    assert c.flops / c.hbm_bytes == pytest.approx(0.5, rel=1e-3)


@pytest.mark.parametrize(("weights", "per_row"), [("bf16", 1), ("s8", 2)])
def test_matmul_intensity_is_the_batch(weights: str, per_row: int) -> None:
    """[B,D] x [D,F] with B << D, F: ~B FLOP per byte, ~2B with int8 weights (bf16 peak)."""
    b, d, f = 32, 8192, 8192
    c = cost(
        f"%d = bf16[{b},{f}]{{1,0}} dot(bf16[{b},{d}]{{1,0}} %x, {weights}[{d},{f}]{{1,0}} %w), "
        "lhs_contracting_dims={1}, rhs_contracting_dims={0}"
    )
    assert c.flops / c.hbm_bytes == pytest.approx(per_row * b, rel=0.03)
    assert c.matrix_dtype == "bf16"


@pytest.mark.parametrize(
    ("lhs", "rhs", "dtype"),
    [
        ("bf16", "s8", "bf16"),
        ("s8", "s8", "s8"),
        ("f32", "bf16", "f32"),
        ("f8e4m3fn", "bf16", "bf16"),
    ],
)
def test_matrix_dtype_is_the_widest_operand(lhs: str, rhs: str, dtype: str) -> None:
    c = cost(
        f"%d = f32[4,4]{{1,0}} dot({lhs}[4,8]{{1,0}} %a, {rhs}[8,4]{{1,0}} %b), "
        "lhs_contracting_dims={1}, rhs_contracting_dims={0}"
    )
    assert c.matrix_dtype == dtype
    assert c.vector_dtype == "f32"


REDUCE_SCATTER = (
    "%fusion.1 = bf16[8,1024,4096]{2,1,0:T(8,128)(2,1)} fusion("
    "bf16[8,1024,8192]{2,1,0:T(8,128)(2,1)} %fusion.31), kind=kCustom, calls=%all-reduce-scatter.1"
)


def test_reduce_scatter_of_the_seeds_without_its_module() -> None:
    """The seeds' TPU v2 ReduceScatter: a 134 MB shard scattered over 2 devices sends half."""
    c = cost(REDUCE_SCATTER)
    assert c.collective == "reduce-scatter"
    assert c.group_size == 2  # 8192 -> 4096
    assert c.comm_bytes == 2 * 8 * 1024 * 8192 / 2
    assert c.hbm_bytes == 2 * 8 * 1024 * (8192 + 4096)
    assert c.unmodeled is None and c.note is not None


def test_reduce_scatter_inside_a_fusion_with_its_module() -> None:
    text = """HloModule m, num_partitions=2

%add (a: bf16[], b: bf16[]) -> bf16[] {
  %a = bf16[] parameter(0)
  %b = bf16[] parameter(1)
  ROOT %s = bf16[] add(%a, %b)
}

%all-reduce-scatter.1 (p: bf16[8,1024,8192]) -> bf16[8,1024,4096] {
  %p = bf16[8,1024,8192]{2,1,0} parameter(0)
  ROOT %rs = bf16[8,1024,4096]{2,1,0} reduce-scatter(%p), channel_id=1,
    replica_groups={{0,1}}, dimensions={2}, to_apply=%add
}

ENTRY %main (x: bf16[8,1024,8192]) -> bf16[8,1024,4096] {
  %x = bf16[8,1024,8192]{2,1,0} parameter(0)
  ROOT %fusion.1 = bf16[8,1024,4096]{2,1,0} fusion(%x), kind=kCustom, calls=%all-reduce-scatter.1
}
"""
    c = module_cost(text, "fusion.1")
    assert (c.collective, c.group_size) == ("reduce-scatter", 2)
    assert c.comm_bytes == 2 * 8 * 1024 * 8192 / 2


def test_tpu_all_reduce_keeping_a_slice_is_a_reduce_scatter() -> None:
    """TPU's all-reduce-scatter fusions hold an all-reduce whose result each device slices."""
    text = """HloModule m

%add (a: bf16[], b: bf16[]) -> bf16[] {
  %a = bf16[] parameter(0)
  %b = bf16[] parameter(1)
  ROOT %s = bf16[] add(%a, %b)
}

%all-reduce-scatter (input: bf16[2048,7168]) -> bf16[512,7168] {
  %input = bf16[2048,7168]{1,0} parameter(0)
  %ar = bf16[2048,7168]{1,0} all-reduce(%input), replica_groups={{0,1,2,3}}, to_apply=%add
  %id = u32[] partition-id()
  %rows = u32[] constant(512)
  %start = u32[] multiply(%id, %rows)
  %zero = u32[] constant(0)
  ROOT %mine = bf16[512,7168]{1,0} dynamic-slice(%ar, %start, %zero), dynamic_slice_sizes={512,7168}
}

ENTRY %main (x: bf16[2048,7168]) -> bf16[512,7168] {
  %x = bf16[2048,7168]{1,0} parameter(0)
  ROOT %f = bf16[512,7168]{1,0} fusion(%x), kind=kCustom, calls=%all-reduce-scatter
}
"""
    c = module_cost(text, "f")
    assert (c.collective, c.group_size) == ("reduce-scatter", 4)
    assert c.comm_bytes == 3 / 4 * 2048 * 7168 * 2


# --- memory: tiles, memory spaces -------------------------------------------------------------


def test_tiled_layout_moves_padding() -> None:
    """f32[3,5]{1,0:T(2,2)} occupies [4,6]."""
    c = cost("%a = f32[3,5]{1,0:T(2,2)} add(f32[3,5]{1,0:T(2,2)} %x, f32[3,5]{1,0:T(2,2)} %y)")
    assert c.hbm_bytes == 3 * 4 * 6 * 4
    assert c.padding_bytes == 3 * (4 * 6 - 3 * 5) * 4
    assert c.flops == 15


def test_vmem_operands_are_not_hbm_traffic() -> None:
    c = cost(
        "%fusion.3 = bf16[32,32,4096]{2,1,0:T(8,128)(2,1)S(1)} fusion("
        "bf16[32,32,8192]{2,1,0:T(8,128)(2,1)S(1)} %fusion.32), kind=kCustom, "
        "calls=%all-reduce-scatter.3"
    )
    assert c.hbm_bytes == 0
    assert c.comm_bytes == 2 * 32 * 32 * 8192 / 2


def test_copy_from_host_counts_only_the_hbm_side() -> None:
    c = cost(
        "%copy-start = (f32[1024]{0}, f32[1024]{0:S(5)}, u32[]{:S(2)}) copy-start("
        "f32[1024]{0:S(5)} %param)"
    )
    assert (c.hbm_read_bytes, c.hbm_write_bytes) == (0, 4096)
    assert c.host_bytes == 4096  # the array crosses the host link once
    done = cost(
        "%copy-done = f32[1024]{0} copy-done((f32[1024]{0}, f32[1024]{0:S(5)}, u32[]{:S(2)}) "
        "%copy-start)"
    )
    assert done.hbm_bytes == 0 and done.note is not None


# --- FLOPs, XLA's rules -----------------------------------------------------------------------


def test_transcendentals_are_counted_apart() -> None:
    c = cost("%e = f32[16,32]{1,0} exponential(f32[16,32]{1,0} %x)")
    assert (c.flops, c.transcendentals) == (0, 512)
    assert cost("%c = bf16[16,32]{1,0} convert(f32[16,32]{1,0} %x)").flops == 512


def test_reduce_counts_one_application_per_reduced_element() -> None:
    text = """HloModule m

%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(%a, %b)
}

ENTRY %main (x: f32[64,128]) -> f32[64] {
  %x = f32[64,128]{1,0} parameter(0)
  %init = f32[] constant(-inf)
  ROOT %r = f32[64]{0} reduce(%x, %init), dimensions={1}, to_apply=%max
}
"""
    c = module_cost(text, "r")
    assert c.flops == 64 * 128 - 64
    assert c.hbm_read_bytes == 64 * 128 * 4 + 4


def test_reduce_without_its_reducer_assumes_one_op() -> None:
    c = cost("%r = f32[64]{0} reduce(f32[64,128]{1,0} %x, f32[] %c), dimensions={1}, to_apply=%sum")
    assert c.flops == 64 * 128 - 64
    assert c.unmodeled is None and c.note is not None


def test_conv_counts_valid_taps_only() -> None:
    """A 16-wide window padded 15_15 over a spatial size of 1: one tap per output (XLA's count)."""
    c = cost(
        "%convolution.116 = bf16[2048,16,128]{0,2,1:T(8,128)(2,1)} convolution("
        "bf16[2048,2048,1]{0,1,2:T(8,128)(2,1)} %a, bf16[2048,16,128]{0,2,1:T(8,128)(2,1)} %b), "
        "window={size=16 pad=15_15 rhs_reversal=1}, dim_labels=bf0_i0o->b0f"
    )
    assert c.flops == 2 * 2048 * 128 * 2048 * 16  # naive: 16x that


def _brute_force_taps(
    size_in: int, size_k: int, size_out: int, stride: int, pad: int, bd: int, wd: int
) -> int:
    """XLA's loop (HloCostAnalysis::GetConvolutionFlops), transcribed."""
    count = 0
    for k in range(size_k):
        for o in range(size_out):
            u = o * stride - pad + k * wd
            if u < 0 or u % bd:
                continue
            count += u // bd < size_in
    return count


@given(
    size_in=st.integers(1, 12),
    size_k=st.integers(1, 6),
    stride=st.integers(1, 4),
    pad=st.integers(0, 6),
    pad_high=st.integers(0, 6),
    bd=st.integers(1, 4),
    wd=st.integers(1, 3),
)
def test_valid_taps_match_xla_loop(
    size_in: int, size_k: int, stride: int, pad: int, pad_high: int, bd: int, wd: int
) -> None:
    span = (size_in - 1) * bd + 1 + pad + pad_high - ((size_k - 1) * wd + 1)
    size_out = max(span // stride + 1, 0)
    got = valid_taps(
        size_in, size_k, size_out, stride=stride, pad_low=pad, base_dilation=bd, window_dilation=wd
    )
    assert got == _brute_force_taps(size_in, size_k, size_out, stride, pad, bd, wd)


def test_sort_is_n_log_n() -> None:
    c = cost("%s = s32[8192]{0} sort(s32[8192]{0} %x), dimensions={0}, to_apply=%lt")
    assert c.flops == 8192 * 13


# --- fusions ----------------------------------------------------------------------------------

FUSIONS = """HloModule m

%sliced (p0: f32[1024,64], p1: s32[]) -> f32[16,64] {
  %p0 = f32[1024,64]{1,0} parameter(0)
  %p1 = s32[] parameter(1)
  %zero = s32[] constant(0)
  ROOT %ds = f32[16,64]{1,0} dynamic-slice(%p0, %p1, %zero), dynamic_slice_sizes={16,64}
}

%bcast (p0.1: f32[64], p1.1: f32[1024,64]) -> (f32[1024,64], f32[1024,64]) {
  %p0.1 = f32[64]{0} parameter(0)
  %p1.1 = f32[1024,64]{1,0} parameter(1)
  %b = f32[1024,64]{1,0} broadcast(%p0.1), dimensions={1}
  %b2 = f32[1024,64]{1,0} broadcast(%p0.1), dimensions={1}
  %add = f32[1024,64]{1,0} add(%p1.1, %b)
  %mul = f32[1024,64]{1,0} multiply(%add, %b2)
  ROOT %t = (f32[1024,64]{1,0}, f32[1024,64]{1,0}) tuple(%add, %mul)
}

%update (p0.2: f32[1024,64], p1.2: f32[16,64], p2.2: s32[]) -> f32[1024,64] {
  %p0.2 = f32[1024,64]{1,0} parameter(0)
  %p1.2 = f32[16,64]{1,0} parameter(1)
  %p2.2 = s32[] parameter(2)
  %zero.2 = s32[] constant(0)
  ROOT %dus = f32[1024,64]{1,0} dynamic-update-slice(%p0.2, %p1.2, %p2.2, %zero.2)
}

ENTRY %main (t: f32[1024,64], i: s32[], v: f32[64], u: f32[16,64]) -> f32[1024,64] {
  %t = f32[1024,64]{1,0} parameter(0)
  %i = s32[] parameter(1)
  %v = f32[64]{0} parameter(2)
  %u = f32[16,64]{1,0} parameter(3)
  %slice_fusion = f32[16,64]{1,0} fusion(%t, %i), kind=kLoop, calls=%sliced
  %bcast_fusion = (f32[1024,64]{1,0}, f32[1024,64]{1,0}) fusion(%v, %t), kind=kLoop, calls=%bcast
  ROOT %dus_fusion = f32[1024,64]{1,0} fusion(%t, %u, %i), kind=kLoop, calls=%update
}
"""


def test_fusion_operand_read_through_a_dynamic_slice_is_read_in_part() -> None:
    c = module_cost(FUSIONS, "slice_fusion")
    assert c.hbm_read_bytes == 16 * 64 * 4 + 4
    assert c.hbm_write_bytes == 16 * 64 * 4


def test_fusion_broadcast_operand_counts_once_and_tuple_outputs_each() -> None:
    c = module_cost(FUSIONS, "bcast_fusion")
    assert c.hbm_read_bytes == 64 * 4 + 1024 * 64 * 4
    assert c.hbm_write_bytes == 2 * 1024 * 64 * 4
    assert c.flops == 2 * 1024 * 64


def test_fusion_updating_in_place_writes_only_the_update() -> None:
    c = module_cost(FUSIONS, "dus_fusion")
    assert c.hbm_read_bytes == 16 * 64 * 4 + 4
    assert c.hbm_write_bytes == 16 * 64 * 4


SCATTERS = """HloModule m

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%into_operand (p0: f32[1024,64], p1: s32[128,1], p2: f32[128,1,64]) -> f32[1024,64] {
  %p0 = f32[1024,64]{1,0} parameter(0)
  %p1 = s32[128,1]{1,0} parameter(1)
  %p2 = f32[128,1,64]{2,1,0} parameter(2)
  ROOT %sc = f32[1024,64]{1,0} scatter(%p0, %p1, %p2), update_window_dims={1,2},
    inserted_window_dims={}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
}

%into_zeros (q1: s32[128,1], q2: f32[128,1,64]) -> f32[1024,64] {
  %q1 = s32[128,1]{1,0} parameter(0)
  %q2 = f32[128,1,64]{2,1,0} parameter(1)
  %zero = f32[] constant(0)
  %z = f32[1024,64]{1,0} broadcast(%zero), dimensions={}
  ROOT %sc.1 = f32[1024,64]{1,0} scatter(%z, %q1, %q2), update_window_dims={1,2},
    inserted_window_dims={}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
}

ENTRY %main (t: f32[1024,64], i: s32[128,1], u: f32[128,1,64]) -> f32[1024,64] {
  %t = f32[1024,64]{1,0} parameter(0)
  %i = s32[128,1]{1,0} parameter(1)
  %u = f32[128,1,64]{2,1,0} parameter(2)
  %in_place = f32[1024,64]{1,0} fusion(%t, %i, %u), kind=kLoop, calls=%into_operand
  ROOT %fresh = f32[1024,64]{1,0} fusion(%i, %u), kind=kLoop, calls=%into_zeros
}
"""


def test_fused_scatter_updates_its_operand_in_place() -> None:
    rows = 128 * 64 * 4
    c = module_cost(SCATTERS, "in_place")
    assert c.hbm_read_bytes == 2 * rows + 128 * 4  # the rows it lands on, the updates, indices
    assert c.hbm_write_bytes == rows
    assert c.flops == 128 * 64
    fresh = module_cost(SCATTERS, "fresh")  # a buffer it fills first: all of it is written
    assert fresh.hbm_write_bytes == 1024 * 64 * 4


def test_select_and_scatter_flops() -> None:
    text = """HloModule m

%ge (a: f32[], b: f32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  %n = f32[] negate(%a)
  ROOT %c = pred[] compare(%n, %b), direction=GE
}

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

ENTRY %main (o: f32[8,8], s: f32[4,4]) -> f32[8,8] {
  %o = f32[8,8]{1,0} parameter(0)
  %s = f32[4,4]{1,0} parameter(1)
  %z = f32[] constant(0)
  ROOT %sas = f32[8,8]{1,0} select-and-scatter(%o, %s, %z), window={size=2x2 stride=2x2},
    select=%ge, scatter=%add
}
"""
    # Each source element: window - 1 selects (2 ops each here), one scatter (1 op).
    assert module_cost(text, "sas").flops == 16 * (4 - 1) * 2 + 16


def test_fusion_without_its_module_is_partial() -> None:
    c = cost("%f = f32[8]{0} fusion(f32[8]{0} %x), kind=kLoop, calls=%fused_computation")
    assert c.unmodeled is not None and "not available" in c.unmodeled
    assert c.hbm_bytes == 64


def test_bitcast_reshape_moves_nothing_and_transpose_does() -> None:
    assert cost("%r = f32[4,8]{1,0} reshape(f32[32]{0} %x)").hbm_bytes == 0
    assert cost("%b = f32[4,8]{1,0} bitcast(f32[32]{0} %x)").hbm_bytes == 0
    moved = cost("%t = f32[8,4]{1,0} transpose(f32[4,8]{1,0} %x), dimensions={1,0}")
    assert moved.hbm_bytes == 2 * 32 * 4
    same = cost("%t = f32[8,4]{0,1} transpose(f32[4,8]{1,0} %x), dimensions={1,0}")
    assert same.hbm_bytes == 0


# --- collectives and async pairs --------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "kind", "n", "sent"),
    [
        (
            "%c = f32[1024] all-reduce(f32[1024] %x), replica_groups={{0,1,2,3}}, to_apply=%a",
            "all-reduce",
            4,
            2 * 3 / 4 * 4096,
        ),
        (
            "%c = f32[4096] all-gather(f32[1024] %x), replica_groups=[2,4]<=[8], dimensions={0}",
            "all-gather",
            4,
            3 / 4 * 16384,
        ),
        (
            "%c = f32[256] reduce-scatter(f32[1024] %x), replica_groups=[4,2]<=[2,4]T(1,0), "
            "dimensions={0}, to_apply=%a",
            "reduce-scatter",
            2,
            1 / 2 * 4096,
        ),
        (
            "%c = f32[1024] all-to-all(f32[1024] %x), replica_groups={{0,1,2,3,4,5,6,7}}, "
            "dimensions={0}",
            "all-to-all",
            8,
            7 / 8 * 4096,
        ),
        (
            "%c = f32[1024] collective-permute(f32[1024] %x), source_target_pairs={{0,1},{1,0}}",
            "collective-permute",
            2,
            4096,
        ),
    ],
)
def test_ring_model(line: str, kind: str, n: int, sent: float) -> None:
    c = cost(line)
    assert (c.collective, c.group_size) == (kind, n)
    assert c.comm_bytes == pytest.approx(sent)
    assert c.hbm_bytes > 0


def test_empty_replica_groups_span_all_devices() -> None:
    line = "%c = f32[1024]{0} all-reduce(f32[1024]{0} %x), replica_groups={}, to_apply=%a"
    assert cost(line, num_devices=8).comm_bytes == pytest.approx(2 * 7 / 8 * 4096)
    unknown = cost(line)
    assert unknown.unmodeled is not None and unknown.comm_bytes == 0


def test_async_pair_counts_once_on_the_start() -> None:
    start = cost(
        "%ags = (f32[1024]{0}, f32[4096]{0}) all-gather-start(f32[1024]{0} %x), "
        "replica_groups={{0,1,2,3}}, dimensions={0}"
    )
    assert start.comm_bytes == pytest.approx(3 / 4 * 16384)
    assert (start.hbm_read_bytes, start.hbm_write_bytes) == (4096, 16384)
    done = cost("%agd = f32[4096]{0} all-gather-done((f32[1024]{0}, f32[4096]{0}) %ags)")
    assert done == OpCost(note=done.note) and done.note


def test_tpu_async_collective_fusion_without_its_module() -> None:
    c = cost(
        "%async-collective-start.3 = (bf16[1,512,7168]{2,1,0:T(8,128)(2,1)}, "
        "bf16[1,2048,7168]{2,1,0:T(8,128)(2,1)}, s32[2]{0:S(4)}, u32[]{:S(2)}) fusion("
        "bf16[1,512,7168]{2,1,0:T(8,128)(2,1)} %fusion.550), kind=kCustom, "
        "output_to_operand_aliasing={{0}: (0, {})}, calls=%fused_computation.402"
    )
    assert (c.collective, c.group_size) == ("all-gather", 4)
    assert c.comm_bytes == pytest.approx(3 / 4 * 2048 * 7168 * 2)
    assert c.hbm_write_bytes == 2048 * 7168 * 2  # the aliased operand is not written again


# --- custom calls -----------------------------------------------------------------------------


def test_cudnn_convolution() -> None:
    """The MI300X trace's cudnn-conv.1: xprof's FLOPs, the u8 workspace not counted as data."""
    c = cost(
        "%cudnn-conv.1 = (bf16[1,5120,34,31,53]{4,3,2,1,0}, u8[7150336]{0}) custom-call("
        "bf16[1,16,32,60,104]{4,3,2,1,0} %a, bf16[5120,16,1,2,2]{4,3,2,1,0} %b), "
        "window={size=1x2x2 stride=1x2x2 pad=1_1x1_1x1_1}, dim_labels=bf012_oi012->bf012, "
        'custom_call_target="__cudnn$convForward"'
    )
    assert c.flops == 2 * 16 * 5120 * (32 * 60 * 104)
    assert c.hbm_write_bytes == 5120 * 34 * 31 * 53 * 2


def test_cublas_gemm_reads_its_dot_dimension_numbers() -> None:
    c = cost(
        "%custom-call.1 = (bf16[4096,2048]{1,0}, s8[67108864]{0}) custom-call("
        "bf16[4096,6144]{1,0} %a, bf16[2048,6144]{1,0} %b), "
        'custom_call_target="__cublas$gemm", backend_config={"gemm_backend_config":{'
        '"alpha_real":1,"beta":0,"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],'
        '"rhs_contracting_dimensions":["1"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]}}}'
    )
    assert c.flops == 2 * 4096 * 2048 * 6144
    assert c.hbm_write_bytes == 4096 * 2048 * 2


TE_FORWARD = (
    "%attn = (bf16[2,2048,16,128]{3,2,1,0}, f32[2,16,2048,1]{3,2,1,0}, u8[1]{0}) custom-call("
    'bf16[2,2048,3,16,128]{4,3,2,1,0} %qkv), custom_call_target="te_fused_attn_forward_ffi"'
)


def test_te_attention_from_its_attributes_with_a_causal_mask() -> None:
    c = cost(
        TE_FORWARD + ", backend_config={attn_heads = 16 : i64, input_batch = 2 : i64, "
        "kv_max_seqlen = 2048 : i64, mask_type = 2 : i64, q_max_seqlen = 2048 : i64, "
        "qk_head_dim = 128 : i64, v_head_dim = 128 : i64}"
    )
    assert c.flops == 4 * 2 * 16 * (2048 * 2049 // 2) * 128
    assert c.matrix_dtype == "bf16"
    backward = cost(TE_FORWARD.replace("forward", "backward"))
    assert backward.flops == 2.5 * 4 * 2 * 16 * 2048 * 2048 * 128


def test_te_attention_from_packed_qkv_shapes() -> None:
    c = cost(TE_FORWARD)
    assert c.flops == 4 * 2 * 16 * 2048 * 2048 * 128  # no mask given: every pair


def test_cudnn_fmha_reads_its_dot_dimension_numbers() -> None:
    c = cost(
        "%fmha = (bf16[2,128,4,64]{3,2,1,0}, u8[0]{0}) custom-call(bf16[2,128,4,64]{3,2,1,0} %q, "
        "bf16[2,256,4,64]{3,2,1,0} %k, bf16[2,256,4,32]{3,2,1,0} %v), "
        'custom_call_target="__cudnn$fmhaSoftmax", backend_config={"cudnn_fmha_backend_config":'
        '{"bmm1_dot_dimension_numbers":{"lhs_contracting_dimensions":["3"],'
        '"rhs_contracting_dimensions":["3"],"lhs_batch_dimensions":["0","2"],'
        '"rhs_batch_dimensions":["0","2"]},"mask_type":"NO_MASK"}}'
    )
    assert c.flops == 2 * (2 * 4) * 128 * 256 * (64 + 32)


def test_causal_pairs() -> None:
    assert causal_pairs(4, 4, bottom_right=False) == 10
    assert causal_pairs(2, 4, bottom_right=True) == 7  # queries see 3 and 4 keys
    assert causal_pairs(4, 2, bottom_right=False) == 7  # 1, 2, 2, 2
    assert causal_pairs(4, 2, bottom_right=True) == 3  # 0, 0, 1, 2


def test_pallas_kernel_cost_estimate() -> None:
    c = cost(
        "%k = f32[256,256]{1,0} custom-call(f32[256,256]{1,0} %a), "
        'custom_call_target="tpu_custom_call", backend_config={"custom_call_config": '
        '{"body": "abc", "cost_estimate": {"flops": 1000, "transcendentals": 7, '
        '"bytes_accessed": 600000}}}'
    )
    # The kernel's own estimate is its cost (tests/test_pallas.py has the rest).
    assert c.unmodeled is None
    assert (c.flops, c.transcendentals, c.hbm_bytes) == (1000, 7, 600000)


def test_unknown_custom_call_is_unmodeled_with_its_bytes() -> None:
    c = cost('%k = f32[8]{0} custom-call(f32[8]{0} %a), custom_call_target="my_kernel"')
    assert c.unmodeled == "custom call 'my_kernel' has no cost model"
    assert c.hbm_bytes == 64


# --- control flow, computations, modules ------------------------------------------------------

LOOP = """HloModule m

%body (p: (s32[], f32[128,128])) -> (s32[], f32[128,128]) {
  %p = (s32[], f32[128,128]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[128,128]{1,0} get-tuple-element(%p), index=1
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %y = f32[128,128]{1,0} dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %t = (s32[], f32[128,128]{1,0}) tuple(%next, %y)
}

%cond (q: (s32[], f32[128,128])) -> pred[] {
  %q = (s32[], f32[128,128]{1,0}) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %n = s32[] constant(16)
  ROOT %lt = pred[] compare(%j, %n), direction=LT
}

ENTRY %main (a: f32[128,128]) -> (s32[], f32[128,128]) {
  %a = f32[128,128]{1,0} parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[128,128]{1,0}) tuple(%zero, %a)
  ROOT %loop = (s32[], f32[128,128]{1,0}) while(%init), condition=%cond, body=%body,
    backend_config={"known_trip_count":{"n":"16"}}
}
"""


def test_while_is_free_as_an_op_and_multiplied_in_its_computation() -> None:
    module = parse_module(LOOP)
    loop = module.instructions()["loop"]
    own = cost_instruction(loop, module)
    assert own.flops == 0 and own.hbm_bytes == 0 and own.unmodeled is None and own.note
    assert trip_count(loop) == 16
    body = 2 * 128**3 + 1
    entry = module.entry_computation
    assert entry is not None
    assert cost_computation(entry, module).flops == 16 * body + 17
    assert cost_computation(entry, module, trip_counts=False).flops == body + 1


def test_cost_module_covers_timed_computations_only() -> None:
    module = parse_module(REDUCE_SCATTER_MODULE)
    assert [c.name for c in timed_computations(module)] == ["main"]
    costs = cost_module(module)
    assert set(costs) == {"x", "fusion.1"}  # not the fused or the reducer's instructions


REDUCE_SCATTER_MODULE = """HloModule m

%all-reduce-scatter.1 (p: bf16[64]) -> bf16[32] {
  %p = bf16[64]{0} parameter(0)
  ROOT %rs = bf16[32]{0} reduce-scatter(%p), replica_groups={{0,1}}, dimensions={0}, to_apply=%add
}

%add (a: bf16[], b: bf16[]) -> bf16[] {
  %a = bf16[] parameter(0)
  %b = bf16[] parameter(1)
  ROOT %s = bf16[] add(%a, %b)
}

ENTRY %main (x: bf16[64]) -> bf16[32] {
  %x = bf16[64]{0} parameter(0)
  ROOT %fusion.1 = bf16[32]{0} fusion(%x), kind=kCustom, calls=%all-reduce-scatter.1
}
"""


def test_hand_built_ir_without_text() -> None:
    """The IR needs no parser: a dot built by hand."""
    lhs, rhs = Shape("f32", (32, 64)), Shape("f32", (64, 16))
    dot = Instruction("d", "dot", Shape("f32", (32, 16)), ["a", "b"], [lhs, rhs])
    a = Instruction("a", "parameter", lhs, parameter_number=0)
    b = Instruction("b", "parameter", rhs, parameter_number=1)
    dot.dot_dims = DotDims(lhs_contracting=(1,), rhs_contracting=(0,))
    module = Module("m", [Computation("main", [a, b, dot], is_entry=True)], entry="main")
    c = cost_instruction(dot, module)
    assert c.flops == 2 * 32 * 16 * 64
    assert c.hbm_bytes == 4 * (32 * 64 + 64 * 16 + 32 * 16)
    assert math.isclose(c.vector_flops, 0.0)


# XLA:GPU's CommandBufferScheduling outlines a run of ops into a `command_buffer` computation and
# calls it from the entry (the form of its own test's expected output,
# xla/service/gpu/command_buffer_scheduling_test.cc): here two loop fusions and a cuBLAS gemm.
COMMAND_BUFFER_MODULE = Path(__file__).parent / "hlo" / "command_buffer.hlo.txt"


def test_a_command_buffer_call_costs_the_ops_it_runs() -> None:
    from hlogap.bounds.hints import hints_for
    from hlogap.bounds.roofline import bound_op
    from hlogap.chips import load_chip
    from hlogap.cost import cost_module, timed_computations
    from hlogap.hlo.opcodes import categorize

    module = parse_module(COMMAND_BUFFER_MODULE.read_text())
    costs = cost_module(module)
    # The body runs inside the one op the trace times: it is not timed on its own.
    assert set(costs) == {"a", "b", "w", "call"}
    assert [c.name for c in timed_computations(module)] == ["main"]
    body = {i.name: i for i in module.computation("command_buffer").instructions}
    inside = [cost_instruction(body[n], module) for n in ("fusion.2", "fusion.3", "custom-call.1")]
    call = costs["call"]
    assert call.flops == sum(c.flops for c in inside) == 256 * 512 + 2 * 256 * 512 * 128
    assert call.matrix_flops == 2 * 256 * 512 * 128
    assert call.transcendentals == 256 * 512  # the tanh
    # Each kernel still reads and writes HBM: 1.5 MB + 1 MB + the gemm's 896 KB (no workspace).
    assert call.hbm_bytes == sum(c.hbm_bytes for c in inside) == 3 * 2**19 + 2**20 + 917504
    inst = next(i for i in module.entry_computation.instructions if i.name == "call")
    assert categorize(inst, module) == "command buffer"
    chip = load_chip("h100-sxm")
    bound = bound_op(call, chip)
    assert bound.bound_by == "memory"
    assert bound.lower_s == pytest.approx(call.hbm_bytes / chip.hbm_bw)
    hints = hints_for(inst, call, bound, chip, None, measured_us=100.0)
    assert hints[0] == (
        "command buffer of 3 ops timed as one (a CUDA graph): "
        "XLA_FLAGS=--xla_gpu_enable_command_buffer= times each op"
    )
    assert hints[1] == "runs fusion.2, fusion.3, custom-call.1"
