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
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

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
                "executions": ITERATIONS,
                "hlo_text": f"{module}.hlo.txt",
            }
        )
    if len({e["module"] for e in entries}) != len(entries):
        raise RuntimeError(f"{name}: two modules share a name: {[e['module'] for e in entries]}")

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


# ---------------------------------------------------------------------------------------------
# Parent: one subprocess per program.
# ---------------------------------------------------------------------------------------------


def spawn(name: str, out_root: Path) -> float:
    """Profile ``name`` in a fresh process with its own XLA_FLAGS; return the seconds it took."""
    target = out_root / name
    if target.exists():
        shutil.rmtree(target)
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith("--xla_dump")]
    if name == "sharded_train":
        flags.append(f"--xla_force_host_platform_device_count={SHARDED_DEVICES}")
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
    parser.add_argument("--only", help="comma-separated programs to (re)generate")
    parser.add_argument("--sharded", action="store_true", help="alias for --program sharded_train")
    args = parser.parse_args(argv)

    out_root: Path = args.out.resolve()
    if args.sharded:
        args.program = "sharded_train"
    if args.program:
        run_program(args.program, out_root, args.dump_dir)
        return 0

    names = list(PROGRAMS) if not args.only else [n.strip() for n in args.only.split(",")]
    unknown = sorted(set(names) - set(PROGRAMS))
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
