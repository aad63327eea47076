"""Audits of TPU-layout traces (tests/tpu_trace.py) built from real TPU HLO and times.

The v5p trace carries the 352 real ops of xprof's op_profile for a TPU v5 training run, with
their real occurrences and measured times. xprof's own roofline reports 96 of its 714 rows
above 100% efficiency there (async copy-starts charged their whole transfer, Pallas kernels
charged their authors' estimates); no hlogap row may exceed 100%.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hlogap import audit
from tests import tpu_trace as tt
from tests.conftest import SHARED

OP_PROFILE = SHARED / "tpu-v5p-xprof" / "op_profile.json.gz"


@pytest.fixture(scope="module")
def v5p(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tt.Written]:
    if not OP_PROFILE.is_file():
        pytest.skip(f"{OP_PROFILE} absent (../shared not beside the project)")
    path = tmp_path_factory.mktemp("tpu") / "host.xplane.pb"
    return path, tt.write_tpu_trace(path, tt.v5p_spec(tt.read_op_profile(OP_PROFILE)))


def test_v5p_chip_ops_and_times(v5p: tuple[Path, tt.Written]) -> None:
    path, written = v5p
    report = audit(path)
    assert report.chip.name == "tpu-v5p" and report.chip_source == "detected"
    got = {(r.program_id, r.name): r for r in report.ops}
    assert set(got) == set(written.ops)
    for key, totals in written.ops.items():
        assert got[key].measured_us == pytest.approx(totals.self_ps / 1e6)
        assert got[key].occurrences == totals.occurrences


def test_v5p_no_op_beats_the_roof(v5p: tuple[Path, tt.Written]) -> None:
    report = audit(v5p[0])
    over = [(r.name, r.efficiency) for r in report.ops if (r.efficiency or 0) > 1.0]
    assert over == []
    copy_starts = [r for r in report.ops if r.opcode == "copy-start"]
    assert copy_starts and all(r.bound_us == 0 and r.bytes > 0 for r in copy_starts)
    assert all(r.hints[0].startswith("async transfer needs >=") for r in copy_starts)
    assert report.modeled_fraction is not None and report.modeled_fraction > 0.8


def test_small_trace_audits_without_shared_data(tmp_path: Path) -> None:
    path = tmp_path / "small.xplane.pb"
    written = tt.write_tpu_trace(path, tt.small_spec())
    report = audit(path, chip="tpu-v6e")
    assert {(r.program_id, r.name) for r in report.ops} == set(written.ops)
    assert report.measured_us == pytest.approx(sum(t.self_ps for t in written.ops.values()) / 1e6)
