"""Describe this machine's CPU as a chip: measure matmul FLOP/s and memory bandwidth with numpy.

No data sheet gives the roofline of an arbitrary host, so CPU profiles are judged against what
this machine measurably does; the chip file records how each figure was measured.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hlogap.chips.database import calibrated_path, load_chip
from hlogap.chips.spec import Chip
from hlogap.errors import HlogapError
from hlogap.files import write_text


def _best_of(fn: Callable[..., object], args: tuple[object, ...], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - t0)
    return best


# A roof must not be beaten: XLA:CPU ops whose arrays fit in cache run at cache speed, so the
# memory rate is measured by the bytes an op moves (read + written), from L2-sized to
# DRAM-sized, with XLA's own elementwise op where JAX imports (on all the cores it uses), else
# numpy copies: each size below the largest is a cache level of the chip file (`[memory]
# cache_bw`), the largest is its memory.
STREAM_SIZES_KIB = (128, 512, 2 << 10, 8 << 10, 32 << 10, 128 << 10, 512 << 10)
# Bytes moved per timing at least: small ops are timed in batches (a loop of them), so the call
# overhead does not hide the rate of an op that takes a few microseconds.
STREAM_BATCH_BYTES = 256 << 20
MATMUL_SIZES = (512, 1024, 2048)
# The dot types a chip file has peaks for, measured where the engine runs them. XLA:CPU runs
# each (bf16, f16 through the CPU's own units where it has them, else converted to f32; s8 x s8
# into s32), so each gets the rate XLA itself reaches.
DTYPES = ("f32", "bf16", "f16", "int8")
# How XLA:CPU may run a dot of each type: the result type each is timed with (None: the
# operands'). A bf16 x bf16 -> bf16 dot is converted to f32 around an f32 dot, while
# bf16 x bf16 -> f32 (mixed precision's accumulation) runs on the CPU's bf16 units where it
# has them (AVX512-BF16, AMX): 9.7e10 against 3.1e11 FLOP/s on one EPYC. The peak is the
# fastest way XLA runs the type, as a program's dots of it can run.
RESULT_TYPES: dict[str, tuple[str | None, ...]] = {
    "f32": (None,),
    "bf16": (None, "f32"),
    "f16": (None, "f32"),
    "int8": ("s32",),
}
# /proc/cpuinfo flags that say which units a CPU has for each type (x86; others list none).
ISA_FLAGS = (
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "avx512_vnni",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "amx_fp16",
)
UNITS = {
    "bf16": ("amx_bf16", "avx512_bf16"),
    "f16": ("amx_fp16", "avx512_fp16"),
    "int8": ("amx_int8", "avx512_vnni", "avx_vnni"),
}


# Rounds of the whole measurement; runs that disagree by more than this are worth a warning.
ROUNDS = 3
NOISE_LIMIT = 0.10


@dataclass(frozen=True)
class Calibration:
    """This machine's best dot FLOP/s per type and copy bandwidth (read + write, bytes/s) of
    the largest size, how much the rounds disagreed ((best - worst) / best of each
    round's best, the worst type's), the engine that ran the dots (`xla` through JAX, else
    `numpy`: f32 only), the CPU's ISA flags among `ISA_FLAGS`, and (bytes moved, bytes/s) of
    each smaller size: the cache levels."""

    flops: dict[str, float]
    bandwidth: float
    flops_spread: float
    bandwidth_spread: float
    engine: str = "xla"
    isa: tuple[str, ...] = ()
    cache_bw: tuple[tuple[int, float], ...] = ()
    # Each round's best FLOP/s per type, in round order (the chip file keeps them: what the
    # spread is of).
    flops_rounds: tuple[tuple[str, tuple[float, ...]], ...] = ()

    @property
    def noisy(self) -> bool:
        return max(self.flops_spread, self.bandwidth_spread) > NOISE_LIMIT


DotRate = Callable[[str, int, int], float]


def _numpy_dot_rate(dtype: str, size: int, repeats: int) -> float:
    """FLOP/s of an f32 numpy matmul (numpy has no bf16, and no BLAS for f16 or int8)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = a.T.copy()
    np.matmul(a, b)  # warm up BLAS threads
    return 2.0 * size**3 / _best_of(np.matmul, (a, b), repeats)


