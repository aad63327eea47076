"""`hlogap calibrate`: dot peaks per type measured with XLA, ISA flags, the chip file."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hlogap.chips import calibrate as cal
from hlogap.chips import load_chip

# A small square: the rate is XLA's at a size the test can afford (2 shared cores).
SIZE = 1024


def _xla_rate_apart(dtype: str) -> float:
    """XLA:CPU's own dot rate, timed apart from calibrate: `lax.dot` compiled ahead of time."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    element = {"f32": jnp.float32, "bf16": jnp.bfloat16}[dtype]
    a = jnp.ones((SIZE, SIZE), element)
    compiled = jax.jit(jax.lax.dot).lower(a, a).compile()
    compiled(a, a).block_until_ready()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        compiled(a, a).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    return 2.0 * SIZE**3 / best


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_peak_is_xlas_own_dot_rate(dtype: str) -> None:
    pytest.importorskip("jax")
    rate = cal._xla_dot_rate()
    assert rate is not None
    # Interleaved, best of each: other work on the machine only ever slows a run down.
    peak = apart = 0.0
    for _ in range(3):
        peak = max(peak, cal.dot_peaks(rate, (dtype,), (SIZE,), repeats=3)[dtype])
        apart = max(apart, _xla_rate_apart(dtype))
    assert peak == pytest.approx(apart, rel=0.15)


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
    monkeypatch.setattr(cal, "MATMUL_SIZES", (128,))
    monkeypatch.setattr(cal, "COPY_SIZES_MIB", (1,))
    result = cal.measure(rounds=1, repeats=1)
    assert result.engine == "numpy" and set(result.flops) == {"f32"}
    assert "JAX not importable" in cal.chip_text(result)
