"""One renderer per output format; each turns an AuditReport into text."""

from __future__ import annotations

from hlogap.report.model import AuditReport

FORMATS = ("table", "json", "csv", "md")


def render(report: AuditReport, fmt: str, top: int, color: bool = False) -> str:
    # Imported on use so that `hlogap --help` and JSON output never load Rich's table machinery.
    if fmt == "table":
        from hlogap.render.table import render_table

        return render_table(report, top, color=color)
    if fmt == "json":
        from hlogap.render.json import render_json

        return render_json(report, top)
    if fmt == "csv":
        from hlogap.render.csv import render_csv

        return render_csv(report, top)
    if fmt == "md":
        from hlogap.render.md import render_md

        return render_md(report, top)
    raise ValueError(f"unknown format {fmt}")
