"""Round 4 (issue 44): a mesh hang, memory sizes that are not sizes, a gate that failed open, a
rank left out in silence, an impossible baseline, options and names that slipped through.

Every input is built at test time from the shared fixtures (skipped when they are absent) or the
committed ones, and run through the CLI as a user would (harness.run: a real process with a
deadline)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from hlogap.proto import hlo_pb2, xplane_pb2
from tests.attack.harness import FIXTURES, assert_clean, chip_file, logdir_copy, run
from tests.conftest import SHARED

V6E = SHARED / "tpu-v6e-offload" / "tpu_inference_2.xplane.pb"
NSYS = SHARED / "nvidia-h100-nsys-jax" / "maxtext_fsdp4_test_data.zip"


def _v6e() -> xplane_pb2.XSpace:
    if not V6E.is_file():
        pytest.skip(f"the shared fixture {V6E} is absent")
    return xplane_pb2.XSpace.FromString(V6E.read_bytes())


def _write(tmp: Path, space: xplane_pb2.XSpace, name: str = "tb") -> Path:
    """`space` as the one host file of a run directory; returns the logdir."""
    out = tmp / name / "plugins" / "profile" / "run1" / "host0.xplane.pb"
    out.parent.mkdir(parents=True)
    out.write_bytes(space.SerializeToString())
    return tmp / name


def _hlo_stats(space: xplane_pb2.XSpace, module: str) -> list[xplane_pb2.XStat]:
    """The `Hlo Proto` stats of the modules whose name is `module` (the host metadata plane)."""
    found = []
    for plane in space.planes:
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for md in plane.event_metadata.values():
            if md.name.split("(")[0] == module:
                found += [s for s in md.stats if names.get(s.metadata_id) == "Hlo Proto"]
    assert found, module
    return found


def _edit_assignment(
    space: xplane_pb2.XSpace, module: str, edit: Callable[[hlo_pb2.BufferAssignmentProto], None]
) -> None:
    """Apply `edit` to the buffer assignment carried beside `module`'s HLO."""
    for stat in _hlo_stats(space, module):
        carried = hlo_pb2.HloProtoBufferAssignment.FromString(stat.bytes_value)
        edit(carried.buffer_assignment)
        module_only = hlo_pb2.HloProto.FromString(stat.bytes_value)  # drops field 3
        stat.bytes_value = module_only.SerializeToString() + carried.SerializeToString()


# --- High ---------------------------------------------------------------------------------


def test_uneven_replica_groups_give_no_mesh_and_the_audit_goes_on(tmp_path: Path) -> None:
    """{{0,2,3},{1}}: no mesh holds such groups (docs/mesh.md); `_atoms` looped forever."""
    space = _v6e()
    for stat in _hlo_stats(space, "jit__psum"):
        proto = hlo_pb2.HloProto.FromString(stat.bytes_value)
        changed = 0
        for comp in proto.hlo_module.computations:
            for inst in comp.instructions:
                if inst.opcode == "all-reduce":
                    inst.ClearField("collective_device_list")
                    del inst.replica_groups[:]
                    inst.replica_groups.add().replica_ids.extend([0, 2, 3])
                    inst.replica_groups.add().replica_ids.extend([1])
                    changed += 1
        assert changed
        stat.bytes_value = proto.SerializeToString()
    logdir = _write(tmp_path, space)
    result = run(["audit", str(logdir), "-f", "json", "--top", "0"], tmp_path, timeout=60)
    assert_clean(result, (0,))
    report = json.loads(result.out)
    assert report["ops"]
    # The module's declared sharding still cuts a mesh; the all-reduce's groups are no part of it.
    assert report["mesh"] is None or report["mesh"]["collectives"] == 0, report["mesh"]
    check = run(
        ["check", str(logdir), "--baseline", str(logdir)], tmp_path, timeout=60
    )  # and so `check`, which audits both sides
    assert_clean(check, (0,))


def _allocations(size: int) -> Callable[[hlo_pb2.BufferAssignmentProto], None]:
    def edit(assignment: hlo_pb2.BufferAssignmentProto) -> None:
        for a in assignment.buffer_allocations:
            a.size = size

    return edit


