"""`--format json`: every document as JSON (hlogap.audit/1, diff/1, check/1, chips/1; docs/).

An audit's JSON is machine output: it holds every op whatever `--top` says (`--top` shapes the
terminal table and Markdown), so that `check` and `diff` can match every op of a saved report."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import orjson

from hlogap.render.base import Document, DocumentKind, MemoryView, RenderOptions, register

if TYPE_CHECKING:
    from hlogap.report.gate.history import HistoryEntry
    from hlogap.report.model import AuditReport

# orjson writes NaN/inf as null (JSON has neither), so every consumer can parse the output, and
# numpy scalars as the numbers they are (without the option: strings, through `default`). The
# stdlib's indented encoder is pure Python: 1.07 s for the 13 MB report of a 40 k-step TPU
# profile, orjson 0.03 s.
OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


class JsonRenderer:
    name = "json"
    extensions: tuple[str, ...] = (".json",)
    kinds: frozenset[DocumentKind] = frozenset(
        {"audit", "diff", "check", "chips", "bound", "memory"}
    )

    def render(self, document: Document, options: RenderOptions) -> str:
        return self.render_bytes(document, options).decode()

    def render_bytes(self, document: Document, options: RenderOptions) -> bytes:
        return b"".join(self.render_chunks(document, options))

    def render_chunks(self, document: Document, options: RenderOptions) -> Iterator[bytes]:
        """UTF-8 JSON as orjson writes it, in pieces the command line writes as they come: a
        40 k-step report's steps (88 MB with their 161 k device parts) are made a block of
        steps at a time instead of all at once (no str copy, no re-encoding either)."""
        from hlogap.report.model import AuditReport

        if not isinstance(document, AuditReport):
            from hlogap.report.compare import Diff

            data = (
                document.to_dict(options.top)
                if isinstance(document, (Diff, MemoryView))
                else document.to_dict()
            )
            # `default=str`: a user's chip file may hold TOML dates in [detect]
            yield orjson.dumps(data, option=OPTIONS, default=str) + b"\n"
            return
        # Every op (top 0), whatever `--top` says.
        head = orjson.dumps(document.to_dict(0, with_steps=False), option=OPTIONS, default=str)
        # The top-level key, two spaces in (the hosts section's "steps" sit deeper).
        before, found, after = head.partition(STEPS_MARK)
        if not found or not document.steps:
            yield head + b"\n"
            return
        yield before + b'\n  "steps": ['
        for first in range(0, len(document.steps), STEPS_PER_CHUNK):
            block = document.steps[first : first + STEPS_PER_CHUNK]
            items = orjson.dumps([s.to_dict(plain=False) for s in block], option=OPTIONS)
            yield (b"," if first else b"") + items[1:-1]
        yield b"]" + after + b"\n"


STEPS_MARK = b'\n  "steps": []'
STEPS_PER_CHUNK = 2000


register(JsonRenderer())


def baseline_bytes(report: AuditReport, history: list[HistoryEntry]) -> bytes:
    """The report as `audit --format json` writes it, with `history` added (`check
    --update-baseline`)."""
    data = orjson.loads(JsonRenderer().render_bytes(report, RenderOptions()))
    data["history"] = history
    return orjson.dumps(data, option=OPTIONS, default=str) + b"\n"
