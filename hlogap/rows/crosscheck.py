"""`audit --cross-check`: xprof's own converter on the same profile, op by op.

xprof (tensorboard-plugin-profile, the `[xprof]` extra) turns the profile into its `hlo_stats`
table in a separate process, on a private temporary copy of the host files: the converter writes
a cache (`ALL_HOSTS.op_stats_v2.pb`) beside the files it reads, and hlogap never writes into a
profile. Each op of the report is then compared with xprof's row: occurrences, and self time
(within 1% or 0.5 us). Where the two count differently for a reason hlogap knows, the row says so.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from hlogap.errors import InputError, UsageError
from hlogap.report.model import AuditReport, OpRow
from hlogap.report.sections import CrossCheck, CrossCheckRow
from hlogap.source import host_of
from hlogap.trace.backends.base import platform_of
from hlogap.trace.xspace import read_bytes

TIME_TOLERANCE = 0.01  # relative
TIME_SLACK_US = 0.5  # rounding of xprof's microseconds
TIMEOUT_S = 1800
# Run in a child: xprof's C++ logs go to the child's stderr, and a crash stays there.
_CONVERT = """
import sys
from xprof.convert import raw_to_tool_data as convert
data, _ = convert.xspace_to_tool_data(sys.argv[1:], "hlo_stats", {})
sys.stdout.write(data.decode() if isinstance(data, bytes) else data)
"""


def cross_check(report: AuditReport, selected: bool = False) -> CrossCheck:
    """Compare `report` with xprof's `hlo_stats` of the same files; `selected` when the report
    holds only some modules or devices (xprof's other rows are then not listed)."""
    if importlib.util.find_spec("xprof") is None:
        raise UsageError("--cross-check runs xprof's converter: pip install 'hlogap[xprof]'")
    xprof = _xprof_rows(report.files)
    if not xprof and not platform_of(report.backend).xprof_lists_ops:
        # xprof's op stats come from GPU and TPU device planes; XLA:CPU's ops are on the host.
        why = "xprof's hlo_stats lists no XLA:CPU op (it reads GPU and TPU device planes only)"
        rows = [
            CrossCheckRow(
                op.module,
                op.program_id,
                op.name,
                op.occurrences,
                None,
                op.measured_us,
                None,
                False,
                why,
                explained=True,
            )
            for op in report.ops
        ]
        return CrossCheck(_version(), rows)
    rows = [_compare(op, xprof.pop((op.program_id, op.name), None)) for op in report.ops]
    if not selected:  # ops only xprof lists (nothing was left out of the report on purpose)
        for (program_id, name), x in sorted(xprof.items()):
            rows.append(
                CrossCheckRow(
                    "", program_id, name, None, int(_number(x["occurrences"])), None,
                    _number(x["total_self_time"]), False, "not in hlogap's report",
                )
            )  # fmt: skip
    return CrossCheck(_version(), rows)


def _compare(op: OpRow, x: dict[str, object] | None) -> CrossCheckRow:
    if x is None:
        return CrossCheckRow(
            op.module, op.program_id, op.name, op.occurrences, None, op.measured_us, None,
            False, "xprof's hlo_stats has no row for this op",
        )  # fmt: skip
    occurrences = int(_number(x["occurrences"]))
    self_us = _number(x["total_self_time"])
    same_time = abs(self_us - op.measured_us) <= max(TIME_TOLERANCE * op.measured_us, TIME_SLACK_US)
    same_occurrences = occurrences == op.occurrences
    why, explained = "", False
    if not same_occurrences:
        why = f"occurrences {op.occurrences} vs xprof {occurrences}"
        if occurrences == op.events and op.events != op.occurrences:
            explained = True
            why += (
                f": xprof counts each of the op's {op.events} kernels as an occurrence; hlogap "
                f"counts its {op.occurrences} executions (one per module execution and device)"
            )
    if not same_time:
        share = (self_us - op.measured_us) / op.measured_us if op.measured_us else float("inf")
        why += ("; " if why else "") + f"self time {op.measured_us:.1f} vs xprof {self_us:.1f} us"
        why += f" ({share:+.1%})"
        explained = False
    return CrossCheckRow(
        op.module, op.program_id, op.name, op.occurrences, occurrences, op.measured_us, self_us,
        same_occurrences and same_time, why, explained,
    )  # fmt: skip


def _xprof_rows(files: list[str]) -> dict[tuple[str, str], dict[str, object]]:
    """xprof's hlo_stats rows by (program id, op name)."""
    try:
        with tempfile.TemporaryDirectory(prefix="hlogap-xprof-") as tmp:
            copies = []
            for f in files:  # a private copy: the converter writes its cache beside its input
                copy = Path(tmp) / f"{host_of(f)}.xplane.pb"
                copy.write_bytes(read_bytes(f))
                copies.append(str(copy))
            try:
                done = subprocess.run(
                    [sys.executable, "-c", _CONVERT, *copies],
                    capture_output=True,
                    text=True,
                    timeout=TIMEOUT_S,
                )
            except subprocess.TimeoutExpired as exc:
                raise InputError(f"xprof's converter ran over {TIMEOUT_S} s") from exc
    except OSError as exc:  # no room or no right to write the copy (a full or read-only TMPDIR)
        raise InputError(
            f"--cross-check cannot write its private copy of the profile under "
            f"{tempfile.gettempdir()}: {exc.strerror or exc} (set TMPDIR elsewhere)"
        ) from exc
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise InputError(f"xprof's converter failed on this profile: {last}")
    try:
        table = json.loads(done.stdout)
        ids = [c["id"] for c in table["cols"]]
        rows = [dict(zip(ids, (c.get("v") for c in r["c"]), strict=False)) for r in table["rows"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"xprof's hlo_stats is not the table expected: {exc}") from exc
    return {(str(r.get("program_id", "")), str(r.get("hlo_op_name", ""))): r for r in rows}


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"xprof's hlo_stats holds {value!r} where a number belongs")
    return float(value)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"xprof {version('tensorboard-plugin-profile')} (hlo_stats)"
    except PackageNotFoundError:
        return "xprof (hlo_stats)"
