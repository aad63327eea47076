"""The chips hlogap knows: every file of ``specs/`` (the project's top-level ``specs/<name>.toml``,
reached as ``specs/`` beside this package: a link in the checkout, the files themselves in an
installed package), a chip file by path, and this machine's calibrated CPU by name (`cpu`)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import zlib
from pathlib import Path

from hlogap.chips.parse import from_toml, load_file, read_chip_toml
from hlogap.chips.spec import Chip
from hlogap.errors import HlogapError, UsageError
from hlogap.files import write_bytes


def _specs_dir() -> Path:
    return Path(__file__).resolve().parent / "specs"


@functools.cache
def _builtin() -> tuple[Chip, ...]:
    files = sorted(_specs_dir().glob("*.toml"))
    chips = (from_toml(data, path) for path, data in zip(files, _spec_data(files), strict=True))
    return tuple(sorted(chips, key=lambda chip: chip.name))


def _spec_data(files: list[Path]) -> list[dict[str, object]]:
    """The spec files' TOML, as JSON saved the last time they were parsed: every audit detects
    its chip, and tomllib's parse of the 22 files is ~12 ms of one (the JSON's, ~1 ms). Keyed by
    each file's path, size and mtime, so an edited or added file is parsed again; the chips are
    checked from the data each time (`from_toml`)."""
    stamps = [(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    key = f"{zlib.crc32(repr(stamps).encode()):08x}"  # not hashlib: its import is ~5 ms
    cached = cache_dir() / f"specs-{key}.json"
    try:
        found = json.loads(cached.read_bytes())
        if (
            isinstance(found, list)
            and len(found) == len(files)
            and all(isinstance(d, dict) for d in found)
        ):
            return found
    except (OSError, ValueError):
        pass
    data = [read_chip_toml(f) for f in files]
    # Written whole (concurrent audits never read half of one), or not where the cache cannot
    # be (a read-only home).
    with contextlib.suppress(HlogapError):
        write_bytes(cached, json.dumps(data).encode(), make_parents=True)
    return data


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
        if not calibrated_path().is_file():
            raise UsageError("no calibrated CPU chip yet: run `hlogap calibrate` first")
        return load_file(calibrated_path())
    path = Path(name_or_path)
    if path.suffix.lower() == ".toml" or len(path.parts) > 1 or path.exists():
        return load_file(path)
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


def cache_dir() -> Path:
    """hlogap's cache: $HLOGAP_CACHE_DIR, else $XDG_CACHE_HOME/hlogap, else ~/.cache/hlogap."""
    base = os.environ.get("HLOGAP_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME")
    return Path(base) / "hlogap" if base else Path.home() / ".cache" / "hlogap"


def calibrated_path() -> Path:
    """Where `hlogap calibrate` writes this machine's chip file, which `--chip cpu` reads."""
    return cache_dir() / "cpu.toml"
