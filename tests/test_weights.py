"""Weights vs activations decided from the program (issue 40 item 3), against what the programs
declare: scripts/make_fixtures.py's parameters (the state a training step carries and updates,
its batch), the layers' weights, and the shared profiles' own shapes."""

from __future__ import annotations

import lzma
import zipfile

import pytest

from hlogap.advice.matrix import weight_of
from hlogap.cost.base import index_of
from hlogap.cost.roles import roles
from hlogap.hlo.decode import decode_hlo_proto
from hlogap.hlo.ir import Instruction, Module, Shape
from hlogap.hlo.text import parse_module
from tests.conftest import FIXTURES, SHARED

NSYS = SHARED / "nvidia-h100-nsys-jax" / "maxtext_fsdp4_test_data.zip"


def _module(program: str, name: str) -> Module:
    return parse_module((FIXTURES / program / f"{name}.hlo.txt").read_text())


def _inst(module: Module, name: str) -> Instruction:
    (found,) = [i for c in module.computations for i in c.instructions if i.name == name]
    return found


def _weight(module: Module, name: str) -> tuple[Shape | None, str]:
    inst = _inst(module, name)
    shapes = [s for s in inst.operand_shapes if s is not None and not s.is_tuple]
    return weight_of(inst, module, shapes)


@pytest.mark.parametrize(
    ("program", "module"), [("mlp_train", "jit_mlp_train"), ("mem_donate", "jit_mem_donate")]
)
def test_a_training_steps_parameters_are_its_weights(program: str, module: str) -> None:
    """The MLP's SGD step (make_fixtures: params w1 [512,1024], b1, w2 [1024,512], b2 updated
    and returned, the batch x, y [64,512] not; mem_donate donates the parameters, mlp_train
    returns new ones)."""
    m = _module(program, module)
    found = roles(m)
    assert found is not None and found.carried == {0, 1, 2, 3}  # params, not x (4), y (5)
    # Forward: x @ w1 reads w1, h @ w2 reads w2.
    assert [(s.dims if s else None, what) for s, what in [_weight(m, "ynn_fusion.5")]] == [
        ((512, 1024), "operand 1")
    ]
    assert _weight(m, "ynn_fusion.4")[1] == "operand 1"
    # Backward: x^T . dh is w1's gradient, h^T . dy w2's: the output stays, the batch grows.
    for dot, shape in (("dot", (512, 1024)), ("dot.1", (1024, 512))):
        out, what = _weight(m, dot)
        assert what == "gradient" and out is not None and out.dims == shape
        inst = _inst(m, dot)
        lhs = inst.operand_shapes[0]
        assert lhs is not None and lhs.dims[0] == 64  # contracted: the batch
    # The backward data product dh = dy . w2^T reads w2.
    assert _weight(m, "ynn_fusion.3")[1] == "operand 1"


def test_a_data_parallel_gradient_dot_reads_the_local_batch() -> None:
    """documented_sharded: params w1 [256,512], w2 [512,256] replicated, the batch 512 split 8
    ways (64 rows a device); the weight-gradient dots' fixed part is their output."""
    m = _module("documented_sharded", "jit_documented_sharded")
    for dot, shape in (("dot.4", (256, 512)), ("dot.3", (512, 256))):
        out, what = _weight(m, dot)
        assert what == "gradient" and out is not None and out.dims == shape
        flops = 2 * 64 * shape[0] * shape[1]
        assert flops / (2 * out.num_elements) == 64  # rows per weight read: the local batch


def test_attention_scores_have_no_weight() -> None:
    """documented_attention (inference: nothing carried): QK^T and PV multiply activations;
    the projections read their weight parameters."""
    m = _module("documented_attention", "jit_attention_step")
    found = roles(m)
    assert found is not None and not found.carried
    assert _weight(m, "ynn_fusion.13") == (None, "")  # [2,4,256,256] scores
    assert _weight(m, "ynn_fusion.11") == (None, "")  # [2,4,256,32] P V
    # The second layer's h @ wqkv: h computed, wqkv the parameter. (The first layer's x @ wqkv
    # multiplies two parameters of an inference program: nothing carried tells them apart.)
    shape, what = _weight(m, "ynn_fusion.9")
    assert what == "operand 1" and shape is not None and shape.dims == (128, 384)


