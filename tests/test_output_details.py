"""Details of the outputs a new user tripped over: names cut at a terminal's width, times in
one format, thresholds named, counts and shares without float noise, plurals."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from hlogap import audit
from hlogap.options import AuditOptions
from hlogap.render.base import RenderOptions, render
from hlogap.render.table import middle
from hlogap.report.compare import compare
from hlogap.report.model import load_json
from tests.conftest import AMD_FILES, FIXTURES, SHARED, browse, headless_chromium, run_cli

PALLAS = SHARED / "tpu-v6e-pallas"


def _saved(tmp_path: Path, chip: Path, rename: str = "") -> Path:
    """The MLP fixture's report saved as JSON; with `rename`, every op renamed (as XLA does
    between two compilations) and 30% slower."""
    data = audit(FIXTURES / "mlp", AuditOptions(chip=str(chip))).to_dict(0)
    if rename:
        for op in data["ops"]:  # type: ignore[union-attr]
            op["name"] += rename
            op["measured_us"] *= 1.3
            op["median_us"] *= 1.3
    path = tmp_path / f"report{rename}.json"
    path.write_text(json.dumps(data))
    return path


def test_a_renamed_op_keeps_its_arrow_at_80_columns(tmp_path: Path, cpu_chip_file: Path) -> None:
    base = load_json(_saved(tmp_path, cpu_chip_file), "BASE")
    new = load_json(_saved(tmp_path, cpu_chip_file, "_renamed_by_xla.12"), "NEW")
    diff = compare(base, new)
    assert all(" -> " in r.name for r in diff.rows)
    text = render(diff, "table", RenderOptions(width=80))
    rows = [line for line in text.splitlines() if line.startswith(" slower")]
    assert len(rows) == len(diff.rows)
    for line in rows:
        assert len(line) <= 80
        cell = line.split("│")[1].strip()
        old, arrow, renamed = cell.partition(" -> ")
        assert arrow and old and renamed.endswith("a.12"), cell


@pytest.mark.parametrize(
    ("text", "width", "cut"),
    [
        ("ynn_fusion.1 -> ynn_fusion.2", 16, "yn…n.1 -> yn…n.2"),
        ("a -> bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", 16, "a -> bbbbb…bbbbb"),
        ("copy_bitcast_fusion.14", 15, "copy_bi…sion.14"),
    ],
)
def test_middle_cuts_each_name_of_a_rename(text: str, width: int, cut: str) -> None:
    assert middle(text, width) == cut


def test_bound_prints_times_as_audit_does(capsys: pytest.CaptureFixture[str]) -> None:
    hlo = (
        "%dot = bf16[8,1024,16384]{2,1,0} dot(bf16[8,1024,8192]{2,1,0} %x, "
        "bf16[8192,16384]{1,0} %w), lhs_contracting_dims={2}, rhs_contracting_dims={0}"
    )
    code, out, _ = run_cli(["bound", hlo, "--chip", "tpu-v2", "--what-if", "tpu-v5e"], capsys)
    assert code == 0
    assert "T_compute        95.61 ms" in out
    assert "bound            95.61 ms (compute); upper bound 97.48 ms" in out
    assert "what if on tpu-v5e: bound 11.16 ms" in out
    assert "e+0" not in out.replace("e+03 FLOP/B", "")  # the intensity's own figure aside
    tiny = "%a = f32[8] add(f32[8] %x, f32[8] %y)"
    code, out, _ = run_cli(["bound", tiny, "--chip", "h100-sxm"], capsys)
    assert "bound            2.87e-05 us (memory)" in out  # not `0.0 us`


def test_check_names_every_threshold_in_force(
    tmp_path: Path, cpu_chip_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    baseline = _saved(tmp_path, cpu_chip_file)
    args = ["check", str(FIXTURES / "mlp"), "--baseline", str(baseline)]
    args += ["--chip", str(cpu_chip_file), "--max-step-regression", "3"]
    code, out, _ = run_cli([*args, "--max-idle-regression", "2", "--max-peak-hbm", "16GB"], capsys)
    assert code == 0
    line = next(line for line in out.splitlines() if line.startswith("thresholds:"))
    assert line.endswith(
        "max-step-regression 3%, max-idle-regression 2 points, max-peak-hbm 16 GB"
    ), line
    code, out, _ = run_cli([*args[:6], "--max-peak-hbm", "10%"], capsys)
    assert "min-op-share 1%, run-noise 25%, max-peak-hbm 10%\n" in out


@pytest.mark.parametrize("group_by", ["scope", "category", "source"])
def test_the_last_cum_share_is_exactly_one(
    group_by: str, cpu_chip_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Groups sum their ops in another order than the report's total: 0.9999999999999999 or
    # 1.0000000000000002 before the shares were rounded.
    for path in (FIXTURES / "attention", FIXTURES / "flaws"):
        args = ["audit", str(path), "--chip", str(cpu_chip_file), "--group-by", group_by]
        code, out, _ = run_cli([*args, "-f", "csv", "--top", "0"], capsys)
        assert code == 0
        rows = list(csv.DictReader(io.StringIO(out)))
        assert rows[-1]["cum_share"] == "1.0", (path, rows[-1])


def test_a_slow_kernel_counts_ops_and_runs() -> None:
    path = AMD_FILES["mi355x"]
    if not path.is_file():
        pytest.skip(f"{path} absent (../shared not beside the project)")
    report = audit(path)
    evidence = [a.evidence for a in (report.actions or []) if a.cause == "slow kernel"]
    assert any(
        e.startswith("2 ops calling te_fused_attn_backward_ffi (10 runs):") for e in evidence
    ), evidence
    assert not any("call(s)" in e for e in evidence)


def test_room_for_the_batch_is_rounded(capsys: pytest.CaptureFixture[str]) -> None:
    if not PALLAS.is_dir():
        pytest.skip(f"{PALLAS} absent (../shared not beside the project)")
    code, out, _ = run_cli(["audit", str(PALLAS)], capsys)
    assert code == 0
    assert re.search(r"room for [\d,]+x the batch", out), out
    assert "room for 1,998x the batch" in out


def test_html_counts_one_op_in_the_singular(tmp_path: Path, cpu_chip_file: Path) -> None:
    headless_chromium()  # skips here, before the page is made, where there is none
    page = tmp_path / "report.html"
    report = audit(FIXTURES / "mlp", AuditOptions(chip=str(cpu_chip_file)))
    report.ops = report.ops[:1]  # the page holds every op whatever --top says: keep one
    page.write_text(render(report, "html", RenderOptions()))
    dom = browse(page).stdout
    assert '<span id="shown" class="muted">1 of 1 op</span>' in dom
    assert re.search(r"\b1 ops\b", dom) is None
