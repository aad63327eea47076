"""`hlogap check`'s noise-aware verdicts (issue 45, contract version 4's `check`).

The oracles are the fixtures' own steps: each interval is recomputed here from the saved
reports' `steps` with scipy's t distribution (not hlogap's), and the fixtures `mlp`,
`mlp_rerun` and `mlp_shifted` are independent runs of one program (noise only).
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import statistics
import subprocess
import sys
from itertools import permutations
from pathlib import Path
from typing import Any

import pytest

from hlogap import audit
from hlogap.options import AuditOptions
from tests.conftest import FIXTURES, ROOT

RUNS = ("mlp", "mlp_rerun", "mlp_shifted")
CPU_RUN_NOISE = 0.25  # docs/ci.md: the default run-to-run allowance of CPU profiles
UNDECIDED = re.compile(
    r"hlogap check: inconclusive: .+ changed [+-]\d+\.\d% \([+-]\d+\.\d%\.\.[+-]\d+\.\d%, "
    r"\d+ and \d+ steady steps\): within run-to-run noise; "
    r"(about \d+ steps a side would decide it|more steps would not decide it: .+)"
)


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each run's saved report (audited against the test chip)."""
    tmp = tmp_path_factory.mktemp("noise")
    chip = tmp / "testcpu.toml"
    chip.write_text(
        'name = "testcpu"\n[peak_flops]\nf32 = 1.0e11\nbf16 = 1.0e11\n[memory]\nhbm_bw = 2.0e10\n'
    )
    out = {}
    for name in RUNS:
        path = tmp / f"{name}.json"
        path.write_text(json.dumps(audit(FIXTURES / name, AuditOptions(chip=str(chip))).to_dict(0)))
        out[name] = path
    return out


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("GITHUB_STEP_SUMMARY", None)
    return subprocess.run(
        [sys.executable, "-m", "hlogap", *args], capture_output=True, text=True, cwd=cwd, env=env
    )


def _load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def _check(tmp: Path, new: Path, base: Path, *extra: str) -> tuple[int, dict, str]:
    result = run_cli(
        "check", str(new), "--baseline", str(base), "--format", "json", *extra, cwd=tmp
    )
    doc = json.loads(result.stdout) if result.stdout.strip() else {}
    return result.returncode, doc, result.stderr


def _steady(report: dict) -> list[dict]:
    return report["steps"][report["summary"]["warmup_steps"] :]


def _welch_interval(
    base: list[float], new: list[float], center: float, factor: float, noise: float
) -> tuple[float, float]:
    """The documented method, written out: Welch's t on the logs of the per-step figures (with
    `noise`, the run-to-run allowance added in quadrature: the fail rule's interval); a change
    in %."""
    # Imported here: scipy.stats takes ~0.8 s to import, and every test worker collects (imports)
    # every test module.
    from scipy import stats

    lb, ln = [math.log(v) for v in base], [math.log(v) for v in new]
    a, b = statistics.variance(lb) / len(lb), statistics.variance(ln) / len(ln)
    df = (a + b) ** 2 / (a * a / (len(lb) - 1) + b * b / (len(ln) - 1))
    half = math.hypot(stats.t.ppf(0.975, df) * math.sqrt(a + b) * factor, math.log1p(noise))
    return math.expm1(center - half) * 100, math.expm1(center + half) * 100


def _by_name(doc: dict) -> dict[str, dict]:
    return {c["name"]: c for c in doc["checks"]}


def test_the_step_interval_is_the_steps_own(reports: dict[str, Path], tmp_path: Path) -> None:
    base, new = _load(reports["mlp"]), _load(reports["mlp_rerun"])
    code, doc, _ = _check(
        tmp_path, reports["mlp_rerun"], reports["mlp"], "--max-step-regression", "5"
    )
    walls_b = [s["wall_us"] for s in _steady(base)]
    walls_n = [s["wall_us"] for s in _steady(new)]
    center = math.log(statistics.median(walls_n) / statistics.median(walls_b))
    factor = math.sqrt(math.pi / 2)
    lo, hi = _welch_interval(walls_b, walls_n, center, factor, 0.0)
    widened, _ = _welch_interval(walls_b, walls_n, center, factor, CPU_RUN_NOISE)
    step = _by_name(doc)["step"]
    assert step["interval"] == pytest.approx([lo, hi], rel=1e-6)
    assert step["value"] == pytest.approx(math.expm1(center) * 100)
    # Fail: past the limit even with the run-to-run allowance; pass: the steps' interval
    # within it.
    expected = "fail" if widened > 5 else "pass" if hi <= 5 else "inconclusive"
    assert step["verdict"] == expected
    assert code in (0, 1, 3)


