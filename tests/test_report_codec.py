"""The report's JSON codec (hlogap.report.codec) on the committed golden reports: each read back
gives the rows, steps, actions and summary it was written from; a cause this version does not
know (a newer hlogap's) is kept by load, `diff` and `check`; a corrupt value is named by its
path, in the words saved reports have always been refused with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hlogap.errors import InputError
from hlogap.render.base import RenderOptions, render
from hlogap.report.model import load_json
from tests.conftest import ROOT, run_cli

GOLDEN = sorted((ROOT / "tests" / "golden").glob("audit-*.json"))
SHARDED = ROOT / "tests" / "golden" / "audit-documented_sharded.json"
# The sections a saved report holds (memory's codec is hlogap.memory's own).
SECTIONS = ("summary", "ops", "steps", "groups", "mesh", "actions", "what_if", "memory")


@pytest.mark.parametrize("golden", GOLDEN, ids=lambda p: p.stem)
def test_a_saved_report_reads_back_as_written(golden: Path) -> None:
    written = json.loads(golden.read_text())
    again = json.loads(render(load_json(golden, "report"), "json", RenderOptions()))
    for section in SECTIONS:
        assert again.get(section) == written.get(section), section


def _saved(tmp_path: Path, change: dict[str, object], name: str = "r.json") -> Path:
    data = json.loads(SHARDED.read_text())
    for where, value in change.items():
        *path, last = where.split(".")
        place = data
        for key in path:
            place = place[int(key)] if isinstance(place, list) else place[key]
        if value is KeyError:
            del place[last]
        else:
            place[last] = value
    saved = tmp_path / name
    saved.write_text(json.dumps(data))
    return saved


def test_a_newer_hlogap_s_cause_is_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    newer = "a cause from a newer hlogap"
    saved = _saved(tmp_path, {"actions.0.cause": newer})
    loaded = load_json(saved, "report")
    assert loaded.actions is not None and loaded.actions[0].cause == newer
    code, out, err = run_cli(["diff", str(saved), str(saved), "-f", "json"], capsys)
    assert code == 0, err
    assert json.loads(out)["actions_realized"][0]["cause"] == newer
    code, out, err = run_cli(["check", str(saved), "--baseline", str(saved), "-f", "json"], capsys)
    assert code == 0, err
    assert json.loads(out)["actions_realized"][0]["cause"] == newer


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"ops.0.flops": "x"}, "ops[0].flops is 'x', not a number"),
        ({"ops.0.bytes": -1}, "ops[0].bytes is -1, not a finite number >= 0"),
        ({"ops.0.module": KeyError}, "missing key 'ops[0].module'"),
        ({"ops.0.hints": [1]}, "ops[0].hints is not a list of strings"),
        ({"ops.0.counters": {"MXU": "x"}}, "ops[0].counters.MXU is 'x', not a number"),
        ({"ops.0.sharding": {"x": 1.5}}, "ops[0].sharding is not an object of axis sizes"),
        ({"ops.0.estimated": 1}, "ops[0].estimated is 1, not true or false"),
        ({"ops.0.bound_by": "luck"}, "ops[0].bound_by is 'luck', not one of ("),
        ({"steps.0.source": "guess"}, "steps[0].source is 'guess'"),
        ({"steps.0.wall_us": KeyError}, "missing key 'steps[0].wall_us'"),
        ({"steps.0.per_device": [{}]}, "missing key 'device'"),
        ({"actions.0.layers": 0}, "actions[0].layers is 0, not a count of 1 or more"),
        ({"actions.0.frame": "lunar"}, "actions[0]: cause 'dtype' or its frame is not known"),
        ({"actions.0.ops": None}, "actions[0] is not an action with an 'ops' list"),
        ({"summary.outside_steps": {"warmup_us": -2}}, "summary.outside_steps.warmup_us is -2"),
    ],
)
def test_a_corrupt_value_is_named(change: dict[str, object], message: str, tmp_path: Path) -> None:
    with pytest.raises(InputError) as refused:
        load_json(_saved(tmp_path, change), "baseline")
    assert "is a corrupt hlogap report: " + message in str(refused.value)
