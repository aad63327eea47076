"""The `hlogap` process's ends: SIGTERM raised where the main thread is, the host readers stopped
on an interrupt, the one error line on stderr, and an exit that no late signal or library
teardown can turn into another code (docs/cli.md's exit codes)."""

from __future__ import annotations

import gc
import os
import sys
from typing import NoReturn

from hlogap.cli.output import escaped


class Terminated(BaseException):
    """SIGTERM, raised where the main thread is so that cleanup runs."""


def collect_from_here() -> None:
    """The command's modules are loaded: the cyclic garbage collector, off while they were
    (`hlogap.cli.main`), is turned on, what exists so far frozen out of its passes (modules,
    classes and functions live until exit). Its passes while hlogap, numpy and Typer were
    imported walked every object made so far, again and again: ~20 ms of an audit of 0.4 s
    (`gc.callbacks`)."""
    gc.freeze()
    gc.enable()


def on_sigterm(signum: int, frame: object) -> None:
    raise Terminated


def stop_children() -> None:
    """End the processes reading the profile (they would run on after this one)."""
    reading = sys.modules.get("hlogap.trace.reading")
    if reading is not None:
        reading.stop_readers()


def exit_now(code: int) -> NoReturn:
    """Exit at once with `code` once interrupted. The interpreter's shutdown gives SIGINT back
    its default action, and a Ctrl-C still on its way then killed the process with the signal
    after its one line, instead of exiting 130 (3 of 40 interrupted checks of 24 hosts; none of
    60 exiting here). What held files or readers was closed on the way here."""
    import contextlib

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: no reader is left
            stream.flush()
    os._exit(code)


def error_line(message: str) -> None:
    """`hlogap: MESSAGE` on stderr, on one line."""
    print(f"hlogap: {escaped(message)}", file=sys.stderr)


def print_traceback(debug: bool) -> None:
    """The traceback of the error being handled, with `--debug` only."""
    if debug:
        import traceback

        traceback.print_exc()
