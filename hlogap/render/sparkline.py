"""The allocators' bytes in use over time as text: one sparkline a line, on one time axis, with
a line that marks where the steps start, all within 80 columns (`hlogap memory`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hlogap.units import fmt_si, fmt_us

if TYPE_CHECKING:
    from hlogap.report.model import StepRow
    from hlogap.report.schema import AllocatorPeak

# Eighths of a column's height; a blank is nothing in use, or a time the allocator logged
# nothing yet (before its first event) or any more (after its last).
LEVELS = " ▁▂▃▄▅▆▇█"
MAX_WIDTH = 80
# An allocator's name (with its host's before it where there are several) is cut to this from
# the left: hosts of a pod differ at their ends (`...-w-12/GPU_0_bfc`).
MAX_LABEL = 14
PEAK_WIDTH = 8  # "21.5 GB"
MIN_COLUMNS = 20  # a narrower terminal wraps the lines rather than lose the curve


def allocator_timeline_lines(
    allocators: Sequence[AllocatorPeak], steps: Sequence[StepRow], width: int | None
) -> list[str]:
    """A title, a sparkline per allocator that has a timeline (each scaled to its own most in
    use, printed at its end; a column shows the most in use in its time), the steps' starts
    (`|`) and the axis's two ends; [] where no allocator has a timeline."""
    shown = [a for a in allocators if a.timeline is not None]
    if not shown:
        return []
    hosts = {a.host for a in shown}
    labels = [_cut(a.name if len(hosts) < 2 else f"{a.host}/{a.name}") for a in shown]
    label_width = max(len("steps"), *(len(s) for s in labels))
    room = min(width or MAX_WIDTH, MAX_WIDTH) - 2 - label_width - 2 - 2 - PEAK_WIDTH
    columns = max(MIN_COLUMNS, room)
    starts = [a.timeline.start_us for a in shown if a.timeline is not None]
    ends = [a.timeline.end_us for a in shown if a.timeline is not None]
    first = min([*starts, *(s.start_us for s in steps)])
    last = max([*ends, *(s.start_us + s.wall_us for s in steps)])
    column_us = (last - first) / columns
    lines = [f"in use over time (heap + stack), a column the most in {fmt_us(column_us)}:"]
    for label, a in zip(labels, shown, strict=True):
        curve = _columns(a, first, column_us, columns)
        top = max(a.timeline.in_use_bytes) if a.timeline is not None else 0
        cells = "".join(
            " " if v is None or not top else LEVELS[math.ceil(len(LEVELS[1:]) * v / top)]
            for v in curve
        )
        lines.append(f"  {label:<{label_width}}  {cells}  {fmt_si(top, 'B'):>{PEAK_WIDTH}}")
    if steps:
        marks = [" "] * columns
        for s in steps:
            marks[_column(s.start_us, first, column_us, columns)] = "|"
        lines.append(f"  {'steps':<{label_width}}  {''.join(marks).rstrip()}")
    left, right = fmt_us(first), fmt_us(last)
    lines.append(f"  {'':<{label_width}}  {left}{right:>{columns - len(left)}}")
    lines.append("each line scaled to the most it held (at its end); | a step starts")
    return lines


def _cut(label: str) -> str:
    return label if len(label) <= MAX_LABEL else "…" + label[len(label) - MAX_LABEL + 1 :]


def _column(us: float, first: float, column_us: float, columns: int) -> int:
    if column_us <= 0:
        return 0
    return min(columns - 1, max(0, int((us - first) / column_us)))


def _columns(a: AllocatorPeak, first: float, column_us: float, columns: int) -> list[int | None]:
    """Per column of the axis, the most the allocator's buckets that overlap it held (None:
    outside its first and last events). The buckets keep their maxima, so the columns do."""
    timeline = a.timeline
    assert timeline is not None
    buckets = timeline.in_use_bytes
    bucket_us = (timeline.end_us - timeline.start_us) / len(buckets)
    out: list[int | None] = []
    for c in range(columns):
        lo, hi = first + c * column_us, first + (c + 1) * column_us
        last = c == columns - 1  # the axis's end belongs to its last column
        if (hi <= timeline.start_us and not last) or lo > timeline.end_us:
            out.append(None)
            continue
        if bucket_us <= 0:  # one instant: a single bucket
            out.append(buckets[0])
            continue
        begin = min(len(buckets) - 1, max(0, int((lo - timeline.start_us) // bucket_us)))
        end = len(buckets) if last else math.ceil((hi - timeline.start_us) / bucket_us)
        out.append(max(buckets[begin : max(min(end, len(buckets)), begin + 1)]))
    return out
