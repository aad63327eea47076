"""`hlogap check PATH --baseline REPORT`: the CI gate."""

from __future__ import annotations

from hlogap.cli.args import (
    BaselineOpt,
    CheckPathArg,
    ChipOpt,
    DeviceOpt,
    FormatOpt,
    HostOpt,
    MaxGapRegressionOpt,
    MaxIdleRegressionOpt,
    MaxOpRegressionOpt,
    MaxPeakHbmOpt,
    MaxRegressionOpt,
    MaxStepRegressionOpt,
    MinEfficiencyOpt,
    MinHfuOpt,
    MinOpShareOpt,
    ModuleOpt,
    ReasonOpt,
    RunNoiseOpt,
    RunOpt,
    UpdateBaselineOpt,
)


def check(
    path: CheckPathArg,
    baseline: BaselineOpt,
    max_regression: MaxRegressionOpt = None,
    max_gap_regression: MaxGapRegressionOpt = None,
    max_op_regression: MaxOpRegressionOpt = None,
    min_efficiency: MinEfficiencyOpt = None,
    min_op_share: MinOpShareOpt = None,
    max_step_regression: MaxStepRegressionOpt = None,
    max_idle_regression: MaxIdleRegressionOpt = None,
    max_peak_hbm: MaxPeakHbmOpt = None,
    run_noise: RunNoiseOpt = None,
    min_hfu: MinHfuOpt = None,
    update_baseline: UpdateBaselineOpt = None,
    reason: ReasonOpt = None,
    chip: ChipOpt = None,
    run: RunOpt = None,
    host: HostOpt = None,
    device: DeviceOpt = None,
    module: ModuleOpt = None,
    fmt: FormatOpt = None,
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
    from hlogap.cli.checking import CheckOptions, gate
    from hlogap.cli.comparison import Selection
    from hlogap.cli.output import OutputChoice
    from hlogap.render.base import choose_format

    choose_format("check", fmt, None)
    options = CheckOptions(
        baseline=baseline,
        selection=Selection(chip, run, host, device, module),
        max_regression=max_regression,
        max_gap_regression=max_gap_regression,
        max_op_regression=max_op_regression,
        min_efficiency=min_efficiency,
        min_op_share=min_op_share,
        max_step_regression=max_step_regression,
        max_idle_regression=max_idle_regression,
        run_noise=run_noise,
        min_hfu=min_hfu,
        max_peak_hbm=max_peak_hbm,
        update_baseline=update_baseline,
        reason=reason,
    )
    gate(path, options, OutputChoice(fmt))
