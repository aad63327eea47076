"""Matrix-unit work: dot and convolution FLOPs, counted as XLA's HloCostAnalysis counts them."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from hlogap.cost.base import elements, first_leaf, widest
from hlogap.hlo.ir import ConvDims, Instruction, Shape, Window

# Taps of one spatial dim counted at most: a window this wide is a corrupt HLO.
MAX_TAPS = 1 << 27


def dot_flops(lhs: Shape, out: Shape, contracting: Sequence[int]) -> int:
    """2 x output elements x product of the contracting dims."""
    width = math.prod(lhs.dims[d] for d in contracting if d < lhs.rank)
    return 2 * elements(first_leaf(out)) * width


def matmul_dtype(shapes: Sequence[Shape | None]) -> str:
    """The peak that applies: the widest of lhs and rhs (bf16 x s8 -> bf16, s8 x s8 -> s8)."""
    return widest(s.element_type for s in shapes[:2] if s is not None) or "f32"


def conv_flops(inst: Instruction, lhs: Shape, rhs: Shape, out: Shape) -> int:
    """2 x (input features / feature groups) x output features x (batch / batch groups) x the
    (output position, kernel tap) pairs that read a real input element."""
    dims = inst.conv_dims or ConvDims()
    result = first_leaf(out)
    win = inst.window or Window()
    valid = 1
    for i, kernel_dim in enumerate(dims.kernel_spatial):
        valid *= valid_taps(
            lhs.dims[dims.input_spatial[i]],
            rhs.dims[kernel_dim],
            result.dims[dims.output_spatial[i]],
            stride=at(win.stride, i, 1),
            pad_low=at(win.pad_low, i, 0),
            base_dilation=at(win.lhs_dilate, i, 1),
            window_dilation=at(win.rhs_dilate, i, 1),
        )
    features_in = lhs.dims[dims.input_feature] // max(inst.feature_group_count, 1)
    batch = lhs.dims[dims.input_batch] // max(inst.batch_group_count, 1)
    return 2 * features_in * result.dims[dims.output_feature] * batch * valid


def at(values: Sequence[int] | Sequence[bool], i: int, default: int) -> int:
    """A window attribute of spatial dim i; absent ones take their default."""
    return int(values[i]) if i < len(values) else default


def valid_taps(
    size_in: int,
    size_kernel: int,
    size_out: int,
    *,
    stride: int,
    pad_low: int,
    base_dilation: int,
    window_dilation: int,
) -> int:
    """(output position, kernel tap) pairs of one spatial dim whose input element exists.

    Tap k of output o reads dilated input position u = o*stride - pad_low + k*window_dilation; it
    exists iff u is a multiple of base_dilation within [0, (size_in - 1) * base_dilation]. Taps
    on padding or between dilated elements do no work (XLA's count). Solved per tap in closed form,
    over the taps that can reach the input (in numpy), not taps x outputs.
    """
    if min(stride, base_dilation, window_dilation) < 1 or min(size_in, size_kernel) < 1:
        raise ValueError(
            f"convolution window: stride {stride}, dilations {base_dilation}/{window_dilation}, "
            f"input {size_in}, kernel {size_kernel}"
        )
    if size_out < 1:
        return 0
    last = (size_in - 1) * base_dilation
    # Only taps that can reach the input for some output: c_k = pad_low - k * window_dilation
    # must lie in [-last, (size_out - 1) * stride]. However wide the kernel, that is at most
    # about (input + output span) / dilation taps.
    k_min = max(0, -(-(pad_low - (size_out - 1) * stride) // window_dilation))
    k_max = min(size_kernel - 1, (pad_low + last) // window_dilation)
    if k_max < k_min:
        return 0
    if k_max - k_min >= MAX_TAPS:
        raise ValueError(f"convolution window of {k_max - k_min + 1:,} reachable taps")
    if base_dilation == 1:  # the usual case, in numpy
        total = 0
        for chunk in range(k_min, k_max + 1, 1 << 20):
            cs = pad_low - np.arange(chunk, min(chunk + (1 << 20), k_max + 1)) * window_dilation
            los = np.maximum(0, -(-cs // stride))
            his = np.minimum(size_out - 1, (cs + last) // stride)
            total += int(np.maximum(his - los + 1, 0).sum())
        return total
    total = 0
    for k in range(k_min, k_max + 1):
        c = pad_low - k * window_dilation  # want 0 <= o*stride - c <= last, divisible by bd
        lo = max(0, -(-c // stride))
        hi = min(size_out - 1, (c + last) // stride)
        if lo > hi:
            continue
        g = math.gcd(stride, base_dilation)
        if c % g:
            continue
        period = base_dilation // g
        # o * stride == c (mod base_dilation) <=> o == first_o (mod period)
        first_o = (c // g) * pow(stride // g, -1, period) % period if period > 1 else 0
        first = lo + (first_o - lo) % period
        if first <= hi:
            total += (hi - first) // period + 1
    return total
