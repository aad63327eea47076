"""`hlogap check`, the CI gate: exit codes, the verdict, thresholds and where they come from.

The profile checked is the real CPU fixture `mlp`; baselines are its own audit report, as is or
edited the way a faster or longer earlier run would have written it.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hlogap import audit
from hlogap.errors import UsageError
from hlogap.options import AuditOptions
from hlogap.report.compare import compare
from hlogap.report.gate import Thresholds, resolve_thresholds, run_check
from hlogap.report.model import AuditReport, OpRow
from tests.conftest import FIXTURES, ROOT

MLP = FIXTURES / "mlp"
MLP_OPS = {"ynn_fusion", "ynn_fusion.1", "multiply_multiply_fusion", "broadcast_add_fusion"}


def _gated(report: dict) -> set[str]:
    """The ops `check` gates one by one by default: at least 1% of the time (docs/ci.md)."""
    total = report["summary"]["measured_us"]
    return {o["name"] for o in report["ops"] if o["measured_us"] >= 0.01 * total}


@pytest.fixture
def mlp_report(cpu_chip_file: Path) -> dict[str, Any]:
    return audit(MLP, AuditOptions(chip=str(cpu_chip_file))).to_dict(0)


def _save(tmp_path: Path, report: dict[str, Any], name: str = "baseline.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(report))
    return path


def _scaled(report: dict[str, Any], measured: float = 1.0, occurrences: int = 1) -> dict:
    """The report of a run whose ops took `measured` times as long (per occurrence) and which ran
    `occurrences` times as many steps."""
    out = copy.deepcopy(report)
    for op in out["ops"]:
        op["measured_us"] *= measured * occurrences
        op["median_us"] *= measured  # one occurrence's time
        op["bound_us"] *= occurrences
        op["occurrences"] *= occurrences
        op["gap_us"] = op["measured_us"] - op["bound_us"]
    summary = out["summary"]
    summary["measured_us"] = sum(o["measured_us"] for o in out["ops"])
    summary["bound_us"] = sum(o["bound_us"] for o in out["ops"])
    return out


def _check(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    full_env.pop("GITHUB_STEP_SUMMARY", None)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "hlogap", "check", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=full_env,
    )


def _gate(
    baseline: Path, chip: Path, *extra: str, cwd: Path, **kw: Any
) -> subprocess.CompletedProcess[str]:
    return _check(str(MLP), "--baseline", str(baseline), "--chip", str(chip), *extra, cwd=cwd, **kw)


# ------------------------------------------------------------------------ the done-when criteria


def test_profile_passes_against_its_own_report(
    mlp_report: dict, cpu_chip_file: Path, tmp_path: Path
) -> None:
    out = _gate(_save(tmp_path, mlp_report), cpu_chip_file, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("hlogap check: PASS: measured +0.0%")
    assert out.stderr == ""


def test_faster_baseline_fails_and_names_the_ops(
    mlp_report: dict, cpu_chip_file: Path, tmp_path: Path
) -> None:
    baseline = _save(tmp_path, _scaled(mlp_report, measured=0.5))
    out = _gate(baseline, cpu_chip_file, cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    first, *rest = out.stdout.splitlines()
    gated = _gated(mlp_report)
    assert gated <= MLP_OPS and len(gated) >= 3
    assert first == (
        "hlogap check: FAIL: measured +100.0% (limit +5%); gap +100.0% (limit +5%); "
        f"{len(gated)} ops over +20%"
    )
    body = "\n".join(rest)
    for name in gated:
        assert f" {name} " in body
    assert "+100.0%" in body
    assert len(out.stdout.splitlines()) <= 24  # one screen


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "baseline not found"),
        ("{truncated", "is not JSON"),
        ('{"schema": "hlogap.audit/9", "ops": []}', "is not an hlogap audit report"),
        ('{"schema": "hlogap.audit/1", "ops": [{}], "summary": {}}', "corrupt"),
    ],
)
def test_missing_or_corrupt_baseline_exits_3(
    content: str | None, message: str, cpu_chip_file: Path, tmp_path: Path
) -> None:
    baseline = tmp_path / "baseline.json"
    if content is not None:
        baseline.write_text(content)
    out = _gate(baseline, cpu_chip_file, cwd=tmp_path)
    assert out.returncode == 3
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1 and message in out.stderr


def test_baseline_that_is_not_utf8_exits_3(cpu_chip_file: Path, tmp_path: Path) -> None:
    baseline = tmp_path / "baseline.json"
    baseline.write_bytes(b"\xff\xfe\x00garbage")
    out = _gate(baseline, cpu_chip_file, cwd=tmp_path)
    assert out.returncode == 3 and "cannot read baseline" in out.stderr


# ------------------------------------------------------------------------------ noise handling


def test_longer_baseline_run_is_scaled_per_step(
    mlp_report: dict, cpu_chip_file: Path, tmp_path: Path
) -> None:
    # The baseline profiled twice the steps at the same speed: no regression. Without steps in
    # the baseline (a version-1 report) the totals are scaled by the run-length ratio.
    longer = _scaled(mlp_report, occurrences=2)
    longer["schema"] = "hlogap.audit/1"
    del longer["steps"]
    out = _gate(_save(tmp_path, longer), cpu_chip_file, cwd=tmp_path)
    assert out.returncode == 0, out.stdout
    assert "x0.5 run length" in out.stdout
    assert "no steps in BASE: no noise estimate, the fixed limits decide" in out.stdout


def test_small_slowdowns_pass_within_the_thresholds(
    mlp_report: dict, cpu_chip_file: Path, tmp_path: Path
) -> None:
    baseline = _save(tmp_path, _scaled(mlp_report, measured=1 / 1.04))  # NEW is 4% slower
    assert _gate(baseline, cpu_chip_file, cwd=tmp_path).returncode == 0
    out = _gate(baseline, cpu_chip_file, "--max-regression", "3", cwd=tmp_path)
    assert out.returncode == 1
    assert out.stdout.startswith("hlogap check: FAIL: measured +4.0% (limit +3%)\n")


def _side(ops: list[OpRow]) -> AuditReport:
    return AuditReport(path="x", chip=None, ops=ops, kind="report")


def _op(module: str, name: str, opcode: str, n: int, us: float, bound: float, fp: str) -> OpRow:
    return OpRow(
        module=module,
        name=name,
        opcode=opcode,
        occurrences=n,
        measured_us=us,
        bound_us=bound,
        fingerprint=fp,
    )


def test_tiny_ops_are_not_gated_one_by_one() -> None:
    big = _op("m", "big", "fusion", 10, 10_000.0, 5_000.0, "B")
    small = _op("m", "small", "fusion", 10, 50.0, 10.0, "S")  # 0.5% of the time
    short = _op("m", "short", "copy", 1000, 300.0, 10.0, "C")  # 0.3 us per occurrence
    slow_small = _op("m", "small", "fusion", 10, 99.0, 10.0, "S")
    slow_short = _op("m", "short", "copy", 1000, 900.0, 10.0, "C")
    diff = compare(_side([big, small, short]), _side([big, slow_small, slow_short]))
    result = run_check(diff, Thresholds(max_regression=50, max_gap_regression=50))
    assert result.passed, result.verdict()
    assert [r.op.name for r in result.gated] == ["big"]
    strict = run_check(diff, Thresholds(max_regression=50, max_gap_regression=50, min_op_share=0))
    assert [r.op.name for r in strict.regressed] == ["small"]  # `short` stays under 1 us


def test_min_efficiency(mlp_report: dict, cpu_chip_file: Path, tmp_path: Path) -> None:
    baseline = _save(tmp_path, mlp_report)
    efficiency = mlp_report["summary"]["efficiency"]
    ok = _gate(baseline, cpu_chip_file, "--min-efficiency", f"{efficiency - 0.01}", cwd=tmp_path)
    assert ok.returncode == 0
    low = _gate(baseline, cpu_chip_file, "--min-efficiency", f"{efficiency + 0.01}", cwd=tmp_path)
    assert low.returncode == 1
    assert low.stdout.startswith(f"hlogap check: FAIL: efficiency {efficiency:.2f}")


# ----------------------------------------------------------------------- outputs and CI summary


def test_json_output_is_pure_json(mlp_report: dict, cpu_chip_file: Path, tmp_path: Path) -> None:
    baseline = _save(tmp_path, _scaled(mlp_report, measured=0.5))
    out = _gate(baseline, cpu_chip_file, "--format", "json", cwd=tmp_path)
    assert out.returncode == 1
    doc = json.loads(out.stdout)
    assert doc["schema"] == "hlogap.check/1"
    assert doc["verdict"] == "fail"
    assert {c["name"]: c["failed"] for c in doc["checks"]} == {
        "measured": True,
        "gap": True,
        "work": False,  # the bound per step did not move
        "ops": True,
    }
    # One run on both sides (its own report, edited): no noise, each interval the change itself.
    for c in doc["checks"]:
        assert c["verdict"] == ("fail" if c["failed"] else "pass")
        if c["name"] in ("measured", "gap", "work"):
            assert c["interval"] == [c["value"], c["value"]]
    assert {r["name"] for r in doc["regressed_ops"]} == _gated(mlp_report)
    assert doc["diff"]["schema"] == "hlogap.diff/1"
    assert doc["thresholds"]["max_regression"] == 5.0


def test_step_summary_is_appended(mlp_report: dict, cpu_chip_file: Path, tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    baseline = _save(tmp_path, mlp_report)
    env = {"GITHUB_STEP_SUMMARY": str(summary)}
    assert _gate(baseline, cpu_chip_file, cwd=tmp_path, env=env).returncode == 0
    bad = _save(tmp_path, _scaled(mlp_report, measured=0.5), "fast.json")
    out = _gate(bad, cpu_chip_file, "--format", "json", cwd=tmp_path, env=env)
    assert out.returncode == 1
    json.loads(out.stdout)  # the summary goes to the file, never to stdout
    text = summary.read_text()
    assert text.startswith("earlier step\n### ✅ hlogap check: PASS")
    assert "### ❌ hlogap check: FAIL" in text
    assert "| ops | **FAIL**" in text and "`ynn_fusion.1`" in text


def test_unwritable_step_summary_warns_and_keeps_the_verdict(
    mlp_report: dict, cpu_chip_file: Path, tmp_path: Path
) -> None:
    env = {"GITHUB_STEP_SUMMARY": str(tmp_path / "no" / "such" / "dir.md")}
    out = _gate(_save(tmp_path, mlp_report), cpu_chip_file, cwd=tmp_path, env=env)
    assert out.returncode == 0
    assert "warning: cannot write the step summary" in out.stderr


# ------------------------------------------------------------------- configuration precedence


def test_config_files_and_flags(mlp_report: dict, cpu_chip_file: Path, tmp_path: Path) -> None:
    baseline = _save(tmp_path, _scaled(mlp_report, measured=0.5))  # NEW is +100%
    loose = "max_regression = 150\nmax_gap_regression = 150\nmax_op_regression = 150\n"
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n\n[tool.hlogap]\n" + loose)
    out = _gate(baseline, cpu_chip_file, cwd=tmp_path)
    assert out.returncode == 0, out.stdout
    assert f"(config: {tmp_path / 'pyproject.toml'})" in out.stdout
    # A flag wins over the file.
    out = _gate(baseline, cpu_chip_file, "--max-regression", "50", cwd=tmp_path)
    assert out.returncode == 1
    assert out.stdout.startswith("hlogap check: FAIL: measured +100.0% (limit +50%)\n")
    # hlogap.toml wins over pyproject.toml, which is then not read at all.
    (tmp_path / "hlogap.toml").write_text("max_op_regression = 30\n")
    out = _gate(baseline, cpu_chip_file, cwd=tmp_path)
    assert out.returncode == 1
    assert "measured +100.0% (limit +5%)" in out.stdout.splitlines()[0]
    assert f"{len(_gated(mlp_report))} ops over +30%" in out.stdout.splitlines()[0]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("hlogap.toml", "max_regresion = 5\n", "unknown hlogap setting max_regresion"),
        ("hlogap.toml", "max_regression = '5%'\n", "must be a number"),
        ("hlogap.toml", "min_efficiency = 1.5\n", "fraction between 0 and 1"),
        ("hlogap.toml", "max_regression = [\n", "not valid TOML"),
        ("pyproject.toml", "[tool]\nhlogap = 3\n", "is not a table"),
    ],
)
def test_bad_config_is_a_usage_error(tmp_path: Path, name: str, content: str, message: str) -> None:
    (tmp_path / name).write_text(content)
    with pytest.raises(UsageError, match=message):
        resolve_thresholds({}, tmp_path)


def test_bad_flag_exits_2(mlp_report: dict, cpu_chip_file: Path, tmp_path: Path) -> None:
    out = _gate(_save(tmp_path, mlp_report), cpu_chip_file, "--max-regression", "-1", cwd=tmp_path)
    assert out.returncode == 2 and "--max-regression must be a finite number >= 0" in out.stderr


def test_defaults_without_config(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    t = resolve_thresholds({"max_regression": None, "min_efficiency": 0.5}, tmp_path)
    assert t == Thresholds(min_efficiency=0.5)
    assert t.config is None


@pytest.mark.parametrize("with_medians", [True, False])
def test_a_straggler_does_not_fail_the_per_op_gate_when_medians_are_there(
    mlp_report: dict, tmp_path: Path, with_medians: bool
) -> None:
    """One slow occurrence (a straggler) inflates an op's mean by 50%, not its median."""
    new = copy.deepcopy(mlp_report)
    top = max(new["ops"], key=lambda o: o["measured_us"])
    top["measured_us"] *= 1.5
    top["gap_us"] = top["measured_us"] - top["bound_us"]
    new["summary"]["measured_us"] = sum(o["measured_us"] for o in new["ops"])
    base = copy.deepcopy(mlp_report)
    if not with_medians:  # reports of an hlogap without medians: means are compared
        for report in (base, new):
            for op in report["ops"]:
                op.pop("median_us")
    loose = ("--max-regression", "100", "--max-gap-regression", "100")
    out = _check(
        str(_save(tmp_path, new, "new.json")),
        "--baseline",
        str(_save(tmp_path, base)),
        *loose,
        cwd=tmp_path,
    )
    assert out.returncode == (0 if with_medians else 1), out.stdout


