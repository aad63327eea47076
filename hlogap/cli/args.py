"""The command line's arguments: every option and argument the commands take, with its help and
its shell completion, declared once here (as ruff's `args.rs` is apart from its commands). The
commands (`hlogap.cli.commands`) take them and call the library.

`--format`'s values, its help and its completion come from the renderer registry
(`hlogap.render.base.formats`) for the document kind the command writes (`writes`): a new
renderer module is listed without an edit here. The registry imports every renderer (0.4 s), so
it is asked only when a command's help is shown or `--format` is completed: `hlogap --help` and
the parsing of every command stay instant.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from typer.core import TyperCommand, TyperOption

from hlogap.hlo import MAX_DEVICES

if TYPE_CHECKING:
    # Typer 0.28 vendors Click as typer._click: its Context and HelpFormatter are the ones
    # TyperCommand.format_help is declared with.
    from typer._click import Context, HelpFormatter

    from hlogap.render.base import DocumentKind

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

# The profiles `hlogap demo --sample` audits, each a logdir under hlogap/data.
DEMO_SAMPLES = {"flaws": "flaws", "mlp": "sample"}


class DocumentCommand(TyperCommand):
    """A command that renders one kind of document (`writes`): its `--format` help names the
    formats the renderer registry has for that kind, asked when the help is shown."""

    document: DocumentKind

    def format_help(self, ctx: Context, formatter: HelpFormatter) -> None:
        takes_output = any(p.name == "output" for p in self.params)
        for param in self.params:
            if isinstance(param, TyperOption) and param.name == "fmt":
                param.help = format_help(self.document, takes_output)
        super().format_help(ctx, formatter)


def writes(kind: DocumentKind) -> type[TyperCommand]:
    """The command class of a command whose output is a `kind` document."""

    class Writes(DocumentCommand):
        document = kind

    return Writes


def format_help(kind: DocumentKind, takes_output: bool) -> str:
    """`--format`'s help: the registry's formats for `kind`, and the default (with `-o`, the
    format its extension names: `render.base.choose_format`)."""
    from hlogap.render.base import formats

    default = "from --output's extension, else table" if takes_output else "table"
    return f"Output format: {', '.join(formats(kind))}; default: {default}."


def _complete_format(ctx: typer.Context, incomplete: str) -> list[str]:
    """--format's values for shell completion: the formats of the command's document kind."""
    from hlogap.render.base import formats

    kind: DocumentKind | None = getattr(ctx.command, "document", None)
    return [] if kind is None else [f for f in formats(kind) if f.startswith(incomplete)]


def _complete_chip(incomplete: str) -> list[str]:
    """--chip's values for shell completion: the chips hlogap knows, by name."""
    from hlogap.chips import builtin_chips

    return [c.name for c in builtin_chips() if c.name.startswith(incomplete)]


def _complete_sort(incomplete: str) -> list[str]:
    from hlogap.report.model import SORT_KEYS

    return [k for k in SORT_KEYS if k.startswith(incomplete)]


def _complete_group_by(incomplete: str) -> list[str]:
    from hlogap.rows.groups import GROUP_KEYS

    return [k for k in GROUP_KEYS if k.startswith(incomplete)]


def _complete_sample(incomplete: str) -> list[str]:
    return [name for name in DEMO_SAMPLES if name.startswith(incomplete)]


# Options several commands take.
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


# The help is the registry's list, filled in by `DocumentCommand` when the help is shown.
FormatOpt = Annotated[
    str | None,
    typer.Option("--format", "-f", help="Output format.", autocompletion=_complete_format),
]
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

