"""Fuzzing the trace reader and the whole audit with mutated real profiles.

A mutated file must give a clean `HlogapError` (exit 2/3) or a valid report; any other exception
is a bug. The budget is bounded for CI: HLOGAP_FUZZ_EXAMPLES cases per test (default 2000;
raise it for a deeper run).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hlogap import audit
from hlogap.errors import HlogapError
from hlogap.options import AuditOptions
from hlogap.trace.reading import read_trace
from hlogap.trace.summary import time_ops
from tests import tpu_trace
from tests.conftest import AMD_FILES, SAMPLE

EXAMPLES = int(os.environ.get("HLOGAP_FUZZ_EXAMPLES", "2000"))


def _seeds() -> list[bytes]:
    """Real profiles of each backend: the CPU sample, a TPU-layout trace, an AMD GPU trace."""
    seeds = [next(SAMPLE.rglob("*.xplane.pb")).read_bytes()]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tpu.xplane.pb"
        tpu_trace.write_tpu_trace(path, tpu_trace.small_spec())
        seeds.append(path.read_bytes())
    if AMD_FILES["mi355x"].is_file():
        seeds.append(AMD_FILES["mi355x"].read_bytes())
    return seeds


SEEDS = _seeds()


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A real profile with a few bytes flipped, cut, duplicated or inserted."""
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 6))):
        if not data:
            break
        kind = draw(st.sampled_from(["flip", "truncate", "insert", "delete", "duplicate"]))
        pos = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[pos] ^= draw(st.integers(1, 255))
        elif kind == "truncate":
            del data[pos:]
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del data[pos : pos + draw(st.integers(1, 64))]
        else:
            data += data[pos : pos + draw(st.integers(1, 256))]
    return bytes(data)


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@FUZZ
@given(data=mutated())
def test_reader_gives_clean_error_or_valid_events(data: bytes, tmp_path: Path) -> None:
    path = tmp_path / "fuzz.xplane.pb"
    path.write_bytes(data)
    try:
        trace = read_trace(path, "host")
    except HlogapError:
        return
    times = time_ops(trace)
    assert len(times.measured_ps) == len(trace.ops)
    assert times.events.sum() == trace.num_events


@settings(FUZZ, max_examples=max(1, EXAMPLES // 5))
@given(data=mutated())
def test_audit_gives_clean_error_or_valid_report(
    data: bytes, tmp_path: Path, cpu_chip_file: Path
) -> None:
    path = tmp_path / "fuzz.xplane.pb"
    path.write_bytes(data)
    try:
        report = audit(path, AuditOptions(chip=str(cpu_chip_file), jobs=1))
    except HlogapError:
        return
    assert report.ops
    assert report.measured_us == pytest.approx(sum(r.measured_us for r in report.ops))
    for row in report.ops:
        assert row.bound_by in ("compute", "memory", "communication", "none", "unmodeled")
