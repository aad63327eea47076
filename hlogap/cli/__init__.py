"""The `hlogap` command line: parse options, call the library, render. Nothing else lives here.

Library modules are imported inside commands so that `hlogap --help` stays instant.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from typer.exceptions import Abort, Exit, TyperException

from hlogap.cli.output import (
    OutputChoice,
    Progress,
    escaped,
    file_target,
    fit_lines,
    write_document,
    write_stdout,
    wrote,
)
from hlogap.cli.process import (
    Terminated,
    error_line,
    exit_now,
    on_sigterm,
    print_traceback,
    stop_children,
)
from hlogap.errors import EXIT_INPUT, EXIT_INTERNAL, EXIT_USAGE, HlogapError, UsageError
from hlogap.hlo.text import MAX_DEVICES

if TYPE_CHECKING:
    from hlogap.chips.calibrate import Calibration
    from hlogap.report.gate import CheckResult
    from hlogap.report.model import AuditReport

# The progress line's old name here (tests/test_terminal.py sets its DELAY_S).
_Progress = Progress

# Every command's help ends with the exit codes of the contract (docs/cli.md).
EXIT_CODES = """\b
Exit codes (docs/cli.md):
  0  success; for `check`, within the thresholds
  1  `check` found a regression
  2  usage: an unknown option, chip or format, a value out of range, an option
     that does not apply, an output hlogap refuses to write
  3  input: no profile found, a profile or baseline unreadable or corrupt, a
     --run, --host, --device or --module that names nothing in the profile
  4  internal error (a bug): rerun with --debug and report it
  130, 143  interrupted (Ctrl-C), terminated"""

app = typer.Typer(
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Plain help: Rich's help formatter costs ~0.2 s of imports, and `hlogap --help` is instant.
    rich_markup_mode=None,
    help="Roofline and profile-gap auditor for XLA programs: which ops lose the most time "
    "against the hardware's roofline, and why.",
    epilog=EXIT_CODES,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        from hlogap._version import __version__

        print(f"hlogap {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Roofline and profile-gap auditor for XLA programs: which ops lose the most time against
    the hardware's roofline, and why."""


def _complete_chip(incomplete: str) -> list[str]:
    """--chip's values for shell completion: the chips hlogap knows, by name."""
    from hlogap.chips import builtin_chips

    return [c.name for c in builtin_chips() if c.name.startswith(incomplete)]


def _complete_sort(incomplete: str) -> list[str]:
    from hlogap.report.model import SORT_KEYS

    return [k for k in SORT_KEYS if k.startswith(incomplete)]


def _complete_group_by(incomplete: str) -> list[str]:
    from hlogap.report.groups import GROUP_KEYS

    return [k for k in GROUP_KEYS if k.startswith(incomplete)]


ChipOpt = Annotated[
    str | None,
    typer.Option(
        "--chip",
        help="Chip name (see `hlogap chips`) or a chip TOML file; default: detect from the trace.",
        autocompletion=_complete_chip,
    ),
]
# str, not Path: a Path would fold the `//` of a URL (gs://bucket/tb -> gs:/bucket/tb).
ProfileArg = Annotated[
    str,
    typer.Argument(
        metavar="PATH",
        help="TensorBoard logdir, run directory, .xplane.pb, nsys-jax archive (.zip, or a "
        "directory of them), or a URL.",
    ),
]
# The selection every command that reads a profile takes.
RunOpt = Annotated[str | None, typer.Option(help="Run name; default: newest.")]
HostOpt = Annotated[str | None, typer.Option(help="Only this host's file.")]
DeviceOpt = Annotated[int | None, typer.Option(min=0, help="Only this device ordinal.")]
ModuleOpt = Annotated[str | None, typer.Option(help="Only modules matching REGEX.")]


def _format_option(names: str, output: bool = False) -> typer.models.OptionInfo:
    """--format for a command that renders `names` (tests check them against the registry)."""
    default = "from --output's extension, else table" if output else "table"

    def complete(incomplete: str) -> list[str]:
        return [n for n in names.split(", ") if n.startswith(incomplete)]

    option: typer.models.OptionInfo = typer.Option(
        "--format",
        "-f",
        help=f"Output format: {names}; default: {default}.",
        autocompletion=complete,
    )
    return option


