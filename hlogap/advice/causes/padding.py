"""Tile padding: a TPU layout (`T(8,128)`, bf16's `(16,128)`) pads each array's two minor
dimensions up to the tile, and every padded element is moved (and multiplied) as if it were
data. The share of an op's bytes that is padding, and the shape that would not pad."""

from __future__ import annotations

from collections.abc import Iterator

from hlogap.advice.base import Context, Finding, capped, register
from hlogap.hlo.ir import Shape
from hlogap.hlo.printer import print_shape
from hlogap.hlo.tiling import padded_bytes, padded_dims

WORTH = 0.2  # a padded share of an op's bytes from which it is named


def tile_padding(ctx: Context) -> Iterator[Finding]:
    for row in ctx.rows:
        inst, _ = ctx.instruction(row)
        if inst is None or row.bound_by not in ("memory", "compute"):
            continue
        shapes = [s for s in (*inst.operand_shapes, inst.shape) if s is not None]
        arrays = [
            leaf
            for shape in shapes
            for leaf in shape.leaves()
            if leaf.layout is not None and leaf.layout.tiles
        ]
        logical = sum(s.byte_size() for s in arrays)
        padded = sum(padded_bytes(s) for s in arrays)
        if not padded or 1 - logical / padded < WORTH:
            continue
        share = 1 - logical / padded
        worst = max(arrays, key=lambda s: padded_bytes(s) - s.byte_size())
        yield Finding(
            "tile padding",
            (row,),
            capped(row, row.measured_us * share),
            f"{share:.0%} of the bytes its arrays occupy are tile padding; the most, "
            f"{print_shape(worst)}, is laid out as [{','.join(map(str, padded_dims(worst)))}]",
            _unpadded(worst),
        )


def _unpadded(shape: Shape) -> str:
    """The change: dims that are multiples of the tile (the ones that pad, named)."""
    assert shape.layout is not None
    tile = [t for t in shape.layout.tiles[0] if t > 0]
    padded = padded_dims(shape)[-len(shape.dims) :] if shape.dims else ()
    off = [
        f"dim {d} ({size} -> {padded[d]})"
        for d, size in enumerate(shape.dims)
        if d < len(padded) and padded[d] != size
    ]
    return (
        f"make {', '.join(off) or 'the tiled dims'} a multiple of the {tuple(tile)} tile "
        "(pad once at the input, or fold a small dimension into a larger one)"
    )


register(tile_padding)
