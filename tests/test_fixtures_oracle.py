"""The committed CPU fixtures (scripts/make_fixtures.py) agree with their own oracles.

These read the traces with the generated ``xplane_pb2`` only, so they check the corpus itself (and
document what XLA:CPU traces hold), independently of the rest of hlogap.
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hlogap.proto import xplane_pb2

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
SAMPLE = ROOT / "hlogap" / "data" / "sample"
PROGRAMS = sorted(p.parent.name for p in FIXTURES.glob("*/oracle.json"))
EXPECTED = {
    "mlp",
    "mlp_rerun",
    "mlp_shifted",
    "mlp_train",
    "conv",
    "conv3d",
    "matmul_bf16",
    "matmul_int8",
    "attention",
    "reductions",
    "scan",
    "fori",
    "gather_scatter",
    "layernorm",
    "sharded_train",
    "fft_1d",
    "fft_2d",
    "cholesky",
    "solve",
    "qr",
    "eigh",
    "svd",
    "top_k",
    "sort_multi",
    "segment_sum",
    "point_scatter",
}
COLLECTIVES = {"all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all"}
INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = .*?\s([a-z][a-z0-9\-]*)\(", re.M)


@dataclass(frozen=True)
class Thunk:
    """One per-HLO-op event on the ``/host:CPU`` plane."""

    line: str
    name: str
    op: str
    module: str
    program_id: int
    run_id: int
    device: int
    start_ps: int
    duration_ps: int

    @property
    def end_ps(self) -> int:
        return self.start_ps + self.duration_ps


def _stat_value(stat: Any, names: dict[int, str]) -> Any:
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    value = getattr(stat, kind)
    return names.get(value, "") if kind == "ref_value" else value


def _stats(stats: Any, names: dict[int, str]) -> dict[str, Any]:
    return {names.get(s.metadata_id, ""): _stat_value(s, names) for s in stats}


@functools.cache
def oracle(program: str) -> dict[str, Any]:
    return json.loads((FIXTURES / program / "oracle.json").read_text())


@functools.cache
def space(program: str) -> Any:
    xs = xplane_pb2.XSpace()
    xs.ParseFromString((FIXTURES / program / oracle(program)["xplane"]).read_bytes())
    return xs


def plane(program: str, name: str) -> Any:
    (found,) = [p for p in space(program).planes if p.name == name]
    return found


@functools.cache
def thunks(program: str) -> tuple[Thunk, ...]:
    cpu = plane(program, "/host:CPU")
    names = {k: v.name for k, v in cpu.stat_metadata.items()}
    out = []
    for line in cpu.lines:
        for event in line.events:
            st = _stats(event.stats, names)
            if "hlo_op" not in st:
                continue
            out.append(
                Thunk(
                    line=line.name,
                    name=cpu.event_metadata[event.metadata_id].name,
                    op=st["hlo_op"],
                    module=st["hlo_module"],
                    program_id=st["program_id"],
                    run_id=st["run_id"],
                    device=st["device_ordinal"],
                    start_ps=line.timestamp_ns * 1000 + event.offset_ps,
                    duration_ps=event.duration_ps,
                )
            )
    return tuple(out)


def other_event_names(program: str) -> Counter[str]:
    cpu = plane(program, "/host:CPU")
    names = {k: v.name for k, v in cpu.stat_metadata.items()}
    return Counter(
        cpu.event_metadata[e.metadata_id].name
        for line in cpu.lines
        for e in line.events
        if "hlo_op" not in _stats(e.stats, names)
    )


def hlo_instructions(program: str, module: str) -> dict[str, str]:
    """Instruction name -> opcode, from the committed ``<module>.hlo.txt``."""
    text = (FIXTURES / program / f"{module}.hlo.txt").read_text()
    return dict(INSTRUCTION.findall(text))


def test_corpus_is_complete() -> None:
    assert set(PROGRAMS) >= EXPECTED


def test_sizes() -> None:
    total = sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file())
    assert total < 8 * 1024 * 1024
    for pb in FIXTURES.glob("*/plugins/profile/*/*.xplane.pb"):
        assert pb.stat().st_size < 512 * 1024, pb


@pytest.mark.parametrize("program", PROGRAMS)
def test_layout(program: str) -> None:
    base = FIXTURES / program
    runs = list((base / "plugins" / "profile").iterdir())
    assert len(runs) == 1 and runs[0].is_dir()
    files = sorted(p.name for p in runs[0].iterdir())
    assert len(files) == 1 and files[0].endswith(".xplane.pb"), files
    assert not list(base.rglob("*.trace.json.gz"))
    assert (base / oracle(program)["xplane"]).is_file()
    assert list(space(program).hostnames) == [files[0].removesuffix(".xplane.pb")]


@pytest.mark.parametrize("program", PROGRAMS)
def test_oracle_schema(program: str) -> None:
    o = oracle(program)
    assert o["program"] == program
    # The documented pattern's fixtures run 6 steps, step 0 compiling inside the trace; the
    # gate's 10 (gate_short 3).
    documented = 3 if program == "gate_short" else 10 if program.startswith("gate_") else 6
    assert o["iterations"] == (documented if "pattern" in o else 3)
    assert o["jax_version"]
    assert o["modules"]
    for m in o["modules"]:
        costs = m["cost_analysis"]
        assert costs["flops"] >= 0 and costs["bytes accessed"] > 0
        assert all(isinstance(v, float) for v in costs.values())
        assert not [k for k in costs if k.startswith("utilization")]
        assert isinstance(m["program_id"], int)
        assert m["executions"] == o["iterations"]
        header = (FIXTURES / program / m["hlo_text"]).read_text().splitlines()[0]
        assert header.startswith(f"HloModule {m['module']}, ")


@pytest.mark.parametrize("program", PROGRAMS)
def test_metadata_plane_holds_exactly_the_oracle_modules(program: str) -> None:
    meta = plane(program, "/host:metadata")
    names = {k: v.name for k, v in meta.stat_metadata.items()}
    seen = {}
    for md in meta.event_metadata.values():
        st = _stats(md.stats, names)
        assert st["Hlo Proto"], md.name
        seen[md.name] = st["program_id"]
    modules = oracle(program)["modules"]
    want = {f"{m['module']}({m['program_id']})": m["program_id"] for m in modules}
    assert seen == want


@pytest.mark.parametrize("program", PROGRAMS)
def test_oracle_modules_run_in_trace(program: str) -> None:
    o = oracle(program)
    events = thunks(program)
    assert {t.module for t in events} == {m["module"] for m in o["modules"]}
    for m in o["modules"]:
        mine = [t for t in events if t.module == m["module"]]
        assert {t.program_id for t in mine} == {m["program_id"]}
        assert {t.device for t in mine} == set(range(o["devices"]))
        # One execution = one run_id, shared by every device of that execution.
        runs: dict[int, set[int]] = defaultdict(set)
        for t in mine:
            runs[t.device].add(t.run_id)
        assert all(len(r) == m["executions"] for r in runs.values()), runs
        assert len({t.run_id for t in mine}) == m["executions"]
        # Every thunk is an instruction of the optimized HLO, named verbatim.
        assert {t.op for t in mine} <= set(hlo_instructions(program, m["module"]))
        assert all(t.name == t.op for t in mine)


@pytest.mark.parametrize("program", PROGRAMS)
def test_marker_events_carry_no_hlo_op(program: str) -> None:
    others = other_event_names(program)
    assert any(n.startswith("end: ") for n in others)
    assert any(n.startswith("ThreadpoolListener::") for n in others)
    ops = {t.op for t in thunks(program)}
    assert not any(n.startswith("end: ") and n[5:] not in ops for n in others)


def test_sharded_train_has_eight_devices_and_collectives() -> None:
    o = oracle("sharded_train")
    assert o["devices"] == 8
    assert "--xla_force_host_platform_device_count=8" in o["xla_flags"]
    events = thunks("sharded_train")
    assert {t.device for t in events} == set(range(8))
    # All devices share the single /host:CPU plane.
    assert [p.name for p in space("sharded_train").planes].count("/host:CPU") == 1
    opcodes: set[str] = set()
    for m in o["modules"]:
        instructions = hlo_instructions("sharded_train", m["module"])
        for name, opcode in instructions.items():
            if opcode in COLLECTIVES:
                opcodes.add(opcode)
                devices = {t.device for t in events if t.module == m["module"] and t.op == name}
                assert devices == set(range(8)), (name, opcode)
    assert opcodes == COLLECTIVES
    assert other_event_names("sharded_train")["Rendezvous"] > 0


def test_rerun_is_the_same_program() -> None:
    a, b = oracle("mlp"), oracle("mlp_rerun")
    assert [m["module"] for m in a["modules"]] == [m["module"] for m in b["modules"]] == ["jit_mlp"]
    assert a["modules"][0]["cost_analysis"] == b["modules"][0]["cost_analysis"]
    assert {t.op for t in thunks("mlp")} == {t.op for t in thunks("mlp_rerun")}


def test_shifted_mlp_renumbers_fusions() -> None:
    (base,) = oracle("mlp")["modules"]
    (shifted,) = oracle("mlp_shifted")["modules"]
    assert base["module"] == shifted["module"] == "jit_mlp"
    # The extra op is a 16x16x16 f32 matmul: 2 * 16**3 more FLOPs.
    assert shifted["cost_analysis"]["flops"] - base["cost_analysis"]["flops"] == 2 * 16**3
    base_ops = {t.op for t in thunks("mlp")}
    shifted_ops = {t.op for t in thunks("mlp_shifted")}
    assert base_ops < shifted_ops
    assert "ynn_fusion.2" in shifted_ops - base_ops


@pytest.mark.parametrize("program", ["scan", "fori"])
def test_while_loops_nest_their_body(program: str) -> None:
    (m,) = oracle(program)["modules"]
    opcodes = hlo_instructions(program, m["module"])
    events = thunks(program)
    loops = [t for t in events if opcodes[t.op] == "while"]
    assert len(loops) == m["executions"]
    counts = Counter(t.op for t in events)
    body_ops = {op for op, n in counts.items() if n == 16 * m["executions"]}
    assert body_ops
    for t in events:
        if t.op in body_ops:
            (loop,) = [w for w in loops if w.run_id == t.run_id]
            assert loop.start_ps <= t.start_ps and t.end_ps <= loop.end_ps


def test_dumps() -> None:
    dumped = [p for p in PROGRAMS if (FIXTURES / p / "dump").is_dir()]
    assert len(dumped) >= 3 and "sharded_train" in dumped
    for program in dumped:
        files = [p.name for p in (FIXTURES / program / "dump").iterdir()]
        assert all(f.endswith("after_optimizations.txt") for f in files)
        for m in oracle(program)["modules"]:
            assert any(f".{m['module']}." in f for f in files), (program, m["module"])


def test_sample_is_a_fixture_copy() -> None:
    (sample,) = SAMPLE.glob("plugins/profile/*/*.xplane.pb")
    assert sample.stat().st_size < 300 * 1024
    copies = [
        p
        for p in FIXTURES.glob("*/plugins/profile/*/*.xplane.pb")
        if p.read_bytes() == sample.read_bytes()
    ]
    assert copies
    xs = xplane_pb2.XSpace()
    xs.ParseFromString(sample.read_bytes())
    assert "/host:CPU" in [p.name for p in xs.planes]
