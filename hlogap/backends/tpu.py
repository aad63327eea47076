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

from hlogap.proto import xplane_pb2
from hlogap.xplane import DEVICE_PLANE, AnyPlane, OpKey, Plane, TraceBuilder, stat_value

OP_LINE = "XLA Ops"
MODULE_LINE = "XLA Modules"
_MODULE_EVENT = re.compile(r"^(?P<name>.*)\((?P<program_id>\d+)\)$")
# `%fusion.3 = ...` (HLO text printed by the TPU compiler) -> `fusion.3`
_TEXT_NAME = re.compile(r"^%?(?P<name>[^\s=%]+) = \S")


def read(planes: Sequence[Plane], builder: TraceBuilder) -> None:
    devices: dict[str, int] = {}  # a plane split into chunks (same name) is one device
    for plane in planes:
        m = DEVICE_PLANE.match(plane.name)
        if not m or m.group(1) != "TPU":
            continue
        device = devices.get(plane.name)
        if device is None:
            device = devices[plane.name] = builder.new_device(plane, int(m.group(2)))
        _PlaneReader(plane, builder, device).read()


class _PlaneReader:
    def __init__(self, plane: AnyPlane, builder: TraceBuilder, device: int) -> None:
        self.plane = plane
        self.builder = builder
        self.device = device
        self.names = {k: v.name for k, v in plane.stat_metadata.items()}
        self.ids = {v: k for k, v in self.names.items()}
        self.md_cache: dict[int, tuple[str, str, str, str | None]] = {}
        self.op_cache: dict[tuple[int, str], int] = {}
        self._modules: tuple[np.ndarray, np.ndarray, list[str]] | None = None
        self._module_names: dict[str, str] = {}
        self._aggregated_line = False

    def read(self) -> None:
        groups: dict[int, list[xplane_pb2.XLine]] = {}  # chunks of one line share its id
        for line in self.plane.lines:
            if line.name == OP_LINE:
                groups.setdefault(line.id, []).append(line)
        for lines in groups.values():
            self._read_line(lines)

    def _read_line(self, lines: list[xplane_pb2.XLine]) -> None:
        off_id = self.ids.get("device_offset_ps", -1)
        dur_id = self.ids.get("device_duration_ps", -1)
        md_ids: list[int] = []
        start: list[int] = []
        dur: list[int] = []
        for line in lines:
            events = line.events
            if events and events[0].WhichOneof("data") == "num_occurrences":
                self._aggregated_line = True
                self._aggregated(events, md_ids, start, dur)
                continue
            base = line.timestamp_ns * 1000
            for ev in events:
                md_ids.append(ev.metadata_id)
                stats = ev.stats
                if len(stats) >= 2:  # libtpu writes the two device stats first
                    a = stats[0]
                    b = stats[1]
                    if a.metadata_id == off_id and b.metadata_id == dur_id:
                        start.append(a.uint64_value or a.int64_value)
                        dur.append(b.uint64_value or b.int64_value)
                        continue
                dev_s = dev_d = -1
                for st in stats:
                    mid = st.metadata_id
                    if mid == off_id:
                        dev_s = st.uint64_value or st.int64_value
                    elif mid == dur_id:
                        dev_d = st.uint64_value or st.int64_value
                if dev_s >= 0 and dev_d >= 0:
                    start.append(dev_s)
                    dur.append(dev_d)
                else:
                    start.append(base + ev.offset_ps)
                    dur.append(ev.duration_ps)
        if not md_ids:
            return
        ops = self._ops(lines, np.asarray(md_ids, dtype=np.int64))
        start_arr = np.asarray(start, dtype=np.int64)
        dur_arr = np.asarray(dur, dtype=np.int64)
        keep = ops >= 0
        # Parents first where events start together, so nesting sees the enclosing op first.
        order = np.lexsort((-dur_arr, start_arr))
        order = order[keep[order]]
        self.builder.add_line(
            self.device,
            ops[order].tolist(),
            start_arr[order].tolist(),
            dur_arr[order].tolist(),
            gpu=False,
        )

    def _aggregated(
        self,
        events: Iterable[xplane_pb2.XEvent],
        md_ids: list[int],
        start: list[int],
        dur: list[int],
    ) -> None:
        """Aggregated lines (tsl AggregateXPlane): one event per op with `num_occurrences`,
        the total duration, and `self_duration_ps` when ops nested inside it. Without start
        times nothing nests: each occurrence is laid end to end with its share of the op's
        self time."""
        self_id = self.ids.get("self_duration_ps", -1)
        t = 0
        for ev in events:
            total = ev.duration_ps
            for st in ev.stats:
                if st.metadata_id == self_id:
                    total = st.int64_value or st.uint64_value
            n = max(1, ev.num_occurrences)
            each, extra = divmod(total, n)
            for k in range(n):
                d = each + (1 if k < extra else 0)
                md_ids.append(ev.metadata_id)
                start.append(t)
                dur.append(d)
                t += d

    def _ops(self, lines: list[xplane_pb2.XLine], md_ids: np.ndarray) -> np.ndarray:
        """Op index per event (-1: no such metadata)."""
        uniq, inverse = np.unique(md_ids, return_inverse=True)
        op_of = np.empty(len(uniq), dtype=np.int64)
        unresolved: list[int] = []
        for i, md_id in enumerate(uniq.tolist()):
            program_id = self._metadata(md_id)[2]
            if program_id or self._aggregated_line or not self._has_module_line():
                op_of[i] = self._op(md_id, program_id)
            else:
                op_of[i] = -2
                unresolved.append(i)
        ops = op_of[inverse]
        if unresolved:
            # Metadata without program_id: the module is the XLA Modules event enclosing the op.
            idx = np.flatnonzero(np.isin(inverse, unresolved))
            programs = self._enclosing_programs(lines, idx)
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

    def _module_lines(self) -> list[xplane_pb2.XLine]:
        return [ln for ln in self.plane.lines if ln.name == MODULE_LINE]

    def _has_module_line(self) -> bool:
        return any(ln.name == MODULE_LINE for ln in self.plane.lines)

    def _plane_module_names(self) -> dict[str, str]:
        """program id -> module name, from the names of this plane's XLA Modules events."""
        return self._load_modules()[1] if self._modules is None else self._module_names

    def _load_modules(self) -> tuple[tuple[np.ndarray, np.ndarray, list[str]], dict[str, str]]:
        spans: list[tuple[int, int, str]] = []
        names: dict[int, tuple[str, str] | None] = {}
        for line in self._module_lines():
            base = line.timestamp_ns * 1000
            for ev in line.events:
                parsed = names.get(ev.metadata_id, ())
                if parsed == ():
                    md = self.plane.event_metadata.get(ev.metadata_id)
                    m = _MODULE_EVENT.match(md.name) if md is not None else None
                    parsed = names[ev.metadata_id] = (
                        (m.group("name"), m.group("program_id")) if m else None
                    )
                if parsed:
                    s = base + ev.offset_ps
                    spans.append((s, s + ev.duration_ps, parsed[1]))
                    self._module_names.setdefault(parsed[1], parsed[0])
        spans.sort()
        self._modules = (
            np.array([s[0] for s in spans], dtype=np.int64),
            np.array([s[1] for s in spans], dtype=np.int64),
            [s[2] for s in spans],
        )
        return self._modules, self._module_names

    def _enclosing_programs(self, lines: list[xplane_pb2.XLine], idx: np.ndarray) -> list[str]:
        """Program id of the XLA Modules event enclosing each event `idx` (host-clock spans,
        which both lines carry), "" when none does."""
        starts, ends, programs = self._modules or self._load_modules()[0]
        events = [ev for line in lines for ev in line.events]
        bases = [line.timestamp_ns * 1000 for line in lines for _ in line.events]
        out: list[str] = []
        for j in idx.tolist():
            ev = events[j]
            s = bases[j] + ev.offset_ps
            k = int(np.searchsorted(starts, s, side="right")) - 1
            if k >= 0 and s + ev.duration_ps <= ends[k]:
                out.append(programs[k])
            else:
                out.append("")
        return out


def _number(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None
