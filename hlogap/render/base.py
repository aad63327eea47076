"""Renderers: one per output format, found by name or by an output file's extension.

A renderer module in this package defines a class with `name`, `extensions` and `kinds` (the
documents it can write) and a `render(document, options)` method, and passes an instance to
`register`. Adding an output format is one new module here: the command line asks this
registry which formats exist, which document kinds each writes, and which one `-o FILE` means.

Every module here is light to import (the report, the rows and any large library are imported
where a renderer renders): listing the formats for `--help` imports them all, and a command
that names its format (`--format json`) imports that renderer's module alone.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, TypeAlias

from msgspec import Struct

from hlogap._plugins import import_all
from hlogap.errors import UsageError

if TYPE_CHECKING:
    from hlogap.report.compare import Diff
    from hlogap.report.gate import CheckResult
    from hlogap.report.model import AuditReport
    from hlogap.report.schema import Chip, InstructionBound

DocumentKind = Literal["audit", "diff", "check", "chips", "bound", "memory"]


class ChipList(Struct, frozen=True):
    """`hlogap chips`: the chip database as a document."""

    chips: list[Chip]

    def to_dict(self) -> dict[str, object]:
        return {"schema": "hlogap.chips/1", "chips": [c.to_dict() for c in self.chips]}


class MemoryView(Struct, frozen=True):
    """`hlogap memory`: the memory of an audited profile, as a document of its own."""

    report: AuditReport

    def to_dict(self, top: int = 0) -> dict[str, object]:
        r = self.report
        return {
            "schema": "hlogap.memory/1",
            "source": {"path": r.path, "run": r.run, "files": r.files, "hosts": r.hosts},
            "chip": r.chip_dict(),
            "memory": r.memory.to_dict(top) if r.memory else None,
            "warnings": [w for w in r.warnings if w.startswith("memory:")],
        }


Document: TypeAlias = "AuditReport | Diff | CheckResult | ChipList | InstructionBound | MemoryView"


def _is_a(document: Document, module: str, name: str) -> bool:
    """Whether `document` is a `module.name`. A module not loaded made no document: it is not
    imported to say so (an audit's JSON loads neither the comparison nor the gate)."""
    loaded = sys.modules.get(module)
    return loaded is not None and isinstance(document, getattr(loaded, name))


def kind_of(document: Document) -> DocumentKind:
    if _is_a(document, "hlogap.report.model", "AuditReport"):
        return "audit"
    if _is_a(document, "hlogap.report.compare", "Diff"):
        return "diff"
    if _is_a(document, "hlogap.report.gate", "CheckResult"):
        return "check"
    if isinstance(document, ChipList):
        return "chips"
    if isinstance(document, MemoryView):
        return "memory"
    return "bound"


class RenderOptions(Struct, frozen=True):
    """How a renderer lays a document out (rows, colour, sections)."""

    # Rows of the table and Markdown (an audit's JSON, CSV and HTML hold every row), of a diff's
    # and a memory view's tables and JSON; 0 = all.
    top: int = 20
    color: bool = False  # a terminal that shows colour
    steps: bool = False  # the per-step table too (human-readable formats; JSON always has it)
    width: int | None = None  # a terminal's columns, to fit tables to; None: wide, whole rows
    # Under a command buffer call, its ops with their estimated times (hlogap.render.cells).
    sub_rows: bool = True


class Renderer(Protocol):
    name: str  # what --format takes
    extensions: tuple[str, ...]  # output file suffixes that choose this format
    kinds: frozenset[DocumentKind]

    def render(self, document: Document, options: RenderOptions) -> str: ...


_REGISTRY: dict[str, Renderer] = {}


def register(renderer: Renderer) -> Renderer:
    _REGISTRY[renderer.name] = renderer
    return renderer


def renderers() -> list[Renderer]:
    """Every renderer of this package (modules imported on first use), by name."""
    import_all("hlogap.render")
    return sorted(_REGISTRY.values(), key=lambda r: r.name)


def formats(kind: DocumentKind) -> list[str]:
    return [r.name for r in renderers() if kind in r.kinds]


def _named(fmt: str) -> Renderer | None:
    """The renderer of format `fmt`, None if there is none. A module named after its format
    (hlogap.render.json, a plug-in folder's tsv.py) is imported alone; any other format
    (perfetto: trace_events.py) is looked for among every renderer."""
    if (
        fmt not in _REGISTRY
        and fmt.isidentifier()
        and importlib.util.find_spec(f"hlogap.render.{fmt}") is not None
    ):
        importlib.import_module(f"hlogap.render.{fmt}")
    if fmt not in _REGISTRY:
        renderers()
    return _REGISTRY.get(fmt)


def choose_format(kind: DocumentKind, fmt: str | None, output: Path | None) -> str:
    """`--format` if given, else what `--output`'s extension names, else `table`; a format
    that cannot write this kind of document is a usage error."""
    if fmt is None and output is not None:
        # The longest extension the name ends with: `.trace.json` before `.json`.
        name = output.name.lower()
        named = [(len(e), r.name) for r in renderers() for e in r.extensions if name.endswith(e)]
        fmt = max(named)[1] if named else None
        if fmt is not None and fmt not in formats(kind):
            fmt = None
    fmt = fmt or "table"
    renderer = _named(fmt)
    if renderer is None or kind not in renderer.kinds:
        raise UsageError(f"unknown format '{fmt}' (use one of: {', '.join(formats(kind))})")
    return fmt


def needs_timeline(fmt: str) -> bool:
    """Whether format `fmt` draws the events themselves (hlogap.trace.timeline), which an
    audit keeps only when asked."""
    return bool(getattr(_named(fmt), "needs_timeline", False))


def render_chunks(document: Document, fmt: str, options: RenderOptions) -> Iterator[bytes] | None:
    """The document as UTF-8 pieces made as they are written, where format `fmt` writes large
    documents that way (JSON, trace events); None where it renders text whole."""
    choose_format(kind_of(document), fmt, None)
    chunked: Callable[[Document, RenderOptions], Iterator[bytes]] | None = getattr(
        _REGISTRY[fmt], "render_chunks", None
    )
    return None if chunked is None else chunked(document, options)


def render(document: Document, fmt: str, options: RenderOptions) -> str:
    kind = kind_of(document)
    choose_format(kind, fmt, None)
    return _REGISTRY[fmt].render(document, options)
