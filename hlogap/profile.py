"""Find the profile files a user means: a TensorBoard logdir, one run directory, or one file.

Layout written by jax.profiler / xprof:
    LOGDIR/plugins/profile/<run>/<host>.xplane.pb
The newest run is the default; every host file of the run is read unless `host` narrows it.
Nothing here writes anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hlogap.errors import InputError

XPLANE_SUFFIX = ".xplane.pb"


@dataclass(frozen=True)
class ProfileSource:
    path: Path  # what the user gave
    run: str | None  # run directory name, when the files sit in one
    files: tuple[Path, ...]  # one .xplane.pb per host, sorted by host

    @property
    def hosts(self) -> list[str]:
        return [host_of(f) for f in self.files]


def host_of(path: Path) -> str:
    name = path.name
    return name[: -len(XPLANE_SUFFIX)] if name.endswith(XPLANE_SUFFIX) else path.stem


def _xplane_files(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.iterdir() if p.name.endswith(XPLANE_SUFFIX) and p.is_file())


def _runs(profile_dir: Path) -> list[Path]:
    """Run directories holding at least one .xplane.pb, oldest first.

    Runs are named by timestamp (`2026_11_22_04_58_39`), so name order is time order; other names
    sort by modification time among themselves after the timestamped ones would be guesswork, so
    we sort by (mtime, name) which agrees with the names for real runs.
    """
    runs = [d for d in profile_dir.iterdir() if d.is_dir() and _xplane_files(d)]
    return sorted(runs, key=lambda d: (d.name, d.stat().st_mtime))


def find_profile(
    path: str | Path, run: str | None = None, host: str | None = None
) -> ProfileSource:
    """Resolve PATH (logdir, run directory or file) to the files of one run."""
    given = Path(path)
    try:
        if not given.exists():
            raise InputError(f"no such file or directory: {given}")
        if given.is_file():
            if run is not None:
                raise InputError(f"--run makes no sense with a single file: {given}")
            files = [given]
            run_name = given.parent.name if given.parent.parent.name == "profile" else None
        else:
            run_dir = _select_run(given, run)
            run_name = run_dir.name
            files = _xplane_files(run_dir)
    except PermissionError as exc:
        raise InputError(f"permission denied: {exc.filename or given}") from exc
    if host is not None:
        chosen = [f for f in files if host_of(f) == host]
        if not chosen:
            known = ", ".join(host_of(f) for f in files) or "none"
            raise InputError(f"no host '{host}' in {given} (hosts: {known})")
        files = chosen
    return ProfileSource(path=given, run=run_name, files=tuple(files))


def _select_run(directory: Path, run: str | None) -> Path:
    if _xplane_files(directory):  # a run directory itself
        if run is not None and run != directory.name:
            raise InputError(f"{directory} is run '{directory.name}', not '{run}'")
        return directory
    for profile_dir in (directory / "plugins" / "profile", directory / "profile", directory):
        if not profile_dir.is_dir():
            continue
        runs = _runs(profile_dir)
        if not runs:
            continue
        if run is None:
            return runs[-1]
        for r in runs:
            if r.name == run:
                return r
        names = ", ".join(r.name for r in runs)
        raise InputError(f"no run '{run}' in {profile_dir} (runs: {names})")
    raise InputError(
        f"no profile found in {directory} (expected plugins/profile/<run>/*.xplane.pb)"
    )