@pytest.mark.skipif(not NSYS.exists(), reason="the shared nsys-jax archive is not here")
def test_maxtext_weights_gradients_and_attention() -> None:
    """The MaxText train step (FSDP over 4 GPUs, layers scanned): its attention GEMMs multiply
    activations, its weight GEMMs read a parameter the step updates (all-gathered, sliced per
    layer), its weight-gradient GEMMs write a gradient reduce-scattered to the update."""
    with zipfile.ZipFile(NSYS) as archive:
        (name,) = [
            n
            for n in archive.namelist()
            if "module_0016.jit_train_step" in n and n.endswith("after_optimizations.hlo.pb.xz")
        ]
        m = decode_hlo_proto(lzma.decompress(archive.read(name)))
    kinds: dict[str, str] = {}
    for comp in m.computations:
        for inst in comp.instructions:
            if inst.opcode == "custom-call" and "gemm" in (inst.custom_call_target or ""):
                shapes = [s for s in inst.operand_shapes if s is not None and not s.is_tuple]
                kinds[inst.name] = weight_of(inst, m, shapes)[1].split(" ")[0]
    # bf16[16,2048,128] x bf16[16,128,2048]: Q K^T, no weight (its K was called the weight).
    assert kinds["custom-call.220"] == ""
    # x [4096,2560] x W [2560,8192] in the scanned layer, and its weight gradient.
    assert kinds["custom-call.37.0"] == "operand"
    assert kinds["custom-call.202.0"] == "gradient"
    # Six weight-gradient products per layer weight (7) and the embedding's one.
    assert sum(k == "gradient" for k in kinds.values()) == 6 * 7 + 1


@pytest.mark.skipif(not (SHARED / "amd-gpu").exists(), reason="the shared AMD profiles are absent")
def test_a_convolutions_weight_is_its_kernel() -> None:
    """The MI300X 3-D convolution (a forward pass: nothing carried): its weight is the kernel
    bf16[5120,16,1,2,2] (655,360 B), not the larger input bf16[1,16,32,60,104]."""
    from hlogap import audit
    from hlogap.options import AuditOptions

    report = audit(SHARED / "amd-gpu" / "mi300x_conv3d.xplane.pb", AuditOptions())
    (action,) = [a for a in report.actions or [] if a.cause == "activation-bound"]
    assert "its weight only 655 kB" in action.evidence
    assert 5120 * 16 * 1 * 2 * 2 * 2 == 655_360


# MaxText's parameters as its train step takes them (flax flattens the tree in sorted key
# order: decoder_norm, then the scanned layers' mlp wi_0, wi_1, wo, a norm, the attention's
# key, out, query, value, then the token embedder), each entry parameter the weight the GEMM's
# op_name names (`.../layers/mlp/wi_0/dot_general`). Stored split 4 ways over FSDP
# (num_partitions 4) and stacked over the 8 scanned layers (the embedding is not stacked).
MAXTEXT_WEIGHTS = {
    "mlp/wi_0/": 2,
    "mlp/wi_1/": 3,
    "mlp/wo/": 4,
    "kv_projection/key/": 6,
    "out_projection/out/": 7,
    "query_projection/query/": 8,
    "kv_projection/value/": 9,
    "token_embedder.attend/": 10,
}
MAXTEXT_FSDP, MAXTEXT_LAYERS = 4, 8
# The GEMMs whose weight was not traced before XLA's rewrites were followed (13 of 159: the
# largest operand was taken): the peeled last layer's forward and first backward products
# read a weight from the scan loop's result (its body all-gathers the next layer's weight
# ahead, double-buffered); the logits' products read the embedding, whose update XLA
# transposes back to the parameter's layout.
MAXTEXT_UNTRACED_BEFORE = [
    "custom-call.154.0",
    "custom-call.155.0",
    "custom-call.161.0",
    "cublas-gemm.23.0",
    "custom-call.162.0",
    "custom-call.163.0",
    "custom-call.201.0",
    "custom-call.205.0",
    "custom-call.211.0",
    "cublas-gemm.28.0",
    "custom-call.213.0",
    "cublas-gemm.29.0",
    "custom-call.214.0",
]