# ----------------------------------------------------------------------------- step gates


def _steps_scaled(report: dict[str, Any], wall: float, idle_pt: float = 0.0) -> dict:
    """The report with every step `wall` times as long, its idle share `idle_pt` points higher
    (the devices' own step time: busy + idle)."""
    out = copy.deepcopy(report)
    for step in out["steps"]:
        device_time = step["device_wall_us"]
        step["busy_us"] = max(step["busy_us"] - idle_pt / 100 * device_time, 0.0)
        step["wall_us"] *= wall
        step["device_wall_us"] *= wall
        step["busy_us"] *= wall
        step["idle_us"] = step["device_wall_us"] - step["busy_us"]
    return out


def test_step_time_gate(mlp_report: dict, cpu_chip_file: Path, tmp_path: Path) -> None:
    assert mlp_report["steps"], "the fixtures are annotated"
    same = _save(tmp_path, mlp_report)
    assert _gate(same, cpu_chip_file, "--max-step-regression", "5", cwd=tmp_path).returncode == 0
    faster = _save(tmp_path, _steps_scaled(mlp_report, wall=0.5), "fast.json")
    # Steps of another run (their walls edited): the interval is the steps' spread, 3 a side,
    # and the run-to-run allowance; +100% is wholly past 20%.
    out = _gate(faster, cpu_chip_file, "--max-step-regression", "20", cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "step +100.0% (" in out.stdout.splitlines()[0]
    assert "median step" in out.stdout


def test_idle_gate(mlp_report: dict, cpu_chip_file: Path, tmp_path: Path) -> None:
    # NEW: the same run whose devices sit idle 20 points more of their own step time.
    base = _save(tmp_path, mlp_report, "base.json")
    idler = _save(tmp_path, _steps_scaled(mlp_report, wall=1.0, idle_pt=20), "idle.json")
    out = _check(str(idler), "--baseline", str(base), "--max-idle-regression", "10", cwd=tmp_path)
    assert out.returncode == 1, out.stdout
    assert "idle +20.0 pt (limit +10 pt)" in out.stdout.splitlines()[0]
    ok = _check(str(idler), "--baseline", str(base), "--max-idle-regression", "30", cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout


def test_step_gate_fails_closed_without_steps(
    mlp_report: dict, cpu_chip_file: Path, tmp_path: Path
) -> None:
    # A version-1 baseline has no steps: asked to gate on them, check fails and says why.
    old = copy.deepcopy(mlp_report)
    old["schema"] = "hlogap.audit/1"
    del old["steps"]
    baseline = _save(tmp_path, old, "v1.json")
    assert _gate(baseline, cpu_chip_file, cwd=tmp_path).returncode == 0  # v1 still reads
    out = _gate(baseline, cpu_chip_file, "--max-step-regression", "5", cwd=tmp_path)
    assert out.returncode == 1
    assert "step time: no steps in BASE" in out.stdout


def test_step_gates_leave_out_the_warm_up_as_the_summary_does(
    mlp_report: dict, tmp_path: Path
) -> None:
    """A run traced from its first step (compilation, autotuning: 20x long and nearly all
    idle) against the same run traced from its second: the steady steps are the same, and the
    gates compare those, as the audit's summary does (they read 79% idle on the H100 archive
    where the summary said 1%)."""
    base = _save(tmp_path, mlp_report, "steady.json")
    with_warmup = copy.deepcopy(mlp_report)
    first = copy.deepcopy(with_warmup["steps"][0])
    first["wall_us"] *= 20
    first["device_wall_us"] *= 20
    first["idle_us"] = first["device_wall_us"] - first["busy_us"]
    with_warmup["steps"].insert(0, first)
    new = _save(tmp_path, with_warmup, "warm.json")
    out = _check(
        str(new),
        "--baseline",
        str(base),
        "--max-step-regression",
        "0",
        "--max-idle-regression",
        "0",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout
    idle = mlp_report["summary"]["idle_fraction"] * 100
    assert f"devices idle {idle:.1f}% -> {idle:.1f}%" in out.stdout
    assert "warm-up steps left out: 1 in NEW" in out.stdout


def test_a_version_2_idle_is_not_compared(mlp_report: dict, tmp_path: Path) -> None:
    """Version 2 counted the skew between devices as idle: the idle gate says so and fails
    closed rather than compare two different figures (it passed at -54 points)."""
    old = copy.deepcopy(mlp_report)
    old["schema"] = "hlogap.audit/2"
    for step in old["steps"]:
        del step["per_device"]
    base, new = _save(tmp_path, old, "v2.json"), _save(tmp_path, mlp_report, "v3.json")
    out = _check(str(new), "--baseline", str(base), "--max-idle-regression", "5", cwd=tmp_path)
    assert out.returncode == 1, out.stdout
    assert "idle: BASE saved before hlogap.audit/3" in out.stdout


def test_most_of_the_program_gone_fails_closed(mlp_report: dict, tmp_path: Path) -> None:
    """A profile that lacks ops holding most of the baseline's time is not the same program:
    exit 3 with the share (an audit filtered to one module passed at -89%); less than that,
    the gone ops are listed."""
    ops = sorted(mlp_report["ops"], key=lambda o: -o["measured_us"])
    total = mlp_report["summary"]["measured_us"]
    kept, gone_us = [], 0.0
    for op in ops:  # drop the largest ops until over half the time is gone
        if gone_us <= 0.5 * total:
            gone_us += op["measured_us"]
        else:
            kept.append(op)
    part = copy.deepcopy(mlp_report)
    part["ops"] = kept
    part["summary"]["ops"] = len(kept)
    part["summary"]["measured_us"] = sum(o["measured_us"] for o in kept)
    part["summary"]["bound_us"] = sum(o["bound_us"] for o in kept)
    base, new = _save(tmp_path, mlp_report, "all.json"), _save(tmp_path, part, "part.json")
    out = _check(str(new), "--baseline", str(base), cwd=tmp_path)
    assert out.returncode == 3, out.stdout
    assert f"took {gone_us / total:.0%} of the baseline" in out.stderr
    # One op gone (over 1% of the time, under half): listed, and the gate still runs.
    smaller = copy.deepcopy(mlp_report)
    lost = next(o for o in ops[1:] if 0.01 * total < o["measured_us"] < 0.5 * total)
    smaller["ops"] = [o for o in smaller["ops"] if o["name"] != lost["name"]]
    # A whole report of that run: its summary counts the ops it lists (one listing fewer ops
    # than its summary counts is a report saved with --top, which check refuses).
    smaller["summary"]["ops"] = len(smaller["ops"])
    smaller["summary"]["measured_us"] = sum(o["measured_us"] for o in smaller["ops"])
    smaller["summary"]["bound_us"] = sum(o["bound_us"] for o in smaller["ops"])
    out = _check(str(_save(tmp_path, smaller, "one.json")), "--baseline", str(base), cwd=tmp_path)
    assert out.returncode in (0, 1), out.stderr
    assert "ops gone since the baseline" in out.stdout and lost["name"] in out.stdout


# ------------------------------------------------------------------------- the gate fails closed


def _degenerate(report: dict[str, Any], how: str) -> dict[str, Any]:
    out = copy.deepcopy(report)
    if how == "no ops":
        out["ops"] = []
        out["summary"].update(ops=0, measured_us=0.0, bound_us=0.0)
    elif how == "all zero":
        for op in out["ops"]:
            op["measured_us"] = op["median_us"] = 0.0
        out["summary"]["measured_us"] = 0.0
    elif how == "null times":  # what the writer makes of NaN
        for op in out["ops"]:
            op["measured_us"] = None
    elif how == "negative":
        out["ops"][0]["measured_us"] = -1.0
    elif how == "renamed module":  # and 61% slower: nothing can be compared
        out = _scaled(out, measured=1.61)
        for op in out["ops"]:
            op["module"] = "jit_renamed"
    return out


@pytest.mark.parametrize("how", ["no ops", "all zero", "null times", "negative", "renamed module"])
def test_degenerate_current_report_never_passes(
    how: str, mlp_report: dict, cpu_chip_file: Path, tmp_path: Path
) -> None:
    baseline = _save(tmp_path, mlp_report)
    current = _save(tmp_path, _degenerate(mlp_report, how), "current.json")
    out = _check(str(current), "--baseline", str(baseline), cwd=tmp_path)
    assert out.returncode == 3, (how, out.stdout, out.stderr)
    assert out.stdout == "" and out.stderr.count("\n") == 1


def test_baseline_with_infinite_medians_is_corrupt(
    mlp_report: dict, cpu_chip_file: Path, tmp_path: Path
) -> None:
    text = json.dumps(mlp_report).replace('"median_us": ', '"median_us": Infinity, "x": ', 1)
    baseline = tmp_path / "inf.json"
    baseline.write_text(text)
    out = _gate(baseline, cpu_chip_file, cwd=tmp_path)
    assert out.returncode == 3 and "corrupt" in out.stderr


def test_a_change_is_shown_to_the_limits_precision() -> None:
    """A +0.0437% peak growth against a 0.01% limit failed reading '+0.0%'."""
    from hlogap.report.gate import _pct

    assert _pct(0.0437, 0.01) == "+0.044%"
    assert _pct(0.0437) == "+0.0%" and _pct(12.34, 5) == "+12.3%" and _pct(None) == "-"
