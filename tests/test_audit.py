"""End-to-end audits of real profiles: the op set, the times, the contract's JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import hlogap as api
from hlogap.options import AuditOptions
from hlogap.render.base import RenderOptions, render
from tests.conftest import FIXTURES, SAMPLE, SHARED, cpu_fixtures, oracle
from tests.test_timing import _events_by_op

CONTRACT_OP_KEYS = {
    "rank",
    "module",
    "program_id",
    "name",
    "opcode",
    "category",
    "occurrences",
    "measured_us",
    "bound_us",
    "gap_us",
    "efficiency",
    "bound_by",
    "flops",
    "bytes",
    "comm_bytes",
    "intensity",
    "hlo",
    "hints",
}
CONTRACT_SUMMARY_KEYS = {
    "devices",
    "ops",
    "measured_us",
    "bound_us",
    "gap_us",
    "efficiency",
    "modeled_fraction",
}


def _tree(path: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in path.rglob("*")}


def test_amd_report_is_the_device_events(amd_file: Path) -> None:
    report = api.audit(
        amd_file, AuditOptions(all_steps=True)
    )  # every event, as the oracle counts them
    expected = _events_by_op(amd_file, "/device:GPU:")
    got = {(r.module, r.name): r for r in report.ops}
    assert set(got) == set(expected)
    for key, durations in expected.items():
        assert got[key].measured_us == pytest.approx(sum(durations) / 1e6, abs=1e-6)
    assert report.measured_us == pytest.approx(sum(map(sum, expected.values())) / 1e6)
    assert report.summary_dict()["event_us"] == pytest.approx(report.measured_us)  # no nesting
    # The MI300X run used all 8 GPUs; the MI355X step ran on one of its 8.
    assert report.devices == (8 if "mi300x" in amd_file.name else 1)


def test_amd_chip_is_detected_and_no_op_beats_the_roof(amd_file: Path) -> None:
    report = api.audit(amd_file)
    assert report.chip_source == "detected"
    assert report.chip.name == ("mi300x" if "mi300x" in amd_file.name else "mi355x")
    assert report.chip.hbm_bw in (5.3e12, 8.0e12)  # data sheets, not the driver's 2.66e12/4.1e12
    for row in report.ops:
        assert row.efficiency is None or row.efficiency <= 1.0, row.name


# The documented pattern's fixtures run their steps back to back: a few async ops' `end:`
# markers land in the next execution, where the reader cuts them (stat_events
# ._clip_to_execution); tests/test_launched_steps.py checks those fixtures.
@pytest.mark.parametrize("program", [p.name for p in cpu_fixtures() if "pattern" not in oracle(p)])
def test_cpu_report_is_the_thunk_events(program: str, cpu_chip_file: Path) -> None:
    logdir = FIXTURES / program
    # Every event, as the oracle counts them (the steady frame: tests/test_launched_steps.py).
    report = api.audit(logdir, AuditOptions(chip=str(cpu_chip_file), all_steps=True))
    files = sorted(logdir.rglob("*.xplane.pb"))
    expected = _events_by_op(files[-1], "/host:CPU")
    got = {(r.module, r.name): r for r in report.ops}
    assert set(got) == set(expected)
    for key, durations in expected.items():
        # total_us is the sum of the op's events; measured_us its self time: a while thunk
        # encloses its body's thunks, which are charged to themselves.
        assert got[key].total_us == pytest.approx(sum(durations) / 1e6)
        assert 0 < got[key].measured_us <= got[key].total_us + 1e-9
    summary = json.loads(render(report, "json", RenderOptions(top=0)))["summary"]
    assert summary["measured_us"] == pytest.approx(report.measured_us)
    # Every op event of the file is accounted for: event_us sums them all (a while thunk and the
    # body thunks inside it both count); measured_us charges each moment to the innermost op.
    all_events_us = sum(map(sum, expected.values())) / 1e6
    assert summary["event_us"] == pytest.approx(all_events_us)
    assert summary["measured_us"] <= all_events_us + 1e-9


def test_json_follows_the_contract(amd_file: Path) -> None:
    doc = json.loads(render(api.audit(amd_file), "json", RenderOptions(top=2)))
    assert doc["schema"] == "hlogap.audit/4"
    assert {"path", "run", "files", "hosts"} <= set(doc["source"])
    assert {"name", "display", "vendor", "source", "peak_flops", "hbm_bw"} <= set(doc["chip"])
    assert set(doc["summary"]) >= CONTRACT_SUMMARY_KEYS
    # Every op whatever --top says (machine output); the summary counts them.
    assert len(doc["ops"]) == doc["summary"]["ops"] > 2
    for rank, op in enumerate(doc["ops"], 1):
        assert set(op) >= CONTRACT_OP_KEYS
        assert op["rank"] == rank
        assert op["gap_us"] == pytest.approx(op["measured_us"] - op["bound_us"])
        assert op["bound_by"] in ("compute", "memory", "communication", "none", "unmodeled")
    gaps = [op["gap_us"] for op in doc["ops"]]
    assert gaps == sorted(gaps, reverse=True)


def test_cli_json_pipes_into_json_tool(amd_file: Path, tmp_path: Path) -> None:
    before = _tree(amd_file.parent)
    cli = [sys.executable, "-m", "hlogap", "audit", str(amd_file), "--format", "json"]
    out = subprocess.run(cli, capture_output=True, text=True, check=True)
    tool = subprocess.run(
        [sys.executable, "-m", "json.tool"],
        input=out.stdout,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(tool.stdout)["schema"] == "hlogap.audit/4"
    assert out.stderr == ""
    assert _tree(amd_file.parent) == before  # never writes into the profile directory


@pytest.mark.parametrize("fmt", ["table", "csv", "md"])
def test_other_formats_name_the_top_op(amd_file: Path, fmt: str) -> None:
    report = api.audit(amd_file)
    text = render(report, fmt, RenderOptions(top=5))
    assert report.ops[0].name in text


def test_sample_profile_audits(cpu_chip_file: Path) -> None:
    report = api.audit(SAMPLE, AuditOptions(chip=str(cpu_chip_file)))
    assert report.ops and report.backend == "cpu"
    assert report.modeled_fraction is not None and report.modeled_fraction > 0.5


def test_hlo_dump_stands_in_for_a_missing_hlo_proto(tmp_path: Path, cpu_chip_file: Path) -> None:
    """A trace without `Hlo Proto` is costed from the `--xla_dump_to` text of the same run."""
    from hlogap.proto import xplane_pb2

    original = next((FIXTURES / "mlp").rglob("*.xplane.pb"))
    space = xplane_pb2.XSpace.FromString(original.read_bytes())
    for plane in space.planes:
        if plane.name == "/host:metadata":
            for md in plane.event_metadata.values():
                del md.stats[:]
    stripped = tmp_path / "vm.xplane.pb"
    stripped.write_bytes(space.SerializeToString())
    chip = str(cpu_chip_file)
    without = api.audit(stripped, AuditOptions(chip=chip))
    assert all(r.bound_by == "unmodeled" for r in without.ops)
    dumped = api.audit(stripped, AuditOptions(chip=chip, hlo_dump=FIXTURES / "mlp" / "dump"))
    reference = {r.name: r for r in api.audit(original, AuditOptions(chip=chip)).ops}
    assert {r.name for r in dumped.ops} == set(reference)
    for row in dumped.ops:
        assert row.bound_by != "unmodeled", row.name
        assert row.flops == pytest.approx(reference[row.name].flops)
        assert row.bytes == pytest.approx(reference[row.name].bytes)


def test_python_api_is_hlogap_audit_and_import_is_light() -> None:
    code = (
        "import sys, hlogap; assert 'numpy' not in sys.modules; "
        f"r = hlogap.audit({str(next(FIXTURES.glob('mlp')))!r}, "
        "hlogap.AuditOptions(chip='h100-sxm')); "
        "print(r.ops[0].name, r.backend)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split()[1] == "cpu"


CROSS_CHECKED = {
    "mi300x": SHARED / "amd-gpu" / "mi300x_conv3d.xplane.pb",
    "mi355x": SHARED / "amd-gpu" / "mi355x_te_attention.xplane.pb",
    "v6e": SHARED / "tpu-v6e-offload" / "tpu_inference_2.xplane.pb",
}


@pytest.mark.parametrize("profile", sorted(CROSS_CHECKED))
def test_cross_check_agrees_with_xprof_or_says_why(profile: str, tmp_path: Path) -> None:
    # xprof's own converter (the [xprof] extra) on the real AMD and TPU profiles: every op
    # agrees on occurrences and self time, or differs for a reason hlogap names; the profile
    # is converted from a private copy, so nothing is written beside it.
    import importlib.util
    import shutil

    if importlib.util.find_spec("xprof") is None:
        pytest.skip("xprof (tensorboard-plugin-profile) is not installed")
    source = CROSS_CHECKED[profile]
    if not source.is_file():
        pytest.skip(f"{source} absent (../shared not beside the project)")
    copy = tmp_path / "profile" / source.name
    copy.parent.mkdir()
    shutil.copy(source, copy)
    report = api.audit(copy, AuditOptions(cross_check=True))
    check = report.cross_check
    assert check is not None and check.tool.startswith("xprof")
    rows = check.rows
    assert len(rows) == len(report.ops)
    unexplained = [r for r in rows if not r.agrees and not r.explained]
    assert unexplained == []
    if profile == "mi355x":  # Transformer Engine's attention launches several kernels per call
        kernels = [r for r in rows if not r.agrees]
        assert {r.name for r in kernels} == {
            "te_fused_attn_backward_ffi.18",
            "te_fused_attn_backward_ffi.12",
            "te_fused_attn_forward_ffi.10",
            "te_fused_attn_forward_ffi.15",
        }
        assert all("kernels as an occurrence" in r.why for r in kernels)
    else:
        assert report.to_dict()["cross_check"]["agree"] == len(rows) - len(check.differing)
    assert sorted(p.name for p in copy.parent.iterdir()) == [source.name]
    assert "cross_check" in report.to_dict()


def test_the_slow_host_is_named(tmp_path: Path, cpu_chip_file: Path) -> None:
    # Four hosts run the same program; host02's events all take 1.5x as long (a straggler).
    from hlogap.proto import xplane_pb2

    source = next((FIXTURES / "mlp").rglob("*.xplane.pb")).read_bytes()
    run_dir = tmp_path / "tb" / "plugins" / "profile" / "run1"
    run_dir.mkdir(parents=True)
    for h in range(4):
        space = xplane_pb2.XSpace.FromString(source)
        if h == 2:
            for plane in space.planes:
                for line in plane.lines:
                    for event in line.events:
                        event.duration_ps = event.duration_ps * 3 // 2
        (run_dir / f"host{h:02d}.xplane.pb").write_bytes(space.SerializeToString())
    report = api.audit(tmp_path / "tb", AuditOptions(chip=str(cpu_chip_file), jobs=1))
    skew = report.host_skew
    assert skew is not None and skew.slowest_host == "host02"
    # Events 1.5x as long; self time also counts async ops until their `end:` markers, whose
    # offsets were not moved: the host's time in ops grows by a little less than half.
    assert skew.over_median_pct is not None and 30 < skew.over_median_pct <= 50
    ops = skew.ops
    assert ops and all(o.slowest_host == "host02" for o in ops)
    assert report.to_dict()["hosts"]["slowest_host"] == "host02"
    text = render(report, "table", RenderOptions(top=3))
    assert "slowest host: host02" in text and "over the median host" in text


def test_skip_bad_hosts_audits_the_rest_and_names_the_bad_one(
    tmp_path: Path, cpu_chip_file: Path
) -> None:
    source = next((FIXTURES / "mlp").rglob("*.xplane.pb")).read_bytes()
    run_dir = tmp_path / "tb" / "plugins" / "profile" / "run1"
    run_dir.mkdir(parents=True)
    for h in range(4):
        (run_dir / f"host{h:02d}.xplane.pb").write_bytes(source if h != 2 else source[:3000])
    from hlogap.errors import InputError

    with pytest.raises(InputError, match="host02"):
        api.audit(tmp_path / "tb", AuditOptions(chip=str(cpu_chip_file), jobs=2))
    report = api.audit(
        tmp_path / "tb", AuditOptions(chip=str(cpu_chip_file), jobs=2, skip_bad_hosts=True)
    )
    one = api.audit(run_dir / "host00.xplane.pb", AuditOptions(chip=str(cpu_chip_file)))
    assert report.devices == 3 and report.measured_us == pytest.approx(3 * one.measured_us)
    assert [w for w in report.warnings if w.startswith("skipped host host02:")]
    assert "warning: skipped host host02" in render(report, "table", RenderOptions(top=1))
