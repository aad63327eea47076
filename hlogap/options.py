"""What an audit is asked for: one typed, frozen options object, checked once before anything is
read (`AuditOptions.checked`). The command line builds it from its flags, the API takes it whole:
`hlogap.audit(path, AuditOptions(chip="tpu-v5e", all_steps=True))`."""

from __future__ import annotations

import math
from pathlib import Path

from msgspec import Struct
from msgspec.structs import replace

from hlogap.errors import InputError, UsageError
from hlogap.report.model import SORT_KEYS
from hlogap.rows.groups import DEFAULT_DEPTH, GROUP_KEYS


class AuditOptions(Struct, frozen=True, kw_only=True):
    """Every choice of an audit; the defaults are `hlogap audit PATH`'s."""

    chip: str | None = None  # a chip name or a chip file (None: detected, or the calibrated CPU)
    run: str | None = None  # the run directory of a logdir (None: the newest)
    host: str | None = None  # one host file of the run (None: every host)
    device: int | None = None  # only this device ordinal's events
    module: str | None = None  # only the ops of the modules this RE2 pattern matches
    hlo_dump: str | Path | None = None  # a --xla_dump_to directory for modules the profile lacks
    sort: str = "gap"  # one of report.model.SORT_KEYS
    jobs: int | None = None  # local reader processes (None: one per core)
    group_by: str | None = None  # one of report.groups.GROUP_KEYS
    depth: int = DEFAULT_DEPTH  # scope levels kept with group_by "scope"
    cross_check: bool = False  # also run xprof's converter and compare op by op
    skip_bad_hosts: bool = False  # audit the readable hosts, name the others in the warnings
    cluster: str | None = None  # a Dask scheduler address or local[:N]
    model_flops: float | None = None  # the model's FLOPs per step, whole program: gives MFU
    timeline: bool = False  # keep the selected events (a timeline export)
    what_if: tuple[str, ...] = ()  # other chips to bound the ops on
    # Every op event in the op rows, not only the steady steps'. xprof's converter counts every
    # event: `cross_check` implies it.
    all_steps: bool = False
    # Run the advice stage (actions, what-ifs, the mesh axes' exposed time): `hlogap memory`
    # reads none of it.
    advice: bool = True

    def checked(self) -> AuditOptions:
        """The options, each value checked (UsageError / InputError, one line each), with what
        one option implies of another filled in."""
        if self.sort not in SORT_KEYS:
            raise UsageError(f"unknown sort key '{self.sort}' (use one of: {', '.join(SORT_KEYS)})")
        if self.group_by is not None and self.group_by not in GROUP_KEYS:
            raise UsageError(
                f"unknown --group-by '{self.group_by}' (use one of: {', '.join(GROUP_KEYS)})"
            )
        if self.depth < 1:
            raise UsageError(f"--depth must be at least 1, not {self.depth}")
        flops = self.model_flops
        if flops is not None and not (flops > 0 and math.isfinite(flops)):
            raise UsageError(f"--model-flops must be a positive number, not {flops}")
        if self.hlo_dump and not Path(self.hlo_dump).is_dir():
            raise InputError(f"--hlo-dump is not a directory: {self.hlo_dump}")
        from hlogap.trace.summary import module_pattern

        module_pattern(self.module)  # a bad pattern fails before anything is read
        return replace(
            self, what_if=tuple(self.what_if), all_steps=self.all_steps or self.cross_check
        )
