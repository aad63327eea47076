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

from hlogap.chips import Chip, load_chip
from hlogap.files import write_text


def cache_dir() -> Path:
    base = os.environ.get("HLOGAP_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME")
    return Path(base) / "hlogap" if base else Path.home() / ".cache" / "hlogap"


def calibrated_path() -> Path:
    return cache_dir() / "cpu.toml"


def _best_of(fn: Callable[..., object], args: tuple[object, ...], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - t0)
    return best


# A roof must not be beaten: XLA:CPU ops whose arrays fit in cache run at cache speed, so the
# memory roof is the best copy bandwidth over working sets from L2-sized to DRAM-sized.
COPY_SIZES_MIB = (1, 4, 16, 64, 256)
MATMUL_SIZES = (512, 1024, 2048)


# Rounds of the whole measurement; runs that disagree by more than this are worth a warning.
ROUNDS = 3
NOISE_LIMIT = 0.10


@dataclass(frozen=True)
class Calibration:
    """This machine's best f32 matmul FLOP/s and copy bandwidth (read + write, bytes/s), and
    how much the rounds disagreed: (best - worst) / best of each round's best."""

    flops: float
    bandwidth: float
    flops_spread: float
    bandwidth_spread: float

    @property
    def noisy(self) -> bool:
        return max(self.flops_spread, self.bandwidth_spread) > NOISE_LIMIT


def _round(repeats: int) -> tuple[float, float]:
    """One round: (best f32 matmul FLOP/s, best copy bandwidth counting read + write)."""
    rng = np.random.default_rng(0)
    flops = 0.0
    for size in MATMUL_SIZES:
        a = rng.standard_normal((size, size), dtype=np.float32)
        b = a.T.copy()
        np.matmul(a, b)  # warm up BLAS threads
        flops = max(flops, 2.0 * size**3 / _best_of(np.matmul, (a, b), repeats))
    bandwidth = 0.0
    for mib in COPY_SIZES_MIB:
        src = np.ones(mib * (1 << 20) // 4, dtype=np.float32)
        dst = np.empty_like(src)
        np.copyto(dst, src)
        t_copy = _best_of(np.copyto, (dst, src), repeats * max(1, 64 // mib))
        bandwidth = max(bandwidth, 2.0 * src.nbytes / t_copy)
    return flops, bandwidth


def measure(rounds: int = ROUNDS, repeats: int = 3) -> Calibration:
    """The best of `rounds` rounds, and their spread."""
    results = [_round(repeats) for _ in range(rounds)]
    flops = [r[0] for r in results]
    bandwidth = [r[1] for r in results]
    return Calibration(
        max(flops),
        max(bandwidth),
        (max(flops) - min(flops)) / max(flops),
        (max(bandwidth) - min(bandwidth)) / max(bandwidth),
    )


def machine_memory_bytes() -> int | None:
    """This machine's RAM (`sysconf`: pages x page size): a CPU device's memory capacity."""
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # not POSIX, or not told
        return None
    return pages * size if pages > 0 and size > 0 else None


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
    return f"""# Written by `hlogap calibrate` on {time.strftime("%Y-%m-%d %H:%M:%S")}.
name = "cpu"
vendor = "cpu"
display = "CPU {cpu} ({os.cpu_count()} cores, calibrated)"

[peak_flops]
f32 = {c.flops:.4g}
bf16 = {c.flops:.4g}

[memory]
hbm_bw = {c.bandwidth:.4g}
{ram_line}
[interconnect]
bw = {c.bandwidth:.4g}

[calibration]
# (best - worst) / best over {ROUNDS} rounds: above {NOISE_LIMIT:.0%}, the machine was busy.
flops_spread = {c.flops_spread:.3f}
memory_spread = {c.bandwidth_spread:.3f}

[sources]
"peak_flops.f32" = "measured: numpy f32 matmul, best over 512/1024/2048 squares, this machine"
"peak_flops.bf16" = "no bf16 unit on this CPU: XLA:CPU computes bf16 in f32, so the f32 figure"
"memory.hbm_bw" = "measured: numpy copy (read + write), best over 1-256 MiB buffers, this machine"
"interconnect.bw" = "XLA:CPU devices of one process exchange data through memory: copy bandwidth"
{ram_source}"""


def calibrate(path: Path | None = None) -> tuple[Chip, Calibration]:
    """Measure, write the chip file (default: the cache) and load it back."""
    target = path or calibrated_path()
    result = measure()
    write_text(target, chip_text(result), make_parents=path is None)
    return load_chip(str(target)), result


def calibrated_chip() -> Chip | None:
    path = calibrated_path()
    return load_chip(str(path)) if path.is_file() else None
