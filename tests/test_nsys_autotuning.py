"""XLA's autotuner in nsys-jax archives (issue 39): the `XlaAutotunerMeasurement` ranges the
compiler opens while it times candidates, and the modules that run inside them, marked as
autotuning work (`TraceData.autotuning_modules`), never the program's. Checked against the
shared H100 archive's own NVTX ranges (skipped without it) and on small archives built here."""

from __future__ import annotations

import io
import re
import zipfile
from collections import defaultdict
from pathlib import Path

import pytest

from hlogap.options import AuditOptions
from tests.test_nsys import ARCHIVE, TRAIN_STEP, _archive, _module, _range, needs_archive

pq = pytest.importorskip("pyarrow.parquet")


AUTOTUNER = "TSL:XlaAutotunerMeasurement:"


@needs_archive
def test_the_archives_autotuner_ranges_hold_no_module_of_the_program() -> None:
    """The archive's 23 `XlaAutotunerMeasurement` ranges are cuBLAS's algorithm picker timing
    GEMMs while jit_train_step compiles: they hold no module or thunk range (its kernels are
    no op's), so no module is autotuning work and no op event lies in them."""
    from hlogap.trace.nsys import read_archive

    with zipfile.ZipFile(ARCHIVE) as z:
        rows = pq.read_table(io.BytesIO(z.read("nvtx_gpu_proj_trace/trace.parquet"))).to_pylist()
    by_id = {r["RangeId"]: r for r in rows if r["RangeId"] is not None}
    measured = [r for r in rows if (r["Name"] or "").startswith(AUTOTUNER)]
    assert len(measured) == 23
    tuned_ops = {r["Name"].split("hlo_op=", 1)[1].rstrip("#") for r in measured}
    assert len(tuned_ops) == 23 and all(
        o.startswith(("custom-call.", "cublas-gemm.")) for o in tuned_ops
    )

    def under_autotuner(r: dict) -> bool:
        parent = by_id.get(r["ParentId"])
        while parent is not None:
            if (parent["Name"] or "").startswith(AUTOTUNER):
                return True
            parent = by_id.get(parent["ParentId"])
        return False

    expected = {
        m.group(1)
        for r in rows
        if (r["Name"] or "").startswith("TSL:XlaModule:") and under_autotuner(r)
        if (m := re.search(r"hlo_module=([^,#]+)", r["Name"]))
    }
    assert expected == set()
    assert not any(under_autotuner(r) for r in rows)  # nothing nests in them
    trace = read_archive(ARCHIVE, "h")
    assert trace.autotuning_modules == expected
    modules = {o.key.module for o in trace.ops}
    assert TRAIN_STEP in modules and not tuned_ops & modules
    windows = [
        (r["Projected Start"], r["Projected Start"] + r["Projected Duration"]) for r in measured
    ]
    starts = trace.start_ps // 1000
    assert not any(((starts >= a) & (starts < b)).any() for a, b in windows)
    assert not any("outside any module" in w for w in trace.warnings)


def _tuner(rid: int, op: str, start: int, tid: int) -> dict:
    return _range(rid, f"TSL:XlaAutotunerMeasurement:#hlo_op={op}#", start, 500, None, tid)


