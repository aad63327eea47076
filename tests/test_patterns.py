"""Pattern causes (issue 41, contract version 4's actions): unfused attention, materialized
logits and a per-example loop each fire on the committed CPU fixture made for it
(scripts/make_fixtures.py, profiled as JAX's docs show) as its rank-1 action, naming the ops and
shapes the fixture's HLO text holds, and on no other fixture; repeated layers are one action;
every action saves something; a device idle action says where its gaps sit; `diff` of the loop
against its vmap leads with the step and says what the loop's action promised and realized;
a cause this version does not know is kept and diffed. The attention pair: on XLA:CPU the
blocked (flash-style) stand-in for a fused kernel gets no unfused-attention action, and is no
faster a step: that promise is not realized there."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from hlogap import audit, load_report
from hlogap.hlo.text import parse_module
from hlogap.options import AuditOptions
from hlogap.report.compare import compare
from hlogap.report.model import AuditReport
from tests.conftest import FIXTURES, write_cpu_chip
from tests.test_advice import _savings_hold

PATTERNS = ("unfused attention", "materialized logits", "per-example loop")
# Each fixture and the pattern causes it must get (the others must not fire).
EXPECTED = {
    "documented_attention": {"unfused attention"},
    "attention": {"unfused attention"},  # an explicit softmax(QK^T)V: unfused too
    "documented_logits": {"materialized logits"},
    "documented_loop": {"per-example loop"},
    "documented_vmap": set(),
    # XLA:CPU's jax.nn.dot_product_attention is the composed (XLA) implementation: its HLO
    # writes the same [2,4,256,256] scores; unfused still (test_fused_attention_on_cpu_...).
    "documented_attention_fused": {"unfused attention"},
    # The same model, its softmax online over 4 blocks of 64 keys in a lax.scan (flash-style):
    # [2,4,256,64] scores a trip, no [.., 256, 256] one.
    "documented_attention_blocked": set(),
    "documented_logits_chunked": set(),  # [16, 32768] logits a trip of a lax.map: chunked
    "fori": set(),  # a loop over a [32,128] state: a matrix product each trip, no batch walk
    "scan": set(),
    "mlp_train": set(),
    "documented_step": set(),
    "flaws": set(),
}


@cache
def _chip() -> str:
    import tempfile

    return str(write_cpu_chip(Path(tempfile.mkdtemp(prefix="hlogap-patterns-"))))


@cache
def _audit(program: str) -> AuditReport:
    return audit(FIXTURES / program, AuditOptions(chip=_chip()))


def _hlo_lines(program: str) -> dict[str, str]:
    """Each entry instruction's line of the fixture's HLO text, by name."""
    (path,) = (FIXTURES / program).glob("*.hlo.txt")
    return {
        m.group(1): line
        for line in path.read_text().splitlines()
        if (m := re.match(r"\s*(?:ROOT )?%(\S+) = ", line))
    }


@pytest.mark.parametrize("program", sorted(EXPECTED))
def test_each_pattern_fires_on_its_fixture_only(program: str) -> None:
    report = _audit(program)
    assert report.actions is not None
    found = {a.cause for a in report.actions if a.cause in PATTERNS}
    assert found == EXPECTED[program]
    if EXPECTED[program] and program.startswith("documented_"):
        assert report.actions[0].cause in EXPECTED[program]  # the rank-1 action
    _savings_hold(report)


def test_unfused_attention_is_one_action_over_its_layers() -> None:
    report = _audit("documented_attention")
    assert report.actions is not None
    action = report.actions[0]
    assert action.cause == "unfused attention" and action.layers == 3
    lines = _hlo_lines("documented_attention")
    # The QK^T products: fusions writing the [2,4,256,256] scores from a batched dot.
    module = parse_module(next((FIXTURES / "documented_attention").glob("*.hlo.txt")).read_text())
    entry = module.entry_computation
    assert entry is not None
    qk = []
    for inst in entry.instructions:
        called = module.computation(inst.called[0]) if inst.called else None
        dots = [i for i in called.instructions if i.opcode == "dot"] if called else []
        if dots and dots[0].shape.dims == (2, 4, 256, 256):
            qk.append(inst.name)
    assert len(qk) == 3
    names = {o.name for o in action.ops}
    assert set(qk) <= names
    assert all("f32[2,4,256,256]" in lines[name] for name in qk)
    assert "f32[2,4,256,256]" in action.evidence and "3 attention layer(s)" in action.evidence
    assert qk[0] in action.evidence
    assert "dot_product_attention" in action.change
    assert action.step_saving_us is not None and action.step_saving_us > 0


def test_materialized_logits_names_the_logits() -> None:
    report = _audit("documented_logits")
    assert report.actions is not None
    action = report.actions[0]
    assert action.cause == "materialized logits"
    lines = _hlo_lines("documented_logits")
    maker = re.search(
        r"%(\S+) = f32\[128,32768\]\S* fusion\(%h\.1, %w\.1\)", "\n".join(lines.values())
    )
    assert maker is not None
    assert maker.group(1) in {o.name for o in action.ops}
    assert f"{maker.group(1)} writes the logits f32[128,32768]" in action.evidence
    assert "vocab 32,768" in action.evidence
    # Every entry op writing a [128, 32768] tensor is in it (the loss and its gradient's).
    module = parse_module(next((FIXTURES / "documented_logits").glob("*.hlo.txt")).read_text())
    entry = module.entry_computation
    assert entry is not None
    big = {i.name for i in entry.instructions if i.shape.dims == (128, 32768)}
    assert len(big) >= 3 and big <= {o.name for o in action.ops}
    assert "chunk" in action.change


def test_per_example_loop_names_the_loop_and_weights() -> None:
    report = _audit("documented_loop")
    assert report.actions is not None
    action = report.actions[0]
    assert action.cause == "per-example loop"
    lines = _hlo_lines("documented_loop")
    loop = next(n for n, line in lines.items() if " while(" in line)
    assert '"known_trip_count":{"n":"64"}' in lines[loop]
    matvec = next(n for n, line in lines.items() if re.search(r"= f32\[2048,1\]\S* dot\(", line))
    assert {loop, matvec} <= {o.name for o in action.ops}
    assert f"{loop} runs 64 trips" in action.evidence
    assert f"each trip {matvec} multiplies the same weights f32[2048,2048]" in action.evidence
    assert "jax.vmap" in action.change


def _saved(tmp_path: Path, program: str) -> Path:
    path = tmp_path / f"{program}.json"
    command = [sys.executable, "-m", "hlogap", "audit", str(FIXTURES / program)]
    out = subprocess.run(
        [*command, "--chip", _chip(), "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    path.write_text(out.stdout)
    return path


def test_diff_of_the_loop_against_its_vmap(tmp_path: Path) -> None:
    base, new = _saved(tmp_path, "documented_loop"), _saved(tmp_path, "documented_vmap")
    command = [sys.executable, "-m", "hlogap", "diff", str(base), str(new)]
    doc = json.loads(
        subprocess.run([*command, "--format", "json"], capture_output=True, text=True).stdout
    )
    # The steps: each side's steady median, measured from its own report's steps.
    walls = {}
    for side, path in (("base", base), ("new", new)):
        steps = json.loads(path.read_text())["steps"]
        first = json.loads(path.read_text())["summary"]["warmup_steps"]
        walls[side] = statistics.median(s["wall_us"] for s in steps[first:])
    steps = doc["steps"]
    assert steps["base_step_us"] == pytest.approx(walls["base"])
    assert steps["new_step_us"] == pytest.approx(walls["new"])
    assert steps["change"] == pytest.approx((walls["new"] - walls["base"]) / walls["base"])
    assert walls["base"] / walls["new"] > 2  # the vmap is the fix: over 2x faster a step
    realized = doc["actions_realized"]
    base_actions = json.loads(base.read_text())["actions"]
    assert [r["rank"] for r in realized] == [a["rank"] for a in base_actions]
    loop = realized[0]
    assert loop["cause"] == "per-example loop" and loop["ops"] == base_actions[0]["ops"]
    assert loop["promised_step_saving_us"] == base_actions[0]["step_saving_us"]
    # Realized: the loop's ops' time a step, all gone, no more than the step moved; the
    # promise within 2x of it.
    drop = walls["base"] - walls["new"]
    assert 0 < loop["realized_step_saving_us"] <= drop + 1e-6
    ratio = loop["promised_step_saving_us"] / loop["realized_step_saving_us"]
    assert 0.5 <= ratio <= 2.0
    # The text diff leads with the step, then the promise and what came of it.
    text = subprocess.run(command, capture_output=True, text=True).stdout.splitlines()
    assert text[0].startswith("step: ") and "faster" in text[0]
    assert text[1].startswith("  action 1, per-example loop: promised ")


def _pair(tmp_path: Path, flawed: str, fixed: str) -> tuple[Any, Any, dict[str, float]]:
    """`diff`'s JSON of the flawed program against its fix, the flawed report's rank-1 action,
    and each side's steady median step (from its own report's steps)."""
    base, new = _saved(tmp_path, flawed), _saved(tmp_path, fixed)
    command = [sys.executable, "-m", "hlogap", "diff", str(base), str(new), "--format", "json"]
    doc = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    walls = {}
    for side, path in (("base", base), ("new", new)):
        saved = json.loads(path.read_text())
        first = saved["summary"]["warmup_steps"]
        walls[side] = statistics.median(s["wall_us"] for s in saved["steps"][first:])
    assert doc["steps"]["base_step_us"] == pytest.approx(walls["base"])
    assert doc["steps"]["new_step_us"] == pytest.approx(walls["new"])
    return doc, json.loads(base.read_text())["actions"][0], walls


def test_chunked_logits_realize_the_promise(tmp_path: Path) -> None:
    """documented_logits against the same loss over 8 blocks of 16 tokens (a lax.map under
    jax.checkpoint): the chunked step is faster, the materialized-logits promise is within 2x
    of what it realized (its ops' time a step, no more than the step moved), and the chunked
    program's [16, 32768] blocks, made one a trip of a loop holding only the loss's products,
    are no materialized logits."""
    doc, action, walls = _pair(tmp_path, "documented_logits", "documented_logits_chunked")
    assert action["cause"] == "materialized logits"
    realized = doc["actions_realized"][0]
    assert realized["cause"] == "materialized logits"
    assert realized["promised_step_saving_us"] == action["step_saving_us"]
    drop = walls["base"] - walls["new"]
    assert drop > 0
    assert 0 < realized["realized_step_saving_us"] <= drop + 1e-6
    ratio = realized["promised_step_saving_us"] / realized["realized_step_saving_us"]
    assert 0.5 <= ratio <= 2.0
    chunked = _audit("documented_logits_chunked")
    assert not any(a.cause == "materialized logits" for a in chunked.actions or [])
    # The chunked program does hold [16, 32768] logits, inside its loops.
    text = next((FIXTURES / "documented_logits_chunked").glob("*.hlo.txt")).read_text()
    assert "f32[16,32768]" in text and "f32[128,32768]" not in text


def test_fused_attention_on_cpu_is_the_unfused_program(tmp_path: Path) -> None:
    """jax.nn.dot_product_attention on XLA:CPU (implementation None: 'xla', the only one CPU
    has; 'cudnn' is NVIDIA's) lowers to the same composition: each layer's QK^T fusion writes
    the [2,4,256,256] scores (scaled, max-subtracted and exponentiated inside it), reductions
    read them and the PV product multiplies them. XLA:CPU cannot express the fix, so the pair
    cannot check the promise: the cause fires on both (rank 1, the 3 layers), and the 'fixed'
    step realizes none of it."""
    fused = _audit("documented_attention_fused")
    assert fused.actions is not None
    action = fused.actions[0]
    assert action.cause == "unfused attention" and action.layers == 3
    assert "f32[2,4,256,256]" in action.evidence
    lines = _hlo_lines("documented_attention_fused")
    scores = [n for n in (o.name for o in action.ops) if "256,256]" in lines.get(n, "")]
    assert len(scores) >= 3
    doc, promised, _ = _pair(tmp_path, "documented_attention", "documented_attention_fused")
    assert promised["cause"] == "unfused attention"
    realized = doc["actions_realized"][0]
    # No faster: whatever moved is noise, not the promise (a fused kernel's saving).
    assert realized["realized_step_saving_us"] < 0.5 * realized["promised_step_saving_us"]


def _marker_step_us(program: str) -> float:
    """The steady median step of the fixture's trace, as its oracle read it from trace.json
    and the xplane (not hlogap): each step's first op to its last op's end marker, step 0 (the
    compile) left out."""
    oracle = json.loads((FIXTURES / program / "oracle.json").read_text())
    return statistics.median(
        s["device_end_marker_us"] - s["device_start_us"] for s in oracle["trace_steps"][1:]
    )


def test_blocked_attention_gets_no_action_and_realizes_no_promise(tmp_path: Path) -> None:
    """documented_attention_blocked is documented_attention's model (its oracle: allclose to it
    on the traced step's inputs) computed as a flash kernel does, softmax online over blocks of
    keys in a lax.scan: the CPU's stand-in for a fused kernel. It gets no unfused-attention
    action. The promise cannot come true on XLA:CPU, so the 2x check of the other pairs is not
    made here: the block's [2,4,256,64] scores are still written to memory (no on-chip tile
    memory, so no score traffic saved) and its smaller products and loop trips cost more than
    they save; recorded, the blocked step is no faster (docs/actions.md, 'the attention
    pair'). What is checked: diff reports the action's promise and the realization it
    measured, nothing, since the step did not get faster."""
    oracle = json.loads((FIXTURES / "documented_attention_blocked" / "oracle.json").read_text())
    match = oracle["matches_unfused"]
    assert match["allclose"] and match["max_abs_diff"] <= match["atol"]
    blocked = _audit("documented_attention_blocked")
    assert not any(a.cause == "unfused attention" for a in blocked.actions or [])
    # Its scores are a block of keys each, made inside the loop; none is [.., 256, 256].
    lines = _hlo_lines("documented_attention_blocked")
    assert any("f32[2,4,256,64]" in line and " fusion(" in line for line in lines.values())
    assert not any("256,256]" in line for line in lines.values())

    doc, action, walls = _pair(tmp_path, "documented_attention", "documented_attention_blocked")
    assert action["cause"] == "unfused attention" and action["step_saving_us"] > 0
    realized = doc["actions_realized"][0]
    assert realized["cause"] == "unfused attention" and realized["ops"] == action["ops"]
    assert realized["promised_step_saving_us"] == action["step_saving_us"]
    # No faster a step, by the traces themselves and by hlogap's steps.
    assert _marker_step_us("documented_attention_blocked") > _marker_step_us("documented_attention")
    assert walls["new"] > walls["base"]
    # A realization is no more than the step moved: a step no faster realizes nothing.
    assert realized["realized_step_saving_us"] == 0.0
    base, new = (
        tmp_path / "documented_attention.json",
        tmp_path / "documented_attention_blocked.json",
    )
    text = subprocess.run(
        [sys.executable, "-m", "hlogap", "diff", str(base), str(new)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert text[0].startswith("step: ") and "slower" in text[0]
    assert text[1].startswith("  action 1, unfused attention: promised ")
    assert "not realized" in text[1]


def _key_block_loops(step: Any, *args: Any) -> list[str | None]:
    """For each op of the compiled step (in the entry or a loop body) writing [.., 128, k]
    scores of a batched dot (k 64 or more): the loop `_key_block_loop` takes it for (blocked
    attention), or None."""
    from hlogap.advice.causes.attention import _key_block_loop, _scores
    from hlogap.advice.graph import ModuleGraph
    from hlogap.advice.patterns import ModuleOps

    module = parse_module(step.lower(*args).compile().as_text())
    ops = ModuleOps(module, ModuleGraph.of(module), {})
    found: list[str | None] = []
    bodies = {
        i.attrs.get("body", "").lstrip("%")
        for c in module.computations
        for i in c.instructions
        if i.opcode == "while"
    }
    for comp in module.computations:
        if not (comp.is_entry or comp.name in bodies):
            continue  # a fusion's own dot: the op is the fusion that calls it
        for inst in comp.instructions:
            dot = _scores(ops, inst)
            if dot is not None and dot.shape.dims[-2] == 128:
                loop = _key_block_loop(ops, inst, dot)
                found.append(loop.name if loop is not None else None)
    return found


def test_a_key_block_loop_is_told_from_a_layer_loop() -> None:
    """Scores made a block of keys a trip of a loop carrying each row's running max and sum
    (blocked attention) are not unfused; attention written out in a loop over layers (a
    lax.scan over stacked weights, as models scan their layers), forward and backward, is:
    its loops carry activations and gradients, not a per-row statistic."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    batch, heads, seq, head_dim, layers = 2, 2, 128, 16, 3
    q = k = v = jnp.ones((batch, heads, seq, head_dim))

    def blocked(q: Any, k: Any, v: Any) -> Any:
        def one_block(carry: Any, kv: Any) -> Any:
            row_max, row_sum, out = carry
            scores = jnp.einsum("bhqd,bhkd->bhqk", q, kv[0])
            new_max = jnp.maximum(row_max, scores.max(axis=-1))
            p = jnp.exp(scores - new_max[..., None])
            rescale = jnp.exp(row_max - new_max)
            out = out * rescale[..., None] + jnp.einsum("bhqk,bhkd->bhqd", p, kv[1])
            return (new_max, row_sum * rescale + p.sum(axis=-1), out), None

        def by_block(t: Any) -> Any:
            return t.reshape(batch, heads, 2, seq // 2, head_dim).transpose(2, 0, 1, 3, 4)

        rows = (batch, heads, seq)
        start = (jnp.full(rows, -jnp.inf), jnp.zeros(rows), jnp.zeros(q.shape))
        (_, row_sum, out), _ = jax.lax.scan(one_block, start, (by_block(k), by_block(v)))
        return out / row_sum[..., None]

    def layer_loop(w: Any, x: Any) -> Any:
        def layer(x: Any, w: Any) -> Any:  # documented_attention's layer, its output as is
            qkv = (x @ w).reshape(batch, seq, 3, heads, head_dim)
            q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
            scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(jnp.float32(head_dim))
            out = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)
            return x + out.transpose(0, 2, 1, 3).reshape(x.shape), None

        return jnp.sum(jax.lax.scan(layer, x, w)[0])

    found = _key_block_loops(jax.jit(blocked), q, k, v)
    assert found and all(name is not None for name in found)
    width = heads * head_dim
    w, x = jnp.ones((layers, width, 3 * width)) * 0.01, jnp.ones((batch, seq, width))
    for step in (jax.jit(layer_loop), jax.jit(jax.grad(layer_loop))):
        found = _key_block_loops(step, w, x)
        assert found and all(name is None for name in found)


def test_vmap_gets_no_loop_action_and_the_fix_keeps_no_pattern() -> None:
    vmap = _audit("documented_vmap")
    assert not any(a.cause == "per-example loop" for a in vmap.actions or [])


def test_an_unknown_cause_is_kept_and_diffed(tmp_path: Path) -> None:
    path = _saved(tmp_path, "documented_loop")
    doc = json.loads(path.read_text())
    doc["actions"][0]["cause"] = "a cause from a newer hlogap"
    doc["actions"][0]["layers"] = 2
    path.write_text(json.dumps(doc))
    report = load_report(path)
    assert report.actions is not None
    assert report.actions[0].cause == "a cause from a newer hlogap"
    assert report.actions[0].layers == 2
    diff = compare(report, report)
    realized = diff.actions_realized()
    assert realized[0].action.cause == "a cause from a newer hlogap"
    assert realized[0].realized_step_saving_us == pytest.approx(0.0, abs=1e-6)
    out = subprocess.run(
        [sys.executable, "-m", "hlogap", "diff", str(path), str(path), "--format", "json"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["actions_realized"][0]["cause"] == "a cause from a newer hlogap"


def test_device_idle_says_where() -> None:
    report = _audit("flaws")
    idle = [a for a in report.actions or [] if a.cause == "device idle"]
    assert idle
    for action in idle:
        assert action.where == "between programs"  # four programs a step, a host sleep first
        assert action.saving_us > 0 and (action.step_saving_us or 0) > 0  # one device
        assert "between the previous program's last op (" in action.evidence
        assert "dispatch" not in action.change or action.where != "inside an execution"


def _loop_logits(program: str) -> list[str | None]:
    """For each [.., 32768] logits dot inside a while body of the compiled program: the loop
    `_chunk_loop` takes it for (a chunked loss), or None."""
    from hlogap.advice.causes.logits import _chunk_loop
    from hlogap.advice.graph import ModuleGraph
    from hlogap.advice.patterns import ModuleOps, inner_dot

    module = parse_module(program)
    ops = ModuleOps(module, ModuleGraph.of(module), {})
    found: list[str | None] = []
    bodies = {
        i.attrs.get("body", "").lstrip("%")
        for c in module.computations
        for i in c.instructions
        if i.opcode == "while"
    }
    for comp in module.computations:
        if comp.name not in bodies:
            continue
        for inst in comp.instructions:
            dot = inner_dot(module, inst)
            if dot is not None and inst.opcode != "while" and dot.shape.dims[-1:] == (32768,):
                loop = _chunk_loop(ops, inst, 32768)
                found.append(loop.name if loop is not None else None)
    return found


def test_a_chunked_loss_is_told_from_a_microbatch_loop() -> None:
    """Logits made in a loop are a chunk when the loop holds only the loss's products (each
    reads or writes the vocab); a loop over microbatches around a hidden layer and the loss
    holds their logits whole, a microbatch at a time: not a chunk. (Were the hidden layer
    frozen, the gradient's loop would hold only the loss's products: a chunk, as far as the
    program can tell.)"""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    w, w1 = jnp.zeros((64, 32768)), jnp.zeros((64, 64))
    h, labels = jnp.zeros((8, 16, 64)), jnp.zeros((8, 16), dtype=jnp.int32)

    def block_loss(w: Any, h: Any, labels: Any) -> Any:
        logp = jax.nn.log_softmax(h @ w, axis=-1)
        return -jnp.sum(jnp.take_along_axis(logp, labels[:, None], axis=-1))

    def chunked(w: Any, w1: Any, h: Any, labels: Any) -> Any:
        hidden = jnp.tanh(h @ w1)
        return jnp.sum(jax.lax.map(lambda b: block_loss(w, *b), (hidden, labels)))

    def microbatched(w: Any, w1: Any, h: Any, labels: Any) -> Any:
        def body(i: Any, total: Any) -> Any:
            return total + block_loss(w, jnp.tanh(h[i] @ w1), labels[i])

        return jax.lax.fori_loop(0, 8, body, jnp.float32(0))

    # Every weight trained: the microbatch loop's gradient holds the hidden layer's products.
    for fn, chunk in ((chunked, True), (microbatched, False)):
        step = jax.jit(jax.grad(fn, argnums=(0, 1)))
        text = step.lower(w, w1, h, labels).compile().as_text()
        found = _loop_logits(text)
        assert found, fn.__name__
        assert all((name is not None) == chunk for name in found), (fn.__name__, found)
