"""`hlogap bound`: the roofline of one HLO instruction, the calculator behind the seeds' numbers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hlogap.bounds.hints import hints_for
from hlogap.bounds.roofline import Bound, bound_op
from hlogap.chips import Chip, load_chip
from hlogap.cost import OpCost, cost_instruction
from hlogap.errors import InputError, UsageError
from hlogap.hlo.ir import Instruction
from hlogap.hlo.opcodes import async_role
from hlogap.hlo.text import HloParseError, parse_instruction


@dataclass
class InstructionBound:
    """One instruction's roofline bound on a chip (`hlogap bound`): its cost, its bound and the
    hints."""

    instruction: Instruction
    chip: Chip
    cost: OpCost
    bound: Bound
    hints: list[str]
    # `--what-if CHIP`: the same cost bounded on other chips.
    what_if: list[tuple[Chip, Bound]] = field(default_factory=list)

    @property
    def intensity(self) -> float | None:
        return self.cost.flops / self.cost.hbm_bytes if self.cost.hbm_bytes else None

    def to_dict(self) -> dict[str, object]:
        """The contract's `bound --format json` object (plus the chip's name)."""
        return {
            "name": self.instruction.name,
            "opcode": self.instruction.opcode,
            "chip": self.chip.name,
            "flops": self.cost.flops,
            "bytes": self.cost.hbm_bytes,
            "comm_bytes": self.cost.comm_bytes,
            "transcendentals": self.cost.transcendentals,
            "intensity": self.intensity,
            "t_compute_us": self.bound.t_compute_s * 1e6,
            "t_memory_us": self.bound.t_memory_s * 1e6,
            "t_comm_us": self.bound.t_comm_s * 1e6,
            "bound_us": self.bound.lower_s * 1e6,
            "upper_bound_us": self.bound.upper_s * 1e6,
            "bound_by": self.bound.bound_by,
            "hints": self.hints,
            "what_if": [
                {
                    "chip": chip.name,
                    "bound_us": other.lower_s * 1e6,
                    "bound_by": other.bound_by,
                    # How many times faster its bound is there (null where either has none).
                    "speedup": self.bound.lower_s / other.lower_s
                    if other.lower_s > 0 and self.bound.lower_s > 0
                    else None,
                }
                for chip, other in self.what_if
            ],
        }


def bound_instruction(
    text: str, chip: str, num_devices: int | None = None, what_if: Sequence[str] = ()
) -> InstructionBound:
    the_chip = load_chip(chip)
    others = [load_chip(name) for name in what_if]
    if not text.strip():
        raise UsageError("no HLO instruction given")
    try:
        inst = parse_instruction(text.strip())
    except HloParseError as exc:
        # The instruction is the command's input (an argument or stdin), not an option: HLO
        # that no compiler would emit is corrupt input (exit 3), as a corrupt profile is.
        raise InputError(f"malformed HLO: {exc}") from exc
    cost = cost_instruction(inst, None, num_devices=num_devices)
    result = bound_op(cost, the_chip, async_role(inst.opcode, inst.name))
    role = async_role(inst.opcode, inst.name)
    return InstructionBound(
        inst,
        the_chip,
        cost,
        result,
        hints_for(inst, cost, result, the_chip, None),
        [(other, bound_op(cost, other, role)) for other in others],
    )
