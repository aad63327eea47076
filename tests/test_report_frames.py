"""The report's lines say their frame: the header's peaks by type, `--what-if` ratios read the
way round they go, a hidden host transfer's done reads as hidden, and the two allocator peaks
are named so they cannot be read as contradicting. Expected figures come from the chip files,
the HLO's shapes and the trace's own events."""

from __future__ import annotations

from pathlib import Path

import pytest

from hlogap import audit
from hlogap.chips import load_chip
from hlogap.options import AuditOptions
from hlogap.render.text import header_lines, memory_lines, what_if_lines
from hlogap.units import fmt_si, fmt_us
from tests.conftest import AMD_FILES, FIXTURES, SHARED

FLAWS = FIXTURES / "flaws"
V6E = SHARED / "tpu-v6e-offload" / "tpu_inference_2.xplane.pb"


def test_the_header_gives_each_peak_with_its_type(tmp_path: Path) -> None:
    # The flaws profile's matmuls are f32 (their HLO): f32 first, then bf16 for reference,
    # both from the chip file, in one unit.
    chip = tmp_path / "two.toml"
    chip.write_text(
        'name = "two"\n[peak_flops]\nf32 = 1.5e11\nbf16 = 1.26e11\n[memory]\nhbm_bw = 2e10\n'
    )
    report = audit(FLAWS, AuditOptions(chip=str(chip)))
    # The ops' time is in f32 work; what else there is (a pred compare) runs at bf16 here.
    time = {"f32": 0.0, "bf16": 0.0}
    for r in report.ops:
        if r.flops and r.dtype:
            time["f32" if r.dtype in ("f32", "s32") else "bf16"] += r.measured_us
    assert time["f32"] > time["bf16"]
    (line,) = [h for h in header_lines(report) if h.startswith("chip: ")]
    assert "peak f32 150 / bf16 126 GFLOP/s, HBM 20 GB/s" in line


def test_the_header_names_tf32_where_f32_dots_ran_at_it() -> None:
    from hlogap.report.model import AuditReport, OpRow

    h100 = load_chip("h100-sxm")
    flops = 2.0 * 4096**3
    row = OpRow(
        module="m", program_id="1", name="dot", opcode="dot", category="matmul",
        occurrences=1, measured_us=1000.0, bound_us=1.0, bound_by="compute", flops=flops,
        dtype="f32", t_compute_us=flops / h100.peak_flops["tf32"] * 1e6,
    )  # fmt: skip
    report = AuditReport(
        path="p", run=None, files=[], hosts=["h"], backend="gpu", chip=h100,
        chip_source="user", chip_reason="--chip", devices=1, events=1, ops=[row],
    )  # fmt: skip
    (line,) = [h for h in header_lines(report) if h.startswith("chip: ")]
    tf32, bf16 = (h100.peak_flops[k] / 1e12 for k in ("tf32", "bf16"))
    assert f"peak tf32 {tf32:.3g} / bf16 {bf16:.3g} TFLOP/s" in line


def test_what_if_reads_faster_and_slower_the_right_way_round() -> None:
    path = AMD_FILES["mi300x"]
    if not path.is_file():
        pytest.skip(f"{path} absent")
    report = audit(path, AuditOptions(what_if=["h100-sxm", "tpu-v6e"]))
    here = load_chip("mi300x")
    measured = sum(r.measured_us for r in report.ops)
    faster, slower = report.what_if or []
    # Every op is memory-bound on MI300X and H100: there, its bound here times the HBM ratio.
    h100 = load_chip(faster.chip)
    assert all(r.bound_by == "memory" for r in report.ops)
    then = [r.bound_us * here.hbm_bw / h100.hbm_bw for r in report.ops]
    assert [(r.what_if_us or {})[faster.chip] for r in report.ops] == pytest.approx(then)
    speedup = measured / sum(then)
    assert faster.speedup == pytest.approx(speedup) and speedup > 1
    line, other = what_if_lines(report)
    assert f"the ops would run {speedup:.2f}x faster than measured here" in line
    assert faster.step_speedup is not None
    assert f"the step {faster.step_speedup:.2f}x faster (wall, median)" in line
    # tpu-v6e: slower in all (speedup under 1, read as 1 / speedup slower), and the step figure
    # is missing with its reason: the ops whose bound there is above their time here.
    assert slower.speedup is not None and slower.speedup < 1
    assert f"the ops would run {1 / slower.speedup:.2f}x slower" in other
    assert f"speedup {slower.speedup:.2f})" in other
    longer = {
        r.name: (r.what_if_us or {})[slower.chip] / r.measured_us
        for r in report.ops
        if (r.what_if_us or {})[slower.chip] > r.measured_us
    }
    worst = max(longer, key=longer.__getitem__)
    assert slower.step_speedup is None and slower.step_unavailable is not None
    assert f"{len(longer)} op(s) would take longer" in slower.step_unavailable
    assert f"({worst} {longer[worst]:.2f}x)" in slower.step_unavailable
    assert f"step not re-timed: {slower.step_unavailable}" in other
    assert all("the op time now" not in x for x in (line, other))


