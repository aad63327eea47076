"""Every bad input gets one line on stderr and the contract's exit code, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from hlogap.options import AuditOptions
from hlogap.proto import xplane_pb2
from hlogap.trace import xspace
from tests.conftest import AMD_FILES, FIXTURES, SAMPLE, run_cli

SAMPLE_FILE = next(SAMPLE.rglob("*.xplane.pb"))


def _space(path: Path) -> xplane_pb2.XSpace:
    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    return space


def _write(tmp: Path, name: str, data: bytes) -> Path:
    path = tmp / name
    path.write_bytes(data)
    return path


def _strip_metadata_stat(tmp: Path, replace: bytes | None) -> Path:
    """The sample with every module's `Hlo Proto` removed (None) or replaced by `replace`."""
    space = _space(SAMPLE_FILE)
    for plane in space.planes:
        if plane.name != "/host:metadata":
            continue
        hlo_id = next(k for k, v in plane.stat_metadata.items() if v.name == "Hlo Proto")
        for md in plane.event_metadata.values():
            for stat in list(md.stats):
                if stat.metadata_id == hlo_id:
                    if replace is None:
                        md.stats.remove(stat)
                    else:
                        stat.bytes_value = replace
    return _write(tmp, "vm.xplane.pb", space.SerializeToString())


def _no_ops(tmp: Path) -> Path:
    space = _space(SAMPLE_FILE)
    for plane in space.planes:
        if plane.name == "/host:CPU":
            del plane.lines[:]
    return _write(tmp, "vm.xplane.pb", space.SerializeToString())


def _gpu_without_stats(tmp: Path) -> Path:
    path = AMD_FILES["mi300x"]
    if not path.is_file():
        pytest.skip("AMD fixture absent")
    space = _space(path)
    for plane in space.planes:
        del plane.stats[:]
    return _write(tmp, "gpu.xplane.pb", space.SerializeToString())


def _dir(tmp: Path, *parts: str) -> Path:
    path = tmp.joinpath(*parts)
    path.mkdir(parents=True)
    return tmp


