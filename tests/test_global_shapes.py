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
    dots = _dots()
    assert len(dots) == len(ORACLE["einsums"]) == 8
    assert sorted(_einsum(d)["einsum"] for _, d in dots) == sorted(
        e["einsum"] for e in ORACLE["einsums"]
    )
    for owner, inst in dots:
        _assert_declared(rows[owner], inst, _einsum(inst), rows["_names"], ORACLE["mesh"])


def _assert_declared(
    row: Any, inst: Instruction, declared: dict[str, Any], names: dict[str, str], mesh: Any
) -> None:
    """The row's global shapes are the declared einsum's (its dims regrouped where XLA merged
    them, its operands in either order), none unknown, and it is split over the mesh axes the
    program names for the einsum's operands and result, each as many ways as the mesh has."""
    owner = row.name
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
        assert math.prod(lhs[d] for d in dims.lhs_batch) == math.prod(want[0][d] for d in batch[0])
        matched = True
    assert matched, (owner, row.global_shapes, declared)
    # Split over the axes the program names for the einsum's operands and result.
    specs = [s[1] for s in declared["operand_specs"] if s]
    specs += [declared["result_spec"]] if declared["result_spec"] else []
    axes = {a for spec in specs for part in spec if part for a in _names(part)}
    assert row.sharding == {names[a]: mesh["axes"][a] for a in axes}, owner


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


# Global shapes through control flow and all-to-all (issue 40): two programs on a (data 2,
# model 4) mesh of 8 CPU devices (scripts/make_fixtures.py), GSPMD with NamedSharding and
# with_sharding_constraint. Their oracle's `dots` was read from JAX: every dot_general of the
# jaxpr (a cond's branches included) with its global shapes and the specs its operands and
# result are declared with. documented_cond_sharded's dots sit in a `conditional`'s branch
# computations, the conditional in a 2-trip loop (before: none had global shapes);
# documented_all_to_all's first dot reads an activation XLA resharded with an all-to-all from
# its sequence to its features (before: `f32[512*?,128] x f32[128,192] -> f32[512*?,192]`, the
# second dot none).
COND = FIXTURES / "documented_cond_sharded"
ALL_TO_ALL = FIXTURES / "documented_all_to_all"


def _program(where: Path, module: str, cpu_chip_file: Path) -> tuple[dict[str, Any], Any]:
    """The audit's rows of `module` by name, `_names` our axis name of each declared one, and
    the oracle's `dots`."""
    declared = json.loads((where / "oracle.json").read_text())["dots"]
    report = audit(where, AuditOptions(chip=str(cpu_chip_file)))
    mesh = declared["mesh"]
    assert report.mesh is not None and report.mesh.devices == math.prod(mesh["axes"].values())
    ours = {(a.size, a.stride): a.name for a in report.mesh.axes}
    rows: dict[str, Any] = {r.name: r for r in report.ops if r.module == module}
    rows["_names"] = {n: ours[(mesh["axes"][n], mesh["strides"][n])] for n in mesh["axes"]}
    return rows, declared


def _dots_of(where: Path, module: str) -> list[tuple[str, Instruction, str]]:
    """Every dot of the module, the row it belongs to, and the computation it sits in."""
    parsed = parse_module((where / f"{module}.hlo.txt").read_text())
    owner = {
        inst.called[0]: inst.name
        for comp in parsed.computations
        for inst in comp.instructions
        if inst.opcode == "fusion" and inst.called
    }
    return [
        (owner.get(comp.name, inst.name), inst, comp.name)
        for comp in parsed.computations
        for inst in comp.instructions
        if inst.opcode == "dot"
    ]


def _declared_dot(inst: Instruction, declared: Any) -> dict[str, Any]:
    """The oracle's dot_general whose einsum name the dot's op_name carries."""
    name = (inst.op_name or "").split("/")[-2]
    (found,) = [d for d in declared["dot_generals"] if d["einsum"] == name]
    return found


def test_dots_in_a_conditionals_branches_have_their_declared_global_shapes(
    cpu_chip_file: Path,
) -> None:
    module = "jit_cond_sharded"
    rows, declared = _program(COND, module, cpu_chip_file)
    parsed = parse_module((COND / f"{module}.hlo.txt").read_text())
    (cond,) = [i for c in parsed.computations for i in c.instructions if i.opcode == "conditional"]
    dots = _dots_of(COND, module)
    assert len(dots) == len(declared["dot_generals"]) == 3
    for owner, inst, _ in dots:
        want = _declared_dot(inst, declared)
        # The program puts it in a branch (the jaxpr's cond), and XLA in the conditional's
        # branch computation of that index (through the fusion that holds it).
        assert want["branch"] is not None
        assert _calls(parsed, cond.called[want["branch"]], owner)
        _assert_declared(rows[owner], inst, want, rows["_names"], declared["mesh"])
        assert not any("?" in h for h in rows[owner].hints if "local view" in h)


def _calls(module: Any, computation: str, name: str) -> bool:
    """Whether `computation` holds the instruction `name` (a branch's fusion)."""
    comp = module.computation(computation)
    return comp is not None and any(i.name == name for i in comp.instructions)


def test_dots_after_an_all_to_all_have_their_declared_global_shapes(cpu_chip_file: Path) -> None:
    """The activation [16,64,128] is declared split (data, model, None), then (data, None,
    model): XLA exchanges it with an all-to-all over model. The first projection reads it
    [16*64 merged, 128] with its rows split over data and its features over model. The
    queries and keys [16,64,8,16] go from (data, model, None, None) to (data, None, model,
    None): the scores' dot reads them [b,h,s,k] with the heads split over model."""
    module = "jit_all_to_all"
    rows, declared = _program(ALL_TO_ALL, module, cpu_chip_file)
    text = (ALL_TO_ALL / f"{module}.hlo.txt").read_text()
    assert " all-to-all(" in text
    dots = _dots_of(ALL_TO_ALL, module)
    assert len(dots) == len(declared["dot_generals"]) == 3
    for owner, inst, _ in dots:
        _assert_declared(
            rows[owner], inst, _declared_dot(inst, declared), rows["_names"], declared["mesh"]
        )
        assert not any("?" in h for h in rows[owner].hints if "local view" in h)
    first = next(o for o, d, _ in dots if _declared_dot(d, declared)["einsum"] == "bsd,df->bsf")
    b, s, d = declared["dot_generals"][0]["operands"][0]
    f = declared["dot_generals"][0]["operands"][1][1]
    assert rows[first].global_shapes == [f"f32[{b * s},{d}]", f"f32[{d},{f}]", f"f32[{b * s},{f}]"]
    scores = next(
        o for o, d, _ in dots if _declared_dot(d, declared)["einsum"] == "bshk,bthk->bhst"
    )
    b, s, h, k = declared["dot_generals"][2]["operands"][0]
    assert rows[scores].global_shapes == [
        f"f32[{b},{h},{s},{k}]",
        f"f32[{b},{h},{k},{s}]",
        f"f32[{b},{h},{s},{s}]",
    ]
