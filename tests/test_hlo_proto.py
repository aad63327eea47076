"""`xla.HloProto` decoding, and text and proto of one module agreeing on the IR.

Real inputs: JAX programs compiled on this CPU (text from `compiled.as_text()`, the proto from
`runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto()`, a bare HloModuleProto),
one of them sharded over 8 host devices in a subprocess, and the `Hlo Proto` stats (HloProto)
of the real AMD GPU traces in ../shared.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hlogap.errors import HlogapError
from hlogap.hlo import decode
from hlogap.hlo.decode import HloDecodeError, decode_hlo_module_proto, decode_hlo_proto
from hlogap.hlo.ir import ConvDims, Module, ReplicaGroups, Shape, Window
from hlogap.hlo.printer import print_module
from hlogap.hlo.text import parse_module
from hlogap.proto import hlo_pb2, xplane_pb2

SHARED = Path(__file__).resolve().parents[2] / "shared"
# Attributes the decoder does not rebuild from the proto (see hlogap/hlo/decode.py).
UNDECODED = frozenset({"origin", "statistics", "output_to_operand_aliasing"})

JAX_PROGRAMS = textwrap.dedent(
    """
    import numpy as np
    import jax
    import jax.numpy as jnp
    from jax import lax

    def mlp(x, w1, w2):
        return jnp.sum(jax.nn.relu(x @ w1) @ w2)

    def conv(x, k):
        return lax.conv_general_dilated(
            x, k, (2, 2), ((1, 1), (2, 0)), rhs_dilation=(1, 2),
            dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def scan(x):
        return lax.scan(lambda c, y: (c * 2 + y, c), x[0], x)

    def bf16_matmul(a, b):
        return (a @ b).astype(jnp.float32)

    def misc(x, i):
        return (jnp.sort(x, axis=0), jnp.take(x, i, axis=0), jnp.pad(x, ((1, 2), (0, 1))),
                jnp.where(x > 0, x, 0.5) + jnp.cumsum(x, axis=1),
                lax.dynamic_slice(x, (i[0], 0), (2, 4)),
                lax.reduce_window(x, -jnp.inf, lax.max, (2, 2), (1, 1), "VALID"),
                jnp.arange(8.0) * 3.5, x[1:5:2], jnp.linalg.norm(x),
                jnp.exp(x).astype(jnp.bfloat16))

    def cond(p, x):
        return lax.cond(p > 0, lambda x: x * 2, lambda x: x - 1, x)

    def switch(i, x):
        return lax.switch(i, [lambda x: x, lambda x: x * 2, lambda x: x + 3], x)

    def scatter(x, i, u):
        return x.at[i].add(u)

    def half(x):
        return x * jnp.float16(0.1)

    def constants(x):
        return (x + jnp.array([[1.0, 2.0], [3.0, 4.0]]) * jnp.array([1e-5, 0.1], jnp.float32)
                + jnp.array([True, False]))

    f32 = np.float32
    PROGRAMS = {
        "mlp": (mlp, (np.ones((8, 16), f32), np.ones((16, 32), f32), np.ones((32, 4), f32))),
        "conv": (conv, (np.ones((2, 8, 8, 3), f32), np.ones((3, 3, 3, 16), f32))),
        "scan": (scan, (np.ones((5, 4), f32),)),
        "bf16_matmul": (bf16_matmul, (np.ones((8, 32), jnp.bfloat16),
                                      np.ones((32, 16), jnp.bfloat16))),
        "misc": (misc, (np.ones((8, 4), f32), np.array([1, 2], np.int32))),
        "cond": (cond, (f32(1), np.ones((4,), f32))),
        "switch": (switch, (np.int32(1), np.ones((4,), f32))),
        "scatter": (scatter, (np.ones((8, 4), f32), np.array([1, 3], np.int32),
                              np.ones((2, 4), f32))),
        "half": (half, (np.ones((2,), np.float16),)),
        "constants": (constants, (np.ones((2, 2), f32),)),
    }
    """
)

SHARDED_PROGRAMS = textwrap.dedent(
    """
    import numpy as np
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))

    def matmul(a, b):
        return jnp.tanh(a @ b).sum(axis=0)

    def collectives(x):
        return (jax.lax.psum(x, "x"), jax.lax.all_gather(x, "y", axis=0, tiled=True),
                jax.lax.psum_scatter(x, "x", scatter_dimension=0, tiled=True),
                jax.lax.ppermute(x, "x", [(i, (i + 1) % 4) for i in range(4)]),
                jax.lax.all_to_all(x, "y", 0, 0, tiled=True))

    a = jax.device_put(np.ones((64, 32), np.float32), NamedSharding(mesh, P("x", "y")))
    b = jax.device_put(np.ones((32, 16), np.float32), NamedSharding(mesh, P("y", None)))
    spec = P("x", "y")
    shmapped = jax.shard_map(collectives, mesh=mesh, in_specs=spec, out_specs=(spec,) * 5)
    COMPILED = {
        "sharded_matmul": jax.jit(matmul).lower(a, b).compile(),
        "collectives": jax.jit(shmapped).lower(jnp.ones((64, 32), jnp.float32)).compile(),
    }
    """
)

DUMP = textwrap.dedent(
    """
    import base64, json, sys
    out = {}
    for name, compiled in COMPILED.items():
        module = compiled.runtime_executable().hlo_modules()[0]
        proto = base64.b64encode(module.as_serialized_hlo_module_proto()).decode()
        out[name] = [compiled.as_text(), proto]
    json.dump(out, sys.stdout)
    """
)


def _compile(source: str, env: dict[str, str] | None = None) -> dict[str, tuple[str, bytes]]:
    """Runs `source` in a fresh interpreter (XLA flags are read once per process)."""
    run = subprocess.run(
        [sys.executable, "-c", source + DUMP],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return {
        k: (text, base64.b64decode(proto)) for k, (text, proto) in json.loads(run.stdout).items()
    }


@pytest.fixture(params=["c", "python"])
def hlo_decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Protos decoded by the C extension (hlogap/hlo/_hlodecode.c), and as an install
    without it decodes them (upb and Python). Not reset between hypothesis inputs: every
    input of a test runs with the same decoder."""
    if request.param == "python":
        monkeypatch.setattr(decode, "_hlodecode", None)
    elif decode._hlodecode is None:
        pytest.fail("hlogap was installed without its C decoder (hlogap/hlo/_hlodecode.c)")
    return str(request.param)


