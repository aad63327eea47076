"""`--format csv`: one row per op, the contract's op fields (hints joined by `; `); with
`--group-by`, one row per group instead, and with `--steps`, one row per step (a CSV file holds
one table: the one the options ask for). Under a command buffer call come its ops (unless
`--no-sub-rows`): no rank, share or cum_share, `estimated` true and `command_buffer_rank` the
call's rank; the ranked rows (`command_buffer_rank` empty) add up to the report's totals.

CSV is machine output, as JSON is: every row (op, group or step) whatever `--top` says."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from hlogap.render.base import Document, DocumentKind, RenderOptions, register
from hlogap.render.cells import has_bound

if TYPE_CHECKING:
    from hlogap.report.model import AuditReport, OpRow

COLUMNS = (
    "rank",
    "module",
    "program_id",
    "name",
    "opcode",
    "category",
    "occurrences",
    "runs_per_occurrence",
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
    "estimated",
    "command_buffer_rank",
)


class CsvRenderer:
    name = "csv"
    extensions: tuple[str, ...] = (".csv",)
    kinds: frozenset[DocumentKind] = frozenset({"audit"})

    def render(self, document: Document, options: RenderOptions) -> str:
        import csv

        from hlogap.report.model import AuditReport

        if not isinstance(document, AuditReport):
            raise TypeError(f"no CSV for {type(document).__name__}")
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        if options.steps:
            _steps(document, writer)
        elif document.group_by:
            _groups(document, writer)
        else:
            writer.writerow(COLUMNS)
            rows = document.ops
            shares = document.shares(rows)
            for rank, (row, share) in enumerate(zip(rows, shares, strict=True), 1):
                _op(writer, row, row.to_dict(rank, *share))
                for sub in row.command_buffer_ops if options.sub_rows else ():
                    values = sub.to_dict(rank) | {"rank": None, "command_buffer_rank": rank}
                    _op(writer, sub, values)
        return out.getvalue()


def _op(writer: Any, row: OpRow, values: dict[str, object]) -> None:
    values["hints"] = "; ".join(row.hints)
    if not has_bound(row):  # no bound: empty cells, not 0 and its whole time
        values.update(bound_us=None, gap_us=None, efficiency=None)
    writer.writerow(["" if values.get(c) is None else values[c] for c in COLUMNS])


def _groups(report: AuditReport, writer: Any) -> None:
    """The `--group-by` rows, with the JSON's `groups` keys."""
    rows = report.groups
    table = [
        g.to_dict(rank, *share)
        for rank, (g, share) in enumerate(zip(rows, report.shares(rows), strict=True), 1)
    ]
    columns = list(table[0]) if table else ["rank", "name"]
    writer.writerow([report.group_by if c == "name" else c for c in columns])
    for values in table:
        writer.writerow(["" if values[c] is None else values[c] for c in columns])


def _steps(report: AuditReport, writer: Any) -> None:
    """The steps (`--steps`), with the JSON's `steps` keys but the per-device parts."""
    table = [{k: v for k, v in s.to_dict().items() if k != "per_device"} for s in report.steps]
    columns = list(table[0]) if table else ["step"]
    writer.writerow(columns)
    for values in table:
        writer.writerow(["" if values[c] is None else values[c] for c in columns])


register(CsvRenderer())