def test_negative_allocation_sizes_fail_the_memory_gate(tmp_path: Path) -> None:
    """`ok static memory peak -4.4 TB` under `--max-peak-hbm 1GB`: a corrupt profile, exit 3."""
    clean = _write(tmp_path, _v6e(), "clean")
    baseline = tmp_path / "base.json"
    saved = run(["audit", str(clean), "-f", "json", "-o", str(baseline)], tmp_path)
    assert_clean(saved, (0,))
    space = _v6e()
    _edit_assignment(space, "jit_f", _allocations(-(2**40)))
    bad = _write(tmp_path, space, "bad")
    result = run(
        ["check", str(bad), "--baseline", str(baseline), "--max-peak-hbm", "1GB"], tmp_path
    )
    assert_clean(result, (3,))
    assert result.err.count("\n") == 1 and "corrupt profile" in result.err, result.err
    assert "jit_f" in result.err
    assert "ok static memory peak" not in result.out


def _nsys_ranks(tmp: Path, cut: int = 5000) -> Path:
    if not NSYS.is_file():
        pytest.skip(f"the shared fixture {NSYS} is absent")
    pytest.importorskip("pyarrow")
    ranks = tmp / "ranks"
    ranks.mkdir()
    shutil.copyfile(NSYS, ranks / "rank0.zip")
    (ranks / "rank1.zip").write_bytes(NSYS.read_bytes()[:cut])  # cut short
    return ranks


@pytest.mark.parametrize("cut", [5000, 100, 3, 0])
def test_a_corrupt_rank_is_named_never_left_out(cut: int, tmp_path: Path) -> None:
    ranks = _nsys_ranks(tmp_path, cut)
    result = run(["audit", str(ranks)], tmp_path, timeout=60)
    assert_clean(result, (3,))
    assert result.err.count("\n") == 1 and "rank1.zip" in result.err, result.err
    gate = run(["check", str(ranks), "--baseline", str(ranks)], tmp_path, timeout=60)
    assert_clean(gate, (3,))
    assert "rank1.zip" in gate.err


def test_a_corrupt_rank_skipped_is_named_in_a_warning(tmp_path: Path) -> None:
    ranks = _nsys_ranks(tmp_path)
    result = run(
        ["audit", str(ranks), "--skip-bad-hosts", "-f", "json", "--top", "0"], tmp_path, timeout=60
    )
    assert_clean(result, (0,))
    warnings = json.loads(result.out)["warnings"]
    assert any("rank1" in w and "skipped" in w for w in warnings), warnings


def test_a_zip_that_is_no_trace_beside_the_ranks_is_left_alone(tmp_path: Path) -> None:
    """A readable zip without an nsys-jax trace, or a file that is no zip at all, is something
    else than a rank."""
    ranks = _nsys_ranks(tmp_path)
    (ranks / "rank1.zip").unlink()
    shutil.make_archive(str(ranks / "notes"), "zip", root_dir=FIXTURES / "mlp", base_dir=".")
    (ranks / "readme.zip").write_text("not an archive of the run")
    result = run(["audit", str(ranks), "-f", "json"], tmp_path, timeout=60)
    assert_clean(result, (0,))


# --- Medium: memory sizes that are not sizes ------------------------------------------------


def _logical(size: int) -> Callable[[hlo_pb2.BufferAssignmentProto], None]:
    def edit(assignment: hlo_pb2.BufferAssignmentProto) -> None:
        for b in assignment.logical_buffers:
            b.size = size

    return edit


def _heap(how: str) -> Callable[[hlo_pb2.BufferAssignmentProto], None]:
    def edit(assignment: hlo_pb2.BufferAssignmentProto) -> None:
        for trace in assignment.heap_simulator_traces:
            events = list(trace.events)
            if how == "backwards":
                events.reverse()
            else:  # frees only
                events = [e for e in events if e.kind == 1]
            del trace.events[:]
            trace.events.extend(events)

    return edit


MEMORY_CASES: dict[str, Callable[[hlo_pb2.BufferAssignmentProto], None]] = {
    "allocations 2^62": _allocations(2**62),
    "allocations -2^40": _allocations(-(2**40)),
    "logical buffers -2^50": _logical(-(2**50)),
    "logical buffers 2^62": _logical(2**62),
    "heap trace backwards": _heap("backwards"),
    "heap trace of frees only": _heap("frees"),
}


