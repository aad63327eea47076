"""`hlogap bound HLO --chip CHIP`: the roofline of one HLO instruction."""

from __future__ import annotations

import sys

from hlogap.cli.args import BoundChipOpt, BoundWhatIfOpt, DevicesOpt, FormatOpt, HloArg
from hlogap.cli.output import OutputChoice, write_document


def bound(
    hlo: HloArg,
    chip: BoundChipOpt,
    fmt: FormatOpt = None,
    devices: DevicesOpt = None,
    what_if: BoundWhatIfOpt = None,
) -> None:
    """Roofline of one HLO instruction on one device: FLOPs, bytes, times, what bounds it.

    \b
    Examples:
      hlogap bound '%m = bf16[4096,4096]{1,0} dot(bf16[4096,8192]{1,0} %a,
        bf16[8192,4096]{1,0} %b), lhs_contracting_dims={1},
        rhs_contracting_dims={0}' --chip h100-sxm
    """
    from hlogap.bounds.instruction import bound_instruction
    from hlogap.render.base import choose_format

    choose_format("bound", fmt, None)
    text = sys.stdin.read() if hlo == "-" else hlo
    result = bound_instruction(text, chip, num_devices=devices, what_if=what_if or ())
    write_document(result, "bound", OutputChoice(fmt))
