"""Command buffers (hlogap.rows.command_buffers): XLA:GPU runs a `call` of a `command_buffer`
computation as one CUDA graph, and the profile times the call, not its ops.

The HLO is what XLA's CommandBufferScheduling pass produces (openxla/xla,
`xla/service/gpu/transforms/command_buffer_scheduling_test.cc`): `command_buffer.hlo.txt` is one
buffer of two loop fusions and a cuBLAS gemm (shapes of its own, so that the ops' bounds differ);
`command_buffers_multiple.hlo.txt` is the pass's `MultipleCommandBuffers` case, two buffers with
custom calls between them. The traces are synthetic `/device:GPU:0` planes, one kernel event per
graph launch, or one per graph node (nsys `--cuda-graph-trace=node`, XLA's graph-node traces).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hlogap.options import AuditOptions
from hlogap.pipeline import audit
from hlogap.proto import xplane_pb2
from hlogap.report.model import AuditReport, OpRow, load_json

HLO = Path(__file__).parent / "hlo"
ONE_BUFFER = HLO / "command_buffer.hlo.txt"
TWO_BUFFERS = HLO / "command_buffers_multiple.hlo.txt"
US = 1_000_000  # ps
Kernel = tuple[str, float, float]  # the op it runs, its start and its duration (us)


def _gpu_trace(directory: Path, module: str, kernels: list[Kernel]) -> Path:
    """One host file. A GPU plane whose stream line holds `kernels`, each with the CUPTI kernel
    stats that name its op (`hlo_op`, `hlo_module` as refs, `program_id`) and its launch's
    `correlation_id`; a host plane where each module execution (one per 100 us) is one
    `<module>:XLA GPU module` event on a thread that launches its kernels."""
    space = xplane_pb2.XSpace()
    space.hostnames.append("gpu-host")
    device = space.planes.add()
    device.id, device.name = 1, "/device:GPU:0"
    host = space.planes.add()
    host.id, host.name = 2, "/host:CPU"

    def stat_id(plane: xplane_pb2.XPlane, name: str) -> int:
        found = next((k for k, v in plane.stat_metadata.items() if v.name == name), None)
        if found is None:
            found = len(plane.stat_metadata) + 1
            plane.stat_metadata[found].id = found
            plane.stat_metadata[found].name = name
        return found

    def event(plane: xplane_pb2.XPlane, line: xplane_pb2.XLine, name: str) -> xplane_pb2.XEvent:
        found = next((k for k, v in plane.event_metadata.items() if v.name == name), None)
        if found is None:
            found = len(plane.event_metadata) + 1
            plane.event_metadata[found].id = found
            plane.event_metadata[found].name = name
        added = line.events.add()
        added.metadata_id = found
        return added

    stream = device.lines.add()
    stream.id, stream.name = 7, "Stream #7(Compute)"
    modules, launches = host.lines.add(), host.lines.add()
    modules.id, modules.name = 1, "XlaLauncher"
    launches.id, launches.name = 2, "CUPTI XlaLauncher"
    for execution in sorted({int(at_us // 100) for _, at_us, _ in kernels}):
        span = event(host, modules, f"{module}:XLA GPU module")
        span.offset_ps, span.duration_ps = execution * 100 * US, 95 * US
    for k, (op, at_us, dur_us) in enumerate(kernels, 1):
        kernel = event(device, stream, f"kernel_{k}")
        kernel.offset_ps, kernel.duration_ps = int(at_us * US), int(dur_us * US)
        for key, ref in (("hlo_op", op), ("hlo_module", module)):
            stat = kernel.stats.add()
            stat.metadata_id, stat.ref_value = stat_id(device, key), stat_id(device, ref)
        for key, value in (("program_id", 1), ("correlation_id", k)):
            stat = kernel.stats.add()
            stat.metadata_id, stat.uint64_value = stat_id(device, key), value
        launch = event(host, launches, "cuLaunchKernel")
        launch.offset_ps, launch.duration_ps = int(at_us // 100) * 100 * US + k * 1000, 500
        stat = launch.stats.add()
        stat.metadata_id, stat.uint64_value = stat_id(host, "correlation_id"), k
    run = directory / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    (run / "gpu-host.xplane.pb").write_bytes(space.SerializeToString())
    return directory


def _dump(directory: Path, hlo: Path, text: str | None = None) -> Path:
    """An `--xla_dump_to` directory holding the module's optimized text."""
    directory.mkdir()
    target = directory / f"module_0001.{hlo.stem}.sm_9.0_gpu_after_optimizations.txt"
    if text is None:
        shutil.copy(hlo, target)
    else:
        target.write_text(text)
    return directory


