"""Pallas/Mosaic kernels (`tpu_custom_call`): costed from their own `cost_estimate`.

A synthetic TPU trace (tests/tpu_trace.py) runs a Pallas matmul whose HLO text carries the
estimate in its backend config, laid out as jax's `tpu_custom_call.CustomCallBackendConfig`
writes it (`custom_call_config.cost_estimate`, compact JSON with sorted keys). The real v6e
Pallas profile (`../shared/fixtures/tpu-v6e-pallas/`) has no estimate: its kernel is unmodeled
with the advice to pass one, and with the estimate written into its module's backend config it
gets a bound.
"""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import pytest

from hlogap import audit
from hlogap.cost import cost_instruction
from hlogap.hlo.text import parse_instruction
from hlogap.proto import hlo_pb2, xplane_pb2
from hlogap.report.codec import decode
from hlogap.report.model import OpRow
from tests import tpu_trace as tt
from tests.conftest import SHARED

PALLAS_RUN = SHARED / "tpu-v6e-pallas" / "plugins" / "profile" / "run1"

# The fixture's kernel: m, k, n = 2048, 1024, 2048, f32 operands and result.
M, K, N = 2048, 1024, 2048
FLOPS = 2 * M * K * N
BYTES = 4 * (M * K + K * N + M * N)


def _estimate(flops: int, nbytes: int) -> str:
    return json.dumps(
        {
            "bytes_accessed": nbytes,
            "flops": flops,
            "remote_bytes_transferred": 0,
            "transcendentals": 0,
        },
        separators=(",", ":"),
        sort_keys=True,
    )


def _kernel_text(estimate: str | None) -> str:
    cfg = '{"body":"TUzvUgFNTElSMjMuMC4wZ2l0"'
    cfg += f',"cost_estimate":{estimate}' if estimate is not None else ""
    cfg += ',"needs_layout_passes":true}'
    return (
        f"%matmul.1 = f32[{M},{N}]{{1,0:T(8,128)}} custom-call(f32[{M},{K}]{{1,0:T(8,128)}} "
        f'%x.1, f32[{K},{N}]{{1,0:T(8,128)}} %y.1), custom_call_target="tpu_custom_call", '
        f'backend_config={{"flag_configs":[],"custom_call_config":{cfg}}}'
    )


def test_estimate_is_the_cost() -> None:
    cost = cost_instruction(parse_instruction(_kernel_text(_estimate(FLOPS, BYTES))))
    assert cost.unmodeled is None
    assert cost.flops == cost.matrix_flops == FLOPS and cost.matrix_dtype == "f32"
    assert cost.hbm_bytes == BYTES
    assert cost.hbm_write_bytes == 4 * M * N  # its output; the rest of the estimate is read


def test_no_estimate_says_to_pass_one() -> None:
    cost = cost_instruction(parse_instruction(_kernel_text(None)))
    assert cost.unmodeled is not None and "cost_estimate=" in cost.unmodeled
    assert cost.flops == 0


@pytest.mark.parametrize("bad", ['"lots"', "-1", "1e400", "true"])
def test_an_estimate_that_is_not_a_count_is_unmodeled(bad: str) -> None:
    estimate = _estimate(FLOPS, BYTES).replace(f'"flops":{FLOPS}', f'"flops":{bad}')
    cost = cost_instruction(parse_instruction(_kernel_text(estimate)))
    assert cost.unmodeled is not None and "cost_estimate=" in cost.unmodeled


def _trace(tmp_path: Path, flops: int, nbytes: int, device_ps: int) -> Path:
    kernel = tt.TpuOp("matmul.1", _kernel_text(_estimate(flops, nbytes)), "custom-call")
    program = tt.Program("jit_matmul", 17342868964687645945)
    runs = [
        tt.Execution(program, [tt.Run(kernel, device_ps, gap_ps=1250)], run_id=k + 1)
        for k in range(3)
    ]
    spec = tt.TraceSpec("pallas", tt.V6E, [program], [tt.Device(0, runs)])
    path = tmp_path / "host.xplane.pb"
    tt.write_tpu_trace(path, spec)
    return path


def test_synthetic_trace_bound_from_the_estimate(tmp_path: Path) -> None:
    path = _trace(tmp_path, FLOPS, BYTES, 75_000_000)
    (row,) = audit(path).ops
    assert (row.flops, row.bytes) == (FLOPS, BYTES)
    assert row.occurrences == 3 and row.bound_by == "memory"
    # 33.6 MB at v6e's 1.638 TB/s: 20.5 us per run against 75 us measured.
    assert row.bound_us == pytest.approx(3 * BYTES / 1.638e12 * 1e6)
    assert row.efficiency == pytest.approx(BYTES / 1.638e12 / 75e-6)


def test_an_estimate_above_what_ran_is_bounded_by_the_run(tmp_path: Path) -> None:
    path = _trace(tmp_path, FLOPS, 100 * BYTES, 75_000_000)  # claims 3.4 GB in 75 us
    (row,) = audit(path).ops
    assert row.efficiency == pytest.approx(1.0)
    assert row.hints[0].startswith("beats the bound of its own cost_estimate")


def _real_profile() -> Path:
    path = PALLAS_RUN / "host0.xplane.pb"
    if not path.is_file():
        pytest.skip(f"{path} absent (../shared not beside the project)")
    return path


def test_real_kernel_without_estimate_is_unmodeled_with_advice() -> None:
    (row,) = audit(_real_profile()).ops
    assert row.bound_by == "unmodeled" and row.flops == 0
    assert "cost_estimate=" in row.hints[0]


