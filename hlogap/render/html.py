"""`--format html` (or `-o report.html`): one self-contained page to attach to a CI run or open
on an air-gapped cluster. No network: the report's JSON, the style and the script are inline.
The page's markup, style and script are files of the package (hlogap/render/page/: report.html,
report.css, report.js), read once and filled in here.

The page holds the header, the steps, the op table (every op, whatever `--top` says, in the
report's order; sort by any column as `--sort` does, filter by text, click an op for all its
hints and its HLO; in a narrow window each row on two lines, its why under its figures), a
roofline chart (log-log, scaled to the window; one roof per distinct peak, the ridge points
dashed; ops as points sized by time lost, hover for numbers, click to find the op in the table;
left out where no op has FLOPs and bytes), the ops rolled up by scope (the first components of
`op_name`), the hosts of a pod and the memory.
"""

from __future__ import annotations

import json
from functools import cache
from typing import TYPE_CHECKING

from hlogap.render.base import Document, DocumentKind, RenderOptions, register
from hlogap.render.cells import sub_row_cells
from hlogap.render.sections import (
    OP_COLUMNS,
    OP_FIGURES,
    AuditSections,
    audit_sections,
    groups_section,
    hosts_section,
    memory_sections,
    op_cells,
    page_scopes,
    sentence,
)

if TYPE_CHECKING:
    from hlogap.report.model import AuditReport, GroupRow


@cache
def page_resource(name: str) -> str:
    """A file of the page's own (`report.js`, its behaviour: it reads the report's JSON from
    the page itself, no network, no library; `report.css`, its style), read once from the
    package (hlogap/render/page/) and inlined: the page stays one self-contained file."""
    from importlib.resources import files

    return (files("hlogap.render") / "page" / name).read_text(encoding="utf-8")


def _json_for_script(data: object) -> str:
    """JSON that cannot end the <script> element it sits in."""
    text = json.dumps(data, allow_nan=False, default=str)
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


class HtmlRenderer:
    name = "html"
    extensions: tuple[str, ...] = (".html", ".htm")
    kinds: frozenset[DocumentKind] = frozenset({"audit"})

    def render(self, document: Document, options: RenderOptions) -> str:
        from html import escape
        from string import Template

        from hlogap.report.model import AuditReport

        if not isinstance(document, AuditReport):
            raise TypeError(f"no HTML for {type(document).__name__}")
        # Every row whatever `--top` says: the page sorts and filters the ops itself.
        sections = audit_sections(document, 0)
        scopes, depth = page_scopes(document)
        lines = {
            name: escape("\n".join(text))
            for name, text in (
                ("header", sections.header),
                ("warnings", sections.warnings),
                ("cross_check", sections.cross_check),
                ("what_if", sections.what_if),
                ("steps", sections.steps.overview[:2]),
            )
        }
        legend = sections.steps.legend
        title = f"hlogap audit: {escape(document.path)}"
        # The command buffers' ops under their calls: a box to hide them where there are some.
        hidden = "" if any(r.command_buffer_ops for r in document.ops) else " hidden"
        return Template(page_resource("report.html")).substitute(
            lines,
            title=title,
            hidden=hidden,
            checked=" checked" if options.sub_rows else "",
            depth=depth,
            steps_legend=escape(sentence(legend) if legend else ""),
            actions_title=escape(sections.actions.title),
            style=page_resource("report.css"),
            report=_json_for_script(_page_data(document, sections, scopes)),
            script=page_resource("report.js"),
        )


def _page_data(
    report: AuditReport, sections: AuditSections, scopes: list[GroupRow]
) -> dict[str, object]:
    """The report's JSON (every op, each with its label and cells, its command buffer's ops
    too), and the sections the page's script lays out: the op table's columns, the actions,
    the steps' rows, the memory, the hosts' tables and the scopes."""
    data = report.to_dict(0)
    ops = data["ops"]
    assert isinstance(ops, list)
    for op, cells, row in zip(ops, op_cells(report, report.ops), report.ops, strict=True):
        op["label"] = cells["op"]
        op["cells"] = [cells[c] for c in OP_COLUMNS]
        for sub, sub_row in zip(op["command_buffer_ops"], row.command_buffer_ops, strict=True):
            sub_cells = sub_row_cells(sub_row)
            sub_cells["op"] = sub_cells["op"].lstrip()  # the page indents it itself
            sub["cells"] = [sub_cells[c] for c in OP_COLUMNS]
    data["html_scopes"] = [g.to_dict(rank) for rank, g in enumerate(scopes, 1)]
    hosts = hosts_section(report)
    data["sections"] = {
        "ops": {"columns": OP_COLUMNS, "figures": [c in OP_FIGURES for c in OP_COLUMNS]},
        "actions": sections.actions.to_dict(),
        "steps": sections.steps.to_dict(),
        "memory": memory_sections(report, 0).to_dict(),
        "hosts": None if hosts is None else hosts.to_dict(),
        "scopes": groups_section(report, scopes, "scope", 0).to_dict(),
    }
    return data


register(HtmlRenderer())