def _audit(tmp_path: Path, module: str, kernels: list[Kernel], hlo: Path) -> AuditReport:
    logdir = _gpu_trace(tmp_path / "logdir", module, kernels)
    return audit(logdir, AuditOptions(chip="h100-sxm", hlo_dump=_dump(tmp_path / "dump", hlo)))


def _row(report: AuditReport, name: str) -> OpRow:
    return next(r for r in report.ops if r.name == name)


# Three launches of the graph, 40, 50 and 60 us.
GRAPH_LAUNCHES: list[Kernel] = [("call", 100.0 * k, 40.0 + 10 * k) for k in range(3)]


def test_the_buffer_is_one_measured_row_and_its_ops_share_its_time(tmp_path: Path) -> None:
    report = _audit(tmp_path, "jit_step", GRAPH_LAUNCHES, ONE_BUFFER)
    assert [r.name for r in report.ops] == ["call"]  # its ops are no rows of the report
    call = _row(report, "call")
    assert call.category == "command buffer" and not call.estimated
    assert call.occurrences == 3 and call.measured_us == pytest.approx(150.0)
    ops = call.command_buffer_ops
    assert [r.name for r in ops] == ["fusion.2", "fusion.3", "custom-call.1"]
    assert all(r.estimated and r.events == 0 and r.occurrences == 3 for r in ops)
    # The estimates add up to the buffer's measured time, each in proportion to its bound.
    assert sum(r.measured_us for r in ops) == pytest.approx(call.measured_us, rel=1e-12)
    bounds = sum(r.bound_us for r in ops)
    for r in ops:
        assert r.bound_us > 0
        assert r.measured_us / call.measured_us == pytest.approx(r.bound_us / bounds, rel=1e-12)
    # The buffer is bounded by the sum of its ops' bounds (they run one after another).
    assert call.bound_us == pytest.approx(bounds, rel=1e-12)
    assert call.bound_us > 0 and call.bound_by != "unmodeled"
    # The gemm's FLOPs from its dot dimensions: f32[256,512] x f32[512,128].
    gemm = ops[2]
    assert gemm.flops == 2 * 256 * 512 * 128
    assert any(h.startswith("estimated: ") for h in gemm.hints)
    assert any(h.startswith("its ops' estimated times: ") for h in call.hints)


def test_the_split_leaves_the_device_time_totals_as_they_were(tmp_path: Path) -> None:
    """The same trace and HLO, but the called computation is no command buffer: nothing is
    split. Every device-time total is the same, and the events' own sum."""
    report = _audit(tmp_path / "split", "jit_step", GRAPH_LAUNCHES, ONE_BUFFER)
    plain_hlo = ONE_BUFFER.read_text().replace("command_buffer", "graph_body")
    logdir = _gpu_trace(tmp_path / "plain" / "logdir", "jit_step", GRAPH_LAUNCHES)
    plain = audit(
        logdir,
        AuditOptions(
            chip="h100-sxm", hlo_dump=_dump(tmp_path / "plain" / "dump", ONE_BUFFER, plain_hlo)
        ),
    )
    assert not _row(plain, "call").command_buffer_ops
    events_us = sum(dur for _, _, dur in GRAPH_LAUNCHES)
    split_summary, plain_summary = report.summary_dict(), plain.summary_dict()
    for key in ("measured_us", "event_us", "busy_us", "idle_us", "device_wall_us", "steps"):
        assert split_summary[key] == plain_summary[key], key
    assert split_summary["measured_us"] == pytest.approx(events_us)
    assert report.steps, "the module's executions are the steps"
    assert sum(s.measured_us for s in report.steps) == pytest.approx(events_us)
    assert [s.measured_us for s in report.steps] == [s.measured_us for s in plain.steps]


