"""hlogap: roofline and profile-gap auditor for XLA programs.

import hlogap
report = hlogap.audit("/tmp/tensorboard", hlogap.AuditOptions(chip="tpu-v5e"))
report.ops[0].name, report.ops[0].gap_us, report.to_dict()
saved = hlogap.load_report("baseline.json")   # the same AuditReport, from `--format json`
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from hlogap._version import __version__

if TYPE_CHECKING:
    from hlogap.options import AuditOptions
    from hlogap.report.model import AuditReport
    from hlogap.trace.reading import Progress

__all__ = ["AuditOptions", "__version__", "audit", "load_report"]


def __getattr__(name: str) -> object:
    """`hlogap.AuditOptions`, imported on first use (`import hlogap` stays instant)."""
    if name == "AuditOptions":
        from hlogap.options import AuditOptions

        return AuditOptions
    raise AttributeError(f"module 'hlogap' has no attribute {name!r}")


def audit(
    path: str | Path, options: AuditOptions | None = None, progress: Progress | None = None
) -> AuditReport:
    """Audit a profile (logdir, run directory, .xplane.pb or nsys-jax archive) with `options`
    (`hlogap.AuditOptions`, the defaults of `hlogap audit PATH` where None); `progress` hears
    what is being done, a line at a time. See `hlogap.pipeline.audit`.

    Imported on call so that `import hlogap` (and `hlogap --help`) stays instant.
    """
    from hlogap.pipeline import audit as run

    return run(path, options, progress)


def load_report(path: str | Path, **selection: Any) -> AuditReport:
    """A saved `audit --format json` report, or a profile audited; see
    `hlogap.pipeline.load_report`."""
    from hlogap.pipeline import load_report as load

    return load(path, **selection)
