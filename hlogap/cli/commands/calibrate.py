"""`hlogap calibrate`: measure this CPU's roofline and save it as a chip file."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from hlogap.cli.args import CalibrateOutputOpt
from hlogap.cli.output import file_target, write_stdout
from hlogap.cli.process import collect_from_here

if TYPE_CHECKING:
    from hlogap.chips.calibrate import Calibration


def calibrate(output: CalibrateOutputOpt = None) -> None:
    """Measure this CPU's matmul FLOP/s and memory bandwidth and save them as a chip file.

    \b
    Examples:
      hlogap calibrate
      hlogap calibrate -o - > mycpu.toml
    """
    from hlogap.chips.calibrate import calibrate as run_calibrate
    from hlogap.chips.calibrate import chip_text, measure
    from hlogap.chips.database import calibrated_path

    collect_from_here()
    target = file_target(output)
    if target is not None:
        from hlogap.files import check_output
        from hlogap.source import refuse_to_overwrite

        check_output(target)  # before a minute of measuring, not after
        refuse_to_overwrite(target, [])
    if output is not None and target is None:  # -o -: the chip file on stdout
        result = measure()
        write_stdout(chip_text(result))
    else:
        chip, result = run_calibrate(output)
        peaks = ", ".join(f"{d} {f:.3g}" for d, f in chip.peak_flops.items())
        print(
            f"wrote {output or calibrated_path()}: FLOP/s {peaks}; memory {chip.hbm_bw:.3g} B/s",
            file=sys.stderr,
        )
    warn_if_noisy(result)


def warn_if_noisy(result: Calibration) -> None:
    """Say on stderr where a calibration is less than the machine's: measured without XLA, or
    on a busy machine (its rounds disagree)."""
    if result.engine == "numpy":
        print(
            "hlogap: warning: JAX is not importable: dots measured with numpy's f32 matmul "
            "(not XLA, which runs the programs), and bf16/f16/int8 take the f32 figure",
            file=sys.stderr,
        )
    if result.noisy:
        print(
            f"hlogap: warning: calibration rounds disagree by {result.flops_spread:.0%} "
            f"(matmul) and {result.bandwidth_spread:.0%} (copy): this machine is busy; the "
            "best round is kept, rerun `hlogap calibrate` when it is idle",
            file=sys.stderr,
        )
