"""Memory: each module's static peak from its buffer assignment, against XLA's own
`compiled.memory_analysis()` of the same executable (the fixtures' oracles)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hlogap import audit, load_report
from hlogap.memory.static import GAPS, MemorySection
from hlogap.options import AuditOptions
from tests.conftest import AMD_FILES, FIXTURES, SHARED, cpu_fixtures, oracle

MEMORY_PROGRAMS = ["mem_donate", "mem_remat", "mem_temp"]
V6E = SHARED / "tpu-v6e-offload" / "tpu_inference_2.xplane.pb"


@pytest.mark.parametrize("program", MEMORY_PROGRAMS)
def test_static_memory_is_xlas_memory_analysis(program: str, cpu_chip_file: Path) -> None:
    report = audit(FIXTURES / program, AuditOptions(chip=str(cpu_chip_file)))
    assert report.memory is not None
    for entry in oracle(FIXTURES / program)["modules"]:
        xla = entry["memory_analysis"]
        (found,) = [
            m
            for m in report.memory.modules
            if (m.module, m.program_id) == (entry["module"], str(entry["program_id"]))
        ]
        assert found.arguments_bytes == xla["argument_size_in_bytes"]
        assert found.outputs_bytes == xla["output_size_in_bytes"]
        assert found.aliased_bytes == xla["alias_size_in_bytes"]
        assert found.temporaries_bytes == xla["temp_size_in_bytes"]
        # The static peak as XLA defines its parts: arguments + outputs + temporaries - aliased.
        expected = (
            xla["argument_size_in_bytes"]
            + xla["output_size_in_bytes"]
            + xla["temp_size_in_bytes"]
            - xla["alias_size_in_bytes"]
        )
        assert found.peak_bytes == pytest.approx(expected, rel=0.01)
        # What holds the peak: the largest first, adding up to XLA's peak exactly.
        sizes = [b.bytes for b in found.at_peak]
        assert sizes == sorted(sizes, reverse=True)
        assert sum(sizes) == expected
        # The heap simulation of the temporaries peaks at their allocation's size (or just below
        # it: thread-local scalars sit in the allocation but not in the heap).
        assert max(found.live_curve) == pytest.approx(found.temporaries_bytes, rel=0.01)


@pytest.mark.parametrize("program", [p.name for p in cpu_fixtures()])
def test_what_holds_the_peak_adds_up_to_memory_analysis(program: str, cpu_chip_file: Path) -> None:
    """Every committed fixture's modules: the buffers listed at the peak sum to arguments +
    outputs + temporaries - aliased of XLA's `memory_analysis()`, to the byte (constants are in
    neither), a `gaps` entry holding what the temporary allocations hold beyond the buffers
    live at the heap's peak."""
    entries = [e for e in oracle(FIXTURES / program)["modules"] if "memory_analysis" in e]
    if not entries:
        pytest.skip(f"{program}'s oracle predates memory_analysis()")
    report = audit(FIXTURES / program, AuditOptions(chip=str(cpu_chip_file)))
    assert report.memory is not None
    for entry in entries:
        xla = entry["memory_analysis"]
        (found,) = [
            m
            for m in report.memory.modules
            if (m.module, m.program_id) == (entry["module"], str(entry["program_id"]))
        ]
        peak = (
            xla["argument_size_in_bytes"]
            + xla["output_size_in_bytes"]
            + xla["temp_size_in_bytes"]
            - xla["alias_size_in_bytes"]
        )
        assert (found.peak_bytes, sum(b.bytes for b in found.at_peak)) == (peak, peak)
        assert all(b.kind != "constant" and b.bytes > 0 for b in found.at_peak)
        temporaries = sum(b.bytes for b in found.at_peak if b.kind in ("temporary", GAPS))
        assert temporaries == xla["temp_size_in_bytes"]


