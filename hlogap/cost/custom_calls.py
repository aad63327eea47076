"""Custom calls seen in real traces: cuDNN/MIOpen convolutions, cuBLAS/hipBLASLt gemms, fused
attention (Transformer Engine, cuDNN fMHA), Pallas/Mosaic kernels with a cost estimate."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from hlogap.cost.base import ModuleIndex, Work, config, operand_shapes, widest
from hlogap.cost.matmul import conv_flops, dot_flops, matmul_dtype
from hlogap.hlo.ir import Instruction, Shape

# Markers the compiler leaves in place: no work, no traffic of their own.
NO_OP_TARGETS = frozenset(
    {
        "AllocateBuffer",
        "AssumeGatherIndicesInBound",
        "Sharding",
        "SPMDFullToShardShape",
        "SPMDShardToFullShape",
        "LayoutConstraint",
        "annotate_device_placement",
    }
)
# Host offloading copies: bytes only (the host side is not HBM).
COPY_TARGETS = frozenset({"MoveToHost", "MoveToDevice"})


@dataclass
class CustomCost:
    work: Work
    outputs: list[Shape]  # the results that are data (scratch workspaces dropped)
    free: bool = False  # moves nothing
    note: str | None = None
    read_bytes: int | None = None  # from a kernel's own cost estimate


def data_outputs(shape: Shape) -> list[Shape]:
    """Result leaves minus the trailing u8/s8 workspace cuDNN, cuBLAS and TE calls return."""
    leaves = shape.leaves()
    last = leaves[-1] if leaves else None
    if (
        shape.is_tuple
        and len(leaves) > 1
        and last is not None
        and last.rank == 1
        and last.element_type in ("u8", "s8")
    ):
        leaves = leaves[:-1]
    return leaves


def custom_call(inst: Instruction, ix: ModuleIndex | None) -> CustomCost:
    target = inst.custom_call_target or ""
    shapes = operand_shapes(inst, ix)
    cost = CustomCost(Work(), data_outputs(inst.shape))
    w = cost.work
    if target in NO_OP_TARGETS:
        cost.free = True
        cost.note = f"custom call '{target}' is a compiler marker: no work"
    elif target in COPY_TARGETS:
        cost.note = f"custom call '{target}' is a copy"
    elif None in shapes:
        w.unmodeled = f"operand shapes of custom call '{target}' are unknown"
    elif target.startswith(("__cudnn$conv", "__miopen$conv")) and len(shapes) >= 2:
        lhs, rhs = shapes[0], shapes[1]
        assert lhs is not None and rhs is not None
        w.add_matrix(conv_flops(inst, lhs, rhs, cost.outputs[0]), matmul_dtype(shapes))
    elif target.startswith(("__cublas$", "__hipblas")) and shapes:
        gemm = config(inst).get("gemm_backend_config")
        dnums = gemm.get("dot_dimension_numbers") if isinstance(gemm, dict) else None
        if isinstance(dnums, dict) and shapes[0] is not None:
            contracting = [int(d) for d in dnums.get("lhs_contracting_dimensions", [])]
            w.add_matrix(dot_flops(shapes[0], cost.outputs[0], contracting), matmul_dtype(shapes))
        else:
            w.unmodeled = f"gemm custom call '{target}' has no dot_dimension_numbers"
    elif target.startswith(("te_fused_attn_", "__cudnn$fmha")):
        _attention(inst, shapes, cost)
    elif not (target == "tpu_custom_call" and _kernel_estimate(inst, shapes, cost)):
        w.unmodeled = f"custom call '{target}' has no cost model"
    return cost


def _kernel_estimate(inst: Instruction, shapes: list[Shape | None], cost: CustomCost) -> bool:
    """Pallas/Mosaic kernels may carry their author's cost_estimate in the backend_config."""
    cfg = config(inst).get("custom_call_config")
    est = cfg.get("cost_estimate") if isinstance(cfg, dict) else None
    if not isinstance(est, dict):
        return False
    # The estimate is its author's scheduling hint, not a count: block-sparse kernels (splash
    # attention) skip masked blocks, and on the v5p profile the estimates put the bound at up to
    # 4x the measured time. So it is reported, never used as a roof.
    flops = float(est.get("flops", 0))
    nbytes = float(est.get("bytes_accessed", 0))
    cost.work.unmodeled = (
        f"Pallas kernel: its cost_estimate ({flops:.3g} FLOP, {nbytes:.3g} B) is its author's "
        "hint, not a count"
    )
    return True


# Transformer Engine's NVTE_Mask_Type: 2, 3 causal from the top left; 4, 5 from the bottom right.
_TE_CAUSAL = {2: "top-left", 3: "top-left", 4: "bottom-right", 5: "bottom-right"}
AttentionDims = tuple[int, int, int, int, int, int]  # batch x heads, 1, Sq, Skv, Dqk, Dv


