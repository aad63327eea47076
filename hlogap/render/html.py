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
from html import escape
from importlib.resources import files
from string import Template

from hlogap.render.base import Document, DocumentKind, RenderOptions, register
from hlogap.render.cells import op_labels
from hlogap.render.sections import (
    audit_sections,
    groups_section,
    hosts_section,
    memory_sections,
    page_scopes,
    sentence,
)
from hlogap.report.model import AuditReport


@cache
def page_resource(name: str) -> str:
    """A file of the page's own (`report.js`, its behaviour: it reads the report's JSON from
    the page itself, no network, no library; `report.css`, its style), read once from the
    package (hlogap/render/page/) and inlined: the page stays one self-contained file."""
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
        if not isinstance(document, AuditReport):
            raise TypeError(f"no HTML for {type(document).__name__}")
        # Every op whatever `--top` says: the page sorts and filters them itself.
        data = document.to_dict(0)
        ops = data["ops"]
        assert isinstance(ops, list)
        shown = document.ops
        for op, label in zip(ops, op_labels(document, shown), strict=True):
            op["label"] = label
        # By scope: `--group-by scope`'s own groups, else the default depth's, over all ops.
        scopes, depth = page_scopes(document)
        data["html_scopes"] = [g.to_dict(rank) for rank, g in enumerate(scopes, 1)]
        title = f"hlogap audit: {escape(document.path)}"
        # The command buffers' ops under their calls: a box to hide them where there are some.
        hidden = "" if any(r.command_buffer_ops for r in shown) else " hidden"
        checked = " checked" if options.sub_rows else ""
        # The sections as hlogap words them, every row (the page holds every op, step and
        # buffer): the header and the steps' overview here, the actions, the steps' rows and
        # the memory drawn by the page's script.
        sections = audit_sections(document, 0)
        hosts = hosts_section(document)
        data["sections"] = {
            "actions": sections.actions.to_dict(),
            "steps": sections.steps.to_dict(),
            "memory": memory_sections(document, 0).to_dict(),
            "hosts": None if hosts is None else hosts.to_dict(),
            "scopes": groups_section(document, scopes, "scope", 0).to_dict(),
        }
        header = escape("\n".join(sections.header))
        steps = escape("\n".join(sections.steps.overview[:2]))
        return Template(page_resource("report.html")).substitute(
            title=title,
            header=header,
            hidden=hidden,
            checked=checked,
            depth=depth,
            steps=steps,
            steps_legend=escape(sentence(legend) if (legend := sections.steps.legend) else ""),
            actions_title=escape(sections.actions.title),
            style=page_resource("report.css"),
            report=_json_for_script(data),
            script=page_resource("report.js"),
        )


register(HtmlRenderer())
