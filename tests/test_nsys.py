"""nsys-jax archives (hlogap.trace.nsys): the real MaxText archive from NVIDIA's CI against an
oracle computed here straight from its parquet, and small archives built here for the rules and
the bad inputs. Skipped without pyarrow (the `nsys` extra) or without ../shared."""

from __future__ import annotations

import io
import json
import re
import sys
import zipfile
from collections import defaultdict
from pathlib import Path

import pytest

from hlogap.options import AuditOptions
from hlogap.pipeline import audit
from tests.conftest import SHARED, run_cli

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

ARCHIVE = SHARED / "nvidia-h100-nsys-jax" / "maxtext_fsdp4_test_data.zip"
needs_archive = pytest.mark.skipif(
    not ARCHIVE.is_file(), reason=f"{ARCHIVE} absent (../shared not beside the project)"
)
TRAIN_STEP = "jit_train_step"


def thunk_oracle(rows: list[dict], module: str) -> dict[str, tuple[int, int]]:
    """Per op of `module`: (occurrences, summed ns) from the thunk ranges, in plain Python.

    A range counts unless it lies directly inside a range of the same op (part of it) or holds
    a range of another op (a while loop: its body's ranges count). An occurrence is one
    (op, thread, module execution)."""
    by_id = {r["RangeId"]: r for r in rows if r["RangeId"] is not None}

    def op(r: dict) -> str | None:
        m = re.search(r"hlo_op=([^,#]+)#$", r["Name"] or "")
        return m.group(1) if m and (r["Name"] or "").startswith("TSL:Thunk:") else None

    def enclosing(r: dict) -> tuple[dict | None, dict | None]:
        """(nearest thunk range above, module range above)."""
        thunk = None
        parent = by_id.get(r["ParentId"])
        while parent is not None:
            if (parent["Name"] or "").startswith("TSL:XlaModule:"):
                return thunk, parent
            if thunk is None and op(parent):
                thunk = parent
            parent = by_id.get(parent["ParentId"])
        return thunk, None

    holders = set()
    for r in rows:
        if op(r):
            above, _ = enclosing(r)
            if above is not None and op(above) != op(r):
                holders.add(above["RangeId"])
    occurrences: dict[str, set[tuple[int, float]]] = defaultdict(set)
    total: dict[str, int] = defaultdict(int)
    for r in rows:
        name = op(r)
        if name is None or r["RangeId"] in holders:
            continue
        above, mod = enclosing(r)
        if mod is None or f"hlo_module={module}," not in mod["Name"]:
            continue
        if above is not None and op(above) == name:
            continue
        occurrences[name].add((r["TID"], mod["RangeId"]))
        total[name] += r["Projected Duration"]
    return {name: (len(occurrences[name]), total[name]) for name in total}


@pytest.fixture(scope="module")
def report() -> dict:
    if not ARCHIVE.is_file():
        pytest.skip(f"{ARCHIVE} absent (../shared not beside the project)")
    return audit(ARCHIVE).to_dict(top=0)


@pytest.fixture(scope="module")
def report_all() -> dict:
    """Every event, the warm-up step's too, as the parquet oracle counts them."""
    if not ARCHIVE.is_file():
        pytest.skip(f"{ARCHIVE} absent (../shared not beside the project)")
    return audit(ARCHIVE, AuditOptions(all_steps=True)).to_dict(top=0)


@needs_archive
def test_chip_detected_as_h100_sxm(report: dict) -> None:
    assert report["chip"]["name"] == "h100-sxm"
    assert report["chip"]["source"] == "detected"
    assert report["summary"]["devices"] == 4


@needs_archive
def test_every_op_matches_the_parquet(report_all: dict) -> None:
    with zipfile.ZipFile(ARCHIVE) as z:
        rows = pq.read_table(io.BytesIO(z.read("nvtx_gpu_proj_trace/trace.parquet"))).to_pylist()
    expected = thunk_oracle(rows, TRAIN_STEP)
    ops = {o["name"]: o for o in report_all["ops"] if o["module"] == TRAIN_STEP}
    assert set(ops) == set(expected)
    for name, (occurrences, ns) in expected.items():
        assert ops[name]["occurrences"] == occurrences, name
        assert ops[name]["measured_us"] == pytest.approx(ns / 1e3, abs=1e-6), name
    # The while loops are containers (their bodies' ranges are timed); the collectives are
    # timed though NCCL's ranges nest inside theirs.
    assert not any(n.startswith("while.") for n in ops)
    assert ops["all-gather-start"]["bound_by"] == "communication"