def test_the_large_temporary_is_named(cpu_chip_file: Path) -> None:
    report = audit(FIXTURES / "mem_temp", AuditOptions(chip=str(cpu_chip_file)))
    assert report.memory is not None
    (module,) = report.memory.modules
    top = module.at_peak[0]
    # mem_temp's 2048 x 2048 f32 product: 16 MiB, from the dot at make_fixtures.py's line.
    assert (top.kind, top.bytes, top.shape) == ("temporary", 2048 * 2048 * 4, "f32[2048,2048]{1,0}")
    assert top.op_name.endswith("dot_general") and "make_fixtures.py" in top.source


def test_donated_parameters_are_aliased(cpu_chip_file: Path) -> None:
    donated = audit(FIXTURES / "mem_donate", AuditOptions(chip=str(cpu_chip_file))).memory
    kept = audit(FIXTURES / "mlp_train", AuditOptions(chip=str(cpu_chip_file))).memory
    assert donated is not None and kept is not None
    # The same training step, with and without donating the parameters (4.2 MB of them).
    params = 2 * 512 * 1024 * 4 + 1024 * 4 + 512 * 4
    assert donated.modules[0].aliased_bytes == params and kept.modules[0].aliased_bytes == 0
    aliased = [b for b in donated.modules[0].at_peak if b.kind == "aliased"]
    assert {b.instruction for b in aliased} >= {"params_0_.1", "params_2_.1"}
    # Donation saves memory (XLA copies some parameters to update them in place: not all of it).
    assert kept.modules[0].peak_bytes > donated.modules[0].peak_bytes


def test_host_memory_is_not_device_memory() -> None:
    if not V6E.is_file():
        pytest.skip(f"{V6E} absent (../shared not beside the project)")
    memory = audit(V6E).memory
    assert memory is not None
    jit_f = next(m for m in memory.modules if m.module == "jit_f")
    # Three f32[5,1024,1024,256] buffers (5.37 GB each) live in host memory, S(5): apart.
    assert jit_f.host_bytes == 3 * 5 * 1024 * 1024 * 256 * 4
    # The capacity is what the runtime's allocator has (in use + free), not the chip's 32 GB.
    assert memory.capacity_source in {"0", "1", "2", "3"}
    assert memory.capacity_bytes == 33_550_237_696
    assert memory.headroom_bytes is not None
    assert 0 < jit_f.peak_bytes < memory.capacity_bytes


def test_memory_survives_a_saved_report_and_prints(cpu_chip_file: Path, tmp_path: Path) -> None:
    report = audit(FIXTURES / "mem_donate", AuditOptions(chip=str(cpu_chip_file)))
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps(report.to_dict(0)))
    loaded = load_report(saved)
    assert loaded.memory is not None and report.memory is not None
    assert [m.peak_bytes for m in loaded.memory.modules] == [
        m.peak_bytes for m in report.memory.modules
    ]
    assert loaded.memory.modules[0].at_peak == report.memory.modules[0].at_peak
    with pytest.raises(ValueError):
        MemorySection.from_dict({"modules": [{"peak_bytes": -1}]})
    cmd = [sys.executable, "-m", "hlogap", "memory", str(FIXTURES / "mem_temp")]
    out = subprocess.run(
        [*cmd, "--chip", str(cpu_chip_file), "--format", "json"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["schema"] == "hlogap.memory/1"
    assert doc["memory"]["modules"][0]["at_peak"][0]["instruction"] == "ynn_fusion.2"
    table = subprocess.run([*cmd, "--chip", str(cpu_chip_file)], capture_output=True, text=True)
    assert table.returncode == 0 and "static peak 18.9 MB" in table.stdout


def test_check_gates_the_memory_peak(cpu_chip_file: Path, tmp_path: Path) -> None:
    """`check --max-peak-hbm`: a byte limit on NEW's static peak, or a growth limit over BASE's;
    a side without memory fails closed."""
    report = audit(FIXTURES / "mlp_train", AuditOptions(chip=str(cpu_chip_file))).to_dict(0)
    peak = report["memory"]["modules"][0]["peak_bytes"]  # type: ignore[index]

    def check(baseline: dict[str, object], limit: str) -> subprocess.CompletedProcess[str]:
        path = tmp_path / "base.json"
        path.write_text(json.dumps(baseline))
        cmd = [sys.executable, "-m", "hlogap", "check", str(FIXTURES / "mlp_train")]
        cmd += ["--baseline", str(path), "--chip", str(cpu_chip_file), "--max-peak-hbm", limit]
        return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)

    assert check(report, f"{peak}").returncode == 0
    over = check(report, f"{peak - 1}")
    assert over.returncode == 1 and "FAIL  static memory peak" in over.stdout
    assert check(report, "1GiB").returncode == 0
    smaller = json.loads(json.dumps(report))
    smaller["memory"]["modules"][0]["peak_bytes"] = peak // 2
    grown = check(smaller, "10%")
    assert grown.returncode == 1 and "+100.0%" in grown.stdout.splitlines()[0]
    assert check(smaller, "150%").returncode == 0
    without = json.loads(json.dumps(report))
    without["memory"] = None
    closed = check(without, "10%")
    assert closed.returncode == 1 and "peak memory: none in BASE" in closed.stdout
    bad = check(report, "lots")
    assert bad.returncode == 2 and "--max-peak-hbm" in bad.stderr


def test_diff_names_what_donation_changed(cpu_chip_file: Path) -> None:
    """mem_kept and mem_donate: one training step compiled without and with donating its
    parameters (same module). The diff gives the peak both ways, the donation, and the buffers
    that appeared at the peak."""
    from hlogap.report.compare import compare

    kept = audit(FIXTURES / "mem_kept", AuditOptions(chip=str(cpu_chip_file)))
    donated = audit(FIXTURES / "mem_donate", AuditOptions(chip=str(cpu_chip_file)))
    params = 2 * 512 * 1024 * 4 + 1024 * 4 + 512 * 4
    (forward,) = compare(kept, donated).memory
    assert forward.base_peak_bytes > forward.new_peak_bytes
    assert (forward.base_aliased_bytes, forward.new_aliased_bytes) == (0, params)
    # Donated parameters are now held as aliased buffers; XLA copies one weight to update it
    # in place (`copy.2`, a temporary the run without donation did not hold).
    appeared = {(b.instruction, b.kind) for b in forward.appeared}
    assert {("params_0_.1", "aliased"), ("params_2_.1", "aliased")} <= appeared
    assert any(b.kind == "temporary" and b.bytes == 1024 * 512 * 4 for b in forward.appeared)
    (backward,) = compare(donated, kept).memory
    assert backward.delta_bytes == -forward.delta_bytes
    cmd = [sys.executable, "-m", "hlogap", "diff", str(FIXTURES / "mem_donate")]
    out = subprocess.run(
        [*cmd, str(FIXTURES / "mem_kept"), "--chip", str(cpu_chip_file)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "donation lost: 4.2 MB of inputs no longer reused as outputs" in out.stdout


def test_a_calibrated_cpu_has_the_machines_ram(tmp_path: Path) -> None:
    """A CPU device's memory is the machine's RAM: the calibrated chip file says so, with its
    source, so a CPU profile has headroom too."""
    import os

    from hlogap.chips import load_chip
    from hlogap.chips.calibrate import Calibration, chip_text

    path = tmp_path / "cpu.toml"
    path.write_text(chip_text(Calibration({"f32": 1e11}, 2e10, 0.0, 0.0)))
    chip = load_chip(str(path))
    assert chip.hbm_bytes == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert "RAM" in chip.sources["memory.hbm_bytes"]
    report = audit(FIXTURES / "mem_temp", AuditOptions(chip=str(path)))
    assert report.memory is not None and report.memory.headroom_bytes is not None
    assert report.memory.headroom_bytes == chip.hbm_bytes - report.memory.modules[0].peak_bytes


# xprof's memory profile of a profile file, per allocator (memory id): its converter, run in a
# child on a private copy (it writes a cache beside its input).
_MEMORY_PROFILE = """
import json, sys
from xprof.convert import raw_to_tool_data as convert
data, _ = convert.xspace_to_tool_data([sys.argv[1]], "memory_profile", {})
per = json.loads(data)["memoryProfilePerAllocator"]
print(json.dumps({k: v["profileSummary"] for k, v in per.items()}))
"""
RUNTIME_PROFILES = [*AMD_FILES.values(), V6E]


def xprof_output(script: str, path: Path, tmp_path: Path) -> Any:
    """What `script` (Python reading xprof's converter output) prints as JSON, run in a child
    on a private copy of the profile (the converter may write beside what it reads)."""
    pytest.importorskip("xprof.convert.raw_to_tool_data")
    copy = tmp_path / path.name
    copy.write_bytes(path.read_bytes())
    done = subprocess.run(
        [sys.executable, "-c", script, str(copy)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("path", RUNTIME_PROFILES, ids=lambda p: p.stem.split(".")[0])
def test_allocator_peaks_are_xprofs_memory_profile(path: Path, tmp_path: Path) -> None:
    if not path.is_file():
        pytest.skip(f"{path} absent (../shared not beside the project)")
    xprof = xprof_output(_MEMORY_PROFILE, path, tmp_path)
    memory = audit(path).memory
    assert memory is not None and memory.allocators is not None
    ours = {a.name: a for a in memory.allocators}
    assert set(ours) == set(xprof)
    for name, summary in xprof.items():
        a = ours[name]
        at_peak = summary["peakStats"]
        assert a.peak_bytes == int(summary["peakBytesUsageLifetime"]), name
        assert a.in_use_peak_bytes == int(at_peak["peakBytesInUse"]), name
        assert a.capacity_bytes == int(summary["memoryCapacity"]), name
        assert a.device is not None and a.events > 0
    # The allocators' capacity, not the chip's, bounds the headroom.
    held = memory.runtime_peak
    assert held is not None and memory.capacity_bytes == held.capacity_bytes
    assert memory.headroom_bytes is not None
    assert memory.headroom_bytes <= held.capacity_bytes - held.in_use_peak_bytes


def test_allocator_events_recounted_from_the_protobuf() -> None:
    """Plain Python over the host plane: each allocator's highest `peak_bytes_in_use`, its
    highest heap + stack and when, against the audit's section (times from its first op)."""
    path = AMD_FILES["mi300x"]
    if not path.is_file():
        pytest.skip(f"{path} absent (../shared not beside the project)")
    from hlogap.proto import xplane_pb2

    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    host = next(p for p in space.planes if p.name == "/host:CPU")
    stat = {k: v.name for k, v in host.stat_metadata.items()}
    kinds = {k for k, v in host.event_metadata.items() if v.name.startswith("Memory")}
    mark: dict[str, int] = {}
    held: dict[str, tuple[int, int]] = {}
    for line in host.lines:
        for e in line.events:
            if e.metadata_id not in kinds:
                continue
            values = {}
            for s in e.stats:
                name = stat[s.metadata_id]
                values[name] = stat[s.ref_value] if name == "allocator_name" else s.int64_value
            name = values["allocator_name"]
            mark[name] = max(mark.get(name, 0), values["peak_bytes_in_use"])
            in_use = values["bytes_allocated"] + values["bytes_reserved"]
            when = line.timestamp_ns * 1000 + e.offset_ps
            if in_use > held.get(name, (-1, 0))[0]:
                held[name] = (in_use, when)
    report = audit(path)
    memory = report.memory
    assert memory is not None and memory.allocators is not None
    first_op_ps = min((a.in_use_peak_us * 1e6 - held[a.name][1]) for a in memory.allocators)
    for a in memory.allocators:
        assert a.peak_bytes == mark[a.name]
        assert a.in_use_peak_bytes == held[a.name][0]
        # One origin for every allocator: the same offset between its times and the trace's.
        assert a.in_use_peak_us * 1e6 - held[a.name][1] == pytest.approx(first_op_ps, abs=1)
        assert a.device == int(a.name.split("_")[1])  # GPU_N_bfc serves device N (one host)


def test_device_selection_keeps_its_allocator() -> None:
    path = AMD_FILES["mi300x"]
    if not path.is_file():
        pytest.skip(f"{path} absent (../shared not beside the project)")
    memory = audit(path, AuditOptions(device=3)).memory
    assert memory is not None and memory.allocators is not None
    assert [a.name for a in memory.allocators] == ["GPU_3_bfc"]


def test_allocators_survive_a_saved_report_and_print(tmp_path: Path) -> None:
    path = AMD_FILES["mi355x"]
    if not path.is_file():
        pytest.skip(f"{path} absent (../shared not beside the project)")
    report = audit(path)
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps(report.to_dict(0)))
    loaded = load_report(saved)
    assert loaded.memory is not None and report.memory is not None
    assert loaded.memory.allocators == report.memory.allocators
    assert loaded.memory.capacity_source == "GPU_0_bfc"
    with pytest.raises(ValueError):
        MemorySection.from_dict({"modules": [], "allocators": [{"peak_bytes": "many"}]})
    table = subprocess.run(
        [sys.executable, "-m", "hlogap", "memory", str(path)], capture_output=True, text=True
    )
    assert table.returncode == 0, table.stderr
    assert "at run time (allocator events):" in table.stdout
    assert "GPU_0_bfc" in table.stdout and "663 MB" in table.stdout
    header = subprocess.run(
        [sys.executable, "-m", "hlogap", "audit", str(path), "--top", "1"],
        capture_output=True,
        text=True,
    )
    assert "memory at run time: device 0's allocator GPU_0_bfc held 663 MB" in header.stdout


def test_a_profile_without_allocator_events_says_so(cpu_chip_file: Path) -> None:
    report = audit(FIXTURES / "mem_donate", AuditOptions(chip=str(cpu_chip_file)))
    assert report.memory is not None and report.memory.allocators is None
    assert report.memory.capacity_source == "chip"
    assert any("no allocator events" in w for w in report.warnings)
    assert report.to_dict(0)["memory"]["allocators"] is None


@pytest.mark.parametrize("program", ["mem_temp", "mem_donate"])
def test_the_batch_the_headroom_fits(program: str, tmp_path: Path) -> None:
    """With a device of 64 MB, the batch could grow by the headroom over what grows with it
    (XLA's temporaries and outputs less aliased), all from `memory_analysis()`."""
    chip = tmp_path / "small.toml"
    capacity = 64 << 20
    chip.write_text(
        'name = "small"\n[peak_flops]\nf32 = 1.0e11\n'
        f"[memory]\nhbm_bw = 2.0e10\nhbm_bytes = {capacity}\n"
    )
    report = audit(FIXTURES / program, AuditOptions(chip=str(chip)))
    memory = report.memory
    assert memory is not None and memory.peak is not None
    xla = next(
        e["memory_analysis"]
        for e in oracle(FIXTURES / program)["modules"]
        if e["module"] == memory.peak.module
    )
    peak = (
        xla["argument_size_in_bytes"]
        + xla["output_size_in_bytes"]
        + xla["temp_size_in_bytes"]
        - xla["alias_size_in_bytes"]
    )
    growing = xla["temp_size_in_bytes"] + xla["output_size_in_bytes"] - xla["alias_size_in_bytes"]
    assert memory.batch_scale == pytest.approx(1 + (capacity - peak) / growing, rel=0.01)
    section = report.to_dict(0)["memory"]
    assert section["batch_headroom"]["module"] == memory.peak.module
    assert "grow in proportion to the batch" in section["batch_headroom"]["assumes"]
