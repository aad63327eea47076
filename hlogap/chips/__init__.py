"""The chip database: peak FLOP/s and bandwidths per device, and detection from trace stats.

Every chip is a TOML file (the project's top-level ``specs/<name>.toml``, reached as ``specs/``
beside this module: a link in the checkout, the files themselves in an installed package; format
in docs/chips.md).
Figures are per device *as the trace shows devices*: a TPU v2/v3 or TPU7x TensorCore, a TPU
v4/v5p megacore chip, a TPU v5e/v6e chip, an MI250X GCD, one GPU otherwise. Peaks are dense
(never the 2x structured-sparsity figure); bandwidths are bytes/s, the interconnect one direction.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeGuard

from hlogap.errors import InputError, UsageError
from hlogap.source import read_toml
from hlogap.units import fmt_si, printable

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


@dataclass(frozen=True)
class Chip:
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


def _specs_dir() -> Path:
    return Path(__file__).resolve().parent / "specs"


@functools.cache
def _builtin() -> tuple[Chip, ...]:
    chips = (_load_file(path) for path in _specs_dir().glob("*.toml"))
    return tuple(sorted(chips, key=lambda chip: chip.name))


def builtin_chips() -> list[Chip]:
    """Every chip in ``specs/*.toml``, sorted by name."""
    return list(_builtin())


# The name of this machine's CPU once calibrated (`hlogap calibrate`).
CPU = "cpu"


def load_chip(name_or_path: str) -> Chip:
    """A built-in chip by name, or a chip TOML file by path.

    Raises UsageError for an unknown name and for a file that cannot be read or is invalid.
    """
    known = {chip.name: chip for chip in _builtin()}
    name = name_or_path.strip().lower()
    chip = known.get(name)
    if chip is not None:
        return chip
    if name == CPU:  # the report calls a calibrated CPU `cpu`: the same name selects it
        from hlogap.chips.calibrate import calibrated_path

        if not calibrated_path().is_file():
            raise UsageError("no calibrated CPU chip yet: run `hlogap calibrate` first")
        return _load_file(calibrated_path())
    path = Path(name_or_path)
    if path.suffix.lower() == ".toml" or len(path.parts) > 1 or path.exists():
        return _load_file(path)
    raise UsageError(f"unknown chip '{name_or_path}'; {_suggest(name, [*known, CPU])}")


def _suggest(name: str, names: list[str]) -> str:
    """ "did you mean ...?" for a chip name: the names it begins (punctuation aside), else the
    closest spellings."""
    import difflib

    def bare(text: str) -> str:
        return "".join(c for c in text if c.isalnum())

    close = [n for n in names if bare(n).startswith(bare(name))]
    if not close:
        by_bare = {bare(n): n for n in names}
        close = [by_bare[m] for m in difflib.get_close_matches(bare(name), list(by_bare), 3, 0.6)]
    listing = "`hlogap chips` lists them all"
    if close:
        return f"did you mean {', '.join(close[:4])}? ({listing})"
    return f"known: {', '.join(names)}"


# Plane stats that name the device: XLA's CUPTI tracer writes `gpu_device_name` ("NVIDIA
# A100-SXM4-40GB"); an nsys-jax archive's target config gives `device_name`.
_NAME_STATS = ("gpu_device_name", "device_name")
# The `[detect]` keys that are no plane stat: `prefer` (wins a tie) and `names` (the device
# names the part reports, which choose between parts whose other stats are alike).
_DETECT_CHOICES = frozenset({"prefer", "names"})
# The driver's `memory_bandwidth` stat chooses between parts left alike by every other stat
# only where it is this close (relative) to one's data-sheet HBM bandwidth. NVIDIA's (2 x memory
# clock x bus width: 1.555e12 B/s on an A100 40GB, 2.039e12 on the A100 80GB SXM, 1.935e12 on
# the PCIe) is the data sheet's; ROCm's is half of it (MI300X: 2.66e12 against 5.3e12) and so
# chooses nothing.
_BANDWIDTH_NEAR = 0.10


def detect_chip(device_stats: Mapping[str, object], plane_name: str) -> tuple[Chip, str] | None:
    """The built-in chip whose ``[detect]`` table matches one device plane's stats.

    ``device_stats`` are the plane-level stats of a ``/device:GPU:N`` or ``/device:TPU:N``
    plane by stat name (``device_vendor``, ``compute_cap_major``, ``core_count``,
    ``memory_size``, ``clock_rate``, ``device_type_string``, ``gpu_device_name``, ...). Returns
    the chip and a line saying how it was chosen, or None when no chip matches (some planes
    carry only ``device_vendor``: try the next plane).

    The ``[detect]`` stats must all match. Parts they leave alike (an A100 SXM and PCIe of one
    memory size) are told apart by the device's name where it reports one that a file lists
    (``names``), then by the driver's ``memory_bandwidth`` stat where it is within 10% of one
    part's data-sheet bandwidth (never used alone, and never as the bound's bandwidth), then by
    ``prefer``.
    """
    if plane_name.startswith("/device:TPU:"):
        candidates = [c for c in _builtin() if c.vendor == "google"]
    elif plane_name.startswith("/device:GPU:"):
        candidates = [c for c in _builtin() if c.vendor != "google"]
    else:
        return None
    matches = [c for c in candidates if c.detect and _matches(c.detect, device_stats)]
    if not matches:
        return None
    device_name = _device_name(device_stats)
    why: list[str] = []
    if len(matches) > 1 and device_name:
        named = [c for c in matches if _named(c, device_name)]
        if named and len(named) < len(matches):
            matches = named
            why.append(f"named {device_name!r}")
    reported = device_stats.get("memory_bandwidth")
    if len(matches) > 1 and _is_number(reported):
        nearest = _nearest_bandwidth(matches, reported)
        if nearest and len(nearest) < len(matches):
            matches = nearest
            why.append(f"driver memory bandwidth {fmt_si(reported, 'B/s')}")
    chip = next((c for c in matches if c.detect.get("prefer") is True), matches[0])
    how = f"detected: {', '.join([_describe(device_stats), *why])} -> {chip.name}"
    others = [c.name for c in matches if c is not chip]
    if others:
        how += f" (also matches {', '.join(others)}; pass --chip to choose)"
    if device_name and _names(chip) and not _named(chip, device_name):
        how += f" (the device calls itself {device_name!r}: not a name {chip.name}'s file lists)"
    return chip, how


def _device_name(stats: Mapping[str, object]) -> str | None:
    for key in _NAME_STATS:
        value = stats.get(key)
        if isinstance(value, str) and value.strip():
            return printable(value.strip())[:80]
    return None


def _names(chip: Chip) -> list[str]:
    """`[detect] names`: the device names the part reports (one name may be a string)."""
    names = chip.detect.get("names", [])
    if isinstance(names, str):
        return [names]
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def _named(chip: Chip, device_name: str) -> bool:
    """The device's name is one the chip file lists (case, spaces, `-` and `_` aside)."""

    def bare(text: str) -> str:
        return "".join(c for c in text.lower() if c.isalnum())

    return bare(device_name) in {bare(n) for n in _names(chip)}


def _nearest_bandwidth(chips: list[Chip], reported: float) -> list[Chip]:
    """The chips whose data-sheet HBM bandwidth is nearest the driver's `memory_bandwidth`
    stat, if within `_BANDWIDTH_NEAR` of it; [] where it is near none."""
    if not math.isfinite(reported) or reported <= 0:
        return []
    off = {c.name: abs(c.hbm_bw / reported - 1) for c in chips}
    best = min(off.values())
    if best > _BANDWIDTH_NEAR:
        return []
    return [c for c in chips if off[c.name] == best]


def _norm(text: str) -> str:
    return "".join(text.split()).lower()


def _is_number(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _valid_rule(rule: object) -> bool:
    if isinstance(rule, list):
        strings = bool(rule) and all(isinstance(w, str) for w in rule)
        return strings or (len(rule) == 2 and all(_is_number(w) for w in rule))
    return isinstance(rule, (str, bool)) or _is_number(rule)


def _matches(detect: Mapping[str, object], stats: Mapping[str, object]) -> bool:
    for key, want in detect.items():
        if key in _DETECT_CHOICES:
            continue
        have = stats.get(key)
        if have is None:
            return False
        if isinstance(want, list):
            if all(isinstance(w, str) for w in want):  # any of these strings
                if not isinstance(have, str) or _norm(have) not in {_norm(w) for w in want}:
                    return False
            else:  # a [min, max) range
                low, high = want
                if not (_is_number(have) and _is_number(low) and _is_number(high)):
                    return False
                if not low <= have < high:
                    return False
        elif isinstance(want, str):
            if not isinstance(have, str) or _norm(have) != _norm(want):
                return False
        elif not _is_number(have) or have != want:
            return False
    return True


def _describe(stats: Mapping[str, object]) -> str:
    if "device_type_string" in stats:
        return f"device_type_string {stats['device_type_string']!r}"
    vendor = str(stats.get("device_vendor", "?"))
    major, minor = stats.get("compute_cap_major", "?"), stats.get("compute_cap_minor", "?")
    # ROCm puts the GFX major.minor in the compute-capability stats (9.5: gfx950, 9.4: gfx942):
    # AMD has no "compute capability".
    amd = vendor.lower() == "amd"
    version = f"GFX {major}.{minor}" if amd else f"compute capability {major}.{minor}"
    units = "CUs" if amd else "SMs"
    memory = stats.get("memory_size")
    gib = f"{memory / 2**30:.0f} GiB" if _is_number(memory) else "? GiB"
    return f"{vendor} {version}, {stats.get('core_count', '?')} {units}, {gib}"


def _load_file(path: Path) -> Chip:
    def invalid(reason: str) -> UsageError:
        return UsageError(f"invalid chip file '{path}': {reason}")

    try:
        data = read_toml(path, "chip file", invalid)
    except InputError as exc:  # --chip is an option: a chip file it cannot read is a usage error
        raise UsageError(str(exc)) from exc
    return _parse(data, path)


def _parse(data: dict[str, object], path: Path) -> Chip:
    def fail(reason: str) -> UsageError:
        return UsageError(f"invalid chip file '{path}': {reason}")

    def table(key: str) -> dict[str, object]:
        value = data.get(key, {})
        if not isinstance(value, dict):
            raise fail(f"'{key}' must be a table")
        return value

    def positive(value: object, what: str) -> float:
        try:
            number = float(value) if _is_number(value) else math.nan
        except OverflowError:  # an integer past float's range (10**400)
            number = math.inf
        # Below 1 FLOP/s or byte/s no chip is meant, and a time over it leaves float's range.
        if not math.isfinite(number) or number < 1:
            shown = f"{value!r}"[:40]
            raise fail(f"{what} must be a finite positive number, at least 1, not {shown}")
        return number

    def rates(key: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for dtype, value in table(key).items():
            if dtype not in PEAK_KEYS:
                raise fail(f"unknown [{key}] key '{dtype}' (keys: {' '.join(PEAK_KEYS)})")
            out[dtype] = positive(value, f"{key}.{dtype}")
        return out

    def text(key: str, default: str) -> str:
        value = data.get(key, default)
        # A name reaches every output: its control characters (an ANSI escape) dropped here.
        if not isinstance(value, str) or not printable(value).strip():
            raise fail(f"'{key}' must be a non-empty string")
        return printable(value)

    name = text("name", "")
    peak_flops = rates("peak_flops")
    if not peak_flops:
        raise fail(f"[peak_flops] needs at least one of {' '.join(PEAK_KEYS)}")
    memory = table("memory")
    if "hbm_bw" not in memory:
        raise fail("[memory] hbm_bw (bytes/s) is required")
    hbm_bytes = memory.get("hbm_bytes")
    levels = memory.get("cache_bw", [])
    if not isinstance(levels, list) or not all(
        isinstance(level, list) and len(level) == 2 for level in levels
    ):
        raise fail("[memory] cache_bw must be a list of [working set bytes, bytes/s] pairs")
    cache_bw = tuple(
        sorted(
            (positive(size, "memory.cache_bw size"), positive(bw, "memory.cache_bw rate"))
            for size, bw in levels
        )
    )
    interconnect_bw = table("interconnect").get("bw")
    host_bw = table("host").get("bw")
    detect = table("detect")
    for key, rule in detect.items():
        if not _valid_rule(rule):
            raise fail(f"[detect] {key} must be a value, a list of strings or [min, max]")
    sources = table("sources")
    if not all(isinstance(v, str) for v in sources.values()):
        raise fail("[sources] values must be strings")
    return Chip(
        name=name,
        vendor=text("vendor", "custom"),
        display=text("display", name),
        peak_flops=peak_flops,
        vector_flops=rates("vector_flops"),
        hbm_bw=positive(memory["hbm_bw"], "memory.hbm_bw"),
        hbm_bytes=None if hbm_bytes is None else positive(hbm_bytes, "memory.hbm_bytes"),
        interconnect_bw=(
            None if interconnect_bw is None else positive(interconnect_bw, "interconnect.bw")
        ),
        sources={k: str(v) for k, v in sources.items()},
        detect=detect,
        path=str(path),
        cores_per_device=int(positive(data.get("cores_per_device", 1), "cores_per_device")),
        host_bw=None if host_bw is None else positive(host_bw, "host.bw"),
        cache_bw=cache_bw,
        measured="calibration" in data,
        flops_spread=_spreads(table("calibration"), peak_flops, fail),
    )


def _spreads(
    calibration: dict[str, object],
    peak_flops: dict[str, float],
    fail: Callable[[str], UsageError],
) -> dict[str, float]:
    """`Chip.flops_spread` from a chip file's `[calibration]` table."""
    by_type = calibration.get("flops_spread_by_type", {})
    overall = calibration.get("flops_spread")
    if not isinstance(by_type, dict):
        raise fail("[calibration.flops_spread_by_type] must be a table")
    found: dict[str, float] = {}
    for key in peak_flops:
        value = by_type.get(key, overall)
        if value is None:
            continue
        if not _is_number(value) or not 0 <= value < 1:
            raise fail(f"calibration spread of {key} must be a number in [0, 1)")
        found[key] = float(value)
    return found
