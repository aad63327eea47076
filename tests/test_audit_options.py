"""`hlogap.audit(path, AuditOptions(...))`: one typed options object, checked before anything is
read; the stages a command needs and no more; the step pass's scenarios read by name."""

from __future__ import annotations

from pathlib import Path

import pytest

import hlogap
from hlogap.errors import InputError, UsageError
from hlogap.options import AuditOptions
from tests.conftest import FIXTURES, run_cli, write_cpu_chip


@pytest.mark.parametrize(
    ("options", "error", "says"),
    [
        (AuditOptions(sort="size"), UsageError, "unknown sort key 'size'"),
        (AuditOptions(group_by="color"), UsageError, "unknown --group-by 'color'"),
        (AuditOptions(group_by="scope", depth=0), UsageError, "--depth must be at least 1"),
        (AuditOptions(model_flops=float("nan")), UsageError, "--model-flops must be a positive"),
        (AuditOptions(module="(unclosed"), UsageError, "bad --module regex"),
        (AuditOptions(hlo_dump="/nonexistent/dump"), InputError, "--hlo-dump is not a directory"),
    ],
)
def test_options_are_checked_before_the_profile_is_read(
    options: AuditOptions, error: type[Exception], says: str, tmp_path: Path
) -> None:
    # The path does not exist: a bad option is what fails, before the profile is looked for.
    with pytest.raises(error, match=says.replace("(", r"\(")):
        hlogap.audit(tmp_path / "no-such-profile", options)


def test_options_are_frozen_and_cross_check_implies_every_step() -> None:
    options = AuditOptions(cross_check=True)
    with pytest.raises(AttributeError, match="immutable"):
        options.all_steps = True  # type: ignore[misc]
    assert options.checked().all_steps and not options.all_steps


def test_the_memory_command_runs_no_advice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import hlogap.advice.actions as actions

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the advice stage ran for `hlogap memory`")

    chip = write_cpu_chip(tmp_path)
    monkeypatch.setattr(actions, "findings", refuse)
    code, out, err = run_cli(["memory", str(FIXTURES / "mlp_train"), "--chip", str(chip)], capsys)
    assert code == 0, err
    assert "static peak" in out


def test_what_if_and_axis_scenarios_are_read_by_name(tmp_path: Path) -> None:
    # The sharded step's collectives run on a mesh axis, and a what-if chip asks for a ceiling:
    # each scenario's saving lands on its own figure whatever their number or order.
    chip = str(write_cpu_chip(tmp_path))
    report = hlogap.audit(
        FIXTURES / "sharded_train", AuditOptions(chip=chip, what_if=("h100-sxm", "tpu-v6e"))
    )
    assert report.what_if is not None
    assert [w.chip for w in report.what_if] == ["h100-sxm", "tpu-v6e"]
    alone = hlogap.audit(FIXTURES / "sharded_train", AuditOptions(chip=chip, what_if=("tpu-v6e",)))
    assert alone.what_if is not None
    assert alone.what_if[0] == report.what_if[1]
    assert report.exposed_by_axis == pytest.approx(alone.exposed_by_axis)
    assert [a.saving_us for a in report.actions or []] == pytest.approx(
        [a.saving_us for a in alone.actions or []]
    )