def _attention(inst: Instruction, shapes: Sequence[Shape | None], cost: CustomCost) -> None:
    """2*B*H*Sq*Skv*(Dqk + Dv) forward (= 4*B*H*Sq*Skv*D), backward 2.5x that; under a causal
    mask only the unmasked (query, key) pairs, as flash-attention kernels skip masked blocks."""
    cfg = config(inst)
    target = inst.custom_call_target or ""
    fmha = cfg.get("cudnn_fmha_backend_config")
    fmha = fmha if isinstance(fmha, dict) else {}
    dims = _te_dims(cfg) or _fmha_dims(fmha, shapes) or _dims_from_shapes(shapes)
    if dims is None:
        cost.work.unmodeled = f"attention call '{target}': Q/K/V layout not understood"
        return
    b, h, sq, skv, dqk, dv = dims
    mask = cfg.get("mask_type")
    causal = _TE_CAUSAL.get(mask) if isinstance(mask, int) else None
    if "CAUSAL" in str(fmha.get("mask_type", "")):
        causal = "top-left"
    pairs = causal_pairs(sq, skv, bottom_right=causal == "bottom-right") if causal else sq * skv
    flops = 2.0 * b * h * pairs * (dqk + dv)
    backward = "backward" in target.lower()
    if backward:
        flops *= 2.5  # recompute Q.K^T, then dV, dP, dQ, dK: five matmuls to the forward's two
    cost.work.add_matrix(flops, widest(s.element_type for s in shapes[:1] if s) or "bf16")
    cost.note = (
        f"attention B*H={b * h} Sq={sq} Skv={skv} D={dqk}"
        + (f", {causal} causal mask: unmasked pairs only" if causal else "")
        + (", backward = 2.5x forward" if backward else "")
    )


def _te_dims(cfg: dict[str, object]) -> AttentionDims | None:
    """Transformer Engine writes the problem size into its FFI attributes."""
    keys = ("input_batch", "attn_heads", "q_max_seqlen", "kv_max_seqlen", "qk_head_dim")
    values = [v for v in (cfg.get(k) for k in keys) if isinstance(v, int)]
    if len(values) != len(keys):
        return None
    b, h, sq, skv, dqk = values
    dv = cfg.get("v_head_dim")
    return b, h, sq, skv, dqk, dv if isinstance(dv, int) else dqk


def _fmha_dims(fmha: dict[str, object], shapes: Sequence[Shape | None]) -> AttentionDims | None:
    """XLA's cuDNN fMHA: Q.K^T's dot dimension numbers name the batch, head and D dims."""
    dnums = fmha.get("bmm1_dot_dimension_numbers")
    q, k, v = (list(shapes) + [None] * 3)[:3]
    if not isinstance(dnums, dict) or q is None or k is None or v is None:
        return None
    q_batch, q_contract, k_batch, k_contract = (
        [int(d) for d in dnums.get(key) or []]
        for key in (
            "lhs_batch_dimensions",
            "lhs_contracting_dimensions",
            "rhs_batch_dimensions",
            "rhs_contracting_dimensions",
        )
    )
    bh = math.prod(q.dims[d] for d in q_batch)
    dqk = math.prod(q.dims[d] for d in q_contract)
    sq = math.prod(n for d, n in enumerate(q.dims) if d not in (*q_batch, *q_contract))
    skv = math.prod(n for d, n in enumerate(k.dims) if d not in (*k_batch, *k_contract))
    dv = max(v.num_elements // max(bh * skv, 1), 1)
    return bh, 1, sq, skv, dqk, dv


def _dims_from_shapes(shapes: Sequence[Shape | None]) -> AttentionDims | None:
    """Q, K, V in the [B, S, H, D] layout (TE's JAX default and XLA's); packed QKV is
    [B, S, 3, H, D] (TE's BS3HD), packed KV [B, S, 2, H, D]."""
    q = shapes[0] if shapes else None
    if q is None:
        return None
    if q.rank == 5 and q.dims[2] == 3:
        b, s, _, h, d = q.dims
        return b, h, s, s, d, d
    k = shapes[1] if len(shapes) > 1 else None
    if q.rank != 4 or k is None or not (k.rank == 4 or (k.rank == 5 and k.dims[2] == 2)):
        return None
    b, sq, h, dqk = q.dims
    v = shapes[2] if len(shapes) > 2 and k.rank == 4 else k
    dv = v.dims[-1] if v is not None and v.rank >= 4 else dqk
    return b, h, sq, k.dims[1], dqk, dv


def causal_pairs(sq: int, skv: int, *, bottom_right: bool) -> int:
    """(query, key) pairs a causal mask leaves: query i sees keys 0 .. i + offset."""
    offset = skv - sq if bottom_right else 0
    lo = max(0, -offset)  # queries before lo see no key
    hi = max(lo, min(sq, skv - offset))  # queries from hi on see every key
    # Queries lo .. hi-1 see i + offset + 1 keys: an arithmetic series.
    partial = (hi - lo) * ((lo + offset + 1) + (hi + offset)) // 2
    return partial + (sq - hi) * skv
