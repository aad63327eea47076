"""A measured chip's figures raised to what the profile's own ops did.

A calibrated CPU's peaks and bandwidths are what `hlogap calibrate` reached on the machine: lower
bounds of what it does. A calibration taken while other work ran reaches less, and every op of
a profile taken on a quiet machine would then read faster than its roof (121% was seen). An op
that did its work in less time than a figure allows is a measurement of that figure too: the
machine did at least that. So each figure an op beat is raised to the rate the op reached
(rounded up to the 4 digits chip files keep), and the report says which figure, from what, by
which op. No op then beats its roof, and every bound stays traceable: to the calibration, or to
an op's events and its HLO's counts.

A data sheet's figures are not raised: an op beating a cited peak is a counting or timing error,
and its hint says so (`hlogap.bounds.hints`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

from msgspec import Struct
from msgspec.structs import asdict, replace

from hlogap.bounds.roofline import bound_op
from hlogap.chips import Chip, dtype_key
from hlogap.cost import OpCost
from hlogap.hlo.opcodes import AsyncRole
from hlogap.units import fmt_si

# Significant digits of a raised figure (as `hlogap calibrate` writes them), rounded up: a
# figure rounded down would leave the op that raised it a hair above its roof.
DIGITS = 4


class TimedCost(NamedTuple):
    """One op's counts for one run and the time one run took (its measured time over its
    runs), with its async role (starts and dones are not bounded by their work)."""

    module: str
    name: str
    cost: OpCost
    seconds: float
    role: AsyncRole = ""


class RaisedFigure(Struct, frozen=True):
    """A measured figure an op of the profile beat, and the rate the op reached."""

    figure: str  # `peak_flops.bf16`, `vector_flops.f32`, `memory.hbm_bw`, `memory.cache_bw.N`
    calibrated: float  # the figure as measured (FLOP/s or bytes/s)
    raised: float  # the op's rate, rounded up
    module: str
    op: str

    def describe(self) -> str:
        unit = "FLOP/s" if "flops" in self.figure else "B/s"
        return (
            f"{self.figure} {fmt_si(self.calibrated, unit)} -> {fmt_si(self.raised, unit)} "
            f"(reached by {self.module}/{self.op})"
        )

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def round_up(value: float, digits: int = DIGITS) -> float:
    """``value`` rounded up to ``digits`` significant digits."""
    scale = 10.0 ** (digits - 1 - math.floor(math.log10(value)))
    return math.ceil(value * scale) / scale


def raise_to_ops(chip: Chip, timed: Iterable[TimedCost]) -> tuple[Chip, list[RaisedFigure]]:
    """``chip`` with each measured figure an op beat raised to that op's rate (the fastest op's,
    where several beat it), and what was raised; ``chip`` itself when it is not measured or no
    op beat it.

    Under the roofline's max, an op's run takes at least its FLOPs over the peak and its bytes
    over the bandwidth each: a run of ``seconds`` shows the machine does at least FLOPs/seconds
    and bytes/seconds. An op mixing matrix and vector work needs both its peaks raised by the
    factor its compute time exceeds its run; bytes raise the cache level they fit (the
    smallest whose working set holds them: `Chip.memory_bw` takes the fastest level they fit),
    else the memory's rate.
    """
    if not chip.measured:
        return chip, []
    wanted: dict[str, tuple[float, TimedCost]] = {}  # figure -> (rate it needs, the op)

    def need(figure: str, rate: float, op: TimedCost) -> None:
        if rate > wanted.get(figure, (0.0, op))[0]:
            wanted[figure] = (rate, op)

    for op in timed:
        bound = bound_op(op.cost, chip, op.role)
        if bound.lower_s <= op.seconds or op.seconds <= 0:
            continue
        cost = op.cost
        if bound.t_compute_s > op.seconds:
            factor = bound.t_compute_s / op.seconds
            if cost.matrix_flops:
                key = own_matrix_key(chip, cost.matrix_dtype or "bf16")
                need(f"peak_flops.{key}", _figure(chip, f"peak_flops.{key}") * factor, op)
            if cost.vector_flops:
                dtype = cost.vector_dtype or "f32"
                if chip.vector_key(dtype) is None:
                    key = own_matrix_key(chip, dtype)
                    need(f"peak_flops.{key}", _figure(chip, f"peak_flops.{key}") * factor, op)
                else:
                    key = dtype_key(dtype)
                    need(f"vector_flops.{key}", _figure(chip, f"vector_flops.{key}") * factor, op)
        if bound.t_memory_s > op.seconds:
            fits = [size for size, _ in chip.cache_bw if cost.hbm_bytes <= size]
            figure = f"memory.cache_bw.{int(min(fits))}" if fits else "memory.hbm_bw"
            need(figure, cost.hbm_bytes / op.seconds, op)
        if bound.t_comm_s > op.seconds and chip.interconnect_bw:
            need("interconnect.bw", cost.comm_bytes / op.seconds, op)
    _drop_covered_levels(chip, wanted)
    if not wanted:
        return chip, []
    raised = [
        RaisedFigure(figure, _figure(chip, figure), round_up(rate), op.module, op.name)
        for figure, (rate, op) in sorted(wanted.items())
    ]
    return _with(chip, raised), raised


def own_matrix_key(chip: Chip, dtype: str) -> str:
    """The `peak_flops` key an op of ``dtype`` may raise: the one its bound takes where that is
    its own type's (f32 taking tf32 is), else its own type's, added to the chip: a bf16 dot
    bounded by the f32 peak of a chip with no bf16 figure raises a bf16 figure, never the f32
    peak every f32 dot is bounded by."""
    key, own = chip.matrix_key(dtype), dtype_key(dtype)
    return key if key == own or (own, key) == ("f32", "tf32") else own


def _drop_covered_levels(chip: Chip, wanted: dict[str, tuple[float, TimedCost]]) -> None:
    """Drop the raises of cache levels that a larger level's rate (or the memory's) already
    covers: an op's roof is the fastest level its bytes fit, larger ones included, so a level
    raised past a smaller one's need is that one's roof too."""
    covering = wanted.get("memory.hbm_bw", (chip.hbm_bw, None))[0]
    for size, bw in sorted(chip.cache_bw, reverse=True):
        figure = f"memory.cache_bw.{int(size)}"
        if figure in wanted and wanted[figure][0] <= covering:
            del wanted[figure]
        covering = max(covering, wanted.get(figure, (bw, None))[0])


def _figure(chip: Chip, figure: str) -> float:
    table, _, key = figure.partition(".")
    # A type the chip has no figure for is bounded by the figure it falls back to.
    if table == "peak_flops":
        return chip.peak_flops.get(key) or chip.matrix_peak(key)
    if table == "vector_flops":
        return chip.vector_flops.get(key) or chip.vector_peak(key)
    if figure == "interconnect.bw":
        return chip.interconnect_bw or 0.0
    if figure == "memory.hbm_bw":
        return chip.hbm_bw
    return dict(chip.cache_bw)[float(figure.rpartition(".")[2])]


def _with(chip: Chip, raised: list[RaisedFigure]) -> Chip:
    """``chip`` with the raised figures, each source saying what raised it."""
    peak_flops, vector_flops = dict(chip.peak_flops), dict(chip.vector_flops)
    cache_bw, hbm_bw, link = dict(chip.cache_bw), chip.hbm_bw, chip.interconnect_bw
    sources = dict(chip.sources)
    for r in raised:
        table, _, key = r.figure.partition(".")
        if table == "peak_flops":
            peak_flops[key] = r.raised
        elif table == "vector_flops":
            vector_flops[key] = r.raised
        elif r.figure == "interconnect.bw":
            link = r.raised
        elif r.figure == "memory.hbm_bw":
            hbm_bw = r.raised
        else:
            cache_bw[float(r.figure.rpartition(".")[2])] = r.raised
        source = sources.get(r.figure) or sources.get("memory.cache_bw") or "measured"
        sources[r.figure] = (
            f"{source}; raised from {r.calibrated:.4g} to the rate op {r.module}/{r.op} "
            "reached in this profile (the calibration reached less: the machine was busy)"
        )
    return replace(
        chip,
        peak_flops=peak_flops,
        vector_flops=vector_flops,
        hbm_bw=hbm_bw,
        interconnect_bw=link,
        cache_bw=tuple(sorted(cache_bw.items())),
        sources=sources,
    )