AuditFormat = Annotated[
    str | None, _format_option("table, json, csv, md, html, perfetto", output=True)
]
DiffFormat = Annotated[str | None, _format_option("table, json, md")]
CheckFormat = Annotated[str | None, _format_option("table, json, md, junit")]
PlainFormat = Annotated[str | None, _format_option("table, json")]
TopOpt = Annotated[int, typer.Option("--top", "-n", min=0, help="Rows to show; 0 = all.")]
# An audit's machine output (JSON, CSV, the HTML page) holds every op whatever --top says.
AuditTopOpt = Annotated[
    int,
    typer.Option(
        "--top",
        "-n",
        min=0,
        help="Rows of the terminal table and Markdown; 0 = all. JSON, CSV and HTML hold every "
        "op whatever --top says.",
    ),
]
WideOpt = Annotated[
    bool, typer.Option("--wide", help="Every column, however wide the terminal is.")
]
OutputOpt = Annotated[
    Path | None,
    typer.Option("--output", "-o", help="Write to FILE instead of stdout."),
]


def _load_pair(
    base: tuple[str, str],
    new: tuple[str, str],
    chip: str | None,
    run: str | None,
    host: str | None,
    device: int | None,
    module: str | None,
) -> tuple[AuditReport, AuditReport]:
    """`check` and `diff`: both sides (path, role) loaded or audited, with progress."""
    from hlogap.pipeline import load_pair

    selection = {"chip": chip, "run": run, "host": host, "device": device, "module": module}
    with Progress() as progress:
        return load_pair(base, new, **selection, progress=progress)


def _step_summary(verdict: CheckResult | str, read: list[str]) -> None:
    """`check`'s verdict (or the one-line reason there is none) appended to GitHub Actions' step
    summary when GITHUB_STEP_SUMMARY is set; never onto a file the check read."""
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if not step_summary:
        return
    from hlogap.files import check_output
    from hlogap.render.md import append_step_summary
    from hlogap.source import refuse_to_overwrite

    check_output(Path(step_summary))
    refuse_to_overwrite(Path(step_summary), read)
    append_step_summary(verdict, Path(step_summary))


