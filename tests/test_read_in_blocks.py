"""The stat-event readers (XLA:CPU thunks, GPU kernels) take a line's events a block at a time
(`RawLine.blocks`): the timeline is the one read from the line whole, wherever the blocks cut
it: between an async op and its `end:` marker, through events upb reads instead (an op named by
a string, an aggregated event), between a line's ops and its other events, across devices. The
GPU reader's kernel -> execution lookup (a table of the launches' correlation ids, a search
where they are sparse) gives the same executions either way."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hlogap.proto import xplane_pb2
from hlogap.trace import columnar
from hlogap.trace.model import TraceData
from hlogap.trace.reading import read_trace

US = 1_000_000  # ps
COLUMNS = (
    "op_index",
    "device_index",
    "start_ps",
    "duration_ps",
    "self_ps",
    "execution",
    "occurrence",
    "occurrence_first",
)


def _interned(ids: dict[str, int], metadata: Any, name: str) -> int:
    """The id of `name` in a plane's metadata map (stat or event), added as the next id."""
    if name not in ids:
        ids[name] = len(ids) + 1
        metadata[ids[name]].id = ids[name]
        metadata[ids[name]].name = name
    return ids[name]


class _Plane:
    """A plane under construction: stat and event metadata interned by name."""

    def __init__(self, space: xplane_pb2.XSpace, plane_id: int, name: str) -> None:
        self.plane = space.planes.add()
        self.plane.id, self.plane.name = plane_id, name
        self.stat_ids: dict[str, int] = {}
        self.md_ids: dict[str, int] = {}

    def stat_id(self, name: str) -> int:
        return _interned(self.stat_ids, self.plane.stat_metadata, name)

    def md(self, name: str) -> int:
        return _interned(self.md_ids, self.plane.event_metadata, name)

    def line(self, line_id: int, name: str) -> Callable[..., xplane_pb2.XEvent]:
        """An `event(name, at_us, dur_us, **stats)` adder for a new line: a str stat value is a
        ref to the stat metadata of that name, except `hlo_op_str` (the op's name as a string:
        an event the columnar decoders leave to upb)."""
        line = self.plane.lines.add()
        line.id, line.name = line_id, name

        def event(name: str, at_us: float, dur_us: float, **stats: int | str) -> xplane_pb2.XEvent:
            ev = line.events.add()
            ev.metadata_id = self.md(name)
            ev.offset_ps, ev.duration_ps = int(at_us * US), int(dur_us * US)
            for key, value in stats.items():
                st = ev.stats.add()
                if key == "hlo_op_str":
                    st.metadata_id, st.str_value = self.stat_id("hlo_op"), str(value)
                elif isinstance(value, str):
                    st.metadata_id, st.ref_value = self.stat_id(key), self.stat_id(value)
                else:
                    st.metadata_id, st.int64_value = self.stat_id(key), value
            return ev

        return event


def _cpu_space(path: Path) -> None:
    """XLA:CPU: two threads running ops of two devices in three executions, async ops whose
    `end:` markers sit on either thread (one after the next execution began: cut there), a
    nested while, ops named by a string, an aggregated event, events that are no op."""
    space = xplane_pb2.XSpace()
    space.hostnames.append("vm")
    host = _Plane(space, 1, "/host:CPU")
    first, second = host.line(1, "tf_XLAEigen/1"), host.line(2, "tf_XLAEigen/2")

    def op(
        event: Callable[..., xplane_pb2.XEvent],
        name: str,
        at: float,
        dur: float,
        run_id: int,
        device: int = 0,
        **more: int | str,
    ) -> None:
        event(
            name,
            at,
            dur,
            hlo_op=name,
            hlo_module="jit_step",
            program_id=5,
            run_id=run_id,
            device_ordinal=device,
            **more,
        )

    for run in range(3):
        base = 100 * run
        op(first, "while.1", base, 30, run + 1)
        op(first, "add.1", base + 1, 2, run + 1)
        first("ThunkExecutor::Execute", base + 3.5, 0.5)  # no op
        op(first, "dot.1", base + 4, 1, run + 1, _p=10 + run)
        first("end: dot.1", base + 6, 0.5, _c=10 + run)
        first(
            "mul.1",
            base + 8,
            1,
            hlo_op_str="mul.1",
            hlo_module="jit_step",
            program_id=5,
            run_id=run + 1,
            device_ordinal=0,
        )
        op(second, "add.1", base + 2, 3, run + 1, device=1)
        op(second, "dot.2", base + 6, 2, run + 1, device=1, _p=20 + run)
        # An aggregated event (no offset of its own: `num_occurrences` takes its place), read
        # by upb: it is no op, or every execution on device 1 would begin at 0.
        second("Idle", base + 9, 1, run_id=run + 1, device_ordinal=1).num_occurrences = 2
        # dot.2's completion: the last run's on time, the others' after the next run began.
        second("end: dot.2", base + (20 if run == 2 else 150), 1, _c=20 + run)
        second("Barrier", base + 50, 5)  # no op
    path.write_bytes(space.SerializeToString())


