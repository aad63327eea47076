"""A measured chip's peaks move only with ops of their own type (issue 40 item 6): a dot that
reads bf16 raises the bf16 peak, never the f32 one every f32 dot is bounded by."""

from __future__ import annotations

from pathlib import Path

from hlogap.bounds.measured import TimedCost, raise_to_ops
from hlogap.bounds.roofline import bound_op
from hlogap.chips import Chip, load_chip
from hlogap.cost import OpCost, cost_module
from hlogap.hlo.text import parse_module

GFLOP = 1e9


def _chip(tmp_path: Path, peaks: str) -> Chip:
    path = tmp_path / "cpu.toml"
    path.write_text(
        f'name = "cpu"\n[peak_flops]\n{peaks}\n[memory]\nhbm_bw = 1e12\n'
        "[calibration]\nflops_spread = 0.5\n"
    )
    chip = load_chip(str(path))
    assert chip.measured
    return chip


def _dot(dtype: str, seconds: float, flops: float = 100 * GFLOP) -> TimedCost:
    cost = OpCost(flops=flops, matrix_flops=flops, matrix_dtype=dtype, hbm_read_bytes=1.0)
    return TimedCost("jit_step", f"dot_{dtype}", cost, seconds)


def test_a_bf16_dot_raises_only_the_bf16_peak(tmp_path: Path) -> None:
    # A busy calibration: f32 150 GFLOP/s, bf16 200. The bf16 dot ran at 769 GFLOP/s.
    chip = _chip(tmp_path, "f32 = 1.5e11\nbf16 = 2.0e11")
    raised_chip, raised = raise_to_ops(chip, [_dot("bf16", 100 / 769), _dot("f32", 1.0)])
    assert [r.figure for r in raised] == ["peak_flops.bf16"]
    assert raised_chip.peak_flops["f32"] == 1.5e11
    assert raised_chip.peak_flops["bf16"] >= 7.69e11
    # The f32 dot keeps its bound, the bf16 dot is under its roof now.
    assert bound_op(_dot("f32", 1.0).cost, raised_chip).lower_s == 100 / 150
    assert bound_op(_dot("bf16", 0).cost, raised_chip).lower_s <= 100 / 769


def test_a_type_without_its_own_peak_gets_one(tmp_path: Path) -> None:
    # A numpy calibration (f32 only): the bf16 dot is bounded by the f32 peak it falls back
    # to; beating it adds a bf16 figure and leaves f32 alone.
    chip = _chip(tmp_path, "f32 = 1.5e11")
    raised_chip, raised = raise_to_ops(chip, [_dot("bf16", 100 / 769)])
    (figure,) = raised
    assert (figure.figure, figure.calibrated) == ("peak_flops.bf16", 1.5e11)
    assert raised_chip.peak_flops["f32"] == 1.5e11
    assert raised_chip.matrix_peak("bf16") == figure.raised >= 7.69e11
    assert raised_chip.matrix_peak("f32") == 1.5e11


def test_an_f32_dot_still_raises_f32(tmp_path: Path) -> None:
    chip = _chip(tmp_path, "f32 = 1.5e11\nbf16 = 2.0e11")
    raised_chip, raised = raise_to_ops(chip, [_dot("f32", 100 / 300)])
    assert [r.figure for r in raised] == ["peak_flops.f32"]
    assert raised_chip.peak_flops["bf16"] == 2.0e11


FUSED = """HloModule m
%fused (p0: bf16[64,128], p1: bf16[128,32]) -> f32[64,32] {
  %p0 = bf16[64,128]{1,0} parameter(0)
  %p1 = bf16[128,32]{1,0} parameter(1)
  %c0 = f32[64,128]{1,0} convert(%p0)
  %c1 = f32[128,32]{1,0} convert(%p1)
  ROOT %d = f32[64,32]{1,0} dot(%c0, %c1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
ENTRY %e (a: bf16[64,128], b: bf16[128,32], x: f32[64,128], y: f32[128,32]) -> f32[64,32] {
  %a = bf16[64,128]{1,0} parameter(0)
  %b = bf16[128,32]{1,0} parameter(1)
  %x = f32[64,128]{1,0} parameter(2)
  %y = f32[128,32]{1,0} parameter(3)
  %ynn_fusion = f32[64,32]{1,0} fusion(%a, %b), kind=kCustom, calls=%fused
  %ca = f32[64,128]{1,0} convert(%a)
  %cb = f32[128,32]{1,0} convert(%b)
  %apart = f32[64,32]{1,0} dot(%ca, %cb), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %plain = f32[64,32]{1,0} dot(%x, %y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


def test_a_dot_reads_what_its_fusion_widens_as_the_narrower_type() -> None:
    """A fusion that converts its bf16 inputs to f32 for its dot reads bf16 (XLA:CPU's YNNPACK
    runs it on the bf16 units): its peak is bf16's. Converts that are ops of their own (the
    entry's) leave the dot reading f32."""
    costs = cost_module(parse_module(FUSED))
    assert costs["ynn_fusion"].matrix_dtype == "bf16"
    assert costs["apart"].matrix_dtype == "f32"
    assert costs["plain"].matrix_dtype == "f32"
    assert costs["ynn_fusion"].matrix_flops == 2 * 64 * 32 * 128
