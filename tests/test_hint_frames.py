"""Every hint speaks in its op's own frame: the peak its bound used (by key), the memory rate its
bound used, and it never contradicts the bound-by column. Expected figures come from the HLO's
shapes, the chip file's figures and the trace's own events, not from hlogap's output."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hlogap import audit
from hlogap.bounds.instruction import bound_instruction
from hlogap.chips import load_chip
from hlogap.hlo.text import parse_module
from hlogap.options import AuditOptions
from hlogap.units import fmt_si, fmt_us
from tests.conftest import FIXTURES, SHARED

FLAWS = FIXTURES / "flaws"
NSYS = SHARED / "nvidia-h100-nsys-jax" / "maxtext_fsdp4_test_data.zip"
PEAK, HBM = 1.0e11, 2.0e10  # the test chip's f32 peak and memory bandwidth


def _skinny_dot() -> tuple[float, float]:
    """The skinny matmul's FLOPs and bytes from its HLO: x f32[8,1024] . w f32[1024,1024]."""
    parsed = parse_module((FLAWS / "jit_skinny_matmul.hlo.txt").read_text())
    (dot,) = [i for c in parsed.computations for i in c.instructions if i.opcode == "dot"]
    lhs, rhs = (s for s in dot.operand_shapes if s is not None)
    flops = 2 * lhs.dims[0] * lhs.dims[1] * rhs.dims[1]
    return flops, lhs.byte_size() + rhs.byte_size() + dot.shape.byte_size()


def test_a_matmul_compute_bound_from_cache_gets_no_ridge_advice(tmp_path: Path) -> None:
    # Its bytes fit a cache level fast enough that, at that rate, the ridge falls below its
    # intensity: compute-bound under its own model, so no batch advice (the demo's row 3).
    flops, nbytes = _skinny_dot()
    intensity = flops / nbytes
    cache_bw = 4 * PEAK / intensity  # ridge at that rate: intensity / 4
    chip = tmp_path / "cached.toml"
    chip.write_text(
        f'name = "cached"\n[peak_flops]\nf32 = {PEAK}\n[memory]\nhbm_bw = {HBM}\n'
        f"cache_bw = [[{nbytes * 2}, {cache_bw}]]\n"
    )
    assert intensity < PEAK / HBM  # below the ridge at the memory's own rate
    report = audit(FLAWS, AuditOptions(chip=str(chip)))
    row = next(r for r in report.ops if r.module == "jit_skinny_matmul" and r.flops)
    assert row.bound_by == "compute"
    assert row.t_compute_us == pytest.approx(flops / PEAK * 1e6, rel=1e-6)
    assert row.t_memory_us == pytest.approx(row.bytes / cache_bw * 1e6, rel=1e-6)
    assert not [h for h in row.hints if "ridge" in h or "(batch)" in h]
    refs = [(o.module, o.name) for a in report.actions or [] for o in a.ops]
    ridge_refs = [
        (o.module, o.name)
        for a in report.actions or []
        if a.cause in ("below the ridge", "activation-bound")
        for o in a.ops
    ]
    assert (row.module, row.name) not in ridge_refs
    assert refs.count((row.module, row.name)) <= 1


def test_the_ridge_hint_uses_the_cache_rate_its_bound_used(tmp_path: Path) -> None:
    # A slow cache level: memory-bound there, and the ridge printed is peak / that level's rate.
    flops, nbytes = _skinny_dot()
    cache_bw = HBM * 1.1
    assert flops / nbytes < PEAK / cache_bw  # still below the ridge at the cache's rate
    chip = tmp_path / "slowcache.toml"
    chip.write_text(
        f'name = "slowcache"\n[peak_flops]\nf32 = {PEAK}\n[memory]\nhbm_bw = {HBM}\n'
        f"cache_bw = [[{nbytes * 2}, {cache_bw}]]\n"
    )
    report = audit(FLAWS, AuditOptions(chip=str(chip)))
    row = next(r for r in report.ops if r.module == "jit_skinny_matmul" and r.flops)
    assert row.bound_by == "memory"
    ridge = PEAK / cache_bw
    (hint,) = [h for h in row.hints if "ridge point" in h]
    assert f"slowcache's f32 ridge point {ridge:.0f} (over the {fmt_si(cache_bw, 'B/s')}" in hint


DOT = (
    "%d = f32[{m},{n}]{{1,0}} dot(f32[{m},{k}]{{1,0}} %a, f32[{k},{n}]{{1,0}} %b), "
    "lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}"
)


