"""What a host's threads were doing while its devices sat idle: the host plane's events (the
`/host:CPU` lines of an xprof profile: Python, the runtime's dispatch, its thread pools) that
overlap given gaps, each with how much of the gap it covers. A per-host task: the gaps are on
the host's own clock (`hlogap.trace.steps.OpWaits.largest`), as its host plane's events are.

The file is read again for its host plane only (the op columns keep no host events). Left out:
the devices' own op events (a CPU thunk, carrying `hlo_op`) and their `end:` markers, and the
step annotations (`step_num`: they span the whole step, gap or not)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from hlogap.errors import InputError
from hlogap.source import is_nsys_archive
from hlogap.trace.columnar import IdSet
from hlogap.trace.model import TraceData
from hlogap.trace.timing import merged_intervals
from hlogap.trace.xspace import HOST_PLANE, decode_int_stats, read_planes

MOST_EVENTS = 4  # per gap: the events covering most of it


class GapActivity(NamedTuple):
    """One gap [start, end) of a device (ps, the host's clock) and the host's events in it:
    (thread line, event name, ps of the gap it covers), most first; `covered_ps`: the part of
    the gap some such event covers (the rest no host event records: untraced host work, such
    as Python between calls, input loading, a sleep)."""

    start_ps: int
    end_ps: int
    events: tuple[tuple[str, str, int], ...]
    covered_ps: int
    read: bool = True  # False: the file's host plane could not be read again (an archive)


def host_activity(
    trace: TraceData, gaps: Sequence[tuple[int, int]], most: int = MOST_EVENTS
) -> list[GapActivity]:
    """For each gap (start, end) in ps: the host plane's events that overlap it."""
    if not gaps:
        return []
    unread = [GapActivity(a, b, (), 0, read=False) for a, b in gaps]
    if not trace.path or is_nsys_archive(trace.path):
        return unread
    try:
        planes, _ = read_planes(trace.path)
    except (OSError, InputError):  # gone since it was read (a fetched copy): nothing named
        return unread
    host = next((p for p in planes if p.name == HOST_PLANE and p.has_lines), None)
    if host is None:
        return unread
    stat_ids = {v.name: k for k, v in host.stat_metadata.items()}
    hlo_op, step_num = stat_ids.get("hlo_op", -1), stat_ids.get("step_num", -1)
    names = {k: (m.name or m.display_name) for k, m in host.event_metadata.items()}
    markers = IdSet([k for k, n in names.items() if n.startswith("end: ")])
    lo, hi = min(a for a, _ in gaps), max(b for _, b in gaps)
    gap_start = np.array([a for a, _ in gaps], dtype=np.int64)
    gap_end = np.array([b for _, b in gaps], dtype=np.int64)
    # Per gap: (line, name) -> ps covered; and the covered spans, for the union.
    found: list[dict[tuple[str, str], int]] = [{} for _ in gaps]
    spans: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in gaps]
    for line in host.raw_lines:
        base = line.timestamp_ns * 1000
        if not line.event_count or (line.duration_ps and base + line.duration_ps <= lo):
            continue
        if base >= hi:
            continue
        label = line.display_name or line.name
        cols = decode_int_stats(line, [hlo_op, step_num], host.name)
        start = base + cols.offset_ps
        end = start + cols.duration_ps
        kept = (cols.stats[0] < 0) & (cols.stats[1] < 0) & (end > lo) & (start < hi)
        kept &= (end > start) & ~markers.has(cols.metadata_id)
        if not kept.any():
            continue
        s, e, ids = start[kept], end[kept], cols.metadata_id[kept]
        for g in range(len(gaps)):
            a, b = int(gap_start[g]), int(gap_end[g])
            over = np.minimum(e, b) - np.maximum(s, a)
            hit = np.flatnonzero(over > 0)
            if not len(hit):
                continue
            spans[g].append((np.maximum(s[hit], a), np.minimum(e[hit], b)))
            mine = found[g]
            for (outer, leaf), ps in _own_parts(s[hit], e[hit], ids[hit], over[hit]).items():
                name = names.get(outer, "?")
                if leaf != outer:
                    name = f"{name} > {names.get(leaf, '?')}"
                mine[(label, name)] = mine.get((label, name), 0) + ps
    host.release()
    out = []
    for g, (a, b) in enumerate(gaps):
        covered = 0
        if spans[g]:
            starts = np.concatenate([x for x, _ in spans[g]])
            ends = np.concatenate([y for _, y in spans[g]])
            merged_start, merged_end = merged_intervals(starts, ends)
            covered = int((merged_end - merged_start).sum())
        top = sorted(found[g].items(), key=lambda item: (-item[1], item[0]))[:most]
        out.append(GapActivity(a, b, tuple((ln, nm, ps) for (ln, nm), ps in top), covered))
    return out


def _own_parts(
    start: np.ndarray, end: np.ndarray, ids: np.ndarray, over: np.ndarray
) -> dict[tuple[int, int], int]:
    """One thread's events in a gap, as (outermost, own) event ids with the ps of the gap the
    event spends itself, its nested events' part taken out (the work itself, such as a launch
    or a wait, under what called it, such as a jitted function's dispatch)."""
    order = np.lexsort((-end, start))
    own = over.astype(np.int64).copy()
    root = np.arange(len(start))
    stack: list[int] = []  # the open events, outermost first (indices)
    for i in order.tolist():
        while stack and end[stack[-1]] <= start[i]:
            stack.pop()
        if stack:
            own[stack[-1]] -= over[i]
            root[i] = root[stack[0]]
        stack.append(i)
    found: dict[tuple[int, int], int] = {}
    for i in np.flatnonzero(own > 0).tolist():
        key = (int(ids[root[i]]), int(ids[i]))
        found[key] = found.get(key, 0) + int(own[i])
    return found