@pytest.fixture(scope="module")
def jax_modules() -> dict[str, tuple[str, bytes]]:
    pytest.importorskip("jax")
    cpu = (
        JAX_PROGRAMS
        + "COMPILED = {k: jax.jit(f).lower(*a).compile() for k, (f, a) in PROGRAMS.items()}\n"
    )
    modules = _compile(cpu)
    flags = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}
    modules.update(_compile(SHARDED_PROGRAMS, flags))
    return modules


def test_jax_text_parses_completely(jax_modules: dict[str, tuple[str, bytes]]) -> None:
    for name, (text, _) in jax_modules.items():
        module = parse_module(text)
        names = {c.name for c in module.computations}
        assert module.entry in names, name
        assert module.frames is not None and module.frames.stack_frames
        for comp in module.computations:
            for inst in comp.instructions:
                assert None not in inst.operand_shapes, (name, inst.name)
                assert set(inst.called) <= names
        lines = [line for line in text.splitlines() if " = " in line and "(" in line]
        assert len(lines) == sum(len(c.instructions) for c in module.computations)


def _assert_same_ir(text_module: Module, proto_module: Module) -> None:
    """Equal names, opcodes, shapes, operands, typed attributes and attribute text.

    Computations and instructions are matched by name: XLA orders them differently in the
    proto (post-order) and the text (schedule order).
    """
    assert text_module.name == proto_module.name
    assert text_module.entry == proto_module.entry
    assert text_module.frames == proto_module.frames
    by_name = {c.name: c for c in proto_module.computations}
    assert {c.name for c in text_module.computations} == set(by_name)
    for comp in text_module.computations:
        other = by_name[comp.name]
        assert comp.is_entry == other.is_entry
        decoded = {i.name: i for i in other.instructions}
        assert set(decoded) == {i.name for i in comp.instructions}
        for inst in comp.instructions:
            expected = dataclasses.replace(
                inst, attrs={k: v for k, v in inst.attrs.items() if k not in UNDECODED}
            )
            assert decoded[inst.name] == expected, inst.name


