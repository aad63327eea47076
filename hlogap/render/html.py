"""`--format html` (or `-o report.html`): one self-contained page to attach to a CI run or send
to a colleague: the header, then every op with its numbers, its hints and its HLO."""

from __future__ import annotations

from html import escape

from hlogap.render.base import Document, DocumentKind, RenderOptions, register
from hlogap.render.text import header_lines
from hlogap.report.model import AuditReport
from hlogap.units import fmt_eff, fmt_si, fmt_us

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; width: 100%; }
th, td { padding: 4px 8px; border-bottom: 1px solid #ddd; vertical-align: top; }
th { text-align: left; background: #f4f4f4; position: sticky; top: 0; }
td.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
code { font-size: 12px; }
details pre { white-space: pre-wrap; font-size: 12px; max-width: 80em; }
"""
_COLUMNS = ("#", "op", "category", "n", "measured", "bound", "gap", "eff", "bound by", "FLOP",
            "bytes", "why")  # fmt: skip


class HtmlRenderer:
    name = "html"
    extensions: tuple[str, ...] = (".html", ".htm")
    kinds: frozenset[DocumentKind] = frozenset({"audit"})

    def render(self, document: Document, options: RenderOptions) -> str:
        if not isinstance(document, AuditReport):
            raise TypeError(f"no HTML for {type(document).__name__}")
        rows = document.ops if options.top <= 0 else document.ops[: options.top]
        body = [f"<h1>hlogap audit: {escape(document.path)}</h1>", "<ul>"]
        body += [f"<li>{escape(line)}</li>" for line in header_lines(document)]
        body += ["</ul>", "<table>", "<tr>" + "".join(f"<th>{c}</th>" for c in _COLUMNS) + "</tr>"]
        for rank, r in enumerate(rows, 1):
            hints = "<br>".join(escape(h) for h in r.hints)
            hlo = f"<details><summary>HLO</summary><pre>{escape(r.hlo)}</pre></details>"
            cells = [
                (str(rank), "n"),
                (f"<code>{escape(r.name)}</code><br><small>{escape(r.module)}</small>", ""),
                (escape(r.category), ""),
                (str(r.occurrences), "n"),
                (fmt_us(r.measured_us), "n"),
                (fmt_us(r.bound_us), "n"),
                (fmt_us(r.gap_us), "n"),
                (fmt_eff(r.efficiency), "n"),
                (escape(r.bound_by), ""),
                (fmt_si(r.flops, ""), "n"),
                (fmt_si(r.bytes, "B"), "n"),
                (hints + (hlo if r.hlo else ""), ""),
            ]
            body.append("<tr>" + "".join(f'<td class="{k}">{v}</td>' for v, k in cells) + "</tr>")
        body.append("</table>")
        if len(rows) < len(document.ops):
            body.append(f"<p>{len(rows)} of {len(document.ops)} ops; --top 0 shows all</p>")
        return (
            "<!doctype html>\n<html><head><meta charset=utf-8>"
            f"<title>hlogap audit: {escape(document.path)}</title><style>{_STYLE}</style>"
            "</head><body>\n" + "\n".join(body) + "\n</body></html>\n"
        )


register(HtmlRenderer())