# (id, builder of the argument list, exit code, start of the stderr line)
CASES: list[tuple[str, Callable[[Path], list[str]], int, str]] = [
    ("missing path", lambda t: ["audit", str(t / "nope")], 3, "hlogap: error: no such file"),
    ("logdir without profiles", lambda t: ["audit", str(t)], 3, "hlogap: error: no profile found"),
    (
        "empty run",
        lambda t: ["audit", str(_dir(t, "plugins", "profile", "run1"))],
        3,
        "hlogap: error: no profile found",
    ),
    (
        "zero-byte file",
        lambda t: ["audit", str(_write(t, "a.xplane.pb", b""))],
        3,
        "hlogap: error: empty profile file",
    ),
    (
        "truncated file",
        lambda t: [
            "audit",
            str(
                _write(
                    t, "a.xplane.pb", SAMPLE_FILE.read_bytes()[: SAMPLE_FILE.stat().st_size // 2]
                )
            ),
        ],
        3,
        "hlogap: error: corrupt or truncated profile",
    ),
    (
        "random bytes",
        lambda t: ["audit", str(_write(t, "a.xplane.pb", os.urandom(4096)))],
        3,
        "hlogap: error: ",
    ),
    (
        "text file",
        lambda t: ["audit", str(_write(t, "a.xplane.pb", b"hello, world\n" * 20))],
        3,
        "hlogap: error: ",
    ),
    (
        "XSpace without planes",
        lambda t: [
            "audit",
            str(_write(t, "a.xplane.pb", xplane_pb2.XSpace(hostnames=["h"]).SerializeToString())),
        ],
        3,
        "hlogap: error: not an xprof profile",
    ),
    (
        "profile without XLA ops",
        lambda t: ["audit", str(_no_ops(t))],
        3,
        "hlogap: error: no XLA op events",
    ),
    (
        "unknown chip name",
        lambda t: ["audit", str(SAMPLE), "--chip", "tpu-v99"],
        2,
        "hlogap: error: unknown chip 'tpu-v99'",
    ),
    (
        "missing chip file",
        lambda t: ["audit", str(SAMPLE), "--chip", str(t / "x.toml")],
        2,
        "hlogap: error: ",
    ),
    (
        "malformed chip file",
        lambda t: ["audit", str(SAMPLE), "--chip", str(_write(t, "c.toml", b"name = [oops"))],
        2,
        "hlogap: error: ",
    ),
    (
        "unknown option",
        lambda t: ["audit", str(SAMPLE), "--frobnicate"],
        2,
        "hlogap: usage error: No such option",
    ),
    (
        "unknown format",
        lambda t: ["audit", str(SAMPLE), "--format", "xml"],
        2,
        "hlogap: error: unknown format 'xml'",
    ),
    (
        "unknown sort key",
        lambda t: ["audit", str(SAMPLE), "--sort", "name"],
        2,
        "hlogap: error: unknown sort key",
    ),
    (
        "bad module regex",
        lambda t: ["audit", str(SAMPLE), "--module", "("],
        2,
        "hlogap: error: bad --module regex",
    ),
    (
        "unknown run",
        lambda t: ["audit", str(SAMPLE), "--run", "1999"],
        3,
        "hlogap: error: no run '1999'",
    ),
    (
        "unknown host",
        lambda t: ["audit", str(SAMPLE), "--host", "nohost"],
        3,
        "hlogap: error: no host 'nohost'",
    ),
    # A selection that names nothing in the profile is one exit code, whichever option names
    # it (docs/cli.md): the profile lacks it (3); a value no profile could hold is usage (2).
    (
        "unknown device",
        lambda t: ["audit", str(SAMPLE), "--device", "99"],
        3,
        "hlogap: error: no device 99",
    ),
    (
        "unknown module",
        lambda t: ["audit", str(SAMPLE), "--module", "^nomodule$"],
        3,
        "hlogap: error: no op matches --module",
    ),
    (
        "unknown device in diff",
        lambda t: ["diff", str(SAMPLE), str(SAMPLE), "--device", "99"],
        3,
        "hlogap: error: no device 99",
    ),
    (
        "negative device",
        lambda t: ["audit", str(SAMPLE), "--device", "-1"],
        2,
        "hlogap: usage error: Invalid value for '--device'",
    ),
    (
        "negative top",
        lambda t: ["audit", str(SAMPLE), "--top", "-1"],
        2,
        "hlogap: usage error: Invalid value for '--top'",
    ),
    (
        "run with a single file",
        lambda t: ["audit", str(SAMPLE_FILE), "--run", "norun"],
        2,
        "hlogap: error: --run makes no sense with a single file",
    ),
    (
        "hlo dump not a directory",
        lambda t: ["audit", str(SAMPLE), "--hlo-dump", str(t / "d")],
        3,
        "hlogap: error: --hlo-dump is not a directory",
    ),
    (
        "malformed HLO to bound",
        lambda t: ["bound", "%x = f32[2 add(", "--chip", "h100-sxm"],
        3,
        "hlogap: error: malformed HLO",
    ),
    (
        "empty HLO to bound",
        lambda t: ["bound", "  ", "--chip", "h100-sxm"],
        2,
        "hlogap: error: no HLO instruction given",
    ),
    (
        "bound with unknown chip",
        lambda t: ["bound", "%a = f32[8] add(f32[8] %x, f32[8] %y)", "--chip", "z80"],
        2,
        "hlogap: error: unknown chip",
    ),
    (
        "GPU with undetectable chip",
        lambda t: ["audit", str(_gpu_without_stats(t))],
        3,
        "hlogap: error: cannot tell which GPU",
    ),
    (
        "unwritable output",
        lambda t: ["audit", str(SAMPLE), "-o", str(t / "no" / "such" / "f")],
        3,
        "hlogap: error: cannot write",
    ),
    ("missing command argument", lambda t: ["audit"], 2, "hlogap: usage error: Missing argument"),
]


@pytest.mark.parametrize(
    ("args", "code", "first"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input(
    args: Callable[[Path], list[str]],
    code: int,
    first: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    cpu_chip_file: Path,
) -> None:
    argv = args(tmp_path)
    if argv[0] in ("audit", "diff") and "--chip" not in argv and "GPU" not in first:
        argv += ["--chip", str(cpu_chip_file)]
    got, out, err = run_cli(argv, capsys)
    assert got == code, err
    assert err.startswith(first), err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert out == ""


def test_cpu_profile_without_a_chip_says_how_to_get_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HLOGAP_CACHE_DIR", str(tmp_path))  # no calibrated chip there
    code, _, err = run_cli(["audit", str(SAMPLE)], capsys)
    assert code == 3
    assert err.startswith("hlogap: error: a CPU profile needs a CPU chip: run `hlogap calibrate`")


@pytest.mark.parametrize("replace", [None, b"\xff\x00garbage"], ids=["missing", "undecodable"])
def test_module_without_usable_hlo_keeps_its_time(
    replace: bytes | None, tmp_path: Path, cpu_chip_file: Path
) -> None:
    from hlogap import audit

    broken = audit(_strip_metadata_stat(tmp_path, replace), AuditOptions(chip=str(cpu_chip_file)))
    intact = audit(SAMPLE_FILE, AuditOptions(chip=str(cpu_chip_file)))
    assert broken.measured_us == pytest.approx(intact.measured_us)
    assert {r.name for r in broken.ops} == {r.name for r in intact.ops}
    assert all(r.bound_by == "unmodeled" for r in broken.ops)
    assert broken.modeled_fraction == 0
    word = "no HLO" if replace is None else "undecodable"
    assert all(word in r.hints[0] for r in broken.ops)


def test_internal_error_is_one_line_with_exit_4(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, cpu_chip_file: Path
) -> None:
    def boom(*_: object, **__: object) -> None:
        raise ZeroDivisionError("simulated bug")

    monkeypatch.setattr("hlogap.pipeline.RunMerger.finish", boom)
    code, out, err = run_cli(["audit", str(SAMPLE), "--chip", str(cpu_chip_file)], capsys)
    assert code == 4 and out == ""
    assert err.startswith("hlogap: internal error (ZeroDivisionError: simulated bug)")
    assert err.count("\n") == 1


def test_profile_too_big_for_memory_is_refused_before_reading(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], cpu_chip_file: Path
) -> None:
    monkeypatch.setattr(xspace, "available_memory", lambda: 1000)
    code, _, err = run_cli(["audit", str(SAMPLE), "--chip", str(cpu_chip_file)], capsys)
    assert code == 3
    assert err.startswith("hlogap: error: profile too large for this machine's memory")


def test_audit_never_writes_into_the_profile_tree(
    capsys: pytest.CaptureFixture[str], cpu_chip_file: Path
) -> None:
    logdir = FIXTURES / "sharded_train"
    before = {p: p.stat().st_mtime_ns for p in logdir.rglob("*")}
    for fmt in ("table", "json", "csv", "md"):
        code, _, _ = run_cli(
            ["audit", str(logdir), "--chip", str(cpu_chip_file), "-f", fmt], capsys
        )
        assert code == 0
    assert {p: p.stat().st_mtime_ns for p in logdir.rglob("*")} == before


# ------------------------------------------------------------- forked readers (host files)

_FORKED = """
import sys
from hlogap.trace import reading
{setup}
from hlogap.cli import main
sys.argv = ["hlogap", "audit", sys.argv[1], "--chip", "h100-sxm", "--jobs", "2"]
try:
    main()
finally:
    print(f"caller {{__import__('os').getpid()}} done", flush=True)
"""


def _run_with_bad_lines(tmp: Path) -> Path:
    """A run of two hosts (read by forked readers with --jobs 2), each a GPU device plane whose
    lines do not parse."""
    space = xplane_pb2.XSpaceShallow()
    plane = xplane_pb2.XPlaneShallow(id=0, name="/device:GPU:0")
    plane.stat_metadata[1].name = "hlo_op"  # so that the reader looks at the lines
    plane.lines.append(b"\xff\xff\xff\xff")
    space.planes.append(plane.SerializeToString())
    run = tmp / "tb" / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    for host in ("host0", "host1"):
        _write(run, f"{host}.xplane.pb", space.SerializeToString())
    return tmp / "tb"


def _forked(tmp: Path, setup: str = "") -> subprocess.CompletedProcess[str]:
    # A fresh interpreter: JAX, loaded in the test process, makes fork unsafe (and hlogap
    # reads sequentially beside it).
    script = _FORKED.format(setup=setup)
    path = _run_with_bad_lines(tmp)
    return subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=60
    )


def test_corrupt_host_read_by_a_forked_reader_is_an_input_error(tmp_path: Path) -> None:
    out = _forked(tmp_path)
    assert out.returncode == 3, out.stderr
    assert out.stderr.count("\n") == 1 and "corrupt or truncated profile" in out.stderr


def test_a_failing_forked_reader_never_runs_the_callers_code(tmp_path: Path) -> None:
    # The child's result cannot be sent: it must leave through os._exit, not return into the
    # caller (which would run the caller's code twice, in two processes).
    setup = (
        "import pickle\n"
        "reading.pickle = type('P', (), "
        "{'dumps': None, 'loads': pickle.loads, 'HIGHEST_PROTOCOL': 5})"
    )
    out = _forked(tmp_path, setup)
    assert out.stdout.count("done") == 1, out.stdout
    assert out.returncode == 4 and "reader process died" in out.stderr


# ---------------------------------------------------------------- never a write into a profile


def _logdir_copy(tmp: Path) -> tuple[Path, Path]:
    """A copy of the sample logdir, and its host file."""
    import shutil

    logdir = tmp / "tb"
    shutil.copytree(SAMPLE, logdir)
    return logdir, next(logdir.rglob("*.xplane.pb"))


@pytest.mark.parametrize(
    "where", ["the file", "a link to it", "its run dir", "plugins", "the logdir"]
)
def test_output_never_lands_in_the_profile(
    where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logdir, host = _logdir_copy(tmp_path)
    original = host.read_bytes()
    if where == "the file":
        target = host
    elif where == "a link to it":
        target = tmp_path / "link.json"
        target.symlink_to(host)
    elif where == "its run dir":
        target = host.parent / "report.json"
    elif where == "plugins":
        target = logdir / "plugins" / "report.json"
    else:  # the logdir itself: the directory the user named holds the profile
        target = logdir / "report.json"
    chip = tmp_path / "c.toml"
    chip.write_text('name = "c"\n[peak_flops]\nf32 = 1e11\n[memory]\nhbm_bw = 2e10\n')
    args = ["audit", str(logdir), "--chip", str(chip)]
    code, _, err = run_cli([*args, "-o", str(target)], capsys)
    assert code == 2 and "refusing to write" in err, (code, err)
    assert host.read_bytes() == original
    assert not (host.parent / "report.json").exists()
    assert not (logdir / "plugins" / "report.json").exists()
    assert not (logdir / "report.json").exists()
    assert err.count("\n") == 1
    # Beside the logdir is the user's to write.
    beside = tmp_path / "report.json"
    code, _, err = run_cli([*args, "-o", str(beside)], capsys)
    assert code == 0 and json.loads(beside.read_text())["schema"] == "hlogap.audit/4"


@pytest.mark.parametrize("encoding", ["latin-1", "ascii"])
def test_tables_print_in_a_plain_encoding(encoding: str, tmp_path: Path) -> None:
    # CI containers with a latin-1 or ASCII stdout: tables come out in ASCII, never exit 4.
    chip = tmp_path / "c.toml"
    chip.write_text('name = "c"\n[peak_flops]\nf32 = 1e11\n[memory]\nhbm_bw = 2e10\n')
    env = {**os.environ, "PYTHONIOENCODING": encoding}
    for args in (
        ["audit", str(SAMPLE), "--chip", str(chip), "--steps"],
        ["chips"],
        ["diff", str(SAMPLE), str(SAMPLE), "--chip", str(chip)],
    ):
        out = subprocess.run(
            [sys.executable, "-m", "hlogap", *args], env=env, capture_output=True, timeout=120
        )
        assert out.returncode == 0, (args, out.stderr)
        text = out.stdout.decode(encoding)
        assert " | " in text and "---" in text, args


def test_version_and_short_help(capsys: pytest.CaptureFixture[str]) -> None:
    from hlogap import __version__

    code, out, _ = run_cli(["--version"], capsys)
    assert (code, out) == (0, f"hlogap {__version__}\n")
    code, out, _ = run_cli(["audit", "-h"], capsys)
    assert code == 0 and "--group-by" in out
