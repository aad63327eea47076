"""Matching ops across runs and recompiles (`hlogap diff`): on real CPU profiles, then edge cases.

The truth for the MLP fixtures comes from their HLO (tests/fixtures/*/jit_mlp.hlo.txt), not from
hlogap: `mlp_rerun` is the same program compiled in a second process (same names), and in
`mlp_shifted` an unrelated 16x16 matmul comes first, so XLA renames the MLP's dot fusions
(`ynn_fusion` -> `ynn_fusion.1`, `ynn_fusion.1` -> `ynn_fusion.2`) and the new op takes
`ynn_fusion`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hlogap import audit
from hlogap.errors import InputError
from hlogap.options import AuditOptions
from hlogap.pipeline import load_report
from hlogap.report.compare import Diff, compare, match_ops, run_ratio
from hlogap.report.model import AuditReport, OpRow
from tests.conftest import FIXTURES, ROOT

MLP = FIXTURES / "mlp"
# mlp op -> its counterpart in each program, read off the HLO: same fused dot shapes and operands.
TRUTH = {
    "mlp_rerun": {
        "ynn_fusion": "ynn_fusion",
        "ynn_fusion.1": "ynn_fusion.1",
        "multiply_multiply_fusion": "multiply_multiply_fusion",
        "broadcast_add_fusion": "broadcast_add_fusion",
    },
    "mlp_shifted": {
        "ynn_fusion": "ynn_fusion.1",  # f32[64,1024] x f32[1024,512] -> f32[64,512]
        "ynn_fusion.1": "ynn_fusion.2",  # f32[64,512] x f32[512,1024] -> f32[64,1024]
        "multiply_multiply_fusion": "multiply_multiply_fusion",
        "broadcast_add_fusion": "broadcast_add_fusion",
    },
}


def _entry_shapes(program: str) -> dict[str, str]:
    """Instruction name -> result shape in the ENTRY computation of the program's HLO text."""
    text = (FIXTURES / program / "jit_mlp.hlo.txt").read_text()
    entry = text[text.index("\nENTRY ") :]
    return dict(re.findall(r"^\s+(?:ROOT )?%(\S+) = (\S+?)\{", entry, flags=re.M))


@pytest.mark.parametrize("program", sorted(TRUTH))
def test_truth_table_agrees_with_the_hlo(program: str) -> None:
    base, new = _entry_shapes("mlp"), _entry_shapes(program)
    for b, n in TRUTH[program].items():
        assert base[b] == new[n], (b, n)


def _report(program: str, chip_file: Path) -> AuditReport:
    return load_report(FIXTURES / program, "test", chip=str(chip_file))


@pytest.mark.parametrize("program", sorted(TRUTH))
def test_mlp_ops_are_matched_to_their_true_counterparts(program: str, cpu_chip_file: Path) -> None:
    diff = compare(_report("mlp", cpu_chip_file), _report(program, cpu_chip_file))
    matched = {r.base.name: r.new.name for r in diff.rows if r.base and r.new}
    assert matched == TRUTH[program]
    assert not [r for r in diff.rows if r.pair.method == "vanished"]
    appeared = [r.new.name for r in diff.rows if r.pair.method == "appeared" and r.new]
    assert appeared == (["ynn_fusion"] if program == "mlp_shifted" else [])
    # Names alone would pair mlp's ynn_fusion with the shifted program's unrelated 16x16 matmul.
    methods = {r.base.name: r.pair.method for r in diff.rows if r.base}
    if program == "mlp_rerun":
        assert set(methods.values()) == {"name+fingerprint"}
    else:
        assert methods["ynn_fusion"] == methods["ynn_fusion.1"] == "fingerprint"
        assert methods["multiply_multiply_fusion"] == "name+fingerprint"
    assert diff.ratio == 1.0  # both ran 3 iterations


def test_saved_report_and_profile_give_the_same_diff(cpu_chip_file: Path, tmp_path: Path) -> None:
    saved = tmp_path / "mlp.json"
    saved.write_text(json.dumps(audit(MLP, AuditOptions(chip=str(cpu_chip_file))).to_dict(0)))
    from_json = load_report(saved, "baseline")
    from_profile = _report("mlp", cpu_chip_file)
    assert from_json.kind == "report" and from_profile.kind == "profile"
    assert from_json.measured_us == pytest.approx(from_profile.measured_us)
    assert sorted(from_json.ops, key=repr) == sorted(from_profile.ops, key=repr)
    diff = compare(from_json, from_profile)
    assert {r.pair.method for r in diff.rows} == {"name+fingerprint"}
    assert diff.measured_delta_us == pytest.approx(0.0, abs=1e-6)
    assert all(r.measured_delta_us == pytest.approx(0.0, abs=1e-6) for r in diff.rows)


