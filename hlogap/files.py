"""Files and memory: writing what hlogap outputs whole or not at all, and never into anything
but a file; how much memory is left.

A report or chip file goes to a temporary file beside the target, renamed into place, so an
interrupted run never leaves half of one. Character devices (`/dev/null`, a terminal) and the
process's own descriptors (`/dev/stdout`, `/dev/fd/N`) are written straight; a FIFO, socket,
directory or block device is refused, since writing to one blocks or destroys.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

from hlogap.errors import HlogapError, UsageError

_OWN_DESCRIPTORS = ("/dev/stdout", "/dev/stderr", "/dev/fd/", "/proc/self/fd/")


def check_output(path: Path) -> None:
    """Refuse (usage error) a target that is neither absent, a regular file, a character
    device nor one of the process's own descriptors."""
    if str(path).startswith(_OWN_DESCRIPTORS):
        return
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise HlogapError(f"cannot write {path}: {exc.strerror}") from exc
    if stat.S_ISREG(mode) or stat.S_ISCHR(mode):
        return
    kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, socket or device)"
    raise UsageError(f"refusing to write to {path}: it is {kind}")


def write_text(path: Path, text: str, make_parents: bool = False) -> None:
    """`text` to `path`, whole or not at all (see the module's docstring); its directory is
    made when `make_parents` (a cache), else it must exist."""
    write_bytes(path, text.encode("utf-8"), make_parents)


def write_bytes(path: Path, data: bytes | Iterable[bytes], make_parents: bool = False) -> None:
    """`data` (or its chunks, written as they come) to `path`, as `write_text`."""
    check_output(path)
    chunks = [data] if isinstance(data, bytes) else data
    try:
        if str(path).startswith(_OWN_DESCRIPTORS) or (
            path.exists() and stat.S_ISCHR(path.stat().st_mode)
        ):
            with path.open("wb") as f:
                for chunk in chunks:
                    f.write(chunk)
            return
        directory = path.resolve().parent
        if make_parents:
            directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".hlogap-", dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                for chunk in chunks:
                    f.write(chunk)
            # mkstemp makes the file private (0600): give it the mode a plain write would.
            os.chmod(tmp, _mode_of(path))
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as exc:
        raise HlogapError(f"cannot write {path}: {exc.strerror or exc}") from exc


def _mode_of(path: Path) -> int:
    """The mode `path` has, or a new file gets under the process's umask."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def available_memory() -> int | None:
    """Bytes the kernel says can be allocated without swapping (Linux), else None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
