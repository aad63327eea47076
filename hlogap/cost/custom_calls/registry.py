"""Custom calls: one cost rule per file in this package, found through `rule`.

A rule names the custom-call targets it knows (exact names or prefixes) and fills a
`CustomCost` from the instruction and its operand shapes. `custom_call` finds the rule for a
target; a target no rule knows is unmodeled, with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from msgspec import Struct, field

from hlogap._plugins import import_all
from hlogap.cost.base import ModuleIndex, Work, operand_shapes
from hlogap.hlo.ir import Instruction, Shape


class CustomCost(Struct):
    """What a custom-call rule says a call costs: its work, its data outputs and its own HBM byte
    count where it has one."""

    work: Work
    outputs: list[Shape]  # the results that are data (scratch workspaces dropped)
    free: bool = False  # moves nothing
    note: str | None = None
    hbm_bytes: float | None = None  # the call's own count of its HBM bytes, where it has one


Apply = Callable[[Instruction, Sequence[Shape | None], CustomCost], None]


class CostRule(Struct, frozen=True):
    """A custom-call cost rule: the call targets (exact or by prefix) it costs, and how."""

    name: str
    apply: Apply
    targets: frozenset[str] = field(default_factory=frozenset)  # exact target names
    prefixes: tuple[str, ...] = ()
    # Rules that cost from operand shapes are not asked when a shape is unknown.
    needs_shapes: bool = True

    def matches(self, target: str) -> bool:
        return target in self.targets or target.startswith(self.prefixes)


_RULES: list[CostRule] = []


def rule(
    name: str,
    *,
    targets: Sequence[str] = (),
    prefixes: tuple[str, ...] = (),
    needs_shapes: bool = True,
) -> Callable[[Apply], Apply]:
    """Register the decorated function as the cost rule for these targets."""

    def register(apply: Apply) -> Apply:
        _RULES.append(CostRule(name, apply, frozenset(targets), prefixes, needs_shapes))
        return apply

    return register


def rules() -> list[CostRule]:
    """Every rule of this package; its modules are imported on first use."""
    import_all("hlogap.cost.custom_calls")
    return list(_RULES)


def data_outputs(shape: Shape) -> list[Shape]:
    """Result leaves minus the trailing u8/s8 workspace cuDNN, cuBLAS and TE calls return."""
    leaves = shape.leaves()
    last = leaves[-1] if leaves else None
    if (
        shape.is_tuple
        and len(leaves) > 1
        and last is not None
        and last.rank == 1
        and last.element_type in ("u8", "s8")
    ):
        leaves = leaves[:-1]
    return leaves


def custom_call(inst: Instruction, ix: ModuleIndex | None) -> CustomCost:
    target = inst.custom_call_target or ""
    shapes = operand_shapes(inst, ix)
    cost = CustomCost(Work(), data_outputs(inst.shape))
    found = next((r for r in rules() if r.matches(target)), None)
    if found is None:
        cost.work.unmodeled = f"custom call '{target}' has no cost model"
    elif found.needs_shapes and None in shapes:
        cost.work.unmodeled = f"operand shapes of custom call '{target}' are unknown"
    else:
        found.apply(inst, shapes, cost)
    return cost
