"""The `hlogap` command line: parse options, call the library, render. Nothing else lives here.

The arguments are declared in `args`, each command in `commands/` (one module each), the output
plumbing in `output` and the process's ends in `process`; this module is the command table and
the error boundary. Library modules are imported inside commands so that `hlogap --help` stays
instant.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from typer.exceptions import Abort, Exit, TyperException

from hlogap.cli.args import EXIT_CODES, writes
from hlogap.cli.commands import audit, bound, calibrate, check, chips, demo, diff, memory
from hlogap.cli.process import (
    Terminated,
    error_line,
    exit_now,
    on_sigterm,
    print_traceback,
    stop_children,
)
from hlogap.errors import EXIT_INPUT, EXIT_INTERNAL, EXIT_USAGE, HlogapError

app = typer.Typer(
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Plain help: Rich's help formatter costs ~0.2 s of imports, and `hlogap --help` is instant.
    rich_markup_mode=None,
    help="Roofline and profile-gap auditor for XLA programs: which ops lose the most time "
    "against the hardware's roofline, and why.",
    epilog=EXIT_CODES,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        from hlogap._version import __version__

        print(f"hlogap {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Roofline and profile-gap auditor for XLA programs: which ops lose the most time against
    the hardware's roofline, and why."""


# The commands, in the order `hlogap --help` lists them, each with the document it writes.
app.command(cls=writes("audit"), epilog=EXIT_CODES)(audit.audit)
app.command(cls=writes("audit"), epilog=EXIT_CODES)(demo.demo)
app.command(epilog=EXIT_CODES)(calibrate.calibrate)
app.command(cls=writes("bound"), epilog=EXIT_CODES)(bound.bound)
app.command(cls=writes("memory"), epilog=EXIT_CODES)(memory.memory)
app.command(cls=writes("chips"), epilog=EXIT_CODES)(chips.chips)
app.command(cls=writes("check"), epilog=EXIT_CODES)(check.check)
app.command(cls=writes("diff"), epilog=EXIT_CODES)(diff.diff)


def main() -> None:
    """Console entry point: one line on stderr and a documented exit code for every failure;
    `--debug` adds the traceback and keeps the exit code."""
    import gc

    # No cyclic garbage collection while the command's modules load: `collect_from_here`
    # turns it on once they are. As it was after (tests run `main` in their own process).
    gc.disable()
    try:
        _main()
    finally:
        gc.unfreeze()
        gc.enable()


def _main() -> None:
    import signal

    debug = "--debug" in sys.argv[1:]
    if debug:
        sys.argv.remove("--debug")
    else:
        import logging

        # Storage backends (gcsfs, s3fs) log each failed attempt with its traceback on stderr
        # through Python's last-resort handler, as asyncio logs a Dask client's task that an
        # interrupt left unfinished; hlogap's one error line says what failed.
        logging.getLogger().addHandler(logging.NullHandler())
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        code = app(standalone_mode=False)
        if code == 130:  # Typer turns KeyboardInterrupt into this return value
            raise KeyboardInterrupt
    except Exit as exc:
        code = exc.exit_code
    except TyperException as exc:  # Typer's usage errors (unknown option, missing argument)
        error_line(f"usage error: {exc.format_message()}")
        code = getattr(exc, "exit_code", EXIT_USAGE)
    except (Abort, KeyboardInterrupt):
        # The Ctrl-C that ended a reader first may still be pending here: it must not cut the
        # cleanup short (Python would then die of the signal, not exit 130).
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        stop_children()
        error_line("interrupted")
        exit_now(130)
    except Terminated:
        stop_children()
        error_line("terminated")
        exit_now(143)
    except HlogapError as exc:
        print_traceback(debug)
        error_line(f"error: {exc}")
        code = exc.exit_code
    except MemoryError:
        error_line("error: out of memory reading the profile")
        code = EXIT_INPUT
    except Exception as exc:  # a bug: one line, traceback only on request
        print_traceback(debug)
        error_line(
            f"internal error ({type(exc).__name__}: {exc}); please report it "
            "at the hlogap issue tracker, rerun with --debug for the traceback"
        )
        code = EXIT_INTERNAL
    sys.exit(code if isinstance(code, int) else 0)


def run() -> None:
    """The `hlogap` command's process: `main`, then the interpreter's exit with every object
    frozen out of the garbage collector: its last passes over all that the run made were
    ~40 ms of a 0.35 s audit (what is still open is closed and flushed as before). An error
    that ended a run that loaded pyarrow skips the teardown: after an error raised while
    pyarrow read (a corrupt nsys-jax parquet) that teardown of its C++ thread pool aborted the
    process after the one line ("terminate called without an active exception", exit 134: 4
    of 6 runs). What held files or readers was closed on the way here. (`main` itself raises
    SystemExit and leaves the collector as it found it: tests run it in their own process.)"""
    try:
        main()
    except SystemExit as exc:
        if exc.code and isinstance(exc.code, int) and "pyarrow" in sys.modules:
            exit_now(exc.code)
        import gc

        gc.freeze()
        raise
