"""Find the profile files a user means: a TensorBoard logdir, one run directory, or one file.

Layout written by jax.profiler / xprof:
    LOGDIR/plugins/profile/<run>/<host>.xplane.pb
The newest run is the default; every host file of the run is read unless `host` narrows it.
Remote logdirs (`gs://`, `s3://`, any fsspec URL) are listed and read through fsspec, as xprof
does (`Remote`), with the backend's own credentials chain. Nothing here writes anywhere;
`refuse_to_overwrite` keeps every writer out of profiles.
"""

from __future__ import annotations

import stat
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from hlogap.errors import HlogapError, InputError, UsageError
from hlogap.units import printable

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the tomli backport has the same API
    import tomli as tomllib

XPLANE_SUFFIX = ".xplane.pb"
# An nsys-jax archive (NVIDIA JAX-Toolbox; read by hlogap.trace.nsys): a `.zip`, or the
# directory it unpacks to, holding this file.
NSYS_TRACE_FILE = "nvtx_gpu_proj_trace/trace.parquet"


class ProfileSource(NamedTuple):
    """The profile a path names: its run and its files, one per host."""

    path: str  # what the user gave
    run: str | None  # run directory name, when the files sit in one
    files: tuple[str, ...]  # one .xplane.pb per host (a local path or a URL), sorted by host

    @property
    def hosts(self) -> list[str]:
        return [host_of(f) for f in self.files]