@needs_archive
def test_gemms_counted_and_no_op_above_its_roof(report: dict) -> None:
    assert all((o["efficiency"] or 0) <= 1.0 for o in report["ops"])
    gemms = [o for o in report["ops"] if o["name"].startswith(("cublas-gemm", "custom-call"))]
    assert gemms and all(o["flops"] > 0 and o["bound_by"] != "unmodeled" for o in gemms)
    # bf16[16,2048,128] x bf16[16,128,2048] -> bf16[16,2048,2048], batch 16, contracting 128.
    # It runs twice an occurrence (the decoder's scanned while, 2 trips; 2 thunk ranges each):
    # `flops` are per occurrence.
    attention = next(o for o in gemms if o["name"] == "custom-call.220")
    assert attention["runs_per_occurrence"] == 2 == attention["events"] / attention["occurrences"]
    assert attention["flops"] == 2 * (2 * 16 * 2048 * 2048 * 128)
    # A reduction's initialization kernel: overhead, its bytes counted on its fusion.
    init = next(o for o in report["ops"] if o["name"] == "reduce.80.1")
    assert init["bound_by"] == "none" and "input_reduce_fusion.24" in init["hints"][0]


@needs_archive
def test_bound_is_the_max_time_unless_the_op_beat_the_hbm_roof(report: dict) -> None:
    """docs/json.md: `bound_us` is max(t_compute_us, t_memory_us, t_comm_us) x occurrences,
    except for a GPU op that beat the HBM roof: capped at its measured time, the first hint
    saying so. The oracle is each row's own numbers."""
    capped = []
    for o in report["ops"]:
        roof = max(o["t_compute_us"], o["t_memory_us"], o["t_comm_us"]) * o["occurrences"]
        if o["bound_us"] != pytest.approx(roof, rel=1e-9, abs=1e-9):
            assert o["bound_by"] == "memory" and o["bound_us"] == o["measured_us"] < roof
            assert o["hints"][0].startswith("beats the HBM roof by ")
            capped.append(o["name"])
    assert 0 < len(capped) < len(report["ops"]) / 10


@needs_archive
def test_steps_are_the_train_step_executions(report: dict) -> None:
    steps = report["steps"]
    assert len(steps) == 5
    assert all(s["source"] == "module" and s["devices"] == 4 for s in steps)
    assert all(len(s["per_device"]) == 4 for s in steps)
    # The first execution includes the warm-up.
    assert steps[0]["wall_us"] > 10 * report["summary"]["step_us"]
    # The summary's figures are the steady steps' (1-4), each summed from their rows: the
    # warm-up step (95% idle) would read the run as 79% idle.
    summary = report["summary"]
    assert summary["warmup_steps"] == 1 and summary["steps"] == 4
    steady = steps[1:]
    idle = sum(s["idle_us"] for s in steady) / sum(s["device_wall_us"] for s in steady)
    assert summary["idle_fraction"] == pytest.approx(idle)
    assert summary["idle_fraction"] < 0.1
    seconds = sum(s["wall_us"] * s["devices"] for s in steady) * 1e-6
    assert summary["flops_per_s"] == pytest.approx(sum(s["flops"] for s in steady) / seconds)


@needs_archive
def test_commands_run_on_the_archive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    archive = str(ARCHIVE)
    code, out, _ = run_cli(["audit", archive, "--steps", "--top", "5"], capsys)
    assert code == 0 and "h100-sxm" in out and "steps" in out.lower()
    code, out, _ = run_cli(["audit", archive, "--group-by", "scope"], capsys)
    assert code == 0 and "jit(train_step)" in out
    page = tmp_path / "report.html"
    code, _, _ = run_cli(["audit", archive, "-o", str(page)], capsys)
    assert code == 0 and "<html" in page.read_text()[:200].lower()
    baseline = tmp_path / "base.json"
    code, _, _ = run_cli(["audit", archive, "--top", "0", "-o", str(baseline)], capsys)
    assert code == 0
    code, out, _ = run_cli(["check", archive, "--baseline", str(baseline)], capsys)
    assert code == 0, out
    code, out, _ = run_cli(["diff", str(baseline), archive], capsys)
    assert code == 0
    # jit_add is compiled twice (programs 34 and 37), each paired with itself: no peak changed.
    assert "memory:" not in out


