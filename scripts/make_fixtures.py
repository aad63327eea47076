"""Profile small JAX programs on this CPU and write the test corpus to ``tests/fixtures/``.

Run by ``make fixtures``. Every program runs in its own Python process (so the trace's
``/host:metadata`` plane holds only that program's modules, and ``mlp_rerun`` is an independent
compile of ``mlp``); the process compiles the jitted functions, warms them up outside the trace,
then runs ``ITERATIONS`` iterations inside ``jax.profiler.trace`` with ``block_until_ready()``.

Layout written per program (the directory is replaced wholesale on every run)::

    tests/fixtures/<program>/plugins/profile/<RUN_NAME>/<host>.xplane.pb  (trace.json.gz deleted)
    tests/fixtures/<program>/oracle.json       jax version, XLA_FLAGS, iterations, devices; per
                                               module: name, program_id, cost_analysis,
                                               memory_analysis, executions
    tests/fixtures/<program>/<module>.hlo.txt  compiled.as_text(): the optimized HLO
    tests/fixtures/<program>/dump/*after_optimizations.txt  (DUMP_PROGRAMS only; --xla_dump_to)

``hlogap/data/sample/plugins/profile/<RUN_NAME>/<host>.xplane.pb``: a copy of SAMPLE_PROGRAM's.

Each iteration is one step: ``jax.profiler.StepTraceAnnotation("train", step_num=i)`` around
``HOST_GAP_S`` of host time (a sleep: the device idles) and the program's calls.

The oracles are independent of the trace: ``cost_analysis()`` of the executable that runs (XLA's
HloCostAnalysis, keys verbatim, ``utilization*`` dropped), the module name and ``program_id`` (the
``id`` of the compiled ``HloModuleProto``), and ``executions`` = how many times this script called
the module inside the trace (per device).

What XLA:CPU traces hold (jax/jaxlib 0.10.2, checked on the traces this script writes):

* The run directory is named by ``ProfileOptions.session_id`` (we set the fixed RUN_NAME instead of
  the default timestamp); the host file is ``<socket hostname>.xplane.pb`` and jax offers no way to
  choose it, so it is whatever the generating machine is called (``vm`` here).
* Planes: ``/host:metadata`` (no lines), ``/host:CPU``, ``Task Environment`` (profile start/stop).
* ``/host:metadata`` has one event metadata per HLO module compiled *in the process so far* (also
  those compiled before the trace started, and helpers such as ``jit__normal`` if jax.random ran),
  named ``<module>(<program_id>)`` with stats ``Hlo Proto`` (bytes: a serialized ``xla.HloProto``
  with only ``hlo_module`` set; its ``id`` is the program_id) and ``program_id``. This is why
  inputs are made with numpy + ``device_put`` (no helper compiles).
* ``/host:CPU`` holds all devices' work, also with 8 host devices. Per-HLO-op "thunk" events sit on
  worker-thread lines ``tf_XLAPjRtCpuClient/<tid>`` and ``tf_XLAEigen/<tid>`` (the async
  executor hops threads, so one execution can span several lines). A thunk event is named after the
  HLO instruction (``ynn_fusion.1``, ``dot.3``, ``all-reduce``, ``while``, ...) and carries stats
  ``hlo_op`` and ``hlo_module`` (ref values), ``program_id`` (int), ``run_id`` (int) and
  ``device_ordinal`` (int), plus internal ``_src``/``_pt``/``_p``. Event metadata carry no stats.
* Events to ignore: ``end: <op>`` markers (~1 us, not always on the thunk's line),
  ``ThreadpoolListener::{StartRegion,StopRegion,Record}`` (zero duration),
  ``ThunkExecutor::Execute`` and ``ThunkExecutor::Execute (wait for completion)`` (these have
  run_id/device_ordinal but no hlo_op),
  ``SlinkyThreadPool::Await``, and around collectives ``Rendezvous`` (stats ``num_threads``,
  ``name`` = the RendezvousKey text, ``id``), ``InvokeRendezvous``, ``Wait: pending_threads=k/n``,
  ``Wait for rendezvous callback``: these nest inside the collective's thunk event.
* A device is identified by the ``device_ordinal`` stat of the thunk events (0..7 with
  ``--xla_force_host_platform_device_count=8``); there are no per-device planes.
* One execution of a module = one ``run_id``; every device of a multi-device execution shares that
  run_id. So executions per device = number of distinct run_ids among the module's thunk events
  (a run still in flight when the trace starts would show up partial: hence the blocking warm-up).
* Module-level events: single-device runs have none on the thunk lines (only the python line's
  ``PjitFunction(<fn>)`` and ``CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice``, without a
  module stat); multi-device runs add ``[<i>] CommonPjRtLoadedExecutable::Execute (<module>)``
  per device (stats ``name`` = module, ``replica``, ``partition``, ``global_device_id``) and a
  python-line ``CommonPjRtLoadedExecutable::Execute (<module>)`` per launch.
* Loops: the ``while`` op is a thunk event whose duration spans the whole loop; the body's ops
  appear as their own thunk events (same run_id, same line), once per trip, nested in time inside
  the ``while`` event (so an op's self time needs nesting by interval); the condition's ops
  (``wrapped_compare``) emit no events.
* Instruction names are not opcodes: a shard_map's collectives are named after the jax primitive
  (``ppermute.3`` is a collective-permute, ``psum_invariant.7`` an all-reduce, ``reduce_scatter.7``
  a reduce-scatter); take the opcode from the HLO (``Hlo Proto`` or the .hlo.txt).
* XLA:CPU names dot/conv fusions it hands to YNNPACK ``ynn_fusion[.N]``; collectives with a
  ``-start``/``-done`` pair do not occur on CPU (synchronous ``all-reduce``, ``all-gather``,
  ``reduce-scatter``, ``all-to-all``, ``collective-permute``); ``all-gather`` may print its groups
  in the mesh form ``replica_groups=mesh['axis_0'=4,'axis_1'=2] {'axis_0'}`` or the iota form.
* ``--xla_dump_to`` writes ``module_NNNN.<module>.cpu_after_optimizations.txt`` (we keep only
  ``*after_optimizations.txt``; the buffer-assignment, .ll and .o files are dropped). It equals
  ``compiled.as_text()`` up to the key order inside ``backend_config`` JSON.

The ``documented_*`` programs (DOCUMENTED) are profiled the way JAX's docs show and users do,
not as above: no warm-up before the trace (step 0 traces, lowers and compiles inside it, so it is
by far the slowest), and the annotation wraps only the dispatch, the wait comes after it::

    for i in range(DOCUMENTED_STEPS):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            state = train_step(state, batch)     # returns once the work is enqueued
        jax.block_until_ready(state)             # outside the annotation

so each annotation covers the host's dispatch only and the device work of its step runs past its
end. The Python tracer is off for them (``python_tracer_level = 0``, the one change from the
default options): with the first call inside the trace it records every Python call of jax's
tracing and lowering, ~100k events and 1.7 MB for one small MLP. ``executions`` counts every call
(all inside the trace), ``host_gap_s`` is 0 (no sleep). Their oracle also holds ``trace_steps``,
``trace_runs`` and ``thunk_us_total``, read with json/gzip from the ``<host>.trace.json.gz``
that ``jax.profiler.trace`` writes beside the xplane (before deleting it; ``trace_oracle``), in
that file's units (``time_unit``: microseconds, ``ts``/``dur`` printed to the nanosecond). What
these traces show (jax/jaxlib 0.10.2, XLA:CPU):

* Clock: trace.json's ``ts`` of an event equals ``(line.timestamp_ns * 1000 + offset_ps) / 1e6``
  of the same event in the xplane (both are relative to the profile's start; checked for every
  step annotation and every run's first thunk event, ``clock_check`` in the oracle).
* A run id tied to its host dispatch:

  - Multi-device launches: the Python thread's ``CommonPjRtLoadedExecutable::Execute (<module>)``
    carries ``run_id`` in trace.json's args (and in the xplane as stat ``run_id``, and as flow
    producer ``_p`` = run_id, ``_pt`` = 5, consumed by each device's
    ``[<i>] CommonPjRtLoadedExecutable::Execute (<module>)`` on a ``tf_XLAPjRtCpuClient`` line).
  - Single-device launches: no event on the Python thread names the run id (``PjitFunction(<fn>)``,
    ``CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice``, ``ExecutePrepare`` carry no
    args). The tie exists only in the xplane, as TraceMe flow stats that trace.json drops: the
    Python thread's ``ThreadpoolListener::Record`` (stats ``_p`` = flow id, ``_pt`` = 15), inside
    ``ExecuteHelperOnSingleDevice``, is consumed by a ``ThreadpoolListener::StartRegion``
    (``_c`` = that id, ``_ct`` = 15) on a ``tf_XLAPjRtCpuClient`` line, and the thunk events in
    that region (until the line's ``StopRegion``) carry the ``run_id``; work handed on to other
    threads chains the same way (a worker's ``Record`` -> another line's ``StartRegion``).
    ``ThunkExecutor::Execute`` has no args; ``ThunkExecutor::Execute (wait for completion)`` has
    ``run_id`` but runs on the worker line, not the dispatching thread.
  - A launch whose inputs are not ready yet (``update_fn(params, grads)`` right after
    ``grad_fn``) is deferred: its ``ExecuteHelperOnSingleDevice`` holds no ``Record``, and the
    worker that finishes the producing run starts it (a worker ``Record`` inside that run's
    region), so the flow walk from its thunks ends at the *producer's* dispatch (2 hops).
    Multi-device runs are deferred too (each ``[<i>] Execute`` enqueues; the thunks start from a
    later worker ``Record``), and there the walk, 2-3 hops, may end at an earlier step's launch
    (a worker region left open across steps): for them only trace.json's ``run_id`` arg counts.
  - flow ids are written signed in some stats and unsigned in others (``_c`` = 2**64 + a
    negative run_id): compare them modulo 2**64. run ids may be negative.

  ``trace_runs`` holds, per run id: its modules, devices, first thunk start and last thunk end,
  ``dispatch_us``/``dispatch_event``/``dispatch_tie``: trace.json's event with that ``run_id`` arg
  on the annotating thread ("trace.json run_id arg"), else the Python thread's producer whose flow
  opened the region of the run's first thunk event directly ("xplane flow", 1 hop), else null;
  ``flow_origin_us``/``flow_origin_event``/``flow_hops``: where the flow walk back from that first
  thunk ended on the annotating thread, in how many flows (``flow_origins``); the step by the
  dispatch (the annotation holding it) and by the fallback rule (the last annotation that started
  before the run's first thunk event). ``trace_steps[i].run_ids``: the runs whose ``step`` is i,
  the step by the dispatch where there is one, else by the fallback (the two agree wherever both
  exist, in all three fixtures).
* Per step: ``device_start_us``/``device_end_us`` = first start / last end of those runs' thunk
  events (events whose args hold ``hlo_op`` and ``run_id``), ``device_busy_us`` = the length of
  their union (all devices merged), ``thunk_us`` = their summed durations. ``thunk_us_total`` sums
  every thunk event's duration; ``thunk_us_top_level`` only those not nested in another thunk of
  the same run on the same thread (a ``while`` holds its body's events; none of these programs
  loops, so the two are equal).
* Async thunks: a thunk event (``dot``, ``dot.1`` here) can return on its line before its work
  on the Eigen pool is done; its ``end: <op>`` marker (stat ``_c`` = the thunk's ``_p``, on any
  line; trace.json keeps the marker but drops ``_c``) marks the op's end, as hlogap's tests take
  it (tests/test_timing.py ``_events_by_op``). From the xplane (``marker_ends``): per run
  ``last_end_marker_us``, per step ``device_end_marker_us``, and ``thunk_us_total_to_markers``,
  every thunk lasting until its marker where that ends later. A marker is not bounded by the
  step: on a loaded 2-core machine, ``end: dot`` markers came up to ~17 ms after the next step's
  annotation started, i.e. after ``block_until_ready`` had returned on the run's outputs, while
  the last thunk event of every step ended before the next annotation (``device_end_us``).
  ``thunk_us_total_to_markers`` is unclipped (hlogap cuts such run-ons at the module's next
  execution: ``_clip_to_execution`` in hlogap/trace/backends/stat_events.py).
* Each steady step's device work ends after its annotation ends (the block is outside it); it
  starts while the Python thread is still inside the annotation or just after it, depending on
  the thread scheduling. Step 0's may end inside its annotation: the first call's host work after
  its dispatch can outlast the device work (seen in ``documented_two_fns`` on a 2-core machine:
  the Python thread lost the CPU for ~7 ms right after dispatching the update). The 8-device
  launch's ``Execute`` keeps the Python thread a few ms (it enqueues on every device), so those
  annotations are longer, still shorter than the device work.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
SAMPLE_DIR = ROOT / "hlogap" / "data" / "sample"
SAMPLE_PROGRAM = "mlp_train"
RUN_NAME = "2026_01_01_00_00_00"
ITERATIONS = 3
HOST_GAP_S = 0.002  # host time at the start of every step, before anything is launched
SHARDED_DEVICES = 8
DUMP_PROGRAMS = frozenset({"mlp", "conv", "attention", "sharded_train"})
DUMP_PLACEHOLDER = "<dump_dir>"

# A module to run: (python function, example arguments). jit'd and compiled in the child.
Module = tuple[Callable[..., Any], tuple[Any, ...]]
# Arguments each program donates (`jax.jit(..., donate_argnums=...)`), by program: a donated
# input's buffer becomes an output's, and every call gets fresh copies of its inputs.
# `mem_kept` is `mem_donate` without donating (same module name: `diff` compares the two).
DONATED: dict[str, tuple[int, ...]] = {"mem_donate": (0,)}
DOCUMENTED_STEPS = 6  # steps of the documented_* programs, step 0 compiling
# Programs run on several host devices (--xla_force_host_platform_device_count).
DEVICE_COUNTS = {
    "sharded_train": SHARDED_DEVICES,
    "documented_sharded": SHARDED_DEVICES,
    "documented_block": SHARDED_DEVICES,
    "documented_cond_sharded": SHARDED_DEVICES,
    "documented_all_to_all": SHARDED_DEVICES,
}


# ---------------------------------------------------------------------------------------------
# The programs. Each builder runs inside the child process (jax imported there) and returns the
# modules to compile and profile. Inputs come from numpy so no helper module gets compiled.
# ---------------------------------------------------------------------------------------------


def _rng(seed: int = 0) -> Any:
    import numpy as np

    return np.random.default_rng(seed)


def _f32(rng: Any, *shape: int, scale: float = 1.0, dtype: Any = None) -> Any:
    """Normal random array made in numpy (f32, or ``dtype``) and put on the default device."""
    import jax
    import numpy as np

    return jax.device_put((rng.standard_normal(shape) * scale).astype(dtype or np.float32))


def _device(array: Any) -> Any:
    """A numpy array put on the default device as it is."""
    import jax

    return jax.device_put(array)


def _mlp_params(rng: Any) -> tuple[Any, ...]:
    import jax
    import numpy as np

    w1 = _f32(rng, 512, 1024, scale=0.04)
    b1 = jax.device_put(np.zeros(1024, np.float32))
    w2 = _f32(rng, 1024, 512, scale=0.03)
    b2 = jax.device_put(np.zeros(512, np.float32))
    return w1, b1, w2, b2


def _make_mlp(shifted: bool) -> Callable[..., Any]:
    import jax

    def mlp_core(x: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
        h = jax.nn.gelu(x @ w1 + b1, approximate=True)
        return h @ w2 + b2

    if not shifted:

        def mlp(x: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
            return mlp_core(x, w1, b1, w2, b2)

        return mlp

    def mlp(x: Any, w1: Any, b1: Any, w2: Any, b2: Any, z: Any) -> Any:  # type: ignore[no-redef]
        # One unrelated extra op: a 16x16 matmul of an unrelated input. Its fusion takes the name
        # `ynn_fusion`, so the MLP's two dot fusions become `ynn_fusion.2` and `ynn_fusion.1`
        # (`ynn_fusion.1` and `ynn_fusion` in `mlp`): same module name, shifted op names.
        extra = z.reshape(16, 16)
        return mlp_core(x, w1, b1, w2, b2), extra @ extra

    return mlp


def build_mlp(shifted: bool = False) -> list[Module]:
    rng = _rng()
    x = _f32(rng, 64, 512)
    params = _mlp_params(rng)
    if not shifted:
        return [(_make_mlp(False), (x, *params))]
    return [(_make_mlp(True), (x, *params, _f32(rng, 256)))]


def _mlp_train_step(name: str) -> Callable[..., Any]:
    """One SGD step of the MLP, named `name` (jax names the module `jit_<name>`)."""
    import jax
    import jax.numpy as jnp

    def step(params: Any, x: Any, y: Any) -> Any:
        def loss(p: Any) -> Any:
            w1, b1, w2, b2 = p
            h = jax.nn.gelu(x @ w1 + b1, approximate=True)
            return jnp.mean((h @ w2 + b2 - y) ** 2)

        value, grads = jax.value_and_grad(loss)(params)
        return tuple(p - 0.01 * g for p, g in zip(params, grads, strict=True)), value

    step.__name__ = step.__qualname__ = name
    return step


def build_mlp_train() -> list[Module]:
    rng = _rng()
    x = _f32(rng, 64, 512)
    y = _f32(rng, 64, 512)
    return [(_mlp_train_step("mlp_train"), (_mlp_params(rng), x, y))]


def build_conv() -> list[Module]:
    import jax
    from jax import lax

    dn = ("NHWC", "HWIO", "NHWC")

    def conv(x: Any, w1: Any, w2: Any, w3: Any, w4: Any) -> Any:
        # 3x3 stride-2 SAME conv, 16 -> 32 channels: [8,32,32,16] -> [8,16,16,32]
        h = jax.nn.relu(lax.conv_general_dilated(x, w1, (2, 2), "SAME", dimension_numbers=dn))
        # dilated 3x3 (rhs_dilation 2), explicit padding 2: stays [8,16,16,32]
        h = jax.nn.relu(
            lax.conv_general_dilated(
                h, w2, (1, 1), ((2, 2), (2, 2)), rhs_dilation=(2, 2), dimension_numbers=dn
            )
        )
        # grouped 3x3 conv, 4 groups of 8 channels, VALID: [8,14,14,32]
        h = jax.nn.relu(
            lax.conv_general_dilated(
                h, w3, (1, 1), "VALID", dimension_numbers=dn, feature_group_count=4
            )
        )
        # 1x1 conv 32 -> 64 with asymmetric padding and stride 2
        return lax.conv_general_dilated(h, w4, (2, 2), ((0, 1), (1, 0)), dimension_numbers=dn)

    rng = _rng()
    args = (
        _f32(rng, 8, 32, 32, 16),
        _f32(rng, 3, 3, 16, 32, scale=0.1),
        _f32(rng, 3, 3, 32, 32, scale=0.1),
        _f32(rng, 3, 3, 8, 32, scale=0.1),
        _f32(rng, 1, 1, 32, 64, scale=0.1),
    )
    return [(conv, args)]


def build_conv3d() -> list[Module]:
    import jax
    from jax import lax

    dn = ("NDHWC", "DHWIO", "NDHWC")

    def conv3d(x: Any, w1: Any, w2: Any) -> Any:
        h = jax.nn.relu(lax.conv_general_dilated(x, w1, (1, 1, 1), "SAME", dimension_numbers=dn))
        return lax.conv_general_dilated(h, w2, (2, 2, 2), "VALID", dimension_numbers=dn)

    rng = _rng()
    args = (
        _f32(rng, 2, 16, 16, 16, 8),
        _f32(rng, 3, 3, 3, 8, 16, scale=0.1),
        _f32(rng, 2, 2, 2, 16, 16, scale=0.1),
    )
    return [(conv3d, args)]


def build_matmul_bf16() -> list[Module]:
    import jax.numpy as jnp

    def matmul_bf16(a: Any, b: Any) -> Any:
        return a @ b

    rng = _rng()
    a = _f32(rng, 256, 512, dtype=jnp.bfloat16)
    b = _f32(rng, 512, 1024, scale=0.05, dtype=jnp.bfloat16)
    return [(matmul_bf16, (a, b))]


def build_matmul_int8() -> list[Module]:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    def matmul_int8(x: Any, w_q: Any, scale: Any, a_q: Any, b_q: Any) -> Any:
        # int8 weights x bf16 activations: dequantize by convert (+ per-column scale), bf16 dot.
        w = w_q.astype(jnp.bfloat16) * scale
        y = x @ w
        # s8 x s8 -> s32 dot
        acc = lax.dot_general(a_q, b_q, (((1,), (0,)), ((), ())), preferred_element_type=jnp.int32)
        return y, acc

    rng = _rng()
    x = _f32(rng, 128, 512, dtype=jnp.bfloat16)
    w_q = jax.device_put(rng.integers(-127, 128, (512, 1024), dtype=np.int8))
    scale = jax.device_put(np.full(1024, 0.01).astype(jnp.bfloat16))
    a_q = jax.device_put(rng.integers(-127, 128, (128, 512), dtype=np.int8))
    b_q = jax.device_put(rng.integers(-127, 128, (512, 256), dtype=np.int8))
    return [(matmul_int8, (x, w_q, scale, a_q, b_q))]


def build_attention() -> list[Module]:
    import jax
    import jax.numpy as jnp

    def attention(q: Any, k: Any, v: Any) -> Any:
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(jnp.float32(q.shape[-1]))
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)

    rng = _rng()
    shape = (2, 4, 128, 64)
    return [(attention, tuple(_f32(rng, *shape) for _ in range(3)))]


def build_reductions() -> list[Module]:
    import jax
    import jax.numpy as jnp

    def reductions(x: Any) -> Any:
        return (
            jnp.sum(x, axis=0),
            jnp.max(x, axis=1),
            jnp.mean(x),
            jax.nn.logsumexp(x, axis=1),
            jnp.cumsum(x, axis=1),
            jnp.argmax(x, axis=0),
        )

    return [(reductions, (_f32(_rng(), 256, 512),))]


def build_scan() -> list[Module]:
    import jax
    import jax.numpy as jnp

    def scan(h0: Any, xs: Any, w: Any) -> Any:
        def body(h: Any, x: Any) -> tuple[Any, Any]:
            h = jnp.tanh(h @ w + x)
            return h, jnp.sum(h)

        return jax.lax.scan(body, h0, xs)

    rng = _rng()
    return [(scan, (_f32(rng, 32, 128), _f32(rng, 16, 32, 128), _f32(rng, 128, 128, scale=0.1)))]


def build_fori() -> list[Module]:
    import jax
    import jax.numpy as jnp

    def fori(x: Any, w: Any) -> Any:
        def body(i: Any, x: Any) -> Any:
            return 0.5 * (x @ w) + jnp.sin(x) * i.astype(jnp.float32)

        return jax.lax.fori_loop(0, 16, body, x)

    rng = _rng()
    return [(fori, (_f32(rng, 32, 128), _f32(rng, 128, 128, scale=0.1)))]


def build_gather_scatter() -> list[Module]:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    def gather_scatter(table: Any, idx: Any, upd: Any, start: Any, vec: Any) -> Any:
        rows = table[idx]  # gather
        acc = jnp.zeros_like(table).at[idx].add(upd)  # scatter-add
        win = lax.dynamic_slice(table, (start, 0), (16, 64))
        table2 = lax.dynamic_update_slice(table, win * 2.0, (start + 16, 0))
        order = jnp.argsort(vec)
        srt = jnp.sort(vec)
        top_vals, top_idx = lax.top_k(vec, 8)
        return rows, acc, table2, order, srt, top_vals, top_idx

    rng = _rng()
    table = _f32(rng, 1024, 64)
    idx = jax.device_put(rng.integers(0, 1024, 128, dtype=np.int32))
    upd = _f32(rng, 128, 64)
    start = jax.device_put(np.int32(100))
    vec = _f32(rng, 4096)
    return [(gather_scatter, (table, idx, upd, start, vec))]


def build_layernorm() -> list[Module]:
    import jax.numpy as jnp
    from jax import lax
    from jax.scipy.special import erf

    def layernorm(x: Any, gamma: Any, beta: Any) -> Any:
        mu = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
        y = (x - mu) * lax.rsqrt(var + 1e-5) * gamma + beta
        return y, jnp.exp(y) + jnp.log(jnp.abs(y) + 1.0), erf(y)

    rng = _rng()
    return [(layernorm, (_f32(rng, 256, 768), _f32(rng, 768), _f32(rng, 768)))]


def build_sharded_train() -> list[Module]:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    devices = jax.devices()
    if len(devices) != SHARDED_DEVICES:
        raise RuntimeError(f"sharded_train needs {SHARDED_DEVICES} devices, got {len(devices)}")
    mesh = Mesh(np.array(devices).reshape(4, 2), ("data", "model"))

    def sh(*spec: str | None) -> NamedSharding:
        return NamedSharding(mesh, P(*spec))

    def train_step(params: Any, x: Any, y: Any) -> Any:
        def loss(p: Any) -> Any:
            # FSDP-style storage (data x model), gathered to model-parallel for the compute.
            w1 = jax.lax.with_sharding_constraint(p[0], sh(None, "model"))
            w2 = jax.lax.with_sharding_constraint(p[1], sh("model", None))
            h = jnp.tanh(x @ w1)
            return jnp.mean((h @ w2 - y) ** 2)

        value, grads = jax.value_and_grad(loss)(params)
        grads = [jax.lax.with_sharding_constraint(g, sh("data", "model")) for g in grads]
        return [p - 0.01 * g for p, g in zip(params, grads, strict=True)], value

    def exchange(a: Any) -> Any:
        # Per-shard [16, 128]: ring shift over 'data', all-to-all over 'model', a reduce-scatter
        # and an all-gather over 'data', an all-reduce over 'model'.
        a = jax.lax.ppermute(a, "data", [(i, (i + 1) % 4) for i in range(4)])
        a = jax.lax.all_to_all(a, "model", 0, 0, tiled=True)
        r = jax.lax.psum_scatter(a, "data", scatter_dimension=0, tiled=True)
        g = jax.lax.all_gather(r, "data", axis=0, tiled=True)
        return g + jax.lax.psum(a, "model")

    ring_exchange = jax.shard_map(
        exchange, mesh=mesh, in_specs=P("data", "model"), out_specs=P("data", "model")
    )
    ring_exchange.__name__ = "ring_exchange"

    rng = _rng()

    def put(shape: tuple[int, ...], spec: NamedSharding, scale: float = 1.0) -> Any:
        return jax.device_put((rng.standard_normal(shape) * scale).astype(np.float32), spec)

    params = [
        put((256, 512), sh("data", "model"), 0.05),
        put((512, 256), sh("data", "model"), 0.05),
    ]
    x = put((64, 256), sh("data", None))
    y = put((64, 256), sh("data", None))
    z = put((64, 256), sh("data", "model"))
    return [(train_step, (params, x, y)), (ring_exchange, (z,))]


def build_fft_1d() -> list[Module]:
    import jax.numpy as jnp
    import numpy as np

    def fft_1d(x: Any, z: Any) -> Any:
        return jnp.fft.rfft(x), jnp.fft.fft(z), jnp.fft.irfft(jnp.fft.rfft(x) * 0.5)

    rng = _rng()
    z = (rng.standard_normal((16, 1024)) + 1j * rng.standard_normal((16, 1024))).astype(
        np.complex64
    )
    return [(fft_1d, (_f32(rng, 16, 1024), _device(z)))]


def build_fft_2d() -> list[Module]:
    import jax.numpy as jnp
    import numpy as np

    def fft_2d(x: Any, z: Any) -> Any:
        return jnp.fft.rfft2(x), jnp.fft.ifft2(z)

    rng = _rng()
    z = (rng.standard_normal((4, 64, 128)) + 1j * rng.standard_normal((4, 64, 128))).astype(
        np.complex64
    )
    return [(fft_2d, (_f32(rng, 4, 128, 128), _device(z)))]


def _spd(rng: Any, batch: int, n: int) -> Any:
    """Symmetric positive definite matrices (a Cholesky or an eigensolver's input)."""
    import numpy as np

    a = rng.standard_normal((batch, n, n)).astype(np.float32)
    return _device(a @ a.transpose(0, 2, 1) + n * np.eye(n, dtype=np.float32))


def build_cholesky() -> list[Module]:
    import jax.scipy.linalg as jsl

    def cholesky(a: Any, b: Any) -> Any:
        factor = jsl.cho_factor(a, lower=True)
        return jsl.cho_solve(factor, b)  # potrf, then two triangular solves

    rng = _rng()
    return [(cholesky, (_spd(rng, 4, 96), _f32(rng, 4, 96, 8)))]


def build_solve() -> list[Module]:
    import jax.numpy as jnp

    def solve(a: Any, b: Any) -> Any:
        return jnp.linalg.solve(a, b)  # getrf with pivoting, then triangular solves

    rng = _rng()
    return [(solve, (_spd(rng, 2, 64), _f32(rng, 2, 64, 16)))]


def build_qr() -> list[Module]:
    import jax.numpy as jnp

    def qr(a: Any) -> Any:
        return jnp.linalg.qr(a)  # geqrf, then the Householder product (orgqr)

    rng = _rng()
    return [(qr, (_f32(rng, 3, 160, 64),))]


def build_eigh() -> list[Module]:
    import jax.numpy as jnp

    def eigh(a: Any) -> Any:
        return jnp.linalg.eigh(a)

    rng = _rng()
    return [(eigh, (_spd(rng, 2, 96),))]


def build_svd() -> list[Module]:
    import jax.numpy as jnp

    def svd(a: Any) -> Any:
        return jnp.linalg.svd(a, full_matrices=False)

    rng = _rng()
    return [(svd, (_f32(rng, 128, 48),))]


def build_top_k() -> list[Module]:
    import jax.numpy as jnp
    from jax import lax

    def top_k(x: Any) -> Any:
        values, indices = lax.top_k(jnp.tanh(x), 16)  # the TopK custom call on CPU
        return values * 2.0, indices

    rng = _rng()
    return [(top_k, (_f32(rng, 64, 4096),))]


def build_sort_multi() -> list[Module]:
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    def sort_multi(keys: Any, values: Any, ids: Any) -> Any:
        by_key = lax.sort((keys, values, ids), dimension=-1, num_keys=1)  # one comparator, 3 arrays
        two_keys = lax.sort((keys, values), dimension=-1, num_keys=2)
        return by_key, two_keys, jnp.argsort(values, axis=-1)

    rng = _rng()
    ids = _device(np.tile(np.arange(2048, dtype=np.int32), (8, 1)))
    return [(sort_multi, (_f32(rng, 8, 2048), _f32(rng, 8, 2048), ids))]


def build_segment_sum() -> list[Module]:
    import jax
    import numpy as np

    def segment_sum(data: Any, segments: Any) -> Any:
        return jax.ops.segment_sum(data, segments, num_segments=128)

    rng = _rng()
    segments = _device(np.sort(rng.integers(0, 128, 4096)).astype(np.int32))
    return [(segment_sum, (_f32(rng, 4096, 64), segments))]


def build_point_scatter() -> list[Module]:
    import numpy as np

    def point_scatter(table: Any, rows: Any, updates: Any) -> Any:
        added = table.at[rows].add(updates)  # a few rows combined in place
        return added.at[rows, 3].set(0.0)  # single elements overwritten

    rng = _rng()
    rows = _device(np.array([5, 77, 300, 1021], dtype=np.int32))
    return [(point_scatter, (_f32(rng, 1024, 256), rows, _f32(rng, 4, 256)))]


def build_mem_donate() -> list[Module]:
    """mlp_train's step under another name, for `mem_donate` (donating its parameters: XLA
    writes the new ones in place) and `mem_kept` (not donating: the same module to diff)."""
    rng = _rng()
    step = _mlp_train_step("mem_donate")
    return [(step, (_mlp_params(rng), _f32(rng, 64, 512), _f32(rng, 64, 512)))]


def build_mem_remat() -> list[Module]:
    """The gradient of a scanned stack of layers whose activations are recomputed (remat)."""
    import jax
    import jax.numpy as jnp

    def mem_remat(ws: Any, x: Any) -> Any:
        @jax.checkpoint
        def layer(h: Any, w: Any) -> Any:
            return jnp.tanh(h @ w), None

        def loss(ws: Any) -> Any:
            h, _ = jax.lax.scan(layer, x, ws)
            return jnp.sum(h**2)

        return jax.grad(loss)(ws)

    rng = _rng()
    return [(mem_remat, (_f32(rng, 8, 256, 256, scale=0.05), _f32(rng, 128, 256)))]


def build_mem_temp() -> list[Module]:
    """A large temporary: a 2048 x 2048 product that only a column reduction keeps."""

    def mem_temp(a: Any, b: Any) -> Any:
        y = a @ b
        return (y * y).sum(axis=0) + y.max(axis=0)

    rng = _rng()
    return [(mem_temp, (_f32(rng, 2048, 128), _f32(rng, 128, 2048)))]


def build_flaws() -> list[Module]:
    """One deliberate flaw per module, each for the action that names it (tests/test_advice.py):
    a matmul of 8 rows per weight read (under the ridge), an f32 matmul that could be bf16, a
    transpose materialised between two matmuls, and a loop of thousands of tiny ops."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    def skinny_matmul(x: Any, w: Any) -> Any:
        return x @ w

    def f32_matmul(a: Any, b: Any) -> Any:
        return a @ b

    def transpose_between(x: Any, a: Any, b: Any) -> Any:
        # Heads moved in front of the rows: a transpose of two major dims, which no dot's
        # dimension numbers can absorb, between the two matmuls.
        h = (x @ a).reshape(256, 32, 32)
        t = jnp.transpose(h, (1, 0, 2)).reshape(32, 8192)
        return t @ b

    def tiny_ops(v: Any, w: Any, n: Any) -> Any:
        # A loop of a traced trip count (not unrolled; big enough that XLA:CPU does not compile
        # it into one call): each trip runs its counter, its test and a few small kernels, each
        # a few microseconds of launch for little work, 200 times a step.
        return jax.lax.fori_loop(0, n, lambda i, c: jnp.tanh(c @ w) * 0.5 + i, v)

    rng = _rng()
    return [
        (skinny_matmul, (_f32(rng, 8, 1024), _f32(rng, 1024, 1024))),
        (f32_matmul, (_f32(rng, 512, 512), _f32(rng, 512, 512))),
        (transpose_between, (_f32(rng, 256, 512), _f32(rng, 512, 1024), _f32(rng, 8192, 64))),
        (tiny_ops, (_f32(rng, 16, 128), _f32(rng, 128, 128), _device(np.int32(200)))),
    ]


# ---------------------------------------------------------------------------------------------
# The documented_* programs: a training loop profiled as JAX's docs show (see the module doc).
# ---------------------------------------------------------------------------------------------


@dataclass
class Documented:
    """A training loop: ``functions`` are jitted in the child (module ``jit_<name>``) and handed
    to ``step`` in this order; ``step(jitted, state)`` dispatches one step and returns the new
    state, which the loop blocks on after the step's annotation."""

    functions: list[Callable[..., Any]]
    state: Any
    step: Callable[[Sequence[Callable[..., Any]], Any], Any]


def _named(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    fn.__name__ = fn.__qualname__ = name
    return fn


def _mlp_loss(params: Any, batch: Any) -> Any:
    import jax
    import jax.numpy as jnp

    w1, b1, w2, b2 = params
    x, y = batch
    h = jax.nn.gelu(x @ w1 + b1, approximate=True)
    return jnp.mean((h @ w2 + b2 - y) ** 2)


def _sgd(params: Any, grads: Any) -> Any:
    return tuple(p - 0.01 * g for p, g in zip(params, grads, strict=True))


def _sgd_training(
    name: str, loss_fn: Callable[[Any, Any], Any], params: Any, batch: Any
) -> Documented:
    """One jitted SGD step of `loss_fn`, named `name` (module ``jit_<name>``): the parameters
    are the state carried from step to step, the batch the same every step."""
    import jax

    def train_step(params: Any, batch: Any) -> Any:
        loss, grads = jax.value_and_grad(loss_fn)(params, batch)
        return _sgd(params, grads), loss

    def step(jitted: Sequence[Callable[..., Any]], state: Any) -> Any:
        (train,) = jitted
        params, _ = state
        return train(params, batch)  # (params, loss)

    return Documented([_named(train_step, name)], (params, None), step)


def build_documented_step() -> Documented:
    """One jitted SGD step of the MLP (batch 128), its parameters the state carried over."""
    rng = _rng()
    params = _mlp_params(rng)
    batch = (_f32(rng, 128, 512), _f32(rng, 128, 512))
    return _sgd_training("documented_step", _mlp_loss, params, batch)


def build_documented_sharded() -> Documented:
    """Data parallel over 8 host devices: parameters replicated, the batch split on 'data'; the
    gradients' mean over the batch is an all-reduce."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    devices = jax.devices()
    if len(devices) != SHARDED_DEVICES:
        raise RuntimeError(f"documented_sharded needs {SHARDED_DEVICES} devices: {len(devices)}")
    mesh = Mesh(np.array(devices), ("data",))
    replicated, split = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))

    def loss_fn(params: Any, batch: Any) -> Any:
        w1, w2 = params
        x, y = batch
        return jnp.mean((jnp.tanh(x @ w1) @ w2 - y) ** 2)

    rng = _rng()

    def put(shape: tuple[int, ...], sharding: NamedSharding, scale: float = 1.0) -> Any:
        return jax.device_put((rng.standard_normal(shape) * scale).astype(np.float32), sharding)

    params = (put((256, 512), replicated, 0.05), put((512, 256), replicated, 0.05))
    batch = (put((512, 256), split), put((512, 256), split))
    return _sgd_training("documented_sharded", loss_fn, params, batch)


def build_documented_two_fns() -> Documented:
    """Two jitted functions a step: the loss and gradients, then the parameter update."""
    import jax

    def grads_fn(params: Any, batch: Any) -> Any:
        return jax.value_and_grad(_mlp_loss)(params, batch)

    def update_fn(params: Any, grads: Any) -> Any:
        return _sgd(params, grads)

    rng = _rng()
    params = _mlp_params(rng)
    batch = (_f32(rng, 128, 512), _f32(rng, 128, 512))

    def step(jitted: Sequence[Callable[..., Any]], state: Any) -> Any:
        grad_fn, update = jitted
        params, _ = state
        loss, grads = grad_fn(params, batch)
        return update(params, grads), loss

    functions = [_named(grads_fn, "documented_grads"), _named(update_fn, "documented_update")]
    return Documented(functions, (params, None), step)


# Programs with a flaw an expert names by its pattern (hlogap.advice.causes: unfused
# attention, materialized logits, per-example loop), profiled the documented way. The loop and
# its vmap share one function name (module `jit_per_example_step`): `diff` compares the two as
# the same program before and after the fix.
ATTENTION_LAYERS, ATTENTION_HEADS = 3, 4
# How documented_attention (written out), _fused and _blocked compute attention.
AttentionImplementation = Literal["written", "dot_product_attention", "blocked"]
# Keys a trip of documented_attention_blocked: 4 trips over the 256 keys, [2,4,256,64] scores a
# block (a flash kernel's block is 64 or 128 keys).
ATTENTION_KEY_BLOCK = 64
ATTENTION_RTOL, ATTENTION_ATOL = 1e-5, 1e-5  # f32 sums in another order: ~5e-7 apart
LOOP_BATCH, LOOP_DIM = 64, 2048  # 16 MB of weights: read from memory each trip, not cache
# Tokens a block of documented_logits_chunked: [16, 32768] logits, 2 MB; 16 rows a weight read,
# over the 12 the CPU chip's f32 ridge asks (at 8 hlogap put the output matmul below the ridge).
LOGITS_CHUNK = 16


def build_documented_attention(implementation: AttentionImplementation = "written") -> Documented:
    """A 3-layer attention block, softmax(QK^T / sqrt(d)) V, in one of three implementations
    (all under the same function name: `diff` pairs them): "written" out with its [b,h,s,s]
    scores in memory between the two batched dots (documented_attention, no fused kernel);
    through jax.nn.dot_product_attention ("dot_product_attention": documented_attention_fused);
    or "blocked" as a flash kernel computes it (documented_attention_blocked, _blocked_attention):
    the CPU's stand-in for a fused kernel."""
    import jax
    import jax.numpy as jnp

    batch, heads, seq, head_dim = 2, ATTENTION_HEADS, 256, 32
    width = heads * head_dim

    def layer(x: Any, wqkv: Any, wo: Any) -> Any:
        qkv = (x @ wqkv).reshape(batch, seq, 3, heads, head_dim)
        if implementation == "dot_product_attention":
            # [batch, seq, heads, head_dim] each, the layout dot_product_attention takes.
            q, k, v = (qkv[:, :, i] for i in range(3))
            out = jax.nn.dot_product_attention(q, k, v)
            return x + out.reshape(batch, seq, width) @ wo
        q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
        if implementation == "blocked":
            out = _blocked_attention(q, k, v)
        else:
            scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(jnp.float32(head_dim))
            out = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)
        return x + out.transpose(0, 2, 1, 3).reshape(batch, seq, width) @ wo

    def attention_step(params: Any, x: Any) -> Any:
        for wqkv, wo in params:
            x = layer(x, wqkv, wo)
        return x

    rng = _rng()
    params = tuple(
        (_f32(rng, width, 3 * width, scale=0.05), _f32(rng, width, width, scale=0.05))
        for _ in range(ATTENTION_LAYERS)
    )
    x = _f32(rng, batch, seq, width)

    def step(jitted: Sequence[Callable[..., Any]], state: Any) -> Any:
        (run,) = jitted
        return run(params, x)

    return Documented([_named(attention_step, "attention_step")], None, step)


def _blocked_attention(q: Any, k: Any, v: Any) -> Any:
    """softmax(q k^T / sqrt(d)) v over [batch, heads, seq, head_dim] operands, one block of
    ATTENTION_KEY_BLOCK keys a trip of a lax.scan with an online softmax: the loop carries each
    query row's running max and sum of exponentials and its unnormalized output, rescaled by
    exp(old max - new max) when a block raises the max, so only [b,h,s,block] scores exist at
    once (a flash-attention kernel's arithmetic, its blocks in memory on XLA:CPU)."""
    import jax
    import jax.numpy as jnp

    batch, heads, seq, head_dim = q.shape
    blocks = seq // ATTENTION_KEY_BLOCK

    def by_block(t: Any) -> Any:  # [blocks, batch, heads, block, head_dim]: what scan walks
        return t.reshape(batch, heads, blocks, ATTENTION_KEY_BLOCK, head_dim).transpose(
            2, 0, 1, 3, 4
        )

    q = q / jnp.sqrt(jnp.float32(head_dim))

    def one_block(carry: Any, kv: Any) -> Any:
        row_max, row_sum, out = carry
        k_block, v_block = kv
        scores = jnp.einsum("bhqd,bhkd->bhqk", q, k_block)
        new_max = jnp.maximum(row_max, scores.max(axis=-1))
        p = jnp.exp(scores - new_max[..., None])
        rescale = jnp.exp(row_max - new_max)
        row_sum = row_sum * rescale + p.sum(axis=-1)
        out = out * rescale[..., None] + jnp.einsum("bhqk,bhkd->bhqd", p, v_block)
        return (new_max, row_sum, out), None

    rows = (batch, heads, seq)
    start = (
        jnp.full(rows, -jnp.inf, jnp.float32),
        jnp.zeros(rows, jnp.float32),
        jnp.zeros(q.shape, jnp.float32),
    )
    (_, row_sum, out), _ = jax.lax.scan(one_block, start, (by_block(k), by_block(v)))
    return out / row_sum[..., None]


def blocked_attention_oracle(
    functions: Sequence[Callable[..., Any]], args: dict[int, tuple[Any, ...]]
) -> Any:
    """documented_attention_blocked computes what documented_attention does: both programs run
    on the traced step's inputs and compared (np.allclose at ATTENTION_RTOL/ATTENTION_ATOL), and
    each against the model evaluated in float64 numpy (independent of XLA)."""
    import jax
    import numpy as np

    (blocked,) = functions
    (written,) = build_documented_attention("written").functions
    params, x = args[0]
    got = {
        "blocked": np.asarray(jax.jit(blocked)(params, x)),
        "written": np.asarray(jax.jit(written)(params, x)),
    }
    exact = np.asarray(x, np.float64)
    for wqkv, wo in params:
        exact = _attention_layer_f64(
            exact, np.asarray(wqkv, np.float64), np.asarray(wo, np.float64)
        )
    return {
        "matches_unfused": {
            "against": "documented_attention (the same inputs: the traced step's)",
            "allclose": bool(
                np.allclose(
                    got["blocked"], got["written"], rtol=ATTENTION_RTOL, atol=ATTENTION_ATOL
                )
            ),
            "rtol": ATTENTION_RTOL,
            "atol": ATTENTION_ATOL,
            "max_abs_diff": float(np.max(np.abs(got["blocked"] - got["written"]))),
            "max_abs_diff_to_float64": {
                name: float(np.max(np.abs(out - exact))) for name, out in sorted(got.items())
            },
        }
    }


def _attention_layer_f64(x: Any, wqkv: Any, wo: Any) -> Any:
    """One layer of documented_attention in float64 numpy: x + softmax(qk^T/sqrt(d)) v wo."""
    import numpy as np

    batch, seq, width = x.shape
    heads = ATTENTION_HEADS
    head_dim = width // heads
    qkv = (x @ wqkv).reshape(batch, seq, 3, heads, head_dim).transpose(2, 0, 3, 1, 4)
    q, k, v = qkv
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(head_dim)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    out = (weights @ v).transpose(0, 2, 1, 3).reshape(batch, seq, width)
    return x + out @ wo


def _per_example_inputs() -> tuple[Any, Any, Any]:
    rng = _rng()
    w = _f32(rng, LOOP_DIM, LOOP_DIM, scale=0.05)
    xs, ys = _f32(rng, LOOP_BATCH, LOOP_DIM), _f32(rng, LOOP_BATCH, LOOP_DIM)
    return w, xs, ys


def _per_example(vmapped: bool) -> Documented:
    """The loss of a batch of 64 examples through one [2048,2048] layer: one example at a time in
    a fori_loop (a matrix-vector product on the same weights each trip), or batched with vmap."""
    import jax
    import jax.numpy as jnp

    w, xs, ys = _per_example_inputs()

    def one(w: Any, x: Any) -> Any:
        return jnp.tanh(w @ x)

    def per_example_step(w: Any, xs: Any, ys: Any) -> Any:
        if vmapped:
            out = jax.vmap(one, in_axes=(None, 0))(w, xs)
        else:

            def body(i: Any, out: Any) -> Any:
                return out.at[i].set(one(w, xs[i]))

            out = jax.lax.fori_loop(0, xs.shape[0], body, jnp.zeros_like(xs))
        return jnp.mean((out - ys) ** 2)

    def step(jitted: Sequence[Callable[..., Any]], state: Any) -> Any:
        (run,) = jitted
        return run(w, xs, ys)

    return Documented([_named(per_example_step, "per_example_step")], None, step)


def build_documented_loop() -> Documented:
    return _per_example(vmapped=False)


def build_documented_vmap() -> Documented:
    return _per_example(vmapped=True)


def build_documented_logits(chunked: bool = False) -> Documented:
    """A language model's output layer and cross-entropy, one SGD step: [128 tokens, 32768
    vocab] logits written to memory and read by the log-softmax (and its gradient). `chunked`:
    the same loss over blocks of LOGITS_CHUNK tokens in a lax.map, each block's logits made,
    reduced and (in the gradient) remade under jax.checkpoint, so no [128, 32768] tensor exists
    (documented_logits_chunked, the same function name: `diff` pairs the two)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    tokens, width, vocab = 128, 64, 32768

    def block_loss(w: Any, block: Any) -> Any:
        h, labels = block
        logp = jax.nn.log_softmax(h @ w, axis=-1)
        return -jnp.sum(jnp.take_along_axis(logp, labels[:, None], axis=-1))

    def loss_fn(w: Any, h: Any, labels: Any) -> Any:
        if chunked:
            blocks = (
                h.reshape(tokens // LOGITS_CHUNK, LOGITS_CHUNK, width),
                labels.reshape(tokens // LOGITS_CHUNK, LOGITS_CHUNK),
            )
            per_block = jax.lax.map(jax.checkpoint(lambda b: block_loss(w, b)), blocks)
            return jnp.sum(per_block) / tokens
        logits = h @ w
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))

    def logits_step(w: Any, h: Any, labels: Any) -> Any:
        loss, grad = jax.value_and_grad(loss_fn)(w, h, labels)
        return w - 0.01 * grad, loss

    rng = _rng()
    w0 = _f32(rng, width, vocab, scale=0.05)
    h = _f32(rng, tokens, width)
    labels = _device(rng.integers(0, vocab, (tokens,), dtype=np.int32))

    def step(jitted: Sequence[Callable[..., Any]], state: Any) -> Any:
        (run,) = jitted
        w, _ = state
        return run(w, h, labels)

    return Documented([_named(logits_step, "logits_step")], (w0, None), step)


# A conditional inside a loop (hlogap's runs per occurrence, issue 40 item 1): a lax.cond in a
# 12-trip fori_loop whose true branch (a [32,128] x [128,128] dot) is taken on trips 0, 3, 6, 9
# and whose false branch (x * 0.5 + 1, elementwise) on the other 8. Its oracle adds `parts`:
# cost_analysis() of each branch compiled on its own (XLA's HloCostAnalysis of one run), and
# `op_events`: per module and op, the thunk events of each run id in the trace.json.gz.
COND_TRIPS, COND_EVERY = 12, 3


def _cond_branches(w: Any) -> tuple[Callable[..., Any], Callable[..., Any]]:
    def taken(x: Any) -> Any:
        return x @ w

    def not_taken(x: Any) -> Any:
        return x * 0.5 + 1.0

    return taken, not_taken


def _cond_inputs() -> tuple[Any, Any]:
    rng = _rng()
    return _f32(rng, 32, 128), _f32(rng, 128, 128, scale=0.05)


def build_documented_cond_loop() -> Documented:
    """A lax.cond inside a 12-trip fori_loop: the dot branch runs 4 times a step, the
    elementwise branch 8 (see COND_TRIPS)."""
    import jax

    x0, w = _cond_inputs()

    def cond_loop(x: Any, w: Any) -> Any:
        taken, not_taken = _cond_branches(w)

        def body(i: Any, x: Any) -> Any:
            return jax.lax.cond(i % COND_EVERY == 0, taken, not_taken, x)

        return jax.lax.fori_loop(0, COND_TRIPS, body, x)

    def step(jitted: Sequence[Callable[..., Any]], state: Any) -> Any:
        (run,) = jitted
        return run(x0, w)

    return Documented([_named(cond_loop, "cond_loop")], None, step)


def cond_loop_parts() -> dict[str, Module]:
    """Each branch of documented_cond_loop as a program of its own, on the loop's shapes."""
    x0, w = _cond_inputs()
    taken, not_taken = _cond_branches(w)
    return {"true_branch": (taken, (x0,)), "false_branch": (not_taken, (x0,))}


# A transformer block on an 8-device mesh (issue 40 item 4: global shapes through XLA's
# rewrites): GSPMD with NamedSharding and with_sharding_constraint on a (data 2, fsdp 2,
# tensor 2) mesh; the batch split over data x fsdp, the weights stored split over fsdp (gathered
# for the compute) and tensor (heads, the FFN's hidden dim). Eight einsums: q, k, v, the
# scores, the weighted values, the output projection, the FFN's two. XLA merges batch and
# sequence into one dim of the projections. Its oracle adds `block`: the mesh, each einsum's
# global shapes as the program declares them (the jaxpr's dot_general operands) and the specs
# of its inputs and constraints (the jaxpr), and the lowered StableHLO's sharding annotations.
BLOCK_DIMS = {"batch": 8, "seq": 32, "d_model": 256, "heads": 8, "head_dim": 32, "d_ff": 1024}
BLOCK_BATCH = ("data", "fsdp")


def _block_program() -> tuple[Callable[..., Any], tuple[Any, ...], Any]:
    """The block's function, its arguments (params, x) and its mesh."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    devices = jax.devices()
    if len(devices) != SHARDED_DEVICES:
        raise RuntimeError(f"the block needs {SHARDED_DEVICES} devices: {len(devices)}")
    mesh = Mesh(np.array(devices).reshape(2, 2, 2), ("data", "fsdp", "tensor"))

    def sh(*spec: Any) -> NamedSharding:
        return NamedSharding(mesh, P(*spec))

    dims = BLOCK_DIMS
    b, s, d, h, k, f = (dims[n] for n in ("batch", "seq", "d_model", "heads", "head_dim", "d_ff"))
    heads = sh(BLOCK_BATCH, None, "tensor", None)
    rows = sh(BLOCK_BATCH, None, None)

    def transformer_block(params: Any, x: Any) -> Any:
        wq, wk, wv, wo, w_in, w_out = params
        c: Callable[..., Any] = jax.lax.with_sharding_constraint
        x = c(x, rows)
        q = c(jnp.einsum("bsd,dhk->bshk", x, wq), heads)
        key = c(jnp.einsum("bsd,dhk->bshk", x, wk), heads)
        v = c(jnp.einsum("bsd,dhk->bshk", x, wv), heads)
        scores = jnp.einsum("bshk,bthk->bhst", q, key) / np.float32(np.sqrt(k))
        scores = c(scores, sh(BLOCK_BATCH, "tensor", None, None))
        o = c(jnp.einsum("bhst,bthk->bshk", jax.nn.softmax(scores, axis=-1), v), heads)
        x = c(x + jnp.einsum("bshk,hkd->bsd", o, wo), rows)
        hidden = c(jax.nn.gelu(jnp.einsum("bsd,df->bsf", x, w_in)), sh(BLOCK_BATCH, None, "tensor"))
        return c(x + jnp.einsum("bsf,fd->bsd", hidden, w_out), rows)

    rng = _rng()

    def put(shape: tuple[int, ...], spec: NamedSharding, scale: float = 0.05) -> Any:
        return jax.device_put((rng.standard_normal(shape) * scale).astype(np.float32), spec)

    params = (
        put((d, h, k), sh("fsdp", "tensor", None)),
        put((d, h, k), sh("fsdp", "tensor", None)),
        put((d, h, k), sh("fsdp", "tensor", None)),
        put((h, k, d), sh("tensor", None, "fsdp")),
        put((d, f), sh("fsdp", "tensor")),
        put((f, d), sh("tensor", "fsdp")),
    )
    x = put((b, s, d), rows, 1.0)
    return transformer_block, (params, x), mesh


def build_documented_block() -> Documented:
    """The transformer block, one forward call a step (see BLOCK_DIMS)."""
    fn, args, _ = _block_program()

    def step(jitted: Sequence[Callable[..., Any]], state: Any) -> Any:
        (run,) = jitted
        return run(*args)

    return Documented([_named(fn, "transformer_block")], None, step)


def _spec(spec: Any) -> list[Any]:
    return [s if s is None or isinstance(s, str) else list(s) for s in spec]


def block_oracle(functions: Sequence[Callable[..., Any]], args: dict[int, tuple[Any, ...]]) -> Any:
    """The block as the program declares it, read from JAX (not from its HLO): the mesh, each
    einsum's global operand and result shapes (the jaxpr's dot_generals, in program order,
    with the einsum's name), the inputs' and constraints' specs, and the lowered StableHLO's
    sharding annotations (its arguments' and its constraints')."""
    import re

    import jax

    (fn,) = functions
    params, x = args[0]
    mesh = x.sharding.mesh
    jaxpr = jax.make_jaxpr(fn)(params, x)
    eqns = jaxpr.jaxpr.eqns
    leaves = jax.tree.leaves((params, x))
    # The spec each value is declared with: the inputs', and each constraint's output.
    declared: dict[Any, tuple[str, list[Any]]] = {
        var: ("input", _spec(a.sharding.spec))
        for var, a in zip(jaxpr.jaxpr.invars, leaves, strict=True)
    }
    for eqn in eqns:
        if eqn.primitive.name == "sharding_constraint":
            declared[eqn.outvars[0]] = ("constraint", _spec(eqn.params["sharding"].spec))

    einsums, constraints = [], []
    for n, eqn in enumerate(eqns):
        name = eqn.primitive.name
        if name == "dot_general":
            (lhs_c, rhs_c), (lhs_b, rhs_b) = eqn.params["dimension_numbers"]
            specs = [declared.get(v) for v in eqn.invars]
            einsums.append(
                {
                    "einsum": str(eqn.source_info.name_stack).rsplit("/", 1)[-1],
                    "operands": [list(v.aval.shape) for v in eqn.invars],
                    "result": list(eqn.outvars[0].aval.shape),
                    "contracting": [list(lhs_c), list(rhs_c)],
                    "batch": [list(lhs_b), list(rhs_b)],
                    # [how, spec] per operand: a program input's, a constraint's; null: none
                    "operand_specs": [list(s) if s else None for s in specs],
                    "result_spec": _reached_constraint(eqns, n),
                }
            )
        elif name == "sharding_constraint":
            constraints.append(
                {
                    "shape": list(eqn.invars[0].aval.shape),
                    "spec": _spec(eqn.params["sharding"].spec),
                }
            )
    text = jax.jit(fn).lower(params, x).as_text()
    return {
        "block": {
            "mesh": {
                "axes": {n: int(v) for n, v in mesh.shape.items()},
                "device_ids": mesh.device_ids.tolist(),
            },
            "dims": BLOCK_DIMS,
            "inputs": [{"shape": list(a.shape), "spec": _spec(a.sharding.spec)} for a in leaves],
            "einsums": einsums,
            "constraints": constraints,
            # Shardy's (JAX's default lowering): the mesh, each argument's type and sharding,
            # each constraint's sharding and type, as the lowered text writes them.
            "stablehlo_mesh": re.findall(r"sdy\.mesh @\w+ = <(\[[^\]]*\])>", text),
            "stablehlo_arguments": re.findall(
                r"%arg\d+: tensor<([^>]*)> \{sdy\.sharding = #sdy\.sharding<@\w+, (\[[^\]]*\])>",
                text,
            ),
            "stablehlo_constraints": re.findall(
                r"sdy\.sharding_constraint %\w+ <@\w+, (\[[^\]]*\])> : tensor<([^>]*)>", text
            ),
        }
    }


# Two sharded programs on a (data 2, model 4) mesh of 8 host devices (issue 40: global shapes
# through control flow and all-to-all), GSPMD with NamedSharding and with_sharding_constraint.
# documented_cond_sharded: a lax.cond whose branches hold sharded dots (an MLP whose hidden dim
# is split over model and whose down projection sums partial products; a gate projection),
# in a 2-trip loop taking each once. documented_all_to_all: a sequence-parallel
# activation (its sequence split over model) resharded to split its features (XLA moves the
# split with an all-to-all), then two projections; and sequence-parallel queries and keys
# resharded to split their heads, then the attention scores. Their oracle adds `dots`: every
# dot_general of the jaxpr (the cond's branches included) with its global shapes, and the specs
# of its operands and result as the program declares them, and the lowered StableHLO's.
SHARDED_MESH = {"data": 2, "model": 4}
COND_SHARDED_DIMS = {"batch": 64, "d_model": 96, "d_ff": 512}
ALL_TO_ALL_DIMS = {"batch": 16, "seq": 64, "d_model": 128, "d_ff": 192, "heads": 8, "head_dim": 16}


def _sharded_mesh() -> Callable[..., Any]:
    """`sh(*spec)`: a NamedSharding on the (data 2, model 4) mesh of the 8 host devices."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    devices = jax.devices()
    if len(devices) != SHARDED_DEVICES:
        raise RuntimeError(f"the program needs {SHARDED_DEVICES} devices: {len(devices)}")
    mesh = Mesh(np.array(devices).reshape(*SHARDED_MESH.values()), tuple(SHARDED_MESH))

    def sh(*spec: Any) -> NamedSharding:
        return NamedSharding(mesh, P(*spec))

    return sh


def _put(sh: Callable[..., Any], shape: tuple[int, ...], *spec: Any, seed: int = 0) -> Any:
    import jax
    import numpy as np

    rng = np.random.default_rng(seed * 100_000 + len(shape) * 1000 + sum(shape))
    return jax.device_put((rng.standard_normal(shape) * 0.05).astype(np.float32), sh(*spec))


def build_documented_cond_sharded() -> Documented:
    """A lax.cond between an MLP and a gate projection, on the (data, model) mesh, in a
    2-trip loop whose trips alternate (the predicate a runtime input's), so that each branch
    runs once in every execution."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    sh = _sharded_mesh()
    b, d, f = (COND_SHARDED_DIMS[n] for n in ("batch", "d_model", "d_ff"))

    def cond_sharded(x: Any, w_up: Any, w_down: Any, w_gate: Any, flag: Any) -> Any:
        c: Callable[..., Any] = jax.lax.with_sharding_constraint

        def mlp(x: Any) -> Any:
            hidden = c(jax.nn.relu(jnp.einsum("bd,df->bf", x, w_up)), sh("data", "model"))
            return c(jnp.einsum("bf,fd->bd", hidden, w_down), sh("data", None))

        def gate(x: Any) -> Any:
            gated = c(jnp.einsum("bd,de->be", x, w_gate), sh("data", "model"))
            return c(jax.nn.sigmoid(gated) * x, sh("data", None))

        def body(i: Any, x: Any) -> Any:
            return jax.lax.cond((i + flag) % 2 == 0, mlp, gate, x)

        return jax.lax.fori_loop(0, 2, body, x)

    args = (
        _put(sh, (b, d), "data", None),
        _put(sh, (d, f), None, "model"),
        _put(sh, (f, d), "model", None),
        _put(sh, (d, d), None, "model"),
    )
    flag = jax.device_put(np.int32(0))

    def step(jitted: Sequence[Callable[..., Any]], state: Any) -> Any:
        (run,) = jitted
        return run(*args, flag)

    return Documented([_named(cond_sharded, "cond_sharded")], None, step)


def build_documented_all_to_all() -> Documented:
    """Sequence parallel to feature parallel (an all-to-all), then two projections; queries
    and keys from sequence to heads split, then their scores."""
    import jax
    import jax.numpy as jnp

    sh = _sharded_mesh()
    b, s, d, f = (ALL_TO_ALL_DIMS[n] for n in ("batch", "seq", "d_model", "d_ff"))

    h, k = ALL_TO_ALL_DIMS["heads"], ALL_TO_ALL_DIMS["head_dim"]

    def all_to_all(x: Any, w_in: Any, w_out: Any, q: Any, key: Any) -> Any:
        c: Callable[..., Any] = jax.lax.with_sharding_constraint
        x = c(x, sh("data", "model", None))  # sequence parallel
        x = c(x, sh("data", None, "model"))  # features split: an all-to-all
        hidden = c(jax.nn.gelu(jnp.einsum("bsd,df->bsf", x, w_in)), sh("data", None, None))
        out = c(jnp.einsum("bsf,fd->bsd", hidden, w_out), sh("data", None, None))
        # Sequence-parallel queries and keys to heads split (as DeepSpeed-Ulysses does).
        q = c(q, sh("data", None, "model", None))
        key = c(key, sh("data", None, "model", None))
        return out, jnp.einsum("bshk,bthk->bhst", q, key)

    args = (
        _put(sh, (b, s, d), "data", "model", None),
        _put(sh, (d, f), "model", None),
        _put(sh, (f, d), None, None),
        _put(sh, (b, s, h, k), "data", "model", None, None),
        _put(sh, (b, s, h, k), "data", "model", None, None, seed=1),
    )

    def step(jitted: Sequence[Callable[..., Any]], state: Any) -> Any:
        (run,) = jitted
        return run(*args)

    return Documented([_named(all_to_all, "all_to_all")], None, step)


def sharded_dots_oracle(
    functions: Sequence[Callable[..., Any]], args: dict[int, tuple[Any, ...]]
) -> Any:
    """The program as it declares itself, read from JAX (not from its HLO): the mesh, every
    dot_general of its jaxpr (inside a cond's branches too: `branch`), in program order, with
    its global operand and result shapes, the einsum's name, the specs its operands are
    declared with (a program input's, a constraint's, through a cond's operands into the
    branch) and the constraint its result reaches; and the lowered StableHLO's sharding
    annotations."""
    import re

    import jax
    import numpy as np
    from jax.sharding import NamedSharding

    (fn,) = functions
    call_args = args[0]
    leaves = jax.tree.leaves(call_args)
    mesh = next(a.sharding.mesh for a in leaves if isinstance(a.sharding, NamedSharding))
    closed = jax.make_jaxpr(fn)(*call_args)
    dots: list[dict[str, Any]] = []

    def walk(jaxpr: Any, declared: dict[Any, list[Any]], branch: int | None) -> None:
        eqns = jaxpr.eqns
        for eqn in eqns:
            if eqn.primitive.name == "sharding_constraint":
                declared[eqn.outvars[0]] = ["constraint", _spec(eqn.params["sharding"].spec)]
        for n, eqn in enumerate(eqns):
            name = eqn.primitive.name
            if name == "dot_general":
                (lhs_c, rhs_c), (lhs_b, rhs_b) = eqn.params["dimension_numbers"]
                dots.append(
                    {
                        "einsum": str(eqn.source_info.name_stack).rsplit("/", 1)[-1],
                        "branch": branch,
                        "operands": [list(v.aval.shape) for v in eqn.invars],
                        "result": list(eqn.outvars[0].aval.shape),
                        "contracting": [list(lhs_c), list(rhs_c)],
                        "batch": [list(lhs_b), list(rhs_b)],
                        "operand_specs": [declared.get(v) for v in eqn.invars],
                        "result_spec": _reached_constraint(eqns, n),
                    }
                )
            elif name == "cond":
                for k, sub in enumerate(eqn.params["branches"]):
                    walk(sub.jaxpr, _into(declared, sub.jaxpr.invars, eqn.invars[1:]), k)
            elif name == "scan":  # consts, carry, xs in the order the loop takes them
                sub = eqn.params["jaxpr"].jaxpr
                walk(sub, _into(declared, sub.invars, eqn.invars), branch)
            elif name == "while":  # the condition's consts, then the body's, then the carry
                sub = eqn.params["body_jaxpr"].jaxpr
                rest = eqn.invars[eqn.params["cond_nconsts"] :]
                walk(sub, _into(declared, sub.invars, rest), branch)

    inputs = {
        var: ["input", _spec(a.sharding.spec)]
        for var, a in zip(closed.jaxpr.invars, leaves, strict=True)
        if isinstance(a.sharding, NamedSharding)
    }
    walk(closed.jaxpr, inputs, None)
    text = jax.jit(fn).lower(*call_args).as_text()
    ids = np.asarray(mesh.device_ids)
    return {
        "dots": {
            "mesh": {
                "axes": {n: int(v) for n, v in mesh.shape.items()},
                "device_ids": ids.tolist(),
                # the device-id distance between neighbours along each axis
                "strides": {
                    n: int(ids[tuple(1 if j == k else 0 for j in range(ids.ndim))] - ids.flat[0])
                    for k, n in enumerate(mesh.axis_names)
                },
            },
            "inputs": [
                {"shape": list(a.shape), "spec": _spec(a.sharding.spec)}
                for a in leaves
                if isinstance(a.sharding, NamedSharding)
            ],
            "dot_generals": dots,
            "stablehlo_arguments": re.findall(
                r"%arg\d+: tensor<([^>]*)> \{sdy\.sharding = #sdy\.sharding<@\w+, (\[[^\]]*\])>",
                text,
            ),
            "stablehlo_constraints": re.findall(
                r"sdy\.sharding_constraint %\w+ <@\w+, (\[[^\]]*\])> : tensor<([^>]*)>", text
            ),
        }
    }


def _into(declared: dict[Any, list[Any]], inner: Sequence[Any], outer: Sequence[Any]) -> Any:
    """The specs of a sub-jaxpr's inputs: those of the values passed to them."""
    # A literal passed in (a loop's bound) is no declared value (nor hashable).
    return {
        v: declared[o]
        for v, o in zip(inner, outer, strict=True)
        if not hasattr(o, "val") and o in declared
    }


def _reached_constraint(eqns: Sequence[Any], start: int) -> list[Any] | None:
    """The constraint a dot's result reaches through the ops that take it alone (a scale, an
    activation), if any."""
    var = eqns[start].outvars[0]
    for eqn in eqns[start + 1 :]:
        if var not in eqn.invars:
            continue
        if eqn.primitive.name == "sharding_constraint":
            return _spec(eqn.params["sharding"].spec)
        if len([v for v in eqn.invars if hasattr(v, "aval") and v.aval.shape]) != 1:
            return None
        var = eqn.outvars[0]
    return None


# Programs whose oracle adds what the program itself declares (read from JAX in the child).
DOCUMENTED_ORACLES: dict[str, Callable[..., Any]] = {
    "documented_block": block_oracle,
    "documented_cond_sharded": sharded_dots_oracle,
    "documented_all_to_all": sharded_dots_oracle,
    "documented_attention_blocked": blocked_attention_oracle,
}


# Programs whose pieces are also compiled alone for the oracle's `parts`.
DOCUMENTED_PARTS: dict[str, Callable[[], dict[str, Module]]] = {
    "documented_cond_loop": cond_loop_parts,
}


def op_events(trace_json: Path) -> dict[str, dict[str, dict[str, int]]]:
    """Per module and op (``hlo_op``), how many thunk events each run id has in trace.json."""
    data = json.loads(gzip.decompress(trace_json.read_bytes()))
    counts: dict[str, dict[str, dict[str, int]]] = {}
    for e in data["traceEvents"]:
        args = e.get("args", {})
        if e.get("ph") == "X" and "hlo_op" in args and "run_id" in args:
            per_op = counts.setdefault(args.get("hlo_module", ""), {})
            per_run = per_op.setdefault(args["hlo_op"], {})
            run = str(args["run_id"])
            per_run[run] = per_run.get(run, 0) + 1
    return counts


# The gate_* programs (issue 45: `hlogap check`'s noise-aware verdicts): one SGD step of an MLP
# profiled the documented way, GATE_STEPS steps (step 0 compiling). gate_run1..3 are the same
# program in three separate processes (noise only); gate_more is it with a 1.3125x wider hidden
# layer (1344 for 1024: about 30% more FLOPs and weight bytes per step); gate_short runs 3 steps.
# All share one function name (module `jit_gate_step`), so `check` and `diff` pair their ops.
GATE_STEPS, GATE_SHORT_STEPS = 10, 3
GATE_HIDDEN, GATE_MORE_HIDDEN = 1024, 1344


def _gate(hidden: int) -> Documented:
    """One SGD step of a 512 -> hidden -> 512 GELU MLP on a batch of 128."""
    import jax
    import numpy as np

    rng = _rng()
    params = (
        _f32(rng, 512, hidden, scale=0.04),
        jax.device_put(np.zeros(hidden, np.float32)),
        _f32(rng, hidden, 512, scale=0.03),
        jax.device_put(np.zeros(512, np.float32)),
    )
    batch = (_f32(rng, 128, 512), _f32(rng, 128, 512))
    return _sgd_training("gate_step", _mlp_loss, params, batch)


def build_gate() -> Documented:
    return _gate(GATE_HIDDEN)


def build_gate_more() -> Documented:
    return _gate(GATE_MORE_HIDDEN)


# Steps of the documented_* programs that do not run DOCUMENTED_STEPS.
DOCUMENTED_STEP_COUNTS = {
    "gate_run1": GATE_STEPS,
    "gate_run2": GATE_STEPS,
    "gate_run3": GATE_STEPS,
    "gate_more": GATE_STEPS,
    "gate_short": GATE_SHORT_STEPS,
}


DOCUMENTED: dict[str, Callable[[], Documented]] = {
    "gate_run1": build_gate,
    "gate_run2": build_gate,
    "gate_run3": build_gate,
    "gate_more": build_gate_more,
    "gate_short": build_gate,
    "documented_step": build_documented_step,
    "documented_sharded": build_documented_sharded,
    "documented_two_fns": build_documented_two_fns,
    "documented_cond_loop": build_documented_cond_loop,
    "documented_attention": build_documented_attention,
    "documented_loop": build_documented_loop,
    "documented_vmap": build_documented_vmap,
    "documented_logits": build_documented_logits,
    "documented_attention_fused": lambda: build_documented_attention("dot_product_attention"),
    "documented_attention_blocked": lambda: build_documented_attention("blocked"),
    "documented_logits_chunked": lambda: build_documented_logits(chunked=True),
    "documented_block": build_documented_block,
    "documented_cond_sharded": build_documented_cond_sharded,
    "documented_all_to_all": build_documented_all_to_all,
}


PROGRAMS: dict[str, Callable[[], list[Module]]] = {
    "mlp": build_mlp,
    "mlp_rerun": build_mlp,
    "mlp_shifted": lambda: build_mlp(shifted=True),
    "mlp_train": build_mlp_train,
    "conv": build_conv,
    "conv3d": build_conv3d,
    "matmul_bf16": build_matmul_bf16,
    "matmul_int8": build_matmul_int8,
    "attention": build_attention,
    "reductions": build_reductions,
    "scan": build_scan,
    "fori": build_fori,
    "gather_scatter": build_gather_scatter,
    "layernorm": build_layernorm,
    "sharded_train": build_sharded_train,
    "fft_1d": build_fft_1d,
    "fft_2d": build_fft_2d,
    "cholesky": build_cholesky,
    "solve": build_solve,
    "qr": build_qr,
    "eigh": build_eigh,
    "svd": build_svd,
    "top_k": build_top_k,
    "sort_multi": build_sort_multi,
    "segment_sum": build_segment_sum,
    "point_scatter": build_point_scatter,
    "mem_donate": build_mem_donate,
    "mem_kept": build_mem_donate,
    "mem_remat": build_mem_remat,
    "mem_temp": build_mem_temp,
    "flaws": build_flaws,
}


# ---------------------------------------------------------------------------------------------
# Child: profile one program.
# ---------------------------------------------------------------------------------------------


def hlo_module_id(serialized: bytes) -> int:
    """Return field 5 (``id``) of a serialized ``xla.HloModuleProto``: the trace's program_id."""
    pos, result = 0, 0
    while pos < len(serialized):
        key, pos = _varint(serialized, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(serialized, pos)
            if field == 5:
                result = value
        elif wire == 2:
            length, pos = _varint(serialized, pos)
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unexpected wire type {wire} in HloModuleProto")
    return result


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift, value = 0, 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def scalar_costs(raw: Any) -> dict[str, float]:
    """``cost_analysis()`` as a flat dict: a dict in jax 0.10, a one-element list in older jax."""
    if isinstance(raw, (list, tuple)):
        raw = raw[0] if raw else {}
    return {
        str(k): float(v)
        for k, v in sorted(dict(raw).items())
        if isinstance(v, (int, float)) and not str(k).startswith("utilization")
    }


MEMORY_KEYS = (
    "argument_size_in_bytes",
    "output_size_in_bytes",
    "alias_size_in_bytes",
    "temp_size_in_bytes",
    "generated_code_size_in_bytes",
    "peak_memory_in_bytes",
)


def memory_stats(stats: Any) -> dict[str, int]:
    """``memory_analysis()`` (XLA's CompiledMemoryStats) as a dict of its byte counts."""
    return {k: int(getattr(stats, k)) for k in MEMORY_KEYS if hasattr(stats, k)}


def module_entries(
    name: str, compiled: Sequence[Any], target: Path, executions: int
) -> list[dict[str, Any]]:
    """The oracle's ``modules``: per executable its name, program_id, costs, memory, executions;
    writes each one's optimized HLO to ``<module>.hlo.txt`` in ``target``."""
    entries = []
    for exe in compiled:
        (hlo_module,) = exe.runtime_executable().hlo_modules()
        module = hlo_module.name
        text = exe.as_text()
        (target / f"{module}.hlo.txt").write_text(text)
        entries.append(
            {
                "module": module,
                "program_id": hlo_module_id(hlo_module.as_serialized_hlo_module_proto()),
                "cost_analysis": scalar_costs(exe.cost_analysis()),
                "memory_analysis": memory_stats(exe.memory_analysis()),
                "executions": executions,
                "hlo_text": f"{module}.hlo.txt",
            }
        )
    if len({e["module"] for e in entries}) != len(entries):
        raise RuntimeError(f"{name}: two modules share a name: {[e['module'] for e in entries]}")
    return entries


def run_program(name: str, out_root: Path, dump_dir: Path | None) -> None:
    import jax
    import numpy as np

    modules = PROGRAMS[name]()

    donated = DONATED.get(name)
    jit_options: dict[str, Any] = {"donate_argnums": donated} if donated else {}
    compiled = [jax.jit(fn, **jit_options).lower(*args).compile() for fn, args in modules]
    jitted = [jax.jit(fn, **jit_options) for fn, _ in modules]

    def inputs(args: tuple[Any, ...]) -> tuple[Any, ...]:
        # A donated input is consumed by its call: each call gets copies (through numpy, so no
        # helper module is compiled), made before the trace starts.
        if not donated:
            return args
        fresh: tuple[Any, ...] = jax.tree.map(lambda a: jax.device_put(np.asarray(a)), args)
        return fresh

    calls = [[inputs(args) for _ in range(ITERATIONS + 1)] for _, args in modules]
    # Warm up outside the trace and wait, so no execution straddles the trace start. Calling the
    # jitted function reuses the executable compiled above (one module per function in the trace).
    for fn, per_call in zip(jitted, calls, strict=True):
        jax.block_until_ready(fn(*per_call[ITERATIONS]))

    target = out_root / name
    options = jax.profiler.ProfileOptions()
    options.session_id = RUN_NAME
    with jax.profiler.trace(str(target), profiler_options=options):
        for step in range(ITERATIONS):
            # One training-loop step each: annotated as JAX users do, with host work before the
            # launch (the device idles through it), so steps and idle time have real data.
            with jax.profiler.StepTraceAnnotation("train", step_num=step):
                time.sleep(HOST_GAP_S)
                for fn, per_call in zip(jitted, calls, strict=True):
                    jax.block_until_ready(fn(*per_call[step]))

    for derived in target.glob("plugins/profile/*/*.trace.json.gz"):
        derived.unlink()

    entries = module_entries(name, compiled, target, ITERATIONS)

    xla_flags = os.environ.get("XLA_FLAGS", "")
    if dump_dir is not None:
        xla_flags = xla_flags.replace(str(dump_dir), DUMP_PLACEHOLDER)
        kept = target / "dump"
        kept.mkdir()
        for path in sorted(dump_dir.glob("*after_optimizations.txt")):
            shutil.copy(path, kept / path.name)

    (xplane,) = target.glob("plugins/profile/*/*.xplane.pb")
    oracle = {
        "program": name,
        "jax_version": jax.__version__,
        "xla_flags": xla_flags,
        "iterations": ITERATIONS,
        "steps": ITERATIONS,  # StepTraceAnnotation steps, one per iteration
        "host_gap_s": HOST_GAP_S,
        "devices": len(jax.devices()),
        "xplane": xplane.relative_to(target).as_posix(),
        "modules": entries,
    }
    (target / "oracle.json").write_text(json.dumps(oracle, indent=2) + "\n")


def run_documented(name: str, out_root: Path) -> None:
    """Profile a documented_* program: no warm-up, the annotation around the dispatch only, the
    block after it; then read the trace.json.gz's steps into the oracle and delete it."""
    import jax

    program = DOCUMENTED[name]()
    jitted = [jax.jit(fn) for fn in program.functions]
    # The arguments of each function's last call, to fetch its executable after the trace (a
    # compile before it would be a warm-up). A lookup and a store per call, nothing traced.
    last_args: dict[int, tuple[Any, ...]] = {}

    def remembered(i: int, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            last_args[i] = args
            return fn(*args)

        return call

    calls = [remembered(i, fn) for i, fn in enumerate(jitted)]
    target = out_root / name
    options = jax.profiler.ProfileOptions()
    options.session_id = RUN_NAME
    options.python_tracer_level = 0  # the one change from the defaults: see the module doc
    state = program.state
    n_steps = DOCUMENTED_STEP_COUNTS.get(name, DOCUMENTED_STEPS)
    with jax.profiler.trace(str(target), profiler_options=options):
        for step in range(n_steps):
            with jax.profiler.StepTraceAnnotation("train", step_num=step):
                state = program.step(calls, state)
            jax.block_until_ready(state)

    (xplane,) = target.glob("plugins/profile/*/*.xplane.pb")
    (trace_json,) = target.glob("plugins/profile/*/*.trace.json.gz")
    steps_oracle = trace_oracle(trace_json, xplane, n_steps)
    if name in DOCUMENTED_PARTS:
        steps_oracle["op_events"] = op_events(trace_json)
    trace_json.unlink()

    # Same arguments as in the trace: jax's caches hand back the executable the trace ran
    # (checked: its program_id is the one the trace's metadata plane names).
    compiled = [fn.lower(*last_args[i]).compile() for i, fn in enumerate(jitted)]
    entries = module_entries(name, compiled, target, n_steps)
    in_trace = metadata_modules(xplane)
    want = {f"{e['module']}({e['program_id']})" for e in entries}
    if in_trace != want:
        raise RuntimeError(f"{name}: the trace ran {sorted(in_trace)}, compiled {sorted(want)}")

    oracle = {
        "program": name,
        "jax_version": jax.__version__,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "iterations": n_steps,
        "steps": n_steps,  # StepTraceAnnotation steps, one per iteration
        "host_gap_s": 0.0,
        "devices": len(jax.devices()),
        "xplane": xplane.relative_to(target).as_posix(),
        "pattern": "documented: annotation around the dispatch only, block_until_ready after it",
        "warmup": "none before the trace: step 0 traces, lowers and compiles inside it",
        "python_tracer_level": 0,
        "modules": entries,
        **steps_oracle,
    }
    if name in DOCUMENTED_ORACLES:
        oracle.update(DOCUMENTED_ORACLES[name](program.functions, last_args))
    if name in DOCUMENTED_PARTS:
        oracle["parts"] = {
            part: scalar_costs(jax.jit(fn).lower(*args).compile().cost_analysis())
            for part, (fn, args) in DOCUMENTED_PARTS[name]().items()
        }
    (target / "oracle.json").write_text(json.dumps(oracle, indent=2) + "\n")


# ---------------------------------------------------------------------------------------------
# The documented_* oracles: steps and runs read from the trace.json.gz (plain json/gzip); the
# xplane (through the generated protobuf classes only) for the clock check and the flow ids.
# ---------------------------------------------------------------------------------------------


@dataclass
class XEvent:
    """One event of the xplane's /host:CPU plane, times in ps from the line's timestamp."""

    line: int
    start_ps: int
    duration_ps: int
    name: str
    stats: dict[str, Any]


def _xstat(stat: Any, names: dict[int, str]) -> Any:
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    if kind == "ref_value":
        return names.get(stat.ref_value, "")
    return getattr(stat, kind)


def _xspace(xplane: Path) -> Any:
    sys.path.insert(0, str(ROOT))
    from hlogap.proto import xplane_pb2  # the generated message classes, not hlogap's reader

    return xplane_pb2.XSpace.FromString(xplane.read_bytes())


def metadata_modules(xplane: Path) -> set[str]:
    """The ``<module>(<program_id>)`` names of the xplane's /host:metadata plane."""
    planes = [p for p in _xspace(xplane).planes if p.name == "/host:metadata"]
    return {md.name for p in planes for md in p.event_metadata.values()}


def host_cpu_events(xplane: Path) -> list[XEvent]:
    (plane,) = [p for p in _xspace(xplane).planes if p.name == "/host:CPU"]
    stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
    event_names = {k: v.name for k, v in plane.event_metadata.items()}
    events = []
    for line in plane.lines:
        for ev in line.events:
            stats = {stat_names[s.metadata_id]: _xstat(s, stat_names) for s in ev.stats}
            start = line.timestamp_ns * 1000 + ev.offset_ps
            name = event_names[ev.metadata_id]
            events.append(XEvent(line.id, start, ev.duration_ps, name, stats))
    return events


@dataclass
class Flow:
    """Where the flow walk from a run's first thunk event ended on the annotating thread."""

    origin: XEvent  # the producer event on the annotating thread
    hops: int  # flows followed: 1 = the run's first thunk ran in a region that event opened


def flow_origins(events: list[XEvent], host_line: int) -> dict[int, Flow]:
    """run_id -> the flow walk from the run's first thunk event back to ``host_line``.

    A region is opened on a line by a flow consumer (``_c``/``_ct``): a
    ``ThreadpoolListener::StartRegion`` (open until the line's next ``StopRegion``), or an event
    such as ``[<i>] CommonPjRtLoadedExecutable::Execute`` (open for its duration). From the
    thunk, take the latest-opened region holding it, then the producer of its flow (``_p``/``_pt``:
    a ``ThreadpoolListener::Record``, the Python thread's ``CommonPjRtLoadedExecutable::Execute``),
    and on from that producer's line and time, until a producer on ``host_line``. A run whose
    thunk (or a producer on the way) lies in no open region is left out."""
    mask = (1 << 64) - 1  # ids are written signed in some stats and unsigned in others

    def key(kind: Any, value: Any) -> tuple[int, int]:
        return int(kind or 0) & mask, int(value) & mask

    producers: dict[tuple[int, int], XEvent] = {}
    by_line: dict[int, list[XEvent]] = defaultdict(list)
    first: dict[int, XEvent] = {}
    for ev in events:
        st = ev.stats
        if "hlo_op" in st and "run_id" in st:
            run = int(st["run_id"])
            if run not in first or ev.start_ps < first[run].start_ps:
                first[run] = ev
            continue  # a thunk's own flow (_p) only links it to its `end:` marker
        if "_p" in st:
            producers.setdefault(key(st.get("_pt"), st["_p"]), ev)
        by_line[ev.line].append(ev)
    regions: dict[int, list[tuple[int, int, tuple[int, int]]]] = defaultdict(list)
    for line, line_events in by_line.items():
        line_events.sort(key=lambda e: e.start_ps)
        stops = [e.start_ps for e in line_events if e.name == "ThreadpoolListener::StopRegion"]
        for ev in line_events:
            if "_c" not in ev.stats or ev.name.startswith("end: "):
                continue
            if ev.name == "ThreadpoolListener::StartRegion":
                end = next((t for t in stops if t >= ev.start_ps), None)
                end = end if end is not None else 1 << 62
            else:
                end = ev.start_ps + ev.duration_ps
            regions[line].append((ev.start_ps, end, key(ev.stats.get("_ct"), ev.stats["_c"])))
    found: dict[int, Flow] = {}
    for run, thunk in first.items():
        line, at = thunk.line, thunk.start_ps
        for hops in range(1, 65):
            holding = [r for r in regions[line] if r[0] <= at <= r[1]]
            producer = producers.get(max(holding)[2]) if holding else None
            if producer is None:
                break
            if producer.line == host_line:
                found[run] = Flow(producer, hops)
                break
            line, at = producer.line, producer.start_ps
    return found


def marker_ends(events: list[XEvent]) -> list[tuple[int, int, int]]:
    """(run_id, start ps, end ps) of every thunk event, lasting until its ``end: <op>`` marker
    where that ends later: the marker's ``_c`` is the thunk's ``_p`` (ids restart per run, so the
    first such marker at or after the thunk's start), on any line of the plane."""
    mask = (1 << 64) - 1
    markers: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for ev in events:
        if ev.name.startswith("end: ") and "_c" in ev.stats:
            markers[int(ev.stats["_c"]) & mask].append((ev.start_ps, ev.start_ps + ev.duration_ps))
    for found in markers.values():
        found.sort()
    out = []
    for ev in events:
        if "hlo_op" not in ev.stats or "run_id" not in ev.stats:
            continue
        end = ev.start_ps + ev.duration_ps
        if "_p" in ev.stats:
            after = [m for m in markers.get(int(ev.stats["_p"]) & mask, []) if m[0] >= ev.start_ps]
            if after:
                end = max(end, after[0][1])
        out.append((int(ev.stats["run_id"]), ev.start_ps, end))
    return out


def _union_us(intervals: Sequence[tuple[float, float]]) -> float:
    covered, reach = 0.0, float("-inf")
    for a, b in sorted(intervals):
        a = max(a, reach)
        if b > a:
            covered += b - a
            reach = b
    return covered


def _top_level(thunks: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The thunk events not nested in another thunk event of the same run on the same thread."""
    by_thread: dict[tuple[Any, int], list[dict[str, Any]]] = defaultdict(list)
    for t in thunks:
        by_thread[(t["tid"], t["run_id"])].append(t)
    top = []
    for group in by_thread.values():
        reach = float("-inf")
        for t in sorted(group, key=lambda t: (t["start"], -t["end"])):
            if t["end"] <= reach and t["start"] < reach:
                continue
            top.append(t)
            reach = max(reach, t["end"])
    return top


def _r(us: float) -> float:
    return round(us, 3)


def trace_oracle(trace_json: Path, xplane: Path, n_steps: int = DOCUMENTED_STEPS) -> dict[str, Any]:
    """``trace_steps``, ``trace_runs``, ``thunk_us_total``/``thunk_us_top_level`` and
    ``clock_check`` of a documented_* trace (the module doc says what they mean)."""
    data = json.loads(gzip.decompress(trace_json.read_bytes()))
    events = [e for e in data["traceEvents"] if e.get("ph") == "X"]
    annotations = sorted(
        (int(e["args"]["step_num"]), float(e["ts"]), float(e["ts"]) + float(e["dur"]), e["tid"])
        for e in events
        if "step_num" in e.get("args", {})
    )
    host_tids = {tid for *_, tid in annotations}
    if len(host_tids) != 1 or [a[0] for a in annotations] != list(range(n_steps)):
        raise RuntimeError(f"unexpected step annotations: {annotations}")
    (host_tid,) = host_tids
    thunks = [
        {
            "run_id": int(e["args"]["run_id"]),
            "module": e["args"].get("hlo_module", ""),
            "device": int(e["args"].get("device_ordinal", 0)),
            "tid": e["tid"],
            "start": float(e["ts"]),
            "end": float(e["ts"]) + float(e["dur"]),
        }
        for e in events
        if "hlo_op" in e.get("args", {}) and "run_id" in e.get("args", {})
    ]
    by_run: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for t in thunks:
        by_run[t["run_id"]].append(t)
    # Host-side events naming a run id on the annotating thread (multi-device launches only).
    named: dict[int, dict[str, Any]] = {}
    for e in sorted(events, key=lambda e: float(e["ts"])):
        args = e.get("args", {})
        if e["tid"] == host_tid and "run_id" in args and "hlo_op" not in args:
            named.setdefault(int(args["run_id"]), e)

    xevents = host_cpu_events(xplane)
    x_annotations = {int(ev.stats["step_num"]): ev for ev in xevents if "step_num" in ev.stats}
    (host_line,) = {ev.line for ev in x_annotations.values()}
    flows = flow_origins(xevents, host_line)
    to_markers = marker_ends(xevents)
    marker_end: dict[int, int] = {}
    for run, _, end in to_markers:
        marker_end[run] = max(marker_end.get(run, end), end)

    def step_holding(at: float) -> int | None:
        return next((n for n, start, end, _ in annotations if start <= at <= end), None)

    def step_started_before(at: float) -> int | None:
        started = [n for n, start, _, _ in annotations if start <= at]
        return started[-1] if started else None

    runs = []
    for run, group in sorted(by_run.items(), key=lambda kv: min(t["start"] for t in kv[1])):
        first = min(t["start"] for t in group)
        flow = flows.get(run)
        flow_us = _r(flow.origin.start_ps / 1e6) if flow is not None else None
        if run in named:
            dispatch_us: float | None = _r(float(named[run]["ts"]))
            event, tie = named[run]["name"], "trace.json run_id arg"
        elif flow is not None and flow.hops == 1:
            dispatch_us, event, tie = flow_us, flow.origin.name, "xplane flow"
        else:
            dispatch_us, event, tie = None, None, None
        by_dispatch = step_holding(dispatch_us) if dispatch_us is not None else None
        by_first = step_started_before(first)
        runs.append(
            {
                "run_id": run,
                "modules": sorted({t["module"] for t in group}),
                "devices": sorted({t["device"] for t in group}),
                "first_thunk_us": _r(first),
                "last_end_us": _r(max(t["end"] for t in group)),
                "last_end_marker_us": _r(marker_end[run] / 1e6),
                "dispatch_us": dispatch_us,
                "dispatch_event": event,
                "dispatch_tie": tie,
                "flow_origin_us": flow_us,
                "flow_origin_event": flow.origin.name if flow is not None else None,
                "flow_hops": flow.hops if flow is not None else None,
                "step_by_dispatch": by_dispatch,
                "step_by_first_thunk": by_first,
                "step": by_dispatch if by_dispatch is not None else by_first,
            }
        )

    steps = []
    for n, start, end, _ in annotations:
        mine = [r["run_id"] for r in runs if r["step"] == n]
        spans = [(t["start"], t["end"]) for r in mine for t in by_run[r]]
        ends = [marker_end[r] for r in mine]
        steps.append(
            {
                "step_num": n,
                "annotation_start_us": _r(start),
                "annotation_end_us": _r(end),
                "annotation_us": _r(end - start),
                "run_ids": mine,
                "device_start_us": _r(min(a for a, _ in spans)) if spans else None,
                "device_end_us": _r(max(b for _, b in spans)) if spans else None,
                "device_end_marker_us": _r(max(ends) / 1e6) if ends else None,
                "device_busy_us": _r(_union_us(spans)),
                "thunk_us": _r(sum(b - a for a, b in spans)),
            }
        )

    # The clock: the same events' start in both files (trace.json to the ns, the xplane in ps).
    pairs = [(start, x_annotations[n].start_ps / 1e6) for n, start, _, _ in annotations]
    x_first: dict[int, int] = {}
    for ev in xevents:
        if "hlo_op" in ev.stats and "run_id" in ev.stats:
            run = int(ev.stats["run_id"])
            x_first[run] = min(x_first.get(run, ev.start_ps), ev.start_ps)
    pairs += [(r["first_thunk_us"], x_first[r["run_id"]] / 1e6) for r in runs]
    drift = max(abs(a - b) for a, b in pairs)
    if drift > 0.001:
        raise RuntimeError(f"trace.json and xplane disagree by {drift} us")
    step0 = annotations[0]
    return {
        "time_unit": "us",
        "clock_check": {
            "events_compared": len(pairs),
            "max_abs_diff_us": _r(drift),
            "step0_trace_json_ts_us": _r(step0[1]),
            "step0_xplane_us": x_annotations[0].start_ps / 1e6,
        },
        "thunk_events": len(thunks),
        "thunk_us_total": _r(sum(t["end"] - t["start"] for t in thunks)),
        "thunk_us_top_level": _r(sum(t["end"] - t["start"] for t in _top_level(thunks))),
        "thunk_us_total_to_markers": _r(sum(end - start for _, start, end in to_markers) / 1e6),
        "trace_steps": steps,
        "trace_runs": runs,
    }


# ---------------------------------------------------------------------------------------------
# Parent: one subprocess per program.
# ---------------------------------------------------------------------------------------------


def spawn(name: str, out_root: Path) -> float:
    """Profile ``name`` in a fresh process with its own XLA_FLAGS; return the seconds it took."""
    target = out_root / name
    if target.exists():
        shutil.rmtree(target)
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith("--xla_dump")]
    if name in DEVICE_COUNTS:
        flags.append(f"--xla_force_host_platform_device_count={DEVICE_COUNTS[name]}")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"hlogap-dump-{name}-") as tmp:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--program", name]
        cmd += ["--out", str(out_root)]
        if name in DUMP_PROGRAMS:
            flags.append(f"--xla_dump_to={tmp}")
            cmd += ["--dump-dir", tmp]
        env = dict(os.environ, XLA_FLAGS=" ".join(flags), JAX_PLATFORMS="cpu")
        env.pop("JAX_ENABLE_X64", None)
        subprocess.run(cmd, env=env, check=True)
    return time.perf_counter() - start


def copy_sample(out_root: Path) -> Path:
    (src,) = (out_root / SAMPLE_PROGRAM).glob("plugins/profile/*/*.xplane.pb")
    if SAMPLE_DIR.exists():
        shutil.rmtree(SAMPLE_DIR)
    dst = SAMPLE_DIR / src.relative_to(out_root / SAMPLE_PROGRAM)
    dst.parent.mkdir(parents=True)
    shutil.copy(src, dst)
    return dst


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--program", help="(internal) profile one program in this process")
    parser.add_argument("--dump-dir", type=Path, help="(internal) where XLA_FLAGS dumps to")
    parser.add_argument("--out", type=Path, default=FIXTURES, help="fixtures root")
    parser.add_argument(
        "--only", help="comma-separated programs to (re)generate (e.g. documented_step,...)"
    )
    parser.add_argument("--sharded", action="store_true", help="alias for --program sharded_train")
    args = parser.parse_args(argv)

    out_root: Path = args.out.resolve()
    if args.sharded:
        args.program = "sharded_train"
    if args.program in DOCUMENTED:
        run_documented(args.program, out_root)
        return 0
    if args.program:
        run_program(args.program, out_root, args.dump_dir)
        return 0

    every = [*PROGRAMS, *DOCUMENTED]
    names = every if not args.only else [n.strip() for n in args.only.split(",")]
    unknown = sorted(set(names) - set(every))
    if unknown:
        parser.error(f"unknown programs: {', '.join(unknown)}")
    out_root.mkdir(parents=True, exist_ok=True)
    total = 0.0
    for name in names:
        seconds = spawn(name, out_root)
        total += seconds
        size = sum(p.stat().st_size for p in (out_root / name).rglob("*") if p.is_file())
        print(f"{name:16s} {seconds:5.1f} s  {size / 1024:7.1f} KiB", flush=True)
    if SAMPLE_PROGRAM in names and out_root == FIXTURES.resolve():
        sample = copy_sample(out_root)
        print(f"sample: {sample.relative_to(ROOT)} ({sample.stat().st_size / 1024:.1f} KiB)")
    print(f"total {total:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