@pytest.mark.parametrize("how", sorted(MEMORY_CASES))
@pytest.mark.parametrize("command", ["memory", "audit"])
def test_memory_sizes_that_are_not_sizes_are_a_corrupt_profile(
    how: str, command: str, tmp_path: Path
) -> None:
    space = _v6e()
    _edit_assignment(space, "jit_f", MEMORY_CASES[how])
    logdir = _write(tmp_path, space)
    result = run([command, str(logdir), "-f", "json"], tmp_path)
    assert_clean(result, (3,))
    assert result.err.count("\n") == 1 and "corrupt profile" in result.err, result.err
    assert not result.out


def test_the_clean_memory_section_is_unchanged(tmp_path: Path) -> None:
    """The guards refuse nothing real: the v6e profile's memory, every byte count >= 0."""
    result = run(["memory", str(_write(tmp_path, _v6e())), "-f", "json"], tmp_path)
    assert_clean(result, (0,))
    modules = json.loads(result.out)["memory"]["modules"]
    assert {m["module"] for m in modules} >= {"jit_f"}
    for m in modules:
        assert all(v >= 0 for v in m["live_curve"]), m["module"]
        assert all(b["bytes"] >= 0 for b in m["at_peak"]), m["module"]
        assert m["peak_bytes"] >= 0


@pytest.fixture(scope="module")
def sample_report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("round4")
    result = run(["audit", str(logdir_copy(tmp)), "--chip", str(chip_file(tmp)), "-f", "json"], tmp)
    assert result.code == 0, result.err
    loaded: dict = json.loads(result.out)
    return loaded


@pytest.mark.parametrize("value", [1e308, 1.7e308])
def test_a_baseline_whose_totals_overflow_is_corrupt(
    value: float, sample_report: dict, tmp_path: Path
) -> None:
    """Every `measured_us` 1e308: finite each, infinite in sum (`ok total gap inf s -> ...`)."""
    base = json.loads(json.dumps(sample_report))
    for op in base["ops"]:
        op["measured_us"] = value
    (tmp_path / "base.json").write_text(json.dumps(base))
    (tmp_path / "now.json").write_text(json.dumps(sample_report))
    result = run(["check", "now.json", "--baseline", "base.json"], tmp_path)
    assert_clean(result, (3,))
    assert "baseline" in result.err and "nan" not in result.out


# --- Low ------------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", ["", " ", ".", "1.2.3", "1e999", "inf", "nan", "-5GB"])
def test_a_peak_limit_that_is_no_limit_is_a_usage_error(
    limit: str, sample_report: dict, tmp_path: Path
) -> None:
    """`--max-peak-hbm ''` (an unset CI variable) turned the memory gate off."""
    (tmp_path / "r.json").write_text(json.dumps(sample_report))
    result = run(["check", "r.json", "--baseline", "r.json", "--max-peak-hbm", limit], tmp_path)
    assert_clean(result, (2,))
    assert "--max-peak-hbm" in result.err


def test_control_characters_in_a_chip_name_never_reach_the_table(tmp_path: Path) -> None:
    chip = tmp_path / "x.toml"
    chip.write_text(
        'name = "x\\u001b[31m\\u0007"\ndisplay = "X\\u001b]0;title\\u0007 chip"\n'
        "[peak_flops]\nf32 = 1.0e11\n[memory]\nhbm_bw = 2.0e10\n"
    )
    logdir = logdir_copy(tmp_path)
    for args in (
        ["--chip", str(chip)],
        ["--chip", str(chip_file(tmp_path)), "--what-if", str(chip)],
    ):
        result = run(["audit", str(logdir), *args], tmp_path)
        assert_clean(result, (0,))
        assert "\x1b" not in result.out and "\x07" not in result.out, result.out
        assert "x[31m" in result.out  # the name, its control characters dropped


@pytest.mark.parametrize("fixture", ["mi300x_conv3d", "mi355x_te_attention"])
def test_a_plot_of_ops_that_took_no_time(fixture: str, tmp_path: Path) -> None:
    """Every event of 0 duration: the warning that the ops beat their bounds divided by the
    measured time (ZeroDivisionError, exit 4)."""
    pytest.importorskip("matplotlib")
    source = SHARED / "amd-gpu" / f"{fixture}.xplane.pb"
    if not source.is_file():
        pytest.skip(f"the shared fixture {source} is absent")
    space = xplane_pb2.XSpace.FromString(source.read_bytes())
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events:
                event.duration_ps = 0
    logdir = _write(tmp_path, space)
    result = run(["audit", str(logdir), "--plot", "c.svg", "-f", "json"], tmp_path)
    assert_clean(result, (0,))
    assert (tmp_path / "c.svg").stat().st_size > 0
    report = json.loads(result.out)
    assert any("took no time" in w for w in report["warnings"]), report["warnings"]


