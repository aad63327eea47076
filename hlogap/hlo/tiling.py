"""Bytes an array really occupies under a tiled layout (`{1,0:T(8,128)(2,1)}`).

XLA semantics (docs/tiled_layout.md and `ShapeUtil::ArraySize` in openxla/xla):
- Tiles act on physical dimensions: the dims in major-to-minor order, i.e. `minor_to_major`
  reversed. A tile of k numbers covers the k most minor of them; `*` (-1 in the IR) folds that
  dimension into the next more minor one before tiling.
- The first tile pads each covered dimension up to a multiple of its tile size:
  `f32[3,5]{1,0:T(2,2)}` is laid out as `[4,6]`.
- A tile with more numbers than the shape has dimensions treats the missing major dimensions as
  size 1, as ArraySize does: a scalar `f32[]{:T(128)}` occupies 128 elements (512 bytes).
- Every later tile is applied to the tiled shape of the one before (tile counts followed by the
  tile's own dims). TPU's later tiles, (2,1) and (4,1) packing or (128) under (1024), divide the
  first tile and add no padding; XLA's ArraySize assumes exactly that. Applying them for real
  also counts the rare case where they do not divide.
- `L(n)` rounds the element count up to a multiple of n; `E(n)` gives the bits per element.
"""

from __future__ import annotations

import math

from hlogap.hlo.ir import Shape


def _major_to_minor(shape: Shape) -> list[int]:
    """Dim indices from the most major to the most minor (row-major without a full layout)."""
    layout = shape.layout
    if layout is None or sorted(layout.minor_to_major) != list(range(len(shape.dims))):
        return list(range(len(shape.dims)))
    return list(reversed(layout.minor_to_major))


def _fold_combined(dims: list[int], tile: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """Drops the `*` entries of a tile, multiplying each such dim into the next more minor one."""
    dims, tile_out = list(dims), []
    offset = len(dims) - len(tile)
    carry = 1
    for i, t in enumerate(tile):
        if t == -1:
            carry *= dims[offset + i]
            dims[offset + i] = -1  # removed below
            continue
        dims[offset + i] *= carry
        carry = 1
        tile_out.append(t)
    return [d for d in dims if d != -1], tile_out


def _tiled_count(dims: list[int], tiles: tuple[tuple[int, ...], ...]) -> int:
    """Elements after applying every tile in turn to the physical dims."""
    shape = list(dims)
    for raw in tiles:
        if len(raw) > len(shape):
            shape = [1] * (len(raw) - len(shape)) + shape
        shape, tile = _fold_combined(shape, raw)
        if not tile:
            continue
        head, covered = shape[: -len(tile)], shape[-len(tile) :]
        shape = head + [-(-d // t) for d, t in zip(covered, tile)] + tile
    return math.prod(shape)


def padded_dims(shape: Shape) -> tuple[int, ...]:
    """Dims (in logical order) padded up by the first tile; implied leading dims come first.

    `f32[3,5]{1,0:T(2,2)}` -> (4, 6); `f32[]{:T(128)}` -> (128,); untiled shapes are unchanged.
    """
    if shape.is_tuple or shape.layout is None or not shape.layout.tiles:
        return shape.dims
    tile = shape.layout.tiles[0]
    order = _major_to_minor(shape)
    physical = [shape.dims[d] for d in order]
    implied = max(len(tile) - len(order), 0)
    physical = [1] * implied + physical
    for i in range(1, len(tile) + 1):
        size = tile[-i]
        if size > 0:  # `*` entries combine dims; they pad nothing themselves
            physical[-i] = -(-physical[-i] // size) * size
    out = [0] * len(order)
    for k, d in enumerate(order):
        out[d] = physical[implied + k]
    return tuple(physical[:implied]) + tuple(out)


def padded_elements(shape: Shape) -> int:
    """Elements an array occupies, padding included; summed over tuple leaves."""
    if shape.is_tuple:
        return sum(padded_elements(s) for s in shape.tuple_shapes)
    layout = shape.layout
    if layout is None or not layout.tiles:
        count = math.prod(shape.dims)
    else:
        count = _tiled_count([shape.dims[d] for d in _major_to_minor(shape)], layout.tiles)
    if layout is not None and layout.tail_padding_alignment > 1:
        count = -(-count // layout.tail_padding_alignment) * layout.tail_padding_alignment
    return count


def padded_bytes(shape: Shape) -> int:
    """Bytes an array occupies in memory, tiling padding included; summed over tuple leaves."""
    if shape.is_tuple:
        return sum(padded_bytes(s) for s in shape.tuple_shapes)
    layout = shape.layout
    bits = layout.element_size_in_bits if layout and layout.element_size_in_bits else None
    return (padded_elements(shape) * (bits or shape.element_bits) + 7) // 8