def _with_estimate(src: Path, dst: Path, estimate: str) -> None:
    """The real profile with `estimate` written into its module's kernel backend config."""
    space = xplane_pb2.XSpace.FromString(src.read_bytes())
    (meta,) = (p for p in space.planes if p.name == "/host:metadata")
    names = {k: v.name for k, v in meta.stat_metadata.items()}
    written = 0
    for md in meta.event_metadata.values():
        for stat in md.stats:
            if names.get(stat.metadata_id) != "Hlo Proto":
                continue
            proto = hlo_pb2.HloProto.FromString(stat.bytes_value)
            for comp in proto.hlo_module.computations:
                for inst in comp.instructions:
                    if inst.custom_call_target == "tpu_custom_call":
                        config = json.loads(inst.backend_config)
                        config["custom_call_config"]["cost_estimate"] = json.loads(estimate)
                        inst.backend_config = json.dumps(config).encode()
                        written += 1
            stat.bytes_value = proto.SerializeToString()
    assert written == 1
    dst.write_bytes(space.SerializeToString())


def test_real_kernel_with_estimate_gets_a_bound(tmp_path: Path) -> None:
    path = tmp_path / "host0.xplane.pb"
    _with_estimate(_real_profile(), path, _estimate(FLOPS, BYTES))
    (row,) = audit(path).ops
    assert (row.flops, row.bytes) == (FLOPS, BYTES)
    # Not the event's own `flops` stat (1.08e9, an eighth of the kernel's 8.6e9).
    assert row.bound_by == "memory"
    assert row.bound_us == pytest.approx(3 * BYTES / 1.638e12 * 1e6)
    assert 0 < (row.efficiency or 0) <= 1


def _mxu_from_counter_events(path: Path) -> float:
    """The MXU's utilisation over the kernel's events, from the `_counters_` events themselves:
    each MXU sample's `% util` holds since the MXU's previous sample."""
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    (tpu,) = (p for p in space.planes if p.name == "/device:TPU:0")
    lines = {line.name: line for line in tpu.lines}
    ops = [(e.offset_ps, e.offset_ps + e.duration_ps) for e in lines["XLA Ops"].events]
    samples = sorted(
        (e.offset_ps, e.stats[0].double_value)
        for e in lines["_counters_"].events
        if tpu.event_metadata[e.metadata_id].name == "MXU"
    )
    busy = covered = 0.0
    for (begin, _), (end, util) in pairwise(samples):
        for op_begin, op_end in ops:
            overlap = min(end, op_end) - max(begin, op_begin)
            if overlap > 0:
                busy += overlap * util / 100
                covered += overlap
    return busy / covered


def test_real_kernel_counters() -> None:
    path = _real_profile()
    (row,) = audit(path).ops
    assert row.counters is not None
    assert row.counters["MXU"] == pytest.approx(_mxu_from_counter_events(path), rel=1e-9)
    assert row.counters["MXU"] == pytest.approx(0.781, abs=0.001)
    assert set(row.counters) == {"MXU", "Vector ALU", "Vector Load", "Vector Store", "Scalar ALU"}
    assert row.hints[-1].startswith("unit slot occupancy of its code while it ran")
    assert "MXU 78%" in row.hints[-1]
    saved = json.loads(json.dumps(row.to_dict(1)))
    assert saved["counters"] == row.counters
    assert decode(OpRow, saved, "ops[0]").counters == row.counters


def _mxu_by_scope(path: Path, own_duration: bool) -> dict[str, float]:
    """The MXU figure inside each Mosaic pipeline scope (`XLA TraceMe`: `ep_run_kernel` runs
    the blocks, `ep_wait_in` waits for their DMAs), each sample's `% util` read either over the
    time since the previous sample (hlogap's reading) or over the sample event's own duration."""
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    (tpu,) = (p for p in space.planes if p.name == "/device:TPU:0")
    lines = {line.name: line for line in tpu.lines}
    names = {k: m.name for k, m in tpu.event_metadata.items()}
    samples = sorted(
        (e.offset_ps, e.duration_ps, e.stats[0].double_value)
        for e in lines["_counters_"].events
        if names[e.metadata_id] == "MXU"
    )
    spans = [
        (s, e) if own_duration else (previous[0], s)
        for previous, (s, d, _) in pairwise(samples)
        for e in [s + d]
    ]
    utils = [u for _, _, u in samples[1:]]
    found: dict[str, float] = {}
    for scope in ("ep_run_kernel", "ep_wait_in"):
        events = [e for e in lines["XLA TraceMe"].events if names[e.metadata_id] == scope]
        used = covered = 0.0
        for (begin, end), util in zip(spans, utils, strict=True):
            for e in events:
                overlap = min(end, e.offset_ps + e.duration_ps) - max(begin, e.offset_ps)
                if overlap > 0:
                    used += overlap * util / 100
                    covered += overlap
        found[scope] = used / covered
    return found


def test_counter_samples_describe_the_time_before_them() -> None:
    """Why a sample's `% util` is read over the time since the previous sample: read over its
    own duration, the scope that runs the kernel's blocks (the matmul itself) would have used
    the MXU 0.1% of its time. Read either way, the DMA waits show the same figures as the
    compute: the figures are the code's slot occupancy, not busy time (the hint says so)."""
    before = _mxu_by_scope(_real_profile(), own_duration=False)
    own = _mxu_by_scope(_real_profile(), own_duration=True)
    assert before["ep_run_kernel"] > 0.7 and own["ep_run_kernel"] < 0.01
    assert before["ep_wait_in"] > 0.7 and own["ep_wait_in"] < 0.01


def test_no_counters_no_key_value(tmp_path: Path) -> None:
    (row,) = audit(_trace(tmp_path, FLOPS, BYTES, 75_000_000)).ops
    assert row.counters is None
    assert row.to_dict(1)["counters"] is None