def xla_dots(dtype: str) -> list[Callable[..., object]]:
    """The dots calibration times for a type (jitted, one per `RESULT_TYPES` entry): XLA's own
    `lax.dot` of two operands of the type, with each result type XLA may run it with."""
    import jax
    import jax.numpy as jnp

    def dot(result: str | None) -> Callable[..., object]:
        wide = None if result is None else jnp.dtype({"f32": "float32", "s32": "int32"}[result])

        def run(a: jax.Array, b: jax.Array) -> jax.Array:
            return jax.lax.dot(a, b, preferred_element_type=wide)

        return jax.jit(run)

    return [dot(result) for result in RESULT_TYPES[dtype]]


def xla_operands(dtype: str, size: int) -> tuple[object, object]:
    """Two square operands of a type on the CPU device."""
    import jax
    import jax.numpy as jnp

    types = {"f32": jnp.float32, "bf16": jnp.bfloat16, "f16": jnp.float16, "int8": jnp.int8}
    cpu = jax.devices("cpu")[0]
    a = jax.device_put(jnp.ones((size, size), types[dtype]), cpu)
    return a, jax.device_put(jnp.ones((size, size), types[dtype]), cpu)


def _xla_dot_rate() -> DotRate | None:
    """A function timing XLA:CPU's own dots of a type and size (`xla_dots`: the fastest way XLA
    runs the type); None without JAX."""
    try:
        import jax  # noqa: F401
    except ImportError:
        return None
    # The compiled dots and their operands per (type, size), made on first use: rounds reuse them.
    runs: dict[tuple[str, int], list[Callable[[], object]]] = {}

    def make(dtype: str, size: int) -> list[Callable[[], object]]:
        a, b = xla_operands(dtype, size)
        timed: list[Callable[[], object]] = []
        for run in xla_dots(dtype):
            run(a, b).block_until_ready()  # type: ignore[attr-defined]  # compile, warm up

            def once(run: Callable[..., object] = run) -> object:
                return run(a, b).block_until_ready()  # type: ignore[attr-defined]

            timed.append(once)
        return timed

    def rate(dtype: str, size: int, repeats: int) -> float:
        timed = runs.get((dtype, size))
        if timed is None:
            timed = runs[(dtype, size)] = make(dtype, size)
        return 2.0 * size**3 / min(_best_of(once, (), repeats) for once in timed)

    return rate


def dot_peaks(
    rate: DotRate, dtypes: tuple[str, ...], sizes: tuple[int, ...], repeats: int
) -> dict[str, float]:
    """Each type's best dot FLOP/s over square sizes."""
    return {d: max(rate(d, n, repeats) for n in sizes) for d in dtypes}


StreamRate = Callable[[int, int], float]


