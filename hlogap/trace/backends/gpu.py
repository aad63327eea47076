"""GPU (NVIDIA CUPTI, AMD ROCm): kernel events on `/device:GPU:N` stream lines.

The host plane's launch events (`cudaLaunchKernel`, `hipModuleLaunchKernel`, ...) carry `hlo_op`
too, but they are host time: only device planes are read. One op may launch several kernels;
its time is the sum of its kernels.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hlogap.trace.backends.base import Platform, register
from hlogap.trace.backends.stat_events import ExecutionOf, read_stat_events
from hlogap.trace.columnar import IdSet
from hlogap.trace.model import UNKNOWN_EXECUTION, Backend, TraceBuilder
from hlogap.trace.xspace import (
    HOST_PLANE,
    Plane,
    decode_int_stats,
    device_ordinal,
    plane_stats,
)

# Lines xprof derives from the streams when it post-processes a trace; reading them too would
# count every kernel twice.
DERIVED_LINES = frozenset(
    {
        "XLA Modules",
        "XLA Ops",
        "Async XLA Ops",
        "Steps",
        "XLA TraceMe",
        "Framework Ops",
        "Framework Name Scope",
        "Source code",
        "Launch Stats",
    }
)


MODULE_EVENT = ":XLA GPU module"  # `<module>:XLA GPU module`: one execution, on the host
# A kernel's launch is found in a table of the launches' correlation ids where the table has
# at most this many slots per launch (`_executions`); sparser ids are searched.
TABLE_SPAN_PER_LAUNCH = 8


class GpuReader:
    name: Backend = "gpu"
    priority = 10
    # Kernels (several a run) on the host's clock; NCCL/RCCL on their own streams; an L2 whose
    # bandwidth no vendor publishes; CUDA graphs.
    platform = Platform(
        device_planes=True,
        ops_on_host_clock=True,
        collective_start_is_transfer=True,
        unpublished_cache=True,
        command_buffers=True,
    )

    def claims(self, planes: Sequence[Plane]) -> bool:
        # A GPU that ran nothing (its plane has no lines) leaves the file to the CPU reader.
        return any(device_ordinal(p, "GPU") is not None and p.has_lines for p in planes)

    def read(self, planes: Sequence[Plane], builder: TraceBuilder) -> None:
        execution_of = _executions(planes)
        for plane in planes:
            ordinal = device_ordinal(plane, "GPU")
            if ordinal is None:
                continue
            device = builder.new_device(plane.name, ordinal, plane_stats(plane))
            lines = (ln for ln in plane.raw_lines if ln.name not in DERIVED_LINES)
            read_stat_events(plane, builder, lines, device, True, execution_of)
            plane.release()


register(GpuReader())


def _executions(planes: Sequence[Plane]) -> ExecutionOf | None:
    """Kernel correlation id -> module execution, from the host plane. Each execution is one
    `<module>:XLA GPU module` event on the thread that runs it (a TraceMe line), and that
    thread launches the execution's kernels (API events with the kernel's `correlation_id`,
    on the thread's CUPTI/ROCm line). The two lines of a thread are paired by time: the
    module line whose executions enclose most of a launch line's launches. None when the host
    plane does not say (kernels of one op launched back to back then count as one occurrence).
    """
    host = next((p for p in planes if p.name == HOST_PLANE), None)
    if host is None:
        return None
    corr_id = next((k for k, v in host.stat_metadata.items() if v.name == "correlation_id"), -1)
    module_md = IdSet(
        [k for k, md in host.event_metadata.items() if md.name.endswith(MODULE_EVENT)]
    )
    if corr_id < 0 or not module_md:
        return None
    spans: list[tuple[np.ndarray, np.ndarray, int]] = []  # per module line: starts, ends, 1st id
    launches: list[tuple[np.ndarray, np.ndarray]] = []  # per launch line: correlation, time
    numbered = 0
    for line in host.raw_lines:
        if not line.event_count:
            continue
        cols = decode_int_stats(line, [corr_id], host.name)
        start = line.timestamp_ns * 1000 + cols.offset_ps
        is_module = module_md.has(cols.metadata_id)
        if is_module.any():
            order = np.argsort(start[is_module], kind="stable")
            first = start[is_module][order]
            spans.append((first, first + cols.duration_ps[is_module][order], numbered))
            numbered += len(first)
        launch = cols.stats[0] >= 0
        if launch.any():
            launches.append((cols.stats[0][launch], start[launch]))
    correlations: list[np.ndarray] = []
    executions: list[np.ndarray] = []
    for correlation, when in launches:
        best: tuple[int, np.ndarray, np.ndarray] | None = None
        for first, last, base in spans:
            k = np.searchsorted(first, when, side="right") - 1
            inside = (k >= 0) & (when < last[np.maximum(k, 0)])
            if best is None or int(inside.sum()) > best[0]:
                best = (int(inside.sum()), inside, base + k)
        if best is not None and best[0] > 0:
            correlations.append(correlation[best[1]])
            executions.append(best[2][best[1]])
    if not correlations:
        return None
    correlation = np.concatenate(correlations)
    execution = np.concatenate(executions)
    order = np.argsort(correlation, kind="stable")
    correlation, execution = correlation[order], execution[order]
    low, high = int(correlation[0]), int(correlation[-1])
    if high - low <= TABLE_SPAN_PER_LAUNCH * len(correlation):
        # A table of the launches' correlation ids (a process numbers its API calls in turn),
        # an unknown execution on either side: one gather per kernel where a search took 3x
        # as long (3 M kernels, 150 launches: 0.018 s against 0.058).
        table = np.full(high - low + 3, UNKNOWN_EXECUTION, dtype=np.int64)
        first = np.ones(len(correlation), dtype=bool)  # a repeated id: its first launch's
        first[1:] = correlation[1:] != correlation[:-1]
        table[correlation[first] - low + 1] = execution[first]

        def execution_in_table(kernel_correlation: np.ndarray) -> np.ndarray:
            # An id outside the launches' (wrapped past int64's ends too) clips to an end.
            at = kernel_correlation - (low - 1)
            found: np.ndarray = np.take(table, at, mode="clip")
            return found

        return execution_in_table

    def execution_of(kernel_correlation: np.ndarray) -> np.ndarray:
        at = np.minimum(np.searchsorted(correlation, kernel_correlation), len(correlation) - 1)
        found = (correlation[at] == kernel_correlation) & (kernel_correlation >= 0)
        result: np.ndarray = np.where(found, execution[at], UNKNOWN_EXECUTION)
        return result

    return execution_of
