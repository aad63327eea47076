"""`hlogap calibrate`: dot peaks per type measured with XLA, ISA flags, the chip file."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from hlogap.chips import calibrate as cal
from hlogap.chips import load_chip
from hlogap.errors import UsageError
from hlogap.options import AuditOptions
from hlogap.report.model import load_json

# A small square: the rate is XLA's at a size the test can afford (2 shared cores).
SIZE = 1024


def _xla_dot_apart(dtype: str, result: str | None) -> tuple[Any, tuple[Any, Any]]:
    """XLA:CPU's own dot, written apart from calibrate: `lax.dot` compiled ahead of time, and
    its operands."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    element = {"f32": jnp.float32, "bf16": jnp.bfloat16, "f16": jnp.float16, "int8": jnp.int8}
    wide = {None: None, "f32": jnp.float32, "s32": jnp.int32}[result]
    a = jnp.ones((SIZE, SIZE), element[dtype])

    def run(x: Any, y: Any) -> Any:  # its own names: the comparison leaves names out
        return jax.lax.dot(x, y, preferred_element_type=wide)

    return jax.jit(run).lower(a, a).compile(), (a, a)


def _xla_rate_apart(dtype: str) -> float:
    """The fastest of XLA:CPU's own dots of a type (each result type it may run it with)."""
    best = float("inf")
    for result in cal.RESULT_TYPES[dtype]:
        compiled, args = _xla_dot_apart(dtype, result)
        compiled(*args).block_until_ready()
        for _ in range(3):
            t0 = time.perf_counter()
            compiled(*args).block_until_ready()
            best = min(best, time.perf_counter() - t0)
    return 2.0 * SIZE**3 / best


def _program(text: str) -> list[str]:
    """An HLO module's instructions without names of modules, metadata or stack frames."""
    body = text[text.index("\n") :] if text.startswith("HloModule") else text
    lines = [re.sub(r",? metadata=\{[^}]*\}", "", line).strip() for line in body.splitlines()]
    kept = [line for line in lines if "=" in line and not re.match(r"^\d+ ", line)]
    return [re.sub(r"%[\w.\-]+", "%", line) for line in kept]  # instruction names as well


@pytest.mark.parametrize("dtype", list(cal.DTYPES))
def test_calibration_times_xlas_own_dots(dtype: str) -> None:
    """What calibrate times is XLA's own `lax.dot` of the type, compiled alike: the same HLO
    program as one written apart, for each result type XLA may run the type with (bf16 -> bf16
    converts around an f32 dot, bf16 -> f32 runs on bf16 units). Never a matter of load."""
    jax = pytest.importorskip("jax")
    a, _ = cal.xla_operands(dtype, SIZE)
    dots = cal.xla_dots(dtype)
    assert len(dots) == len(cal.RESULT_TYPES[dtype])
    for run, result in zip(dots, cal.RESULT_TYPES[dtype], strict=True):
        # Lowered for the operands' shape and type alone (as the apart one): the same program.
        spec = jax.ShapeDtypeStruct(a.shape, a.dtype)  # type: ignore[attr-defined]
        mine = run.lower(spec, spec).compile().as_text()  # type: ignore[attr-defined]
        apart = _xla_dot_apart(dtype, result)[0].as_text()
        assert _program(mine) == _program(apart), (dtype, result)


