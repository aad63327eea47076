"""Which chip a trace ran on: a device plane's stats matched against each chip file's
``[detect]`` table (docs/chips.md)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from hlogap.chips.database import builtin_chips
from hlogap.chips.spec import Chip, is_number
from hlogap.units import fmt_si, printable

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
        candidates = [c for c in builtin_chips() if c.vendor == "google"]
    elif plane_name.startswith("/device:GPU:"):
        candidates = [c for c in builtin_chips() if c.vendor != "google"]
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
    if len(matches) > 1 and is_number(reported):
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
                if not (is_number(have) and is_number(low) and is_number(high)):
                    return False
                if not low <= have < high:
                    return False
        elif isinstance(want, str):
            if not isinstance(have, str) or _norm(have) != _norm(want):
                return False
        elif not is_number(have) or have != want:
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
    gib = f"{memory / 2**30:.0f} GiB" if is_number(memory) else "? GiB"
    return f"{vendor} {version}, {stats.get('core_count', '?')} {units}, {gib}"