def _gpu_space(path: Path, correlation_step: int) -> None:
    """Two GPU streams (kernels of ops, memcpys that are no op, a kernel named by a string)
    launched in two executions of `jit_step` on the host; one kernel's launch is not on the
    host (an unknown execution). Correlation ids are `correlation_step` apart."""
    space = xplane_pb2.XSpace()
    space.hostnames.append("vm")
    host = _Plane(space, 1, "/host:CPU")
    modules, launches = host.line(1, "tf_Compute/1"), host.line(2, "cuda_launches/1")
    gpu = _Plane(space, 2, "/device:GPU:0")
    streams = [gpu.line(10, "Stream #7(Compute)"), gpu.line(11, "Stream #9(Compute)")]
    correlation = 0
    for run in range(2):
        base = 1000 * run
        modules("jit_step:XLA GPU module", base, 500)
        for k in range(12):
            correlation += correlation_step
            launches("cudaLaunchKernel", base + 10 * k + 1, 1, correlation_id=correlation)
            stream = streams[k % 2]
            at = base + 10 * k + 5
            if k == 3:
                stream("memcpy", at, 2)  # no op
            elif k == 7:
                stream(
                    "fusion.7",
                    at,
                    2,
                    hlo_op_str="fusion.7",
                    hlo_module="jit_step",
                    program_id=5,
                    correlation_id=correlation,
                )
            else:
                name = f"fusion.{k % 4}"
                stream(
                    name,
                    at,
                    2,
                    hlo_op=name,
                    hlo_module="jit_step",
                    program_id=5,
                    correlation_id=correlation,
                )
    streams[0](
        "fusion.0",
        5000,
        1,
        hlo_op="fusion.0",
        hlo_module="jit_step",
        program_id=5,
        correlation_id=10**12,
    )  # launched where the profile does not say
    path.write_bytes(space.SerializeToString())


def _same(read: TraceData, whole: TraceData) -> None:
    for name in COLUMNS:
        got, expected = getattr(read, name), getattr(whole, name)
        assert got.dtype == expected.dtype and got.tolist() == expected.tolist(), name
    assert [op.key for op in read.ops] == [op.key for op in whole.ops]
    assert [(d.plane, d.ordinal) for d in read.devices] == [
        (d.plane, d.ordinal) for d in whole.devices
    ]
    assert (read.lines, read.warnings) == (whole.lines, whole.warnings)


@pytest.mark.parametrize("size", [1, 2, 3, 5])
@pytest.mark.parametrize("backend", ["cpu", "gpu"])
def test_a_line_read_in_blocks_is_the_line_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str, size: int, decoder: str
) -> None:
    path = tmp_path / "vm.xplane.pb"
    _cpu_space(path) if backend == "cpu" else _gpu_space(path, 1)
    monkeypatch.setattr(columnar, "READ_BLOCK", 1 << 20)
    whole = read_trace(path, "vm")
    assert whole.num_events > 15 and len(whole.lines) >= 2
    if backend == "cpu":  # the markers were read: every dot runs on past its event
        assert any("cut at that start" in w for w in whole.warnings)
        dot = [k for k, op in enumerate(whole.ops) if op.key.name == "dot.2"]
        assert (whole.duration_ps[np.isin(whole.op_index, dot)] > 2 * US).all()
    else:  # executions found by correlation id, but the one launch the host lacks
        assert sorted(set(whole.execution.tolist()))[-2:] == [0, 1]
        assert (whole.execution < 0).sum() == 1
    monkeypatch.setattr(columnar, "READ_BLOCK", size)
    _same(read_trace(path, "vm"), whole)


def test_sparse_correlation_ids_find_the_same_executions(tmp_path: Path) -> None:
    # Ids 1 apart are looked up in a table, ids 10**6 apart by a search.
    dense, sparse = tmp_path / "dense.xplane.pb", tmp_path / "sparse.xplane.pb"
    _gpu_space(dense, 1)
    _gpu_space(sparse, 10**6)
    _same(read_trace(sparse, "vm"), read_trace(dense, "vm"))
