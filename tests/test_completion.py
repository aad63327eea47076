"""Shell completion of option values (issue 32, item 7): what bash gets for `--chip`,
`--format`, `--group-by` and `--sort`, through Click's completion protocol in a child process
as a shell runs it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hlogap.chips import builtin_chips
from hlogap.render.base import formats
from hlogap.report.model import SORT_KEYS
from hlogap.rows.groups import GROUP_KEYS


def _complete(words: str) -> list[str]:
    env = {
        **os.environ,
        "_HLOGAP_COMPLETE": "complete_bash",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
    }
    code = "import sys; sys.argv = ['hlogap']; from hlogap.cli import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ("hlogap audit p --chip ", sorted(c.name for c in builtin_chips())),
        ("hlogap audit p --chip h1", ["h100-nvl", "h100-pcie", "h100-sxm"]),
        ("hlogap audit p --format ", formats("audit")),
        ("hlogap diff a b -f ", formats("diff")),
        ("hlogap chips --format ", formats("chips")),
        ("hlogap audit p --group-by ", list(GROUP_KEYS)),
        ("hlogap audit p --group-by s", [k for k in GROUP_KEYS if k.startswith("s")]),
        ("hlogap audit p --sort ", list(SORT_KEYS)),
    ],
)
def test_option_values_complete(words: str, expected: list[str]) -> None:
    assert sorted(_complete(words)) == sorted(expected)
