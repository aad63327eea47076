"""Class 2, the CI gate: `check` never passes (exit 0) on a degenerate current report or a
corrupt baseline; each mutation is generated from a real report."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.attack.harness import assert_clean, chip_file, logdir_copy, run


def _every_op(field: str, value: Any) -> Callable[[dict], dict]:
    def mutate(report: dict) -> dict:
        for op in report["ops"]:
            op[field] = value
        return report

    return mutate


def _all_times(value: float) -> Callable[[dict], dict]:
    def mutate(report: dict) -> dict:
        for op in report["ops"]:
            for key in ("measured_us", "median_us", "total_us"):
                if key in op:
                    op[key] = value
        return report

    return mutate


def _no_ops(report: dict) -> dict:
    report["ops"] = []
    return report


def _renamed_and_slower(report: dict) -> dict:
    for op in report["ops"]:
        op["module"] = "jit_renamed"
        op["fingerprint"] = "0" * 16
        op["measured_us"] *= 1.61
    return report


CURRENT = {
    "no ops": _no_ops,
    "NaN times": _all_times(math.nan),
    "null times": _every_op("measured_us", None),
    "negative times": _all_times(-5.0),
    "all zero": _all_times(0.0),
    "1 ps each": _all_times(1e-6),
    "infinite times": _all_times(math.inf),
    "renamed module, 61% slower": _renamed_and_slower,
}
BASELINE = {
    "infinite medians": _every_op("median_us", math.inf),
    "negative bound": _every_op("bound_us", -1.0),
    "NaN measured": _every_op("measured_us", math.nan),
    "no ops": _no_ops,
}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("gate")
    result = run(
        ["audit", str(logdir_copy(tmp)), "--chip", str(chip_file(tmp)), "-f", "json", "--top", "0"],
        tmp,
    )
    assert result.code == 0, result.err
    loaded: dict = json.loads(result.out)
    return loaded


def _save(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))  # NaN and Infinity as Python writes them
    return path


@pytest.mark.parametrize("how", sorted(CURRENT))
def test_degenerate_current_fails_closed(how: str, report: dict, tmp_path: Path) -> None:
    baseline = _save(tmp_path / "base.json", report)
    current = _save(tmp_path / "now.json", CURRENT[how](json.loads(json.dumps(report))))
    result = run(["check", str(current), "--baseline", str(baseline)], tmp_path)
    assert_clean(result, (3,))


@pytest.mark.parametrize("how", sorted(BASELINE))
def test_corrupt_baseline_fails_closed(how: str, report: dict, tmp_path: Path) -> None:
    baseline = _save(tmp_path / "base.json", BASELINE[how](json.loads(json.dumps(report))))
    current = _save(tmp_path / "now.json", report)
    result = run(["check", str(current), "--baseline", str(baseline)], tmp_path)
    assert_clean(result, (3,))