def test_json_lists_the_ops_under_the_buffer_and_reads_back(tmp_path: Path) -> None:
    report = _audit(tmp_path, "jit_step", GRAPH_LAUNCHES, ONE_BUFFER)
    data = report.to_dict(top=0)
    (call,) = data["ops"]
    assert call["estimated"] is False and len(call["command_buffer_ops"]) == 3
    assert [r["estimated"] for r in call["command_buffer_ops"]] == [True] * 3
    assert [r["rank"] for r in call["command_buffer_ops"]] == [1, 2, 3]
    assert data["summary"]["measured_us"] == pytest.approx(call["measured_us"])
    saved = tmp_path / "report.json"
    saved.write_text(json.dumps(data))
    loaded = load_json(saved, "report")
    assert loaded.ops[0].command_buffer_ops == report.ops[0].command_buffer_ops
    assert loaded.measured_us == pytest.approx(report.measured_us)
    # A buffer op that holds ops of its own is no report hlogap writes.
    call["command_buffer_ops"][0]["command_buffer_ops"] = [call["command_buffer_ops"][1]]
    saved.write_text(json.dumps(data))
    with pytest.raises(Exception, match="command buffer ops of its own"):
        load_json(saved, "report")


def test_a_graph_traced_node_by_node_is_measured_op_by_op(tmp_path: Path) -> None:
    """Per-node records (nsys --cuda-graph-trace=node): each node's kernel names its own op,
    so the ops are measured rows and nothing is estimated."""
    nodes: list[Kernel] = []
    for k in range(3):
        nodes += [
            ("fusion.2", 100.0 * k, 10.0),
            ("fusion.3", 100.0 * k + 11, 12.0),
            ("custom-call.1", 100.0 * k + 24, 20.0),
        ]
    report = _audit(tmp_path, "jit_step", nodes, ONE_BUFFER)
    assert sorted(r.name for r in report.ops) == ["custom-call.1", "fusion.2", "fusion.3"]
    assert not any(r.estimated or r.command_buffer_ops for r in report.ops)
    assert _row(report, "fusion.3").measured_us == pytest.approx(36.0)
    assert _row(report, "custom-call.1").flops == 2 * 256 * 512 * 128


def test_two_buffers_each_split_among_their_own_ops(tmp_path: Path) -> None:
    """XLA's MultipleCommandBuffers: two graphs, custom calls (timed as kernels) between them."""
    kernels: list[Kernel] = []
    for k in range(2):
        at = 100.0 * k
        kernels += [
            ("call", at, 8.0),
            ("custom-call", at + 10, 5.0),
            ("call.1", at + 20, 6.0),
            ("custom-call.1", at + 30, 4.0),
        ]
    report = _audit(tmp_path, "jit_two_graphs", kernels, TWO_BUFFERS)
    first, second = _row(report, "call"), _row(report, "call.1")
    assert [r.name for r in first.command_buffer_ops] == ["fusion", "fusion.1"]
    assert [r.name for r in second.command_buffer_ops] == ["fusion.2", "fusion.3"]
    for call, measured in ((first, 16.0), (second, 12.0)):
        assert call.measured_us == pytest.approx(measured)
        assert sum(r.measured_us for r in call.command_buffer_ops) == pytest.approx(measured)
    # The custom calls between the graphs are timed on their own: measured, unmodeled.
    outside = _row(report, "custom-call")
    assert not outside.estimated and not outside.command_buffer_ops
    assert outside.bound_by == "unmodeled" and outside.measured_us == pytest.approx(10.0)
    assert report.measured_us == pytest.approx(sum(dur for _, _, dur in kernels))


