"""The audit pipeline: profile files -> op timings -> HLO ops -> costs -> bounds -> report."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hlogap.chips import Chip, detect_chip, load_chip
from hlogap.errors import InputError, UsageError
from hlogap.report.groups import DEFAULT_DEPTH, GROUP_KEYS, group_rows
from hlogap.report.model import SORT_KEYS, AuditReport, ChipSource, load_json, sort_rows
from hlogap.source import ProfileSource, find_profile, is_url, regular_file
from hlogap.trace.model import TraceData, merge_traces
from hlogap.trace.reading import (
    PendingTrace,
    Progress,
    SkippedHost,
    can_fork,
    read_files,
    read_host,
    start_reading,
)
from hlogap.trace.timing import ModulePattern, time_ops


def _read_one(args: tuple[str, str, bool]) -> TraceData | SkippedHost:
    return read_host(*args)


def read_profile(
    source: ProfileSource,
    jobs: int | None = None,
    progress: Progress | None = None,
    skip_bad_hosts: bool = False,
) -> TraceData | PendingTrace:
    """Read every host file of the run: several files in parallel processes, one large file's
    device planes split over `jobs` processes (default: the machine's cores), returned pending
    so that the caller can work while they read. With `skip_bad_hosts`, a host file that cannot
    be read is left out and named in the warnings (not a single-file run: nothing would be
    left)."""
    pairs = list(zip(source.files, source.hosts))
    if len(pairs) == 1:
        # One file: its device planes are the tasks (the reader never splits finer).
        return start_reading(*pairs[0], workers=_workers(jobs, 1 << 16))
    workers = _workers(jobs, len(pairs))
    if workers > 1 and not can_fork():
        # Not fork: the caller is multithreaded (JAX in the same process, say).
        import multiprocessing

        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
        with context.Pool(workers) as pool:  # leaving the block terminates the readers
            tasks = [(path, host, skip_bad_hosts) for path, host in pairs]
            results = pool.map(_read_one, tasks, chunksize=1)
    else:
        results = read_files(pairs, workers, progress, skip_bad_hosts)
    traces = [r for r in results if isinstance(r, TraceData)]
    skipped = [r for r in results if isinstance(r, SkippedHost)]
    if not traces:
        raise InputError(f"no host file of {source.path} could be read: {skipped[0].reason}")
    merged = merge_traces(traces)
    merged.warnings += [f"skipped host {s.host}: {s.reason}" for s in skipped]
    return merged


def chip_from_trace(trace: TraceData) -> tuple[Chip, ChipSource, str]:
    """(chip, source, reason) without `--chip`: detected from device planes; CPU: calibrated."""
    if trace.backend in ("gpu", "tpu"):
        for dev in trace.devices:
            found = detect_chip(dev.stats, dev.plane)
            if found:
                return found[0], "detected", found[1]
        raise InputError(
            f"cannot tell which {trace.backend.upper()} this profile ran on; "
            "pass --chip NAME (see `hlogap chips`) or --chip FILE.toml"
        )
    from hlogap.chips.calibrate import calibrated_chip, calibrated_path

    chip = calibrated_chip()
    if chip is None:
        raise InputError(
            "a CPU profile needs a CPU chip: run `hlogap calibrate` or pass --chip FILE.toml"
        )
    return chip, "calibrated", f"calibrated CPU chip {calibrated_path()}"


def audit(
    path: str | Path,
    chip: str | None = None,
    *,
    run: str | None = None,
    host: str | None = None,
    device: int | None = None,
    module: str | None = None,
    hlo_dump: str | Path | None = None,
    sort: str = "gap",
    jobs: int | None = None,
    group_by: str | None = None,
    depth: int = DEFAULT_DEPTH,
    progress: Progress | None = None,
    cross_check: bool = False,
    skip_bad_hosts: bool = False,
) -> AuditReport:
    """Audit a profile (logdir, run directory or .xplane.pb) and return the report; `progress`
    hears what is being done (a line at a time)."""
    sort_key = next((k for k in SORT_KEYS if k == sort), None)
    if sort_key is None:
        raise UsageError(f"unknown sort key '{sort}' (use one of: {', '.join(SORT_KEYS)})")
    group_key = next((k for k in GROUP_KEYS if k == group_by), None)
    if group_by is not None and group_key is None:
        raise UsageError(f"unknown --group-by '{group_by}' (use one of: {', '.join(GROUP_KEYS)})")
    if depth < 1:
        raise UsageError(f"--depth must be at least 1, not {depth}")
    module_re = _module_regex(module)
    dump_dir = Path(hlo_dump) if hlo_dump else None
    if dump_dir is not None and not dump_dir.is_dir():
        raise InputError(f"--hlo-dump is not a directory: {dump_dir}")
    # A user's chip is checked before the profile is read: a typo fails at once.
    chosen: tuple[Chip, ChipSource, str] | None = (
        (load_chip(chip), "user", f"--chip {chip}") if chip else None
    )
    source = find_profile(path, run=run, host=host)
    if progress is not None:
        progress(f"reading {len(source.files)} host file(s) of {source.path}")
    reading = read_profile(source, jobs, progress, skip_bad_hosts)
    # Heavy imports, while forked readers run.
    from hlogap.report.analysis import op_rows
    from hlogap.report.hosts import host_skew
    from hlogap.report.steps import step_rows

    trace = reading.result() if isinstance(reading, PendingTrace) else reading
    if trace.backend == "none":
        raise InputError(f"no XLA op events in {path} (was the jitted program run while tracing?)")
    the_chip, chip_source, reason = chosen or chip_from_trace(trace)
    times = time_ops(trace, device, module_re)
    if device is not None and times.devices == 0:
        raise UsageError(f"no device {device} in this profile")
    if progress is not None:
        progress(f"costing {int((times.events > 0).sum())} ops against {the_chip.name}")
    rows = op_rows(trace, times, the_chip, dump_dir)
    report = AuditReport(
        steps=step_rows(trace, times.selected, rows),
        group_by=group_key,
        groups=group_rows(rows, group_key, depth, sort_key) if group_key else [],
        path=source.path,
        run=source.run,
        files=list(source.files),
        hosts=source.hosts,
        backend=trace.backend,
        chip=the_chip,
        chip_source=chip_source,
        chip_reason=reason,
        devices=times.devices,
        events=int(times.events.sum()),
        ops=sort_rows(rows, sort_key),
        sort=sort_key,
        warnings=list(trace.warnings),
    )
    report.host_skew = host_skew(trace, times.selected, rows) or None
    if cross_check:
        from hlogap.report.crosscheck import cross_check as run_cross_check

        if progress is not None:
            progress("running xprof's converter on a copy of the profile")
        selected = device is not None or module is not None
        report.cross_check = run_cross_check(report, selected).to_dict()
    return report


def is_json_report(path: Path) -> bool:
    """A saved report: a `.json` file, or any file (not `.pb`) whose content starts with `{`."""
    if path.suffix.lower() == ".json":
        return True
    if not path.is_file() or path.suffix.lower() == ".pb":
        return False
    try:
        with path.open("rb") as f:
            head = f.read(64)
    except OSError:
        return False
    return head.lstrip().startswith(b"{")


def load_report(
    path: str | Path,
    role: str = "report",
    *,
    chip: str | None = None,
    run: str | None = None,
    host: str | None = None,
    device: int | None = None,
    module: str | None = None,
    progress: Progress | None = None,
) -> AuditReport:
    """A saved JSON report, or a profile audited. `role` ("baseline", "BASE"...) names it in
    errors. `module` (a regex) also filters the ops of a saved report."""
    if is_url(path):  # a remote profile: find_profile lists it through fsspec
        return audit(
            path, chip, run=run, host=host, device=device, module=module, progress=progress
        )
    p = Path(path)
    if not p.exists():
        raise InputError(f"{role} not found: {p}")
    if not p.is_dir():
        regular_file(p, role)
    if not is_json_report(p):
        return audit(p, chip, run=run, host=host, device=device, module=module, progress=progress)
    module_re = _module_regex(module)
    report = load_json(p, role)
    if module_re is None:
        return report
    return report.only_modules([o for o in report.ops if module_re.search(o.module)])


def load_pair(
    base: tuple[str, str], new: tuple[str, str], **selection: Any
) -> tuple[AuditReport, AuditReport]:
    """BASE and NEW, each a (path or URL, role): local ones are checked to exist before either
    is audited, so a typo in the second fails at once, for the reason the user can act on."""
    for path, role in (base, new):
        if not is_url(path) and not Path(path).exists():
            raise InputError(f"{role} not found: {path}")
    return load_report(*base, **selection), load_report(*new, **selection)


def _module_regex(module: str | None) -> ModulePattern | None:
    """RE2 (linear time, no backtracking): a pattern such as `(a+)+$` cannot hang an audit."""
    if not module:
        return None
    import re2

    options = re2.Options()
    options.log_errors = False  # the error is ours to report, in one line
    try:
        pattern: ModulePattern = re2.compile(module, options)
    except re2.error as exc:
        why = exc.args[0] if exc.args else exc
        why = why.decode(errors="replace") if isinstance(why, bytes) else str(why)
        raise UsageError(f"bad --module regex '{module}': {why} (RE2 syntax)") from exc
    return pattern


def _workers(jobs: int | None, tasks: int) -> int:
    """Processes to read with: `--jobs` (1 or more), default the machine's cores; never more
    than the cores or than there are `tasks` to share."""
    cores = os.cpu_count() or 1
    if jobs is not None and jobs < 1:
        raise UsageError(f"--jobs must be at least 1, not {jobs}")
    return max(1, min(jobs or cores, cores, tasks))
