"""Which operands of a matmul are weights, decided from the program, not by size.

A weight is state the program carries from step to step: an entry parameter that the program
updates (an output of its shape computed elementwise from it: `w - lr * g`) or that XLA aliases
to an output (`input_output_alias`: a donated parameter written in place). An operand is a
weight when it traces back to one through ops that only move or re-type data (bitcast, reshape,
transpose, copy, convert, slices, all-gather, a fusion's or a loop's parameters, a loop's result
from what its body's last trip put there). A matmul whose output flows to such an update
(through elementwise ops, fusions and reductions across devices; through a tuple only out of
its own element) makes a weight's gradient. Everything else is an activation.
"""

from __future__ import annotations

import re
import weakref

from msgspec import Struct, field

from hlogap.cost.base import ModuleIndex, bare, index_of
from hlogap.hlo.ir import Computation, Instruction, Module
from hlogap.hlo.opcodes import ELEMENTWISE

# Ops through which a value is the same data, moved, sliced or re-typed.
_SAME_DATA = frozenset(
    {
        "bitcast",
        "reshape",
        "transpose",
        "copy",
        "copy-start",
        "copy-done",
        "convert",
        "slice",
        "dynamic-slice",
        "broadcast",
        "all-gather",
        "all-gather-start",
        "all-gather-done",
        "collective-permute",
        "collective-permute-start",
        "collective-permute-done",
        "optimization-barrier",
        # XLA:GPU's async wrappers of a collective (`async-start` calling an all-gather)
        "async-start",
        "async-update",
        "async-done",
    }
)
# Ops a gradient flows through to its update.
_GRADIENT_FLOW = (
    _SAME_DATA
    | ELEMENTWISE
    | {
        "fusion",
        "while",
        "all-reduce",
        "all-reduce-start",
        "all-reduce-done",
        "reduce-scatter",
        "reduce-scatter-start",
        "reduce-scatter-done",
        "reduce",
        "tuple",
        "get-tuple-element",
        "dynamic-update-slice",
    }
)
_ALIAS = re.compile(r"\{[^{}]*\}\s*:\s*\((\d+)\s*,")
# Hops followed at most (a chain longer is no data path a program has).
_MAX_HOPS = 64