def _parquet(rows: list[dict]) -> bytes:
    columns = [
        "Name",
        "Projected Start",
        "Projected Duration",
        "PID",
        "TID",
        "NumGPUOps",
        "RangeId",
        "ParentId",
        "Rank",
    ]
    table = pa.table({c: [r.get(c) for r in rows] for c in columns})
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


def _range(rid: int, name: str, start: int, dur: int, parent: int | None, tid: int) -> dict:
    return {
        "Name": name,
        "Projected Start": start,
        "Projected Duration": dur,
        "PID": 1,
        "TID": tid,
        "NumGPUOps": 1,
        "RangeId": float(rid),
        "ParentId": None if parent is None else float(parent),
        "Rank": 0,
    }


def _archive(tmp_path: Path, rows: list[dict], name: str = "run.zip") -> Path:
    path = tmp_path / name
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("nvtx_gpu_proj_trace/trace.parquet", _parquet(rows))
    return path


def _module(rid: int, start: int, tid: int) -> dict:
    return _range(rid, "TSL:XlaModule:#hlo_module=jit_f,program_id=7#", start, 1000, None, tid)


def test_nesting_rules_and_devices(tmp_path: Path) -> None:
    """Two GPUs (a launcher thread each); a while loop holding two ops; a cuBLAS thunk inside
    a range of its own op; a thunk outside any module (left out, with a warning)."""
    rows = [_range(1, "TSL:Thunk:#hlo_op=early#", 0, 5, None, 10)]
    for tid, base in ((10, 100), (11, 200)):
        m = base
        rows += [
            _module(m, 1000, tid),
            _range(m + 1, "TSL:Thunk:#name=x,hlo_op=while.1#", 1000, 300, m, tid),
            _range(m + 2, "TSL:Thunk:#hlo_op=fusion.1#", 1000, 100, m + 1, tid),
            _range(m + 3, "TSL:Thunk:#hlo_op=fusion.2#", 1100, 100, m + 1, tid),
            _range(m + 4, "TSL:Thunk:#hlo_op=fusion.1#", 1200, 100, m + 1, tid),
            _range(m + 5, "TSL:Thunk:#hlo_op=custom-call.3#", 1400, 90, m, tid),
            _range(m + 6, "TSL:Thunk:#hlo_op=custom-call.3#", 1420, 70, m + 5, tid),
        ]
    from hlogap.trace.nsys import read_archive

    trace = read_archive(_archive(tmp_path, rows), "h")
    assert [d.ordinal for d in trace.devices] == [0, 1]
    names = {o.key.name for o in trace.ops}
    assert names == {"fusion.1", "fusion.2", "custom-call.3"}
    per_op = defaultdict(int)
    for op, dur in zip(trace.op_index.tolist(), trace.duration_ps.tolist()):
        per_op[trace.ops[op].key.name] += dur
    assert per_op == {"fusion.1": 400_000, "fusion.2": 200_000, "custom-call.3": 180_000}
    # fusion.1 runs twice in one execution on each GPU: 2 occurrences, 4 events.
    assert len(set(trace.occurrence.tolist())) == 6
    assert any("outside any module" in w for w in trace.warnings)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not a zip at all", "corrupt nsys-jax archive"),
        ("no-trace", "not an nsys-jax archive"),
        ("bad-parquet", "corrupt parquet"),
        ("no-thunks", "no XLA thunk ranges"),
    ],
)
def test_bad_archives_are_one_line_exit_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: object, message: str
) -> None:
    path = tmp_path / "bad.zip"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        with zipfile.ZipFile(path, "w") as z:
            if content == "no-trace":
                z.writestr("dump/readme.txt", "x")
            elif content == "bad-parquet":
                z.writestr("nvtx_gpu_proj_trace/trace.parquet", b"PAR1 garbage")
            else:
                z.writestr("nvtx_gpu_proj_trace/trace.parquet", _parquet([_module(1, 0, 1)]))
    code, out, err = run_cli(["audit", str(path)], capsys)
    assert code == 3 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_without_pyarrow_one_line_names_the_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _archive(tmp_path, [_module(1, 0, 1)])
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    code, _, err = run_cli(["audit", str(path), "--jobs", "1"], capsys)
    assert code == 3
    assert "pip install 'hlogap[nsys]'" in err and len(err.strip().splitlines()) == 1


