"""TPU: HLO op events on the `XLA Ops` line of each `/device:TPU:N` plane.

Layout (libtpu traces; docs/formats.md has the details and sources):
- An `XLA Ops` event names its op through its event metadata, one metadata per HLO instruction:
  `display_name` is the instruction name (`fusion.3`), `name` is its HLO text
  (`%fusion.3 = bf16[...] fusion(...), kind=kLoop, calls=...`), and the metadata's stats carry
  `program_id` (the module), `symbol_id`, `hlo_category`, XLA's per-execution `flops`,
  `model_flops`, `bytes_accessed`, `raw_bytes_accessed`, `memory_access_breakdown`, `tf_op`,
  `source`, `deduplicated_name`, `shape_with_layout`.
- Each event carries `device_offset_ps` / `device_duration_ps` (the TensorCore's own clock);
  `offset_ps` / `duration_ps` are the same span mapped onto the host clock. Like xprof
  (`GetDeviceEventTimespan`), the device span is used when an event has both stats.
- Ops nest (a while/call/conditional event encloses its body's ops on the same line), so each
  event gets self time: its duration minus the events directly inside it.
- `XLA Modules` events (one per execution of a program, named `<module>(<program_id>)`) name
  the modules; an op whose metadata lacks `program_id` takes the module whose event encloses it.
- Not op time on the TensorCore, hence not read: `Async XLA Ops` (a copy-start..copy-done
  transfer, overlapping the ops), `Steps`, `XLA TraceMe`, `Overlay`, SparseCore planes
  (`/device:TPU:N SparseCore M`), `#Chip` planes and the host planes.
Metadata are interned once per metadata id; the per-event work is reading two stats.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np
from google.protobuf.message import DecodeError

from hlogap.errors import InputError
from hlogap.proto import xplane_pb2
from hlogap.trace.backends.base import Platform, register
from hlogap.trace.columnar import LineColumns, RawLine
from hlogap.trace.counters import COUNTER_LINE, UnitSamples, add_op_counters, read_counters
from hlogap.trace.model import (
    ANNOTATED,
    UNKNOWN_EXECUTION,
    Backend,
    OpKey,
    Step,
    TraceBuilder,
    check_time,
    dense_codes,
    merge_steps,
)
from hlogap.trace.xspace import Plane, device_ordinal, plane_stats, stat_value

OP_LINE = "XLA Ops"
MODULE_LINE = "XLA Modules"
STEP_LINE = "Steps"
_MODULE_EVENT = re.compile(r"^(?P<name>.*)\((?P<program_id>\d+)\)$")
# `%fusion.3 = ...` (HLO text printed by the TPU compiler) -> `fusion.3`
_TEXT_NAME = re.compile(r"^%?(?P<name>[^\s=%]+) = \S")


# An aggregated event claims its occurrences; each becomes one event in memory (~40 bytes).
MAX_AGGREGATED_OCCURRENCES = 50_000_000


class TpuReader:
    name: Backend = "tpu"
    priority = 0
    # One op event a run, on the chip's own clock (its `Steps` line, not the host's annotations).
    platform = Platform(device_planes=True, events_are_runs=True)

    def claims(self, planes: Sequence[Plane]) -> bool:
        return any(device_ordinal(p, "TPU") is not None and p.has_lines for p in planes)

    def read(self, planes: Sequence[Plane], builder: TraceBuilder) -> None:
        devices: dict[str, int] = {}  # a plane split into chunks (same name) is one device
        for plane in planes:
            ordinal = device_ordinal(plane, "TPU")
            if ordinal is None:
                continue
            device = devices.get(plane.name)
            if device is None:
                stats = plane_stats(plane)
                device = devices[plane.name] = builder.new_device(plane.name, ordinal, stats)
            steps = _PlaneReader(plane, builder, device).read()
            plane.release()
            if not any(s.source in ANNOTATED for s in builder.steps):
                builder.steps = merge_steps([*builder.steps, *steps])


register(TpuReader())


class _PlaneReader:
    def __init__(self, plane: Plane, builder: TraceBuilder, device: int) -> None:
        self.plane = plane
        self.builder = builder
        self.device = device
        self.names = {k: v.name for k, v in plane.stat_metadata.items()}
        self.ids = {v: k for k, v in self.names.items()}
        self.md_cache: dict[int, tuple[str, str, str, str | None]] = {}
        self.op_cache: dict[tuple[int, str], int] = {}
        # Each execution's host-clock (start, end) on the `XLA Modules` line, sorted, and its
        # program id as an index into `_programs`.
        self._modules: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._programs: list[str] = []
        self._module_names: dict[str, str] = {}
        self._aggregated_line = False
        self._clock_pairs: list[np.ndarray] = []  # (host, device) start of events with both
        self._module_lines: list[RawLine] = []  # `XLA Modules`, found by `read`
        self._counters: dict[str, UnitSamples] = {}  # `_counters_`, read by `read`

    def read(self) -> list[Step]:
        """Read the plane's op events; return its `Steps` line's steps on the device clock."""
        groups: dict[int, list[RawLine]] = {}  # chunks of one line share its id
        step_lines: list[RawLine] = []
        counter_lines: list[RawLine] = []
        for line in self.plane.raw_lines:
            if line.name == OP_LINE:
                groups.setdefault(line.id, []).append(line)
            elif line.name == STEP_LINE:
                step_lines.append(line)
            elif line.name == MODULE_LINE:
                self._module_lines.append(line)
            elif line.name == COUNTER_LINE:
                counter_lines.append(line)
        self._counters = read_counters(self.plane, counter_lines)
        for lines in groups.values():
            self._read_line(lines)
        scale, offset = self._host_clock()
        device = self.builder.devices[self.device]
        self.builder.devices[self.device] = device._replace(host_clock=(scale, offset))
        return self._steps(step_lines, scale, offset)

    def _host_clock(self) -> tuple[float, float]:
        """The device clock against the host's, from the ops' (host, device) start pairs (least
        squares; the identity without pairs)."""
        if not self._clock_pairs:
            return 1.0, 0.0
        host, device = np.concatenate(self._clock_pairs, axis=1).astype(np.float64)
        if len(host) > 1 and np.ptp(host) > 0:
            scale, offset = (float(v) for v in np.polyfit(host - host[0], device, 1))
            return scale, offset - scale * float(host[0])
        return 1.0, float(device[0] - host[0])

    def _steps(self, lines: list[RawLine], scale: float, offset: float) -> list[Step]:
        """One step per `Steps` event, named by its number. The line keeps host-clock times and
        the ops the TensorCore's: steps are mapped onto the device clock (`scale`, `offset`)."""
        spans: list[tuple[int, int, int]] = []
        for line in lines:
            base = line.timestamp_ns * 1000
            for raw in line.events:
                event = _event(raw, self.plane.name)
                md = self.plane.event_metadata.get(event.metadata_id)
                name = md.name if md is not None else ""
                number = int(name) if name.isdigit() else len(spans)
                start = base + event.offset_ps
                spans.append((number, start, start + event.duration_ps))
        if not spans:
            return []

        def on_device(t: int) -> int:
            return round(scale * t + offset)

        return [Step(n, "tpu-steps", on_device(a), on_device(b)) for n, a, b in spans]

    def _read_line(self, lines: list[RawLine]) -> None:
        """One op line (all its chunks): events decoded in columns (hlogap.trace.columnar);
        times from the device-clock stats where present, else the host-clock span."""
        wanted = [self.ids.get("device_offset_ps", -1), self.ids.get("device_duration_ps", -1)]
        # Per chunk: metadata id, start and duration (device clock where known), and the
        # host-clock start and duration (for the module lookup).
        parts: list[tuple[np.ndarray, ...]] = []
        for line in lines:
            if not line.event_count:
                continue
            cols = line.columns(wanted)
            first = cols.irregular.get(0)  # an aggregated event is always left to upb
            if first and _event(first, self.plane.name).WhichOneof("data") == "num_occurrences":
                self._aggregated_line = True
                events = [_event(e, self.plane.name) for e in line.events]
                md, start, dur = self._aggregated(events)
                parts.append((md, start, dur, start, dur))
                continue
            for i, raw in cols.irregular.items():
                _fill(cols, i, _event(raw, self.plane.name), wanted)
            dev_start, dev_dur = cols.stats
            on_device = (dev_start >= 0) & (dev_dur >= 0)
            host_start = line.timestamp_ns * 1000 + cols.offset_ps
            start = np.where(on_device, dev_start, host_start)
            dur = np.where(on_device, dev_dur, cols.duration_ps)
            if on_device.any():
                self._clock_pairs.append(np.stack([host_start[on_device], dev_start[on_device]]))
            parts.append((cols.metadata_id, start, dur, host_start, cols.duration_ps))
            del cols, dev_start, dev_dur, on_device, start, dur, host_start
        if not parts:
            return
        # The line's columns, then only what the builder takes: a line's temporaries are the
        # peak of reading it.
        md_ids, start_arr, dur_arr, host_start, host_dur = (_joined(c) for c in zip(*parts))
        del parts
        ops = self._ops(md_ids, host_start, host_dur)
        del md_ids
        if self._counters and not self._aggregated_line:  # counters run on the host clock
            add_op_counters(self.builder.ops, self._counters, ops, host_start, host_dur)
        execution = self._executions(host_start, host_dur)
        del host_start, host_dur
        order = _parents_first(start_arr, dur_arr)
        order = order[ops[order] >= 0]
        ops, start_arr, dur_arr = ops[order], start_arr[order], dur_arr[order]
        execution = execution[order] if execution is not None else None
        del order
        self.builder.add_line(
            self.device, ops, start_arr, dur_arr, gpu=False, execution=execution, line=OP_LINE
        )

    def _executions(self, host_start: np.ndarray, host_dur: np.ndarray) -> np.ndarray | None:
        """The `XLA Modules` event (one per execution of a program) enclosing each event, by
        host-clock span; UNKNOWN_EXECUTION where none does. None without a module line or start
        times."""
        if self._aggregated_line:
            return None
        starts, ends, _ = self._modules or self._load_modules()[0]
        if not len(starts):
            return None
        k = np.searchsorted(starts, host_start, side="right") - 1
        inside = (k >= 0) & (host_start + host_dur <= ends[np.maximum(k, 0)])
        found: np.ndarray = np.where(inside, k, UNKNOWN_EXECUTION)
        return found

    def _aggregated(
        self, events: Iterable[xplane_pb2.XEvent]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Aggregated lines (tsl AggregateXPlane): one event per op with `num_occurrences`,
        the total duration, and `self_duration_ps` when ops nested inside it. Without start
        times nothing nests: each occurrence is laid end to end with its share of the op's
        self time."""
        self_id = self.ids.get("self_duration_ps", -1)
        md_list: list[int] = []
        totals: list[int] = []
        counts: list[int] = []
        for ev in events:
            total = ev.duration_ps
            for st in ev.stats:
                if st.metadata_id == self_id:
                    total = st.int64_value or st.uint64_value
            md_list.append(ev.metadata_id)
            totals.append(total)
            counts.append(max(1, ev.num_occurrences))
        # Summed as Python ints (no wrap): the occurrences are laid end to end from 0.
        check_time(sum(map(abs, totals)), "aggregated event durations", self.plane.name)
        claimed = sum(counts)
        if claimed > MAX_AGGREGATED_OCCURRENCES:
            raise InputError(
                f"aggregated events on {self.plane.name} claim {claimed:,} occurrences "
                f"(at most {MAX_AGGREGATED_OCCURRENCES:,} are read): a corrupt profile"
            )
        n = np.asarray(counts, dtype=np.int64)
        each, extra = np.divmod(np.asarray(totals, dtype=np.int64), n)
        # Occurrence k of an event gets its share, the first `extra` of them one ps more.
        k = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
        dur = np.repeat(each, n) + (k < np.repeat(extra, n))
        start = np.cumsum(dur) - dur
        return np.repeat(np.asarray(md_list, dtype=np.int64), n), start, dur

    def _ops(self, md_ids: np.ndarray, host_start: np.ndarray, host_dur: np.ndarray) -> np.ndarray:
        """Op index per event (-1: no such metadata)."""
        uniq, inverse = dense_codes(md_ids)
        op_of = np.empty(len(uniq), dtype=np.int64)
        unresolved: list[int] = []
        for i, md_id in enumerate(uniq.tolist()):
            program_id = self._metadata(md_id)[2]
            if program_id or self._aggregated_line or not self._has_module_line():
                op_of[i] = self._op(md_id, program_id)
            else:
                op_of[i] = -2
                unresolved.append(i)
        ops: np.ndarray = op_of[inverse]
        if unresolved:
            # Metadata without program_id: the module is the XLA Modules event enclosing the op.
            idx = np.flatnonzero(np.isin(inverse, unresolved))
            programs = self._enclosing_programs(idx, host_start, host_dur)
            for j, program_id in zip(idx.tolist(), programs, strict=True):
                ops[j] = self._op(int(md_ids[j]), program_id)
        return ops

    def _metadata(self, md_id: int) -> tuple[str, str, str, str | None]:
        """(name, hlo text, program id, module) of one event metadata, parsed once."""
        cached = self.md_cache.get(md_id)
        if cached is not None:
            return cached
        md = self.plane.event_metadata.get(md_id)
        if md is None:
            result: tuple[str, str, str, str | None] = ("", "", "", None)
            self.md_cache[md_id] = result
            return result
        stats = {self.names.get(s.metadata_id, ""): s for s in md.stats}
        if "symbol_id" in stats and stat_value(stats["symbol_id"], self.names) == 0:
            # xprof drops the root symbol (id 0): not an HLO instruction.
            result = ("", "", "", None)
            self.md_cache[md_id] = result
            return result
        text = md.name
        name = md.display_name
        if not name:
            m = _TEXT_NAME.match(text)
            name = m.group("name") if m else text
        if not _TEXT_NAME.match(text):
            text = ""
        program_id = ""
        if "program_id" in stats:
            value = stat_value(stats["program_id"], self.names)
            program_id = str(value) if value not in (None, "") else ""
        module = None
        if "hlo_module" in stats:
            module = str(stat_value(stats["hlo_module"], self.names) or "") or None
        result = (name, text, program_id, module)
        self.md_cache[md_id] = result
        return result

    def _op(self, md_id: int, program_id: str) -> int:
        key = (md_id, program_id)
        idx = self.op_cache.get(key)
        if idx is not None:
            return idx
        name, text, _, module = self._metadata(md_id)
        if not name:
            self.op_cache[key] = -1
            return -1
        if module is None:
            module = self.builder.module_names.get(program_id) if program_id else None
        if module is None:
            module = self._plane_module_names().get(program_id, "")
        idx = self.builder.op(OpKey(module, program_id, name))
        self.op_cache[key] = idx
        info = self.builder.ops[idx]
        if text and not info.hlo_text:
            info.hlo_text = text
        md = self.plane.event_metadata[md_id]
        for s in md.stats:
            stat = self.names.get(s.metadata_id)
            if stat == "hlo_category" and not info.category:
                info.category = str(stat_value(s, self.names) or "") or None
            elif stat == "flops" and info.xla_flops is None:
                info.xla_flops = _number(stat_value(s, self.names))
            elif stat == "bytes_accessed" and info.xla_bytes is None:
                info.xla_bytes = _number(stat_value(s, self.names))
        return idx

    def _has_module_line(self) -> bool:
        return bool(self._module_lines)

    def _plane_module_names(self) -> dict[str, str]:
        """program id -> module name, from the names of this plane's XLA Modules events."""
        return self._load_modules()[1] if self._modules is None else self._module_names

    def _load_modules(
        self,
    ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], dict[str, str]]:
        """Each execution's span on the `XLA Modules` line (host clock) and program id, sorted;
        events decoded in columns, each metadata id's name parsed once."""
        starts: list[np.ndarray] = []
        ends: list[np.ndarray] = []
        programs: list[np.ndarray] = []  # int64 codes into `names`
        names: list[str] = []  # program ids
        for line in self._module_lines:
            if not line.event_count:
                continue
            cols = line.columns([])
            for i, raw in cols.irregular.items():
                _fill(cols, i, _event(raw, self.plane.name), [])
            # Metadata ids in the order their first events come: the first name of a program
            # id is the module's.
            ids, first, inverse = np.unique(
                cols.metadata_id, return_index=True, return_inverse=True
            )
            code = np.full(len(ids), -1, dtype=np.int64)
            for k in np.argsort(first, kind="stable").tolist():
                md = self.plane.event_metadata.get(int(ids[k]))
                m = _MODULE_EVENT.match(md.name) if md is not None else None
                if m is None:
                    continue
                self._module_names.setdefault(m.group("program_id"), m.group("name"))
                if m.group("program_id") not in names:
                    names.append(m.group("program_id"))
                code[k] = names.index(m.group("program_id"))
            program = code[inverse.ravel()]
            module = program >= 0
            start = line.timestamp_ns * 1000 + cols.offset_ps
            starts.append(start[module])
            ends.append((start + cols.duration_ps)[module])
            programs.append(program[module])
        start_arr, end_arr, program_arr = (
            np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
            for parts in (starts, ends, programs)
        )
        # Sorted as (start, end, program id) tuples would sort.
        rank = np.argsort(np.argsort(np.array(names, dtype=object), kind="stable"))
        order = np.lexsort((rank[program_arr] if len(names) else program_arr, end_arr, start_arr))
        self._modules = (start_arr[order], end_arr[order], program_arr[order])
        self._programs = names
        return self._modules, self._module_names

    def _enclosing_programs(
        self, idx: np.ndarray, host_start: np.ndarray, host_dur: np.ndarray
    ) -> list[str]:
        """Program id of the XLA Modules event enclosing each event `idx` (host-clock spans,
        which both lines carry), "" when none does."""
        starts, ends, programs = self._modules or self._load_modules()[0]
        out: list[str] = []
        for j in idx.tolist():
            s = int(host_start[j])
            k = int(np.searchsorted(starts, s, side="right")) - 1
            if k >= 0 and s + int(host_dur[j]) <= ends[k]:
                out.append(self._programs[int(programs[k])])
            else:
                out.append("")
        return out


