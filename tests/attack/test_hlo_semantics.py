"""Class 7, HLO semantics: valid syntax, impossible meaning (zero strides and tiles, empty
replica groups, short permutations, dims out of range, fusions that call themselves, deep call
chains). The cost model, bounds and hints never raise: such an op is `unmodeled` with the
reason, and no count is negative or not finite. Mutants are generated from the committed
fixtures' optimized HLO; HLOGAP_ATTACK_CASES sets the budget (default 1500, ~15 s)."""

from __future__ import annotations

import math
import os
import random
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from hlogap.bounds.hints import hints_for
from hlogap.bounds.roofline import bound_op
from hlogap.chips import load_chip
from hlogap.cost import cost_computation, cost_module, executions_per_run
from hlogap.hlo.text import HloParseError, parse_module
from tests.attack.harness import FIXTURES, ROOT

CASES = int(os.environ.get("HLOGAP_ATTACK_CASES", "1500"))
TEXTS = [p.read_text() for p in sorted(FIXTURES.glob("*/*.hlo.txt"))] + [
    (ROOT / "tests" / "hlo" / "command_buffer.hlo.txt").read_text()
]

Mutation = tuple[str, Callable[[random.Random, re.Match[str]], str]]
MUTATIONS: list[Mutation] = [
    (r"\[(\d+)", lambda r, m: "[" + r.choice(["0", "1", "99999999999", "4"])),
    (r"T\((\d+),(\d+)\)", lambda r, m: r.choice(["T(0,128)", "T(8,0)", "T(8)"])),
    (
        r"replica_groups=\{[^}]*\}\}",
        lambda r, m: r.choice(["replica_groups={}", "replica_groups={{}}"]),
    ),
    (
        r"dimensions=\{[\d,]*\}",
        lambda r, m: r.choice(["dimensions={}", "dimensions={0}", "dimensions={9,9}"]),
    ),
    (r"stride=[\dx]+", lambda r, m: r.choice(["stride=0x0", "stride=0", "stride=1x0"])),
    (r"size=[\dx]+", lambda r, m: r.choice(["size=0", "size=100000000", "size=3x0"])),
    (r"lhs_dilate=[\dx]+|rhs_dilate=[\dx]+", lambda r, m: m.group(0).split("=")[0] + "=0"),
    (r"(lhs|rhs)_contracting_dims=\{\d+\}", lambda r, m: f"{m.group(1)}_contracting_dims={{7}}"),
    (r"index=(\d+)", lambda r, m: "index=" + r.choice(["9", "0"])),
    (r"calls=%([\w.\-]+)", lambda r, m: "calls=%" + r.choice(["nonexistent", "main"])),
    (r"to_apply=%([\w.\-]+)", lambda r, m: "to_apply=%" + r.choice(["nonexistent", "main"])),
    (r"feature_group_count=(\d+)", lambda r, m: "feature_group_count=" + r.choice(["0", "1000"])),
    (r"slice=\{\[(\d+):(\d+)\]", lambda r, m: r.choice(["slice={[5:2]", "slice={[0:999999]"])),
    (r"fft_length=\{[\d,]*\}", lambda r, m: r.choice(["fft_length={0}", "fft_length={}"])),
    (r'"n":"\d+"', lambda r, m: r.choice(['"n":"0"', '"n":"-5"', '"n":"99999999999999"'])),
    (r"dim_labels=\w+_\w+->\w+", lambda r, m: "dim_labels=b01f_01io->bf01"),
]


def _mutant(seed: int) -> str:
    rng = random.Random(seed)
    text = rng.choice(TEXTS)
    for _ in range(rng.randint(1, 3)):
        pattern, replace = rng.choice(MUTATIONS)
        found = list(re.finditer(pattern, text))
        if found:
            m = rng.choice(found)
            text = text[: m.start()] + replace(rng, m) + text[m.end() :]
    return text


def test_no_mutant_breaks_the_cost_model() -> None:
    chip = load_chip("h100-sxm")
    costed = 0
    for seed in range(CASES):
        try:
            module = parse_module(_mutant(seed))
        except (HloParseError, ValueError):
            continue  # refused at parse: exit 2 from `bound`, unmodeled in a trace
        costed += 1
        costs = cost_module(module)
        executions_per_run(module)
        if module.entry_computation is not None:
            cost_computation(module.entry_computation, module)
        for comp in module.computations:
            for inst in comp.instructions:
                cost = costs.get(inst.name)
                if cost is None:
                    continue
                numbers = (cost.flops, cost.hbm_bytes, cost.comm_bytes, cost.transcendentals)
                assert all(math.isfinite(n) and n >= 0 for n in numbers), (seed, inst.name)
                bound = bound_op(cost, chip)
                assert math.isfinite(bound.lower_s) and bound.lower_s >= 0, (seed, inst.name)
                hints_for(inst, cost, bound, chip, None, measured_us=1.0)
    assert costed > CASES // 2  # the mutants mostly parse: the cost model saw them


def _self_calling_fusion() -> str:
    return """HloModule cycle
%f (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %g = f32[4]{0} fusion(%p), kind=kLoop, calls=%f
}
ENTRY %main (a: f32[4]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  ROOT %x = f32[4]{0} fusion(%a), kind=kLoop, calls=%f
}
"""


def _call_chain(depth: int) -> str:
    parts = ["HloModule deep"]
    for i in range(depth):
        body = (
            f"  ROOT %r{i} = f32[4]{{0}} call(%p{i}), to_apply=%c{i + 1}"
            if i + 1 < depth
            else f"  ROOT %r{i} = f32[4]{{0}} add(%p{i}, %p{i})"
        )
        parts.append(
            f"%c{i} (p{i}: f32[4]) -> f32[4] {{\n  %p{i} = f32[4]{{0}} parameter(0)\n{body}\n}}"
        )
    parts.append(
        "ENTRY %main (a: f32[4]) -> f32[4] {\n  %a = f32[4]{0} parameter(0)\n"
        "  ROOT %x = f32[4]{0} call(%a), to_apply=%c0\n}"
    )
    return "\n".join(parts)


@pytest.mark.parametrize(
    "text", [_self_calling_fusion(), _call_chain(3000)], ids=["cycle", "3000 deep"]
)
def test_cycles_and_deep_chains_are_unmodeled(text: str) -> None:
    module = parse_module(text)
    assert module.entry_computation is not None
    total = cost_computation(module.entry_computation, module)
    costs = cost_module(module)
    assert total.unmodeled or all(c.unmodeled or c.flops >= 0 for c in costs.values())
    executions_per_run(module)


def test_the_suite_reads_the_committed_hlo(tmp_path: Path) -> None:
    assert len(TEXTS) >= 20 and all(t.startswith("HloModule") for t in TEXTS)
