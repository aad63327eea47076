"""nsys-jax archives (NVIDIA JAX-Toolbox): Nsight Systems' NVTX ranges plus XLA's dumps.

An archive is a `.zip` (or the directory it unpacks to) holding:
- `nvtx_gpu_proj_trace/trace.parquet`: NVTX ranges projected onto GPU time (ns). XLA opens
  `Thunk:#[name=...,]hlo_op=<instruction>#` around each thunk it runs and
  `XlaModule:#[prefix=...,]hlo_module=<name>,program_id=N#` around each module execution; a
  range's projection runs from the first to the last GPU operation launched inside it.
  nsys-jax-combine writes one file per process under a `trace.parquet/` directory instead.
- `thread-metadata.parquet` (newer nsys-jax): `XlaLauncher:#global=G,...#` names the thread
  that drives each GPU.
- `dump/module_NNNN.<name>.*after_optimizations.hlo.pb.xz`: each module's optimized HloProto
  (NNNN is its program id); `*.gpu_target_config.pbtxt.xz`: the device's description.

Ops are thunk ranges, occurrences their executions inside one module execution on one GPU,
devices the GPUs (a launcher thread each), executions the module ranges. Thunk ranges nest:
a range inside a range of the same op is part of it (the cuBLAS thunk opens a second one), and
a range holding other ops' ranges (a while loop, a command buffer traced per node) is a
container whose time is theirs; the rest are timed. The parquet files are read with pyarrow
(the `nsys` extra); nothing is ever written into the archive.
"""

from __future__ import annotations

import io
import lzma
import math
import re
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from hlogap.errors import InputError
from hlogap.source import NSYS_TRACE_FILE, Remote, is_url
from hlogap.trace.model import (
    MAX_TIME_PS,
    OpKey,
    Step,
    TraceBuilder,
    TraceData,
    distinct_rows,
)

THREAD_METADATA = "thread-metadata.parquet"
NEEDS_PYARROW = "reading nsys-jax archives needs pyarrow: pip install 'hlogap[nsys]'"

# Range names. Newer Nsight Systems drop the `TSL:` domain prefix from the text.
_THUNK = re.compile(r"^(?:TSL:)?Thunk:#(?:.*,)?hlo_op=([^,#]+)#$", re.DOTALL)
# XLA's module annotation built from a name alone (an executable without its HloModule) has
# no closing `#`.
_MODULE = re.compile(
    r"^(?:TSL:)?XlaModule:#(?:.*,)?hlo_module=([^,#]+)(?:,program_id=(\d+))?#?$", re.DOTALL
)
# XLA's autotuner measuring candidates for one instruction while it compiles
# (`XlaAutotunerMeasurement:#hlo_op=gemm_fusion_dot.411#`): the GEMM fusion autotuner runs each
# candidate as a module of its own (the fusion extracted into a module named after it) inside
# the range; cuBLAS's algorithm picker runs its kernels there without module or thunk ranges.
_AUTOTUNER = re.compile(r"^(?:TSL:)?XlaAutotunerMeasurement(?::|$)")
# A step annotation (jax.profiler.StepTraceAnnotation, TraceMe `name#step_num=N,...#`).
_STEP = re.compile(r"#(?:.*,)?step_num=(\d+)(?:,.*)?#$", re.DOTALL)
_LAUNCHER = re.compile(r"^(?:TSL:)?XlaLauncher:#global=(\d+),")
# Step numbers and global device ids are int64 in XLA and in the columns here.
_MAX_INT64 = (1 << 63) - 1
# The largest ns count whose picoseconds stay within MAX_TIME_PS: checked before multiplying
# (an int64 multiply wraps silently, e.g. 2**62 ns x 1000 is 0).
_MAX_TIME_NS = MAX_TIME_PS // 1000
_TARGET_CONFIG = re.compile(r"\.gpu_target_config\.pbtxt(\.xz)?$")