def _numpy_stream_rate(nbytes: int, repeats: int) -> float:
    """Bytes/s of numpy copies moving `nbytes` each (half read, half written), batched."""
    src = np.ones(max(1, nbytes // 8), dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # the pages touched, the cache warm
    batch = max(1, STREAM_BATCH_BYTES // nbytes)

    def copies() -> None:
        for _ in range(batch):
            np.copyto(dst, src)

    return 2.0 * src.nbytes * batch / _best_of(copies, (), repeats)


def _xla_stream_rate() -> StreamRate | None:
    """A function timing XLA:CPU's own elementwise op (y * a + b on f32, read and written
    once) moving a number of bytes, as a loop of them; None without JAX."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    cpu = jax.devices("cpu")[0]

    runs: dict[int, tuple[Callable[[], object], int]] = {}  # per size, reused by rounds

    def make(nbytes: int) -> tuple[Callable[[], object], int]:
        n = max(1, nbytes // 8)
        trips = max(2, STREAM_BATCH_BYTES // nbytes)

        def step(_: int, y: jax.Array) -> jax.Array:
            return y * 1.0001 + 0.5

        def loop(y: jax.Array) -> jax.Array:
            out: jax.Array = jax.lax.fori_loop(0, trips, step, y)
            return out

        # The array is donated and handed back: each run updates it in place, so no run pays
        # for allocating (and faulting in) a fresh buffer, which real ops in a loop do not.
        run = jax.jit(loop, donate_argnums=0)
        state = [run(jax.device_put(jnp.ones((n,), jnp.float32), cpu))]  # compile, warm up

        def once() -> object:
            state[0] = run(state[0])
            return state[0].block_until_ready()

        return once, 8 * n * trips

    def rate(nbytes: int, repeats: int) -> float:
        found = runs.get(nbytes)
        if found is None:
            found = runs[nbytes] = make(nbytes)
        once, moved = found
        return moved / _best_of(once, (), repeats)

    return rate


def stream_bandwidths(rate: StreamRate, repeats: int) -> dict[int, float]:
    """Bytes/s by the bytes an op moves (read + written), over `STREAM_SIZES_KIB`."""
    return {kib * 1024: rate(kib * 1024, repeats) for kib in STREAM_SIZES_KIB}


def isa_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, ...]:
    """The CPU's flags among `ISA_FLAGS` (Linux x86 `/proc/cpuinfo`); () where not told."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return ()
    found: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            found.update(value.split())
    return tuple(f for f in ISA_FLAGS if f in found)


def measure(rounds: int = ROUNDS, repeats: int = 1) -> Calibration:
    """The best of `rounds` rounds (`repeats` timings of each figure in each), and their
    spread. Dots run on XLA:CPU when JAX imports (the engine that runs the programs hlogap
    audits), else numpy's f32 matmul."""
    xla = _xla_dot_rate()
    rate, dtypes = (xla, DTYPES) if xla is not None else (_numpy_dot_rate, ("f32",))
    stream = _xla_stream_rate() or _numpy_stream_rate
    results = [
        (dot_peaks(rate, dtypes, MATMUL_SIZES, repeats), stream_bandwidths(stream, repeats))
        for _ in range(rounds)
    ]
    flops = {d: max(r[0][d] for r in results) for d in dtypes}  # the best round's, per type
    worst = {d: min(r[0][d] for r in results) for d in dtypes}
    sizes = sorted(results[0][1])
    copies = {n: [r[1][n] for r in results] for n in sizes}
    memory = copies[sizes[-1]]
    return Calibration(
        flops,
        max(memory),
        max((flops[d] - worst[d]) / flops[d] for d in dtypes),
        max((max(c) - min(c)) / max(c) for c in copies.values()),
        "xla" if xla is not None else "numpy",
        isa_flags(),
        tuple((n, max(copies[n])) for n in sizes[:-1]),
        tuple((d, tuple(r[0][d] for r in results)) for d in dtypes),
    )


def machine_memory_bytes() -> int | None:
    """This machine's RAM (`sysconf`: pages x page size): a CPU device's memory capacity."""
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # not POSIX, or not told
        return None
    return pages * size if pages > 0 and size > 0 else None


def _unit(dtype: str, isa: tuple[str, ...]) -> str:
    """Which of the CPU's units runs a type's dots, as its flags say."""
    if dtype == "f32":
        return "FMA" if "fma" in isa else "no FMA flag"
    found = [f for f in UNITS[dtype] if f in isa]
    if found:
        return found[0].upper().replace("_", "-")
    return f"no {dtype} unit ({'/'.join(UNITS[dtype])} absent): XLA:CPU converts"


def _results(dtype: str) -> str:
    """The result types a type's dots were timed with, as a chip file's source says them."""
    named = [r or dtype for r in RESULT_TYPES.get(dtype, (None,))]
    return "" if named == [dtype] else f" -> {' or '.join(named)} (the faster)"


def chip_text(c: Calibration) -> str:
    """The chip file of a calibration."""
    cpu = platform.processor() or platform.machine()
    ram = machine_memory_bytes()
    ram_line = f"hbm_bytes = {ram}\n" if ram else ""
    ram_source = (
        '"memory.hbm_bytes" = "this machine\'s RAM (sysconf: physical pages x page size)"\n'
        if ram
        else ""
    )
    peaks = "".join(f"{d} = {f:.4g}\n" for d, f in c.flops.items())
    levels = ", ".join(f"[{size}, {bw:.4g}]" for size, bw in c.cache_bw)
    cache_line = f"cache_bw = [{levels}]\n" if c.cache_bw else ""
    stream = "XLA:CPU elementwise op" if c.engine == "xla" else "numpy copy"
    largest = STREAM_SIZES_KIB[-1] // 1024
    cache_source = (
        f'"memory.cache_bw" = "measured: {stream} by bytes moved (read + written), this '
        'machine; an op moving no more is bounded by the fastest it fits"\n'
        if c.cache_bw
        else ""
    )
    if c.engine == "xla":
        how = "XLA:CPU (jax.jit) lax.dot"
        peak_sources = "".join(
            f'"peak_flops.{d}" = "measured: {how}, {d}{_results(d)}, best over 512/1024/2048 '
            f'squares and {ROUNDS} rounds, this machine ({_unit(d, c.isa)})"\n'
            for d in c.flops
        )
    else:
        peak_sources = (
            '"peak_flops.f32" = "measured: numpy f32 matmul, best over 512/1024/2048 squares, '
            'this machine (JAX not importable: other types take the f32 figure)"\n'
        )
    isa = ", ".join(f'"{f}"' for f in c.isa)
    rounds = "".join(f"{d} = [{', '.join(f'{f:.4g}' for f in per)}]\n" for d, per in c.flops_rounds)
    spreads = "".join(
        f"{d} = {(max(per) - min(per)) / max(per):.3f}\n" for d, per in c.flops_rounds if max(per)
    )
    by_round = (
        f"\n[calibration.flops_rounds]\n# Each round's best dot FLOP/s per type, in order: the "
        f"peak is the best round's.\n{rounds}\n[calibration.flops_spread_by_type]\n{spreads}"
        if c.flops_rounds
        else ""
    )
    return f"""# Written by `hlogap calibrate` on {time.strftime("%Y-%m-%d %H:%M:%S")}.
name = "cpu"
vendor = "cpu"
display = "CPU {cpu} ({os.cpu_count()} cores, calibrated)"

[peak_flops]
{peaks}
[memory]
hbm_bw = {c.bandwidth:.4g}
{ram_line}{cache_line}
[interconnect]
bw = {c.bandwidth:.4g}

[calibration]
# (best - worst) / best over {ROUNDS} rounds: above {NOISE_LIMIT:.0%}, the machine was busy.
flops_spread = {c.flops_spread:.3f}
memory_spread = {c.bandwidth_spread:.3f}
engine = "{c.engine}"
isa = [{isa}]
rounds = {len(c.flops_rounds[0][1]) if c.flops_rounds else ROUNDS}
{by_round}
[sources]
{peak_sources}"memory.hbm_bw" = "measured: {stream} moving {largest} MiB (read + write), here"
{cache_source}"interconnect.bw" = "XLA:CPU devices of one process exchange data through memory"
{ram_source}"""


def calibrate(path: Path | None = None) -> tuple[Chip, Calibration]:
    """Measure, write the chip file (default: the cache) and load it back."""
    target = path or calibrated_path()
    if path is None:  # the cache's directory, made first: an unwritable one fails at once
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise HlogapError(f"cannot write {target}: {exc.strerror or exc}") from exc
    result = measure()
    write_text(target, chip_text(result), make_parents=path is None)
    return load_chip(str(target)), result


def calibrated_chip() -> Chip | None:
    path = calibrated_path()
    return load_chip(str(path)) if path.is_file() else None
