"""Fused attention (Transformer Engine, XLA's cuDNN fMHA): FLOPs from the Q/K/V shapes."""

from __future__ import annotations

import math
from collections.abc import Sequence

from hlogap.cost.base import config, widest
from hlogap.cost.custom_calls.registry import CustomCost, rule
from hlogap.hlo.ir import Instruction, Shape

# Transformer Engine's NVTE_Mask_Type: 2, 3 causal from the top left; 4, 5 from the bottom right.
_TE_CAUSAL = {2: "top-left", 3: "top-left", 4: "bottom-right", 5: "bottom-right"}
AttentionDims = tuple[int, int, int, int, int, int]  # batch x heads, 1, Sq, Skv, Dqk, Dv


@rule("fused attention", prefixes=("te_fused_attn_", "__cudnn$fmha"))
def attention(inst: Instruction, shapes: Sequence[Shape | None], cost: CustomCost) -> None:
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