# Column names across the parquet layouts nsys-jax has written: (projected start, duration)
# in ns, or (Start, End) in ns in the layout without projections' own names.
_COLUMNS = {
    "name": ("Name", "Text"),
    "range": ("RangeId", "Range ID"),
    "parent": ("ParentId", "Parent ID"),
    "tid": ("TID",),
}
# Every column `_read_ranges` reads, under any of its names.
_READ_COLUMNS = {
    *(name for names in _COLUMNS.values() for name in names),
    "Domain",
    "Projected Start",
    "Projected Duration",
    "Start",
    "End",
    "PID",
    "Rank",
    "NumGPUOps",
}
# Ranges nest a few levels (module > while > thunk > NCCL); a longer chain is corrupt data.
MAX_NESTING = 256


class _Archive:
    """The members of a zip or of an unpacked directory, by their path inside the archive."""

    def __init__(self, path: str | Path, zipped: zipfile.ZipFile | None) -> None:
        self.path = path
        self._zip = zipped
        if zipped is not None:
            self.names = [i.filename for i in zipped.infolist() if not i.is_dir()]
        else:
            self.names = [
                p.relative_to(path).as_posix() for p in sorted(Path(path).rglob("*")) if p.is_file()
            ]

    def read(self, name: str) -> bytes:
        try:
            if self._zip is not None:
                return self._zip.read(name)
            return (Path(self.path) / name).read_bytes()
        except (OSError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as exc:
            raise InputError(f"cannot read {name} in {self.path}: {exc}") from exc


@contextmanager
def _open(path: str | Path) -> Iterator[_Archive]:
    """A local zip or unpacked directory, or a zip a URL names (read through fsspec, its
    members fetched as they are read)."""
    if is_url(path):
        remote = Remote(str(path))
        with remote.call("open", remote.path, "rb", timed=False) as f, _zip(f, path) as zipped:
            yield _Archive(str(path), zipped)
        return
    path = Path(path)
    if path.is_dir():
        yield _Archive(path, None)
        return
    with _zip(path, path) as zipped:
        yield _Archive(path, zipped)


def _zip(file: Path | BinaryIO, path: str | Path) -> zipfile.ZipFile:
    """The zip a file holds (`path` names it in errors)."""
    try:
        return zipfile.ZipFile(file)
    except zipfile.BadZipFile as exc:
        raise InputError(f"corrupt nsys-jax archive (not a zip file): {path}") from exc
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc


def read_archive(path: str | Path, host: str) -> TraceData:
    """The op events of one nsys-jax archive (one process: its GPUs are its devices)."""
    try:
        import pyarrow.parquet  # noqa: F401  (checked before the archive is opened)
    except ImportError as exc:
        raise InputError(NEEDS_PYARROW) from exc
    archive_path = path if is_url(path) else Path(path)
    with _open(archive_path) as archive:
        traces = [n for n in archive.names if _is_trace_member(n)]
        if not traces:
            raise InputError(f"no {NSYS_TRACE_FILE} in {archive_path}: not an nsys-jax archive")
        prefix = traces[0][: traces[0].index(NSYS_TRACE_FILE)]
        ranges = _Ranges.concat([_read_ranges(archive, name) for name in sorted(traces)])
        launchers = _launcher_devices(archive, prefix)
        builder = TraceBuilder(host)
        builder.events_are_runs = True  # a thunk range per run of its op
        warnings = _timeline(ranges, launchers, _device_stats(archive, prefix), builder)
        if not builder.op_ids:
            raise InputError(
                f"no XLA thunk ranges (Thunk:#hlo_op=...#) inside module executions in "
                f"{archive_path}: was the program run under nsys-jax with XLA's NVTX ranges?"
            )
        _read_modules(archive, prefix, builder, warnings)
    return builder.finish("gpu", warnings)


def _is_trace_member(name: str) -> bool:
    """The trace file, or one process's file in nsys-jax-combine's `trace.parquet/`."""
    at = name.find(NSYS_TRACE_FILE)
    if at < 0 or (at > 0 and name[at - 1] != "/"):
        return False
    rest = name[at + len(NSYS_TRACE_FILE) :]
    return rest == "" or (rest.startswith("/") and "/" not in rest[1:] and len(rest) > 1)


@dataclass
class _Ranges:
    """NVTX ranges in columns; `parent` indexes rows (-1: none)."""

    name: list[str]  # distinct names
    name_code: np.ndarray  # int64 per row, into `name`
    start_ns: np.ndarray  # int64
    duration_ns: np.ndarray  # int64
    parent: np.ndarray  # int64
    process: np.ndarray  # int64: the rank (or PID where there is no rank)
    pid: np.ndarray  # int64
    tid: np.ndarray  # int64
    gpu_ops: np.ndarray  # int64; -1 where the layout does not count them

    @staticmethod
    def concat(parts: list[_Ranges]) -> _Ranges:
        """Several processes' ranges as one table (row and name indices shifted)."""
        names: list[str] = []
        codes, parents = [], []
        rows = 0
        for part in parts:
            codes.append(part.name_code + len(names))
            parents.append(np.where(part.parent >= 0, part.parent + rows, -1))
            names += part.name
            rows += len(part.name_code)

        def joined(column: str) -> np.ndarray:
            return np.concatenate([getattr(p, column) for p in parts])

        return _Ranges(
            names,
            np.concatenate(codes),
            joined("start_ns"),
            joined("duration_ns"),
            np.concatenate(parents),
            joined("process"),
            joined("pid"),
            joined("tid"),
            joined("gpu_ops"),
        )


def _read_ranges(archive: _Archive, member: str) -> _Ranges:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        data = io.BytesIO(archive.read(member))
        # Only the columns read below: the others (nesting level, range stacks, styles,
        # original times) were 40% of the table a 1 M-range trace decodes to.
        schema = pq.read_schema(data)
        wanted = [n for n in schema.names if n in _READ_COLUMNS]
        # The range names as the file keeps them, a dictionary of the few distinct ones: as
        # strings, the 1 M names of a long capture took 400 MB to decode.
        as_dictionary = [
            n for n in _COLUMNS["name"] if n in wanted and pa.types.is_string(schema.field(n).type)
        ]
        table = pq.read_table(data, columns=wanted, read_dictionary=as_dictionary)
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"corrupt parquet {member} in {archive.path}: {exc}") from exc
    have = set(table.column_names)

    def column(key: str) -> str:
        found = next((c for c in _COLUMNS[key] if c in have), None)
        if found is None:
            raise InputError(
                f"{member} in {archive.path} has no {' or '.join(_COLUMNS[key])} column "
                "(not an nsys-jax trace)"
            )
        return found

    def ints(name: str, missing: int = -1) -> np.ndarray:
        if name not in have:
            return np.full(table.num_rows, missing, dtype=np.int64)
        try:  # an all-null column has type null: cast first, then fill
            values = pc.fill_null(pc.cast(table.column(name), pa.int64()), missing)
        except pa.ArrowException as exc:
            raise InputError(f"bad {name} column in {member} of {archive.path}: {exc}") from exc
        return np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.int64)

    def texts(name: str) -> Any:
        try:
            return pc.fill_null(pc.cast(table.column(name), pa.string()), "")
        except pa.ArrowException as exc:
            raise InputError(f"bad {name} column in {member} of {archive.path}: {exc}") from exc

    name = column("name")
    if "Domain" in have:  # the 2026 layout keeps the domain apart: `TSL` + `Thunk:#...#`
        text = pc.binary_join_element_wise(texts("Domain"), texts(name), ":")
        encoded = pc.dictionary_encode(text).combine_chunks()
        names = [str(n) for n in encoded.dictionary.to_pylist()]
        codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    elif pa.types.is_dictionary(table.column(name).type):
        names, codes = _first_seen(table.column(name).unify_dictionaries().combine_chunks())
    else:
        encoded = pc.dictionary_encode(texts(name)).combine_chunks()
        names = [str(n) for n in encoded.dictionary.to_pylist()]
        codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    if "Projected Start" in have and "Projected Duration" in have:
        start, duration = ints("Projected Start"), ints("Projected Duration")
    elif "Start" in have and "End" in have:
        start, end = ints("Start"), ints("End")
        # End - Start wraps int64 where either is past +-2**62: such a row gets a duration no
        # range can have, refused if it is ever timed (`_ps`), harmless if it is not.
        far = (start > 1 << 62) | (start < -(1 << 62)) | (end > 1 << 62) | (end < -(1 << 62))
        duration = np.where(far, np.int64(_MAX_INT64), end - np.where(far, 0, start))
    else:
        raise InputError(
            f"{member} in {archive.path} has no Projected Start/Duration or Start/End "
            "columns (not an nsys-jax trace)"
        )
    range_id = ints(column("range"))
    parent_id = ints(column("parent"))
    pid = ints("PID", 0)
    rank = ints("Rank")
    process = np.where(rank >= 0, rank, pid)
    return _Ranges(
        names,
        codes,
        start,
        duration,
        _parent_rows(range_id, parent_id),
        process,
        pid,
        ints(column("tid")),
        ints("NumGPUOps"),
    )


