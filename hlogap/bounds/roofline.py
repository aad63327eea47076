"""Roofline bounds: counts (hlogap.cost) and a chip's peaks (hlogap.chips) -> times.

T_compute = matrix FLOPs / matrix peak(dtype) + vector FLOPs / vector peak(dtype)
T_memory  = HBM bytes / HBM bandwidth (a cache level's where the chip has levels the bytes fit)
T_comm    = interconnect bytes / link bandwidth
T_host    = bytes to or from host memory / host link bandwidth
lower bound = max(T_compute, T_memory, T_comm, T_host); upper bound = their sum.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from msgspec import Struct

from hlogap.chips import Chip
from hlogap.cost import OpCost
from hlogap.hlo.opcodes import AsyncRole
from hlogap.units import fmt_si

BoundBy = Literal["compute", "memory", "communication", "host", "none", "unmodeled"]
"""What bounds an op: its slowest resource (`host`: the link to host memory); `none` when it
does no work the roofline counts (no FLOPs, no bytes: a bitcast, a loop's own time, a done that
only waits); `unmodeled` when hlogap cannot cost it."""


class Bound(Struct, frozen=True):
    """An op's roofline lower bound: the time its compute, its memory traffic and its communication
    each need at the chip's peaks, and which of them bounds it."""

    t_compute_s: float
    t_memory_s: float
    t_comm_s: float
    bound_by: BoundBy
    overlapped: bool = False  # an async start: its transfer runs beside other ops
    unmodeled: str | None = None  # why there is no bound, when the chip cannot give one
    t_host_s: float = 0.0

    @property
    def work_s(self) -> float:
        """The time its slowest resource needs, overlapped or not."""
        return max(self.t_compute_s, self.t_memory_s, self.t_comm_s, self.t_host_s)

    @property
    def lower_s(self) -> float:
        """The roofline: no schedule can beat the slowest resource."""
        return 0.0 if self.overlapped else self.work_s

    @property
    def upper_s(self) -> float:
        """Nothing overlaps: the seeds' upper bound."""
        return self.t_compute_s + self.t_memory_s + self.t_comm_s + self.t_host_s


UNMODELED = Bound(0.0, 0.0, 0.0, "unmodeled")


def wait_bound_s(transfer: Bound, waits_s: np.ndarray) -> float:
    """The bound of a done's waits for its start's transfer, summed over the waits.

    Each transfer has its own lower bound, its bytes over the link at the link's full rate
    (`work_s`): a wait longer than that is time the link did not deliver at its peak (shared
    with other transfers, or slower than its figure). A wait shorter than that is the part
    of the transfer the schedule did not hide: it is its own bound (the hidden part cost
    nothing), so the bound never exceeds what was measured.
    """
    return float(np.minimum(waits_s, transfer.work_s).sum())


def bound_op(cost: OpCost, chip: Chip, role: AsyncRole = "") -> Bound:
    """`role` is the op's `async_role`: starts overlap, dones only wait."""
    if cost.unmodeled is not None:
        return UNMODELED
    t_compute = 0.0
    if cost.matrix_flops:
        t_compute += cost.matrix_flops / chip.matrix_peak(cost.matrix_dtype or "bf16")
    if cost.vector_flops:
        t_compute += cost.vector_flops / chip.vector_peak(cost.vector_dtype or "f32")
    t_memory = cost.hbm_bytes / chip.memory_bw(cost.hbm_bytes)
    t_comm = 0.0
    if cost.comm_bytes:
        if not chip.interconnect_bw:
            reason = (
                f"chip {chip.name} has no interconnect bandwidth for its "
                f"{fmt_si(cost.comm_bytes, 'B')}"
            )
            return Bound(0.0, 0.0, 0.0, "unmodeled", unmodeled=reason)
        t_comm = cost.comm_bytes / chip.interconnect_bw
    t_host = 0.0
    if cost.host_bytes:
        if not chip.host_bw:
            reason = f"chip {chip.name} has no host link bandwidth ([host] bw) for its transfer"
            return Bound(0.0, 0.0, 0.0, "unmodeled", unmodeled=reason)
        t_host = cost.host_bytes / chip.host_bw
    times: dict[BoundBy, float] = {
        "compute": t_compute,
        "memory": t_memory,
        "communication": t_comm,
        "host": t_host,
    }
    bound_by: BoundBy = max(times, key=lambda k: times[k])
    if not any(times.values()):
        bound_by = "none"
    overlapped = role in ("start", "done")
    return Bound(t_compute, t_memory, t_comm, bound_by, overlapped, t_host_s=t_host)
