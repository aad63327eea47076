"""Describe this machine's CPU as a chip: measure matmul FLOP/s and memory bandwidth with numpy.

No data sheet gives the roofline of an arbitrary host, so CPU profiles are judged against what
this machine measurably does; the chip file records how each figure was measured.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from hlogap.chips import Chip, load_chip


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


def measure(repeats: int = 5) -> tuple[float, float]:
    """(best f32 matmul FLOP/s, best copy bandwidth in bytes/s counting read + write)."""
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


def write_chip(path: Path, flops: float, bandwidth: float) -> None:
    cpu = platform.processor() or platform.machine()
    text = f"""# Written by `hlogap calibrate` on {time.strftime("%Y-%m-%d %H:%M:%S")}.
name = "cpu"
vendor = "cpu"
display = "CPU {cpu} ({os.cpu_count()} cores, calibrated)"

[peak_flops]
f32 = {flops:.4g}
bf16 = {flops:.4g}

[memory]
hbm_bw = {bandwidth:.4g}

[interconnect]
bw = {bandwidth:.4g}

[sources]
"peak_flops.f32" = "measured: numpy f32 matmul, best over 512/1024/2048 squares, this machine"
"peak_flops.bf16" = "no bf16 unit on this CPU: XLA:CPU computes bf16 in f32, so the f32 figure"
"memory.hbm_bw" = "measured: numpy copy (read + write), best over 1-256 MiB buffers, this machine"
"interconnect.bw" = "XLA:CPU devices of one process exchange data through memory: copy bandwidth"
"""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def calibrate(path: Path | None = None) -> Chip:
    target = path or calibrated_path()
    flops, bandwidth = measure()
    write_chip(target, flops, bandwidth)
    return load_chip(str(target))


def calibrated_chip() -> Chip | None:
    path = calibrated_path()
    return load_chip(str(path)) if path.is_file() else None