def test_report_saved_with_top_keeps_totals_and_warns(cpu_chip_file: Path, tmp_path: Path) -> None:
    """A report an older hlogap saved with `--top 2` (this version's JSON lists every op): the
    API reads it, totals from its summary, and `compare` warns; `check` and `diff` refuse it
    (tests/test_machine_output.py)."""
    full = audit(MLP, AuditOptions(chip=str(cpu_chip_file)))
    saved = tmp_path / "top2.json"
    saved.write_text(json.dumps(full.to_dict(2)))
    base = load_report(saved, "baseline")
    assert len(base.ops) == 2 and base.total_ops == 4 and base.truncated
    assert base.measured_us == pytest.approx(full.measured_us)  # from the summary, all ops
    diff = compare(base, _report("mlp", cpu_chip_file))
    assert any("by an older hlogap" in w and "save it again" in w for w in diff.warnings)


def test_module_regex_filters_a_saved_report(cpu_chip_file: Path, tmp_path: Path) -> None:
    saved = tmp_path / "mlp.json"
    saved.write_text(json.dumps(audit(MLP, AuditOptions(chip=str(cpu_chip_file))).to_dict(0)))
    assert load_report(saved, "baseline", module="^jit_mlp$").total_ops == 4
    # A pattern that matches nothing is a typo to report, not an empty baseline to pass.
    with pytest.raises(InputError, match="no op matches --module 'no_such_module'"):
        load_report(saved, "baseline", module="no_such_module")


# ------------------------------------------------------------------------ errors of the inputs


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not JSON"),
        ('{"schema": "hlogap.chips/1", "chips": []}', "is not an hlogap audit report"),
        ("[1, 2]", "is not an hlogap audit report"),
        ('{"schema": "hlogap.audit/1", "summary": {}}', "corrupt"),
        (
            '{"schema": "hlogap.audit/1", "summary": {"measured_us": 1, "bound_us": 0}, '
            '"ops": [{"module": "m", "name": "n", "occurrences": 1, "measured_us": "x"}]}',
            "corrupt",
        ),
    ],
)
def test_bad_report_is_an_input_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "base.json"
    path.write_text(content)
    with pytest.raises(InputError, match=message):
        load_report(path, "baseline")


def test_missing_input_names_its_role(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="baseline not found"):
        load_report(tmp_path / "nope.json", "baseline")


def test_json_content_without_json_suffix_is_a_report(cpu_chip_file: Path, tmp_path: Path) -> None:
    saved = tmp_path / "baseline.report"
    saved.write_text(json.dumps(audit(MLP, AuditOptions(chip=str(cpu_chip_file))).to_dict(0)))
    assert load_report(saved, "baseline").kind == "report"


# ------------------------------------------------------------------------------- the CLI


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("GITHUB_STEP_SUMMARY", None)
    return subprocess.run(
        [sys.executable, "-m", "hlogap", *args], capture_output=True, text=True, cwd=cwd, env=env
    )