def regular_file(path: Path, what: str) -> Path:
    """`path`, checked to be a regular file (links followed) before anything opens it: opening
    a FIFO blocks until someone writes to it, and /dev/zero never ends."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError as exc:
        raise InputError(f"no such {what}: {path}") from exc
    except PermissionError as exc:
        raise InputError(f"permission denied: {path}") from exc
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc.strerror}") from exc
    if stat.S_ISDIR(mode):
        raise InputError(f"{what} {path} is a directory, not a file")
    if not stat.S_ISREG(mode):
        raise InputError(f"{what} {path} is not a regular file (a FIFO, device or socket)")
    return path


def read_toml(path: Path, what: str, invalid: Callable[[str], HlogapError]) -> dict[str, Any]:
    """A user's TOML file (chip, config), checked with `regular_file` first; `invalid(reason)`
    is the caller's error for text that is not TOML (including nesting past Python's stack)."""
    regular_file(path, what)
    try:
        with path.open("rb") as f:
            data: dict[str, Any] = tomllib.load(f)
            return data
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:  # tomllib.TOMLDecodeError, UnicodeDecodeError
        raise invalid(str(exc)) from exc
    except RecursionError as exc:
        raise invalid("nested too deeply") from exc


def is_url(path: str | Path) -> bool:
    return "://" in str(path)


# A listing or metadata call on a remote store gives up after this long: a dead endpoint or a
# network that drops packets is one line, not minutes of the backend's own retries (gcsfs
# backs off for about a minute per request).
REMOTE_TIMEOUT_S = 30.0
# The extra (pyproject.toml) that installs each scheme's fsspec backend, and the backend.
_EXTRAS = {"gs": ("gcs", "gcsfs"), "gcs": ("gcs", "gcsfs"), "s3": ("s3", "s3fs")}
_EXTRAS["s3a"] = _EXTRAS["s3"]
# Per-request timeouts in each backend's own terms, so that reads (which may rightly take
# longer than REMOTE_TIMEOUT_S in all) still end when the endpoint stops answering. A user's
# fsspec configuration (FSSPEC_S3_..., ~/.config/fsspec) of the same key wins.
_BACKEND_OPTIONS: dict[str, dict[str, Any]] = {
    "s3": {
        "config_kwargs": {
            "connect_timeout": 5,
            "read_timeout": 30,
            "retries": {"max_attempts": 3, "mode": "standard"},
        }
    },
    "gs": {"requests_timeout": 30},
    "gcs": {"requests_timeout": 30},
}
_CREDENTIALS = {
    "gcs": "gcloud auth application-default login, or GOOGLE_APPLICATION_CREDENTIALS",
    "s3": "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE or ~/.aws/credentials",
}


def _scheme(url: str) -> str:
    return url.split("://", 1)[0].lower()


class Remote:
    """A URL's fsspec filesystem and path; every call's failure is one `InputError` line that
    says what to do (install the extra, fix the credentials or the bucket, check the endpoint),
    never the backend's traceback."""

    def __init__(self, url: str) -> None:
        self.url = url
        scheme = _scheme(url)
        try:
            import fsspec
            import fsspec.config
        except ImportError as exc:
            raise InputError(f"reading {url} needs fsspec (pip install fsspec)") from exc
        configured = fsspec.config.conf.get(scheme, {})
        options = {k: v for k, v in _BACKEND_OPTIONS.get(scheme, {}).items() if k not in configured}
        try:
            self.fs, self.path = fsspec.core.url_to_fs(url, **options)
        except ImportError as exc:
            if scheme in _EXTRAS:
                extra, package = _EXTRAS[scheme]
                raise InputError(
                    f"reading {scheme}:// URLs needs {package} (pip install 'hlogap[{extra}]')"
                ) from exc
            raise InputError(f"reading {url}: {_first_line(exc)}") from exc
        except ValueError as exc:  # "Protocol not known"
            raise InputError(f"cannot read {url}: {_first_line(exc)}") from exc
        except Exception as exc:  # a backend's constructor: a bad configuration value
            raise self.error(exc, "open") from exc

    def call(self, method: str, *args: Any, timed: bool = True) -> Any:
        """`fs.<method>(*args)`; `timed` calls on an asynchronous backend (gcsfs, s3fs) end
        after REMOTE_TIMEOUT_S."""
        timeout = {"timeout": REMOTE_TIMEOUT_S} if timed and self.fs.async_impl else {}
        try:
            return getattr(self.fs, method)(*args, **timeout)
        except InputError:
            raise
        except Exception as exc:  # any backend's error (auth, network, missing bucket)
            raise self.error(exc, "read") from exc

    def error(self, exc: BaseException, verb: str) -> InputError:
        """One line for a backend's failure, by what the user can do about it."""
        extra = _EXTRAS.get(_scheme(self.url), ("", ""))[0]
        if isinstance(exc, FileNotFoundError):
            return InputError(f"not found: {self.url} (no such bucket or path)")
        if isinstance(exc, PermissionError) or _is_auth_error(exc):
            where = f" ({_CREDENTIALS[extra]})" if extra in _CREDENTIALS else ""
            return InputError(
                f"access denied to {self.url}: {_first_line(exc)}; check the credentials{where}"
            )
        # The name test also catches Python 3.10's asyncio.TimeoutError (not yet the builtin's
        # alias), without importing asyncio into every command.
        if isinstance(exc, TimeoutError) or "Timeout" in type(exc).__name__:
            return InputError(
                f"cannot {verb} {self.url}: no answer from the storage endpoint within "
                f"{REMOTE_TIMEOUT_S:g} s"
            )
        return InputError(f"cannot {verb} {self.url}: {_first_line(exc)}")


def read_remote(url: str) -> bytes:
    """The whole file a URL names (a saved report), through fsspec: one line for any failure."""
    remote = Remote(url)
    data: bytes = remote.call("cat_file", remote.path, timed=False)
    return data