def test_the_measured_interval_is_the_steps_own(reports: dict[str, Path], tmp_path: Path) -> None:
    base, new = _load(reports["mlp_shifted"]), _load(reports["mlp"])
    _, doc, _ = _check(tmp_path, reports["mlp"], reports["mlp_shifted"])
    # Per steady step: the ops' total over the steps they count (no warm-up in these runs).
    per_b = base["summary"]["measured_us"] / len(_steady(base))
    per_n = new["summary"]["measured_us"] / len(_steady(new))
    lo, hi = _welch_interval(
        [s["measured_us"] for s in _steady(base)],
        [s["measured_us"] for s in _steady(new)],
        math.log(per_n / per_b),
        1.0,
        0.0,
    )
    measured = _by_name(doc)["measured"]
    assert measured["value"] == pytest.approx((per_n / per_b - 1) * 100)
    assert measured["interval"] == pytest.approx([lo, hi], rel=1e-6)


@pytest.mark.parametrize(("base", "new"), list(permutations(RUNS, 2)))
def test_noise_only_pairs_never_fail(
    base: str, new: str, reports: dict[str, Path], tmp_path: Path
) -> None:
    """Independent runs of one program: pass or inconclusive, never fail, every gate asked."""
    code, doc, err = _check(
        tmp_path,
        reports[new],
        reports[base],
        "--max-step-regression",
        "5",
        "--max-idle-regression",
        "5",
    )
    assert code in (0, 3), doc.get("line")
    assert doc["verdict"] in ("pass", "inconclusive")
    assert all(c["verdict"] != "fail" for c in doc["checks"])
    for c in doc["checks"]:
        assert set(c) >= {"verdict", "interval"}
    if code == 3:
        lines = err.splitlines()
        assert len(lines) == 1 and UNDECIDED.fullmatch(lines[0]), err
    else:
        assert err == ""


def test_a_real_regression_fails_with_its_whole_interval_past_the_limit(
    reports: dict[str, Path], tmp_path: Path
) -> None:
    """The same run's steps and ops 2x as long (another run: its steps shifted in time): the
    whole interval of the step is past the limit."""
    slow = _load(reports["mlp_rerun"])
    for step in slow["steps"]:
        step["start_us"] += 1.0
        for key in ("wall_us", "device_wall_us", "busy_us", "measured_us", "idle_us"):
            step[key] *= 2
    for op in slow["ops"]:
        op["measured_us"] *= 2
        op["median_us"] *= 2
    slow["summary"]["measured_us"] = sum(o["measured_us"] for o in slow["ops"])
    path = tmp_path / "slow.json"
    path.write_text(json.dumps(slow))
    code, doc, _ = _check(tmp_path, path, reports["mlp"], "--max-step-regression", "5")
    assert code == 1
    step = _by_name(doc)["step"]
    assert step["verdict"] == "fail" and step["interval"][0] > 5


def _trimmed(report: dict, keep: int) -> dict:
    out = copy.deepcopy(report)
    out["steps"] = out["steps"][:keep]
    return out


def test_one_step_a_side_has_no_noise_estimate(reports: dict[str, Path], tmp_path: Path) -> None:
    """Neither side spread: no interval, and the fixed limit decides (said so), never a pass
    by default; one side spread lends its spread to the other."""
    one_b = tmp_path / "one_b.json"
    one_n = tmp_path / "one_n.json"
    one_b.write_text(json.dumps(_trimmed(_load(reports["mlp"]), 1)))
    one_n.write_text(json.dumps(_trimmed(_load(reports["mlp_rerun"]), 1)))
    _, doc, _ = _check(tmp_path, one_n, one_b, "--max-step-regression", "5")
    step = _by_name(doc)["step"]
    assert step["interval"] is None
    assert "no noise estimate (1 and 1 steady steps): the fixed limit decides" in step["text"]
    assert step["verdict"] == ("fail" if step["value"] > 5 else "pass")
    _, doc, _ = _check(tmp_path, reports["mlp_rerun"], one_b, "--max-step-regression", "5")
    step = _by_name(doc)["step"]
    assert step["interval"] is not None and "1 and 3 steady steps" in step["text"]


def test_min_hfu(reports: dict[str, Path], tmp_path: Path) -> None:
    hfu = _load(reports["mlp_rerun"])["summary"]["hfu"]
    assert 0 < hfu < 1
    below = f"{hfu * 1.01:.6f}"
    code, doc, _ = _check(tmp_path, reports["mlp_rerun"], reports["mlp_rerun"], "--min-hfu", below)
    assert code == 1 and _by_name(doc)["hfu"]["verdict"] == "fail"
    above = f"{hfu * 0.99:.6f}"
    code, doc, _ = _check(tmp_path, reports["mlp_rerun"], reports["mlp_rerun"], "--min-hfu", above)
    assert code == 0 and _by_name(doc)["hfu"]["value"] == pytest.approx(hfu)
    bad = run_cli("check", str(reports["mlp"]), "--baseline", str(reports["mlp"]), "--min-hfu", "2")
    assert bad.returncode == 2