def test_cli_diff_json(cpu_chip_file: Path, tmp_path: Path) -> None:
    out = _cli(
        "diff",
        str(MLP),
        str(FIXTURES / "mlp_shifted"),
        "--chip",
        str(cpu_chip_file),
        "--format",
        "json",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    doc = json.loads(out.stdout)
    assert doc["schema"] == "hlogap.diff/1"
    assert doc["summary"]["matches"] == {
        "name+fingerprint": 2,
        "fingerprint": 2,
        "fingerprint (ordered)": 0,
        "name": 0,
        "appeared": 1,
        "vanished": 0,
    }
    pairs = {(r["base_name"], r["new_name"]): r["match"] for r in doc["ops"]}
    assert pairs[("ynn_fusion", "ynn_fusion.1")] == "fingerprint"
    assert pairs[(None, "ynn_fusion")] == "appeared"
    deltas = [abs(r["measured_delta_us"]) for r in doc["ops"]]
    assert deltas == sorted(deltas, reverse=True)
    assert sum(r["measured_delta_us"] for r in doc["ops"]) == pytest.approx(
        doc["summary"]["measured_delta_us"]
    )


@pytest.mark.parametrize("fmt", ["table", "md"])
def test_cli_diff_text_names_both_names_and_the_method(
    fmt: str, cpu_chip_file: Path, tmp_path: Path
) -> None:
    out = _cli(
        "diff",
        str(MLP),
        str(FIXTURES / "mlp_shifted"),
        "--chip",
        str(cpu_chip_file),
        "--format",
        fmt,
        "--top",
        "2",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert (
        "ynn_fusion.1 -> ynn_fusion.2" in out.stdout or "ynn_fusion -> ynn_fusion.1" in out.stdout
    )
    assert "fingerprint" in out.stdout
    assert "(2 of 5 ops; --top 0 shows all)" in out.stdout


def test_cli_diff_missing_input_exits_3(tmp_path: Path) -> None:
    out = _cli("diff", str(MLP), str(tmp_path / "nope"), cwd=tmp_path)
    assert out.returncode == 3
    assert out.stderr.count("\n") == 1 and "NEW not found" in out.stderr


# -------------------------------------------------------------- matching rules, one by one


def _op(
    name: str, fp: str, us: float, *, n: int = 1, module: str = "m", code: str = "fusion"
) -> OpRow:
    return OpRow(
        module=module,
        name=name,
        opcode=code,
        occurrences=n,
        measured_us=us,
        bound_us=us / 2,
        fingerprint=fp,
    )


def _methods(base: list[OpRow], new: list[OpRow]) -> dict[tuple[str | None, str | None], str]:
    return {
        (p.base.name if p.base else None, p.new.name if p.new else None): p.method
        for p in match_ops(base, new)
    }


def test_repeated_fingerprint_pairs_by_measured_time() -> None:
    # Three identical layers renamed: the slowest pairs with the slowest.
    base = [_op("f.1", "L", 30), _op("f.2", "L", 10), _op("f.3", "L", 20)]
    new = [_op("f.4", "L", 11), _op("f.5", "L", 31), _op("f.6", "L", 19)]
    assert _methods(base, new) == {
        ("f.1", "f.5"): "fingerprint (ordered)",
        ("f.3", "f.6"): "fingerprint (ordered)",
        ("f.2", "f.4"): "fingerprint (ordered)",
    }


def test_same_name_and_fingerprint_wins_over_order() -> None:
    base = [_op("f.1", "L", 30), _op("f.2", "L", 10)]
    new = [_op("f.1", "L", 5), _op("f.2", "L", 50)]
    assert _methods(base, new) == {
        ("f.1", "f.1"): "name+fingerprint",
        ("f.2", "f.2"): "name+fingerprint",
    }


def test_changed_op_falls_back_to_its_name_and_opcode() -> None:
    # A shape change gives a new fingerprint; no HLO gives none: both match by name and opcode.
    base = [
        _op("dot.1", "A", 5, code="dot"),
        _op("copy.2", "", 3, code="copy"),
        _op("sort", "", 3, code="sort"),
    ]
    new = [
        _op("dot.1", "B", 9, code="dot"),
        _op("copy.2", "", 3, code="copy"),
        _op("sort", "", 3, code="custom-call"),
    ]
    assert _methods(base, new) == {
        ("dot.1", "dot.1"): "name",
        ("copy.2", "copy.2"): "name",
        ("sort", None): "vanished",
        (None, "sort"): "appeared",
    }


def test_fingerprint_once_on_one_side_and_twice_on_the_other_is_not_guessed() -> None:
    base = [_op("a", "X", 5)]
    new = [_op("b", "X", 5), _op("c", "X", 6)]
    assert set(_methods(base, new).values()) == {"vanished", "appeared"}


def test_modules_never_mix() -> None:
    base = [_op("f", "X", 5, module="jit_a")]
    new = [_op("f", "X", 5, module="jit_b")]
    assert _methods(base, new) == {("f", None): "vanished", (None, "f"): "appeared"}


def _side(ops: list[OpRow]) -> AuditReport:
    return AuditReport(path="x", chip=None, ops=ops, kind="report")


def test_longer_run_is_compared_per_step() -> None:
    base = [_op("a", "A", 100, n=3), _op("b", "B", 50, n=3)]
    new = [_op("a", "A", 200, n=6), _op("b", "B", 130, n=6)]  # b: 25 -> 21.67 us per occurrence
    assert run_ratio(match_ops(base, new)) == 2.0
    diff: Diff = compare(_side(base), _side(new))
    assert diff.measured_delta_pct == pytest.approx((330 - 300) / 300 * 100)
    row_b = next(r for r in diff.rows if r.op.name == "b")
    assert row_b.measured_per_occ_delta_pct == pytest.approx((130 / 6 - 50 / 3) / (50 / 3) * 100)
    assert row_b.measured_delta_us == pytest.approx(130 - 2 * 50)
    assert any("2x the occurrences" in w for w in diff.warnings)


def test_unrelated_programs_warn() -> None:
    diff = compare(_side([_op("a", "A", 1)]), _side([_op("b", "B", 1)]))
    assert diff.ratio == 1.0
    assert any("same program" in w for w in diff.warnings)