def _maxtext() -> Module:
    with zipfile.ZipFile(NSYS) as archive:
        (name,) = [
            n
            for n in archive.namelist()
            if "module_0016.jit_train_step" in n and n.endswith("after_optimizations.hlo.pb.xz")
        ]
        return decode_hlo_proto(lzma.decompress(archive.read(name)))


def _named_weight(inst: Instruction) -> int | None:
    """The entry parameter of the weight the GEMM's op_name names; None for attention's."""
    found = [p for key, p in MAXTEXT_WEIGHTS.items() if key in (inst.op_name or "")]
    assert len(found) <= 1, inst.op_name
    return found[0] if found else None


@pytest.mark.skipif(not NSYS.exists(), reason="the shared nsys-jax archive is not here")
def test_every_maxtext_gemm_has_the_weight_its_op_name_names() -> None:
    """Each of the train step's 159 GEMMs: a projection reads (forward, backward data) or
    writes (weight gradient) the weight its op_name names, which is an entry parameter the
    step returns updated (the root's element at its position, of its shape); attention's QK^T
    and PV read none. None falls back to the largest operand."""
    m = _maxtext()
    assert m.attrs["num_partitions"] == str(MAXTEXT_FSDP)
    entry = m.entry_computation
    assert entry is not None and entry.root is not None and entry.root.opcode == "tuple"
    params = {i.parameter_number: i for i in entry.instructions if i.opcode == "parameter"}
    out_shapes = {
        k: i.shape.dims
        for k, o in enumerate(entry.root.operands)
        for i in entry.instructions
        if i.name == o
    }
    found, ix = roles(m), index_of(m)
    assert found is not None and ix is not None
    gemms = [
        i
        for c in m.computations
        for i in c.instructions
        if i.opcode == "custom-call" and "gemm" in (i.custom_call_target or "")
    ]
    assert len(gemms) == 159
    kinds: dict[str, int] = {"": 0, "operand": 0, "gradient": 0}
    for inst in gemms:
        shapes = [s for s in inst.operand_shapes if s is not None and not s.is_tuple]
        shape, what = weight_of(inst, m, shapes)
        kinds[what.split(" ")[0]] += 1
        number = _named_weight(inst)
        if number is None:  # attention: activations times activations
            assert "AttentionOp_0" in (inst.op_name or "") and what == "", inst.name
            continue
        param = params[number]
        assert out_shapes[number] == param.shape.dims  # the step returns it: carried state
        stacked = param.shape.rank > 2
        elements = param.shape.num_elements * MAXTEXT_FSDP // (MAXTEXT_LAYERS if stacked else 1)
        assert shape is not None and shape.num_elements == elements, (inst.name, what)
        if what == "gradient":
            continue
        assert what.startswith("operand "), (inst.name, what)
        operand = ix.producer(inst, int(what.split(" ")[1]))
        assert found.source(operand) == number, (inst.name, inst.op_name)
    # Before tuple elements were told apart, 15 forward projections (their outputs saved in
    # the scan's state beside the gradients) read as gradients, 13 products fell back.
    assert kinds == {"": 44, "operand": 72, "gradient": 43}


@pytest.mark.skipif(not NSYS.exists(), reason="the shared nsys-jax archive is not here")
def test_the_maxtext_gemms_read_through_the_loops_result_and_a_transposed_update() -> None:
    """The 13 GEMMs that fell back: each reads the weight its op_name names as its operand 1."""
    m = _maxtext()
    found, ix = roles(m), index_of(m)
    assert found is not None and ix is not None
    byname = {i.name: i for c in m.computations for i in c.instructions}
    for name in MAXTEXT_UNTRACED_BEFORE:
        inst = byname[name]
        shapes = [s for s in inst.operand_shapes if s is not None and not s.is_tuple]
        assert weight_of(inst, m, shapes)[1] == "operand 1", name
        assert found.source(ix.producer(inst, 1)) == _named_weight(inst), name
    # The embedding (and its two optimizer moments) are carried: their updates reach the
    # outputs through a transpose back to the parameters' [32000,640].
    assert {10, 21, 31} <= found.carried
