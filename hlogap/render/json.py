"""`--format json`: every document as JSON (hlogap.audit/1, diff/1, check/1, chips/1; docs/)."""

from __future__ import annotations

import json
import math

from hlogap.render.base import Document, DocumentKind, RenderOptions, register
from hlogap.report.compare import Diff
from hlogap.report.model import AuditReport


def _finite(value: object) -> object:
    """JSON has no NaN/inf; they become null so every consumer can parse the output."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


class JsonRenderer:
    name = "json"
    extensions: tuple[str, ...] = (".json",)
    kinds: frozenset[DocumentKind] = frozenset({"audit", "diff", "check", "chips", "bound"})

    def render(self, document: Document, options: RenderOptions) -> str:
        if isinstance(document, (AuditReport, Diff)):
            data = document.to_dict(options.top)
        else:
            data = document.to_dict()
        # `default=str`: a user's chip file may hold TOML dates in [detect]
        return json.dumps(_finite(data), indent=2, default=str) + "\n"


register(JsonRenderer())
