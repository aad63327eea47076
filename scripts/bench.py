"""`make bench`: hlogap against xprof's own converter on large profiles built from a real one.

A real GPU trace (the MI300X profile in ../shared/fixtures, or a committed CPU fixture when that
is absent) is scaled up by repeating the events of its op lines N times, each copy shifted past
the previous one, to ~0.3, 1, 3 and 10 M events; the 3 M file is also audited on one core
(`taskset -c 0`, `--jobs 1`: ms/MB); the MI355X trace (one kernel stream) and the TPU v6e
profile are scaled to ~3 M events and a committed CPU fixture to ~1 M; NVIDIA's nsys-jax
archive (MaxText on 4 H100s) is audited as recorded, read in place, and scaled to ~1 M NVTX
ranges by repeating its trace's rows (with pyarrow, the `nsys` extra; both skipped where the
archive is absent). `--cases NAME ...` picks cases by their names in the table. In the same
run, on the same file:
- `hlogap audit FILE --format json` (the CLI, as a user runs it), and
- xprof's converter `xspace_to_tool_data([FILE], "hlo_stats", {})` on a fresh copy of the file
  in its own directory (xprof writes a cache file beside its input).
Each command runs in a child process, hlogap and xprof in turn (a slow spell of the machine
falls on both); wall time and that child's peak RSS (os.wait4) are taken.
The pod case (issues 14, 33) audits runs of 4, 32, 128 and 256 hosts of ~50 MB each with the
local process pool and with `--cluster local:2` (`--pod-executors` picks): one scaled file
written again with a few clock offsets and once with its events 1.5x as long (a slow host),
hard-linked under every host's name (the disk holds a few copies). It takes the hlogap
process's own peak (the client: it holds only summaries, the hosts' columns being on the
workers' or the readers' disk) and each worker's, and checks in the report that every host's
offset is recovered and the slow hosts are named.
HLO decode vs upb parse (issue 43, when the nsys-jax archive is present): in this process, every
optimized HloProto of the archive (xz-decompressed first, untimed) parsed by upb
(`ParseFromString`) and decoded into hlogap's IR (`decode_hlo_proto`, which parses too), best
of N, taking turns; the previous turn's IR is freed before the clock starts.
Head to head (`--against REV`, issue 43): commit REV's hlogap is pip-installed from `git archive`
into a directory of its own under the temporary directory (this checkout is only read), and
both versions run `python -m hlogap audit FILE --format json --top 0` on the same files, in
turn (which goes first alternates), from the same interpreter and dependencies: best wall of
N, the peak total and the ratio per case (`--against-only`: that table, and the decode
unless `--no-decode`, instead of the xprof and pod tables).
`make test` (`--suite`, on by default in a full run): CI's test command in a fresh clone of
HEAD with ../shared beside it, timed from nothing (its venv built there).
Issue 43's targets, each as this run measured it, are printed last and written to the doc.
`--write-docs` rewrites the tables in docs/performance.md, each with the command that made it.
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import io
import lzma
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hlogap.proto import xplane_pb2  # noqa: E402

REAL_GPU = ROOT.parent / "shared" / "fixtures" / "amd-gpu" / "mi300x_conv3d.xplane.pb"
# Its kernels are on one stream: scaled, one line of 3 M events (a long capture of one stream).
ONE_LINE_GPU = ROOT.parent / "shared" / "fixtures" / "amd-gpu" / "mi355x_te_attention.xplane.pb"
NSYS_TRACE = "nvtx_gpu_proj_trace/trace.parquet"
XPROF_SNIPPET = (
    "import sys; from xprof.convert import raw_to_tool_data as r; "
    "r.xspace_to_tool_data([sys.argv[1]], 'hlo_stats', {})"
)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field; repeated fields of a message may be concatenated."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _is_op_line(plane: xplane_pb2.XPlane, line: xplane_pb2.XLine, device: bool) -> bool:
    """Lines holding op events: device planes' lines (GPU/TPU) or CPU thunk threads."""
    if device:
        return plane.name.startswith("/device:")
    return plane.name == "/host:CPU" and line.name.startswith("tf_")


