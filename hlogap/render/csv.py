"""`--format csv`: one row per op, the contract's op fields (hints joined by `; `)."""

from __future__ import annotations

import csv
import io

from hlogap.render.base import Document, DocumentKind, RenderOptions, register
from hlogap.report.model import AuditReport

COLUMNS = (
    "rank",
    "module",
    "program_id",
    "name",
    "opcode",
    "category",
    "occurrences",
    "measured_us",
    "share",
    "cum_share",
    "bound_us",
    "gap_us",
    "efficiency",
    "bound_by",
    "flops",
    "bytes",
    "comm_bytes",
    "intensity",
    "hints",
    "hlo",
)


class CsvRenderer:
    name = "csv"
    extensions: tuple[str, ...] = (".csv",)
    kinds: frozenset[DocumentKind] = frozenset({"audit"})

    def render(self, document: Document, options: RenderOptions) -> str:
        if not isinstance(document, AuditReport):
            raise TypeError(f"no CSV for {type(document).__name__}")
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(COLUMNS)
        rows = document.ops if options.top <= 0 else document.ops[: options.top]
        shares = document.shares(rows)
        for rank, (row, share) in enumerate(zip(rows, shares, strict=True), 1):
            values = row.to_dict(rank, *share)
            values["hints"] = "; ".join(row.hints)
            writer.writerow(["" if values[c] is None else values[c] for c in COLUMNS])
        return out.getvalue()


register(CsvRenderer())
