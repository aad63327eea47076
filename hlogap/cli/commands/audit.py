"""`hlogap audit PATH`: rank a profile's ops by the time they lose against the roofline."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from hlogap.cli.args import (
    AllStepsOpt,
    AuditTopOpt,
    ChipOpt,
    ClusterOpt,
    CrossCheckOpt,
    DepthOpt,
    DeviceOpt,
    FormatOpt,
    GroupByOpt,
    HloDumpOpt,
    HostOpt,
    JobsOpt,
    ModelFlopsOpt,
    ModuleOpt,
    OutputOpt,
    PlotOpt,
    ProfileArg,
    RunOpt,
    SkipBadHostsOpt,
    SortOpt,
    StepsOpt,
    SubRowsOpt,
    WhatIfOpt,
    WideOpt,
)
from hlogap.cli.output import (
    OutputChoice,
    Progress,
    check_target,
    refuse_overwriting_inputs,
    write_document,
    wrote,
)
from hlogap.cli.process import collect_from_here
from hlogap.errors import UsageError

if TYPE_CHECKING:
    from hlogap.options import AuditOptions
    from hlogap.report.model import AuditReport


def audit(
    path: ProfileArg,
    chip: ChipOpt = None,
    top: AuditTopOpt = 20,
    fmt: FormatOpt = None,
    output: OutputOpt = None,
    run: RunOpt = None,
    host: HostOpt = None,
    device: DeviceOpt = None,
    module: ModuleOpt = None,
    sort: SortOpt = "gap",
    hlo_dump: HloDumpOpt = None,
    jobs: JobsOpt = None,
    plot: PlotOpt = None,
    group_by: GroupByOpt = None,
    depth: DepthOpt = None,
    steps: StepsOpt = False,
    model_flops: ModelFlopsOpt = None,
    what_if: WhatIfOpt = None,
    wide: WideOpt = False,
    sub_rows: SubRowsOpt = True,
    skip_bad_hosts: SkipBadHostsOpt = False,
    cross_check: CrossCheckOpt = False,
    cluster: ClusterOpt = None,
    all_steps: AllStepsOpt = False,
) -> None:
    """Rank a profile's XLA ops by the time they lose against the roofline.

    \b
    Examples:
      hlogap audit /tmp/tensorboard --top 10
      hlogap audit run_dir/ --format json | jq '.ops[0]'
      hlogap audit gs://bucket/tb --chip tpu-v5p -o report.html
      hlogap audit gs://bucket/pod-run --cluster tcp://scheduler:8786
    """
    from hlogap.options import AuditOptions
    from hlogap.render.base import choose_format, needs_timeline
    from hlogap.rows.groups import DEFAULT_DEPTH

    chosen = choose_format("audit", fmt, output)  # a bad format fails before the profile is read
    if depth is not None and group_by != "scope":
        raise UsageError("--depth applies only to --group-by scope")
    options = AuditOptions(
        chip=chip,
        run=run,
        host=host,
        device=device,
        module=module,
        hlo_dump=hlo_dump,
        sort=sort,
        jobs=jobs,
        group_by=group_by,
        depth=DEFAULT_DEPTH if depth is None else depth,
        cross_check=cross_check,
        skip_bad_hosts=skip_bad_hosts,
        cluster=cluster,
        model_flops=model_flops,
        timeline=needs_timeline(chosen),
        what_if=tuple(what_if or ()),
        all_steps=all_steps,
    )
    choice = OutputChoice(fmt, output, top, steps, wide, sub_rows)
    audit_to(path, options, choice, plot)


def audit_to(path: str, options: AuditOptions, choice: OutputChoice, plot: Path | None) -> None:
    """Audit the profile at `path` and write the report as `choice` says, the roofline chart to
    `plot` too. Both outputs are checked writable before the profile is read, and the chart is
    drawn before any output is written: a chart that fails leaves nothing half written."""
    target = check_target(choice.path)
    if plot is not None:
        from hlogap.render.plot import check_plot_target

        check_plot_target(plot)
    report = audited(path, options, [target, plot])
    chart = None
    if plot is not None:
        from hlogap.render.plot import draw_plot

        chart = draw_plot(report, plot)
    write_document(report, "audit", choice)
    if plot is not None and chart is not None:
        from hlogap.files import write_bytes

        write_bytes(plot, chart)
        wrote(plot)


def audited(path: str, options: AuditOptions, outputs: list[Path | None]) -> AuditReport:
    """The profile at `path` audited, its modules loaded first (`collect_from_here`), with the
    progress line; none of `outputs` may be a file it read."""
    from hlogap.pipeline import audit as run_audit

    collect_from_here()
    with Progress() as progress:
        report = run_audit(path, options, progress)
    refuse_overwriting_inputs(outputs, report, options.chip)
    return report
