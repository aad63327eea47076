"""`hlogap memory PATH`: what holds each program's memory at its peak."""

from __future__ import annotations

from hlogap.cli.args import (
    ChipOpt,
    DeviceOpt,
    FormatOpt,
    HostOpt,
    ModuleOpt,
    OutputOpt,
    ProfileArg,
    RunOpt,
    TopOpt,
    WideOpt,
)
from hlogap.cli.commands.audit import audited
from hlogap.cli.output import (
    OutputChoice,
    check_target,
    write_document,
)


def memory(
    path: ProfileArg,
    chip: ChipOpt = None,
    top: TopOpt = 20,
    fmt: FormatOpt = None,
    output: OutputOpt = None,
    run: RunOpt = None,
    host: HostOpt = None,
    device: DeviceOpt = None,
    module: ModuleOpt = None,
    wide: WideOpt = False,
) -> None:
    """What holds each program's memory at its peak: arguments, outputs, temporaries, donated
    buffers, the buffers live at the peak, and the headroom on the device (docs/memory.md).

    \b
    Examples:
      hlogap memory /tmp/tensorboard --top 10
      hlogap memory run_dir/ --format json | jq '.memory.modules[0].peak_bytes'
    """
    from hlogap.options import AuditOptions
    from hlogap.render.base import MemoryView, choose_format

    choose_format("memory", fmt, output)
    target = check_target(output)
    # No advice: the memory view reads none of it.
    options = AuditOptions(
        chip=chip, run=run, host=host, device=device, module=module, advice=False
    )
    report = audited(path, options, [target])
    write_document(MemoryView(report), "memory", OutputChoice(fmt, output, top, wide=wide))
