"""The command line's own text against the contract: `--help` covers the exit codes and every
option's values, options that do not apply are refused, not ignored."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from hlogap.cli import app
from hlogap.rows.groups import GROUP_KEYS
from tests.conftest import SAMPLE, run_cli

COMMANDS = ["audit", "demo", "calibrate", "bound", "memory", "chips", "check", "diff"]


def _help(*command: str) -> str:
    """The help text with its lines joined: options' help wraps at any word."""
    return " ".join(CliRunner().invoke(app, [*command, "--help"]).output.split())


@pytest.mark.parametrize("command", [[], *([c] for c in COMMANDS)], ids=["hlogap", *COMMANDS])
def test_every_help_ends_with_the_exit_codes(command: list[str]) -> None:
    text = _help(*command)
    for code in ("0 success", "1 `check` found a regression", "2 usage", "3 input", "4 internal"):
        assert code in text, (command, code)


def test_check_help_names_its_own_exit_codes() -> None:
    text = _help("check")
    assert "exit 0 within the thresholds, 1 on a regression" in text
    assert "3 when inconclusive" in text


def test_audit_help_lists_every_group_key_and_nsys_archives() -> None:
    text = _help("audit")
    group_by = text[text.index("--group-by <str>") : text.index("--depth <")]
    for key in GROUP_KEYS:
        assert key in group_by, key
    assert "nsys-jax archive (.zip" in text
    assert "only with --group-by scope" in text


@pytest.mark.parametrize(
    "extra",
    [["--depth", "2"], ["--group-by", "category", "--depth", "2"]],
    ids=["alone", "category"],
)
def test_depth_without_scope_groups_is_refused(
    extra: list[str], capsys: pytest.CaptureFixture[str], cpu_chip_file: Path
) -> None:
    code, out, err = run_cli(["audit", str(SAMPLE), "--chip", str(cpu_chip_file), *extra], capsys)
    assert (code, out) == (2, "")
    assert err == "hlogap: error: --depth applies only to --group-by scope\n"


def test_depth_with_scope_groups_cuts_the_path(
    capsys: pytest.CaptureFixture[str], cpu_chip_file: Path
) -> None:
    args = ["audit", str(SAMPLE), "--chip", str(cpu_chip_file), "--group-by", "scope"]
    code, out, _ = run_cli([*args, "--depth", "1", "--format", "csv"], capsys)
    assert code == 0
    scopes = [line.split(",")[1] for line in out.splitlines()[1:]]
    assert scopes and all("/" not in s for s in scopes), scopes


# The document each command writes (docs/cli.md): what its --format may name.
WRITES = {
    "audit": "audit",
    "demo": "audit",
    "memory": "memory",
    "chips": "chips",
    "bound": "bound",
    "check": "check",
    "diff": "diff",
}


@pytest.mark.parametrize("command", list(WRITES))
def test_format_help_is_the_renderer_registry(command: str) -> None:
    from hlogap.render.base import formats

    text = _help(command)
    listed = text[text.index("Output format: ") :].split(";")[0].removeprefix("Output format: ")
    assert listed.split(", ") == formats(WRITES[command])  # every one, in the registry's order
    # Where the command takes -o, the file's extension chooses the format (render.base).
    takes_output = "-o, --output" in text
    default = "from --output's extension, else table" if takes_output else "table"
    assert f"; default: {default}." in text


def test_commands_without_a_document_take_no_format() -> None:
    assert "--format" not in _help("calibrate")
    assert set(WRITES) == set(COMMANDS) - {"calibrate"}


def test_memory_output_extension_chooses_the_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cpu_chip_file: Path
) -> None:
    # memory --help says the extension chooses: a .json file is the JSON document, no --format.
    import json

    target = tmp_path / "memory.json"
    args = ["memory", str(SAMPLE), "--chip", str(cpu_chip_file), "-o", str(target)]
    code, out, err = run_cli(args, capsys)
    assert (code, out) == (0, ""), err
    assert json.loads(target.read_text())["schema"] == "hlogap.memory/1"
