"""The HTML page as a browser shows it (review 3): the ops in the report's own order (rank), a
sort by gap putting unmodeled ops where the text's sort does, the roofline chart left out with
a sentence where no op has FLOPs and bytes, its y axis titled, and a pod's hosts section.
Headless Chromium renders each page; the oracle is the report's own JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, SHARED, browse, run_cli, write_cpu_chip

PALLAS = SHARED / "tpu-v6e-pallas"


def _dom(page: Path) -> str:
    return browse(page, "--virtual-time-budget=3000").stdout


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two hosts of sharded_train (8 devices each, unmodeled collectives on the test chip)."""
    root = tmp_path_factory.mktemp("pod")
    run = root / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    source = next((FIXTURES / "sharded_train").rglob("*.xplane.pb")).read_bytes()
    for host in ("worker-00", "worker-01"):
        (run / f"{host}.xplane.pb").write_bytes(source)
    return root, write_cpu_chip(root)


def test_ops_in_rank_order_and_hosts(
    pod: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, chip = pod
    page = tmp_path / "pod.html"
    assert run_cli(["audit", str(root), "--chip", str(chip), "-o", str(page)], capsys)[0] == 0
    text = run_cli(["audit", str(root), "--chip", str(chip), "-f", "json"], capsys)[1]
    report = json.loads(text)
    assert any(o["bound_by"] == "unmodeled" for o in report["ops"])
    dom = _dom(page)
    ranks = [int(r) for r in re.findall(r'<tr class="op" id="op-(\d+)">', dom)]
    assert ranks == [o["rank"] for o in report["ops"]]  # the report's (and the text's) order
    hosts = report["hosts"]
    section = dom[dom.index('id="hosts-section"') : dom.index("<h2>Memory</h2>")]
    for h in hosts["slowest_hosts"]:
        assert f"<td>{h['host']}</td>" in section
    assert "Clock offsets" in section and section.count("<td>steps</td>") == len(hosts["hosts"])
    assert "from the profile's first op" in dom


def test_sorting_by_gap_matches_the_text(
    pod: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The page's gap sort (by the rows' gap_us, an unmodeled op's being its whole time) is
    the text's --sort gap order: the script's sort, run on the report, gives the ranks."""
    root, chip = pod
    page = tmp_path / "pod.html"
    assert run_cli(["audit", str(root), "--chip", str(chip), "-o", str(page)], capsys)[0] == 0
    html = page.read_text()
    assert 'let sortKey = "rank", sortDir = 1' in html
    assert '["gap_us", (o) => o.gap_us]' in html
    text = run_cli(
        ["audit", str(root), "--chip", str(chip), "-f", "json", "--sort", "measured"], capsys
    )[1]
    ops = json.loads(text)["ops"]
    by_gap = sorted(ops, key=lambda o: -o["gap_us"])
    text = run_cli(["audit", str(root), "--chip", str(chip), "-f", "json"], capsys)[1]
    text_order = [(o["module"], o["name"]) for o in json.loads(text)["ops"]]
    assert [(o["module"], o["name"]) for o in by_gap] == text_order


def test_no_chart_without_flops_and_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if not PALLAS.is_dir():
        pytest.skip(f"{PALLAS} absent (../shared not beside the project)")
    page = tmp_path / "pallas.html"
    assert run_cli(["audit", str(PALLAS), "-o", str(page)], capsys)[0] == 0
    dom = _dom(page)
    chart = dom[dom.index('id="chart"') : dom.index("<h2>Ops")]
    assert "<svg" not in chart and "no roofline chart to draw" in chart
    assert 'id="hosts-section"' not in dom  # one host: no hosts section


def test_chart_scales_and_titles_its_axes(
    pod: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, chip = pod
    page = tmp_path / "pod.html"
    assert run_cli(["audit", str(root), "--chip", str(chip), "-o", str(page)], capsys)[0] == 0
    dom = _dom(page)
    chart = dom[dom.index('id="chart"') : dom.index("<h2>Ops")]
    assert 'class="chart"' in chart and 'viewBox="0 0 1000 470"' in chart
    assert ' width="1000"' not in chart  # scales with the page
    assert "achieved FLOP/s per device" in chart and "arithmetic intensity" in chart


def test_actions_give_the_step_figures_in_their_frames(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What to change: each action's saving (wall, summed over the steady steps) beside its
    per-step saving and the median step's speedup, in the frame the text words: the page
    said "summed over all 5 steps" where the savings sum the 4 steady ones."""
    archive = SHARED / "nvidia-h100-nsys-jax" / "maxtext_fsdp4_test_data.zip"
    if not archive.is_file():
        pytest.skip(f"{archive} absent (../shared not beside the project)")
    from hlogap.units import fmt_us

    page = tmp_path / "h100.html"
    assert run_cli(["audit", str(archive), "-o", str(page)], capsys)[0] == 0
    report = json.loads(run_cli(["audit", str(archive), "-f", "json"], capsys)[1])
    table = run_cli(["audit", str(archive), "--wide"], capsys)[1]
    steps, warmup = len(report["steps"]), report["summary"]["warmup_steps"]
    assert warmup >= 1 and report["summary"]["ops_frame"] == "steady steps"
    dom = _dom(page)
    section = dom[dom.index('id="actions"') : dom.index("<h2>By scope")]
    assert "<th>saves</th><th>a step (median)</th><th>median step</th>" in section
    frame = f"wall time, summed over the {steps - warmup} steady steps (warm-up left out)"
    assert (
        f"By the time it saves ({frame}; a step: their median; each op in one action)." in section
    )
    assert f"what to change, by the time it saves ({frame}; a step: their median; " in table
    # The savings are the steady steps' (the warm-up step's 2.5 s are left out): each action's
    # saving over its median step's is about their count, not the count of all the steps.
    for a in report["actions"][:3]:
        assert abs(a["saving_us"] / a["step_saving_us"] - (steps - warmup)) < 0.5
    rows = re.findall(r"<tr>(.*?)</tr>", section)[1:]
    assert len(rows) == len(report["actions"])
    for row, a in zip(rows, report["actions"], strict=True):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
        assert cells[1:4] == [
            fmt_us(a["saving_us"]),
            fmt_us(a["step_saving_us"]),
            f"{a['step_speedup']:.2f}x faster",
        ]
