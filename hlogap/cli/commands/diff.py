"""`hlogap diff BASE NEW`: op-by-op comparison of two profiles or reports."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

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
from hlogap.cli.output import OutputChoice, Progress, write_document

if TYPE_CHECKING:
    from hlogap.report.model import AuditReport


@dataclass(frozen=True)
class Selection:
    """What of each profile a comparison reads (`--chip`, `--run`, `--host`, `--device`,
    `--module`), the same for both sides."""

    chip: str | None = None
    run: str | None = None
    host: str | None = None
    device: int | None = None
    module: str | None = None


def load_both(
    base: tuple[str, str], new: tuple[str, str], selection: Selection
) -> tuple[AuditReport, AuditReport]:
    """`check` and `diff`: both sides (path, role) loaded or audited, with progress."""
    from hlogap.pipeline import load_pair

    s = selection
    with Progress() as progress:
        return load_pair(
            base,
            new,
            chip=s.chip,
            run=s.run,
            host=s.host,
            device=s.device,
            module=s.module,
            progress=progress,
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
    from hlogap.render.base import choose_format
    from hlogap.report.compare import compare

    choose_format("diff", fmt, None)
    selection = Selection(chip, run, host, device, module)
    base_report, new_report = load_both((base, "BASE"), (new, "NEW"), selection)
    write_document(compare(base_report, new_report), "diff", OutputChoice(fmt, top=top))