def _joined(parts: tuple[np.ndarray, ...]) -> np.ndarray:
    """A line's chunks as one column (a line of one chunk is not copied)."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _parents_first(start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Events ordered by start and, where starts tie, longest first, so that nesting sees the
    enclosing op first. The line is in host-clock order and its device-clock starts only
    rarely out of it (~1% of events in the v6e profile): a stable sort by start (timsort finds
    the runs: 2 ms for 0.6 M events against lexsort's 108 ms) is the answer unless a tie is in
    the wrong order."""
    order = np.argsort(start, kind="stable")
    ties = start[order[1:]] == start[order[:-1]]
    if np.any(ties & (dur[order[1:]] > dur[order[:-1]])):
        found: np.ndarray = np.lexsort((-dur, start))
        return found
    return order


def _event(raw: bytes, plane: str) -> xplane_pb2.XEvent:
    try:
        return xplane_pb2.XEvent.FromString(raw)
    except DecodeError as exc:
        raise InputError(f"corrupt event on {plane}") from exc


def _fill(cols: LineColumns, i: int, event: xplane_pb2.XEvent, wanted: list[int]) -> None:
    """Row `i` of `cols` from an event the columnar decoder left to upb. The wanted stats are
    device-clock times: one past any real time (a uint64 past int64's range too) is refused."""
    cols.reset_row(i, event, wanted)
    for stat in event.stats:
        if stat.metadata_id < 0 or stat.metadata_id not in wanted:
            continue
        if stat.WhichOneof("value") in ("int64_value", "uint64_value"):
            value = stat.int64_value or stat.uint64_value
            check_time(value, "a device-clock time", "an `XLA Ops` line")
            cols.stats[wanted.index(stat.metadata_id)][i] = value


def _number(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None
