"""A chip: one device's peaks and bandwidths with where each figure comes from, and which peak
an HLO element type runs at (format in docs/chips.md).

Figures are per device *as the trace shows devices*: a TPU v2/v3 or TPU7x TensorCore, a TPU
v4/v5p megacore chip, a TPU v5e/v6e chip, an MI250X GCD, one GPU otherwise. Peaks are dense
(never the 2x structured-sparsity figure); bandwidths are bytes/s, the interconnect one direction.
"""

from __future__ import annotations

from typing import TypeGuard

from msgspec import Struct, field

PEAK_KEYS: tuple[str, ...] = ("bf16", "f16", "f32", "f64", "tf32", "int8", "fp8")
"""The keys of ``[peak_flops]`` and ``[vector_flops]``."""

# HLO element types (and the peak keys themselves) -> peak key. Types not listed here map to
# "fp8" when they are 4/6/8-bit floats (f8e4m3fn, f8e5m2, f4e2m1fn, ...) and to "f32" otherwise.
_DTYPE_KEYS: dict[str, str] = {
    "bf16": "bf16",
    "f16": "f16",
    "f32": "f32",
    "f64": "f64",
    "tf32": "tf32",
    "int8": "int8",
    "fp8": "fp8",
    "s8": "int8",
    "u8": "int8",
    "s4": "int8",
    "u4": "int8",
    "s2": "int8",
    "u2": "int8",
    "pred": "int8",
    "s16": "f32",
    "u16": "f32",
    "s32": "f32",
    "u32": "f32",
    "s64": "f64",
    "u64": "f64",
    "c64": "f32",
    "c128": "f64",
}

# Which peak a dot of each key runs at when the chip file lacks that key, in order of preference;
# when none is present the file's highest peak is used. An f32 dot prefers TF32: XLA's default
# precision runs f32 dots as TF32 on GPUs that have it (and as bf16 passes on TPUs, which give no
# f32 figure), and a roofline bound must not assume a slower unit than the one that may be used.
_MATRIX_FALLBACKS: dict[str, tuple[str, ...]] = {
    "bf16": ("bf16", "f16", "f32"),
    "f16": ("f16", "bf16", "f32"),
    "f32": ("tf32", "f32", "bf16"),
    "tf32": ("tf32", "f32", "bf16"),
    "f64": ("f64", "f32", "bf16"),
    "int8": ("int8", "bf16", "f16", "f32"),
    "fp8": ("fp8", "bf16", "f16", "f32"),
}


