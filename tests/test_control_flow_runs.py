"""Runs per occurrence inside control flow (issue 40 item 1), against oracles nobody here wrote:
the trace's own events (each XLA:CPU thunk event is one run; counted per run id from the
trace.json.gz by scripts/make_fixtures.py) and XLA's HloCostAnalysis of each branch compiled on
its own (`cost_analysis()`, the oracle's `parts`).

The documented_cond_loop fixture: a lax.cond inside a 12-trip fori_loop, its dot branch taken
on 4 trips a step and its elementwise branch on the other 8. The HLO knows the loop's 12 trips
but not which branch each takes: the events do.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from hlogap import audit
from hlogap.options import AuditOptions
from hlogap.report.model import AuditReport, OpRow
from hlogap.rows.analysis import runs_per_occurrence
from tests.conftest import FIXTURES, SHARED, write_cpu_chip

PROGRAM = FIXTURES / "documented_cond_loop"
MODULE = "jit_cond_loop"
NSYS = SHARED / "nvidia-h100-nsys-jax" / "maxtext_fsdp4_test_data.zip"


@functools.cache
def oracle() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((PROGRAM / "oracle.json").read_text())
    return loaded


@functools.cache
def report(tmp: Path) -> AuditReport:
    # Every step, step 0 (which compiles) too: the oracle counts every run id's events.
    return audit(PROGRAM, AuditOptions(chip=str(write_cpu_chip(tmp)), all_steps=True))


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, OpRow]:
    found = report(tmp_path_factory.mktemp("chip"))
    return {r.name: r for r in found.ops if r.module == MODULE}


def _runs_in_trace(op: str) -> set[int]:
    """The op's events per run id in the trace.json.gz, as a set (one value when every
    execution ran it alike)."""
    return set(oracle()["op_events"][MODULE][op].values())


def test_fixture_is_a_cond_taken_4_and_8_times_in_12_trips() -> None:
    events = oracle()["op_events"][MODULE]
    assert _runs_in_trace("while.4") == {1}
    assert _runs_in_trace("cond.1.clone.6") == {12}
    assert _runs_in_trace("ynn_fusion") == {4}
    assert _runs_in_trace("broadcast_add_fusion") == {8}
    assert len(events["ynn_fusion"]) == oracle()["iterations"]  # one run id per step


def test_runs_per_occurrence_are_the_events_of_each_run(rows: dict[str, OpRow]) -> None:
    for op, per_run in oracle()["op_events"][MODULE].items():
        row = rows[op]
        (runs,) = set(per_run.values())
        assert (row.runs_per_occurrence, row.occurrences) == (runs, len(per_run)), op
        assert row.events == sum(per_run.values()), op


@pytest.mark.parametrize(
    ("op", "part"), [("ynn_fusion", "true_branch"), ("broadcast_add_fusion", "false_branch")]
)
def test_a_branch_ops_counts_per_run_are_xlas_of_the_branch(
    rows: dict[str, OpRow], op: str, part: str
) -> None:
    row = rows[op]
    xla = oracle()["parts"][part]
    runs = row.runs_per_occurrence
    assert row.flops / runs == xla["flops"]  # 1,048,576 for the dot, 8,192 elementwise
    assert row.bytes / runs == xla["bytes accessed"]  # 98,304 and 32,768


def test_bounds_count_the_runs_the_branch_took(rows: dict[str, OpRow]) -> None:
    for row, runs in ((rows["ynn_fusion"], 4), (rows["broadcast_add_fusion"], 8)):
        # The per-occurrence roofline times are `runs` per-run times; the total bound covers
        # every occurrence's runs (4 or 8 a step, not the loop's 12).
        per_occurrence = max(row.t_compute_us, row.t_memory_us, row.t_comm_us)
        assert row.runs_per_occurrence == runs
        assert row.bound_us == pytest.approx(per_occurrence * row.occurrences, rel=1e-9)
        assert not any("runs per occurrence unknown" in h for h in row.hints)


def test_loop_ops_outside_the_cond_keep_the_trip_count(rows: dict[str, OpRow]) -> None:
    assert rows["compare_convert_fusion"].runs_per_occurrence == 12
    assert rows["while.4"].runs_per_occurrence == 1


def test_the_rule() -> None:
    # The HLO's count where it knows (exact: an XLA:CPU sort leaves several events a run).
    assert runs_per_occurrence(True, 24, 6, 1, True) == (1, None)
    assert runs_per_occurrence(True, 72, 6, 12, True) == (12, None)
    # A branch: the events, when each run leaves one.
    assert runs_per_occurrence(True, 24, 6, None, True) == (4, None)
    mean, note = runs_per_occurrence(True, 25, 6, None, True)
    assert mean == pytest.approx(25 / 6) and note and "varying" in note
    # GPU kernels (several per run): unknown, and said so.
    runs, note = runs_per_occurrence(False, 24, 6, None, True)
    assert runs == 1 and note and "unknown" in note


@pytest.mark.skipif(not NSYS.exists(), reason="the shared nsys-jax archive is not here")
def test_nsys_gemms_in_the_scanned_layers_run_twice_a_step() -> None:
    """custom-call.220 (a cuBLAS GEMM in an async-wrapped computation inside the decoder's
    2-trip while): every row's runs are its thunk ranges per occurrence (the one exception, an
    XLA:GPU copy fusion done as one memcpy thunk per output, runs once in the entry)."""
    found = audit(NSYS)
    by_key = {(r.module, r.name): r for r in found.ops}
    gemm = by_key[("jit_train_step", "custom-call.220")]
    assert gemm.runs_per_occurrence == 2 == gemm.events / gemm.occurrences
    assert gemm.flops == 2 * 2 * 16 * 2048 * 2048 * 128  # two runs of [16,2048,128]x[16,128,2048]
    differ = {
        (r.module, r.name)
        for r in found.ops
        if r.occurrences and r.events != r.occurrences * r.runs_per_occurrence
    }
    assert differ <= {
        ("jit_raw_generate_synthetic_data", "copy_fusion"),
    }
    copy = by_key[("jit_raw_generate_synthetic_data", "copy_fusion")]
    assert copy.runs_per_occurrence == 1  # the entry's op: 4 memcpy thunks, one per output
