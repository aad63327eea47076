"""Error types and the exit codes of the public contract (docs/cli.md)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_USAGE = 2
EXIT_INPUT = 3
EXIT_INTERNAL = 4


class HlogapError(Exception):
    """A failure the user can act on; the CLI prints it as one line."""

    exit_code = EXIT_INPUT


class UsageError(HlogapError):
    """Bad option, unknown chip name, no HLO instruction given (exit 2)."""

    exit_code = EXIT_USAGE


class InputError(HlogapError):
    """Missing path, no profile, unreadable or corrupt profile or baseline, malformed HLO given
    to `bound` (exit 3)."""

    exit_code = EXIT_INPUT