def _is_auth_error(exc: BaseException) -> bool:
    """Credentials refused or missing, as the backends raise it: botocore's NoCredentialsError,
    google.auth's errors, gcsfs's 401/403."""
    name = type(exc).__name__
    text = str(exc)
    return (
        "Credentials" in name
        or type(exc).__module__.startswith("google.auth")
        or text.startswith("Forbidden")
        or getattr(exc, "code", None) in (401, 403)
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def host_of(path: str | Path) -> str:
    """The host a file is of, as every output prints it (`printable`: a file name is bytes)."""
    name = str(path).split("::", 1)[0].rstrip("/").rsplit("/", 1)[-1]  # a chain's first URL
    host = name[: -len(XPLANE_SUFFIX)] if name.endswith(XPLANE_SUFFIX) else name.split(".")[0]
    return printable(host)


def is_nsys_archive(path: str | Path) -> bool:
    """A `.zip` file (local, or a URL's), or a directory holding `nvtx_gpu_proj_trace/`."""
    if is_url(path):
        # A chained URL's first part names the file.
        return str(path).split("::", 1)[0].lower().endswith(".zip")
    local = Path(path)
    if local.is_dir():
        return (local / NSYS_TRACE_FILE).parent.is_dir()
    return local.suffix.lower() == ".zip"


def _nsys_archives(directory: Path) -> list[Path]:
    """The directory itself when it is an unpacked nsys-jax archive, else the archives directly
    in it (one per process of a run: zips holding an nsys-jax trace, unpacked ones), by name."""
    if is_nsys_archive(directory):
        return [directory]
    import zipfile  # only where a directory may hold nsys-jax archives

    found = []
    unreadable = []
    for p in sorted(directory.iterdir()):
        if p.is_dir() and is_nsys_archive(p):
            found.append(p)
        elif p.suffix.lower() == ".zip" and p.is_file():
            try:
                with zipfile.ZipFile(p) as z:
                    if any(n.endswith(NSYS_TRACE_FILE) for n in z.namelist()):
                        found.append(p)
            except (OSError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError):
                if _zip_cut_short(p):
                    unreadable.append(p)
    # A zip cut short beside a run's archives may be one of its ranks: it is read with them, so
    # that it is refused (or skipped with a warning, --skip-bad-hosts) by name, never left out
    # in silence. A readable zip without a trace, or a file that is no zip, is something else.
    return sorted([*found, *unreadable]) if found else found


def _zip_cut_short(path: Path) -> bool:
    """A file that starts as a zip does (or is empty) but cannot be opened as one."""
    try:
        with path.open("rb") as f:
            head = f.read(4)
    except OSError:
        return True  # unreadable: named when it is read
    return b"PK\x03\x04".startswith(head)


def _xplane_files(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.iterdir() if p.name.endswith(XPLANE_SUFFIX) and p.is_file())


def _runs(profile_dir: Path) -> list[Path]:
    """Run directories holding at least one .xplane.pb, oldest first.

    jax names runs by timestamp (`2026_11_22_04_58_39`), so name order is time order.
    """
    runs = [d for d in profile_dir.iterdir() if d.is_dir() and _xplane_files(d)]
    return sorted(runs, key=lambda d: d.name)


def find_profile(
    path: str | Path, run: str | None = None, host: str | None = None
) -> ProfileSource:
    """Resolve PATH (logdir, run directory or file; local or a URL) to the files of one run."""
    if is_url(path):
        run_name, urls = _find_remote(str(path), run)
        return _select_host(ProfileSource(str(path), run_name, tuple(urls)), host)
    given = Path(path)
    try:
        if not given.exists():
            raise InputError(f"no such file or directory: {given}")
        if not given.is_dir():
            regular_file(given, "profile")
        if given.is_file():
            if run is not None:
                raise UsageError(f"--run makes no sense with a single file: {given}")
            files = [given]
            run_name = given.parent.name if given.parent.parent.name == "profile" else None
        elif not _xplane_files(given) and (archives := _nsys_archives(given)):
            if run is not None:
                raise UsageError(f"--run makes no sense with nsys-jax archives: {given}")
            files, run_name = archives, None
        else:
            run_dir = _select_run(given, run)
            run_name = run_dir.name
            files = _xplane_files(run_dir)
    except PermissionError as exc:
        raise InputError(f"permission denied: {exc.filename or given}") from exc
    return _select_host(ProfileSource(str(given), run_name, tuple(str(f) for f in files)), host)


def _select_host(source: ProfileSource, host: str | None) -> ProfileSource:
    if host is None:
        return source
    chosen = tuple(f for f in source.files if host_of(f) == printable(host))
    if not chosen:
        known = ", ".join(source.hosts) or "none"
        raise InputError(f"no host '{host}' in {source.path} (hosts: {known})")
    return ProfileSource(source.path, source.run, chosen)


def _find_remote(url: str, run: str | None) -> tuple[str | None, list[str]]:
    """The same search as for local paths, through fsspec (gs://, s3://, memory://, ...)."""
    remote = Remote(url)
    fs = remote.fs
    if remote.call("isfile", remote.path):
        return None, [url]
    root = remote.path.rstrip("/")

    def children(directory: str) -> list[str]:
        # Some fsspec backends let `*` match across `/`; keep direct children only.
        return [
            f
            for f in remote.call("glob", f"{directory}/*{XPLANE_SUFFIX}")
            if f.rsplit("/", 1)[0] == directory
        ]

    for base in (root, f"{root}/plugins/profile", f"{root}/profile"):
        if children(base):
            runs = [base]
        else:
            subdirs = (
                [d for d in remote.call("ls", base, False) if remote.call("isdir", d)]
                if remote.call("isdir", base)
                else []
            )
            runs = sorted(d.rstrip("/") for d in subdirs if children(d.rstrip("/")))
        if not runs:
            continue
        if run is None:
            chosen = runs[-1]
        else:
            chosen = next((r for r in runs if r.rsplit("/", 1)[-1] == run), "")
            if not chosen:
                names = ", ".join(r.rsplit("/", 1)[-1] for r in runs)
                raise InputError(f"no run '{run}' in {url} (runs: {names})")
        files = sorted(children(chosen))
        # A chained URL (`zip://run::file://x.zip`) keeps its chain: fsspec strips it.
        chain = url[url.index("::") :] if "::" in url else ""
        return chosen.rsplit("/", 1)[-1], [fs.unstrip_protocol(f) + chain for f in files]
    if not remote.call("exists", root):  # backends list a missing bucket as empty
        raise InputError(f"not found: {url} (no such bucket or path)")
    raise InputError(f"no profile found in {url} (expected plugins/profile/<run>/*.xplane.pb)")


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


def refuse_to_overwrite(output: Path, files: Sequence[str | Path]) -> None:
    """hlogap never writes into a profile: not onto a file it read (`files`: profiles, chip
    files, baselines; through links too), not into the logdir (or run directory) it read
    from, and nowhere under any logdir's `plugins/` tree or onto any `.xplane.pb`, whoever's
    they are."""
    if str(output) == "-" or is_url(output):
        return
    local = [Path(f).resolve() for f in files if not is_url(f)]
    target = output.resolve()
    if target in local:
        raise UsageError(f"refusing to write over a file it reads: {output}")
    if target.name.endswith(XPLANE_SUFFIX):
        raise UsageError(f"refusing to write over a profile file: {output}")
    for ancestor in target.parents:  # a logdir's plugins/ tree, where TensorBoard looks
        if ancestor.name == "plugins" and (ancestor / "profile").is_dir():
            raise UsageError(
                f"refusing to write into the profile directory {ancestor}: {output} "
                "(hlogap never writes into a profile; choose a path outside it)"
            )
    for f in local:
        if f.is_dir() and target.is_relative_to(f):  # an unpacked nsys-jax archive
            raise UsageError(
                f"refusing to write into the profile directory {f}: {output} "
                "(hlogap never writes into a profile; choose a path outside it)"
            )
        if f.name.endswith(XPLANE_SUFFIX) and target.is_relative_to(root := _logdir_of(f)):
            raise UsageError(
                f"refusing to write into the profile directory {root}: {output} "
                "(hlogap never writes into a profile; choose a path outside it)"
            )


def _logdir_of(xplane: Path) -> Path:
    """The profile directory a profile file lies in, as wide as it surely goes: the logdir of
    TensorBoard's layout (`LOGDIR/plugins/profile/<run>/`), the `profile` directory of a
    `profile/<run>/` one (its parent may be anything, a home directory), else its run
    directory."""
    run = xplane.parent
    if run.parent.name != "profile":
        return run
    return run.parent.parent.parent if run.parent.parent.name == "plugins" else run.parent