def test_bound_names_the_peak_key_it_used_for_f32() -> None:
    # h100-sxm has a tf32 peak: an f32 dot runs there (Chip.matrix_key), so every figure says
    # tf32 and the bf16 ratio is bf16 / tf32 from the chip file, not bf16 / the CUDA-core f32.
    h100 = load_chip("h100-sxm")
    small = bound_instruction(DOT.format(m=128, k=4096, n=128), "h100-sxm")
    flops = 2 * 128 * 4096 * 128
    assert small.bound.t_compute_s == pytest.approx(flops / h100.peak_flops["tf32"])
    assert small.bound.bound_by == "memory"
    (ridge_hint,) = small.hints
    ridge = h100.peak_flops["tf32"] / h100.hbm_bw
    assert f"h100-sxm's tf32 ridge point {ridge:.0f}" in ridge_hint
    assert not [h for h in small.hints if "bf16" in h]  # memory-bound: no compute ratio
    big = bound_instruction(DOT.format(m=4096, k=4096, n=4096), "h100-sxm")
    assert big.bound.bound_by == "compute"
    ratio = h100.peak_flops["bf16"] / h100.peak_flops["tf32"]
    assert ratio == pytest.approx(2)
    assert big.hints == [
        f"f32 matmul at h100-sxm's tf32 peak: its bf16 peak is {ratio:.2g}x that; "
        "consider bf16 inputs with f32 accumulation"
    ]


def test_bound_table_says_the_key(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import run_cli

    code, out, _ = run_cli(
        ["bound", DOT.format(m=128, k=4096, n=128), "--chip", "h100-sxm"], capsys
    )
    assert code == 0
    h100 = load_chip("h100-sxm")
    assert "f32 at the tf32 peak" in out
    assert f"ridge point {h100.peak_flops['tf32'] / h100.hbm_bw:.0f} for tf32" in out
    assert " at f32" not in out and "for f32" not in out


def test_achieved_rate_names_the_key_of_its_peak() -> None:
    hlo = DOT.format(m=4096, k=4096, n=4096)
    result = bound_instruction(hlo, "h100-sxm")
    from hlogap.bounds.hints import hints_for

    measured = result.bound.lower_s * 2e6  # at half its bound's rate
    found = hints_for(
        result.instruction, result.cost, result.bound, result.chip, None, measured_us=measured
    )
    assert "achieves" in found[-1] and "50% of the tf32 peak" in found[-1]


ALL_REDUCE = "%ar = f32[1024] all-reduce(f32[1024] %x), replica_groups={}, to_apply=%s"


def test_a_collective_without_a_measurement_is_not_called_link_bound() -> None:
    result = bound_instruction(ALL_REDUCE, "h100-sxm", num_devices=8)
    assert result.bound.bound_by == "communication"
    assert not [h for h in result.hints if "link-bound" in h]
    assert [h for h in result.hints if "latency or waiting" in h]


@pytest.mark.parametrize(
    ("share", "words"),
    [(0.9, "is link-bound: sends"), (0.3, "below the link's rate"), (0.01, "waits, not link")],
)
def test_a_collective_is_link_bound_only_near_its_link_time(share: float, words: str) -> None:
    from hlogap.bounds.hints import hints_for

    result = bound_instruction(ALL_REDUCE, "h100-sxm", num_devices=8)
    link = load_chip("h100-sxm").interconnect_bw
    assert link is not None
    # Ring all-reduce over 8: 2 (n-1)/n of the f32[1024] buffer.
    comm = 2 * 7 / 8 * 4 * 1024
    assert result.cost.comm_bytes == pytest.approx(comm)
    measured_us = comm / (share * link) * 1e6
    found = hints_for(
        result.instruction, result.cost, result.bound, result.chip, None, measured_us=measured_us
    )
    (hint,) = [h for h in found if h.startswith("all-reduce over 8 devices")]
    assert words in hint
    if share >= 0.1:  # the rate beside the link's
        assert f"{share:.0%} of the {fmt_si(link, 'B/s')} link" in hint
    else:  # the link time beside the time taken
        assert f"it took {fmt_us(measured_us)} per occurrence" in hint


def test_the_tiny_nsys_all_reduce_waits() -> None:
    # all-reduce-start.4 of the H100 nsys archive: f32[8] (48 link bytes over 4 devices) taking
    # milliseconds: waiting on its peers, not its link. Its time is the trace's own events.
    if not NSYS.is_file():
        pytest.skip("nsys fixture absent")
    report = audit(NSYS)
    row = next(r for r in report.ops if r.name == "all-reduce-start.4")
    assert row.comm_bytes == pytest.approx(2 * 3 / 4 * 4 * 8)
    per_occurrence = row.measured_us / row.occurrences
    link_us = row.t_comm_us
    assert per_occurrence > 1000 * link_us
    (hint,) = [h for h in row.hints if h.startswith("all-reduce over 4 devices")]
    assert "waits, not link-bound" in hint and "is link-bound" not in hint
    assert f"need {link_us * 1e3:.3g} ns at the 450 GB/s link's rate" in hint
    assert f"it took {per_occurrence / 1e3:.2f} ms per occurrence" in hint
    assert not any(re.match(r"sends .* of the link$", h) for h in row.hints)