@app.command(epilog=EXIT_CODES)
def audit(
    path: ProfileArg,
    chip: ChipOpt = None,
    top: AuditTopOpt = 20,
    fmt: AuditFormat = None,
    output: OutputOpt = None,
    run: RunOpt = None,
    host: HostOpt = None,
    device: DeviceOpt = None,
    module: ModuleOpt = None,
    sort: Annotated[
        str,
        typer.Option(
            help="gap, measured, idle (device idle before the op; largest first) or "
            "efficiency (lowest first).",
            autocompletion=_complete_sort,
        ),
    ] = "gap",
    hlo_dump: Annotated[
        Path | None,
        typer.Option("--hlo-dump", help="Directory of XLA HLO text dumps (--xla_dump_to)."),
    ] = None,
    jobs: Annotated[
        int | None, typer.Option(help="Hosts read in parallel; default: cores.")
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help="Also draw the roofline chart to FILE (.svg, .png, .html)."),
    ] = None,
    group_by: Annotated[
        str | None,
        typer.Option(
            "--group-by",
            help="Roll ops up by scope (the op path cut to --depth components), category, "
            "source, module or axis (collectives by the mesh axes they run over).",
            autocompletion=_complete_group_by,
        ),
    ] = None,
    depth: Annotated[
        int | None,
        typer.Option(
            "--depth",
            min=1,
            help="Components of the op path a scope keeps (default 3); only with --group-by scope.",
        ),
    ] = None,
    steps: Annotated[
        bool,
        typer.Option("--steps", help="Also print the steps: a summary, then --top rows."),
    ] = False,
    model_flops: Annotated[
        float | None,
        typer.Option(
            "--model-flops",
            metavar="N",
            help="The model's FLOPs per step, whole program (e.g. 6 x params x tokens): gives MFU.",
        ),
    ] = None,
    what_if: Annotated[
        list[str] | None,
        typer.Option(
            "--what-if",
            metavar="CHIP",
            help="Also bound the ops on another chip (name or .toml; repeatable): the ceiling "
            "on the speedup there and the ops that would cap it.",
        ),
    ] = None,
    wide: WideOpt = False,
    sub_rows: Annotated[
        bool,
        typer.Option(
            "--sub-rows/--no-sub-rows",
            help="Under a command buffer (CUDA graph) call, its ops with their estimated "
            "share of its time (table, csv, md, html).",
        ),
    ] = True,
    skip_bad_hosts: Annotated[
        bool,
        typer.Option(
            "--skip-bad-hosts",
            help="Audit the hosts whose files can be read; name the others in the warnings "
            "(default: a missing or corrupt host file is an error).",
        ),
    ] = False,
    cross_check: Annotated[
        bool,
        typer.Option(
            "--cross-check",
            help="Also run xprof's converter (the [xprof] extra) on a private copy of the "
            "profile and compare its occurrences and self time with hlogap's, op by op "
            "(every event, as xprof counts them: implies --all-steps).",
        ),
    ] = False,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            metavar="ADDRESS",
            help="Read and reduce the hosts on a Dask cluster (the [dask] extra): a scheduler "
            "address (tcp://host:8786) or local[:N] for N local workers (docs/pods.md).",
        ),
    ] = None,
    all_steps: Annotated[
        bool,
        typer.Option(
            "--all-steps",
            help="Count every op event in the op rows, groups, totals, hosts and actions: the "
            "warm-up steps, compile-time autotuning and work outside every step too (default: "
            "the steady steps only, the rest in one line).",
        ),
    ] = False,
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
    from hlogap.pipeline import audit as run_audit
    from hlogap.render.base import choose_format, needs_timeline
    from hlogap.report.groups import DEFAULT_DEPTH

    chosen = choose_format("audit", fmt, output)  # a bad format fails before the profile is read
    if depth is not None and group_by != "scope":
        raise UsageError("--depth applies only to --group-by scope")
    target = file_target(output)
    if target is not None:
        from hlogap.files import check_output

        check_output(target)
    if plot is not None:
        from hlogap.render.plot import check_plot_target

        check_plot_target(plot)
    with Progress() as progress:
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
        report = run_audit(path, options, progress)
    from hlogap.source import refuse_to_overwrite

    read = [*report.files, *([chip] if chip and Path(chip).is_file() else [])]
    for written in (target, plot):
        if written is not None:
            refuse_to_overwrite(written, read)
    chart = None
    if plot is not None:  # drawn first: a chart that fails leaves no output half written
        from hlogap.render.plot import draw_plot

        chart = draw_plot(report, plot)
    write_document(
        report,
        "audit",
        OutputChoice(fmt=fmt, path=output, top=top, steps=steps, wide=wide, sub_rows=sub_rows),
    )
    if plot is not None and chart is not None:
        from hlogap.files import write_bytes

        write_bytes(plot, chart)
        wrote(plot)


@app.command(epilog=EXIT_CODES)
def demo(
    top: AuditTopOpt = 20,
    fmt: AuditFormat = None,
    chip: ChipOpt = None,
    wide: WideOpt = False,
    output: OutputOpt = None,
    sample: Annotated[
        str,
        typer.Option(
            "--sample",
            help="Which bundled profile: flaws (a CPU training run with deliberate flaws) or "
            "mlp (a toy MLP).",
            autocompletion=_complete_sample,
        ),
    ] = "flaws",
) -> None:
    """Audit a CPU profile bundled with hlogap (calibrates this CPU if needed), and say how to
    read the result.

    \b
    Examples:
      hlogap demo --top 5
      hlogap demo --sample mlp -o demo.html
    """
    import tempfile

    from hlogap.chips.calibrate import calibrated_chip, calibrated_path, chip_text, measure
    from hlogap.files import write_text
    from hlogap.options import AuditOptions
    from hlogap.pipeline import audit as run_audit
    from hlogap.render.base import choose_format, needs_timeline

    chosen = choose_format("audit", fmt, output)
    if sample not in DEMO_SAMPLES:
        raise UsageError(f"unknown sample '{sample}' (use one of: {', '.join(DEMO_SAMPLES)})")
    target = file_target(output)
    if target is not None:
        from hlogap.files import check_output

        check_output(target)
    logdir = Path(__file__).parent / "data" / DEMO_SAMPLES[sample]
    with tempfile.TemporaryDirectory(prefix="hlogap-demo-") as scratch:
        if chip is None and calibrated_chip() is None:
            print("hlogap: calibrating this CPU once (dots and copies)...", file=sys.stderr)
            result = measure()
            _warn_if_noisy(result)
            try:
                write_text(calibrated_path(), chip_text(result), make_parents=True)
            except HlogapError as exc:  # no writable cache (a read-only HOME): use it once
                print(f"hlogap: warning: {exc}; this calibration is not kept", file=sys.stderr)
                chip = str(Path(scratch) / "cpu.toml")
                write_text(Path(chip), chip_text(result))
        report = run_audit(logdir, AuditOptions(chip=chip, timeline=needs_timeline(chosen)))
    if target is not None:
        from hlogap.source import refuse_to_overwrite

        refuse_to_overwrite(target, report.files)
    write_document(report, "audit", OutputChoice(fmt=fmt, path=output, top=top, wide=wide))
    if chosen == "table" and target is None:
        write_stdout("".join(f"{line}\n" for line in fit_lines(_demo_lessons(report), wide)))


