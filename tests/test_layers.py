"""The package's folders are the pipeline's stages, and data flows one way through them:
profile files -> timeline (read by an executor) -> HLO -> costs -> chips -> bounds -> report
-> renderers.

Each module may import from its own stage and from earlier ones, never from a later one; the
shared leaves (errors, units, version, generated protobuf) serve every stage. The walk reads
every import statement with `ast`, including those inside functions and `TYPE_CHECKING` blocks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "hlogap"
STAGES = [
    {
        "errors",
        "units",
        "files",
        "_version",
        "_plugins",
        "proto",
    },  # leaves: every stage may use them
    {"source"},
    {"trace"},
    {"executors"},  # where hosts' timelines are read and reduced: this machine or a cluster
    {"hlo"},
    {"memory"},  # a module's buffers (its buffer assignment), beside its costs
    {"cost"},
    {"chips"},
    {"bounds"},
    {"report"},
    {"rows"},  # the report's rows built from the stages above: ops, steps, hosts, groups
    {"advice"},  # what to change and what it saves: reads the report model, shown by renderers
    {"render"},
    {"options", "pipeline", "cli", "__init__", "__main__"},  # the API and the command line
]


def _stage(top: str) -> int:
    for rank, names in enumerate(STAGES):
        if top in names:
            return rank
    raise AssertionError(f"hlogap/{top} belongs to no stage: add it to STAGES")


def _top(module_path: Path) -> str:
    rel = module_path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported hlogap module) of every import in the file."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "hlogap":
                found += [(node.lineno, f"hlogap.{a.name}") for a in node.names]
            elif node.module.startswith("hlogap."):
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("hlogap")]
    return found


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "proto" not in p.parts)


def test_every_module_has_a_stage() -> None:
    assert {_top(p) for p in MODULES} <= set().union(*STAGES)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_imports_from_a_later_stage(path: Path) -> None:
    here = _stage(_top(path))
    for line, module in _imports(path):
        parts = module.split(".")
        if len(parts) < 2:
            continue  # `import hlogap`
        there = _stage(parts[1])
        assert there == 0 or there <= here, (
            f"{path.relative_to(PACKAGE)}:{line} imports {module}: stage "
            f"{sorted(STAGES[there])} comes after {sorted(STAGES[here])}"
        )


# A renderer lays out the report and words it: it imports the report (its schema, with
# hlogap.report.schema naming the types of earlier stages the report holds), its own package and
# the leaves, never the stages that made the report (trace, memory, bounds, chips): a figure a
# renderer worked out from them would be one the JSON and the other formats do not hold.
RENDER_IMPORTS = {"report", "render", "units", "errors", "files", "_plugins"}
# Two row builders read nothing but the report's own rows, re-cut where a format shows them:
# the page's --group-by scope at each depth, and the trace export's tracks (from the events, op
# rows and steps the report holds).
RENDER_ROWS = {"hlogap.rows.groups", "hlogap.rows.tracks"}
RENDERERS = [p for p in MODULES if _top(p) == "render"]


@pytest.mark.parametrize("path", RENDERERS, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_renderers_import_only_the_report(path: Path) -> None:
    for line, module in _imports(path):
        parts = module.split(".")
        assert len(parts) < 2 or parts[1] in RENDER_IMPORTS or module in RENDER_ROWS, (
            f"{path.relative_to(PACKAGE)}:{line} imports {module}: a renderer imports only "
            f"{sorted(RENDER_IMPORTS)}"
        )


def test_the_walk_sees_a_back_edge(tmp_path: Path) -> None:
    # The check itself: a cost module importing the report stage is caught.
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from hlogap.report.model import OpRow\n")
    assert _imports(bad) == [(2, "hlogap.report.model")]
    assert _stage("report") > _stage("cost")
