"""Interconnect bytes per device, ring algorithms, for a group of n devices and S bytes:
all-reduce 2(n-1)/n S; all-gather and reduce-scatter (n-1)/n of the full (gathered, unscattered)
buffer; all-to-all (n-1)/n S; collective-permute and collective-broadcast S."""

from __future__ import annotations

import re
from typing import NamedTuple

from hlogap.cost.base import ModuleIndex, bare, ints, logical, operand_shapes
from hlogap.hlo.ir import Instruction
from hlogap.hlo.opcodes import collective_kind


class Comm(NamedTuple):
    """A collective's traffic: the bytes each device sends over the interconnect, its kind and
    group, or why it is not modelled."""

    bytes: float = 0.0
    kind: str | None = None
    group_size: int | None = None
    unmodeled: str | None = None
    note: str | None = None


def ring_bytes(kind: str, n: int | None, operand: int, output: int) -> tuple[float, str | None]:
    """Bytes each device sends, or why they are unknown."""
    if kind in ("collective-permute", "collective-broadcast"):
        return float(operand or output), None
    if n is None:
        return 0.0, f"{kind} over all devices, and the number of devices is unknown"
    share = (n - 1) / n
    if kind == "all-reduce":
        return 2 * share * operand, None
    if kind == "all-gather":
        return share * output, None
    return share * operand, None  # reduce-scatter (the unscattered buffer), all-to-all


def devices(ix: ModuleIndex | None, num_devices: int | None) -> int | None:
    """The devices an empty replica_groups spans: the caller's count, else the module header's."""
    if num_devices is not None or ix is None:
        return num_devices
    total = 1
    for key in ("replica_count", "num_partitions"):
        found = ints(ix.attrs.get(key, ""))
        total *= found[0] if found else 1
    return total if total > 1 else None


def group_size(inst: Instruction, all_devices: int | None) -> int | None:
    if inst.replica_groups is not None and inst.replica_groups.group_size is not None:
        return inst.replica_groups.group_size
    mesh = re.match(r"\s*mesh\[(.*?)\]\s*\{(.*?)\}", inst.attrs.get("replica_groups", ""))
    if mesh:  # mesh['x'=4,'y'=2] {'x'}: groups span the listed axes
        sizes = {k: int(v) for k, v in re.findall(r"'?(\w+)'?\s*=\s*(\d+)", mesh.group(1))}
        axes = re.findall(r"'?(\w+)'?", mesh.group(2))
        if axes and all(a in sizes for a in axes):
            n = 1
            for axis in axes:
                n *= sizes[axis]
            return n
    return all_devices


def collective_comm(coll: Instruction, ix: ModuleIndex | None, num_devices: int | None) -> Comm:
    kind = collective_kind(coll.opcode)
    assert kind is not None
    out = coll.shape
    if coll.opcode in ("all-gather-start", "collective-permute-start") and out.is_tuple:
        out = out.tuple_shapes[1]  # (operand, result, contexts...)
    if kind == "collective-permute":
        n = len(set(ints(coll.attrs.get("source_target_pairs", "")))) or None
    else:
        n = group_size(coll, devices(ix, num_devices))
    if kind == "all-reduce" and _keeps_a_slice(coll, ix):
        kind = "reduce-scatter"  # TPU's all-reduce-scatter fusion: lowered to a reduce-scatter
    sent, reason = ring_bytes(kind, n, logical(operand_shapes(coll, ix)), logical(out.leaves()))
    return Comm(sent, kind, n, reason)


def _keeps_a_slice(coll: Instruction, ix: ModuleIndex | None) -> bool:
    """An all-reduce of which each device keeps only its slice: a reduce-scatter."""
    comp = ix.comp_of.get(id(coll)) if ix is not None else None
    if ix is None or comp is None:
        return False
    users = ix.users(comp).get(bare(coll.name), [])
    return bool(users) and all(u.opcode in ("dynamic-slice", "slice") for u in users)


# Called-computation or op names of TPU collective fusions, most specific first.
_NAMED = (
    ("all-reduce-scatter", "reduce-scatter"),
    ("reduce-scatter", "reduce-scatter"),
    ("all-gather", "all-gather"),
    ("all-to-all", "all-to-all"),
    ("collective-permute", "collective-permute"),
    ("all-reduce", "all-reduce"),
    ("async-collective-start", ""),
)


def named_collective_fusion(inst: Instruction, num_devices: int | None) -> Comm:
    """A TPU collective fusion seen without its module (one op's text from a trace): the kind
    from the called computation's or the op's name, the group size from how the shapes change."""
    names = " ".join([*inst.called, inst.name])
    kind = next((k for key, k in _NAMED if key in names), None)
    if kind is None:
        return Comm()
    out = inst.shape
    if out.is_tuple and len(out.tuple_shapes) > 1:  # async start: (operand, result, contexts...)
        out = out.tuple_shapes[1]
    size_in = logical(inst.operand_shapes[:1])
    size_out = logical([out])
    if not kind:  # an async collective: the shapes say which
        kind = (
            "all-gather"
            if size_out > size_in
            else ("reduce-scatter" if size_out < size_in else "all-reduce")
        )
    n: int | None = None
    if kind == "reduce-scatter" and size_out:
        n = size_in // size_out
    elif kind == "all-gather" and size_in:
        n = size_out // size_in
    n = n if n and n > 1 else num_devices
    sent, reason = ring_bytes(kind, n, size_in, size_out)
    return Comm(sent, kind, n, reason, f"{kind} recognised from the op's name and shapes")
