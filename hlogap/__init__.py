"""hlogap: roofline and profile-gap auditor for XLA programs.

import hlogap
report = hlogap.audit("/tmp/tensorboard", chip="tpu-v5e")
report.ops[0].name, report.ops[0].gap_us, report.to_dict()
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hlogap.report.model import AuditReport

__version__ = "0.1.0"


def audit(path: str | Path, chip: str | None = None, **options: Any) -> AuditReport:
    """Audit a profile (logdir, run directory or .xplane.pb); see `hlogap.pipeline.audit`.

    Imported on call so that `import hlogap` (and `hlogap --help`) stays instant.
    """
    from hlogap.pipeline import audit as run

    return run(path, chip, **options)
