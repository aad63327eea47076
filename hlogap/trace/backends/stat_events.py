"""Events that name their op with per-event stats: GPU kernels and CPU thunks.

Both carry `hlo_op` and `hlo_module` (ref stats into the plane's stat metadata) and `program_id`;
CPU thunks also carry `device_ordinal`. A line's events are decoded together
(`hlogap.trace.columnar`); each distinct (op, module, program, ordinal) is resolved once.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from google.protobuf.message import DecodeError

from hlogap.errors import InputError
from hlogap.proto import xplane_pb2
from hlogap.trace.columnar import LineColumns, decode_events
from hlogap.trace.model import OpKey, TraceBuilder, distinct_rows
from hlogap.trace.xspace import Plane, plane_stats

ABSENT = -1
WANTED = ("hlo_op", "hlo_module", "program_id", "device_ordinal")


def read_stat_events(
    plane: Plane,
    builder: TraceBuilder,
    lines: Iterable[xplane_pb2.XLineRaw],
    device: int | None,
    gpu: bool,
) -> None:
    """Add every event of `lines` that has an `hlo_op` stat.

    `device` is the builder's device index for a device plane; None means the device comes from
    each event's `device_ordinal` stat (CPU: one host plane runs every device).
    """
    by_name = {v.name: k for k, v in plane.stat_metadata.items()}
    ids = [by_name.get(w, ABSENT) for w in WANTED]
    if ids[0] == ABSENT:
        return
    names: dict[int, str] = {k: v.name for k, v in plane.stat_metadata.items()}
    str_ids: dict[str, int] = {}  # op/module names given as strings, by their own negative ids
    ordinal_device: dict[int, int] = {}
    resolved: dict[tuple[int, ...], tuple[int, int]] = {}

    def resolve(key: tuple[int, ...]) -> tuple[int, int]:
        """(op index, device index) of an (op ref, module ref, program id, ordinal) key."""
        found = resolved.get(key)
        if found is None:
            op_ref, mod_ref, prog, ordinal = key
            program_id = str(prog if prog >= 0 else prog + (1 << 64)) if prog != ABSENT else ""
            module = names.get(mod_ref, "") or builder.module_names.get(program_id, "")
            op = builder.op(OpKey(module, program_id, names.get(op_ref, "")))
            dev = device
            if dev is None:
                ordinal = max(ordinal, 0)
                dev = ordinal_device.get(ordinal)
                if dev is None:
                    dev = ordinal_device[ordinal] = builder.new_device(
                        plane.name, ordinal, plane_stats(plane)
                    )
            found = resolved[key] = (op, dev)
        return found

    for line in lines:
        if not line.events:
            continue
        cols = decode_events(list(line.events), ids)
        for i in np.flatnonzero(cols.irregular):
            _read_one(line.events[int(i)], ids, names, str_ids, cols, int(i), plane.name)
        op_ref = cols.stats[0]
        is_op = op_ref != ABSENT
        if not is_op.any():
            continue
        unique, inverse = distinct_rows([c[is_op] for c in cols.stats])
        pairs = np.array([resolve(tuple(int(v) for v in k)) for k in unique], dtype=np.int64)
        ops, devs = pairs[inverse, 0], pairs[inverse, 1]
        base_ps = line.timestamp_ns * 1000  # event offsets count from their line's timestamp
        start, dur = base_ps + cols.offset_ps[is_op], cols.duration_ps[is_op]
        for dev in np.unique(devs):
            mine = devs == dev
            builder.add_line(int(dev), ops[mine], start[mine], dur[mine], gpu)


def _read_one(
    raw: bytes,
    ids: list[int],
    names: dict[int, str],
    str_ids: dict[str, int],
    cols: LineColumns,
    i: int,
    plane_name: str,
) -> None:
    """An event the columnar decoder could not read: upb reads it into row `i` of `cols`."""
    try:
        event = xplane_pb2.XEvent.FromString(raw)
    except DecodeError as exc:
        raise InputError(f"corrupt event on {plane_name}") from exc
    cols.offset_ps[i] = event.offset_ps
    cols.duration_ps[i] = event.duration_ps
    for k in range(len(ids)):
        cols.stats[k][i] = ABSENT
    for stat in event.stats:
        if stat.metadata_id not in ids:
            continue
        k = ids.index(stat.metadata_id)
        kind = stat.WhichOneof("value")
        if kind == "str_value" and k < 2:  # an op/module name as a string: an id of its own
            value = str_ids.get(stat.str_value, 0)
            if not value:
                value = str_ids[stat.str_value] = ABSENT - 1 - len(str_ids)
                names[value] = stat.str_value
        elif kind in ("ref_value", "int64_value", "uint64_value"):
            value = getattr(stat, kind)
            if value >= 1 << 63:  # kept in int64 columns two's-complement; `resolve` undoes it
                value -= 1 << 64
        else:
            value = 0
        cols.stats[k][i] = value