def test_rate_is_the_best_timing_of_the_fastest_dot(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rate calibrate reports for a size: 2 n^3 over the best timing of the fastest of the
    type's dots (a clock whose ticks the test sets: no load can move it)."""
    pytest.importorskip("jax")
    rate = cal._xla_dot_rate()
    assert rate is not None
    rate("bf16", SIZE, 1)  # compiled and warmed up on the real clock, then kept
    ticks = iter([0.0, 4.0, 10.0, 12.0, 20.0, 23.0, 30.0, 31.0, 40.0, 45.0, 50.0, 52.0])
    monkeypatch.setattr(cal.time, "perf_counter", lambda: next(ticks))
    # bf16: two dots (-> bf16, -> f32), 3 timings each: 4, 2, 3 s and 1, 5, 2 s.
    assert rate("bf16", SIZE, 3) == 2.0 * SIZE**3 / 1.0
    assert next(ticks, None) is None


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_peak_is_xlas_own_dot_rate(dtype: str) -> None:
    """Calibrate's rate against XLA's own dot timed apart, interleaved, best of each (other
    work only ever slows a run down). A machine too busy for any of 3 attempts to agree
    within 15% says nothing of calibrate: the test skips there (the programs timed and the
    rate's arithmetic are checked above, whatever the load), so it never fails on load."""
    pytest.importorskip("jax")
    rate = cal._xla_dot_rate()
    assert rate is not None
    tries = []
    for _ in range(3):
        peak = apart = 0.0
        for _ in range(3):
            peak = max(peak, cal.dot_peaks(rate, (dtype,), (SIZE,), repeats=3)[dtype])
            apart = max(apart, _xla_rate_apart(dtype))
        tries.append((peak, apart))
        if abs(peak - apart) <= 0.15 * apart:
            return
    pytest.skip(f"the machine is too busy to compare dot rates: {tries}")


def test_isa_flags_from_cpuinfo(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma avx512f avx512_bf16 amx_tile amx_bf16 "
        "amx_int8\n\nprocessor\t: 1\nflags\t\t: fpu avx2\n"
    )
    assert cal.isa_flags(info) == (
        "avx2",
        "fma",
        "avx512f",
        "avx512_bf16",
        "amx_tile",
        "amx_bf16",
        "amx_int8",
    )
    assert cal.isa_flags(tmp_path / "absent") == ()


def test_chip_file_per_type(tmp_path: Path) -> None:
    flops = {"f32": 3.49e11, "bf16": 1.548e12, "f16": 3.0e11, "int8": 2.0e12}
    result = cal.Calibration(flops, 9.5e10, 0.02, 0.03, "xla", ("avx2", "fma", "amx_bf16"))
    path = tmp_path / "cpu.toml"
    path.write_text(cal.chip_text(result))
    chip = load_chip(str(path))
    assert chip.peak_flops == flops
    assert chip.matrix_peak("bf16") == 1.548e12 and chip.matrix_peak("s8") == 2.0e12
    assert "AMX-BF16" in chip.sources["peak_flops.bf16"]
    assert "no f16 unit" in chip.sources["peak_flops.f16"]


def test_numpy_fallback_measures_f32_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cal, "_xla_dot_rate", lambda: None)
    monkeypatch.setattr(cal, "_xla_stream_rate", lambda: None)
    monkeypatch.setattr(cal, "MATMUL_SIZES", (128,))
    monkeypatch.setattr(cal, "STREAM_SIZES_KIB", (128, 1024))
    result = cal.measure(rounds=1, repeats=1)
    assert result.engine == "numpy" and set(result.flops) == {"f32"}
    assert [size for size, _ in result.cache_bw] == [128 * 1024]  # the largest is the memory
    assert "JAX not importable" in cal.chip_text(result)


# Committed CPU fixtures whose elementwise fusions move a few hundred KB: under the memory's
# rate alone they run at up to 1.8x the roof (`mlp_rerun`'s 264 KB `broadcast_add_fusion`
# at 1.09x); their bytes fit the L2 cache, whose rate bounds them.
CACHE_RESIDENT = {
    "mlp_rerun": "broadcast_add_fusion",
    "mem_remat": "broadcast_multiply_fusion",
    "sharded_train": "multiply_add_fusion",
}


def test_cache_resident_ops_stay_under_their_roof(tmp_path: Path) -> None:
    pytest.importorskip("jax")
    from hlogap import audit
    from tests.conftest import FIXTURES

    stream, dot = cal._xla_stream_rate(), cal._xla_dot_rate()
    assert stream is not None and dot is not None
    # The best of 3 rounds, as `hlogap calibrate` keeps: other work only ever slows one down.
    rounds = [cal.stream_bandwidths(stream, repeats=3) for _ in range(3)]
    rates = {n: max(r[n] for r in rounds) for n in rounds[0]}
    spread = max((rates[n] - min(r[n] for r in rounds)) / rates[n] for n in rates)
    sizes = sorted(rates)
    result = cal.Calibration(
        cal.dot_peaks(dot, ("f32",), (512,), repeats=3),
        rates[sizes[-1]],
        0.0,
        0.0,
        "xla",
        cal.isa_flags(),
        tuple((n, rates[n]) for n in sizes[:-1]),
    )
    path = tmp_path / "cpu.toml"
    path.write_text(cal.chip_text(result))
    for program, op in CACHE_RESIDENT.items():
        report = audit(FIXTURES / program, AuditOptions(chip=str(path)))
        (row,) = (r for r in report.ops if r.name == op)
        assert row.bound_by == "memory" and row.bytes < sizes[0] * 4
        assert 0 < (row.efficiency or 0) <= 1.0, (program, op, row.efficiency)
        # Its roof is a cache level's rate, not the memory's (its hint says so, unless an
        # action's words took its place).
        chip = report.chip
        assert chip is not None
        per_run = row.bytes / row.runs_per_occurrence
        assert chip.memory_bw(per_run) > chip.hbm_bw
        assert row.t_memory_us == pytest.approx(row.bytes / chip.memory_bw(per_run) * 1e6)
        over = [(r.name, r.efficiency) for r in report.ops if r.bound_by == "memory"]
        assert all((e or 0) <= 1.0 for _, e in over), over
        if spread <= cal.NOISE_LIMIT:  # a quiet machine's levels are never beaten
            assert [r for r in report.raised if r.figure.startswith("memory.")] == []