@pytest.mark.parametrize("per_node", [False, True])
def test_nsys_graph_launches_are_split_and_graph_nodes_measured(
    tmp_path: Path, per_node: bool
) -> None:
    """An nsys-jax archive: the call's thunk range is the graph's launch; traced node by node
    (--cuda-graph-trace=node) the call's range holds its nodes' ranges and is a container."""
    pytest.importorskip("pyarrow")
    from tests.test_nsys import _archive, _range

    rows = []
    for k in range(2):
        module, call, at = 100 * k + 1, 100 * k + 2, 10_000 * k
        rows += [
            _range(module, "TSL:XlaModule:#hlo_module=jit_step,program_id=1#", at, 9000, None, 5),
            _range(call, "TSL:Thunk:#hlo_op=call#", at, 6000, module, 5),
        ]
        if per_node:
            rows += [
                _range(call + k2 + 1, f"TSL:Thunk:#hlo_op={name}#", at + 2000 * k2, dur, call, 5)
                for k2, (name, dur) in enumerate(
                    (("fusion.2", 1500), ("fusion.3", 1000), ("custom-call.1", 1800))
                )
            ]
    archive = _archive(tmp_path, rows)
    report = audit(
        archive, AuditOptions(chip="h100-sxm", hlo_dump=_dump(tmp_path / "dump", ONE_BUFFER))
    )
    if per_node:
        assert sorted(r.name for r in report.ops) == ["custom-call.1", "fusion.2", "fusion.3"]
        assert not any(r.estimated or r.command_buffer_ops for r in report.ops)
        assert _row(report, "fusion.2").measured_us == pytest.approx(3.0)
        assert report.measured_us == pytest.approx(2 * 4.3)
    else:
        (call,) = report.ops
        assert call.name == "call" and call.occurrences == 2
        assert call.measured_us == pytest.approx(12.0)
        assert sum(r.measured_us for r in call.command_buffer_ops) == pytest.approx(12.0)
        assert all(r.estimated for r in call.command_buffer_ops)


def test_what_if_bounds_the_buffer_by_its_ops_on_the_other_chip(tmp_path: Path) -> None:
    from hlogap.bounds.roofline import bound_op
    from hlogap.chips import load_chip
    from hlogap.cost import cost_instruction
    from hlogap.hlo.text import parse_module

    logdir = _gpu_trace(tmp_path / "logdir", "jit_step", GRAPH_LAUNCHES)
    report = audit(
        logdir,
        AuditOptions(
            chip="h100-sxm", hlo_dump=_dump(tmp_path / "dump", ONE_BUFFER), what_if=["b200"]
        ),
    )
    module = parse_module(ONE_BUFFER.read_text())
    body = module.computation("command_buffer")
    assert body is not None
    b200 = load_chip("b200")
    per_launch_s = sum(
        bound_op(cost_instruction(op, module), b200).lower_s
        for op in body.instructions
        if op.name in ("fusion.2", "fusion.3", "custom-call.1")
    )
    what_if = _row(report, "call").what_if_us
    assert what_if is not None
    assert what_if["b200"] == pytest.approx(per_launch_s * 1e6 * 3, rel=1e-12)