def _first_seen(names: Any) -> tuple[list[str], np.ndarray]:
    """A dictionary column's distinct names (a null read as "") and each row's code, numbered
    in the order the rows first show them, as `dictionary_encode` of the decoded strings
    numbers them (the ops are interned in that order)."""
    values = [str(v) if v is not None else "" for v in names.dictionary.to_pylist()] + [""]
    rows = np.asarray(
        names.indices.fill_null(len(values) - 1).to_numpy(zero_copy_only=False), dtype=np.int64
    )
    # Equal strings are one name (a null and an empty string: both "").
    distinct: dict[str, int] = {}
    same = np.array([distinct.setdefault(v, len(distinct)) for v in values], dtype=np.int64)
    code = same[rows]
    seen, first = np.unique(code, return_index=True)
    order = np.argsort(first, kind="stable")
    renumber = np.empty(len(distinct), dtype=np.int64)
    renumber[seen[order]] = np.arange(len(order))
    text = list(distinct)
    return [text[c] for c in seen[order].tolist()], renumber[code]


def _parent_rows(range_id: np.ndarray, parent_id: np.ndarray) -> np.ndarray:
    """Each row's parent as a row index (-1: none, or a parent the file does not hold)."""
    order = np.argsort(range_id, kind="stable")
    ids = range_id[order]
    at = np.minimum(np.searchsorted(ids, parent_id), max(len(ids) - 1, 0))
    found = (parent_id >= 0) & (len(ids) > 0)
    if len(ids):
        found &= ids[at] == parent_id
    rows: np.ndarray = np.where(found, order[at] if len(ids) else -1, -1)
    return rows