def scale_profile(source: Path, target: Path, events_wanted: int) -> int:
    """Write `source` with its op lines' events repeated to about `events_wanted`; return count.

    Copy k of every op line is shifted by k times one shift, the longest line's span: lines
    stay aligned with each other (a TPU op stays inside its `XLA Modules` event) and each copy
    starts after the previous one ends. TPU events carry their time a second time, on the
    device clock (`device_offset_ps`): that stat is shifted by the same amount, else every copy
    would run at the same device time, nested in the one before it."""
    space = xplane_pb2.XSpace()
    space.ParseFromString(source.read_bytes())
    device = any(p.name.startswith("/device:") for p in space.planes)
    # (plane, line) positions: upb hands out a new wrapper per access, so no `id()` keys.
    op_lines = [
        (i, j)
        for i, p in enumerate(space.planes)
        for j, ln in enumerate(p.lines)
        if _is_op_line(p, ln, device)
    ]
    base = sum(len(space.planes[i].lines[j].events) for i, j in op_lines)
    copies = max(1, round(events_wanted / base))
    device_stats = {(i, j): _device_offsets(space.planes[i], j) for i, j in op_lines}
    device_span = max(
        (max(ends) - min(starts) for starts, ends, _ in device_stats.values() if starts),
        default=0,
    )
    host_span = max(
        (e.offset_ps + e.duration_ps for i, j in op_lines for e in space.planes[i].lines[j].events),
        default=0,
    )
    shift = max(host_span, device_span) + 1000
    out = bytearray()
    total = 0
    for i, plane in enumerate(space.planes):
        if not any(p == i for p, _ in op_lines):
            out += _field(1, plane.SerializeToString())
            continue
        shell = xplane_pb2.XPlane()
        shell.CopyFrom(plane)
        del shell.lines[:]
        plane_bytes = bytearray(shell.SerializeToString())
        for j, line in enumerate(plane.lines):
            if (i, j) not in device_stats:
                plane_bytes += _field(3, line.SerializeToString())
                continue
            offsets = [e.offset_ps for e in line.events]
            starts, _, stats = device_stats[i, j]
            line_bytes = bytearray()
            for k in range(copies):
                for ev, off in zip(line.events, offsets):
                    ev.offset_ps = off + k * shift
                for stat, start in zip(stats, starts):
                    stat.int64_value = start + k * shift  # oneof: clears uint64
                line_bytes += line.SerializeToString()
            total += copies * len(offsets)
            plane_bytes += _field(3, bytes(line_bytes))
        out += _field(1, bytes(plane_bytes))
    for host in space.hostnames:
        out += _field(4, host.encode())
    target.write_bytes(bytes(out))
    return total