# The profiles `hlogap demo --sample` audits, each a logdir under hlogap/data.
DEMO_SAMPLES = {"flaws": "flaws", "mlp": "sample"}


def _complete_sample(incomplete: str) -> list[str]:
    return [name for name in DEMO_SAMPLES if name.startswith(incomplete)]


def _demo_lessons(report: AuditReport) -> list[str]:
    """What the demo ends with: how to read the table, the top action, the next command."""
    from hlogap.units import fmt_us

    lessons = [
        "",
        "how to read it: one row per op, the most time lost first; n = its occurrences "
        "(3x200: 200 runs in each, a loop body); gap = measured - bound, the bound being the "
        "roofline's lower limit on the op's time; eff = bound / measured (- where unmodeled: "
        "no bound); why = what bounds it",
    ]
    if report.actions:
        top = report.actions[0]
        lessons.append(
            f"top action: {top.change} (saves {fmt_us(top.saving_us)}, {top.frame}: {top.cause})"
        )
    lessons.append(
        "next: hlogap audit YOUR_LOGDIR --steps (or -o report.html for a page, "
        "-o trace.json.gz for Perfetto's timeline)"
    )
    return lessons


@app.command(epilog=EXIT_CODES)
def calibrate(
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write the chip file to FILE ('-': stdout); default: hlogap's cache "
            "(~/.cache/hlogap/cpu.toml), which audits of CPU profiles read.",
        ),
    ] = None,
) -> None:
    """Measure this CPU's matmul FLOP/s and memory bandwidth and save them as a chip file.

    \b
    Examples:
      hlogap calibrate
      hlogap calibrate -o - > mycpu.toml
    """
    from hlogap.chips.calibrate import calibrate as run_calibrate
    from hlogap.chips.calibrate import calibrated_path, chip_text, measure

    target = file_target(output)
    if target is not None:
        from hlogap.files import check_output
        from hlogap.source import refuse_to_overwrite

        check_output(target)  # before a minute of measuring, not after
        refuse_to_overwrite(target, [])
    if output is not None and target is None:  # -o -: the chip file on stdout
        result = measure()
        write_stdout(chip_text(result))
    else:
        chip, result = run_calibrate(output)
        peaks = ", ".join(f"{d} {f:.3g}" for d, f in chip.peak_flops.items())
        print(
            f"wrote {output or calibrated_path()}: FLOP/s {peaks}; memory {chip.hbm_bw:.3g} B/s",
            file=sys.stderr,
        )
    _warn_if_noisy(result)


def _warn_if_noisy(result: Calibration) -> None:
    if result.engine == "numpy":
        print(
            "hlogap: warning: JAX is not importable: dots measured with numpy's f32 matmul "
            "(not XLA, which runs the programs), and bf16/f16/int8 take the f32 figure",
            file=sys.stderr,
        )
    if result.noisy:
        print(
            f"hlogap: warning: calibration rounds disagree by {result.flops_spread:.0%} "
            f"(matmul) and {result.bandwidth_spread:.0%} (copy): this machine is busy; the "
            "best round is kept, rerun `hlogap calibrate` when it is idle",
            file=sys.stderr,
        )


