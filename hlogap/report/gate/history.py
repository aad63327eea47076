"""`check --update-baseline PATH --reason TEXT`: the audit trail of a baseline.

The new run's report is written to PATH after the verdict, its `history` the old baseline's
plus one entry `{"date", "reason", "verdict", "change"}` (docs/ci.md); `check` prints the
baseline's last accepted change.
"""

from __future__ import annotations

import datetime
import json
import math
from pathlib import Path

from hlogap.errors import InputError, UsageError
from hlogap.report.model import AuditReport
from hlogap.source import is_url, read_remote

HistoryEntry = dict[str, object]


def read_history(baseline: AuditReport) -> list[HistoryEntry]:
    """The `history` of a saved baseline report (a local file or a URL); [] for a profile or a
    report without one. A history that is not a list of objects is a corrupt baseline."""
    if baseline.kind != "report":
        return []
    path = baseline.path
    try:
        if is_url(path):
            text = read_remote(path).decode("utf-8")
        else:
            text = Path(path).read_text(encoding="utf-8")
        data = json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise InputError(f"cannot read the baseline {path}'s history: {exc}") from exc
    history = data.get("history", []) if isinstance(data, dict) else []
    if not isinstance(history, list) or not all(isinstance(h, dict) for h in history):
        raise InputError(f"baseline {path} is corrupt: its history is not a list of objects")
    return history


def last_accepted(history: list[HistoryEntry]) -> str:
    """The baseline's last accepted change, in words ('' without a history)."""
    if not history:
        return ""
    last = history[-1]
    change = last.get("change")
    said = (
        f"{change * 100:+.1f}%"
        if isinstance(change, (int, float)) and math.isfinite(change)
        else "change unknown"
    )
    return (
        f"baseline: last accepted {last.get('date', '?')}: {last.get('reason', '')!s} "
        f"(verdict {last.get('verdict', '?')}, step {said}; {len(history)} in its history)"
    )


def check_reason(update: str | None, reason: str | None) -> None:
    """`--update-baseline` needs `--reason` (and the reverse): a usage error otherwise."""
    if update is not None and (reason is None or not reason.strip()):
        raise UsageError("--update-baseline needs --reason TEXT (why this run is the new baseline)")
    if reason is not None and update is None:
        raise UsageError("--reason only goes with --update-baseline PATH")
    if update is not None and not update.strip():
        raise UsageError("--update-baseline takes a path, not ''")


def entry(reason: str, verdict: str, change: float | None) -> HistoryEntry:
    """A history entry for now (UTC, to the second); `change` is relative (0.031 = +3.1%)."""
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    return {
        "date": now.isoformat().replace("+00:00", "Z"),
        "reason": reason,
        "verdict": verdict,
        "change": change if change is not None and math.isfinite(change) else None,
    }
