"""Global shapes through XLA's rewrites (issue 40 item 4), against what the program declares.

The fixture `documented_block` (scripts/make_fixtures.py) is a transformer block on 8 CPU
devices, mesh (data 2, fsdp 2, tensor 2), GSPMD with NamedSharding and with_sharding_constraint.
Its oracle's `block` was read from JAX, not from the HLO: each einsum's global operand and result
shapes (the jaxpr's dot_generals) and the specs of its operands and result. XLA merged batch and
sequence ([8,32] -> 256, split 4 ways by data x fsdp) and heads and head_dim in the projections,
and moved dims of the attention's operands with transposes, so the dots' global shapes are the
declared ones regrouped.

Before reshapes were followed, six of the eight dots had no global shapes and the FFN's read
`f32[64*?,256*?] x f32[256,1024] -> f32[64*?,1024]`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from hlogap import audit
from hlogap.hlo.ir import Instruction
from hlogap.hlo.text import parse_module
from hlogap.options import AuditOptions
from tests.conftest import FIXTURES

BLOCK = FIXTURES / "documented_block"
ORACLE: dict[str, Any] = json.loads((BLOCK / "oracle.json").read_text())["block"]
MODULE = "jit_transformer_block"


def _dims(shape: str) -> list[int]:
    assert "?" not in shape, shape  # the program says every split here
    return [int(d) for d in shape[shape.index("[") + 1 : -1].split(",") if d]


def _regroups(dims: Sequence[int], declared: Sequence[int]) -> bool:
    """Whether `declared` splits into groups, one per dim of `dims`, whose products are those
    dims (XLA merges dims and reorders them; it never invents one)."""

    def place(k: int, left: list[int], open_: list[int]) -> bool:
        if k == len(left) and all(v == 1 for v in open_):
            return True
        if k == len(left):
            return False
        for j, rest in enumerate(open_):
            if rest % left[k] == 0 and place(
                k + 1, left, [*open_[:j], rest // left[k], *open_[j + 1 :]]
            ):
                return True
        return False

    return math.prod(dims) == math.prod(declared) and place(
        0, sorted(declared, reverse=True), list(dims)
    )


def _dots() -> list[tuple[str, Instruction]]:
    """Every dot of the block's module and the row it belongs to (its fusion, or itself)."""
    module = parse_module((BLOCK / f"{MODULE}.hlo.txt").read_text())
    owner = {
        inst.called[0]: inst.name
        for comp in module.computations
        for inst in comp.instructions
        if inst.opcode == "fusion" and inst.called
    }
    return [
        (owner.get(comp.name, inst.name), inst)
        for comp in module.computations
        for inst in comp.instructions
        if inst.opcode == "dot"
    ]


def _einsum(inst: Instruction) -> dict[str, Any]:
    """The oracle's einsum whose name the dot's op_name carries (`jit(...)/bsd,df->bsf/...`)."""
    name = (inst.op_name or "").split("/")[1]
    found = [e for e in ORACLE["einsums"] if e["einsum"] == name]
    assert found, name
    return found[0]


@pytest.fixture
def rows(cpu_chip_file: Path) -> dict[str, Any]:
    report = audit(BLOCK, AuditOptions(chip=str(cpu_chip_file)))
    assert report.mesh is not None and report.mesh.devices == 8
    # Each declared axis is one of ours with its size and device stride.
    ids = ORACLE["mesh"]["device_ids"]
    strides = {"data": ids[1][0][0] - ids[0][0][0], "fsdp": ids[0][1][0] - ids[0][0][0]}
    strides["tensor"] = ids[0][0][1] - ids[0][0][0]
    ours = {(a.size, a.stride): a.name for a in report.mesh.axes}
    sizes = ORACLE["mesh"]["axes"]
    rows: dict[str, Any] = {r.name: r for r in report.ops if r.module == MODULE}
    rows["_names"] = {name: ours[(sizes[name], strides[name])] for name in sizes}
    return rows


def test_every_dot_of_the_block_has_its_declared_global_shapes(rows: dict[str, Any]) -> None:
    names = rows["_names"]
    dots = _dots()
    assert len(dots) == len(ORACLE["einsums"]) == 8
    assert sorted(_einsum(d)["einsum"] for _, d in dots) == sorted(
        e["einsum"] for e in ORACLE["einsums"]
    )
    for owner, inst in dots:
        row = rows[owner]
        declared = _einsum(inst)
        assert row.global_shapes is not None, (owner, declared["einsum"])
        lhs, rhs, result = (_dims(s) for s in row.global_shapes)
        assert _regroups(result, declared["result"]), (owner, row.global_shapes, declared)
        # XLA may take the einsum's operands in either order.
        dims = inst.dot_dims
        assert dims is not None
        matched = False
        for order in ((0, 1), (1, 0)):
            want = [declared["operands"][k] for k in order]
            contracting = [declared["contracting"][k] for k in order]
            batch = [declared["batch"][k] for k in order]
            if not (_regroups(lhs, want[0]) and _regroups(rhs, want[1])):
                continue
            # The contracted and batch sizes are the declared ones.
            assert math.prod(lhs[d] for d in dims.lhs_contracting) == math.prod(
                want[0][d] for d in contracting[0]
            )
            assert math.prod(rhs[d] for d in dims.rhs_contracting) == math.prod(
                want[1][d] for d in contracting[1]
            )
            assert math.prod(lhs[d] for d in dims.lhs_batch) == math.prod(
                want[0][d] for d in batch[0]
            )
            matched = True
        assert matched, (owner, row.global_shapes, declared)
        # Split over the axes the program names for the einsum's operands and result.
        specs = [s[1] for s in declared["operand_specs"] if s]
        specs += [declared["result_spec"]] if declared["result_spec"] else []
        axes = {a for spec in specs for part in spec if part for a in _names(part)}
        assert row.sharding == {names[a]: ORACLE["mesh"]["axes"][a] for a in axes}, owner


def _names(part: str | list[str]) -> list[str]:
    return [part] if isinstance(part, str) else list(part)


def test_the_ffn_reads_the_merged_batch_and_its_tensor_split(rows: dict[str, Any]) -> None:
    """The issue's figure: the FFN's up-projection is `[8,32,256] x [256,1024]` with batch and
    sequence merged: 256 rows (64 a device, data x fsdp), its 1024 split over tensor (512 a
    device), as the result's own sharding names it."""
    dims = ORACLE["dims"]
    up = next(o for o, d in _dots() if _einsum(d)["einsum"] == "bsd,df->bsf")
    rows_global = dims["batch"] * dims["seq"]
    assert rows[up].global_shapes == [
        f"f32[{rows_global},{dims['d_model']}]",
        f"f32[{dims['d_model']},{dims['d_ff']}]",
        f"f32[{rows_global},{dims['d_ff']}]",
    ]
    assert not any("?" in h for h in rows[up].hints if "local view" in h)
