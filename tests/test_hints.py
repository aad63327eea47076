"""Hints say why an op is slow; the roofline chart draws the audit."""

from __future__ import annotations

from pathlib import Path

import pytest

from hlogap import audit
from hlogap.bounds.hints import hints_for
from hlogap.bounds.instruction import bound_instruction
from hlogap.bounds.roofline import bound_op
from hlogap.chips import load_chip
from hlogap.cost import cost_instruction
from hlogap.errors import UsageError
from hlogap.hlo.opcodes import async_role
from hlogap.hlo.text import parse_instruction
from tests.conftest import AMD_FILES


def hints(hlo: str, chip: str, measured_us: float | None = None) -> list[str]:
    inst = parse_instruction(hlo)
    the_chip = load_chip(chip)
    cost = cost_instruction(inst)
    bound = bound_op(cost, the_chip, async_role(inst.opcode, inst.name))
    return hints_for(inst, cost, bound, the_chip, None, measured_us)


def test_low_intensity_matmul_names_the_ridge_point() -> None:
    hlo = (
        "%d = bf16[16,8192]{1,0} dot(bf16[16,8192]{1,0} %x, bf16[8192,8192]{1,0} %w), "
        "lhs_contracting_dims={1}, rhs_contracting_dims={0}"
    )
    (hint,) = [h for h in hints(hlo, "tpu-v5e") if "ridge point" in h]
    assert "below tpu-v5e's bf16 ridge point 241" in hint


def test_f32_matmul_on_a_bf16_machine() -> None:
    hlo = (
        "%d = f32[4096,4096]{1,0} dot(f32[4096,4096]{1,0} %x, f32[4096,4096]{1,0} %w), "
        "lhs_contracting_dims={1}, rhs_contracting_dims={0}"
    )
    a100 = load_chip("a100-sxm")  # f32 dots run at its tf32 peak: the ratio is against that
    ratio = a100.peak_flops["bf16"] / a100.peak_flops["tf32"]
    assert f"f32 matmul at a100-sxm's tf32 peak: its bf16 peak is {ratio:.2g}x that" in " ".join(
        hints(hlo, "a100-sxm")
    )


def test_tile_padding_is_reported_with_its_share() -> None:
    hlo = "%a = f32[3,5]{1,0:T(8,128)} add(f32[3,5]{1,0:T(8,128)} %x, f32[3,5]{1,0:T(8,128)} %y)"
    (hint,) = [h for h in hints(hlo, "tpu-v5e") if "padding" in h]
    assert hint.startswith("tile padding is 99% of the bytes moved")


def test_layout_copy_and_transpose() -> None:
    hlo = "%t = f32[1024,512]{1,0} transpose(f32[512,1024]{1,0} %x), dimensions={1,0}"
    assert any(h.startswith("layout change") for h in hints(hlo, "h100-sxm"))


def test_exposed_async_collective() -> None:
    hlo = "%ard = f32[1024]{0} all-reduce-done(f32[1024]{0} %ars)"
    found = hints(hlo, "tpu-v5e", measured_us=37.0)
    assert any(h.startswith("async op not overlapped: the device waits 37.0 us") for h in found)


def test_unmodeled_custom_call_says_why() -> None:
    result = bound_instruction(
        '%c = f32[64]{0} custom-call(f32[64]{0} %x), custom_call_target="my_kernel"', "h100-sxm"
    )
    assert result.bound.bound_by == "unmodeled"
    assert result.hints == ["unmodeled: custom call 'my_kernel' has no cost model"]


@pytest.mark.parametrize("suffix", [".svg", ".png", ".html"])
def test_roofline_chart(suffix: str, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = AMD_FILES["mi355x"]
    if not path.is_file():
        pytest.skip("AMD fixture absent")
    from hlogap.render.plot import draw_plot

    data = draw_plot(audit(path), tmp_path / f"roofline{suffix}")
    assert data.startswith(b"\x89PNG") if suffix == ".png" else b"<svg" in data
    if suffix == ".svg":
        assert b"gemm_fusion_dot" in data  # the ops losing most time are labelled


def test_roofline_chart_rejects_other_formats(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from hlogap.render.plot import draw_plot

    path = AMD_FILES["mi300x"]
    if not path.is_file():
        pytest.skip("AMD fixture absent")
    with pytest.raises(UsageError, match=r"takes a \.svg, \.png or \.html"):
        draw_plot(audit(path), tmp_path / "chart.pdf")


def test_beating_the_roof_says_the_roof_is_wrong() -> None:
    hlo = (
        "%d = f32[512,512]{1,0} dot(f32[512,512]{1,0} %x, f32[512,512]{1,0} %w), "
        "lhs_contracting_dims={1}, rhs_contracting_dims={0}"
    )
    found = hints(hlo, "l4", measured_us=0.001)
    assert found[0].startswith("faster than the roofline: l4's peaks are too low")


def test_collective_on_a_chip_without_link_bandwidth_says_why(tmp_path: Path) -> None:
    chip = tmp_path / "nolink.toml"
    chip.write_text('name = "nolink"\n[peak_flops]\nbf16 = 1e14\n[memory]\nhbm_bw = 1e12\n')
    result = bound_instruction(
        "%ar = f32[1024]{0} all-reduce(f32[1024]{0} %x), replica_groups={{0,1,2,3}}, to_apply=%add",
        str(chip),
    )
    assert result.bound.bound_by == "unmodeled"
    assert result.hints == ["unmodeled: chip nolink has no interconnect bandwidth for its 6.14 kB"]


def test_layout_hint_only_where_data_moves() -> None:
    # [8,1] -> [1,8] keeps the bytes in place: the cost model proves it a bitcast, so no hint
    # says data is copied; [8,4] -> [4,8] does move every element.
    bitcast = "%t = f32[1,8]{1,0} transpose(f32[8,1]{1,0} %p), dimensions={1,0}"
    moved = "%t = f32[4,8]{1,0} transpose(f32[8,4]{1,0} %p), dimensions={1,0}"
    assert cost_instruction(parse_instruction(bitcast)).hbm_bytes == 0
    assert not [h for h in hints(bitcast, "h100-sxm") if "layout change" in h]
    assert [h for h in hints(moved, "h100-sxm") if "layout change" in h]


def test_ops_that_do_no_work_are_bound_by_none() -> None:
    # A bitcast transpose, a while's own time, a done that only waits: no FLOPs, no bytes.
    bitcast = "%t = f32[1,8]{1,0} transpose(f32[8,1]{1,0} %p), dimensions={1,0}"
    the_chip = load_chip("h100-sxm")
    for hlo in (bitcast, "%w = (s32[], f32[8]) while((s32[], f32[8]) %t), condition=%c, body=%b"):
        inst = parse_instruction(hlo)
        bound = bound_op(cost_instruction(inst), the_chip, async_role(inst.opcode, inst.name))
        assert bound.bound_by == "none" and bound.lower_s == 0
        (hint,) = hints(hlo, "h100-sxm", measured_us=3.0)
        assert hint.startswith("no work the roofline counts") and "3.0 us" in hint
    work = "%a = f32[1024]{0} add(f32[1024]{0} %x, f32[1024]{0} %y)"
    assert bound_op(cost_instruction(parse_instruction(work)), the_chip).bound_by == "memory"