@pytest.mark.usefixtures("hlo_decoder")
def test_jax_text_and_proto_give_equal_ir(jax_modules: dict[str, tuple[str, bytes]]) -> None:
    for text, proto in jax_modules.values():
        _assert_same_ir(parse_module(text), decode_hlo_module_proto(proto))


@pytest.mark.usefixtures("hlo_decoder")
def test_jax_proto_wrapped_in_hlo_proto(jax_modules: dict[str, tuple[str, bytes]]) -> None:
    _, proto = jax_modules["mlp"]
    module = hlo_pb2.HloModuleProto()
    module.ParseFromString(proto)
    wrapped = hlo_pb2.HloProto(hlo_module=module).SerializeToString()
    assert decode_hlo_proto(wrapped) == decode_hlo_module_proto(proto)


@pytest.mark.usefixtures("hlo_decoder")
def test_jax_typed_attributes(jax_modules: dict[str, tuple[str, bytes]]) -> None:
    conv = decode_hlo_module_proto(jax_modules["conv"][1]).instructions()
    (inst,) = (i for i in conv.values() if i.opcode == "convolution")
    assert inst.window == Window((3, 3), (2, 2), (1, 2), (1, 0), (1, 1), (1, 2), (False, False))
    assert inst.conv_dims == ConvDims(0, 3, (1, 2), 2, 3, (0, 1), 0, 3, (1, 2))
    scan = decode_hlo_module_proto(jax_modules["scan"][1])
    (loop,) = (i for i in scan.instructions().values() if i.opcode == "while")
    # The proto lists the body first; the IR keeps the text's condition, body order.
    assert [loop.attrs["condition"], loop.attrs["body"]] == [f"%{c}" for c in loop.called]
    condition = scan.computation(loop.called[0])
    assert condition is not None and condition.root is not None
    assert condition.root.shape == Shape("pred")
    sharded = decode_hlo_module_proto(jax_modules["collectives"][1]).instructions()
    psum = next(i for i in sharded.values() if i.opcode == "all-reduce")
    assert psum.replica_groups == ReplicaGroups(((0, 2, 4, 6), (1, 3, 5, 7)))
    opcodes = {i.opcode for i in sharded.values()}
    assert opcodes >= {"all-gather", "reduce-scatter", "collective-permute", "all-to-all"}


@pytest.mark.usefixtures("hlo_decoder")
def test_decoded_modules_print_and_parse_back(jax_modules: dict[str, tuple[str, bytes]]) -> None:
    for _, proto in jax_modules.values():
        module = decode_hlo_module_proto(proto)
        assert parse_module(print_module(module)) == module


# ---- the Hlo Proto stats of real AMD GPU traces ----


def _trace_modules(path: Path) -> dict[str, bytes]:
    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    out = {}
    for plane in space.planes:
        if plane.name != "/host:metadata":
            continue
        names = {k: m.name for k, m in plane.stat_metadata.items()}
        for event in plane.event_metadata.values():
            for stat in event.stats:
                if names.get(stat.metadata_id) == "Hlo Proto":
                    out[event.name] = stat.bytes_value
    return out


@pytest.fixture(scope="module")
def amd_modules() -> dict[str, Module]:
    traces = sorted((SHARED / "fixtures/amd-gpu").glob("*.xplane.pb"))
    if not traces:
        pytest.skip("../shared/fixtures/amd-gpu is not available")
    modules = {}
    for trace in traces:
        for name, data in _trace_modules(trace).items():
            modules[f"{trace.name}:{name}"] = decode_hlo_proto(data)
    return modules


def test_amd_trace_modules_decode(amd_modules: dict[str, Module]) -> None:
    assert len(amd_modules) == 17
    for key, module in amd_modules.items():
        names = {c.name for c in module.computations}
        assert module.entry in names, key
        for inst in module.instructions().values():
            assert len(inst.operand_shapes) == len(inst.operands)
            assert set(inst.called) <= names
        assert parse_module(print_module(module)) == module, key


def test_amd_conv3d_custom_call(amd_modules: dict[str, Module]) -> None:
    module = amd_modules["mi300x_conv3d.xplane.pb:jit_forward_3d_conv(15)"]
    conv = module.instructions()["cudnn-conv.1"]
    assert conv.custom_call_target == "__cudnn$convForward"
    ones = (1, 1, 1)
    assert conv.window == Window((1, 2, 2), (1, 2, 2), ones, ones, ones, ones, (False,) * 3)
    assert conv.attrs["dim_labels"] == "bf012_oi012->bf012"
    assert conv.operand_shapes[0] == Shape(
        "bf16", (1, 16, 32, 60, 104), layout=conv.operand_shapes[0].layout
    )
    assert conv.backend_config is not None and '"cudnn_conv_backend_config"' in conv.backend_config
    assert conv.source == "/workspace/traces/generate_conv_trace.py:23"


def test_amd_attention_custom_calls(amd_modules: dict[str, Module]) -> None:
    module = amd_modules["mi355x_te_attention.xplane.pb:jit_loss_fn(17)"]
    targets = {i.custom_call_target for i in module.instructions().values() if i.custom_call_target}
    assert {"te_fused_attn_forward_ffi", "te_fused_attn_backward_ffi", "__cublas$gemm"} <= targets
    forward = next(
        i
        for i in module.instructions().values()
        if i.custom_call_target == "te_fused_attn_forward_ffi"
    )
    assert forward.attrs["api_version"] == "API_VERSION_TYPED_FFI"
    assert forward.backend_config is not None and forward.backend_config.startswith("{attn_heads")


# ---- hand-built protos: literals and errors ----


def _constant_module(shape: hlo_pb2.ShapeProto, **literal: object) -> hlo_pb2.HloModuleProto:
    inst = hlo_pb2.HloInstructionProto(name="c", opcode="constant", id=1, shape=shape)
    inst.literal.CopyFrom(hlo_pb2.LiteralProto(shape=shape, **literal))
    comp = hlo_pb2.HloComputationProto(name="main", id=1, root_id=1, instructions=[inst])
    return hlo_pb2.HloModuleProto(name="m", entry_computation_name="main", computations=[comp])


def _literal(element: int, dims: tuple[int, ...], **values: object) -> str | None:
    layout = hlo_pb2.LayoutProto(minor_to_major=list(reversed(range(len(dims)))))
    shape = hlo_pb2.ShapeProto(element_type=element, dimensions=dims, layout=layout)
    data = _constant_module(shape, **values).SerializeToString()
    return decode_hlo_module_proto(data).instructions()["c"].literal


PT = hlo_pb2.PrimitiveType


@pytest.mark.parametrize(
    ("element", "dims", "values", "text"),
    [
        (PT.F32, (), {"f32s": [0.0]}, "0"),
        (PT.F32, (), {"f32s": [0.05]}, "0.05"),
        (PT.F32, (), {"f32s": [-math.inf]}, "-inf"),
        (PT.F32, (), {"f32s": [math.nan]}, "nan"),
        (PT.F32, (2,), {"f32s": [1e-5, 0.1]}, "{1e-05, 0.1}"),
        (PT.F32, (2, 2), {"f32s": [1, 2, 3, 4]}, "{ { 1, 2 }, { 3, 4 } }"),
        (PT.F64, (), {"f64s": [0.1]}, "0.1"),
        (PT.F32, (), {"f32s": [16777215.0]}, "16777215"),  # 6 digits do not read back: 9
        (PT.F32, (), {"f32s": [-math.nan]}, "-nan"),
        (PT.BF16, (), {"bf16s": b"\xcd\x3d"}, "0.1001"),  # bf16 0x3dcd, always 4 digits
        (PT.F16, (), {"f16s": b"\x66\x2e"}, "0.099976"),  # f16 0x2e66, always 5 digits
        (PT.S32, (3,), {"s32s": [-1, 0, 7]}, "{-1, 0, 7}"),
        (PT.S8, (2,), {"s8s": b"\xff\x02"}, "{-1, 2}"),
        (PT.PRED, (2,), {"preds": [True, False]}, "{true, false}"),
        (PT.S32, (2,), {"s32s": [1]}, "{...}"),  # data that does not fit the shape
        (PT.C64, (), {"c64s": [1, 0]}, "{...}"),  # complex literals are not decoded
    ],
)
@pytest.mark.usefixtures("hlo_decoder")
def test_literals(
    element: int, dims: tuple[int, ...], values: dict[str, object], text: str
) -> None:
    assert _literal(element, dims, **values) == text


@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xff\xff",  # not protobuf
        b"",  # no module
        hlo_pb2.HloProto(hlo_module=hlo_pb2.HloModuleProto(name="empty")).SerializeToString(),
    ],
)
@pytest.mark.usefixtures("hlo_decoder")
def test_undecodable_bytes(data: bytes) -> None:
    with pytest.raises(HloDecodeError) as info:
        decode_hlo_proto(data)
    # The HLO stage knows nothing of exit codes: its callers decide what a bad module means.
    assert isinstance(info.value, ValueError) and not isinstance(info.value, HlogapError)


@pytest.mark.usefixtures("hlo_decoder")
def test_dangling_operand_is_an_error() -> None:
    proto = _constant_module(hlo_pb2.ShapeProto(element_type=PT.F32))
    proto.computations[0].instructions[0].operand_ids.append(99)
    with pytest.raises(HloDecodeError, match="unknown id 99"):
        decode_hlo_module_proto(proto.SerializeToString())


def _sample_module() -> bytes:
    shape = hlo_pb2.ShapeProto(element_type=PT.F32, dimensions=[2], layout={"minor_to_major": [0]})
    proto = _constant_module(shape, f32s=[1.0, 2.0])
    metadata = {"op_name": "jit(f)/neg", "source_file": "f.py", "source_line": 3}
    neg = hlo_pb2.HloInstructionProto(
        name="n", opcode="negate", id=2, shape=shape, operand_ids=[1], metadata=metadata
    )
    proto.computations[0].instructions.append(neg)
    proto.computations[0].root_id = 2
    return proto.SerializeToString()


@pytest.mark.usefixtures("hlo_decoder")
def test_sample_module_decodes() -> None:
    module = decode_hlo_module_proto(_sample_module())
    neg = module.instructions()["n"]
    assert neg.is_root and neg.operands == ["c"] and neg.source == "f.py:3"
    assert neg.attrs == {"metadata": '{op_name="jit(f)/neg" source_file="f.py" source_line=3}'}


@settings(max_examples=300, deadline=None)
@given(st.data())
@pytest.mark.usefixtures("hlo_decoder")
def test_corrupted_bytes_raise_only_decode_errors(data: st.DataObject) -> None:
    blob = bytearray(_sample_module())
    for _ in range(data.draw(st.integers(1, 4))):
        blob[data.draw(st.integers(0, len(blob) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(blob)))
    for read in (decode_hlo_module_proto, decode_hlo_proto):
        with contextlib.suppress(HloDecodeError):
            read(bytes(blob[:cut]))