def scale_archive(source: Path, target: Path, events_wanted: int) -> int:
    """Write the nsys-jax archive `source` with its trace's rows (NVTX ranges) repeated to about
    `events_wanted`; return the count. Copy k is shifted by k times the trace's span, and its
    range ids by k times the largest id, so that each copy's ranges nest in their own copy's.
    The archive's other members (the HLO dumps, the target config) are copied as they are."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    with zipfile.ZipFile(source) as archive:
        table = pq.read_table(io.BytesIO(archive.read(NSYS_TRACE)))
        start, duration = table["Projected Start"], table["Projected Duration"]
        shift = pc.max(pc.add(start, duration)).as_py() - pc.min(start).as_py() + 1000
        id_shift = pc.max(table["RangeId"]).as_py() + 1
        rows: int = table.num_rows
        copies = max(1, round(events_wanted / rows))
        parts = []
        for k in range(copies):
            moved = {
                "Projected Start": pc.add(start, k * shift),
                "RangeId": pc.add(table["RangeId"], float(k * id_shift)),
                "ParentId": pc.add(table["ParentId"], float(k * id_shift)),
            }
            parts.append(
                pa.table(
                    [moved.get(name, table[name]) for name in table.column_names],
                    schema=table.schema,
                )
            )
        scaled = io.BytesIO()
        pq.write_table(pa.concat_tables(parts), scaled)
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
            for member in archive.infolist():
                data = scaled.getvalue() if member.filename == NSYS_TRACE else archive.read(member)
                out.writestr(member, data)
    return copies * rows


def _device_offsets(
    plane: xplane_pb2.XPlane, line_index: int
) -> tuple[list[int], list[int], list[xplane_pb2.XStat]]:
    """The `device_offset_ps` stats of a line's events: their values, the events' device-clock
    ends (`device_duration_ps`), and the stats themselves (to be rewritten per copy)."""
    ids = {k: v.name for k, v in plane.stat_metadata.items()}
    starts: list[int] = []
    ends: list[int] = []
    stats: list[xplane_pb2.XStat] = []
    for event in plane.lines[line_index].events:
        found = {ids.get(s.metadata_id): s for s in event.stats}
        offset, duration = found.get("device_offset_ps"), found.get("device_duration_ps")
        if offset is None:
            continue
        start = offset.int64_value or offset.uint64_value
        starts.append(start)
        stats.append(offset)
        length = duration.int64_value or duration.uint64_value if duration else 0
        ends.append(start + length)
    return starts, ends, stats


@dataclass
class Run:
    wall_s: float
    peak_rss_mb: float  # the command's own process (VmHWM, sampled every 20 ms)
    peak_total_mb: float  # the command and every process it started (readers), PSS, sampled
    ok: bool
    # Each process the command started (readers, Dask workers): its own peak (VmHWM), sampled.
    child_peaks_mb: list[float]


def _tree(root: int) -> list[int]:
    """`root` and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _proc_mb(pid: int, name: str, field: str) -> float:
    """A kB field of /proc/PID/NAME in MB; 0 once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def measure(
    cmd: list[str], cwd: Path, stderr: Path | None = None, env: dict[str, str] | None = None
) -> Run:
    """Wall time and peaks of `cmd` (in environment `env`, else this one's); its stderr goes to
    `stderr` where given (to say why a run failed), else nowhere."""
    import threading

    t0 = time.perf_counter()
    errors = (stderr or Path(os.devnull)).open("wb")
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=errors, env=env)
    peak_total = peak_own = 0.0
    child_peaks: dict[int, float] = {}
    running = threading.Event()
    running.set()

    def sample() -> None:  # every 20 ms: the whole tree's PSS, the process's own high water
        nonlocal peak_total, peak_own
        while running.is_set():
            # PSS: shared pages (a forked reader's copy-on-write file) count once. Only while
            # there are children: reading smaps_rollup walks the process's page tables under
            # its memory map's lock (slowing what is measured), and alone its peak is VmHWM.
            tree = _tree(proc.pid)
            if len(tree) > 1:
                peak_total = max(peak_total, sum(_proc_mb(p, "smaps_rollup", "Pss:") for p in tree))
            for child in tree[1:]:
                child_peaks[child] = max(
                    child_peaks.get(child, 0.0), _proc_mb(child, "status", "VmHWM:")
                )
            # VmHWM: the process's own peak resident set, without its children.
            peak_own = max(peak_own, _proc_mb(proc.pid, "status", "VmHWM:"))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    running.clear()
    sampler.join()
    # Not ru_maxrss: a child forked from this (large) process and exec'ed keeps the larger of
    # its own peak and this process's RSS at the fork. Only a command too short to be sampled
    # falls back to it.
    rss = peak_own or usage.ru_maxrss / 1024  # KiB on Linux
    ok = os.waitstatus_to_exitcode(status) == 0
    errors.close()
    return Run(wall, rss, max(peak_total, rss), ok, sorted(child_peaks.values(), reverse=True))


POD_HOSTS = [4, 32, 128, 256]
POD_HOST_EVENTS = 870_000  # ~50 MB per host file from the MI300X trace
# Host h's clock runs ahead of the first host's by the offset of its variant, h % this many.
POD_CLOCK_VARIANTS = 8
# Host h is slow (its events 1.5x as long, its clock host00's) when h % this == 1: a few hosts.
POD_SLOW_EVERY = 29


def _pod_offset_ns(variant: int) -> int:
    return variant * 13_337 - 40_000


def _pod_host(source: Path, target: Path, offset_ns: int, stretch: float) -> None:
    """`source` with every line's clock moved by `offset_ns` and its events `stretch`x as long."""
    space = xplane_pb2.XSpace.FromString(source.read_bytes())
    for plane in space.planes:
        for line in plane.lines:
            line.timestamp_ns += offset_ns
            if stretch != 1.0:
                for event in line.events:
                    event.duration_ps = int(event.duration_ps * stretch)
    target.write_bytes(space.SerializeToString())


POD_EXECUTORS = {
    "local": ("local pool", []),
    "cluster": ("--cluster local:2", ["--cluster", "local:2"]),
}


def bench_pod(chip: str, sizes: list[int], executors: list[str]) -> list[dict[str, object]]:
    """Runs of `sizes` hosts with each of `executors` (POD_EXECUTORS: the local pool,
    `--cluster local:2`): wall, client and worker peaks, and whether the report recovers the
    injected offsets and names the slow hosts."""
    import json
    from math import inf

    source = REAL_GPU if REAL_GPU.is_file() else next((ROOT / "tests" / "fixtures").rglob("*.pb"))
    hlogap = str(Path(sys.executable).parent / "hlogap")
    rows = []
    with tempfile.TemporaryDirectory(prefix="hlogap-pod-") as tmp:
        scaled = Path(tmp) / "scaled.xplane.pb"
        scale_profile(source, scaled, POD_HOST_EVENTS)
        variants = [Path(tmp) / f"clock{v}.xplane.pb" for v in range(POD_CLOCK_VARIANTS)]
        for v, variant in enumerate(variants):
            _pod_host(scaled, variant, _pod_offset_ns(v), 1.0)
        slow = Path(tmp) / "slow.xplane.pb"
        _pod_host(scaled, slow, 0, 1.5)
        for hosts in sizes:
            run = Path(tmp) / f"pod{hosts}" / "plugins" / "profile" / "run1"
            run.mkdir(parents=True)
            slow_hosts = {f"host{h:03d}" for h in range(hosts) if h % POD_SLOW_EVERY == 1}
            expected = {}
            for h in range(hosts):  # hard links: every host a regular file, a few copies on disk
                name = f"host{h:03d}"
                v = h % POD_CLOCK_VARIANTS
                os.link(slow if name in slow_hosts else variants[v], run / f"{name}.xplane.pb")
                offset = 0 if name in slow_hosts else _pod_offset_ns(v)
                expected[name] = (offset - _pod_offset_ns(0)) / 1e3
            size_mb = sum(f.stat().st_size for f in run.iterdir()) / 1e6
            for executor, extra in (POD_EXECUTORS[e] for e in executors):
                report = Path(tmp) / "report.json"
                audit = [hlogap, "audit", str(run.parents[2]), "-f", "json", "--chip", chip]
                said = Path(tmp) / "stderr.txt"
                r = measure([*audit, "--output", str(report), *extra], Path(tmp), said)
                if not r.ok:
                    print(said.read_text(errors="replace")[-2000:], file=sys.stderr, flush=True)
                found = json.loads(report.read_text())["hosts"] if r.ok else {}
                offsets = dict(zip(found.get("hosts", []), found.get("clock_offset_us", [])))
                named = {s["host"] for s in found.get("slowest_hosts", [])[: len(slow_hosts)]}
                row = {
                    "hosts": hosts,
                    "size_mb": size_mb,
                    "executor": executor,
                    "wall_s": r.wall_s,
                    "client_mb": r.peak_rss_mb,
                    "workers_mb": r.child_peaks_mb[:2] if extra else [],
                    "total_mb": r.peak_total_mb,
                    # A host without an offset (null) counts as an infinite error.
                    "offset_error_us": max(
                        abs(found_us - e) if (found_us := offsets.get(h)) is not None else inf
                        for h, e in expected.items()
                    )
                    if offsets
                    else None,
                    "slow_named": f"{len(named & slow_hosts)}/{len(slow_hosts)}",
                    "ok": r.ok,
                }
                rows.append(row)
                print(_format_pod_row(row), flush=True)
                report.unlink(missing_ok=True)
            shutil.rmtree(run.parents[2])
    return rows


POD_HEADER = (
    "| hosts | files | executor | wall | client peak (own RSS) | each worker's peak (own RSS) "
    "| peak total (PSS, all processes) | offsets: worst error | slow hosts named |\n"
    "|---:|---:|---|---:|---:|---:|---:|---:|---:|"
)


def bench_decode(archive: Path, repeats: int) -> dict[str, float] | None:
    """hlogap's decode of the archive's optimized HloProtos (bytes -> IR) against upb's parse of
    the same bytes; None when the archive holds none."""
    from hlogap.hlo.decode import decode_hlo_proto
    from hlogap.hlo.ir import Module
    from hlogap.proto import hlo_pb2

    with zipfile.ZipFile(archive) as z:
        names = [n for n in z.namelist() if re.search(r"after_optimizations\.hlo\.pb(\.xz)?$", n)]
        packed = [z.read(n) for n in names]
    if not packed:
        return None
    started = time.perf_counter()
    blobs = [lzma.decompress(b) if n.endswith(".xz") else b for n, b in zip(names, packed)]
    xz_s = time.perf_counter() - started
    upb, ours, instructions = [], [], 0
    modules: list[Module] = []
    for _ in range(repeats):  # in turns: a slow spell of the machine falls on both
        started = time.perf_counter()
        for blob in blobs:
            hlo_pb2.HloProto().ParseFromString(blob)
        upb.append(time.perf_counter() - started)
        modules.clear()  # the last repeat's IR freed before the clock starts: freeing
        # 17 k instructions' objects is no part of decoding them (~0.01 s)
        started = time.perf_counter()
        modules = [decode_hlo_proto(blob) for blob in blobs]
        ours.append(time.perf_counter() - started)
        instructions = sum(len(c.instructions) for m in modules for c in m.computations)
    return {
        "protos": len(blobs),
        "mb": sum(map(len, blobs)) / 1e6,
        "instructions": instructions,
        "xz_s": xz_s,
        "upb_s": min(upb),
        "decode_s": min(ours),
    }


DECODE_HEADER = (
    "| archive | HloProtos | bytes | instructions | xz decompress | upb ParseFromString "
    "| hlogap decode | decode / upb | decode per instruction |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
)
DECODE_BEGIN, DECODE_END = "<!-- bench-decode:begin -->", "<!-- bench-decode:end -->"


def _format_decode_row(name: str, r: dict[str, float]) -> str:
    cells = [
        name,
        f"{int(r['protos'])}",
        f"{r['mb']:.1f} MB",
        f"{int(r['instructions']):,}",
        f"{r['xz_s']:.3f} s",
        f"{r['upb_s']:.3f} s",
        f"{r['decode_s']:.3f} s",
        f"{r['decode_s'] / r['upb_s']:.1f}x",
        f"{r['decode_s'] / r['instructions'] * 1e6:.1f} us",
    ]
    return "| " + " | ".join(cells) + " |"


def _format_pod_row(r: dict[str, object]) -> str:
    workers = r["workers_mb"]
    assert isinstance(workers, list)
    error = r["offset_error_us"]
    return (
        f"| {r['hosts']} | {float(r['size_mb']):.0f} MB | {r['executor']} "  # type: ignore[arg-type]
        f"| {float(r['wall_s']):.1f} s | {float(r['client_mb']):.0f} MB "  # type: ignore[arg-type]
        f"| {', '.join(f'{w:.0f} MB' for w in workers) or '-'} "
        f"| {float(r['total_mb']):.0f} MB "  # type: ignore[arg-type]
        f"| {'-' if error is None else f'{float(error):.3f} us'} "  # type: ignore[arg-type]
        f"| {r['slow_named']} |" + ("" if r["ok"] else " (failed)")
    )


REAL_TPU = ROOT.parent / "shared" / "fixtures" / "tpu-v6e-offload" / "tpu_inference_2.xplane.pb"
CPU_FIXTURE = ROOT / "tests" / "fixtures" / "mlp_train"
NSYS_ARCHIVE = (
    ROOT.parent / "shared" / "fixtures" / "nvidia-h100-nsys-jax" / "maxtext_fsdp4_test_data.zip"
)
CPU_CHIP = (
    'name = "bench-cpu"\n[peak_flops]\nf32 = 1.0e11\nbf16 = 1.0e11\n[memory]\nhbm_bw = 2.0e10\n'
)


@dataclass(frozen=True)
class Case:
    """One row of the table: a source scaled to `events`, audited with `options`."""

    name: str
    source: Path
    events: int
    options: tuple[str, ...]
    xprof: bool = True  # xprof's converter on the same file (it lists no XLA:CPU ops)
    one_core: bool = False  # hlogap pinned to one core, `--jobs 1` (ms/MB)
    # The source audited as it is, where it is (never copied nor deleted); `events` unused.
    in_place: bool = False


def cases(sizes: list[int], chip: str, chip_file: Path) -> list[Case]:
    gpu = REAL_GPU if REAL_GPU.is_file() else next(CPU_FIXTURE.rglob("*.pb"))
    gpu_options = ("--chip", chip) if REAL_GPU.is_file() else ("--chip", str(chip_file))
    found = [Case("GPU", gpu, n, gpu_options) for n in sizes]
    found.append(Case("GPU, one core", gpu, 3_000_000, (*gpu_options, "--jobs", "1"), False, True))
    if ONE_LINE_GPU.is_file():
        found.append(Case("GPU, one line", ONE_LINE_GPU, 3_000_000, ("--chip", "mi355x")))
    if REAL_TPU.is_file():
        found.append(Case("TPU", REAL_TPU, 3_000_000, ("--chip", "tpu-v6e")))
    cpu = next(CPU_FIXTURE.rglob("*.xplane.pb"))
    found.append(Case("CPU", cpu, 1_000_000, ("--chip", str(chip_file)), xprof=False))
    # xprof reads no nsys-jax archive; the chip is detected from the archive's target config.
    if NSYS_ARCHIVE.is_file() and importlib.util.find_spec("pyarrow") is not None:
        # As recorded (13 large HLO modules: their decode weighs most), then scaled.
        found.append(Case("GPU, nsys-jax as recorded", NSYS_ARCHIVE, 0, (), False, in_place=True))
        found.append(Case("GPU, nsys-jax", NSYS_ARCHIVE, 1_000_000, (), xprof=False))
    return found


def _archive_rows(archive: Path) -> int:
    """The NVTX ranges (rows) of an nsys-jax archive's trace, from the parquet footer."""
    import pyarrow.parquet as pq

    with zipfile.ZipFile(archive) as z:
        return int(pq.ParquetFile(io.BytesIO(z.read(NSYS_TRACE))).metadata.num_rows)


def case_file(case: Case, tmp: Path) -> tuple[Path, int]:
    """The file `case` audits and its events: the source itself (in place), else the source
    scaled to about `case.events` under `tmp` (the caller deletes it: `_done_with`)."""
    if case.in_place:
        return case.source, _archive_rows(case.source) if case.source.suffix == ".zip" else 0
    if case.source.suffix == ".zip":  # an nsys-jax archive
        big = tmp / f"scaled_{case.events}.zip"
        return big, scale_archive(case.source, big, case.events)
    big = tmp / f"scaled_{case.events}.xplane.pb"
    return big, scale_profile(case.source, big, case.events)


def _done_with(case: Case, path: Path) -> None:
    if not case.in_place:
        path.unlink()


def bench(all_cases: list[Case], repeats: int, tmp: Path) -> list[dict[str, object]]:
    hlogap = [str(Path(sys.executable).parent / "hlogap")]
    results = []
    for case in all_cases:
        big, events = case_file(case, tmp)
        size_mb = big.stat().st_size / 1e6
        # Past 5 M events one run each: xprof alone needs minutes and ~17x the file there.
        runs = 1 if case.events > 5_000_000 else repeats
        pin = ["taskset", "-c", "0"] if case.one_core and shutil.which("taskset") else []
        # Turn about, hlogap then xprof: a slow spell of this VM falls on both, not on one.
        ours: list[Run] = []
        theirs: list[Run] = []
        for i in range(runs):
            ours.append(
                measure([*pin, *hlogap, "audit", str(big), "--format", "json", *case.options], tmp)
            )
            if not case.xprof:
                continue
            fresh = tmp / f"xprof_{case.events}_{i}"
            fresh.mkdir()
            shutil.copy(big, fresh / big.name)
            theirs.append(
                measure([sys.executable, "-c", XPROF_SNIPPET, str(fresh / big.name)], fresh)
            )
            shutil.rmtree(fresh)
        best_ours = min(ours, key=lambda r: r.wall_s)
        best_theirs = min(theirs, key=lambda r: r.wall_s) if theirs else None
        row: dict[str, object] = {
            "case": case.name,
            "events": events,
            "size_mb": size_mb,
            "source": case.source.name,
            "hlogap_s": best_ours.wall_s,
            "hlogap_rss_mb": max(r.peak_rss_mb for r in ours),
            "hlogap_total_mb": max(r.peak_total_mb for r in ours),
            "hlogap_ok": all(r.ok for r in ours),
            "xprof_s": best_theirs.wall_s if best_theirs else None,
            "xprof_total_mb": max(r.peak_total_mb for r in theirs) if theirs else None,
            "xprof_ok": all(r.ok for r in theirs),
        }
        results.append(row)
        print(_format_row(row), flush=True)
        _done_with(case, big)
    return results


def install_revision(rev: str) -> tuple[str, Path]:
    """Commit `rev`'s hlogap, pip-installed (its C extension built, its bytecode compiled) into a
    directory of its own under the temporary directory, from `git archive` of the commit: this
    checkout is only read. Kept for the next run (named by the commit); returns the commit's
    short hash and the directory to put on `PYTHONPATH`."""
    sha = subprocess.run(
        ["git", "rev-parse", "--verify", f"{rev}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    home = Path(tempfile.gettempdir()) / f"hlogap-against-{sha[:12]}"
    site = home / "site"
    if not (site / "hlogap" / "__main__.py").is_file():
        shutil.rmtree(home, ignore_errors=True)
        source = home / "src"
        source.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "archive", "--format=tar", sha], cwd=ROOT, capture_output=True, check=True
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(source, filter="data")
        # Its dependencies are this environment's (the same versions for both).
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
        subprocess.run(
            [*pip, "--target", str(site), str(source)],
            check=True,
            stderr=subprocess.DEVNULL,
        )
    return sha[:12], site


def bench_against(
    all_cases: list[Case], repeats: int, tmp: Path, rev: str, this: str | None = None
) -> list[dict[str, object]]:
    """This checkout's hlogap (or commit `this`'s) and commit `rev`'s on the same files, head
    to head: each case's `hlogap audit FILE --format json --top 0` run by both in turn (which
    goes first alternates from round to round), best of `repeats`; both as `python -m hlogap`
    from the same interpreter and dependencies, a commit's installed apart
    (`install_revision`: a checkout others edit meanwhile, its bytecode going stale, is not
    what a commit is)."""
    label, site = install_revision(rev)
    theirs_env = {**os.environ, "PYTHONPATH": str(site)}
    ours_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    this_label = "this"
    if this is not None:
        this_label, this_site = install_revision(this)
        ours_env["PYTHONPATH"] = str(this_site)
    results = []
    for case in all_cases:
        big, events = case_file(case, tmp)
        command = [sys.executable, "-m", "hlogap", "audit", str(big), "--format", "json"]
        command += ["--top", "0", *case.options]
        pin = ["taskset", "-c", "0"] if case.one_core and shutil.which("taskset") else []
        runs: dict[str, list[Run]] = {"ours": [], "theirs": []}
        said = tmp / "stderr.txt"
        for i in range(repeats):
            turn = [("ours", ours_env), ("theirs", theirs_env)]
            for side, env in turn if i % 2 == 0 else turn[::-1]:
                runs[side].append(measure([*pin, *command], tmp, said, env))
                failed = [r for r in runs[side] if not r.ok]
                if failed and failed[0] is runs[side][-1]:  # say why, once (an older hlogap
                    # may not read the file)
                    name = this_label if side == "ours" else label
                    why = said.read_text(errors="replace").strip().splitlines()[-1:]
                    print(f"{case.name}: {name} failed: {' '.join(why)}", file=sys.stderr)
        row: dict[str, object] = {
            "case": case.name,
            "events": events,
            "size_mb": big.stat().st_size / 1e6,
            "against": label,
            "this": this_label,
        }
        for side, done in runs.items():
            row[f"{side}_s"] = min(r.wall_s for r in done)
            row[f"{side}_total_mb"] = max(r.peak_total_mb for r in done)
            row[f"{side}_ok"] = all(r.ok for r in done)
        results.append(row)
        print(_format_against_row(row), flush=True)
        _done_with(case, big)
    return results


def bench_suite() -> dict[str, object]:
    """`make test` as CI runs it (`.ci/run` without the lint): in a fresh clone of this
    checkout's HEAD (what is committed; the venv built there from nothing, the package
    registries' caches aside), with ../shared beside it where this checkout has one. Its wall
    time and pytest's last line."""
    with tempfile.TemporaryDirectory(prefix="hlogap-suite-") as tmp:
        clone = Path(tmp) / ROOT.name
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        shared = ROOT.parent / "shared"
        if shared.is_dir():
            (Path(tmp) / "shared").symlink_to(shared)
        started = time.perf_counter()
        done = subprocess.run(
            ["make", "test"], cwd=clone, capture_output=True, text=True, env=_clean_env()
        )
        wall = time.perf_counter() - started
    # pytest's last line ("2433 passed, 28 skipped in 226.76s (0:03:46)"), make's after it.
    said = [s.strip("= ") for s in done.stdout.splitlines() if re.search(r"\d+ (passed|failed)", s)]
    return {
        "wall_s": wall,
        "ok": done.returncode == 0,
        "summary": said[-1] if said else "no tests ran",
    }


def _clean_env() -> dict[str, str]:
    """This environment without the venv's traces (a clone builds its own)."""
    drop = {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def targets(
    against: Sequence[dict[str, object]],
    decode: dict[str, float] | None,
    suite: dict[str, object] | None,
) -> list[tuple[str, str, str]]:
    """Issue 43's targets as this run measured them: (target, measured, met). A target this
    run did not measure is left out."""
    found = []
    for r in against:
        if not (r["ours_ok"] and r["theirs_ok"]):
            continue
        ratio = float(r["ours_s"]) / float(r["theirs_s"])  # type: ignore[arg-type]
        found.append(
            (
                f"{r['case']} ({int(r['events']):,} events): wall <= 1.10x {r['against']}",  # type: ignore[call-overload]
                f"{ratio:.2f}x",
                _met(ratio <= 1.10),
            )
        )
        if r["case"] == "GPU, one line":
            times = float(r["ours_total_mb"]) / float(r["size_mb"])  # type: ignore[arg-type]
            found.append(
                ("GPU, one line: peak total <= 1.5x the file", f"{times:.2f}x", _met(times <= 1.5))
            )
    if decode:
        ratio = decode["decode_s"] / decode["upb_s"]
        found.append(("HLO decode <= 3x upb's parse", f"{ratio:.1f}x", _met(ratio <= 3.0)))
    if suite:
        wall = float(suite["wall_s"])  # type: ignore[arg-type]
        passed = bool(suite["ok"])
        found.append(
            (
                "`make test` in a clean clone < 6 min",
                f"{wall / 60:.1f} min ({suite['summary']})",
                _met(wall < 360 and passed),
            )
        )
    return found


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


TARGETS_HEADER = "| target | measured | |\n|---|---:|---|"
TARGETS_BEGIN, TARGETS_END = "<!-- bench-targets:begin -->", "<!-- bench-targets:end -->"


AGAINST_HEADER = (
    "| case | events | file | {rev} wall | {this} wall | {this} / {rev} "
    "| {rev} peak total (x file) | {this} peak total (x file) |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|"
)
AGAINST_BEGIN, AGAINST_END = "<!-- bench-against:begin -->", "<!-- bench-against:end -->"


def _format_against_row(r: dict[str, object]) -> str:
    """A head-to-head row; a side whose runs failed (an older hlogap that cannot read the
    file) shows no figures."""
    size = float(r["size_mb"])  # type: ignore[arg-type]
    ours, theirs = float(r["ours_s"]), float(r["theirs_s"])  # type: ignore[arg-type]
    ours_mb, theirs_mb = float(r["ours_total_mb"]), float(r["theirs_total_mb"])  # type: ignore[arg-type]
    both = bool(r["ours_ok"]) and bool(r["theirs_ok"])
    cells = [
        f"{r['case']}",
        f"{int(r['events']):,}",  # type: ignore[call-overload]
        f"{size:.1f} MB",
        f"{theirs:.2f} s" if r["theirs_ok"] else "failed",
        f"{ours:.2f} s" if r["ours_ok"] else "failed",
        f"{ours / theirs:.2f}x" if both else "-",
        f"{theirs_mb:.0f} MB ({theirs_mb / size:.1f}x)" if r["theirs_ok"] else "-",
        f"{ours_mb:.0f} MB ({ours_mb / size:.1f}x)" if r["ours_ok"] else "-",
    ]
    return "| " + " | ".join(cells) + " |"


def _format_row(r: dict[str, object]) -> str:
    ev, size = float(r["events"]), float(r["size_mb"])  # type: ignore[arg-type]
    ours, total = float(r["hlogap_s"]), float(r["hlogap_total_mb"])  # type: ignore[arg-type]
    cells = [
        f"{r['case']}",
        f"{int(ev):,}",
        f"{size:.1f} MB",
        f"{ours:.2f} s",
        f"{ev / ours / 1e6:.2f} M/s",
        f"{ours * 1e3 / size:.1f} ms/MB",
        f"{float(r['hlogap_rss_mb']):.0f} MB",  # type: ignore[arg-type]
        f"{total:.0f} MB ({total / size:.1f}x)",
    ]
    if r["xprof_s"] is None:
        cells += ["-", "-", "-", "-"]
    else:
        theirs = float(r["xprof_s"])  # type: ignore[arg-type]
        cells += [
            f"{theirs:.2f} s",
            f"{ev / theirs / 1e6:.2f} M/s",
            f"{float(r['xprof_total_mb']):.0f} MB",  # type: ignore[arg-type]
            f"{ours / theirs:.2f}x",
        ]
    ok = r["hlogap_ok"] and (r["xprof_s"] is None or r["xprof_ok"])
    return "| " + " | ".join(cells) + " |" + ("" if ok else " (a run failed)")


HEADER = (
    "| case | events | file | hlogap wall | hlogap events/s | hlogap per MB | hlogap peak RSS "
    "| hlogap peak total (x file) | xprof wall | xprof events/s | xprof peak total "
    "| hlogap / xprof |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
POD_BEGIN, POD_END = "<!-- bench-pod:begin -->", "<!-- bench-pod:end -->"


def time_help(repeats: int = 5) -> float:
    """Best wall time of `hlogap --help` (the target is under 0.3 s)."""
    hlogap = str(Path(sys.executable).parent / "hlogap")
    return min(measure([hlogap, "--help"], ROOT).wall_s for _ in range(repeats))


def write_docs(
    results: list[dict[str, object]],
    pod: list[dict[str, object]],
    help_s: float,
    decode: dict[str, float] | None = None,
    against: Sequence[dict[str, object]] = (),
    suite: dict[str, object] | None = None,
) -> None:
    doc = ROOT / "docs" / "performance.md"
    text = doc.read_text()
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    command = shlex.join(["python", "scripts/bench.py", *sys.argv[1:]])
    measured = f"Measured {time.strftime('%Y-%m-%d')} on {machine} by `{command}`"
    rev, this = (str(against[0][k]) for k in ("against", "this")) if against else ("", "")
    for begin, end_mark, lines in (
        (
            TARGETS_BEGIN,
            TARGETS_END,
            [f"{measured}:", "", TARGETS_HEADER]
            + [f"| {t} | {m} | {ok} |" for t, m, ok in targets(against, decode, suite)],
        ),
        (
            AGAINST_BEGIN,
            AGAINST_END,
            [f"{measured}:", "", AGAINST_HEADER.format(rev=rev, this=this)]
            + [_format_against_row(r) for r in against],
        ),
        (
            BEGIN,
            END,
            [f"{measured}:", "", HEADER] + [_format_row(r) for r in results],
        ),
        (POD_BEGIN, POD_END, [f"{measured}:", "", POD_HEADER] + [_format_pod_row(r) for r in pod]),
        (
            DECODE_BEGIN,
            DECODE_END,
            [f"{measured}:", "", DECODE_HEADER]
            + ([_format_decode_row(NSYS_ARCHIVE.name, decode)] if decode else []),
        ),
    ):
        if not lines[3:]:
            continue
        table = "\n".join([begin, *lines, end_mark])
        start, end = text.index(begin), text.index(end_mark) + len(end_mark)
        text = text[:start] + table + text[end:]
    doc.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--events", type=int, nargs="+", default=[300_000, 1_000_000, 3_000_000, 10_000_000]
    )
    # Best of 5: this VM's wall times vary by 10-20% from run to run.
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--chip", default="mi300x")
    parser.add_argument("--no-pod", action="store_true", help="skip the pod case")
    parser.add_argument("--pod-only", action="store_true", help="only the pod case")
    parser.add_argument("--pod-hosts", type=int, nargs="+", default=POD_HOSTS)
    parser.add_argument(
        "--pod-executors", nargs="+", choices=list(POD_EXECUTORS), default=list(POD_EXECUTORS)
    )
    parser.add_argument("--no-decode", action="store_true", help="skip HLO decode vs upb")
    parser.add_argument("--decode-only", action="store_true", help="only HLO decode vs upb")
    parser.add_argument(
        "--cases", nargs="+", metavar="NAME", help="only these cases (names as in the table)"
    )
    parser.add_argument(
        "--against",
        metavar="REV",
        help="also this checkout against commit REV, head to head on the same files",
    )
    parser.add_argument(
        "--against-only",
        action="store_true",
        help="the head-to-head against REV (and the decode) instead of the xprof and pod tables",
    )
    parser.add_argument(
        "--this", metavar="REV", help="with --against: commit REV's hlogap, not this checkout's"
    )
    parser.add_argument(
        "--suite",
        action=argparse.BooleanOptionalAction,
        help="time `make test` in a clean clone (default: on, but with --against-only, "
        "--decode-only and --pod-only)",
    )
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    if (args.against_only or args.this) and not args.against:
        parser.error("--against-only and --this need --against REV")
    # hlogap as a user has it: pip compiles a package's bytecode when it installs it; an
    # editable install under PYTHONDONTWRITEBYTECODE would compile every module on every run.
    compileall.compile_dir(ROOT / "hlogap", quiet=1)
    decode = None
    if args.suite is None:
        args.suite = not (args.against_only or args.decode_only or args.pod_only)
    if args.against_only:
        args.no_pod = True
    if not (args.no_decode or args.pod_only) and NSYS_ARCHIVE.is_file():
        decode = bench_decode(NSYS_ARCHIVE, args.repeats)
        if decode is not None:
            print(DECODE_HEADER)
            print(_format_decode_row(NSYS_ARCHIVE.name, decode), flush=True)
    if args.decode_only:
        if args.write_docs:
            write_docs([], [], 0.0, decode)
        return
    results, against = [], []
    if not args.pod_only:
        with tempfile.TemporaryDirectory(prefix="hlogap-bench-") as tmp:
            chip_file = Path(tmp) / "bench-cpu.toml"
            chip_file.write_text(CPU_CHIP)
            chosen = [
                c
                for c in cases(args.events, args.chip, chip_file)
                if args.cases is None or c.name in args.cases
            ]
            if not args.against_only:
                print(HEADER)
                results = bench(chosen, args.repeats, Path(tmp))
            if args.against:
                print(AGAINST_HEADER.format(rev=args.against, this=args.this or "this"))
                against = bench_against(chosen, args.repeats, Path(tmp), args.against, args.this)
    pod = []
    if not args.no_pod:
        print(POD_HEADER)
        pod = bench_pod(args.chip, args.pod_hosts, args.pod_executors)
    help_s = time_help()
    print(f"hlogap --help: {help_s:.3f} s")
    suite = None
    if args.suite:
        suite = bench_suite()
        print(f"make test in a clean clone: {suite['wall_s']:.0f} s ({suite['summary']})")
    if args.write_docs:
        write_docs(results, pod, help_s, decode, against, suite)
    if against or decode or suite:
        print(TARGETS_HEADER)
        for t, m, ok in targets(against, decode, suite):
            print(f"| {t} | {m} | {ok} |")


if __name__ == "__main__":
    main()
