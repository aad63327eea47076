"""hlogap: roofline and profile-gap auditor for XLA programs.

import hlogap
report = hlogap.audit("/tmp/tensorboard", chip="tpu-v5e")
report.ops[0].name, report.ops[0].gap_us, report.to_dict()
saved = hlogap.load_report("baseline.json")   # the same AuditReport, from `--format json`
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from hlogap._version import __version__

if TYPE_CHECKING:
    from hlogap.report.model import AuditReport

__all__ = ["__version__", "audit", "load_report"]


def audit(path: str | Path, chip: str | None = None, **options: Any) -> AuditReport:
    """Audit a profile (logdir, run directory or .xplane.pb); see `hlogap.pipeline.audit`.

    Imported on call so that `import hlogap` (and `hlogap --help`) stays instant.
    """
    from hlogap.pipeline import audit as run

    return run(path, chip, **options)


def load_report(path: str | Path, **selection: Any) -> AuditReport:
    """A saved `audit --format json` report, or a profile audited; see
    `hlogap.pipeline.load_report`."""
    from hlogap.pipeline import load_report as load

    return load(path, **selection)
