"""TPU: op events on the `XLA Ops` line of each `/device:TPU:N` plane.

Unlike GPU and CPU, a TPU op event names its op through its event metadata: the metadata's name
is the HLO instruction name, and its stats hold the instruction's HLO text, `program_id`,
`hlo_category` and XLA's own `flops` / `bytes_accessed`. Ops nest (while/call/conditional
bodies), so each op gets self time. SparseCore planes (`/device:TPU:N SparseCore M`) and the
`Async XLA Ops` line (transfers overlapping the ops) are not op time on the TensorCore.
"""

from __future__ import annotations

from hlogap.proto import xplane_pb2
from hlogap.xplane import DEVICE_PLANE, OpKey, TraceBuilder, stat_value

OP_LINE = "XLA Ops"


def read(space: xplane_pb2.XSpace, builder: TraceBuilder) -> None:
    for plane in space.planes:
        m = DEVICE_PLANE.match(plane.name)
        if m and m.group(1) == "TPU":
            _read_plane(plane, builder, builder.new_device(plane, int(m.group(2))))


def _read_plane(plane: xplane_pb2.XPlane, builder: TraceBuilder, device: int) -> None:
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    meta_to_op: dict[int, int] = {}
    for line in plane.lines:
        if line.name != OP_LINE:
            continue
        op: list[int] = []
        start: list[int] = []
        dur: list[int] = []
        for ev in line.events:
            idx = meta_to_op.get(ev.metadata_id)
            if idx is None:
                idx = meta_to_op[ev.metadata_id] = _op(plane, ev.metadata_id, names, builder)
            op.append(idx)
            start.append(ev.offset_ps)
            dur.append(ev.duration_ps)
        builder.add_line(device, op, start, dur, gpu=False)


def _op(
    plane: xplane_pb2.XPlane, metadata_id: int, names: dict[int, str], builder: TraceBuilder
) -> int:
    md = plane.event_metadata[metadata_id]
    stats = {names.get(s.metadata_id, ""): stat_value(s, names) for s in md.stats}
    program_id = str(stats.get("program_id", "") or "")
    module = str(stats.get("hlo_module", "") or builder.module_names.get(program_id, ""))
    idx = builder.op(OpKey(module, program_id, md.name))
    info = builder.ops[idx]
    # The instruction's text: the display name when it is an expression, else a text stat.
    for candidate in (md.display_name, stats.get("hlo_text"), stats.get("long_name")):
        if isinstance(candidate, str) and " = " in candidate:
            info.hlo_text = info.hlo_text or candidate
            break
    if "hlo_category" in stats:
        info.category = info.category or str(stats["hlo_category"])
    if isinstance(stats.get("flops"), (int, float)):
        info.xla_flops = float(stats["flops"])  # type: ignore[arg-type]
    if isinstance(stats.get("bytes_accessed"), (int, float)):
        info.xla_bytes = float(stats["bytes_accessed"])  # type: ignore[arg-type]
    return idx