class Roles(Struct):
    """The carried entry parameters of a module and the instructions that update them."""

    ix: ModuleIndex
    callers: dict[str, tuple[Instruction, Computation]]
    carried: set[int] = field(default_factory=set)
    # id() of each entry instruction computing an update of a carried parameter: the updated
    # parameters' element counts (a fused optimizer updates several).
    updates: dict[int, set[int]] = field(default_factory=dict)

    def source(self, inst: Instruction | None) -> int | None:
        """The entry parameter `inst` is the same data as, or None (computed)."""
        comp = self.ix.comp_of.get(id(inst)) if inst is not None else None
        for _ in range(_MAX_HOPS):
            if inst is None or comp is None:
                return None
            op = inst.opcode
            if op == "parameter":
                if comp.is_entry:
                    return inst.parameter_number
                called = self.callers.get(bare(comp.name))
                if called is None or called[0].opcode == "while":
                    return None  # a loop's tuple: its elements are followed at get-tuple-element
                inst, comp = self.ix.producer(called[0], inst.parameter_number or 0), called[1]
            elif op == "get-tuple-element":
                whole = self.ix.producer(inst, 0)
                index = inst.tuple_index or 0
                if whole is not None and whole.opcode.endswith("-done"):
                    # An async collective of several operands: its results are theirs, in order.
                    start = self.ix.producer(whole, 0)
                    if start is None or index >= len(start.operands):
                        return None
                    inst = self.ix.producer(start, index)
                    continue
                if whole is not None and whole.opcode == "parameter" and not comp.is_entry:
                    called = self.callers.get(bare(comp.name))
                    if called is None or called[0].opcode != "while":
                        return None
                    whole, comp = self.ix.producer(called[0], 0), called[1]
                elif whole is not None and whole.opcode == "while":
                    # A loop's result: what its body's last trip put there (a weight the body
                    # passes on, or XLA's double-buffered all-gather of the next layer's).
                    body = self._body(whole)
                    if body is None or body.root is None:
                        return None
                    whole, comp = body.root, body
                if whole is None or whole.opcode != "tuple":
                    return None
                inst = self.ix.producer(whole, index)
            elif op in _SAME_DATA:
                inst = self.ix.producer(inst, 0)
            elif op == "fusion" and self._moves_only(inst):
                inst = self.ix.producer(inst, self._data_operand(inst))
            else:
                return None
        return None

    def _body(self, loop: Instruction) -> Computation | None:
        """A while loop's body computation."""
        name = loop.attrs.get("body", "") or (loop.called[-1] if loop.called else "")
        return self.ix.computation(name.lstrip("%"))

    def _moves_only(self, fusion: Instruction) -> bool:
        """A fusion that only moves, slices or re-types its data (XLA:CPU's `wrapped_copy`,
        `wrapped_convert`, a transpose's copy, a layer's slice of a stacked weight)."""
        if not fusion.called or fusion.shape.is_tuple:
            return False
        body = self.ix.computation(fusion.called[0])
        # Its result is moved data (a scalar computed from scalars, a step's `+ 1`, is not).
        if body is None or body.root is None or body.root.opcode not in _SAME_DATA:
            return False
        return all(
            i.opcode in _SAME_DATA
            or i.opcode in ("parameter", "constant")
            or (not i.shape.is_tuple and i.shape.rank == 0)  # a slice's offset
            for i in body.instructions
        )

    def _data_operand(self, fusion: Instruction) -> int:
        """The fusion's operand of the most elements (the others: slice offsets)."""
        sizes = [
            (s.num_elements if s is not None and not s.is_tuple else -1, -k)
            for k, s in enumerate(fusion.operand_shapes)
        ]
        return -max(sizes)[1] if sizes else 0

    def is_weight(self, inst: Instruction | None) -> bool:
        return self.source(inst) in self.carried

    def is_gradient(self, inst: Instruction) -> bool:
        """Whether `inst`'s result is a carried parameter's gradient: it flows, through no other
        matmul, to the update of a parameter of as many elements, or of a shard of it (a
        gradient reduced across devices whole, each updating its shard) where no reduction
        lies between (an activation of the forward pass reaches the updates too: through the
        backward pass's matmuls, or summed over the batch into a bias's gradient)."""
        comp = self.ix.comp_of.get(id(inst))
        # A library GEMM's result is its tuple's first element (the second its workspace).
        shape = inst.shape.tuple_shapes[0] if inst.shape.tuple_shapes else inst.shape
        if comp is None or shape.is_tuple:
            return False
        elements = shape.num_elements
        # (instruction, reduced on the way, the tuple element the value is, or None: all of
        # it): a value put in a tuple (a loop's state, its saved activations) flows on only
        # out of that element, not into every element read from the tuple.
        start: _Flow = (inst, False, 0 if inst.shape.is_tuple else None)
        seen: set[tuple[int, bool, int | None]] = set()
        frontier = [start]
        for _ in range(_MAX_HOPS):
            step: list[_Flow] = []
            for here, reduced, element in frontier:
                for user in self._users(here):
                    updated = self.updates.get(id(user), set())
                    if elements in updated or (
                        # a shard of it, or one layer's of a stacked weight
                        not reduced and any(elements % n == 0 or n % elements == 0 for n in updated)
                    ):
                        return True
                    kind = self._flows(user)
                    onward = _element_after(here, user, element)
                    if not kind or onward is _NOT_THIS_ELEMENT:
                        continue
                    state = (id(user), reduced or kind == "reduces", onward)
                    if state not in seen:
                        seen.add(state)
                        step.append((user, state[1], onward))
            if not step:
                return False
            frontier = step
        return False

    def _users(self, inst: Instruction) -> list[Instruction]:
        """The instructions using `inst`'s result; at a while body's root, the loop itself in
        the computation that runs it (the gradients a scanned layer accumulates)."""
        comp = self.ix.comp_of.get(id(inst))
        if comp is None:
            return []
        users = list(self.ix.users(comp).get(bare(inst.name), []))
        if inst is comp.root:
            called = self.callers.get(bare(comp.name))
            if called is not None and called[0].opcode == "while":
                users.append(called[0])
        return users

    def _flows(self, inst: Instruction) -> str:
        """How a gradient passes through `inst`: "" not at all (a matmul inside), "reduces"
        (a reduction inside: it sums elements), else "same"."""
        if inst.opcode not in _GRADIENT_FLOW:
            return ""
        if inst.opcode == "reduce":
            return "reduces"
        if inst.opcode != "fusion":
            return "same"
        ops = {
            i.opcode
            for c in (self.ix.computation(name) for name in inst.called)
            if c is not None
            for i in c.instructions
        }
        if ops & {"dot", "convolution"}:
            return ""
        return "reduces" if "reduce" in ops else "same"


