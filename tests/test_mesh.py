"""The device mesh, the axes of collectives and the global shapes of matmuls (hlogap.hlo.mesh),
against the programs' own declared shardings and the seeds' worked examples."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hlogap import audit, load_report
from hlogap.hlo.mesh import Mesh, module_mesh
from hlogap.hlo.text import parse_module
from hlogap.options import AuditOptions
from hlogap.rows.groups import NOT_ON_AXES
from tests.conftest import AMD_FILES, FIXTURES, ROOT, SHARED

V6E = SHARED / "tpu-v6e-offload" / "tpu_inference_2.xplane.pb"
HLO = ROOT / "tests" / "hlo"

# Chapter 9's worked problem 1, as the instructions it quotes (tests/hlo/mesh_problem_1.hlo):
# two matmuls, the first `bf16[8192] * bf16[4096,8192] -> bf16[4096]`, then an all-reduce over
# `replica_groups={{0,16,32,...,112},...}` on 128 devices.
PROBLEM_1 = (HLO / "mesh_problem_1.hlo").read_text()
# Chapter 9's FFW block (tests/hlo/mesh_ffw.hlo): the up-projection
# `bf16[8,1024,8192] x bf16[8192,16384]`, "the local view of a 4-way DP, 2-way MP sharded
# matmul", with the parameter shardings JAX writes for a (data 4, model 2) mesh:
# x P('data', None, None), W_in P(None, 'model').
FFW = (HLO / "mesh_ffw.hlo").read_text()


def test_problem_1_reads_eight_way_model_parallelism() -> None:
    found = module_mesh(parse_module(PROBLEM_1))
    assert found is not None
    # The all-reduce's groups are 8 devices 16 apart: an 8-way axis of stride 16.
    axes = {a.name: (a.size, a.stride) for a in found.mesh.axes}
    (axis,) = found.collective_axes["all-reduce"]
    assert axes[axis] == (8, 16)
    assert found.mesh.devices == 128
    # The all-reduce sums partial products: the second matmul's contracting dim (f) is split 8
    # ways, and so is the first matmul's output f. The first matmul's contracting dim (8192) is
    # not split: partial sums over an axis must be summed over it before the program returns,
    # the one collective its result reaches sums over that 8-way axis, and that axis already
    # splits W's other dim (f). So W is really [32768, 8192], as the chapter says, with no `?`
    # (the chapter's batch of 8 is in none of the quoted instructions).
    first = found.global_views["fusion.1"]
    assert first.shapes == ("bf16[32768,8192]", "bf16[8192]", "bf16[32768]")
    assert first.sharding == {axis: 8} and first.complete
    # The second matmul's output dim (8192) is one the program does not say: its result may be
    # returned split over the other axis (16-way) without any collective. It stays `?`.
    second = found.global_views["fusion.2"]
    assert second.shapes == ("bf16[8192*?,32768]", "bf16[32768]", "bf16[8192*?]")


def test_the_ffw_up_projection_is_its_global_matmul() -> None:
    found = module_mesh(parse_module(FFW))
    assert found is not None
    assert [(a.size, a.stride) for a in found.mesh.axes] == [(4, 2), (2, 1)]
    view = found.global_views["up"]
    assert view.shapes == ("bf16[32,1024,8192]", "bf16[8192,32768]", "bf16[32,1024,32768]")
    assert view.complete and view.sharding == {"axis_0": 4, "axis_1": 2}
    assert "global bf16[32,1024,8192] x bf16[8192,32768]" in view.describe()


# The program's own declared mesh and shardings, from JAX in a child with 8 CPU devices.
_DECLARED = """
import json
from scripts.make_fixtures import build_sharded_train
(train_step, (params, x, y)), (exchange, (z,)) = build_sharded_train()
mesh = params[0].sharding.mesh
print(json.dumps({
    "axes": {name: int(size) for name, size in mesh.shape.items()},
    "device_ids": mesh.device_ids.tolist(),
    "inputs": [
        {"shape": list(a.shape), "spec": [s if s is None or isinstance(s, str) else list(s)
                                          for s in a.sharding.spec]}
        for a in [*params, x, y]
    ],
}))
"""


@pytest.fixture(scope="module")
def declared() -> dict[str, object]:
    pytest.importorskip("jax")
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", _DECLARED], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, object] = json.loads(done.stdout)
    return result


def _stride(device_ids: list[list[int]], axis: int) -> int:
    """The device-id distance between neighbours along a declared mesh axis."""
    first = device_ids[0][0]
    step = device_ids[1][0] if axis == 0 else device_ids[0][1]
    return step - first


def test_the_mesh_and_global_shapes_are_what_the_program_declared(
    declared: dict[str, object], cpu_chip_file: Path
) -> None:
    report = audit(FIXTURES / "sharded_train", AuditOptions(chip=str(cpu_chip_file)))
    mesh = report.mesh
    assert mesh is not None and mesh.devices == 8
    sizes = declared["axes"]
    ids = declared["device_ids"]
    assert isinstance(sizes, dict) and isinstance(ids, list)
    # Each declared axis (name -> size) is one of ours with that size and stride.
    ours = {(a.size, a.stride): a.name for a in mesh.axes}
    name_of = {name: ours[(size, _stride(ids, k))] for k, (name, size) in enumerate(sizes.items())}
    assert len(set(name_of.values())) == len(sizes) == len(mesh.axes)
    # The first matmul, x @ w1: global x [64,256] and w1 [256,512] as declared, split as
    # declared (x by data, w1 by data and model).
    inputs = declared["inputs"]
    assert isinstance(inputs, list)
    w1, x = inputs[0], inputs[2]
    expected = [f"f32[{','.join(map(str, t['shape']))}]" for t in (x, w1)]
    rows = [r for r in report.ops if r.global_shapes and r.global_shapes[:2] == expected]
    assert rows, [r.global_shapes for r in report.ops if r.global_shapes]
    row = rows[0]
    assert row.global_shapes is not None and row.global_shapes[2] == "f32[64,512]"
    assert row.sharding == {name_of["data"]: 4, name_of["model"]: 2}
    assert any("local view of a matmul sharded" in h for h in row.hints)
    # Every global dim hlogap states (no `?`) divides into a declared array's dims or is a
    # matmul result's: none is a guess.
    declared_sizes = {d for t in inputs for d in t["shape"]} | {512}
    for r in report.ops:
        for shape in r.global_shapes or []:
            dims = shape[shape.index("[") + 1 : -1].split(",")
            assert all(d.endswith("*?") or int(d) in declared_sizes for d in dims), shape
    # The collectives of the shard_map program run over the axes its code names.
    want = {
        "ppermute": "data",
        "all_to_all": "model",
        "reduce_scatter": "data",
        "all_gather": "data",
        "psum_invariant": "model",
    }
    checked = 0
    for r in report.ops:
        if r.module != "jit_ring_exchange" or r.mesh_axes is None:
            continue
        op = r.op_name.rsplit("/", 1)[-1]
        if op in want:
            assert r.mesh_axes == [name_of[want[op]]], (r.name, r.op_name, r.mesh_axes)
            checked += 1
    assert checked == 5
    # The gradient all-reduce of the train step sums over the data axis.
    grads = next(r for r in report.ops if r.name == "all-reduce.4")
    assert grads.mesh_axes == [name_of["data"]]


def test_mesh_header_group_by_axis_and_readback(cpu_chip_file: Path, tmp_path: Path) -> None:
    report = audit(
        FIXTURES / "sharded_train", AuditOptions(chip=str(cpu_chip_file), group_by="axis")
    )
    assert report.groups is not None
    names = {g.name for g in report.groups}
    assert NOT_ON_AXES in names and "axis_0" in names
    axis_0 = next(g for g in report.groups if g.name == "axis_0")
    ops = [r for r in report.ops if r.mesh_axes == ["axis_0"]]
    assert axis_0.measured_us == pytest.approx(sum(r.measured_us for r in ops))
    sent = sum(r.comm_bytes * r.occurrences for r in ops)
    assert axis_0.bus_bw == pytest.approx(sent / (axis_0.measured_us / 1e6))
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps(report.to_dict(0)))
    loaded = load_report(saved)
    assert loaded.mesh == report.mesh
    assert [r.global_shapes for r in loaded.ops] == [r.global_shapes for r in report.ops]
    with pytest.raises(ValueError):
        Mesh.from_dict({"axes": [{"name": "x"}]})
    command = [sys.executable, "-m", "hlogap", "audit", str(FIXTURES / "sharded_train")]
    out = subprocess.run(
        [*command, "--top", "1", "--chip", str(cpu_chip_file)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "mesh: 8 devices = axis_0 4 x axis_1 2 (from 5 shardings and" in out.stdout


def test_real_profiles_say_their_mesh() -> None:
    if not V6E.is_file() or not AMD_FILES["mi300x"].is_file():
        pytest.skip("../shared fixtures absent (../shared not beside the project)")
    tpu = audit(V6E)
    # The psum module's all-reduce: 8 devices of its device groups, over one named axis.
    assert tpu.mesh is not None and tpu.mesh.module == "jit__psum"
    # The psum ran before the steps (outside the steady frame): its rows are in --all-steps.
    every = audit(V6E, AuditOptions(all_steps=True)).ops
    collectives = [r for r in every if r.category.startswith("all-") or "all-reduce" in r.name]
    assert collectives and all(r.mesh_axes for r in collectives)
    # Its groups span 8 device ids; this host's profile holds 4 devices: said, not hidden.
    from hlogap.render.text import mesh_lines

    assert mesh_lines(tpu)[0].endswith(f"; this profile holds {tpu.devices} of them")
    # The MI300X conv runs data parallel: its input's batch is split over the 8 GPUs (the one
    # sharding its module keeps), and it has no collective.
    gpu = audit(AMD_FILES["mi300x"])
    assert gpu.mesh is not None and gpu.mesh.module == "jit_forward_3d_conv"
    assert [(a.size, a.stride) for a in gpu.mesh.axes] == [(8, 1)]
    assert (gpu.mesh.shardings, gpu.mesh.collectives) == (1, 0)
    # Its global shapes: the input's local batch of 1, split 8 ways, is folded into the next dims
    # by a bitcast ([1,32,60,104,16] -> [199680,16]), transposed, and unfolded into the conv's
    # [1,16,32,60,104]: the split goes back to the batch (the one dim of size 1), not to the
    # depth (which would read [1,16,256,60,104]).
    (conv,) = [r for r in gpu.ops if r.global_shapes]
    assert conv.global_shapes == [
        "bf16[8,16,32,60,104]",
        "bf16[5120,16,1,2,2]",
        "bf16[8,5120,34,31,53]",
    ]
    out = subprocess.run(
        [sys.executable, "-m", "hlogap", "audit", str(AMD_FILES["mi300x"]), "--top", "1"],
        capture_output=True,
        text=True,
    )
    assert "mesh: 8 devices = axis_0 8 (from 1 sharding of jit_forward_3d_conv)" in out.stdout


def test_each_axis_says_how_long_its_collectives_ran_alone(cpu_chip_file: Path) -> None:
    """Per axis group: the device time its collectives ran with nothing beside them (each
    axis's collectives shrunk to nothing in the step pass). XLA:CPU runs one op at a time per
    device, so every collective runs alone: the axes' times add up to the steps' own exposed
    collective time, and each is its ops' measured time within the steps."""
    report = audit(
        FIXTURES / "sharded_train", AuditOptions(chip=str(cpu_chip_file), group_by="axis")
    )
    assert report.groups is not None and report.exposed_by_axis is not None
    axes = [g for g in report.groups if g.name != NOT_ON_AXES]
    assert axes and all(g.exposed_us is not None for g in axes)
    for g in axes:
        assert 0 < (g.exposed_us or 0.0) <= g.measured_us * (1 + 1e-9)
    steps_exposed = sum(s.exposed_comm_us for s in report.steps)
    assert sum(g.exposed_us or 0.0 for g in axes) == pytest.approx(steps_exposed, rel=1e-6)