def test_memory_roof_by_bytes(tmp_path: Path) -> None:
    path = tmp_path / "cpu.toml"
    path.write_text(
        'name = "c"\n[peak_flops]\nf32 = 1e11\n[memory]\nhbm_bw = 2.5e10\n'
        "cache_bw = [[8388608, 9e10], [524288, 1.1e11], [33554432, 2e10]]\n"
    )
    chip = load_chip(str(path))
    assert chip.cache_bw[0] == (524288, 1.1e11)  # smallest first
    assert chip.memory_bw(264_192) == 1.1e11
    assert chip.memory_bw(4 << 20) == 9e10
    assert chip.memory_bw(16 << 20) == 2.5e10  # a level slower than the memory is not a roof
    assert chip.memory_bw(1 << 30) == 2.5e10
    bad = tmp_path / "bad.toml"
    bad.write_text(path.read_text().replace("[8388608, 9e10]", "[8388608]"))
    with pytest.raises(UsageError, match="cache_bw"):
        load_chip(str(bad))


def test_no_committed_cpu_fixture_op_beats_a_fresh_calibration(tmp_path: Path) -> None:
    pytest.importorskip("jax")
    from hlogap import audit
    from tests.conftest import cpu_fixtures

    result = cal.measure(rounds=3)
    path = tmp_path / "cpu.toml"
    path.write_text(cal.chip_text(result))
    reports = [audit(program, AuditOptions(chip=str(path))) for program in cpu_fixtures()]
    over = [
        (report.path, row.name, row.efficiency)
        for report in reports
        for row in report.ops
        if (row.efficiency or 0) > 1.0
    ]
    assert over == []
    if not result.noisy:  # taken on a quiet machine, the calibration itself is never beaten
        assert [(r.path, r.raised) for r in reports if r.raised] == []


# What a calibration taken while other work ran might keep: every figure far below the
# machine's (the dots at 20 GFLOP/s, the memory and cache levels at 5-10 GB/s).
BUSY = cal.Calibration(
    {"f32": 2e10, "bf16": 2e10}, 5e9, 0.3, 0.3, "xla", (), ((524288, 1e10), (8 << 20, 8e9))
)


def test_a_busy_calibration_is_raised_to_the_ops_rates(tmp_path: Path) -> None:
    from hlogap import audit
    from hlogap.bounds.measured import round_up
    from tests.conftest import cpu_fixtures

    path = tmp_path / "cpu.toml"
    path.write_text(cal.chip_text(BUSY))
    raised_any = False
    for program in cpu_fixtures():
        report = audit(program, AuditOptions(chip=str(path)))
        assert [(o.name, o.efficiency) for o in report.ops if (o.efficiency or 0) > 1.0] == []
        assert report.chip is not None
        for r in report.raised:
            raised_any = True
            (row,) = (o for o in report.ops if (o.module, o.name) == (r.module, r.op))
            # The op that raised a figure runs at its roof: raised no higher than it needed.
            assert 0.999 <= (row.efficiency or 0) <= 1.0, (program.name, r)
            assert r.raised > r.calibrated
            assert r.figure in report.chip.sources and r.op in report.chip.sources[r.figure]
            if r.figure.startswith("memory."):
                # The rate is the op's HLO bytes over its trace events' time, per run.
                seconds = row.measured_us * 1e-6 / row.occurrences
                assert r.raised == round_up(row.bytes / seconds), (program.name, r)
        # Saved and loaded, the report keeps what was raised.
        saved = tmp_path / f"{program.name}.json"
        saved.write_text(json.dumps(report.to_dict()))
        assert load_json(saved, "report").raised == report.raised
    assert raised_any


def test_a_data_sheet_is_never_raised(tmp_path: Path) -> None:
    """The same figures without `[calibration]` (a user's chip file): an op beating them is
    shown beating them, with the hint saying the figures are wrong."""
    from hlogap import audit
    from hlogap.bounds.hints import FASTER_THAN_ROOF
    from tests.conftest import FIXTURES

    text = cal.chip_text(BUSY)
    path = tmp_path / "sheet.toml"
    path.write_text(text[: text.index("[calibration]")] + text[text.index("[sources]") :])
    report = audit(FIXTURES / "mlp", AuditOptions(chip=str(path)))
    assert report.raised == []
    fast = [o for o in report.ops if (o.efficiency or 0) > 1.0]
    assert fast and all(o.hints[0].startswith(FASTER_THAN_ROOF) for o in fast)


def test_a_diff_of_two_raised_sides_says_why_the_chips_differ(tmp_path: Path) -> None:
    """One busy calibration, raised to each profile's own ops: the bounds of the two sides
    differ, and the warning says so rather than 'pass the same --chip to both' (it was)."""
    from hlogap import audit
    from hlogap.report.compare import compare
    from tests.conftest import FIXTURES

    path = tmp_path / "cpu.toml"
    path.write_text(cal.chip_text(BUSY))
    base, new = (
        audit(FIXTURES / "mlp", AuditOptions(chip=str(path))),
        audit(FIXTURES / "mlp_rerun", AuditOptions(chip=str(path))),
    )
    assert base.raised and new.raised
    assert base.chip is not None and new.chip is not None
    if base.chip.peak_flops == new.chip.peak_flops and base.chip.hbm_bw == new.chip.hbm_bw:
        pytest.skip("both profiles raised the same figures to the same rates")
    (warning,) = (w for w in compare(base, new).warnings if "the chips differ" in w)
    assert "the calibrated figures were raised" in warning
    assert "pass the same --chip" not in warning
