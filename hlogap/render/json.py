"""`--format json`: the hlogap.audit/1 document (docs/json.md)."""

from __future__ import annotations

import json
import math

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


def render_json(report: AuditReport, top: int) -> str:
    return json.dumps(_finite(report.to_dict(top)), indent=2) + "\n"
