"""Synthetic TPU profiles (`.xplane.pb`) laid out the way libtpu writes them.

The layout copies a real TPU v6e trace (`openxla/xprof`, `xprof/convert/test_xplanes/
tpu_inference_2.xplane.pb`, the same run as `../shared/fixtures/tpu-text/`; its bytes above 0x7F
are lost but its structure reads back) and xprof's converters; docs/formats.md lists each fact
and its source. Per `/device:TPU:N` plane:

- plane stats `core_details` (bytes), `device_type_string`, `peak_teraflops_per_second`,
  `peak_hbm_bw_gigabytes_per_second`, `peak_{cmem,vmem,sram}_{rd,wr}_bw_gigabytes_per_second`
  (doubles), `has_megacore`, `has_merged_vmem`;
- lines `Steps` (id 1, training only), `XLA Modules` (2), `XLA Ops` (3), `Async XLA Ops` (4),
  `Overlay` (7, empty), `XLA TraceMe` (6); no line timestamp;
- `XLA Ops` event metadata: `name` = the HLO text, `display_name` = the instruction name, stats
  `hlo_category`, `program_id` (uint64), `symbol_id`, `deduplicated_name`, `flops`, `model_flops`,
  `bytes_accessed`, `memory_access_breakdown`, `raw_bytes_accessed`, `shape_with_layout`, `tf_op`,
  `source`; events carry `device_offset_ps` / `device_duration_ps` (device clock) besides
  `offset_ps` / `duration_ps` (the same span on the host clock, slightly scaled);
- `XLA Modules` events named `<module>(<program_id>)` with stats `run_id`, `replica_id`,
  `queue_id`, `core_type`, `_ct`, `_c`; `Async XLA Ops` events (copy-start .. copy-done) whose
  metadata is the copy-start's text without display name, with stats `hlo_op`, `_a`, `flow`,
  `id`.

`/host:metadata` holds one metadata per module (`<module>(<program_id>)`, id = program id,
stat `Hlo Proto`) and the bookkeeping entries real traces have (`XDB_COMPILER_METADATA:...`,
`SYMBOL_MAP:...`, `XLA_HLO_MODULE_ID_MAP:...`, `ThreadpoolListener::Region`); `/host:CPU` holds
runtime TraceMes; `Task Environment` the profile start/stop. Ops may nest: a `while` event
encloses its body's ops on the `XLA Ops` line.

`write_tpu_trace` returns what it wrote (per-op occurrences, durations, self times, per-device
busy time) so tests can compare a reader with the ground truth.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf.internal.containers import RepeatedCompositeFieldContainer

from hlogap.proto import hlo_pb2, xplane_pb2

StatValue = int | float | str | bytes
Stats = list[tuple[str, StatValue]]

# Stats written as uint64 in real traces (the rest of the integers are int64).
_UINT64 = frozenset(
    {
        "program_id",
        "symbol_id",
        "device_offset_ps",
        "device_duration_ps",
        "run_id",
        "queue_id",
        "core_type",
        "flow",
        "id",
        "all_reduce_unique_id",
        "profile_start_time",
        "profile_stop_time",
    }
)
# Host-clock view of a device time: real `offset_ps`/`duration_ps` differ from the device stats
# by ~0.05% (7911738828 vs 7915965000 ps on the v6e trace).
_HOST_NUM, _HOST_DEN = 999_466, 1_000_000
_DEVICE_T0 = 1_000_000_000_000  # device clock at the start of the trace (ps)
_HOST_T0 = 5_000_000_000  # host offset of that instant (ps since the profile start)
STEPS, MODULES, XLA_OPS, ASYNC_OPS, TRACEME, OVERLAY = 1, 2, 3, 4, 6, 7


@dataclass(frozen=True)
class TpuOp:
    """One HLO instruction as its `XLA Ops` event metadata describes it."""

    name: str
    hlo_text: str
    category: str
    flops: int = 0
    model_flops: int = 0
    bytes_accessed: int = 0
    raw_bytes_accessed: int | None = None
    # (operation_type 1=READ 2=WRITE, memory_space 1=HBM, bytes) per access.
    memory_access_breakdown: tuple[tuple[int, int, int], ...] = ()
    deduplicated_name: str = ""
    tf_op: str = ""
    source: str = ""
    shape_with_layout: str = ""
    symbol_id: int = 0  # 0: numbered in order of first use within the program


@dataclass(frozen=True)
class Program:
    name: str  # "jit_train_step"
    program_id: int  # uint64

    @property
    def event_name(self) -> str:
        return f"{self.name}({self.program_id})"


@dataclass
class Run:
    """One execution of an op on the `XLA Ops` line.

    A leaf lasts `device_ps`. A parent (while/call/conditional) encloses `children`, laid end to
    end after `lead_ps` (default: half of `device_ps`); the rest of `device_ps` follows them.
    `gap_ps` of idle time follows a run (inside a parent it is the parent's self time)."""

    op: TpuOp
    device_ps: int
    children: list[Run] = field(default_factory=list)
    gap_ps: int = 0
    lead_ps: int | None = None


@dataclass
class Execution:
    program: Program
    runs: list[Run]
    step: int | None = None  # a `Steps` event encloses the execution when set
    run_id: int = 1


@dataclass
class Device:
    ordinal: int
    executions: list[Execution]


@dataclass(frozen=True)
class Chip:
    device_type: str
    peak_teraflops_per_second: float
    peak_hbm_bw_gigabytes_per_second: float
    peak_vmem_bw_gigabytes_per_second: float = 0.0
    peak_sram_bw_gigabytes_per_second: float = 0.0
    has_megacore: int = 0
    has_merged_vmem: int = 0


@dataclass
class TraceSpec:
    host: str
    chip: Chip
    programs: list[Program]
    devices: list[Device]
    sparse_core: bool = False  # add `/device:TPU:N SparseCore 0` planes (not TensorCore time)


@dataclass
class OpTotals:
    events: int = 0
    # (device, run id) of the module executions the op ran in: hlogap's occurrences
    executions: set[tuple[int, int]] = field(default_factory=set)
    duration_ps: int = 0
    self_ps: int = 0
    host_duration_ps: int = 0  # the `duration_ps` fields (host clock), for contrast

    @property
    def occurrences(self) -> int:
        return len(self.executions)


@dataclass
class Written:
    """Ground truth of a written trace. Op keys are (program id, instruction name)."""

    ops: dict[tuple[str, str], OpTotals] = field(default_factory=dict)
    by_device: dict[int, dict[tuple[str, str], OpTotals]] = field(default_factory=dict)
    busy_ps: dict[int, int] = field(default_factory=dict)  # union of XLA Ops events per device
    info: dict[tuple[str, str], TpuOp] = field(default_factory=dict)
    module_names: dict[str, str] = field(default_factory=dict)  # program id -> module
    op_events: int = 0
    async_events: int = 0
    sparse_core_events: int = 0
    host_events: int = 0


class _Plane:
    """An XPlane with stat/event metadata created on first use, ids from 1 as libtpu does."""

    def __init__(self, space: xplane_pb2.XSpace, name: str, plane_id: int) -> None:
        self.plane = space.planes.add()
        self.plane.id = plane_id
        self.plane.name = name
        self._stat_ids: dict[str, int] = {}
        self._md_ids: dict[object, int] = {}

    def stat_id(self, name: str) -> int:
        sid = self._stat_ids.get(name)
        if sid is None:
            sid = self._stat_ids[name] = len(self._stat_ids) + 1
            meta = self.plane.stat_metadata[sid]
            meta.id = sid
            meta.name = name
        return sid

    def add_stat(
        self,
        stats: RepeatedCompositeFieldContainer[xplane_pb2.XStat],
        name: str,
        value: StatValue,
    ) -> None:
        st = stats.add()
        st.metadata_id = self.stat_id(name)
        if isinstance(value, bytes):
            st.bytes_value = value
        elif isinstance(value, str):
            st.str_value = value
        elif isinstance(value, float):
            st.double_value = value
        elif name in _UINT64:
            st.uint64_value = value
        else:
            st.int64_value = value

    def metadata(
        self,
        key: object,
        name: str,
        display_name: str = "",
        stats: Stats | None = None,
        md_id: int | None = None,
    ) -> int:
        found = self._md_ids.get(key)
        if found is not None:
            return found
        if md_id is None:
            md_id = len(self._md_ids) + 1
        self._md_ids[key] = md_id
        md = self.plane.event_metadata[md_id]
        md.id = md_id
        md.name = name
        if display_name:
            md.display_name = display_name
        for stat, value in stats or []:
            self.add_stat(md.stats, stat, value)
        return md_id

    def line(self, line_id: int, name: str) -> xplane_pb2.XLine:
        line = self.plane.lines.add()
        line.id = line_id
        line.name = name
        return line

    def event(
        self,
        line: xplane_pb2.XLine,
        md_id: int,
        offset_ps: int,
        duration_ps: int,
        stats: Stats | None = None,
    ) -> None:
        ev = line.events.add()
        ev.metadata_id = md_id
        ev.offset_ps = offset_ps
        ev.duration_ps = duration_ps
        for stat, value in stats or []:
            self.add_stat(ev.stats, stat, value)


def _host(device_ps: int) -> int:
    return _HOST_T0 + (device_ps - _DEVICE_T0) * _HOST_NUM // _HOST_DEN


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _fields(*pairs: tuple[int, int]) -> bytes:
    """Varint fields of a small proto message (zero values omitted, as proto3 does)."""
    return b"".join(_varint(num << 3) + _varint(v) for num, v in pairs if v)


def _breakdown(accesses: tuple[tuple[int, int, int], ...]) -> bytes:
    """A serialized MemoryAccessBreakdown{repeated MemoryAccessed memory_accessed = 1}."""
    out = b""
    for op_type, space, nbytes in accesses:
        body = _fields((1, op_type), (2, space), (3, nbytes))
        out += b"\x0a" + _varint(len(body)) + body
    return out


def _op_stats(op: TpuOp, program: Program, symbol_id: int) -> Stats:
    stats: Stats = [
        ("hlo_category", op.category),
        ("program_id", program.program_id),
        ("symbol_id", symbol_id),
    ]
    if op.deduplicated_name:
        stats.append(("deduplicated_name", op.deduplicated_name))
    stats += [
        ("flops", op.flops),
        ("model_flops", op.model_flops),
        ("bytes_accessed", op.bytes_accessed),
        ("memory_access_breakdown", _breakdown(op.memory_access_breakdown)),
    ]
    if op.raw_bytes_accessed is not None:
        stats.append(("raw_bytes_accessed", op.raw_bytes_accessed))
    if op.shape_with_layout:
        stats.append(("shape_with_layout", op.shape_with_layout))
    if op.tf_op:
        stats.append(("tf_op", op.tf_op))
    if op.source:
        stats += [("source", op.source), ("source_stack", f"{op.source}\n")]
    return stats


_DONE_OPERAND = re.compile(r"%(?P<start>[\w.\-]+)\)$")


def _lay(run: Run, start: int, events: list[tuple[int, int, TpuOp, int]]) -> int:
    """Append (start, duration, op, self time) for `run` and the runs nested in it, parents
    first; return where the next run starts."""
    if not run.children:
        events.append((start, run.device_ps, run.op, run.device_ps))
        return start + run.device_ps + run.gap_ps
    slot = len(events)
    events.append((start, 0, run.op, 0))
    lead = run.device_ps // 2 if run.lead_ps is None else run.lead_ps
    cursor = start + lead
    child_total = 0
    for child in run.children:
        first = len(events)
        cursor = _lay(child, cursor, events)
        child_total += events[first][1]
    end = cursor + run.device_ps - lead
    events[slot] = (start, end - start, run.op, end - start - child_total)
    return end + run.gap_ps


def _write_device(
    space: xplane_pb2.XSpace, spec: TraceSpec, device: Device, plane_id: int, out: Written
) -> None:
    pl = _Plane(space, f"/device:TPU:{device.ordinal}", plane_id)
    n = device.ordinal
    chip = spec.chip
    for stat, value in [
        ("core_details", _fields((2, n), (4, n), (5, n + 4), (6, n + 4))),
        ("device_type_string", chip.device_type),
        ("peak_teraflops_per_second", chip.peak_teraflops_per_second),
        ("peak_hbm_bw_gigabytes_per_second", chip.peak_hbm_bw_gigabytes_per_second),
        ("peak_cmem_rd_bw_gigabytes_per_second", 0.0),
        ("peak_cmem_wr_bw_gigabytes_per_second", 0.0),
        ("peak_vmem_rd_bw_gigabytes_per_second", chip.peak_vmem_bw_gigabytes_per_second),
        ("peak_vmem_wr_bw_gigabytes_per_second", chip.peak_vmem_bw_gigabytes_per_second),
        ("peak_sram_rd_bw_gigabytes_per_second", chip.peak_sram_bw_gigabytes_per_second),
        ("peak_sram_wr_bw_gigabytes_per_second", chip.peak_sram_bw_gigabytes_per_second),
        ("has_megacore", chip.has_megacore),
        ("has_merged_vmem", chip.has_merged_vmem),
    ]:
        pl.add_stat(pl.plane.stats, stat, value)
    steps = pl.line(STEPS, "Steps") if any(e.step is not None for e in device.executions) else None
    modules = pl.line(MODULES, "XLA Modules")
    ops_line = pl.line(XLA_OPS, "XLA Ops")
    async_line = pl.line(ASYNC_OPS, "Async XLA Ops")
    pl.line(OVERLAY, "Overlay")
    traceme = pl.line(TRACEME, "XLA TraceMe")

    per_device = out.by_device.setdefault(n, {})
    op_md: dict[tuple[int, str], int] = {}
    off_sid = pl.stat_id("device_offset_ps")
    dur_sid = pl.stat_id("device_duration_ps")
    t = _DEVICE_T0 + 7_500_000 * n  # devices start a little apart
    busy = 0
    flow = 0
    for ex in device.executions:
        program = ex.program
        out.module_names[str(program.program_id)] = program.name
        pl.event(traceme, pl.metadata(("tm", "dependency-wait"), "dependency-wait"), _host(t), 78)
        module_start = t + 1_250_000
        cursor = module_start + 250_000
        events: list[tuple[int, int, TpuOp, int]] = []  # (start, dur, op, self)

        for run in ex.runs:
            first = len(events)
            cursor = _lay(run, cursor, events)
            busy += events[first][1]
        module_end = cursor + 250_000
        # XLA Modules: one event per execution, named "<module>(<program id>)".
        md = pl.metadata(("module", program.program_id), program.event_name)
        pl.event(
            modules,
            md,
            _host(module_start),
            _host(module_end) - _host(module_start),
            [
                ("run_id", ex.run_id),
                ("replica_id", 0),
                ("queue_id", 0),
                ("core_type", 0),
                ("_ct", 12),
                ("_c", 0),
            ],
        )
        if steps is not None and ex.step is not None:
            step_md = pl.metadata(("step", ex.step), str(ex.step))
            pl.event(steps, step_md, _host(t), _host(module_end) - _host(t))
        started: dict[str, tuple[int, TpuOp]] = {}
        for start, dur, op, self_ps in events:
            key = (program.program_id, op.name)
            md = op_md.get(key)
            if md is None:
                sym = op.symbol_id or len(op_md) + 1
                stats = _op_stats(op, program, sym)
                md = op_md[key] = pl.metadata(("op", *key), op.hlo_text, op.name, stats)
            host_start = _host(start)
            host_dur = _host(start + dur) - host_start
            ev = ops_line.events.add(metadata_id=md, offset_ps=host_start, duration_ps=host_dur)
            ev.stats.add(metadata_id=off_sid, uint64_value=start)
            ev.stats.add(metadata_id=dur_sid, uint64_value=dur)
            if op.category == "all-reduce":
                pl.add_stat(ev.stats, "all_reduce_unique_id", ex.run_id)
            out.op_events += 1
            k = (str(program.program_id), op.name)
            out.info[k] = op
            for totals in (out.ops.setdefault(k, OpTotals()), per_device.setdefault(k, OpTotals())):
                totals.events += 1
                totals.executions.add((n, ex.run_id))
                totals.duration_ps += dur
                totals.self_ps += self_ps
                totals.host_duration_ps += host_dur
            # Async XLA Ops: a copy-start .. copy-done transfer, named by the start's text.
            if op.category == "copy-start":
                started[op.name] = (start, op)
            elif op.category == "copy-done":
                m = _DONE_OPERAND.search(op.hlo_text)
                begun = started.pop(m.group("start"), None) if m else None
                if begun is not None:
                    amd = pl.metadata(("async", *key), begun[1].hlo_text)
                    flow += 1
                    pl.event(
                        async_line,
                        amd,
                        _host(begun[0]),
                        _host(start + dur) - _host(begun[0]),
                        [("hlo_op", op.name), ("_a", 1), ("flow", flow), ("id", flow - 1)],
                    )
                    out.async_events += 1
        if any(op.category == "all-reduce" for _, _, op, _ in events):
            pl.event(traceme, pl.metadata(("tm", "barrier-cores"), "barrier-cores"), _host(t), 78)
        t = module_end + 3_000_000
    out.busy_ps[n] = busy


def _write_sparse_core(
    space: xplane_pb2.XSpace, spec: TraceSpec, device: Device, plane_id: int, out: Written
) -> None:
    """A SparseCore plane: its ops run beside the TensorCore's and are not its time."""
    pl = _Plane(space, f"/device:TPU:{device.ordinal} SparseCore 0", plane_id)
    pl.add_stat(pl.plane.stats, "device_type_string", spec.chip.device_type)
    pl.line(118, "Sparse Core Steps")
    mod_line = pl.line(66, "Sparse Core Modules")
    op_line = pl.line(67, "Sparse Core Ops")
    t = _DEVICE_T0
    for ex in device.executions[:2]:
        for run in ex.runs[:3]:
            op = run.op
            key = (ex.program.program_id, op.name)
            md = pl.metadata(("op", *key), op.hlo_text, op.name, _op_stats(op, ex.program, 1))
            mmd = pl.metadata(("module", ex.program.program_id), ex.program.event_name)
            pl.event(mod_line, mmd, _host(t), 2_000_000, [("offload_core_id", 0)])
            pl.event(
                op_line,
                md,
                _host(t),
                1_000_000,
                [("device_offset_ps", t), ("device_duration_ps", 1_000_000)],
            )
            out.sparse_core_events += 1
            t += 3_000_000


def _write_metadata_plane(space: xplane_pb2.XSpace, spec: TraceSpec, plane_id: int) -> None:
    pl = _Plane(space, "/host:metadata", plane_id)
    first = spec.programs[0].program_id if spec.programs else 1
    pl.metadata(
        "xdb",
        f"XDB_COMPILER_METADATA:{first}",
        stats=[("symbol_id", str(first)), ("symbol_type", "XDB_COMPILER_METADATA")],
        md_id=2,
    )
    pl.metadata(
        "symbols",
        "SYMBOL_MAP:9887984828784582650",
        stats=[("symbol_id", "9887984828784582650"), ("symbol_type", "SYMBOL_MAP")],
        md_id=3,
    )
    pl.metadata("region", "ThreadpoolListener::Region", md_id=4)
    for program in spec.programs:
        proto = hlo_pb2.HloProto()
        proto.hlo_module.name = program.name
        proto.hlo_module.id = program.program_id & 0x7FFF_FFFF
        # The map key is the program id (an int64 key: large ids wrap negative).
        pid = program.program_id
        key = pid - (1 << 64) if pid >= 1 << 63 else pid
        pl.metadata(
            program.program_id,
            program.event_name,
            stats=[("Hlo Proto", proto.SerializeToString())],
            md_id=key,
        )
    pl.metadata(
        "ids",
        "XLA_HLO_MODULE_ID_MAP:11395383671578897891",
        stats=[("symbol_id", "11395383671578897891"), ("symbol_type", "XLA_HLO_MODULE_ID_MAP")],
        md_id=1,
    )


def _write_host_plane(
    space: xplane_pb2.XSpace, spec: TraceSpec, plane_id: int, out: Written
) -> None:
    """Runtime TraceMes on host threads: never device op time."""
    pl = _Plane(space, "/host:CPU", plane_id)
    main = pl.line(3116817, "main/3116817")
    main.timestamp_ns = 1_700_000_000_000_000_000
    tasks = pl.line(3117377, "pjrt-tpu-tasks/3117377")
    tasks.timestamp_ns = main.timestamp_ns
    t = 1_000_000
    for device in spec.devices:
        for ex in device.executions[:20]:
            name = ex.program.name.removeprefix("jit_")
            pjit = pl.metadata(("pjit", name), f"PjitFunction({name})")
            pl.event(main, pjit, t, 400_000, [("run_id", ex.run_id)])
            exe = pl.metadata("exe", "TfrtTpuLoadedExecutable::Execute")
            pl.event(main, exe, t + 50_000, 300_000, [("run_id", ex.run_id)])
            sys_exec = pl.metadata("sys", "tpu::System::Execute")
            pl.event(
                tasks,
                sys_exec,
                t + 100_000,
                150_000,
                [("device_ordinal", device.ordinal), ("queue_id", 0), ("run_id", ex.run_id)],
            )
            out.host_events += 3
            t += 500_000


def write_tpu_trace(path: Path, spec: TraceSpec) -> Written:
    """Write `spec` as `path` (an `.xplane.pb`) and return the ground truth of what was written."""
    space = xplane_pb2.XSpace()
    space.hostnames.append(spec.host)
    out = Written()
    plane_id = 2
    for device in spec.devices:
        _write_device(space, spec, device, plane_id, out)
        plane_id += 1
    if spec.sparse_core:
        for device in spec.devices:
            _write_sparse_core(space, spec, device, plane_id, out)
            plane_id += 1
    _write_metadata_plane(space, spec, plane_id)
    _write_host_plane(space, spec, plane_id + 1, out)
    env = _Plane(space, "Task Environment", plane_id + 2)
    env.add_stat(env.plane.stats, "profile_start_time", 1_700_000_000_000_000_000)
    env.add_stat(env.plane.stats, "profile_stop_time", 1_700_000_030_000_000_000)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(space.SerializeToString())
    return out


# ---------------------------------------------------------------- real TPU HLO: TPU v6e (v6 Lite)

V6E = Chip(
    "TPU v6 Lite",
    peak_teraflops_per_second=918.0,
    peak_hbm_bw_gigabytes_per_second=1638.4,
    peak_vmem_bw_gigabytes_per_second=26214.4,
    peak_sram_bw_gigabytes_per_second=26214.4,
    has_merged_vmem=1,
)
# The programs of the real v6e trace (ids from its `XLA Modules` events).
JIT_F = Program("jit_f", 12190760917235803885)
JIT_PSUM = Program("jit__psum", 9646411105960254074)
JIT_BROADCAST = Program("jit_broadcast_in_dim", 11287434908481120160)
JIT_CONVERT = Program("jit_convert_element_type", 2433868464432466958)

_GB = 5368709120  # f32[5,1024,1024,256]
_SOURCE = "host_offload_stress_test.py:29"
# XLA's costs on the real trace (their high bits survived; sizes are powers of two).
_V6E_COSTS: dict[str, dict[str, object]] = {
    "fusion": {
        "flops": 1342177280,
        "model_flops": 1342177280,
        "bytes_accessed": 2 * _GB,
        "memory_access_breakdown": ((1, 1, _GB), (2, 1, _GB)),
        "tf_op": "jit(f)/jit(main)/add",
        "source": _SOURCE,
    },
    "all-reduce": {
        "flops": 1342177280,
        "model_flops": 1342177280,
        "bytes_accessed": 2 * _GB,
        "memory_access_breakdown": ((1, 1, _GB), (2, 1, _GB)),
        "tf_op": "jit(_psum)/jit(main)/reduce_sum",
        "source": _SOURCE,
    },
    "broadcast": {
        "bytes_accessed": _GB,
        "memory_access_breakdown": ((2, 1, _GB),),
        "tf_op": "jit(broadcast_in_dim)/jit(main)/broadcast_in_dim",
        "source": _SOURCE,
    },
    "copy-start": {"bytes_accessed": _GB, "raw_bytes_accessed": _GB},
    "copy-done": {"bytes_accessed": _GB, "raw_bytes_accessed": _GB},
}
_V6E_CATEGORY = {
    "fusion": "loop fusion",
    "all-reduce": "all-reduce",
    "broadcast": "broadcast",
    "copy-start": "copy-start",
    "copy-done": "copy-done",
}
# jit_f's schedule: three host->device prefetches, then fusion / copy-back per input.
_V6E_ORDER = [
    "copy-start",
    "copy-start.2",
    "copy-start.4",
    "copy-done",
    "broadcast_add_fusion.2",
    "copy-start.1",
    "copy-done.2",
    "broadcast_add_fusion.1",
    "copy-start.3",
    "copy-done.4",
    "broadcast_add_fusion",
    "copy-start.5",
    "copy-done.1",
    "copy-done.3",
    "copy-done.5",
]
_V6E_SYMBOLS = {
    "broadcast_add_fusion.2": 1,
    "copy-done": 9,
    "copy-start": 10,
    "copy-start.2": 17,
    "copy-start.4": 18,
    "copy-start.1": 19,
    "copy-done.2": 20,
    "broadcast_add_fusion.1": 21,
    "copy-start.3": 27,
    "copy-done.4": 28,
    "broadcast_add_fusion": 29,
    "copy-start.5": 35,
    "copy-done.1": 36,
    "copy-done.3": 37,
    "copy-done.5": 38,
}


def read_hlo_lines(path: Path) -> list[str]:
    """HLO instruction lines of the damaged v6e trace, without the trailing `"\\tcopy-done*`
    protobuf bytes that stuck to one of them."""
    lines = []
    for raw in path.read_text().splitlines():
        text = raw.split('"\t', 1)[0].rstrip('"').strip()
        if text:
            lines.append(text)
    return lines


def v6e_ops(hlo_lines: list[str]) -> dict[str, TpuOp]:
    """TpuOps for the real v6e instructions, with the costs the real trace carried."""
    ops = {}
    for text in hlo_lines:
        m = re.match(r"%(?P<name>\S+) = (?P<shape>.+?) (?P<opcode>[a-z\-]+)\(", text)
        assert m, text
        name, opcode = m.group("name"), m.group("opcode")
        costs = dict(_V6E_COSTS.get(opcode, {}))
        dedup = "broadcast_add_fusion" if re.fullmatch(r"broadcast_add_fusion\.\d+", name) else ""
        ops[name] = TpuOp(
            name=name,
            hlo_text=text,
            category=_V6E_CATEGORY.get(opcode, opcode),
            deduplicated_name=dedup,
            shape_with_layout=m.group("shape") if opcode.startswith("copy") else "",
            symbol_id=_V6E_SYMBOLS.get(name, 1),
            **costs,  # type: ignore[arg-type]
        )
    return ops


def _quantized(ps: float, quantum: int = 1250) -> int:
    """Device durations are whole clock periods (1250 ps on the v6e trace)."""
    return round(ps / quantum) * quantum


def v6e_spec(hlo_lines: list[str], executions: int = 100, devices: int = 4) -> TraceSpec:
    """The real v6e run's shape: 4 chips; jit_f (15 ops, host offload) 100 times on each,
    jit__psum (an all-reduce) 3 times; jit_convert_element_type and jit_broadcast_in_dim once on
    TPU:0. Device times are like the real trace's (fusions ~8.15 ms, copy-start 0 ps, copy-done
    waiting up to ~190 ms); the damaged trace kept too few of them to copy them one by one."""
    ops = v6e_ops(hlo_lines)
    rng = random.Random(6)
    devs = []
    for ordinal in range(devices):
        execs: list[Execution] = []
        if ordinal == 0:
            execs.append(Execution(JIT_CONVERT, []))
            execs.append(
                Execution(JIT_BROADCAST, [Run(ops["broadcast.2"], _quantized(3.41e9), gap_ps=0)])
            )
        for k in range(3):
            ar = Run(ops["all-reduce"], _quantized(rng.uniform(52e9, 56e9)))
            execs.append(Execution(JIT_PSUM, [ar], run_id=k + 1))
        for k in range(executions):
            runs = []
            for name in _V6E_ORDER:
                op = ops[name]
                if op.category == "copy-start":
                    ps = 0
                elif op.category == "copy-done":
                    ps = _quantized(rng.uniform(0.2e9, 190e9))
                else:
                    ps = _quantized(rng.uniform(7.91e9, 8.16e9))
                runs.append(Run(op, ps, gap_ps=rng.choice((0, 1250, 2500, 6250))))
            execs.append(Execution(JIT_F, runs, run_id=k + 1))
        devs.append(Device(ordinal, execs))
    return TraceSpec("t1v-n-9bfa07b4-w-0", V6E, [JIT_CONVERT, JIT_BROADCAST, JIT_PSUM, JIT_F], devs)


# --------------------------------------------------------- real TPU HLO: TPU v5p (xprof goldens)

# xprof's roofline for the v5p run: 233.4 TFLOP/s and 1287.45 GiB/s (= 1382.4 GB/s) per device.
V5P = Chip("TPU v5", peak_teraflops_per_second=233.4, peak_hbm_bw_gigabytes_per_second=1382.4)
_WHILE_TEXT = (
    "%while.7 = (s32[]{:T(128)}, bf16[16,2048,7168]{2,1,0:T(8,128)(2,1)}) "
    "while((s32[]{:T(128)}, bf16[16,2048,7168]{2,1,0:T(8,128)(2,1)}) %tuple.12), "
    "condition=%region_2.cond, body=%region_1.body"
)


@dataclass(frozen=True)
class ProfiledOp:
    """An op of `op_profile.json.gz`: its program, XLA metadata and measured totals."""

    program: Program
    op: TpuOp
    occurrences: int
    raw_time_ps: int  # total over all occurrences


def read_op_profile(path: Path) -> list[ProfiledOp]:
    """The leaf ops of xprof's op profile (program > category > [dedup group >] op)."""
    data = json.loads(gzip.decompress(path.read_bytes()))
    out: list[ProfiledOp] = []

    def walk(node: dict, program: Program | None) -> None:
        xla = node.get("xla") or {}
        metrics = node.get("metrics") or {}
        name = node.get("name", "")
        m = re.fullmatch(r"(?P<name>.*)\((?P<pid>\d+)\)", name)
        if m and program is None:
            program = Program(m.group("name"), int(m.group("pid")))
        occ = int(metrics.get("occurrences", 0))
        if xla.get("expression") and occ > 0 and not name.endswith("its duplicate(s)"):
            assert program is not None
            src = xla.get("sourceInfo") or {}
            hbm = (metrics.get("rawBytesAccessedArray") or [0])[0]
            op = TpuOp(
                name=name,
                hlo_text=xla["expression"],
                category=xla.get("category", ""),
                flops=round(float(metrics.get("bf16Flops", 0)) / occ),
                model_flops=round(float(metrics.get("rawFlops", 0)) / occ),
                bytes_accessed=round(float(hbm) / occ),
                tf_op=xla.get("provenance", ""),
                source=f"{src['fileName']}:{src['lineNumber']}" if src.get("fileName") else "",
            )
            out.append(ProfiledOp(program, op, occ, int(metrics.get("rawTime", 0))))
            return
        for child in node.get("children", []):
            walk(child, program)

    walk(data["byProgram"], None)
    return out


def _split(total: int, parts: int) -> list[int]:
    each, extra = divmod(total, parts)
    return [each + (1 if k < extra else 0) for k in range(parts)]


def v5p_spec(profiled: list[ProfiledOp], devices: int = 8) -> TraceSpec:
    """The v5p run's ops with their real occurrences and total times, spread over `devices`
    TensorCores (xprof saw 8). Per device and program, ops that run once per execution sit on
    the top level; ops that run several times per execution (the scanned decoder layers) run in
    the iterations of a `while` event, nested on the XLA Ops line as on real TPUs."""
    durations = {id(p): iter(_split(p.raw_time_ps, p.occurrences)) for p in profiled}
    while_ops: dict[int, TpuOp] = {}
    programs: list[Program] = []
    for p in profiled:
        if p.program not in programs:
            programs.append(p.program)
    rng = random.Random(5)
    devs = []
    for ordinal in range(devices):
        execs: list[Execution] = []
        for program in programs:
            mine = [
                (p, _split(p.occurrences, devices)[ordinal])
                for p in profiled
                if p.program == program
            ]
            mine = [(p, n) for p, n in mine if n > 0]
            if not mine:
                continue
            e_count = min(n for _, n in mine)
            for e in range(e_count):
                top: list[Run] = []
                body: list[list[Run]] = []
                for p, n in mine:
                    count = _split(n, e_count)[e]
                    if count == 1:
                        top.append(Run(p.op, next(durations[id(p)]), gap_ps=rng.randrange(2000)))
                        continue
                    for it in range(count):
                        while len(body) <= it:
                            body.append([])
                        body[it].append(
                            Run(p.op, next(durations[id(p)]), gap_ps=rng.randrange(2000))
                        )
                runs = top
                if body:
                    wop = while_ops.setdefault(
                        program.program_id,
                        TpuOp("while.7", _WHILE_TEXT, "while", symbol_id=900),
                    )
                    loop = Run(wop, 120_000, [r for it in body for r in it], gap_ps=1500)
                    half = len(top) // 2
                    runs = [*top[:half], loop, *top[half:]]
                step = e if program.name == "jit_train_step" else None
                execs.append(Execution(program, runs, step=step, run_id=e + 1))
        devs.append(Device(ordinal, execs))
    return TraceSpec("gke-tpu-b309f56b-rq5s", V5P, programs, devs, sparse_core=True)


# ------------------------------------------------------ a small trace that needs no shared data

# Four instructions of the real v6e trace, verbatim (../shared/fixtures/tpu-text/).
REAL_V6E_TEXT = {
    "copy-start": (
        "%copy-start = (f32[5,1024,1024,256]{3,2,1,0:T(8,128)}, "
        "f32[5,1024,1024,256]{3,2,1,0:T(8,128)S(5)}, u32[]{:S(2)}) "
        "copy-start(f32[5,1024,1024,256]{3,2,1,0:T(8,128)S(5)} %param)"
    ),
    "copy-done": (
        "%copy-done = f32[5,1024,1024,256]{3,2,1,0:T(8,128)} "
        "copy-done((f32[5,1024,1024,256]{3,2,1,0:T(8,128)}, "
        "f32[5,1024,1024,256]{3,2,1,0:T(8,128)S(5)}, u32[]{:S(2)}) %copy-start)"
    ),
    "broadcast_add_fusion.2": (
        "%broadcast_add_fusion.2 = f32[5,1024,1024,256]{3,2,1,0:T(8,128)} "
        "fusion(f32[5,1024,1024,256]{3,2,1,0:T(8,128)} %copy-done), kind=kLoop, "
        "calls=%fused_computation.2"
    ),
    "all-reduce": (
        "%all-reduce = f32[5,1024,1024,256]{3,2,1,0:T(8,128)} "
        "all-reduce(f32[5,1024,1024,256]{3,2,1,0:T(8,128)} %bitcast), channel_id=1, "
        "replica_groups=[4,2]<=[2,4]T(1,0), use_global_device_ids=true, "
        "to_apply=%region_0.3.clone"
    ),
}


def small_spec(devices: int = 2, executions: int = 3, loop_lead_ps: int | None = None) -> TraceSpec:
    """jit_f with a copy-start, a `while` whose body runs a fusion three times, the copy-done,
    and jit__psum's all-reduce; `devices` chips, `executions` runs of each program.
    `loop_lead_ps=0` starts the loop's first body op with the loop."""
    ops = v6e_ops(list(REAL_V6E_TEXT.values()))
    loop_op = TpuOp("while.7", _WHILE_TEXT, "while", symbol_id=900)
    fusion = ops["broadcast_add_fusion.2"]
    devs = []
    for ordinal in range(devices):
        execs = []
        for k in range(executions):
            body = [
                Run(fusion, 8_150_796_250 + 1250 * (i + k + ordinal), gap_ps=2500) for i in range(3)
            ]
            runs = [
                Run(ops["copy-start"], 0, gap_ps=1250),
                Run(loop_op, 40_000 + 1250 * k, body, gap_ps=6250, lead_ps=loop_lead_ps),
                Run(ops["copy-done"], 139_188_015_000 + 1250 * ordinal, gap_ps=0),
            ]
            execs.append(Execution(JIT_F, runs, step=k, run_id=k + 1))
            ar = Run(ops["all-reduce"], 54_000_000_000 + 1250 * k)
            execs.append(Execution(JIT_PSUM, [ar], run_id=k + 1))
        devs.append(Device(ordinal, execs))
    return TraceSpec("t1v-small", V6E, [JIT_PSUM, JIT_F], devs, sparse_core=True)
