"""Where a command's output goes: stdout in whatever encoding it has, or the `-o` file (whole or
not at all, gzip-compressed for a `.gz` name), a progress line on a terminal's stderr, and
messages escaped to one line. The commands choose what to write; this module only writes it.

Only the standard library is imported at the top: `hlogap --help` stays instant.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import typer

from hlogap.errors import HlogapError

if TYPE_CHECKING:
    from hlogap.render.base import Document, DocumentKind
    from hlogap.report.model import AuditReport


class OutputChoice(NamedTuple):
    """How a command renders its document: the `--format`, `-o`, `--top`, `--steps`, `--wide`
    and `--sub-rows` flags, as the command took them."""

    fmt: str | None = None  # None: from `path`'s extension, else table
    path: Path | None = None  # None or `-`: stdout
    top: int = 20
    steps: bool = False
    wide: bool = False
    sub_rows: bool = True

    @property
    def target(self) -> Path | None:
        return file_target(self.path)


def file_target(output: Path | None) -> Path | None:
    """The file `-o` names; None for stdout (no `-o`, or `-o -`)."""
    return None if output is None or str(output) == "-" else output


def escaped(message: str) -> str:
    """One line, whatever the message quotes: control characters in paths (a newline, an ANSI
    escape) are shown escaped, never written raw to the terminal."""
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in message
    )


def write_stdout(text: str) -> None:
    """Text on stdout in whatever encoding it has: where box-drawing characters cannot be
    encoded (LC_ALL=C, latin-1), tables are drawn in ASCII and other characters replaced."""
    if sys.stdout is None:
        raise HlogapError("cannot write the output: stdout is closed")
    try:
        _encode_stdout(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # `hlogap ... | head` closed the pipe: not an error. Nothing more goes to the pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0) from None
    except OSError as exc:  # a full disk, a closed descriptor
        raise HlogapError(f"cannot write the output to stdout: {exc.strerror or exc}") from exc


def _encode_stdout(text: str) -> None:
    encoding = sys.stdout.encoding or "utf-8"
    try:
        text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        import unicodedata

        boxes = {
            code: "-"
            if "HORIZONTAL" in (name := unicodedata.name(chr(code), "")) and "VERTICAL" not in name
            else "|"
            if "VERTICAL" in name and "HORIZONTAL" not in name
            else "+"
            for code in range(0x2500, 0x2580)
        }
        safe = text.translate(boxes).encode(encoding, errors="replace")
        sys.stdout.buffer.write(safe)
        return
    sys.stdout.write(text)


class Progress:
    """What is being read, on stderr, one line rewritten in place: only on a terminal, and only
    once the work has taken a second (a quick audit prints nothing extra)."""

    DELAY_S = 1.0

    def __init__(self) -> None:
        import time

        self._clock = time.monotonic
        self._start = self._clock()
        self._shown = False
        self._last = ""

    def __call__(self, message: str) -> None:
        self._last = message
        if self._clock() - self._start >= self.DELAY_S:
            self._show()

    def _show(self) -> None:
        sys.stderr.write(f"\r\x1b[Khlogap: {escaped(self._last)}...")
        sys.stderr.flush()
        self._shown = True

    def __enter__(self) -> Progress | None:
        return self if sys.stderr is not None and sys.stderr.isatty() else None

    def __exit__(self, *exc: object) -> None:
        if self._shown:  # the output starts on a clean line
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


# 69 MB of trace-event JSON (128 k events) took 2.3 s at gzip's default 9 (6.7 MB), 1.3 s at 6
# (7.0 MB), 0.4 s at 3 (8.1 MB): a larger file beats seconds more of waiting.
GZIP_LEVEL = 3


def emit_bytes(data: Iterable[bytes], output: Path | None) -> None:
    """UTF-8 chunks to stdout (its buffer: the bytes as they are) as they come, or to `output`
    as `emit` (whole or not at all)."""
    target = file_target(output)
    if target is None:
        if sys.stdout is None:
            raise HlogapError("cannot write the output: stdout is closed")
        try:
            sys.stdout.flush()
            for chunk in data:
                sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(0) from None
        except OSError as exc:
            raise HlogapError(f"cannot write the output to stdout: {exc.strerror or exc}") from exc
        return
    from hlogap.files import write_bytes

    write_bytes(target, _gzipped(data) if target.name.lower().endswith(".gz") else data)
    wrote(target)


def _gzipped(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The chunks gzip-compressed as they come (never the whole file in memory at once)."""
    import zlib

    packer = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # wbits 31: gzip's header, trailer
    for chunk in chunks:
        if packed := packer.compress(chunk):
            yield packed
    yield packer.flush()


def wrote(target: Path) -> None:
    """Say where the output went, on a terminal (a script's stderr stays quiet)."""
    if sys.stderr is not None and sys.stderr.isatty():
        print(f"hlogap: wrote {escaped(str(target))}", file=sys.stderr)


def emit(text: str, output: Path | None) -> None:
    """To stdout, or to `output` whole or not at all (hlogap.files)."""
    target = file_target(output)
    if target is None:
        write_stdout(text)
        return
    if target.name.lower().endswith(".gz"):  # report.md.gz: compressed
        from hlogap.files import write_bytes

        write_bytes(target, _gzipped([text.encode()]))
    else:
        from hlogap.files import write_text

        write_text(target, text)
    wrote(target)


def check_target(output: Path | None) -> Path | None:
    """The `-o` file, checked writable before a minute of reading (None: stdout)."""
    target = file_target(output)
    if target is not None:
        from hlogap.files import check_output

        check_output(target)
    return target


def refuse_overwriting_inputs(
    outputs: Iterable[Path | None], report: AuditReport, chip: str | None
) -> None:
    """Refuse (exit 2) an output onto a file the audit read: the profile's host files, and the
    chip file where `--chip` named one (hlogap.source.refuse_to_overwrite)."""
    from hlogap.source import refuse_to_overwrite

    read = [*report.files, *([chip] if chip and Path(chip).is_file() else [])]
    for written in outputs:
        if written is not None:
            refuse_to_overwrite(written, read)


def write_document(document: Document, kind: DocumentKind, choice: OutputChoice) -> None:
    """Render `document` in the chosen format to `-o` or stdout; on a terminal, tables fit
    its width unless `--wide`."""
    import shutil

    from hlogap.render.base import RenderOptions, choose_format, render, render_chunks

    chosen = choose_format(kind, choice.fmt, choice.path)
    terminal = choice.target is None and sys.stdout is not None and sys.stdout.isatty()
    width = shutil.get_terminal_size().columns if terminal and not choice.wide else None
    # Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org).
    color = terminal and not os.environ.get("NO_COLOR")
    options = RenderOptions(
        top=choice.top, color=color, steps=choice.steps, width=width, sub_rows=choice.sub_rows
    )
    # JSON and trace events: bytes as the encoder writes them, no text copy of a large document.
    chunks = render_chunks(document, chosen, options)
    if chunks is not None:
        emit_bytes(chunks, choice.path)
        return
    emit(render(document, chosen, options), choice.path)


def fit_lines(lines: list[str], wide: bool) -> list[str]:
    """Lines broken between words at a terminal's width (continuations indented); whole
    elsewhere (a pipe, a file) or with --wide."""
    import shutil
    import textwrap

    if wide or sys.stdout is None or not sys.stdout.isatty():
        return lines
    width = shutil.get_terminal_size().columns
    return [
        part
        for line in lines
        for part in textwrap.wrap(
            line, width, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
        )
        or [""]
    ]