def _done_waits_ps(path: Path, name: str) -> list[int]:
    """The trace's own events of one op on the TPU planes' `XLA Ops` lines: its waits, each
    the event's `device_duration_ps` stat (the device's own clock) where it has one."""
    from hlogap.proto import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    waits: list[int] = []
    for plane in space.planes:
        if not plane.name.startswith("/device:TPU:"):
            continue
        device_duration = {
            k for k, m in plane.stat_metadata.items() if m.name == "device_duration_ps"
        }
        for line in plane.lines:
            if line.name != "XLA Ops":
                continue
            for event in line.events:
                text = plane.event_metadata[event.metadata_id].name
                if text.split(" = ")[0].lstrip("%") != name:
                    continue
                on_device = [
                    st.int64_value or st.uint64_value
                    for st in event.stats
                    if st.metadata_id in device_duration
                ]
                waits.append(on_device[0] if on_device else event.duration_ps)
    return waits


@pytest.fixture(scope="module")
def offload() -> object:
    if not V6E.is_file():
        pytest.skip(f"{V6E} absent")
    return audit(V6E)


def test_a_hidden_host_transfer_reads_as_hidden(offload: object) -> None:
    from hlogap.report.model import AuditReport

    assert isinstance(offload, AuditReport)
    v6e = load_chip("tpu-v6e")
    assert v6e.host_bw
    moved = 5 * 1024 * 1024 * 256 * 4  # f32[5,1024,1024,256] per copy (its HLO)
    link_s = moved / v6e.host_bw
    in_action = {(o.module, o.name) for a in offload.actions or [] for o in a.ops}
    for name in ("copy-done.1", "copy-done.3"):
        waits = _done_waits_ps(V6E, name)
        assert waits and max(waits) * 1e-12 < link_s  # every wait shorter than the transfer
        row = next(r for r in offload.ops if r.name == name)
        # Each wait is its own bound: bound = measured, nothing lost here, and no action.
        assert row.bound_us == pytest.approx(sum(waits) / 1e6)
        assert row.measured_us == pytest.approx(sum(waits) / 1e6)
        assert (row.module, row.name) not in in_action
        (hint,) = [h for h in row.hints if h.startswith("waits for a 5.37 GB")]
        assert "hidden behind other work" in hint
        assert f"({max(waits) / 1e3:.3g} ns at most)" in hint
        assert f"shorter than the {fmt_us(link_s * 1e6)} its bytes need on the link" in hint
        assert "over its whole window, start to done, the transfer moved" in hint
    # A done that waited longer than its transfer's link time says nothing of hiding.
    done4 = next(r for r in offload.ops if r.name == "copy-done.4")
    assert min(_done_waits_ps(V6E, "copy-done.4")) * 1e-12 > link_s
    assert "hidden" not in done4.hints[0] and "start to done moves" in done4.hints[0]
    assert (done4.module, done4.name) in in_action


def test_the_two_allocator_peaks_are_named_and_reconciled(offload: object) -> None:
    from hlogap.report.model import AuditReport
    from hlogap.trace.reading import read_trace

    assert isinstance(offload, AuditReport)
    events = read_trace(V6E, "tpu_inference_2").allocations
    assert events is not None and offload.memory is not None
    held = offload.memory.runtime_peak
    assert held is not None
    mine = events.allocator == events.names.index(held.name)
    in_use = events.heap_bytes[mine] + events.stack_bytes[mine]
    top = int(in_use.argmax())
    stack, heap = int(events.stack_bytes[mine][top]), int(events.heap_bytes[mine][top])
    assert held.in_use_peak_bytes == stack + heap
    assert held.in_use_stack_bytes == stack
    assert held.peak_bytes == int(events.lifetime_peak_bytes[mine].max())
    assert held.peak_bytes < held.in_use_peak_bytes  # what the review read as a contradiction
    assert heap <= held.peak_bytes  # the heap part never exceeds the heap's own peak
    (line,) = [m for m in memory_lines(offload) if m.startswith("memory at run time")]
    assert (
        f"held {fmt_si(stack + heap, 'B')} at most (heap {fmt_si(heap, 'B')} + reserved stack "
        f"{fmt_si(stack, 'B')}, " in line
    )
    assert f"its heap's own lifetime peak {fmt_si(held.peak_bytes, 'B')} (the heap alone" in line
    assert "own peak" not in line.replace("heap's own lifetime peak", "")
    # The saved report keeps the stack part and reads it back; an older one has none.
    from hlogap.memory.runtime import AllocatorPeak

    saved = held.to_dict()
    assert AllocatorPeak.from_dict(saved, "a") == held
    del saved["in_use_stack_bytes"]
    assert AllocatorPeak.from_dict(saved, "a").in_use_stack_bytes is None


def test_memory_table_and_page_name_the_peaks(
    offload: object, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from tests.conftest import run_cli

    code, out, _ = run_cli(["memory", str(V6E)], capsys)
    assert code == 0
    assert "in use at most" in out and "of it stack" in out and "heap's own peak" in out
    assert "held at most" not in out and " own peak:" not in out.replace("heap's own peak:", "")
    page = tmp_path / "r.html"
    code, _, _ = run_cli(["audit", str(V6E), "-o", str(page)], capsys)
    assert code == 0
    html = page.read_text()
    assert '"of it stack"' in html and "heap's own peak" in html and "held at most" not in html