@app.command(epilog=EXIT_CODES)
def bound(
    hlo: Annotated[
        str, typer.Argument(help="One HLO instruction with inline operand shapes; '-' reads stdin.")
    ],
    chip: Annotated[str, typer.Option("--chip", help="Chip name or chip TOML file.")],
    fmt: PlainFormat = None,
    devices: Annotated[
        int | None,
        typer.Option(
            "--devices",
            min=1,
            max=MAX_DEVICES,
            help="Devices in a collective whose replica_groups are empty.",
        ),
    ] = None,
    what_if: Annotated[
        list[str] | None,
        typer.Option(
            "--what-if", metavar="CHIP", help="Also bound it on another chip (repeatable)."
        ),
    ] = None,
) -> None:
    """Roofline of one HLO instruction on one device: FLOPs, bytes, times, what bounds it.

    \b
    Examples:
      hlogap bound '%m = bf16[4096,4096]{1,0} dot(bf16[4096,8192]{1,0} %a,
        bf16[8192,4096]{1,0} %b), lhs_contracting_dims={1},
        rhs_contracting_dims={0}' --chip h100-sxm
    """
    from hlogap.bounds.instruction import bound_instruction
    from hlogap.render.base import choose_format

    choose_format("bound", fmt, None)
    text = sys.stdin.read() if hlo == "-" else hlo
    result = bound_instruction(text, chip, num_devices=devices, what_if=what_if or ())
    write_document(result, "bound", OutputChoice(fmt=fmt))


