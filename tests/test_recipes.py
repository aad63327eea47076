"""The "one new file" recipes of docs/architecture.md, tried: a cause and a renderer each added
as one module in their package's folder (here a temporary folder on the package's path) work
end to end, with nothing else edited."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import hlogap
from hlogap.options import AuditOptions
from tests.conftest import FIXTURES, run_cli, write_cpu_chip

TINY_CAUSE = '''
"""A cause no one has written yet: the longest op is not needed at all (a program change, as
the pattern causes are: it may save more than the op's gap)."""

from hlogap.advice.base import Finding, register


def unneeded_op(ctx):
    rows = [r for r in ctx.rows if r.measured_us > 0]
    if rows:
        row = max(rows, key=lambda r: r.measured_us)
        yield Finding(
            "unneeded op",
            (row,),
            row.measured_us,
            "its result is never read",
            "remove it",
            op_savings=(row.measured_us,),
        )


register(unneeded_op)
'''

TSV_RENDERER = '''
"""A format no one has written yet: the op rows as tab-separated values."""

from hlogap.render.base import register


class TsvRenderer:
    name = "tsv"
    extensions = (".tsv",)
    kinds = frozenset({"audit"})

    def render(self, document, options):
        rows = [f"{r.module}\\t{r.name}\\t{r.measured_us}" for r in document.ops]
        return "\\n".join(["module\\tname\\tmeasured_us", *rows]) + "\\n"


register(TsvRenderer())
'''


@pytest.fixture
def plugin_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder added to the cause and renderer packages' paths, the registries restored and
    the plug-in modules forgotten afterwards."""
    import hlogap.advice.base as advice
    import hlogap.advice.causes as causes
    import hlogap.render as render
    import hlogap.render.base as render_base
    from hlogap._plugins import import_all

    # The built-in plug-ins registered first, so that the registries restored afterwards hold
    # them (restored to a snapshot taken before, the built-ins imported meanwhile were lost:
    # every later audit in the process ran without the causes and renderers).
    import_all("hlogap.advice.causes")
    import_all("hlogap.render")
    folder = tmp_path / "plugins"
    folder.mkdir()
    monkeypatch.setattr(causes, "__path__", [*causes.__path__, str(folder)])
    monkeypatch.setattr(render, "__path__", [*render.__path__, str(folder)])
    monkeypatch.setattr(advice, "_CAUSES", list(advice._CAUSES))
    monkeypatch.setattr(render_base, "_REGISTRY", dict(render_base._REGISTRY))
    yield folder
    for name in ("hlogap.advice.causes.unneeded_op", "hlogap.render.tsv"):
        sys.modules.pop(name, None)


def test_a_cause_is_one_new_file(plugin_folder: Path, tmp_path: Path) -> None:
    (plugin_folder / "unneeded_op.py").write_text(TINY_CAUSE)
    chip = str(write_cpu_chip(tmp_path))
    report = hlogap.audit(FIXTURES / "flaws", AuditOptions(chip=chip))
    found = [a for a in report.actions or [] if a.cause == "unneeded op"]
    assert found, [a.cause for a in report.actions or []]
    assert all(a.saving_us > 0 for a in found)
    # The saved report keeps the new cause, and `diff` of it works.
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps(report.to_dict()))
    loaded = hlogap.load_report(saved)
    assert [a.cause for a in loaded.actions or []] == [a.cause for a in report.actions or []]
    from hlogap.report.compare import compare

    diff = compare(loaded, report)
    realized = diff.to_dict().get("actions_realized")
    assert isinstance(realized, list) and any(a["cause"] == "unneeded op" for a in realized)


def test_a_renderer_is_one_new_file(
    plugin_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (plugin_folder / "tsv.py").write_text(TSV_RENDERER)
    chip = str(write_cpu_chip(tmp_path))
    code, out, err = run_cli(["audit", str(FIXTURES / "mlp"), "--chip", chip, "-f", "tsv"], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "module\tname\tmeasured_us"
    report = hlogap.audit(FIXTURES / "mlp", AuditOptions(chip=chip))
    assert len(lines) == 1 + len(report.ops)
    # The output file's extension chooses it too.
    target = tmp_path / "ops.tsv"
    code, _, err = run_cli(
        ["audit", str(FIXTURES / "mlp"), "--chip", chip, "-o", str(target)], capsys
    )
    assert code == 0, err
    assert target.read_text().splitlines() == lines
    # The command line offers it: audit's --format help and shell completion, and only there.
    assert "tsv" in _format_help("audit")
    assert "tsv" not in _format_help("diff")
    assert "tsv" in _completed("hlogap audit p --format ")
    assert _completed("hlogap audit p --format t") == ["table", "tsv"]


def _format_help(command: str) -> str:
    from typer.testing import CliRunner

    from hlogap.cli import app

    text = " ".join(CliRunner().invoke(app, [command, "--help"]).output.split())
    return text[text.index("Output format: ") :].split(";")[0]


def _completed(words: str) -> list[str]:
    """What bash completes `words` to, through Click's completion protocol in this process
    (the plug-in folder is on the renderer package's path here only)."""
    from typer.testing import CliRunner

    from hlogap.cli import app

    env = {
        "_HLOGAP_COMPLETE": "complete_bash",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
    }
    done = CliRunner().invoke(app, [], env=env, prog_name="hlogap")
    return sorted(done.output.split())