class Chip(Struct, frozen=True):
    """One device's peaks and bandwidths, with where each figure comes from."""

    name: str
    vendor: str
    display: str
    peak_flops: dict[str, float]
    """Dense matrix-unit FLOP/s by key (bf16 f16 f32 f64 tf32 int8 fp8)."""
    vector_flops: dict[str, float]
    """Non-matrix FLOP/s (TPU VPU, CUDA cores) by key; empty when the file gives none."""
    hbm_bw: float
    hbm_bytes: float | None
    interconnect_bw: float | None
    sources: dict[str, str]
    """Figure (``peak_flops.bf16``, ``memory.hbm_bw``, ...) -> where it comes from."""
    detect: dict[str, object]
    """Plane stat name -> wanted value, list of values, or [min, max) range."""
    path: str | None
    cores_per_device: int = 1
    """Cores that run as one device (TPU v4/v5p megacore: 2); XLA's trace stats count per core."""
    host_bw: float | None = None
    """The device's link to host memory (PCIe, NVLink-C2C), bytes/s one direction: `[host] bw`."""
    cache_bw: tuple[tuple[float, float], ...] = ()
    """(working set bytes, bytes/s) per measured cache level, smallest first (`[memory]
    cache_bw`, written by `hlogap calibrate`): an op whose bytes fit a level moves them at that
    level's rate, not the memory's."""
    measured: bool = False
    """Its figures were measured on a machine (a `[calibration]` table, `hlogap calibrate`):
    each is what the machine reached then, a lower bound of what it does."""
    flops_spread: dict[str, float] = field(default_factory=dict)
    """Per `peak_flops` key: how much the calibration's rounds disagreed ((best - worst) /
    best, `[calibration.flops_spread_by_type]`, else `[calibration] flops_spread` for every
    key); empty for a chip not measured. A cause that hinges on a peak says when the deciding
    figure is within it (`peak_band`)."""

    def peak_band(self, key: str) -> tuple[float, float]:
        """The `peak_flops[key]` another calibration may plausibly record: its rounds spanned
        [peak (1 - spread), peak]; a rerun's best as far below or above it."""
        peak = self.peak_flops[key]
        spread = min(max(self.flops_spread.get(key, 0.0), 0.0), 0.99)
        return peak * (1.0 - spread), peak / (1.0 - spread)

    def memory_bw(self, nbytes: float) -> float:
        """The memory roof of an op moving `nbytes`: the fastest cache level its whole working
        set fits, else `hbm_bw`. A CPU op of a few hundred KB runs from L2, above RAM's rate."""
        fitting = [bw for size, bw in self.cache_bw if nbytes <= size]
        return max([self.hbm_bw, *fitting])

    def matrix_peak(self, dtype: str) -> float:
        """FLOP/s of a dot or convolution whose (widest) operand type is ``dtype``.

        ``dtype`` is an HLO element type or a peak key (see ``dtype_key``). A missing key falls
        back along ``_MATRIX_FALLBACKS``: f16<->bf16, fp8 and int8 -> bf16, f32 -> tf32 then f32
        then bf16 (TPUs), f64 -> f32; then to the file's highest peak.
        """
        return self.peak_flops[self.matrix_key(dtype)]

    def matrix_key(self, dtype: str) -> str:
        """The `peak_flops` key `matrix_peak` takes for ``dtype``."""
        for key in _MATRIX_FALLBACKS[dtype_key(dtype)]:
            if key in self.peak_flops:
                return key
        return max(self.peak_flops, key=lambda k: self.peak_flops[k])

    def vector_peak(self, dtype: str) -> float:
        """FLOP/s of elementwise and reduction work on ``dtype``.

        ``vector_flops[key]`` if given, else ``vector_flops["f32"]`` (narrower types are computed
        at least at the f32 rate), else the file's highest vector figure; ``matrix_peak`` when
        the file has no ``[vector_flops]``.
        """
        key = self.vector_key(dtype)
        return self.matrix_peak(dtype) if key is None else self.vector_flops[key]

    def vector_key(self, dtype: str) -> str | None:
        """The `vector_flops` key `vector_peak` takes for ``dtype``; None: the file has no
        `[vector_flops]` (its `matrix_key` then)."""
        if not self.vector_flops:
            return None
        key = dtype_key(dtype)
        if key in self.vector_flops:
            return key
        if "f32" in self.vector_flops:
            return "f32"
        return max(self.vector_flops, key=lambda k: self.vector_flops[k])

    def to_dict(self) -> dict[str, object]:
        """`hlogap chips --format json`: every figure, the ridge points and the sources."""
        return {
            "name": self.name,
            "display": self.display,
            "vendor": self.vendor,
            "peak_flops": dict(self.peak_flops),
            "vector_flops": dict(self.vector_flops),
            "hbm_bw": self.hbm_bw,
            "hbm_bytes": self.hbm_bytes,
            "interconnect_bw": self.interconnect_bw,
            "host_bw": self.host_bw,
            "cache_bw": [list(level) for level in self.cache_bw],
            "ridge_points": {k: v / self.hbm_bw for k, v in self.peak_flops.items()},
            "detect": self.detect,
            "sources": dict(self.sources),
        }

    def ridge_point(self, dtype: str = "bf16", nbytes: float | None = None) -> float:
        """Arithmetic intensity (FLOP/byte) where compute and memory times meet: the matrix
        peak `matrix_key(dtype)` over HBM bandwidth, or, for an op moving `nbytes`, over the
        memory rate its bound uses (`memory_bw`: a cache level's where its bytes fit one)."""
        memory = self.hbm_bw if nbytes is None else self.memory_bw(nbytes)
        return self.matrix_peak(dtype) / memory


def dtype_key(element_type: str) -> str:
    """The peak key for an HLO element type: s8/u8 (and s4/u4/pred) -> int8, f8*/f4*/f6* -> fp8,
    bf16/f16/f32/f64 as is, wider integers and complex types -> f32 or f64. Unknown -> f32."""
    t = element_type.strip().lower()
    if t in _DTYPE_KEYS:
        return _DTYPE_KEYS[t]
    if t.startswith(("f8", "f6", "f4")):
        return "fp8"
    return "f32"


def is_number(value: object) -> TypeGuard[float]:
    """A TOML or plane-stat number: an int or a float, never a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)
