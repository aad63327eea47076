"""Events that name their op with per-event stats: GPU kernels and CPU thunks.

Both carry `hlo_op` and `hlo_module` (ref stats into the plane's stat metadata) and `program_id`;
CPU thunks also carry `device_ordinal`. Stats are matched by metadata id, so each event costs a
few integer comparisons.
"""

from __future__ import annotations

from collections.abc import Iterable

from hlogap.proto import xplane_pb2
from hlogap.xplane import AnyPlane, OpKey, TraceBuilder


def _stat_ids(plane: AnyPlane, wanted: tuple[str, ...]) -> list[int]:
    by_name = {v.name: k for k, v in plane.stat_metadata.items()}
    return [by_name.get(w, -1) for w in wanted]


def read_stat_events(
    plane: AnyPlane,
    builder: TraceBuilder,
    lines: Iterable[xplane_pb2.XLine],
    device: int | None,
    gpu: bool,
) -> None:
    """Add every event of `lines` that has an `hlo_op` stat.

    `device` is the builder's device index for a device plane; None means the device comes from
    each event's `device_ordinal` stat (CPU: one host plane runs every device).
    """
    hlo_op, hlo_module, program_stat, ordinal_stat = _stat_ids(
        plane, ("hlo_op", "hlo_module", "program_id", "device_ordinal")
    )
    if hlo_op < 0:
        return
    names: dict[int, str] = {k: v.name for k, v in plane.stat_metadata.items()}
    str_ids: dict[str, int] = {}  # string-valued stats get negative ids of their own

    def ref_or_str(stat: xplane_pb2.XStat) -> int:
        if stat.HasField("ref_value"):
            return stat.ref_value
        text = stat.str_value
        found = str_ids.get(text)
        if found is None:
            found = str_ids[text] = -2 - len(str_ids)
            names[found] = text
        return found

    ordinal_device: dict[int, int] = {}
    interned: dict[tuple[int, int, int], int] = {}  # (op ref, module ref, program id) -> op
    # Events from one emitter list their stats in one order; remembering where hlo_op,
    # hlo_module and program_id sat lets most events be read with three indexed lookups
    # instead of a scan over all their stats (the hot loop of a large trace).
    at_op = at_mod = at_prog = 0
    for line in lines:
        per_device: dict[int, tuple[list[int], list[int], list[int]]] = {}
        for ev in line.events:
            stats = ev.stats
            ordinal = 0
            try:
                s_op, s_mod, s_prog = stats[at_op], stats[at_mod], stats[at_prog]
                fast = (
                    s_op.metadata_id == hlo_op
                    and s_mod.metadata_id == hlo_module
                    and s_prog.metadata_id == program_stat
                    and ordinal_stat < 0
                    and s_op.ref_value
                    and s_mod.ref_value
                )
            except IndexError:
                fast = False
            if fast:
                op_ref, mod_ref = s_op.ref_value, s_mod.ref_value
                prog = s_prog.uint64_value or s_prog.int64_value
            else:
                op_ref = mod_ref = prog = -1
                for i, s in enumerate(stats):
                    mid = s.metadata_id
                    if mid == hlo_op:
                        op_ref, at_op = ref_or_str(s), i
                    elif mid == hlo_module:
                        mod_ref, at_mod = ref_or_str(s), i
                    elif mid == program_stat:
                        prog, at_prog = s.uint64_value or s.int64_value, i
                    elif mid == ordinal_stat:
                        ordinal = s.int64_value or s.uint64_value
                if op_ref == -1:
                    continue
            key = (op_ref, mod_ref, prog)
            idx = interned.get(key)
            if idx is None:
                program_id = str(prog) if prog >= 0 else ""
                module = names.get(mod_ref, "") or builder.module_names.get(program_id, "")
                idx = interned[key] = builder.op(OpKey(module, program_id, names.get(op_ref, "")))
            dev = device
            if dev is None:
                dev = ordinal_device.get(ordinal)
                if dev is None:
                    dev = ordinal_device[ordinal] = builder.new_device(plane, ordinal)
            cols = per_device.get(dev)
            if cols is None:
                cols = per_device[dev] = ([], [], [])
            cols[0].append(idx)
            cols[1].append(ev.offset_ps)
            cols[2].append(ev.duration_ps)
        for dev, (op, start, dur) in per_device.items():
            builder.add_line(dev, op, start, dur, gpu)