def test_autotuner_candidates_are_marked_by_module(tmp_path: Path) -> None:
    """The GEMM fusion autotuner runs each candidate as a module named after the fusion, inside
    its measurement range (with a program id, without one, or titled without the closing `#`):
    those modules are `autotuning_modules`, every event of them the autotuner's; the program's
    own run of the same instruction is not. A thunk range in the measurement range outside any
    module is the autotuner's too, not a profile cut short."""
    from hlogap.trace.nsys import read_archive
    from hlogap.trace.summary import Selection, merge_summaries, summarize

    fusion = "gemm_fusion_dot.411"
    rows = [
        _tuner(1, fusion, 0, 5),
        _range(2, f"TSL:XlaModule:#hlo_module={fusion},program_id=900#", 0, 100, 1, 5),
        _range(3, f"TSL:Thunk:#hlo_op={fusion}#", 0, 40, 2, 5),
        _range(4, f"TSL:XlaModule:#hlo_module={fusion}#", 200, 100, 1, 5),
        _range(5, f"TSL:Thunk:#hlo_op={fusion}#", 200, 30, 4, 5),
        _range(6, f"TSL:XlaModule:#hlo_module={fusion}", 300, 100, 1, 5),
        _range(7, f"TSL:Thunk:#hlo_op={fusion}#", 300, 20, 6, 5),
        _range(8, "TSL:Thunk:#hlo_op=cublas-gemm.2#", 450, 10, 1, 5),
        _module(100, 1000, 5),
        _range(101, f"TSL:Thunk:#hlo_op={fusion}#", 1000, 50, 100, 5),
        _range(102, "TSL:Thunk:#hlo_op=fusion.1#", 1100, 60, 100, 5),
    ]
    trace = read_archive(_archive(tmp_path, rows), "h")
    assert trace.autotuning_modules == {fusion}
    per_module: dict[str, int] = defaultdict(int)
    for op, dur in zip(trace.op_index.tolist(), trace.duration_ps.tolist()):
        per_module[trace.ops[op].key.module] += dur
    assert per_module == {fusion: 90_000, "jit_f": 110_000}
    assert {o.key.name for o in trace.ops if o.key.module == "jit_f"} == {fusion, "fusion.1"}
    assert not any("outside any module" in w for w in trace.warnings), trace.warnings
    assert not any(f"module {fusion} " in w for w in trace.warnings), trace.warnings
    host = summarize(trace, Selection(), "h")
    assert host.autotuning_modules == {fusion}
    assert merge_summaries([host, host]).autotuning_modules == {fusion}


def test_a_candidate_named_like_a_module_of_the_program_is_left_out(tmp_path: Path) -> None:
    """A module name that runs both inside a measurement range and outside: not marked (its
    program events are the program's), and the autotuner's runs of it are left out, said."""
    from hlogap.trace.nsys import read_archive

    rows = [
        _tuner(1, "fusion.1", 0, 5),
        _range(2, "TSL:XlaModule:#hlo_module=jit_f,program_id=8#", 0, 100, 1, 5),
        _range(3, "TSL:Thunk:#hlo_op=fusion.1#", 0, 40, 2, 5),
        _module(100, 1000, 5),
        _range(101, "TSL:Thunk:#hlo_op=fusion.1#", 1000, 50, 100, 5),
    ]
    trace = read_archive(_archive(tmp_path, rows), "h")
    assert trace.autotuning_modules == set()
    assert trace.duration_ps.tolist() == [50_000]
    assert any("autotuner's runs" in w and "jit_f" in w for w in trace.warnings), trace.warnings


def test_the_audit_leaves_the_candidates_out_of_its_op_rows(tmp_path: Path) -> None:
    """End to end: the candidates' time is `summary.outside_steps.autotuning_us`, no op row
    is theirs, and the steps are the program's module's executions, never a candidate's."""
    from hlogap import audit

    fusion = "gemm_fusion_dot.411"
    rows = [
        _tuner(1, fusion, 0, 5),
        _range(2, f"TSL:XlaModule:#hlo_module={fusion},program_id=900#", 0, 100, 1, 5),
        _range(3, f"TSL:Thunk:#hlo_op={fusion}#", 0, 400, 2, 5),
    ]
    for k in range(4):  # four executions of the program: four steps
        at = 1000 + 2000 * k
        rows += [
            _module(100 + 10 * k, at, 5),
            _range(101 + 10 * k, "TSL:Thunk:#hlo_op=fusion.1#", at, 60, 100 + 10 * k, 5),
        ]
    report = audit(_archive(tmp_path, rows), AuditOptions(chip="h100-sxm"))
    assert {r.module for r in report.ops} == {"jit_f"}
    assert len(report.steps) == 4 and {s.source for s in report.steps} == {"module"}
    assert report.ops_frame == "steady steps"
    assert report.outside_steps is not None
    assert report.outside_steps.autotuning_us == pytest.approx(0.4)
    assert report.measured_us == pytest.approx(4 * 0.06)
    everything = audit(_archive(tmp_path, rows), AuditOptions(chip="h100-sxm", all_steps=True))
    assert {r.module for r in everything.ops} == {"jit_f", fusion}
