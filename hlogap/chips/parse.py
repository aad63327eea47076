"""A chip file (TOML, docs/chips.md) read into a `Chip`: every figure checked, one line naming
the file and the figure where one is wrong (a usage error: `--chip` is an option)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from hlogap.chips.spec import PEAK_KEYS, Chip, is_number
from hlogap.errors import InputError, UsageError
from hlogap.source import read_toml
from hlogap.units import printable


def load_file(path: Path) -> Chip:
    return from_toml(read_chip_toml(path), path)


def read_chip_toml(path: Path) -> dict[str, object]:
    """A chip file's TOML, unchecked (`from_toml` checks it)."""

    def invalid(reason: str) -> UsageError:
        return UsageError(f"invalid chip file '{path}': {reason}")

    try:
        return read_toml(path, "chip file", invalid)
    except InputError as exc:  # --chip is an option: a chip file it cannot read is a usage error
        raise UsageError(str(exc)) from exc


class _ChipFile:
    """A chip file's TOML with the checks of its values, each failing with one line that names
    the file and the figure."""

    def __init__(self, data: dict[str, object], path: Path) -> None:
        self.data = data
        self.path = path

    def fail(self, reason: str) -> UsageError:
        return UsageError(f"invalid chip file '{self.path}': {reason}")

    def table(self, key: str) -> dict[str, object]:
        value = self.data.get(key, {})
        if not isinstance(value, dict):
            raise self.fail(f"'{key}' must be a table")
        return value

    def positive(self, value: object, what: str) -> float:
        try:
            number = float(value) if is_number(value) else math.nan
        except OverflowError:  # an integer past float's range (10**400)
            number = math.inf
        # Below 1 FLOP/s or byte/s no chip is meant, and a time over it leaves float's range.
        if not math.isfinite(number) or number < 1:
            shown = f"{value!r}"[:40]
            raise self.fail(f"{what} must be a finite positive number, at least 1, not {shown}")
        return number

    def optional(self, value: object, what: str) -> float | None:
        """`positive`, or None where the file does not give the figure."""
        return None if value is None else self.positive(value, what)

    def rates(self, key: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for dtype, value in self.table(key).items():
            if dtype not in PEAK_KEYS:
                raise self.fail(f"unknown [{key}] key '{dtype}' (keys: {' '.join(PEAK_KEYS)})")
            out[dtype] = self.positive(value, f"{key}.{dtype}")
        return out

    def text(self, key: str, default: str) -> str:
        value = self.data.get(key, default)
        # A name reaches every output: its control characters (an ANSI escape) dropped here.
        if not isinstance(value, str) or not printable(value).strip():
            raise self.fail(f"'{key}' must be a non-empty string")
        return printable(value)


def from_toml(data: dict[str, object], path: Path) -> Chip:
    # The figures are checked in the file's order of sections: the first wrong one is named.
    file = _ChipFile(data, path)
    name = file.text("name", "")
    peak_flops = file.rates("peak_flops")
    if not peak_flops:
        raise file.fail(f"[peak_flops] needs at least one of {' '.join(PEAK_KEYS)}")
    memory = file.table("memory")
    if "hbm_bw" not in memory:
        raise file.fail("[memory] hbm_bw (bytes/s) is required")
    hbm_bytes = memory.get("hbm_bytes")
    cache_bw = _cache_levels(file, memory.get("cache_bw", []))
    interconnect_bw = file.table("interconnect").get("bw")
    host_bw = file.table("host").get("bw")
    detect = file.table("detect")
    for key, rule in detect.items():
        if not _valid_rule(rule):
            raise file.fail(f"[detect] {key} must be a value, a list of strings or [min, max]")
    sources = file.table("sources")
    if not all(isinstance(v, str) for v in sources.values()):
        raise file.fail("[sources] values must be strings")
    return Chip(
        name=name,
        vendor=file.text("vendor", "custom"),
        display=file.text("display", name),
        peak_flops=peak_flops,
        vector_flops=file.rates("vector_flops"),
        hbm_bw=file.positive(memory["hbm_bw"], "memory.hbm_bw"),
        hbm_bytes=file.optional(hbm_bytes, "memory.hbm_bytes"),
        interconnect_bw=file.optional(interconnect_bw, "interconnect.bw"),
        sources={k: str(v) for k, v in sources.items()},
        detect=detect,
        path=str(path),
        cores_per_device=int(file.positive(data.get("cores_per_device", 1), "cores_per_device")),
        host_bw=file.optional(host_bw, "host.bw"),
        cache_bw=cache_bw,
        measured="calibration" in data,
        flops_spread=_spreads(file.table("calibration"), peak_flops, file.fail),
    )


def _cache_levels(file: _ChipFile, levels: object) -> tuple[tuple[float, float], ...]:
    """`[memory] cache_bw`: (working set bytes, bytes/s) pairs, smallest working set first."""
    if not isinstance(levels, list) or not all(
        isinstance(level, list) and len(level) == 2 for level in levels
    ):
        raise file.fail("[memory] cache_bw must be a list of [working set bytes, bytes/s] pairs")
    return tuple(
        sorted(
            (
                file.positive(size, "memory.cache_bw size"),
                file.positive(bw, "memory.cache_bw rate"),
            )
            for size, bw in levels
        )
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
        if not is_number(value) or not 0 <= value < 1:
            raise fail(f"calibration spread of {key} must be a number in [0, 1)")
        found[key] = float(value)
    return found


def _valid_rule(rule: object) -> bool:
    if isinstance(rule, list):
        strings = bool(rule) and all(isinstance(w, str) for w in rule)
        return strings or (len(rule) == 2 and all(is_number(w) for w in rule))
    return isinstance(rule, (str, bool)) or is_number(rule)