@app.command(epilog=EXIT_CODES)
def memory(
    path: ProfileArg,
    chip: ChipOpt = None,
    top: TopOpt = 20,
    fmt: PlainFormat = None,
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
    from hlogap.pipeline import audit as run_audit
    from hlogap.render.base import MemoryView, choose_format

    choose_format("memory", fmt, output)
    target = file_target(output)
    if target is not None:
        from hlogap.files import check_output

        check_output(target)
    with Progress() as progress:
        options = AuditOptions(
            chip=chip, run=run, host=host, device=device, module=module, advice=False
        )
        report = run_audit(path, options, progress)
    if target is not None:
        from hlogap.source import refuse_to_overwrite

        refuse_to_overwrite(
            target, [*report.files, *([chip] if chip and Path(chip).is_file() else [])]
        )
    write_document(
        MemoryView(report), "memory", OutputChoice(fmt=fmt, path=output, top=top, wide=wide)
    )


@app.command(epilog=EXIT_CODES)
def chips(fmt: PlainFormat = None) -> None:
    """The chips hlogap knows: peaks, bandwidths, ridge points, and where each figure comes from.

    \b
    Examples:
      hlogap chips
      hlogap chips --format json | jq '.[] | select(.name=="tpu-v5p")'
    """
    from hlogap.chips import builtin_chips
    from hlogap.chips.calibrate import calibrated_chip
    from hlogap.render.base import ChipList

    cpu = calibrated_chip()  # this machine, when calibrated: `--chip cpu`
    write_document(
        ChipList([*builtin_chips(), *([cpu] if cpu else [])]), "chips", OutputChoice(fmt=fmt)
    )


@app.command(epilog=EXIT_CODES)
def check(
    path: Annotated[
        str,
        typer.Argument(
            metavar="PATH",
            help="Profile to gate (logdir, run directory, .xplane.pb, nsys-jax .zip, URL) or a "
            "saved JSON report.",
        ),
    ],
    baseline: Annotated[
        str,
        typer.Option(
            "--baseline", help="Saved `hlogap audit --format json` report (or a profile)."
        ),
    ],
    max_regression: Annotated[
        float | None,
        typer.Option(
            "--max-regression",
            metavar="PCT",
            help="Fail if the ops' total measured time (every occurrence, warm-up included; "
            "scaled to the baseline's run length) grows more than PCT % (default 5).",
        ),
    ] = None,
    max_gap_regression: Annotated[
        float | None,
        typer.Option(
            "--max-gap-regression",
            metavar="PCT",
            help="Fail if the total gap grows more than PCT % of the baseline's measured time "
            "(default 5).",
        ),
    ] = None,
    max_op_regression: Annotated[
        float | None,
        typer.Option(
            "--max-op-regression",
            metavar="PCT",
            help="Fail if a non-tiny op's time per occurrence grows more than PCT % (default 20).",
        ),
    ] = None,
    min_efficiency: Annotated[
        float | None,
        typer.Option(
            "--min-efficiency",
            metavar="FRAC",
            help="Fail if the overall efficiency (bound / measured) is below FRAC.",
        ),
    ] = None,
    min_op_share: Annotated[
        float | None,
        typer.Option(
            "--min-op-share",
            metavar="PCT",
            help="Ops under PCT % of the total time are not gated one by one (default 1).",
        ),
    ] = None,
    max_step_regression: Annotated[
        float | None,
        typer.Option(
            "--max-step-regression",
            metavar="PCT",
            help="Fail if the median step time grows more than PCT % (off by default).",
        ),
    ] = None,
    max_idle_regression: Annotated[
        float | None,
        typer.Option(
            "--max-idle-regression",
            metavar="PT",
            help="Fail if the devices' idle share of step time grows more than PT points.",
        ),
    ] = None,
    max_peak_hbm: Annotated[
        str | None,
        typer.Option(
            "--max-peak-hbm",
            metavar="BYTES|PCT%",
            help="Fail if the static memory peak exceeds BYTES (16GB, 15.5GiB) or grows more "
            "than PCT% over the baseline's (docs/memory.md).",
        ),
    ] = None,
    run_noise: Annotated[
        float | None,
        typer.Option(
            "--run-noise",
            metavar="PCT",
            help="Run-to-run noise no step of one run shows, added to every interval (default "
            "25 for CPU profiles, 5 for GPU and TPU; docs/ci.md).",
        ),
    ] = None,
    min_hfu: Annotated[
        float | None,
        typer.Option(
            "--min-hfu",
            metavar="FRAC",
            help="Fail if PATH's HFU (summary.hfu: FLOP/s over the chip's peak) is below FRAC, "
            "whatever the baseline says.",
        ),
    ] = None,
    update_baseline: Annotated[
        str | None,
        typer.Option(
            "--update-baseline",
            metavar="PATH",
            help="After the verdict, write PATH's report to this file as the new baseline, its "
            "history the old baseline's plus this change (needs --reason).",
        ),
    ] = None,
    reason: Annotated[
        str | None,
        typer.Option(
            "--reason", metavar="TEXT", help="Why the new baseline (with --update-baseline)."
        ),
    ] = None,
    chip: ChipOpt = None,
    run: RunOpt = None,
    host: HostOpt = None,
    device: DeviceOpt = None,
    module: ModuleOpt = None,
    fmt: CheckFormat = None,
) -> None:
    """CI gate: compare PATH with a baseline report; exit 0 within the thresholds, 1 on a
    regression (the whole plausible range past a limit), 3 when inconclusive (within the
    run-to-run noise: one line on stderr) or when the profile or the baseline is missing,
    corrupt or misconfigured (all exit codes below).

    \b
    Examples:
      hlogap audit /tmp/tb_main --format json -o baseline.json
      hlogap check /tmp/tb_pr --baseline baseline.json --max-regression 3
    """
    import contextlib

    from hlogap.errors import EXIT_REGRESSION
    from hlogap.render.base import choose_format
    from hlogap.report.compare import compare
    from hlogap.report.gate import (
        EXIT_INCONCLUSIVE,
        parse_peak_limit,
        resolve_thresholds,
        run_check,
    )
    from hlogap.report.gate.history import check_reason, last_accepted, read_history

    choose_format("check", fmt, None)
    check_reason(update_baseline, reason)
    new_baseline = None if update_baseline is None else Path(update_baseline)
    if new_baseline is not None:
        from hlogap.files import check_output
        from hlogap.source import refuse_to_overwrite

        check_output(new_baseline)
        refuse_to_overwrite(new_baseline, [baseline, path])  # before a minute of reading
    peak_bytes, peak_growth = (
        parse_peak_limit(max_peak_hbm) if max_peak_hbm is not None else (None, None)
    )
    thresholds = resolve_thresholds(
        {
            "max_regression": max_regression,
            "max_gap_regression": max_gap_regression,
            "max_op_regression": max_op_regression,
            "min_efficiency": min_efficiency,
            "min_op_share": min_op_share,
            "max_step_regression": max_step_regression,
            "max_idle_regression": max_idle_regression,
            "max_peak_bytes": peak_bytes,
            "max_peak_regression": peak_growth,
            "min_hfu": min_hfu,
            "run_noise": run_noise,
        },
        Path.cwd(),
    )
    try:
        base, new = _load_pair(
            (baseline, "baseline"), (path, "profile"), chip, run, host, device, module
        )
        read = [*base.files, *new.files, baseline, path]
        if new_baseline is not None:
            refuse_to_overwrite(new_baseline, read)
        history = read_history(base)
        result = run_check(compare(base, new), thresholds)
    except HlogapError as exc:
        if exc.exit_code == EXIT_INPUT:  # CI's summary says why there is no verdict too
            with contextlib.suppress(HlogapError):  # the input error is what to say
                _step_summary(f"error: {exc}", [baseline, path])
        raise
    if history:
        result.notes.append(last_accepted(history))
    write_document(result, "check", OutputChoice(fmt=fmt))
    _step_summary(result, read)
    if new_baseline is not None:
        from hlogap.files import write_bytes
        from hlogap.render.json import baseline_bytes
        from hlogap.report.gate.history import entry

        assert reason is not None  # check_reason
        record = entry(reason, result.outcome, result.change)
        write_bytes(new_baseline, baseline_bytes(new, [*history, record]))
        wrote(new_baseline)
    if result.outcome == "inconclusive":
        print(escaped(result.undecided_line()), file=sys.stderr)
        raise typer.Exit(EXIT_INCONCLUSIVE)
    if result.outcome == "fail":
        raise typer.Exit(EXIT_REGRESSION)


@app.command(epilog=EXIT_CODES)
def diff(
    base: Annotated[
        str, typer.Argument(metavar="BASE", help="Baseline: a profile (or URL) or a saved report.")
    ],
    new: Annotated[
        str, typer.Argument(metavar="NEW", help="New: a profile (or URL) or a saved JSON report.")
    ],
    chip: ChipOpt = None,
    top: TopOpt = 20,
    fmt: DiffFormat = None,
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
    base_report, new_report = _load_pair(
        (base, "BASE"), (new, "NEW"), chip, run, host, device, module
    )
    write_document(compare(base_report, new_report), "diff", OutputChoice(fmt=fmt, top=top))


def main() -> None:
    """Console entry point: one line on stderr and a documented exit code for every failure;
    `--debug` adds the traceback and keeps the exit code."""
    import signal

    debug = "--debug" in sys.argv[1:]
    if debug:
        sys.argv.remove("--debug")
    else:
        import logging

        # Storage backends (gcsfs, s3fs) log each failed attempt with its traceback on stderr
        # through Python's last-resort handler; hlogap's one error line says what failed.
        logging.getLogger().addHandler(logging.NullHandler())
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        code = app(standalone_mode=False)
        if code == 130:  # Typer turns KeyboardInterrupt into this return value
            raise KeyboardInterrupt
    except Exit as exc:
        code = exc.exit_code
    except TyperException as exc:  # Typer's usage errors (unknown option, missing argument)
        error_line(f"usage error: {exc.format_message()}")
        code = getattr(exc, "exit_code", EXIT_USAGE)
    except (Abort, KeyboardInterrupt):
        # The Ctrl-C that ended a reader first may still be pending here: it must not cut the
        # cleanup short (Python would then die of the signal, not exit 130).
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        stop_children()
        error_line("interrupted")
        exit_now(130)
    except Terminated:
        stop_children()
        error_line("terminated")
        exit_now(143)
    except HlogapError as exc:
        print_traceback(debug)
        error_line(f"error: {exc}")
        code = exc.exit_code
    except MemoryError:
        error_line("error: out of memory reading the profile")
        code = EXIT_INPUT
    except Exception as exc:  # a bug: one line, traceback only on request
        print_traceback(debug)
        error_line(
            f"internal error ({type(exc).__name__}: {exc}); please report it "
            "at the hlogap issue tracker, rerun with --debug for the traceback"
        )
        code = EXIT_INTERNAL
    sys.exit(code if isinstance(code, int) else 0)


def run() -> None:
    """The `hlogap` command's process: `main`, then an exit that skips the interpreter's
    teardown where an error ended a run that loaded pyarrow. After an error raised while
    pyarrow read (a corrupt nsys-jax parquet) that teardown of its C++ thread pool aborted the
    process after the one line ("terminate called without an active exception", exit 134: 4
    of 6 runs). What held files or readers was closed on the way here. (`main` itself raises
    SystemExit: tests run it in their own process.)"""
    try:
        main()
    except SystemExit as exc:
        if exc.code and isinstance(exc.code, int) and "pyarrow" in sys.modules:
            exit_now(exc.code)
        raise