# audit: what to read, how to rank and roll up, what else to draw.
SortOpt = Annotated[
    str,
    typer.Option(
        help="gap, measured, idle (device idle before the op; largest first) or "
        "efficiency (lowest first).",
        autocompletion=_complete_sort,
    ),
]
HloDumpOpt = Annotated[
    Path | None,
    typer.Option("--hlo-dump", help="Directory of XLA HLO text dumps (--xla_dump_to)."),
]
JobsOpt = Annotated[int | None, typer.Option(help="Hosts read in parallel; default: cores.")]
PlotOpt = Annotated[
    Path | None,
    typer.Option("--plot", help="Also draw the roofline chart to FILE (.svg, .png, .html)."),
]
GroupByOpt = Annotated[
    str | None,
    typer.Option(
        "--group-by",
        help="Roll ops up by scope (the op path cut to --depth components), category, "
        "source, module or axis (collectives by the mesh axes they run over).",
        autocompletion=_complete_group_by,
    ),
]
DepthOpt = Annotated[
    int | None,
    typer.Option(
        "--depth",
        min=1,
        help="Components of the op path a scope keeps (default 3); only with --group-by scope.",
    ),
]
StepsOpt = Annotated[
    bool,
    typer.Option("--steps", help="Also print the steps: a summary, then --top rows."),
]
ModelFlopsOpt = Annotated[
    float | None,
    typer.Option(
        "--model-flops",
        metavar="N",
        help="The model's FLOPs per step, whole program (e.g. 6 x params x tokens): gives MFU.",
    ),
]
WhatIfOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--what-if",
        metavar="CHIP",
        help="Also bound the ops on another chip (name or .toml; repeatable): the ceiling "
        "on the speedup there and the ops that would cap it.",
    ),
]
SubRowsOpt = Annotated[
    bool,
    typer.Option(
        "--sub-rows/--no-sub-rows",
        help="Under a command buffer (CUDA graph) call, its ops with their estimated "
        "share of its time (table, csv, md, html).",
    ),
]
SkipBadHostsOpt = Annotated[
    bool,
    typer.Option(
        "--skip-bad-hosts",
        help="Audit the hosts whose files can be read; name the others in the warnings "
        "(default: a missing or corrupt host file is an error).",
    ),
]
CrossCheckOpt = Annotated[
    bool,
    typer.Option(
        "--cross-check",
        help="Also run xprof's converter (the [xprof] extra) on a private copy of the "
        "profile and compare its occurrences and self time with hlogap's, op by op "
        "(every event, as xprof counts them: implies --all-steps).",
    ),
]
ClusterOpt = Annotated[
    str | None,
    typer.Option(
        "--cluster",
        metavar="ADDRESS",
        help="Read and reduce the hosts on a Dask cluster (the [dask] extra): a scheduler "
        "address (tcp://host:8786) or local[:N] for N local workers (docs/pods.md).",
    ),
]
AllStepsOpt = Annotated[
    bool,
    typer.Option(
        "--all-steps",
        help="Count every op event in the op rows, groups, totals, hosts and actions: the "
        "warm-up steps, compile-time autotuning and work outside every step too (default: "
        "the steady steps only, the rest in one line).",
    ),
]
# demo
SampleOpt = Annotated[
    str,
    typer.Option(
        "--sample",
        help="Which bundled profile: flaws (a CPU training run with deliberate flaws) or "
        "mlp (a toy MLP).",
        autocompletion=_complete_sample,
    ),
]
# calibrate
CalibrateOutputOpt = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        help="Write the chip file to FILE ('-': stdout); default: hlogap's cache "
        "(~/.cache/hlogap/cpu.toml), which audits of CPU profiles read.",
    ),
]
# bound
HloArg = Annotated[
    str, typer.Argument(help="One HLO instruction with inline operand shapes; '-' reads stdin.")
]
BoundChipOpt = Annotated[str, typer.Option("--chip", help="Chip name or chip TOML file.")]
DevicesOpt = Annotated[
    int | None,
    typer.Option(
        "--devices",
        min=1,
        max=MAX_DEVICES,
        help="Devices in a collective whose replica_groups are empty.",
    ),
]
BoundWhatIfOpt = Annotated[
    list[str] | None,
    typer.Option("--what-if", metavar="CHIP", help="Also bound it on another chip (repeatable)."),
]
# check: the thresholds (None: hlogap.toml's, else the default; report.gate) and the baseline.
CheckPathArg = Annotated[
    str,
    typer.Argument(
        metavar="PATH",
        help="Profile to gate (logdir, run directory, .xplane.pb, nsys-jax .zip, URL) or a "
        "saved JSON report.",
    ),
]
BaselineOpt = Annotated[
    str,
    typer.Option("--baseline", help="Saved `hlogap audit --format json` report (or a profile)."),
]
MaxRegressionOpt = Annotated[
    float | None,
    typer.Option(
        "--max-regression",
        metavar="PCT",
        help="Fail if the ops' total measured time (every occurrence, warm-up included; "
        "scaled to the baseline's run length) grows more than PCT % (default 5).",
    ),
]
MaxGapRegressionOpt = Annotated[
    float | None,
    typer.Option(
        "--max-gap-regression",
        metavar="PCT",
        help="Fail if the total gap grows more than PCT % of the baseline's measured time "
        "(default 5).",
    ),
]
MaxOpRegressionOpt = Annotated[
    float | None,
    typer.Option(
        "--max-op-regression",
        metavar="PCT",
        help="Fail if a non-tiny op's time per occurrence grows more than PCT % (default 20).",
    ),
]
MinEfficiencyOpt = Annotated[
    float | None,
    typer.Option(
        "--min-efficiency",
        metavar="FRAC",
        help="Fail if the overall efficiency (bound / measured) is below FRAC.",
    ),
]
MinOpShareOpt = Annotated[
    float | None,
    typer.Option(
        "--min-op-share",
        metavar="PCT",
        help="Ops under PCT % of the total time are not gated one by one (default 1).",
    ),
]
MaxStepRegressionOpt = Annotated[
    float | None,
    typer.Option(
        "--max-step-regression",
        metavar="PCT",
        help="Fail if the median step time grows more than PCT % (off by default).",
    ),
]
MaxIdleRegressionOpt = Annotated[
    float | None,
    typer.Option(
        "--max-idle-regression",
        metavar="PT",
        help="Fail if the devices' idle share of step time grows more than PT points.",
    ),
]
MaxPeakHbmOpt = Annotated[
    str | None,
    typer.Option(
        "--max-peak-hbm",
        metavar="BYTES|PCT%",
        help="Fail if the static memory peak exceeds BYTES (16GB, 15.5GiB) or grows more "
        "than PCT% over the baseline's (docs/memory.md).",
    ),
]
RunNoiseOpt = Annotated[
    float | None,
    typer.Option(
        "--run-noise",
        metavar="PCT",
        help="Run-to-run noise no step of one run shows, added to every interval (default "
        "25 for CPU profiles, 5 for GPU and TPU; docs/ci.md).",
    ),
]
MinHfuOpt = Annotated[
    float | None,
    typer.Option(
        "--min-hfu",
        metavar="FRAC",
        help="Fail if PATH's HFU (summary.hfu: FLOP/s over the chip's peak) is below FRAC, "
        "whatever the baseline says.",
    ),
]
UpdateBaselineOpt = Annotated[
    str | None,
    typer.Option(
        "--update-baseline",
        metavar="PATH",
        help="After the verdict, write PATH's report to this file as the new baseline, its "
        "history the old baseline's plus this change (needs --reason).",
    ),
]
ReasonOpt = Annotated[
    str | None,
    typer.Option("--reason", metavar="TEXT", help="Why the new baseline (with --update-baseline)."),
]

# diff
BaseArg = Annotated[
    str, typer.Argument(metavar="BASE", help="Baseline: a profile (or URL) or a saved report.")
]
NewArg = Annotated[
    str, typer.Argument(metavar="NEW", help="New: a profile (or URL) or a saved JSON report.")
]