@dataclass(frozen=True)
class _Kinds:
    """What each distinct range name is."""

    thunk_op: np.ndarray  # int64 per name: index into `ops`, -1 if not a thunk
    ops: list[str]
    module: np.ndarray  # int64 per name: index into `modules`, -1 if not a module
    modules: list[tuple[str, str]]  # (module name, program id)
    step: np.ndarray  # int64 per name: the step number, -1 if not a step annotation
    autotuner: np.ndarray  # bool per name: an `XlaAutotunerMeasurement` range


def _kinds(names: list[str]) -> _Kinds:
    thunk_op = np.full(len(names), -1, dtype=np.int64)
    module = np.full(len(names), -1, dtype=np.int64)
    step = np.full(len(names), -1, dtype=np.int64)
    autotuner = np.zeros(len(names), dtype=bool)
    ops: dict[str, int] = {}
    modules: dict[tuple[str, str], int] = {}
    for i, name in enumerate(names):
        if m := _THUNK.match(name):
            thunk_op[i] = ops.setdefault(m.group(1), len(ops))
        elif m := _MODULE.match(name):
            module[i] = modules.setdefault((m.group(1), m.group(2) or ""), len(modules))
        elif _AUTOTUNER.match(name):
            autotuner[i] = True
        elif m := _STEP.search(name):
            number = int(m.group(1))
            if number > _MAX_INT64:
                raise InputError(
                    f"corrupt nsys-jax trace: a step range's step_num {_cut(m.group(1))} "
                    "does not fit in 64 bits"
                )
            step[i] = number
    return _Kinds(thunk_op, list(ops), module, list(modules), step, autotuner)


