"""`hlogap chips`: the chips hlogap knows."""

from __future__ import annotations

from hlogap.cli.args import FormatOpt
from hlogap.cli.output import OutputChoice, write_document


def chips(fmt: FormatOpt = None) -> None:
    """The chips hlogap knows: peaks, bandwidths, ridge points, and where each figure comes from.

    \b
    Examples:
      hlogap chips
      hlogap chips --format json | jq '.[] | select(.name=="tpu-v5p")'
    """
    from hlogap.chips import builtin_chips
    from hlogap.chips.calibrate import calibrated_chip
    from hlogap.render.base import ChipList

    cpu = calibrated_chip()  # this machine, when calibrated: `--chip cpu`
    document = ChipList([*builtin_chips(), *([cpu] if cpu else [])])
    write_document(document, "chips", OutputChoice(fmt))
