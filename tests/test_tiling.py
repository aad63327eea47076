"""Tiled-layout padding (hlogap.hlo.tiling) against XLA's documented examples."""

from __future__ import annotations

import pytest

from hlogap.hlo.text import parse_shape
from hlogap.hlo.tiling import padded_bytes, padded_dims, padded_elements


@pytest.mark.parametrize(
    ("text", "dims", "elements", "nbytes"),
    [
        # The brief's and docs/tiled_layout.md's example: 15 elements stored as 24.
        ("f32[3,5]{1,0:T(2,2)}", (4, 6), 24, 96),
        # Column-major: the tile covers the same physical dims, so the logical dims swap roles.
        ("f32[3,5]{0,1:T(2,2)}", (4, 6), 24, 96),
        ("f32[3,5]{0,1:T(1,4)}", (4, 5), 20, 80),
        # TPU bf16: (8,128) pads, (2,1) packs pairs within the tile and pads nothing more.
        ("bf16[8,1024,4096]{2,1,0:T(8,128)(2,1)}", (8, 1024, 4096), 8 * 1024 * 4096, 2 << 25),
        ("bf16[1,2048]{1,0:T(2,128)(2,1)}", (2, 2048), 4096, 8192),
        ("bf16[2048]{0:T(1024)(128)(2,1)}", (2048,), 2048, 4096),
        ("f32[1,2048]{1,0:T(1,128)}", (1, 2048), 2048, 8192),
        ("s32[4,2048]{1,0:T(4,128)}", (4, 2048), 8192, 32768),
        ("f32[10,300]{1,0:T(8,128)}", (16, 384), 16 * 384, 16 * 384 * 4),
        # A tile of higher rank than the shape: the missing major dims are 1, padded up.
        ("f32[]{:T(128)}", (128,), 128, 512),
        ("s32[]{:T(128)S(6)}", (128,), 128, 512),
        ("pred[]{:T(512)}", (512,), 512, 512),
        ("f32[64]{0:T(8,128)}", (8, 128), 1024, 4096),
        # E(4): packed 4-bit elements.
        ("s4[8,33]{1,0:T(8,128)(8,1)E(4)}", (8, 128), 1024, 512),
        # L(n): tail padding of the element count.
        ("f32[10]{0:L(16)}", (10,), 16, 64),
        # No tiles, no layout: nothing changes.
        ("f32[3,5]{1,0}", (3, 5), 15, 60),
        ("f32[3,5]", (3, 5), 15, 60),
        ("u32[]{:S(2)}", (), 1, 4),
        ("s4[3]", (3,), 3, 2),
    ],
)
def test_padding(text: str, dims: tuple[int, ...], elements: int, nbytes: int) -> None:
    shape = parse_shape(text)
    assert padded_dims(shape) == dims
    assert padded_elements(shape) == elements
    assert padded_bytes(shape) == nbytes


def test_padding_ratio_of_the_brief() -> None:
    shape = parse_shape("f32[3,5]{1,0:T(2,2)}")
    assert padded_bytes(shape) / shape.byte_size() == pytest.approx(1.6)


def test_combined_dimensions() -> None:
    # docs/tiled_layout.md: `*` folds F32[2,7,8,11,10] into [112,110] before the (2,3) tile.
    shape = parse_shape("f32[2,7,8,11,10]{4,3,2,1,0:T(*,*,2,*,3)}")
    assert padded_elements(shape) == 112 * 111


def test_later_tile_that_does_not_divide_pads_too() -> None:
    # (3) splits each 4-element tile into 2 tiles of 3: 6 elements stored per 4.
    assert padded_elements(parse_shape("f32[4]{0:T(4)(3)}")) == 6
    assert padded_elements(parse_shape("f32[5]{0:T(4)(3)}")) == 2 * 6


def test_tuples_sum_their_leaves() -> None:
    shape = parse_shape("(f32[3,5]{1,0:T(2,2)}, u32[]{:T(128)S(2)}, token[])")
    assert padded_dims(shape) == ()
    assert padded_bytes(shape) == 96 + 512