def test_group_by_scope_gives_the_buffer_time_to_its_ops_scopes(tmp_path: Path) -> None:
    from hlogap.rows.groups import group_rows

    text = ONE_BUFFER.read_text()
    for name, scope in (("fusion.2", "jit(step)/add"), ("custom-call.1", "jit(step)/dense")):
        line = next(ln for ln in text.splitlines() if ln.lstrip().startswith(f"%{name} ="))
        text = text.replace(line, f'{line}, metadata={{op_name="{scope}"}}')
    logdir = _gpu_trace(tmp_path / "logdir", "jit_step", GRAPH_LAUNCHES)
    report = audit(
        logdir, AuditOptions(chip="h100-sxm", hlo_dump=_dump(tmp_path / "dump", ONE_BUFFER, text))
    )
    (call,) = report.ops
    by_op = {r.name: r for r in call.command_buffer_ops}
    groups = {g.name: g for g in group_rows(report.ops, "scope", 3, "gap")}
    assert set(groups) == {"jit(step)/add", "jit(step)/dense", "(unknown)"}
    assert groups["jit(step)/dense"].measured_us == by_op["custom-call.1"].measured_us
    assert groups["(unknown)"].measured_us == by_op["fusion.3"].measured_us
    assert sum(g.measured_us for g in groups.values()) == pytest.approx(call.measured_us)
    assert sum(g.bound_us for g in groups.values()) == pytest.approx(call.bound_us)
    # By category the call stays one command buffer.
    (category,) = group_rows(report.ops, "category", 3, "gap")
    assert category.name == "command buffer" and category.measured_us == call.measured_us


def test_a_buffer_faster_than_its_summed_roof_is_bounded_by_its_time(tmp_path: Path) -> None:
    """Launches of 0.5 us, under the ops' summed HBM bound (1.06 us): the GPU's L2 cache kept
    data between the graph's nodes. The call's floor is its measured time, and so is each
    op's: its estimate."""
    launches: list[Kernel] = [("call", 100.0 * k, 0.5) for k in range(3)]
    report = _audit(tmp_path, "jit_step", launches, ONE_BUFFER)
    (call,) = report.ops
    assert call.bound_us == call.measured_us == pytest.approx(1.5)
    assert any(h.startswith("beats the HBM roof") for h in call.hints)
    for op in call.command_buffer_ops:
        assert op.bound_us == op.measured_us
    assert sum(r.bound_us for r in call.command_buffer_ops) == pytest.approx(call.bound_us)


def test_a_buffer_with_an_unmodeled_op_is_split_equally(tmp_path: Path) -> None:
    """XLA's scheduling test runs custom calls of `some target`: with one inside, the call has
    no bound (its share of the time is unknown) and the time is split equally."""
    text = ONE_BUFFER.read_text().replace("__cublas$gemm", "some target")
    logdir = _gpu_trace(tmp_path / "logdir", "jit_step", GRAPH_LAUNCHES)
    report = audit(
        logdir, AuditOptions(chip="h100-sxm", hlo_dump=_dump(tmp_path / "dump", ONE_BUFFER, text))
    )
    (call,) = report.ops
    assert call.bound_by == "unmodeled" and call.bound_us == 0
    ops = call.command_buffer_ops
    assert [r.measured_us for r in ops] == pytest.approx([50.0, 50.0, 50.0])
    assert ops[2].bound_by == "unmodeled" and ops[0].bound_us > 0
    assert all("equally" in r.hints[0] for r in ops)


def test_a_command_buffer_formed_from_thunks_is_named_for_what_it_is(tmp_path: Path) -> None:
    """Newer XLA:GPU forms command buffers from the thunk sequence (CommandBufferConversionPass)
    and names each `command_buffer_<id of its first thunk>`: the HLO has no such instruction and
    does not say which ops it ran. The row says so, not just "no instruction"."""
    launches: list[Kernel] = [("command_buffer_7", 100.0 * k, 20.0) for k in range(2)]
    report = _audit(tmp_path, "jit_step", launches, ONE_BUFFER)
    (row,) = report.ops
    assert row.category == "command buffer" and row.bound_by == "unmodeled"
    assert row.measured_us == pytest.approx(40.0) and not row.command_buffer_ops
    assert row.hints[0].startswith("unmodeled: a command buffer XLA:GPU formed from its thunks")
