"""`hlogap diff BASE NEW`: op-by-op comparison of two profiles or reports."""

from __future__ import annotations

from hlogap.cli.args import (
    BaseArg,
    ChipOpt,
    DeviceOpt,
    FormatOpt,
    HostOpt,
    ModuleOpt,
    NewArg,
    RunOpt,
    TopOpt,
)


def diff(
    base: BaseArg,
    new: NewArg,
    chip: ChipOpt = None,
    top: TopOpt = 20,
    fmt: FormatOpt = None,
    run: RunOpt = None,
    host: HostOpt = None,
    device: DeviceOpt = None,
    module: ModuleOpt = None,
) -> None:
    """Op-by-op comparison of two profiles or reports, ops matched across recompiles.

    \b
    Examples:
      hlogap diff /tmp/tb_before /tmp/tb_after --top 10
    """
    from hlogap.cli.comparison import Selection, load_both
    from hlogap.cli.output import OutputChoice, write_document
    from hlogap.render.base import choose_format
    from hlogap.report.compare import compare

    choose_format("diff", fmt, None)
    selection = Selection(chip, run, host, device, module)
    base_report, new_report = load_both((base, "BASE"), (new, "NEW"), selection)
    write_document(compare(base_report, new_report), "diff", OutputChoice(fmt, top=top))