def test_unpacked_archive_and_a_directory_of_archives(tmp_path: Path) -> None:
    rows = [
        _module(1, 1000, 5),
        _range(2, "TSL:Thunk:#hlo_op=fusion.1#", 1000, 100, 1, 5),
    ]
    unpacked = tmp_path / "unpacked" / "nvtx_gpu_proj_trace"
    unpacked.mkdir(parents=True)
    (unpacked / "trace.parquet").write_bytes(_parquet(rows))
    from hlogap.errors import UsageError
    from hlogap.source import find_profile, refuse_to_overwrite

    assert find_profile(tmp_path / "unpacked").files == (str(tmp_path / "unpacked"),)
    with pytest.raises(UsageError, match="refusing to write into the profile directory"):
        refuse_to_overwrite(tmp_path / "unpacked" / "report.json", [tmp_path / "unpacked"])
    runs = tmp_path / "runs"
    runs.mkdir()
    for k in range(2):
        _archive(runs, rows, f"rank{k}.zip")
    (runs / "notes.zip").write_bytes(b"not an archive of the run")
    source = find_profile(runs)
    assert source.hosts == ["rank0", "rank1"]
    report = audit(runs, AuditOptions(chip="h100-sxm")).to_dict(top=0)
    assert report["ops"][0]["occurrences"] == 2
    assert report["ops"][0]["measured_us"] == pytest.approx(0.2)
    assert any("no optimized HLO dump" in w for w in report["warnings"])


def test_target_config_stats() -> None:
    from hlogap.trace.nsys import _target_stats

    text = (
        "gpu_device_info {\n  core_count: 132\n  memory_bandwidth: 3352320000000\n"
        "  clock_rate_ghz: 1.98\n  device_memory_size: 84929478656\n"
        "  cuda_compute_capability {\n    major: 9\n  }\n}\n"
        'device_description_str: "NVIDIA H100 80GB HBM3"\n'
    )
    stats = _target_stats(text)
    assert stats["device_vendor"] == "Nvidia"
    assert (stats["compute_cap_major"], stats["compute_cap_minor"]) == (9, 0)
    assert stats["core_count"] == 132 and stats["clock_rate"] == 1_980_000
    assert json.dumps(stats)  # plain values: they travel in reports and between processes


@needs_archive
def test_capacity_is_the_memory_the_devices_report(report: dict) -> None:
    """The H100s report 84.9e9 bytes (79 GiB, the figure the chip's detection line quotes from
    the archive's device metadata) usable: the headroom is against that, not the data sheet's
    80 GB."""
    memory = report["memory"]
    assert memory["capacity_source"] == "device"
    assert "79 GiB" in report["chip"]["reason"]
    assert round(memory["capacity_bytes"] / 2**30) == 79 and memory["capacity_bytes"] > 8.0e10


@pytest.mark.parametrize("chunks", [1, 3])
def test_range_names_read_as_a_dictionary_number_as_arrow_numbers_strings(chunks: int) -> None:
    """Range names kept as the parquet file's dictionary (not decoded to one string a row) get
    the codes pyarrow's own dictionary_encode gives the decoded strings: first seen first, a
    null read as "", equal strings one name, across row groups whose dictionaries differ."""
    pa = pytest.importorskip("pyarrow")
    pc = pytest.importorskip("pyarrow.compute")
    import numpy as np

    from hlogap.trace.nsys import _first_seen

    rng = np.random.default_rng(chunks)
    pool = [
        "TSL:Thunk:#hlo_op=a#",
        "",
        None,
        "XlaModule:#hlo_module=m#",
        "b",
        "TSL:Thunk:#hlo_op=a#",
    ]
    rows = [pool[k] for k in rng.integers(0, len(pool), 500)]
    parts = np.array_split(np.array(rows, dtype=object), chunks)
    column = pa.chunked_array([pa.array(list(p), pa.string()).dictionary_encode() for p in parts])
    names, codes = _first_seen(column.unify_dictionaries().combine_chunks())
    expected = pc.dictionary_encode(
        pc.fill_null(pa.chunked_array([pa.array(list(p), pa.string()) for p in parts]), "")
    ).combine_chunks()
    assert names == expected.dictionary.to_pylist()
    assert codes.tolist() == expected.indices.to_pylist()
