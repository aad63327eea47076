"""Running hlogap as an attacker does: a real process with a deadline, its exit code, its output.

Every case of the attack suite goes through `run` and then `assert_clean`: the process ended
before its deadline, with a documented exit code (never 4), and stderr holds no traceback and
at most one line per message.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "hlogap" / "data" / "sample"
FIXTURES = ROOT / "tests" / "fixtures"
DEADLINE_S = 30.0  # any case still running after this has hung
CHIP = 'name = "attack"\n[peak_flops]\nf32 = 1.0e11\n[memory]\nhbm_bw = 2.0e10\n'


@dataclass
class Result:
    code: int
    out: str
    err: str
    marker: str  # in the environment of the process and every process it started


def run(
    args: list[str],
    cwd: Path,
    *,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    timeout: float = DEADLINE_S,
) -> Result:
    marker = uuid.uuid4().hex
    full_env = {**os.environ, "HLOGAP_ATTACK_MARKER": marker, "PYTHONIOENCODING": "utf-8"}
    full_env.pop("GITHUB_STEP_SUMMARY", None)
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-m", "hlogap", *args],
        cwd=cwd,
        env=full_env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,  # a hang fails the case (subprocess.TimeoutExpired)
    )
    return Result(proc.returncode, proc.stdout, proc.stderr, marker)


def assert_clean(result: Result, codes: tuple[int, ...]) -> None:
    """A documented exit code among `codes`, and an error a person can read in one line."""
    assert result.code in codes, (result.code, result.err[-2000:])
    assert "Traceback" not in result.err, result.err[-2000:]
    assert "internal error" not in result.err, result.err
    for line in result.err.splitlines():
        assert line.startswith("hlogap") or not line.strip() or line.startswith(" "), result.err


def leftover_processes(marker: str) -> list[int]:
    """Processes still running that were started by the run with `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if f"HLOGAP_ATTACK_MARKER={marker}".encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def chip_file(directory: Path) -> Path:
    path = directory / "chip.toml"
    path.write_text(CHIP)
    return path


def logdir_copy(directory: Path, hosts: int = 1, program: str | None = None) -> Path:
    """A logdir with `hosts` host files (copies of the sample's, or of a fixture program's)."""
    source = next((FIXTURES / program if program else SAMPLE).rglob("*.xplane.pb"))
    run_dir = directory / "tb" / "plugins" / "profile" / "run1"
    run_dir.mkdir(parents=True)
    for h in range(hosts):
        shutil.copy(source, run_dir / f"host{h:02d}.xplane.pb")
    return directory / "tb"


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under `directory` (links not followed), to prove nothing was written there."""
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }
