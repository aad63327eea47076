"""`diff`'s memory: modules paired by (name, program id), not by name alone.

A module compiled twice in one run (the H100 archive's `jit_add`, programs 34 and 37) is two
modules: diffing a report with itself pairs each with itself and reports nothing, and a run whose
modules were recompiled under other ids pairs them by their sizes, then in compile order. The
oracle is the saved report's own `memory.modules` figures.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from hlogap import audit
from hlogap.options import AuditOptions
from tests.conftest import FIXTURES, run_cli, write_cpu_chip

ARG = {"instruction": "Arg_1.2.0", "shape": "s32[]", "kind": "parameter", "bytes": 4}


@pytest.fixture(scope="module")
def twice(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """mem_donate's report with its module compiled a second time (a small program, other
    buffers at its peak), as a run that jitted it for two shapes would have."""
    chip = write_cpu_chip(tmp_path_factory.mktemp("chip"))
    report = audit(FIXTURES / "mem_donate", AuditOptions(chip=str(chip))).to_dict(0)
    first = report["memory"]["modules"][0]
    second = {
        **copy.deepcopy(first),
        "program_id": str(int(first["program_id"]) + 3),
        "peak_bytes": 12,
        "arguments_bytes": 8,
        "outputs_bytes": 4,
        "temporaries_bytes": 0,
        "aliased_bytes": 0,
        "at_peak": [{**ARG, "op_name": "", "source": ""}],
    }
    report["memory"]["modules"].append(second)
    return report


def _diff(tmp_path: Path, base: dict, new: dict, capsys: pytest.CaptureFixture[str]) -> str:
    (tmp_path / "base.json").write_text(json.dumps(base))
    (tmp_path / "new.json").write_text(json.dumps(new))
    code, out, err = run_cli(
        ["diff", str(tmp_path / "base.json"), str(tmp_path / "new.json")], capsys
    )
    assert code == 0, err
    return out


def test_a_report_diffed_with_itself_reports_no_module(
    twice: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert not [
        line
        for line in _diff(tmp_path, twice, twice, capsys).splitlines()
        if line.startswith("memory:")
    ]
    (tmp_path / "r.json").write_text(json.dumps(twice))
    code, out, _ = run_cli(
        ["diff", str(tmp_path / "r.json"), str(tmp_path / "r.json"), "-f", "json"], capsys
    )
    assert code == 0
    pairs = [
        (m["base_program_id"], m["new_program_id"], m["delta_bytes"], m["appeared"])
        for m in json.loads(out)["memory"]
    ]
    ids = [m["program_id"] for m in twice["memory"]["modules"]]
    assert pairs == [(i, i, 0, []) for i in ids]


def test_recompiled_modules_pair_by_size_then_compile_order(
    twice: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """NEW: both programs recompiled under new ids, in the other compile order, the small one
    grown. The big one pairs with its own sizes (compile order alone would pair it with the
    small one); the small one is what is left, and is the one memory line, with the reports'
    figures."""
    big, small = twice["memory"]["modules"]
    new = copy.deepcopy(twice)
    grown = {**copy.deepcopy(small), "program_id": "20", "peak_bytes": 20, "outputs_bytes": 12}
    same = {**copy.deepcopy(big), "program_id": "21"}
    new["memory"]["modules"] = [grown, same]
    lines = [
        line
        for line in _diff(tmp_path, twice, new, capsys).splitlines()
        if line.startswith("memory:")
    ]
    name = f"{small['module']} (program {small['program_id']} -> 20)"
    assert lines == [f"memory: {name} static peak 12 B -> 20 B (+8 B)"]
