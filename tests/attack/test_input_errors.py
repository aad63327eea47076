"""Class 4, internal errors: input and environment errors are exit 2 or 3 with one line, never
exit 4 or a traceback."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.attack.harness import ROOT, assert_clean, chip_file, logdir_copy, run


def test_closed_stdout_is_an_error_not_a_crash(tmp_path: Path) -> None:
    logdir = logdir_copy(tmp_path)
    proc = subprocess.run(
        f'"{sys.executable}" -m hlogap audit "{logdir}" --chip "{chip_file(tmp_path)}" >&-',
        shell=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 3 and "stdout is closed" in proc.stderr, proc.stderr


def test_a_full_disk_is_an_error_not_a_crash(tmp_path: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    logdir = logdir_copy(tmp_path)
    proc = subprocess.run(
        f'"{sys.executable}" -m hlogap audit "{logdir}" --chip "{chip_file(tmp_path)}" > /dev/full',
        shell=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 3 and "No space left" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    "locale",
    [
        {"LC_ALL": "C", "LANG": "C", "PYTHONIOENCODING": ""},
        {"PYTHONIOENCODING": "latin-1"},
        {"PYTHONIOENCODING": "ascii"},
    ],
)
@pytest.mark.parametrize("command", ["audit", "chips", "diff", "check", "bound"])
def test_plain_locales_print_tables(locale: dict[str, str], command: str, tmp_path: Path) -> None:
    logdir, chip = logdir_copy(tmp_path), str(chip_file(tmp_path))
    args = {
        "audit": ["audit", str(logdir), "--chip", chip],
        "chips": ["chips"],
        "diff": ["diff", str(logdir), str(logdir), "--chip", chip],
        "check": ["check", str(logdir), "--baseline", str(logdir), "--chip", chip],
        "bound": ["bound", "%a = f32[8]{0} add(f32[8]{0} %x, f32[8]{0} %y)", "--chip", "h100-sxm"],
    }[command]
    result = run(args, tmp_path, env=locale)
    assert_clean(result, (0,))
    assert result.out.strip()


def test_an_unwritable_cache_is_an_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = run(["calibrate"], tmp_path, env={"HLOGAP_CACHE_DIR": str(blocker / "sub")})
    assert_clean(result, (3,))
    assert "cannot write" in result.err


def test_demo_without_a_writable_home_still_runs(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    # The demo calibrates this CPU first (8 s on a quiet 2-core machine, twice that beside
    # other work): its deadline is the harness's hang check, not a speed limit.
    result = run(
        ["demo", "--top", "2"],
        tmp_path,
        env={"HLOGAP_CACHE_DIR": str(blocker / "sub")},
        timeout=120,
    )
    assert_clean(result, (0,))
    assert "not kept" in result.err and "ops" in result.out


BAD_CHIPS = {
    "a number past float": 'name = "x"\n[peak_flops]\nf32 = 1'
    + "0" * 400
    + "\n[memory]\nhbm_bw = 1e10\n",
    "deep nesting": 'name = "x"\nv = '
    + "[" * 3000
    + "]" * 3000
    + "\n[peak_flops]\nf32 = 1e11\n[memory]\nhbm_bw = 1e10\n",
    "not TOML": "name = \n",
    "a negative peak": 'name = "x"\n[peak_flops]\nf32 = -1\n[memory]\nhbm_bw = 1e10\n',
    "NaN bandwidth": 'name = "x"\n[peak_flops]\nf32 = 1e11\n[memory]\nhbm_bw = nan\n',
    "binary": "\x00\xff\xfe",
}


@pytest.mark.parametrize("how", sorted(BAD_CHIPS))
def test_a_bad_chip_file_is_a_usage_error(how: str, tmp_path: Path) -> None:
    chip = tmp_path / "bad.toml"
    chip.write_bytes(BAD_CHIPS[how].encode("latin-1"))
    assert_clean(run(["audit", str(logdir_copy(tmp_path)), "--chip", str(chip)], tmp_path), (2,))


BAD_CONFIGS = {
    "hlogap.toml": [
        "max_regression = 1" + "0" * 400,
        "max_regression = inf",
        "max_regression = [" * 2000,
    ],
    "pyproject.toml": [
        "[tool.hlogap]\nmax_regression = -3",
        "[tool.hlogap]\nx = " + "[" * 3000 + "]" * 3000,
    ],
}


@pytest.mark.parametrize(
    ("name", "content"), [(n, c) for n, cs in BAD_CONFIGS.items() for c in cs], ids=str
)
def test_a_bad_config_is_a_usage_error(name: str, content: str, tmp_path: Path) -> None:
    logdir = logdir_copy(tmp_path)
    (tmp_path / name).write_text(content)
    result = run(
        ["check", str(logdir), "--baseline", str(logdir), "--chip", str(chip_file(tmp_path))],
        tmp_path,
    )
    assert_clean(result, (2,))


BAD_BASELINES = {
    "deep nesting": "[" * 100000 + "]" * 100000,
    "an integer past float": None,  # made from a real report below
    "not JSON": "{",
    "not UTF-8": "\udcff",
    "a JSON list": "[]",
}


@pytest.mark.parametrize("how", sorted(BAD_BASELINES))
def test_a_bad_baseline_is_an_input_error(how: str, tmp_path: Path) -> None:
    logdir = logdir_copy(tmp_path)
    chip = chip_file(tmp_path)
    baseline = tmp_path / "base.json"
    if how == "an integer past float":
        report = json.loads(
            run(["audit", str(logdir), "--chip", str(chip), "-f", "json"], tmp_path).out
        )
        report["summary"]["measured_us"] = 10**400
        baseline.write_text(json.dumps(report))
    else:
        baseline.write_bytes(str(BAD_BASELINES[how]).encode("utf-8", "surrogateescape"))
    result = run(["check", str(logdir), "--baseline", str(baseline), "--chip", str(chip)], tmp_path)
    assert_clean(result, (3,))


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_one_bad_host_in_a_multi_host_run_names_it(damage: str, tmp_path: Path) -> None:
    logdir = logdir_copy(tmp_path, hosts=4)
    bad = next(logdir.rglob("host02.xplane.pb"))
    data = bad.read_bytes()
    bad.write_bytes(
        {"truncated": data[: len(data) // 3], "garbage": b"\x0f" * 5000, "empty": b""}[damage]
    )
    result = run(
        ["audit", str(logdir), "--chip", str(chip_file(tmp_path)), "--jobs", "2"], tmp_path
    )
    assert_clean(result, (3,))
    assert "host02" in result.err


def test_a_profile_tree_of_links_and_odd_entries(tmp_path: Path) -> None:
    logdir = logdir_copy(tmp_path)
    run_dir = next(logdir.rglob("run1"))
    (run_dir / "dir.xplane.pb").mkdir()  # a directory named like a host file
    (run_dir / "loop").symlink_to(run_dir / "loop")  # a link to itself
    (run_dir / "dangling.xplane.pb").symlink_to(tmp_path / "nowhere")
    result = run(["audit", str(logdir), "--chip", str(chip_file(tmp_path))], tmp_path)
    assert_clean(result, (0, 3))


@pytest.mark.parametrize("tree", ["empty dir", "empty run", "plugins only", "a file named profile"])
def test_trees_without_a_profile(tree: str, tmp_path: Path) -> None:
    root = tmp_path / "tb"
    if tree == "empty dir":
        root.mkdir()
    elif tree == "empty run":
        (root / "plugins" / "profile" / "run1").mkdir(parents=True)
    elif tree == "plugins only":
        (root / "plugins").mkdir(parents=True)
    else:
        (root / "plugins").mkdir(parents=True)
        (root / "plugins" / "profile").write_text("x")
    result = run(["audit", str(root), "--chip", str(chip_file(tmp_path))], tmp_path)
    assert_clean(result, (3,))
    assert "no profile found" in result.err


def test_copying_a_tree_keeps_the_fixture_intact(tmp_path: Path) -> None:
    # The suite's own precondition: it works on copies, never on the committed corpus.
    logdir = logdir_copy(tmp_path)
    assert shutil.disk_usage(logdir).free > 0 and logdir.is_relative_to(tmp_path)