@pytest.mark.parametrize(
    "hlo",
    [
        "%t = f32[3,2]{1,0} transpose(f32[2,3]{1,0} %x), dimensions={0}",
        "%t = f32[3,2]{1,0} transpose(f32[2,3]{1,0} %x), dimensions={0,0}",
        "%t = f32[3,2]{1,0} transpose(f32[2,3]{1,0} %x), dimensions={0,1}",
        "%c = f32[8,128]{1,0:T(0,128)} copy(f32[8,128]{1,0:T(8,128)} %x)",
        "%c = f32[8,128]{1,0:T(8,128)} copy(f32[8,128]{1,0:T(8,-3)} %x)",
    ],
    ids=["short permutation", "repeated axis", "shapes not permuted", "zero tile", "negative tile"],
)
def test_invalid_hlo_text_is_malformed(hlo: str, tmp_path: Path) -> None:
    """Invalid HLO, not an op to cost: `bound` says malformed HLO (exit 3: corrupt input)."""
    result = run(["bound", hlo, "--chip", "h100-sxm", "-f", "json"], tmp_path)
    assert_clean(result, (3,))
    assert "malformed HLO" in result.err


def test_a_valid_transpose_and_tiles_still_parse(tmp_path: Path) -> None:
    hlo = "%t = f32[3,2]{0,1:T(2,128)(2,1)} transpose(f32[2,3]{1,0:T(8,128)} %x), dimensions={1,0}"
    result = run(["bound", hlo, "--chip", "h100-sxm", "-f", "json"], tmp_path)
    assert_clean(result, (0,))
    assert json.loads(result.out)["bound_by"] != "unmodeled"


def test_a_zero_tile_in_a_module_s_hlo_proto_is_said_not_costed(tmp_path: Path) -> None:
    """The HloProto's layouts follow the text's rule: the module is undecodable, its ops
    unmodeled with the reason (never a cost divided by a tile of 0)."""
    source = next((FIXTURES / "mlp").rglob("*.xplane.pb"))
    space = xplane_pb2.XSpace.FromString(source.read_bytes())
    edited = 0
    for plane in space.planes:
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for md in plane.event_metadata.values():
            for stat in md.stats:
                if names.get(stat.metadata_id) != "Hlo Proto":
                    continue
                proto = hlo_pb2.HloProto.FromString(stat.bytes_value)
                inst = next(
                    i
                    for c in proto.hlo_module.computations
                    for i in c.instructions
                    if len(i.shape.dimensions) == 2
                )
                inst.shape.layout.tiles.add().dimensions.extend([0, 128])
                rest = hlo_pb2.HloProtoBufferAssignment.FromString(stat.bytes_value)
                stat.bytes_value = proto.SerializeToString() + rest.SerializeToString()
                edited += 1
    assert edited
    result = run(
        ["audit", str(_write(tmp_path, space)), "--chip", str(chip_file(tmp_path)), "-f", "json"],
        tmp_path,
    )
    assert_clean(result, (0,))
    ops = json.loads(result.out)["ops"]
    assert ops and all(o["bound_by"] == "unmodeled" for o in ops), ops
    assert all(any("tile size below 1" in h for h in o["hints"]) for o in ops), ops[0]["hints"]


@pytest.mark.parametrize("value", [2**64, float("inf"), float("nan"), -1])
def test_a_saved_report_s_memory_out_of_range_is_corrupt(value: float, tmp_path: Path) -> None:
    """A saved report's byte counts are a profile's: 0 to 2^50 (2^64 failed JSON output)."""
    saved = run(["audit", str(_write(tmp_path, _v6e())), "-f", "json"], tmp_path)
    assert_clean(saved, (0,))
    report = json.loads(saved.out)
    assert report["memory"]["modules"]
    for m in report["memory"]["modules"]:
        m["peak_bytes"] = value
    (tmp_path / "bad.json").write_text(json.dumps(report))
    (tmp_path / "good.json").write_text(saved.out)
    for args in (
        ["check", "bad.json", "--baseline", "good.json", "--max-peak-hbm", "1GB"],
        ["diff", "good.json", "bad.json", "-f", "json"],
    ):
        result = run(args, tmp_path)
        assert_clean(result, (3,))
        assert "peak_bytes" in result.err, result.err
