"""`--format csv`: one row per op, the contract's op fields (hints joined by `; `)."""

from __future__ import annotations

import csv
import io

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


def render_csv(report: AuditReport, top: int) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in report.to_dict(top)["ops"]:  # type: ignore[union-attr]
        values = dict(row)  # type: ignore[call-overload]
        values["hints"] = "; ".join(values["hints"])
        writer.writerow(["" if values[c] is None else values[c] for c in COLUMNS])
    return out.getvalue()
