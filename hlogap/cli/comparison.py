"""What `check` and `diff` read: the same selection of each side (`Selection`), both sides
loaded or audited. Imported by those commands as they run, never by an audit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hlogap.cli.output import Progress
from hlogap.cli.process import collect_from_here

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
    collect_from_here()
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