def test_impossible_hfu_is_misconfigured_not_a_verdict(
    reports: dict[str, Path], tmp_path: Path
) -> None:
    wrong = _load(reports["mlp"])
    for step in wrong["steps"]:
        step["flops"] *= 100  # past the chip's peak
    path = tmp_path / "wrong.json"
    path.write_text(json.dumps(wrong))
    result = run_cli("check", str(path), "--baseline", str(reports["mlp"]), cwd=tmp_path)
    assert result.returncode == 3 and result.stdout == ""
    assert "misconfigured: its HFU is" in result.stderr


def test_update_baseline_keeps_the_history(reports: dict[str, Path], tmp_path: Path) -> None:
    first, second = tmp_path / "b1.json", tmp_path / "b2.json"
    _, doc, _ = _check(
        tmp_path,
        reports["mlp_rerun"],
        reports["mlp"],
        "--update-baseline",
        str(first),
        "--reason",
        "rerun accepted",
    )
    saved = _load(first)
    assert saved["schema"] == _load(reports["mlp_rerun"])["schema"]
    assert [o["name"] for o in saved["ops"]] == [
        o["name"] for o in _load(reports["mlp_rerun"])["ops"]
    ]
    (entry,) = saved["history"]
    assert entry["reason"] == "rerun accepted" and entry["verdict"] == doc["verdict"]
    walls = [
        statistics.median(s["wall_us"] for s in _steady(_load(reports[r])))
        for r in ("mlp", "mlp_rerun")
    ]
    assert entry["change"] == pytest.approx(walls[1] / walls[0] - 1)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", entry["date"])
    result = run_cli(
        "check",
        str(reports["mlp_shifted"]),
        "--baseline",
        str(first),
        "--update-baseline",
        str(second),
        "--reason",
        "shifted accepted",
        cwd=tmp_path,
    )
    assert "baseline: last accepted" in result.stdout and "rerun accepted" in result.stdout
    history = _load(second)["history"]
    assert [h["reason"] for h in history] == ["rerun accepted", "shifted accepted"]
    assert history[0] == entry


@pytest.mark.parametrize("which", ["baseline", "profile"])
def test_update_baseline_never_writes_over_what_it_reads(
    which: str, reports: dict[str, Path], tmp_path: Path
) -> None:
    base = tmp_path / "base.json"
    base.write_text(reports["mlp"].read_text())
    new = tmp_path / "new.json"
    new.write_text(reports["mlp_rerun"].read_text())
    target = base if which == "baseline" else new
    before = target.read_bytes()
    result = run_cli(
        "check",
        str(new),
        "--baseline",
        str(base),
        "--update-baseline",
        str(target),
        "--reason",
        "x",
        cwd=tmp_path,
    )
    assert result.returncode == 2 and "refusing to write over a file it reads" in result.stderr
    assert target.read_bytes() == before


def test_update_baseline_needs_a_reason(reports: dict[str, Path], tmp_path: Path) -> None:
    result = run_cli(
        "check",
        str(reports["mlp"]),
        "--baseline",
        str(reports["mlp"]),
        "--update-baseline",
        str(tmp_path / "b.json"),
        cwd=tmp_path,
    )
    assert result.returncode == 2 and "--reason" in result.stderr
    assert not (tmp_path / "b.json").exists()


def test_an_op_that_grew_more_than_the_step_is_waiting(
    reports: dict[str, Path], tmp_path: Path
) -> None:
    """An async op timed to its completion marker: its time per occurrence jumps (the issue's
    37.6 us -> 877.6 us) while the step does not move; it is not a per-op regression."""
    new = _load(reports["mlp_rerun"])
    op = min(
        (o for o in new["ops"] if o["measured_us"] > 0.01 * new["summary"]["measured_us"]),
        key=lambda o: o["measured_us"],
    )
    op["measured_us"] *= 100
    op["median_us"] *= 100
    new["summary"]["measured_us"] = sum(o["measured_us"] for o in new["ops"])
    path = tmp_path / "waits.json"
    path.write_text(json.dumps(new))
    _, doc, _ = _check(tmp_path, path, reports["mlp"], "--run-noise", "0")
    waiting = [o for o in doc["op_checks"] if o["waiting"]]
    assert [o["name"] for o in waiting] == [op["name"]]
    assert op["name"] not in {r["name"] for r in doc["regressed_ops"]}
    assert any("not gated as waits" in n for n in doc["notes"])