def _timeline(
    ranges: _Ranges,
    launchers: dict[tuple[int, int], int],
    stats: dict[str, object],
    builder: TraceBuilder,
) -> list[str]:
    """Add the timed thunk ranges to `builder`, one device at a time; returns warnings."""
    kinds = _kinds(ranges.name)
    op_of = kinds.thunk_op[ranges.name_code]
    module_kind = kinds.module[ranges.name_code]
    ran = (ranges.gpu_ops != 0) & (ranges.duration_ns >= 0)
    is_thunk = (op_of >= 0) & ran
    is_module = module_kind >= 0
    module_row, thunk_parent = _ancestors(ranges.parent, is_module, is_thunk)
    timed = is_thunk & (module_row >= 0)
    warnings = []
    # The autotuner's work: module executions (and stray thunk ranges) inside its ranges.
    is_autotuner = kinds.autotuner[ranges.name_code]
    autotuning = np.zeros(len(ranges.parent), dtype=bool)
    if is_autotuner.any():
        looked_at = np.flatnonzero(is_module | (is_thunk & (module_row < 0)))
        autotuning[looked_at] = _under(ranges.parent, is_autotuner, looked_at)
    orphans = int((is_thunk & (module_row < 0) & ~autotuning).sum())
    if orphans:
        warnings.append(
            f"{orphans} thunk ranges outside any module execution left out "
            "(the profile began or ended inside one)"
        )
    timed &= ~_inside_same_op(thunk_parent, op_of) & ~_containers(thunk_parent, op_of)
    name_of = np.array([name for name, _ in kinds.modules] or [""], dtype=object)
    tuned, mixed = _autotuning_modules(name_of, module_kind, is_module, autotuning)
    builder.autotuning_modules = tuned
    if mixed:
        # A name the program's modules also have: the candidates' events are left out, so that
        # every event of a module named in `autotuning_modules` is the autotuner's.
        in_execution = np.flatnonzero(timed)
        execution = module_row[in_execution]
        drop = autotuning[execution] & np.isin(name_of[module_kind[execution]], sorted(mixed))
        timed[in_execution[drop]] = False
        warnings.append(
            f"{int(drop.sum())} thunk ranges of the autotuner's runs of modules the program "
            f"also runs ({', '.join(sorted(mixed))}) left out"
        )
    if not timed.any():
        return warnings
    rows = np.flatnonzero(timed)
    module_of = module_row[rows]
    device_of = _devices(ranges, module_row, timed, launchers)
    # One op per (instruction, module): interned once per distinct pair, not per range.
    per_module = max(len(kinds.modules), 1)
    pairs, pair_of = np.unique(
        op_of[rows] * per_module + module_kind[module_of], return_inverse=True
    )
    op_ids = np.empty(len(pairs), dtype=np.int64)
    for k, pair in enumerate(pairs.tolist()):
        name, program_id = kinds.modules[pair % per_module]
        op_ids[k] = builder.op(OpKey(name, program_id, kinds.ops[pair // per_module]))
        builder.module_names[program_id] = name
    op_ids = op_ids[pair_of.ravel()]
    # The archive has no GPU streams: a range is on the host thread that opened it, projected
    # onto the GPU's time; that thread is its line.
    thread_of = ranges.tid[rows]
    for ordinal in sorted(set(device_of.tolist())):
        device = builder.new_device(f"/device:GPU:{ordinal}", ordinal, stats)
        on_device = device_of == ordinal
        for thread in np.unique(thread_of[on_device]).tolist():
            mine = on_device & (thread_of == thread)
            builder.add_line(
                device,
                op_ids[mine],
                _ps(ranges.start_ns[rows[mine]], "thunk range start times", builder.host),
                _ps(ranges.duration_ns[rows[mine]], "thunk range durations", builder.host),
                gpu=True,
                execution=module_of[mine],
                line=f"thread {thread}",
            )
    builder.steps = _steps(ranges, kinds, ran, builder.host)
    return warnings


def _ps(ns: np.ndarray, what: str, host: str) -> np.ndarray:
    """Nanoseconds as picoseconds, refused (exit 3) where one is past MAX_TIME_PS: checked
    before the multiply, which would wrap int64 without a word."""
    if len(ns) and (int(ns.max()) > _MAX_TIME_NS or int(ns.min()) < -_MAX_TIME_NS):
        raise InputError(f"corrupt profile: {what} on host {host} beyond 27 days (2**61 ps)")
    ps: np.ndarray = ns * 1000
    return ps


def _cut(digits: str) -> str:
    """A number from the trace, cut for a one-line message."""
    return digits if len(digits) <= 24 else f"{digits[:24]}... ({len(digits)} digits)"


def _under(parent: np.ndarray, mark: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per row of `rows`: whether a range marked in `mark` encloses it (climbed level by level
    for all of them at once)."""
    found = np.zeros(len(rows), dtype=bool)
    at = np.arange(len(rows))
    above = parent[rows]
    for _ in range(MAX_NESTING):
        going = above >= 0
        at, above = at[going], above[going]
        if not len(at):
            break
        hit = mark[above]
        found[at[hit]] = True
        at, above = at[~hit], parent[above[~hit]]
    else:
        raise InputError("corrupt nsys-jax trace: NVTX ranges nest in a cycle")
    return found


def _autotuning_modules(
    name_of: np.ndarray, module_kind: np.ndarray, is_module: np.ndarray, autotuning: np.ndarray
) -> tuple[set[str], set[str]]:
    """The names of the modules that ran only inside the autotuner's ranges, and of those that
    ran both inside and outside them. By name, not (name, program id): `--module` selects by
    name, and a candidate may differ from a module of the program in its program id alone."""
    inside = set(name_of[np.unique(module_kind[is_module & autotuning])].tolist())
    if not inside:
        return set(), set()
    outside = set(name_of[np.unique(module_kind[is_module & ~autotuning])].tolist())
    return inside - outside, inside & outside


def _ancestors(
    parent: np.ndarray, is_module: np.ndarray, is_thunk: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the nearest enclosing module range, and the nearest thunk range enclosing it
    below that module (-1 where none). Climbed level by level for all rows at once."""
    module_row = np.full(len(parent), -1, dtype=np.int64)
    thunk_parent = np.full(len(parent), -1, dtype=np.int64)
    rows = np.flatnonzero(parent >= 0)
    above = parent[rows]
    for _ in range(MAX_NESTING):
        if not len(rows):
            break
        reached = is_module[above]
        module_row[rows[reached]] = above[reached]
        first_thunk = is_thunk[above] & (thunk_parent[rows] < 0)
        thunk_parent[rows[first_thunk]] = above[first_thunk]
        going = ~reached & (parent[above] >= 0)
        rows, above = rows[going], parent[above[going]]
    else:
        raise InputError("corrupt nsys-jax trace: NVTX ranges nest in a cycle")
    return module_row, thunk_parent


def _inside_same_op(thunk_parent: np.ndarray, op_of: np.ndarray) -> np.ndarray:
    """Thunk ranges directly inside a range of the same op: part of it, not timed apart."""
    inner = thunk_parent >= 0
    inner[inner] = op_of[thunk_parent[inner]] == op_of[inner]
    return inner


def _containers(thunk_parent: np.ndarray, op_of: np.ndarray) -> np.ndarray:
    """Thunk ranges that hold another op's range, directly or inside ranges of their own op
    (a while loop, a command buffer traced node by node): their time is their contents'."""
    holder = np.zeros(len(thunk_parent), dtype=bool)
    child = np.flatnonzero((thunk_parent >= 0) & (op_of >= 0))  # NCCL ranges hold nothing
    outer = thunk_parent[child]
    other = op_of[outer] != op_of[child]
    child, outer = child[other], outer[other]
    for _ in range(MAX_NESTING):  # a same-op chain: every range of it holds the child
        if not len(outer):
            break
        holder[outer] = True
        up = thunk_parent[outer]
        same = (up >= 0) & (op_of[np.maximum(up, 0)] == op_of[outer])
        outer = up[same]
    return holder


def _devices(
    ranges: _Ranges,
    module_row: np.ndarray,
    timed: np.ndarray,
    launchers: dict[tuple[int, int], int],
) -> np.ndarray:
    """The GPU ordinal of each timed row, from the thread that ran its module execution.

    With `thread-metadata.parquet`, each launcher thread names its GPU. Without it (nsys-jax
    before 2025), a process that drives several GPUs runs a module on one thread per GPU,
    created in device order: those threads, by thread id, are its GPUs; a module run on a
    single thread (the main thread's small jits) ran on the process's first GPU, as XLA's
    default device. Processes are numbered by rank, their GPUs one after another.
    """
    execution_rows = module_row[timed]
    process = ranges.process[execution_rows]
    tid = ranges.tid[execution_rows]
    # Per distinct (process, PID, thread) of the executions, not per range: they are few.
    # distinct_rows, not np.unique(axis=1): that sorts row views, 2.4 s of a 5.3 s audit of
    # an archive of 1 M thunk ranges.
    threads, thread_of = distinct_rows([process, ranges.pid[execution_rows], tid])
    keys: list[tuple[int, int, int]] = [(p, q, t) for p, q, t in threads.tolist()]
    if launchers:
        first = min(launchers.values())
        ordinals = [launchers.get((q, t), first) for _, q, t in keys]
    else:
        # Which modules ran on several threads of a process: those threads drive a GPU each.
        runs, _ = distinct_rows([process, ranges.name_code[execution_rows], tid])
        threads_of: dict[tuple[int, int], set[int]] = {}
        for proc, name, thread in runs.tolist():
            threads_of.setdefault((proc, name), set()).add(thread)
        launcher_tids: dict[int, set[int]] = {}
        for (proc, _), tids in threads_of.items():
            if len(tids) > 1:
                launcher_tids.setdefault(proc, set()).update(tids)
        first_of: dict[int, int] = {}  # process -> its first GPU's ordinal
        local: dict[tuple[int, int], int] = {}  # (process, launcher thread) -> ordinal
        offset = 0
        for proc in sorted({p for p, _, _ in keys}):
            launching = sorted(launcher_tids.get(proc, set()))
            local.update({(proc, t): offset + k for k, t in enumerate(launching)})
            first_of[proc] = offset
            offset += max(len(launching), 1)
        ordinals = [local.get((p, t), first_of[p]) for p, _, t in keys]
    result: np.ndarray = np.asarray(ordinals, dtype=np.int64)[thread_of]
    return result


def _steps(ranges: _Ranges, kinds: _Kinds, ran: np.ndarray, host: str) -> list[Step]:
    """Step annotations projected onto the GPUs (one span per step number)."""
    number = kinds.step[ranges.name_code]
    rows = np.flatnonzero((number >= 0) & ran & (ranges.gpu_ops != 0))
    starts = _ps(ranges.start_ns[rows], "step range start times", host).tolist()
    durations = _ps(ranges.duration_ns[rows], "step range durations", host).tolist()
    spans: dict[int, tuple[int, int]] = {}
    for row, start, duration in zip(rows.tolist(), starts, durations, strict=True):
        end = start + duration
        first, last = spans.get(int(number[row]), (start, end))
        spans[int(number[row])] = (min(first, start), max(last, end))
    return [Step(n, "annotation", a, b) for n, (a, b) in sorted(spans.items(), key=lambda x: x[1])]


def _launcher_devices(archive: _Archive, prefix: str) -> dict[tuple[int, int], int]:
    """(PID, TID) -> global GPU id, from `thread-metadata.parquet` where the archive has it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    found: dict[tuple[int, int], int] = {}
    meta = prefix + THREAD_METADATA
    for member in (n for n in archive.names if n == meta or n.startswith(meta + "/")):
        try:
            table = pq.read_table(io.BytesIO(archive.read(member))).to_pydict()
        except (pa.ArrowException, OSError) as exc:
            raise InputError(f"corrupt parquet {member} in {archive.path}: {exc}") from exc
        if not {"Name", "PID", "TID"} <= table.keys():
            continue
        for name, pid, tid in zip(table["Name"], table["PID"], table["TID"]):
            m = _LAUNCHER.match(name or "")
            if m and pid is not None and tid is not None:
                device = int(m.group(1))
                if device > _MAX_INT64:
                    raise InputError(
                        f"corrupt {member} in {archive.path}: launcher thread {tid} names "
                        f"global device {_cut(m.group(1))}, which does not fit in 64 bits"
                    )
                found[(int(pid), int(tid))] = device
    return found


def _device_stats(archive: _Archive, prefix: str) -> dict[str, object]:
    """The GPU's description from XLA's target config, as the device-plane stats of an xprof
    GPU trace (`device_vendor`, `compute_cap_major/minor`, `core_count`, `memory_size`,
    `clock_rate` in kHz, `memory_bandwidth`): chip detection reads those."""
    dump = prefix + "dump/"
    for name in sorted(n for n in archive.names if n.startswith(dump)):
        if not _TARGET_CONFIG.search(name):
            continue
        try:
            text = _unpacked(archive, name).decode("utf-8", errors="replace")
        except InputError:
            continue
        return _target_stats(text, f"{name} in {archive.path}")
    return {}


# The fields read from XLA's GpuDeviceInfoProto and the largest value of each one's type
# (int32, int64; the float clock rate, in kHz here, must fit the int64 stat it becomes).
_TARGET_FIELDS = (
    ("core_count", "core_count", 1.0, (1 << 31) - 1),
    ("device_memory_size", "memory_size", 1.0, _MAX_INT64),
    ("memory_bandwidth", "memory_bandwidth", 1.0, _MAX_INT64),
    ("clock_rate_ghz", "clock_rate", 1e6, _MAX_INT64),
)


def _target_stats(text: str, source: str = "the GPU target config") -> dict[str, object]:
    def number(key: str) -> tuple[str, float] | None:
        m = re.search(rf"\b{key}:\s*([0-9.eE+-]+)", text)
        try:
            return (m.group(1), float(m.group(1))) if m else None
        except ValueError:
            return None

    def corrupt(key: str, written: str) -> InputError:
        return InputError(f"corrupt {source}: {key} {_cut(written)} is out of range")

    stats: dict[str, object] = {}
    cuda = re.search(r"cuda_compute_capability\s*\{([^}]*)\}", text)
    rocm = re.search(r'gcn_arch_name:\s*"gfx(\d+)([0-9a-f])[0-9a-f]', text)
    if cuda:
        stats["device_vendor"] = "Nvidia"
        for part in ("major", "minor"):
            m = re.search(rf"{part}:\s*(\d+)", cuda.group(1))
            # Text format leaves out fields at their default, 0.
            level = int(m.group(1)) if m else 0
            if level >= 1 << 31:  # int32 in the proto
                raise corrupt(f"cuda_compute_capability {part}", str(level))
            stats[f"compute_cap_{part}"] = level
    elif rocm:
        stats["device_vendor"] = "AMD"
        stats["compute_cap_major"] = int(rocm.group(1))
        stats["compute_cap_minor"] = int(rocm.group(2), 16)
    for key, stat, scale, largest in _TARGET_FIELDS:
        found = number(key)
        if found is not None:
            written, value = found
            scaled = value * scale
            # Compared as floats: inf, NaN and values past the type's range are refused.
            if not (math.isfinite(scaled) and 0 <= scaled <= float(largest)):
                raise corrupt(key, written)
            stats[stat] = min(int(scaled), largest)
    description = re.search(r'device_description_str:\s*"([^"]*)"', text)
    if description:
        stats["device_name"] = description.group(1)
    return stats


def _read_modules(
    archive: _Archive, prefix: str, builder: TraceBuilder, warnings: list[str]
) -> None:
    """The optimized HloProto of every module that ran, from `dump/` (found by program id and
    name: `module_NNNN.<name>.`, the after-optimizations proto)."""
    dump = prefix + "dump/"
    protos = [
        n
        for n in archive.names
        if n.startswith(dump)
        and re.search(r"after_optimizations\.hlo\.pb(\.xz)?$", n)
        and "/" not in n[len(dump) :]
    ]
    wanted = {(k.module, k.program_id) for k in builder.op_ids}
    for module, program_id in sorted(wanted):
        head = f"{dump}module_{int(program_id):04d}.{module}." if program_id else None
        found = [n for n in protos if head and n.startswith(head)] or [
            n for n in protos if not program_id and f".{module}." in n
        ]
        if not found:
            if module not in builder.autotuning_modules:  # XLA dumps no candidate modules
                warnings.append(f"no optimized HLO dump for module {module} in {archive.path}")
            continue
        try:
            builder.modules[(module, program_id)] = _unpacked(archive, found[0])
        except InputError as exc:
            warnings.append(str(exc))


def _unpacked(archive: _Archive, name: str) -> bytes:
    data = archive.read(name)
    if not name.endswith(".xz"):
        return data
    try:
        return lzma.decompress(data)
    except lzma.LZMAError as exc:
        raise InputError(f"corrupt xz file {name} in {archive.path}: {exc}") from exc