# A value on its way to an update: where it is, whether it was summed on the way, and which
# tuple element of that instruction's result it is (None: the whole result).
_Flow = tuple[Instruction, bool, int | None]
_NOT_THIS_ELEMENT = -1


def _element_after(here: Instruction, user: Instruction, element: int | None) -> int | None:
    """Which tuple element of `user`'s result the value is, given it is `element` of
    `here`'s: a tuple puts it at its operand's position, a loop keeps it where it is, a
    get-tuple-element of another element does not carry it (_NOT_THIS_ELEMENT); None where
    the result is not a tuple or the element is unknown."""
    if user.opcode == "tuple" and element is None:
        names = [bare(o) for o in user.operands]
        at = bare(here.name)
        return names.index(at) if names.count(at) == 1 else None
    if user.opcode == "get-tuple-element":
        if element is not None and user.tuple_index is not None and user.tuple_index != element:
            return _NOT_THIS_ELEMENT
        return None
    if user.opcode == "while" and here.shape.is_tuple:
        return element
    return None


_ROLES: dict[int, tuple[weakref.ref[Module], Roles | None]] = {}


def roles(module: Module) -> Roles | None:
    """The module's carried parameters and their updates (found once per module); None
    without an entry."""
    key = id(module)
    hit = _ROLES.get(key)
    if hit is not None and hit[0]() is module:
        return hit[1]
    found = _roles(module)
    # The table is bound now: at interpreter exit the module's globals may be gone first.
    table = _ROLES
    _ROLES[key] = (weakref.ref(module, lambda _: table.pop(key, None)), found)
    return found


def _roles(module: Module) -> Roles | None:
    ix = index_of(module)
    entry = module.entry_computation
    if ix is None or entry is None:
        return None
    callers: dict[str, tuple[Instruction, Computation]] = {}
    for comp in module.computations:
        for inst in comp.instructions:
            for name in inst.called:
                callers.setdefault(bare(name), (inst, comp))
    found = Roles(ix, callers)
    found.carried = {int(n) for n in _ALIAS.findall(module.attrs.get("input_output_alias", ""))}
    root = entry.root
    outputs = (
        [ix.producer(root, i) for i in range(len(root.operands))]
        if root is not None and root.opcode == "tuple"
        else [root]
    )
    params = {
        inst.parameter_number: inst
        for inst in entry.instructions
        if inst.opcode == "parameter" and inst.parameter_number is not None
    }
    for out in outputs:
        if out is None or out.shape.is_tuple:
            continue
        elements = out.shape.num_elements
        update: Instruction | None = out
        for _ in range(_MAX_HOPS):  # to the op computing it (a fused optimizer's tuple)
            if update is not None and update.opcode == "fusion" and found._moves_only(update):
                # XLA updated it in another layout: a fusion transposing it back
                update = ix.producer(update, found._data_operand(update))
            elif update is None or update.opcode not in _SAME_DATA | {"get-tuple-element"}:
                break
            else:
                update = ix.producer(update, 0)
        # An update is elementwise (`w - lr * g`, a fused optimizer): no matmul's output is one.
        if update is None or (update.opcode not in ELEMENTWISE and found._flows(update) == ""):
            continue
        if update.opcode not in ELEMENTWISE and update.opcode != "fusion":
            continue
        for i in range(len(update.operands)):
            param = found.source(ix.producer(update, i))
            held = params.get(param) if param is not None else None
            if held is not None and held.shape.num_elements == elements:
                found.carried.add(held.parameter_number or 0)
                found.updates.setdefault(id(update), set()).add(elements)
    return found
