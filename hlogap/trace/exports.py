"""xprof's tool outputs named as such: made from a profile, they are not one.

`hlo_stats`, `op_profile`, `overview_page`, `roofline_model`, ... exported as JSON (gzipped or
not), and the trace viewer's `*.trace.json.gz`: the user is sent to the `.xplane.pb` they came
from, not told the file is corrupt.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from hlogap.source import is_url

# xprof's tools, as their exports are named (`<host>.<tool>.json`, `<tool>.json.gz`, ...).
TOOLS = (
    "hlo_stats",
    "op_profile",
    "overview_page",
    "roofline_model",
    "memory_profile",
    "memory_viewer",
    "input_pipeline",
    "framework_op_stats",
    "kernel_stats",
    "pod_viewer",
    "graph_viewer",
    "trace_viewer",
)
# Keys that say which tool wrote a JSON export whose name does not.
CONTENT_KEYS = {"hlo_op_name": "hlo_stats", "byProgram": "op_profile", "byCategory": "op_profile"}
HEAD_BYTES = 1 << 16  # enough of a file to tell JSON from protobuf


def tool_export(path: str | Path) -> str | None:
    """Why a local file is not a profile when it is an xprof export or other JSON; else None."""
    if is_url(str(path)):
        return None
    head = _head(Path(path))
    if head is None or head.lstrip()[:1] not in (b"{", b"["):
        return None
    name = Path(path).name
    text = head.decode("utf-8", errors="replace")
    tool = next((t for t in TOOLS if t in name), None)
    if tool is None and (name.endswith((".trace.json", ".trace.json.gz")) or "traceEvents" in text):
        tool = "trace_viewer"
    if tool is None:
        tool = next((t for key, t in CONTENT_KEYS.items() if f'"{key}"' in text), None)
    what = f"xprof's `{tool}` tool output" if tool else "a JSON file"
    return (
        f"{path} is {what}, not a profile: hlogap reads the .xplane.pb it was made from "
        "(plugins/profile/<run>/<host>.xplane.pb)"
    )


def _head(path: Path) -> bytes | None:
    """The first bytes of a file, decompressed when gzipped; None when it cannot be read."""
    try:
        with path.open("rb") as f:
            raw = f.read(HEAD_BYTES)
        if raw[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as g:
                raw = g.read(HEAD_BYTES)
    except (OSError, EOFError, zlib.error):
        return None
    return raw
