"""What a cause of lost time needs to look at, what it reports, and the registry of causes.

A cause is one module in `hlogap.advice.causes` that calls `register` with a function from the
audit's `Context` to `Finding`s: the ops it covers, how much device time changing them would
remove (never more than their gap), the numbers that show it and the one change to make.
A cause registered `after_steps` reads what the step pass found (the rows' `idle_before_us`):
it runs after that pass, so no change of its re-times the steps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from msgspec import Struct, field

from hlogap._plugins import import_all
from hlogap.advice.graph import ModuleGraph
from hlogap.chips import Chip
from hlogap.hlo.index import HloIndex
from hlogap.hlo.ir import Instruction, Module
from hlogap.hlo.text import HloParseError, parse_instruction
from hlogap.memory.static import MemorySection
from hlogap.report.model import ActionCause, OpRow, StepRow
from hlogap.trace.host_activity import GapActivity
from hlogap.trace.model import Backend, OpKey


class Context(Struct):
    """The audit as the causes see it."""

    rows: list[OpRow]
    chip: Chip
    backend: Backend
    index: HloIndex
    memory: MemorySection | None = None
    steps: Sequence[StepRow] = ()  # the step table, for causes registered `after_steps`
    # Per op the devices waited for: its longest idle gaps and what the host's threads did in
    # each (hlogap.trace.host_activity), for the device idle cause.
    idle_host: Mapping[OpKey, Sequence[GapActivity]] = field(default_factory=dict)
    _graphs: dict[int, ModuleGraph] = field(default_factory=dict)
    # TPU ops without their module: each op's own HLO text, parsed.
    _parsed: dict[tuple[str, str, str], Instruction | None] = field(default_factory=dict)

    def graph(self, module: Module) -> ModuleGraph:
        """The module's producers and consumers (built once per module)."""
        found = self._graphs.get(id(module))
        if found is None:
            found = self._graphs[id(module)] = ModuleGraph.of(module)
        return found

    def instruction(self, row: OpRow) -> tuple[Instruction | None, Module | None]:
        """The op's instruction and module (None where the profile has no HLO for it). A TPU
        op without its module has its own HLO text: the instruction alone."""
        module = self.index.module(row.module, row.program_id)
        if module is None:
            key = (row.module, row.program_id, row.name)
            if key not in self._parsed:  # every cause asks: parsed once
                try:
                    self._parsed[key] = parse_instruction(row.hlo) if row.hlo else None
                except HloParseError:
                    self._parsed[key] = None
            return self._parsed[key], None
        return self.index.instruction(row.module, row.program_id, row.name), module


class Finding(Struct, frozen=True):
    """What one cause found: the ops it names, the device time its change would save, and its
    words."""

    cause: ActionCause
    ops: tuple[OpRow, ...]
    # Device time the change would remove from these ops (summed over devices and occurrences):
    # at most the sum of their gaps, unless `op_savings` says each op's own.
    op_saving_us: float
    evidence: str
    change: str
    # A change of the program (a pattern cause: a fused kernel, a chunked loss, a batched loop)
    # removes work, not only lost time: each op's own saving (device time, at most its measured
    # time, in the order of `ops`), which may pass its gap. None: the saving is spread over the
    # ops' gaps.
    op_savings: tuple[float, ...] | None = None
    layers: int = 1  # the repeated layers it covers (the same cause and change on each)
    # Causes run after the step pass: the steps' wall time the change saves, summed over the
    # steps it read (None: nothing claimed), and where it sits (a `device idle`'s place).
    claimed_us: float | None = None
    where: str | None = None


Cause = Callable[[Context], Iterator[Finding]]
_CAUSES: list[Cause] = []
_AFTER_STEPS: list[Cause] = []


def register(cause: Cause, *, after_steps: bool = False) -> Cause:
    (_AFTER_STEPS if after_steps else _CAUSES).append(cause)
    return cause


def causes(after_steps: bool = False) -> list[Cause]:
    """Every cause of this package (those that read the step pass, with `after_steps`),
    imported on first use (in module-name order)."""
    import_all("hlogap.advice.causes")
    return list(_AFTER_STEPS if after_steps else _CAUSES)


def removed(row: OpRow, share: float) -> float:
    """What a program change that removes `share` (0-1) of the op's HBM bytes saves on it: its
    time scaled by its bound's fall (its FLOPs kept, its efficiency kept). An op without a
    bound keeps its time."""
    occurrences = max(row.occurrences, 1)
    bound = row.bound_us / occurrences
    if bound <= 0 or row.measured_us <= 0:
        return 0.0
    after = max(row.t_compute_us, row.t_memory_us * (1.0 - min(max(share, 0.0), 1.0)))
    return max(0.0, row.measured_us * (1.0 - min(after / bound, 1.0)))


def capped(row: OpRow, removable_us: float) -> float:
    """What a change can save on one op: what it removes, never more than the op's gap."""
    return max(0.0, min(row.gap_us, removable_us))
