"""Actions (hlogap.advice): the deliberate flaws of the `flaws` fixture each get the action that
names them, with numbers recomputed from their HLO; the real profiles' actions; savings never
claim more than the ops' gaps or the steps' time above their bound; `--what-if`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hlogap import audit, load_report
from hlogap.chips import load_chip
from hlogap.hlo.text import parse_module
from hlogap.options import AuditOptions
from hlogap.report.codec import encode
from hlogap.report.model import IDLE_PLACES, AuditReport, OpRow
from hlogap.report.summary import StepSummary
from tests.conftest import AMD_FILES, FIXTURES, SHARED, step_row

FLAWS = FIXTURES / "flaws"
V6E = SHARED / "tpu-v6e-offload" / "tpu_inference_2.xplane.pb"
PEAK, HBM = 1.0e11, 2.0e10  # the test chips' f32 peak and memory bandwidth


def _chip(tmp_path: Path, bf16: float) -> Path:
    path = tmp_path / f"cpu{bf16:.0e}.toml"
    path.write_text(
        f'name = "testcpu"\n[peak_flops]\nf32 = {PEAK}\nbf16 = {bf16}\n[memory]\nhbm_bw = {HBM}\n'
    )
    return path


def _row(report: AuditReport, module: str, name: str) -> OpRow:
    return next(r for r in report.ops if r.module == module and r.name == name)


def _action_of(report: AuditReport, row: OpRow) -> str:
    """The cause of the one action an op's own time is in ('' for none): device idle is the
    time before it."""
    assert report.actions is not None
    found = [
        a.cause
        for a in report.actions
        if a.cause != "device idle"
        and any((o.module, o.name) == (row.module, row.name) for o in a.ops)
    ]
    assert len(found) <= 1, found  # each op in one action
    return found[0] if found else ""


def _hlo(module: str) -> dict[str, object]:
    parsed = parse_module((FLAWS / f"{module}.hlo.txt").read_text())
    return dict(parsed.instructions())


def test_a_skinny_matmul_is_below_the_ridge(tmp_path: Path) -> None:
    report = audit(FLAWS, AuditOptions(chip=str(_chip(tmp_path, PEAK))))
    row = _row(report, "jit_skinny_matmul", "ynn_fusion")
    assert _action_of(report, row) == "below the ridge"
    # From the HLO: x f32[8,1024] x w f32[1024,1024]: 8 rows per weight read; the ridge
    # (peak / bandwidth) needs ridge * W / (F - ridge * A) times them.
    parsed = parse_module((FLAWS / "jit_skinny_matmul.hlo.txt").read_text())
    (dot,) = [i for c in parsed.computations for i in c.instructions if i.opcode == "dot"]
    lhs, rhs = (s for s in dot.operand_shapes if s is not None)
    flops = 2 * lhs.dims[0] * lhs.dims[1] * rhs.dims[1]
    weight = rhs.byte_size()
    activations = lhs.byte_size() + dot.shape.byte_size()
    ridge = PEAK / HBM
    rows = flops / (2 * rhs.num_elements)
    assert rows == 8
    needed = rows * ridge * weight / (flops - ridge * activations)
    action = next(a for a in report.actions or [] if a.cause == "below the ridge")
    assert f"about {rows:.0f} rows per weight read" in action.evidence
    assert f"the ridge needs about {needed:.0f}" in action.evidence
    assert action.op_saving_us <= row.gap_us + 1e-9


def test_an_f32_matmul_could_be_bf16(tmp_path: Path) -> None:
    bf16 = 4 * PEAK
    report = audit(FLAWS, AuditOptions(chip=str(_chip(tmp_path, bf16))))
    row = _row(report, "jit_f32_matmul", "ynn_fusion")
    assert row.dtype == "f32" and _action_of(report, row) == "dtype"
    action = next(
        a for a in report.actions or [] if any(o.module == "jit_f32_matmul" for o in a.ops)
    )
    flops = 2 * 512**3  # a f32[512,512] x f32[512,512] product
    assert f"{flops:.3g} FLOPs per run" in action.evidence
    assert "(4x)" in action.evidence
    # What it can save: the time above its bf16 bound, never more than its gap.
    runs = row.occurrences
    at_bf16 = max(flops / bf16 * 1e6 * runs, row.t_memory_us * runs / 2)
    assert action.op_saving_us == pytest.approx(min(row.gap_us, row.measured_us - at_bf16))


def test_a_transpose_between_two_matmuls_names_both(tmp_path: Path) -> None:
    report = audit(FLAWS, AuditOptions(chip=str(_chip(tmp_path, PEAK))))
    row = _row(report, "jit_transpose_between", "copy_bitcast_fusion")
    assert _action_of(report, row) == "layout copy"
    # The producer and the consumer, from the HLO: the fusion's operand and its user.
    hlo = _hlo("jit_transpose_between")
    copy = hlo["copy_bitcast_fusion"]
    producer = copy.operands[0]  # type: ignore[attr-defined]
    (consumer,) = [n for n, i in hlo.items() if "copy_bitcast_fusion" in i.operands]  # type: ignore[attr-defined]
    assert hlo[producer].opcode == "fusion" and hlo[consumer].opcode == "fusion"  # type: ignore[attr-defined]
    action = next(a for a in report.actions or [] if a.cause == "layout copy")
    assert f"layout of {producer}'s result for {consumer}" in action.evidence
    assert re.search(r"action \d+", row.hints[0]) and "layout copy" in row.hints[0]


def test_thousands_of_tiny_ops_are_launch_bound(tmp_path: Path) -> None:
    report = audit(FLAWS, AuditOptions(chip=str(_chip(tmp_path, PEAK))))
    action = next(a for a in report.actions or [] if a.cause == "launch-bound")
    names = {o.name for o in action.ops}
    assert {"wrapped_add", "wrapped_compare"} <= names  # the loop's counter and its test
    rows = [_row(report, o.module, o.name) for o in action.ops]
    runs = sum(r.occurrences * r.runs_per_occurrence for r in rows)
    assert runs >= 600  # 200 trips a step, 3 steps, per op
    assert f"ran {runs:,} times" in action.evidence
    assert all(r.measured_us / (r.occurrences * r.runs_per_occurrence) < 10 for r in rows)


# Causes whose change is a program change: they remove work, their saving may pass the gaps.
PROGRAM_CHANGES = ("unfused attention", "materialized logits", "per-example loop")


def _savings_hold(report: AuditReport) -> None:
    """Every action saves something (and a step's time where there are steps); each saves at
    most its ops' gaps (device time; a program change at most their time) and, per step, at
    most what the step loses above its bound; the changes that recover lost time together no
    more than the steps' time above their bounds. A device idle action claims at most the
    idle before its op, and says where its gaps sit."""
    assert report.actions is not None
    by_key = {(r.module, r.program_id, r.name): r for r in report.ops}
    seen: set[tuple[str, str, str]] = set()
    for a in report.actions:
        assert a.saving_us > 0
        assert not report.steps or (a.step_saving_us or 0.0) > 0
        keys = [(o.module, o.program_id, o.name) for o in a.ops]
        if a.cause == "device idle":
            assert a.where in IDLE_PLACES
            assert a.saving_us <= sum(by_key[k].idle_before_us or 0.0 for k in keys) + 1e-6
            continue
        assert not seen & set(keys)
        seen |= set(keys)
        gap = sum(by_key[k].gap_us for k in keys)
        if a.cause in PROGRAM_CHANGES:
            assert 0 < a.op_saving_us <= sum(by_key[k].measured_us for k in keys) + 1e-9
        else:
            assert 0 < a.op_saving_us <= gap * (1 + 1e-9) + 1e-9
        if a.frame == "wall":
            # Wall time of one device's critical path can fall by no more than its ops' time.
            assert a.saving_us <= a.op_saving_us * (1 + 1e-9) + 1e-9
    if report.steps and report.actions and report.actions[0].frame == "wall":
        above = sum(
            max(s.wall_us - s.bound_wall_us, 0.0)
            for s in report.steps
            if s.bound_wall_us is not None
        )
        recovered = [a for a in report.actions if a.cause not in (*PROGRAM_CHANGES, "device idle")]
        assert sum(a.saving_us for a in recovered) <= above * (1 + 1e-9) + 1e-6


def test_cpu_fixtures_savings_hold(tmp_path: Path) -> None:
    for program in ("flaws", "mlp_train", "fori", "sharded_train", "attention"):
        _savings_hold(audit(FIXTURES / program, AuditOptions(chip=str(_chip(tmp_path, 4 * PEAK)))))


def test_real_profiles_actions() -> None:
    missing = [p for p in (V6E, *AMD_FILES.values()) if not p.is_file()]
    if missing:
        pytest.skip(f"{missing[0]} absent (../shared not beside the project)")
    # v6e: the offloaded tensors' transfers are what the step waits on.
    tpu = audit(V6E)
    assert tpu.actions and tpu.actions[0].cause == "host offload wait"
    assert tpu.actions[0].frame == "wall" and tpu.actions[0].saving_us > 1e6  # seconds
    assert "host link" in tpu.actions[0].evidence
    _savings_hold(tpu)
    # MI300X: the big transpose is named with the convolution that produces it; the conv's
    # bytes are its activations, so its action is not "more batch".
    gpu = audit(AMD_FILES["mi300x"])
    copy = next(a for a in gpu.actions or [] if a.cause == "layout copy")
    assert copy.ops[0].name == "input_transpose_fusion"
    assert "cudnn-conv.1's result" in copy.evidence
    conv = _row(gpu, "jit_forward_3d_conv", "cudnn-conv.1")
    assert _action_of(gpu, conv) == "activation-bound"
    assert not any("(batch)" in h for h in conv.hints)
    _savings_hold(gpu)
    # MI355X: the attention calls are compute-bound at 7% and the action is the kernel's.
    attention = audit(AMD_FILES["mi355x"])
    slow = [a for a in attention.actions or [] if a.cause == "slow kernel"]
    backward = next(a for a in slow if "te_fused_attn_backward" in a.evidence)
    assert "compute-bound at 7%" in backward.evidence and "batch will not help" in backward.evidence
    assert "batch" not in backward.change
    _savings_hold(attention)


def test_what_if_another_chip(tmp_path: Path) -> None:
    path = AMD_FILES["mi300x"]
    if not path.is_file():
        pytest.skip(f"{path} absent (../shared not beside the project)")
    report = audit(path, AuditOptions(what_if=["h100-sxm"]))
    (w,) = report.what_if or []
    here, there = load_chip("mi300x"), load_chip("h100-sxm")
    # Every op of this profile is memory-bound on both chips: at the other chip's roof each
    # takes its bound here scaled by the two HBM bandwidths.
    assert all(r.bound_by == "memory" for r in report.ops)
    expected = [r.bound_us * here.hbm_bw / there.hbm_bw for r in report.ops]
    assert [(r.what_if_us or {})["h100-sxm"] for r in report.ops] == pytest.approx(expected)
    measured = sum(r.measured_us for r in report.ops)
    assert w.speedup == pytest.approx(measured / sum(expected))
    assert w.step_speedup is not None and 1.0 <= w.step_speedup <= w.speedup
    assert w.new_top_ops[0] == max(report.ops, key=lambda r: r.bound_us).name
    out = subprocess.run(
        [sys.executable, "-m", "hlogap", "audit", str(path), "--what-if", "h100-sxm", "-f", "json"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["what_if"][0]["chip"] == "h100-sxm"
    bad = subprocess.run(
        [sys.executable, "-m", "hlogap", "audit", str(path), "--what-if", "no-such-chip"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "Traceback" not in bad.stderr


def test_actions_are_printed_and_read_back(tmp_path: Path) -> None:
    chip = _chip(tmp_path, PEAK)
    report = audit(FLAWS, AuditOptions(chip=str(chip)))
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps(report.to_dict(0)))
    loaded = load_report(saved)
    assert loaded.actions == report.actions
    out = subprocess.run(
        [sys.executable, "-m", "hlogap", "audit", str(FLAWS), "--chip", str(chip), "--top", "3"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "what to change, by the time it saves (wall time, summed over the 3 steps" in out.stdout
    assert re.search(
        r" 1\. saves [\d.]+ [mu]?s \([\d.]+ [mu]?s a step: the median step [\d.]+x faster\): "
        "below the ridge",
        out.stdout,
    )


def test_bound_what_if_on_a_v5p_dot() -> None:
    """A compute-bound bf16 matmul of a v5p program (its shapes and TPU layouts), bounded on
    v5p and, with --what-if, on v6e: its bound there is its FLOPs over v6e's bf16 peak."""
    hlo = (
        "%dot = bf16[2048,7168]{1,0:T(8,128)(2,1)} dot(bf16[2048,2048]{1,0:T(8,128)(2,1)} %a, "
        "bf16[2048,7168]{1,0:T(8,128)(2,1)} %b), lhs_contracting_dims={1}, "
        "rhs_contracting_dims={0}"
    )
    command = [sys.executable, "-m", "hlogap", "bound", hlo, "--chip", "tpu-v5p"]
    out = subprocess.run(
        [*command, "--what-if", "tpu-v6e", "-f", "json"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    v5p, v6e = load_chip("tpu-v5p"), load_chip("tpu-v6e")
    flops = 2 * 2048 * 2048 * 7168
    assert doc["bound_by"] == "compute"
    assert doc["bound_us"] == pytest.approx(flops / v5p.matrix_peak("bf16") * 1e6)
    (other,) = doc["what_if"]
    assert other["chip"] == "tpu-v6e" and other["bound_by"] == "compute"
    assert other["bound_us"] == pytest.approx(flops / v6e.matrix_peak("bf16") * 1e6)
    assert other["speedup"] == pytest.approx(v6e.matrix_peak("bf16") / v5p.matrix_peak("bf16"))


def test_tile_padding_names_the_shape_that_pads(tmp_path: Path) -> None:
    """bf16[100,100] under T(8,128) is laid out as [104,128]: 1 - 100*100/(104*128) of its
    bytes are padding; the saving is that share of the op's time, never more than its gap."""
    from hlogap.advice.base import Context
    from hlogap.advice.causes.padding import tile_padding
    from hlogap.hlo.index import HloIndex

    (tmp_path / "pad.txt").write_text(
        "HloModule pad\n\nENTRY %main (p: bf16[100,100]) -> bf16[100,100] {\n"
        "  %p = bf16[100,100]{1,0:T(8,128)(2,1)} parameter(0)\n"
        "  ROOT %neg = bf16[100,100]{1,0:T(8,128)(2,1)} negate(%p)\n}\n"
    )
    row = OpRow(
        module="pad",
        program_id="1",
        name="neg",
        opcode="negate",
        occurrences=10,
        measured_us=100.0,
        bound_us=40.0,
        bound_by="memory",
    )
    ctx = Context([row], load_chip("tpu-v6e"), "tpu", HloIndex({}, tmp_path))
    (found,) = list(tile_padding(ctx))
    share = 1 - 100 * 100 / (104 * 128)
    assert found.op_saving_us == pytest.approx(min(row.gap_us, 100.0 * share))
    assert f"{share:.0%} of the bytes" in found.evidence and "[104,128]" in found.evidence
    assert "dim 0 (100 -> 104)" in found.change and "dim 1 (100 -> 128)" in found.change


def test_a_slow_scatter_asks_for_the_flags_its_hlo_lacks(tmp_path: Path) -> None:
    """gather_scatter's scatter-add (128 random rows into a 1024-row table) runs far under its
    memory roof; the action names the flags its scatter instruction does not set."""
    fixture = FIXTURES / "gather_scatter"
    report = audit(fixture, AuditOptions(chip=str(_chip(tmp_path, PEAK))))
    row = _row(report, "jit_gather_scatter", "wrapped_scatter")
    assert row.efficiency is not None and row.efficiency < 0.25
    assert _action_of(report, row) == "slow scatter"
    (scatter,) = [
        i
        for c in parse_module((fixture / "jit_gather_scatter.hlo.txt").read_text()).computations
        for i in c.instructions
        if i.opcode == "scatter"
    ]
    action = next(a for a in report.actions or [] if a.cause == "slow scatter")
    for flag in ("indices_are_sorted", "unique_indices"):
        assert (f"{flag}=true" in action.change) == (scatter.attrs.get(flag) != "true")
    assert action.op_saving_us <= row.gap_us + 1e-9


def test_an_action_per_step_is_in_the_summary_frame() -> None:
    """An action's step saving is the median over the steady steps (the warm-up step left
    out, as the summary does) of each step's own saving, and its step speedup the median of
    each step's wall over its wall with the change: one frame with the header's step line."""
    import numpy as np

    from hlogap.advice.actions import ranked
    from hlogap.advice.base import Finding

    # Step 0: warm-up; the others at a quarter of their wall with every op at its bound.
    steps = [step_row(n, wall, wall / 4, 0.0) for n, wall in enumerate([100.0, 10.0, 11.0, 12.0])]
    saved = np.array([[50.0, 1.0, 2.0, 3.0]])
    finding = Finding("launch-bound", (), 56.0, "evidence", "change")
    (action,) = ranked([finding], saved, steps, StepSummary.of_steps(steps).warmup_steps)
    assert action.saving_us == pytest.approx(56.0)  # the contract's sum over every step
    assert action.step_saving_us == pytest.approx(2.0)  # median of 1, 2, 3
    assert action.step_speedup == pytest.approx(11.0 / 9.0)  # median of 10/9, 11/9, 12/9
    # The saving is what that ratio takes off the median step (11 us): one step's frame.
    assert action.step_saving_us == pytest.approx(11.0 - 11.0 / action.step_speedup)
    assert encode(action, rank=1)["step_speedup"] == pytest.approx(11.0 / 9.0)
