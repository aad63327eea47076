"""nsys-jax numbers past what their columns hold (issue 44): times whose picoseconds wrap int64,
step numbers and device ids of more than 64 bits, a device description of `1e999` cores. Each
is one line and exit 3, never a traceback or a figure computed from a wrapped value; the largest
legal value of each is read as it is.

Every archive is built at test time from the shared H100 archive (its trace and one target
config; skipped when it is absent) and run through the CLI (harness.run)."""

from __future__ import annotations

import functools
import io
import json
import lzma
import re
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.attack.harness import assert_clean, run
from tests.conftest import SHARED

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

NSYS = SHARED / "nvidia-h100-nsys-jax" / "maxtext_fsdp4_test_data.zip"
TRACE = "nvtx_gpu_proj_trace/trace.parquet"
CONFIG = "dump/module_0016.jit_train_step.gpu_target_config.pbtxt.xz"
INT64_MAX = (1 << 63) - 1
LIMIT_NS = (1 << 61) // 1000  # the longest time whose picoseconds the reader takes


def _archive(
    tmp: Path,
    rows: Callable[[list[dict[str, Any]]], None] | None = None,
    config: Callable[[str], str] | None = None,
    members: dict[str, bytes] | None = None,
    layout: Callable[[Any], Any] | None = None,
) -> Path:
    """The shared archive's trace and target config, edited, as `tmp/run.zip`."""
    if not NSYS.is_file():
        pytest.skip(f"the shared fixture {NSYS} is absent")
    table, text, original = _source()
    if rows is not None:
        edited = [dict(r) for r in original]
        rows(edited)
        table = pa.Table.from_pylist(edited, schema=table.schema)
    if layout is not None:
        table = layout(table)
    out = io.BytesIO()
    pq.write_table(table, out)
    path = tmp / "run.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(TRACE, out.getvalue())
        z.writestr(CONFIG, lzma.compress((config(text) if config else text).encode()))
        for name, data in (members or {}).items():
            z.writestr(name, data)
    return path


@functools.cache
def _source() -> tuple[Any, str, list[dict[str, Any]]]:
    """The shared archive's trace (a table and its rows) and target config, read once."""
    with zipfile.ZipFile(NSYS) as source:
        table = pq.read_table(io.BytesIO(source.read(TRACE)))
        text = lzma.decompress(source.read(CONFIG)).decode()
    return table, text, table.to_pylist()


def _first_fusion(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The first fusion's thunk range (of jit__threefry_seed, timed)."""
    return next(
        r for r in rows if (r["Name"] or "").startswith("TSL:Thunk:") and "fusion" in r["Name"]
    )


def _audit(path: Path, tmp: Path, code: int) -> dict[str, Any] | str:
    result = run(["audit", str(path), "-f", "json", "--top", "0"], tmp)
    assert_clean(result, (code,))
    if code:
        assert len(result.err.strip().splitlines()) == 1, result.err
        return result.err
    report: dict[str, Any] = json.loads(result.out)
    return report


@pytest.mark.parametrize(
    ("column", "ns", "what"),
    [
        # x 1000 wraps to 448 ps: a silent, plausible duration before the guard.
        ("Projected Duration", 18_446_744_073_709_552, "thunk range durations"),
        # x 1000 wraps to exactly 0 (a division by zero further on).
        ("Projected Duration", 1 << 62, "thunk range durations"),
        ("Projected Duration", LIMIT_NS + 1, "thunk range durations"),
        ("Projected Start", 1 << 62, "thunk range start times"),
    ],
)
def test_times_past_int64_picoseconds_are_corrupt(
    tmp_path: Path, column: str, ns: int, what: str
) -> None:
    def edit(rows: list[dict[str, Any]]) -> None:
        _first_fusion(rows)[column] = ns

    err = _audit(_archive(tmp_path, edit), tmp_path, 3)
    assert f"corrupt profile: {what}" in err and "beyond 27 days" in err, err


def test_every_thunk_of_2_62_ns_is_corrupt_not_a_division_by_zero(tmp_path: Path) -> None:
    def edit(rows: list[dict[str, Any]]) -> None:
        for r in rows:
            if (r["Name"] or "").startswith("TSL:Thunk:"):
                r["Projected Duration"] = 1 << 62

    err = _audit(_archive(tmp_path, edit), tmp_path, 3)
    assert "thunk range durations" in err


def test_the_longest_legal_thunk_is_read_as_it_is(tmp_path: Path) -> None:
    found: dict[str, str] = {}

    def edit(rows: list[dict[str, Any]]) -> None:
        row = _first_fusion(rows)
        row["Projected Duration"] = LIMIT_NS
        found["op"] = re.search(r"hlo_op=([^#]+)#", row["Name"]).group(1)  # type: ignore[union-attr]

    report = _audit(_archive(tmp_path, edit), tmp_path, 0)
    assert isinstance(report, dict)
    longest = max(report["ops"], key=lambda o: o["measured_us"])
    assert longest["name"] == found["op"]
    assert longest["measured_us"] >= LIMIT_NS / 1e3


def test_end_before_a_far_start_is_corrupt_in_the_start_end_layout(tmp_path: Path) -> None:
    """The layout without projections (Text, Start, End): End - Start of values near int64's
    ends would wrap; the row is refused when it is timed."""

    def to_start_end(table: Any) -> Any:
        rows = table.to_pylist()
        row = _first_fusion(rows)
        row["Projected Start"], row["Projected Duration"] = -INT64_MAX, 0
        end = [
            INT64_MAX if r is row else r["Projected Start"] + r["Projected Duration"] for r in rows
        ]
        return pa.table(
            {
                "Text": [r["Name"] for r in rows],
                "Start": pa.array([r["Projected Start"] for r in rows], pa.int64()),
                "End": pa.array(end, pa.int64()),
                "Range ID": [r["RangeId"] for r in rows],
                "Parent ID": [r["ParentId"] for r in rows],
                "PID": [r["PID"] for r in rows],
                "TID": [r["TID"] for r in rows],
            }
        )

    err = _audit(_archive(tmp_path, layout=to_start_end), tmp_path, 3)
    assert "corrupt profile: thunk range" in err, err


def _step_range(number: str) -> Callable[[list[dict[str, Any]]], None]:
    """A step annotation over the first train step's module range, numbered `number`."""

    def edit(rows: list[dict[str, Any]]) -> None:
        module = next(r for r in rows if "hlo_module=jit_train_step" in (r["Name"] or ""))
        step = dict(module, Name=f"TSL:train:#step_num={number}#", ParentId=None)
        step["RangeId"] = max(r["RangeId"] or 0 for r in rows) + 1
        rows.append(step)

    return edit


def test_a_step_number_past_64_bits_is_corrupt(tmp_path: Path) -> None:
    err = _audit(_archive(tmp_path, _step_range("1" * 30)), tmp_path, 3)
    assert "step_num" in err and "64 bits" in err, err


def test_the_largest_step_number_is_read_as_it_is(tmp_path: Path) -> None:
    report = _audit(_archive(tmp_path, _step_range(str(INT64_MAX))), tmp_path, 0)
    assert isinstance(report, dict)
    assert [s["step"] for s in report["steps"]] == [INT64_MAX]


@pytest.mark.parametrize(
    ("field", "value"),
    [("core_count", "1e999"), ("core_count", "2147483648"), ("clock_rate_ghz", "1e999")],
)
def test_a_target_config_number_out_of_range_is_corrupt(
    tmp_path: Path, field: str, value: str
) -> None:
    def config(text: str) -> str:
        return re.sub(rf"{field}: [0-9.]+", f"{field}: {value}", text)

    err = _audit(_archive(tmp_path, config=config), tmp_path, 3)
    assert f"{field} {value} is out of range" in err, err


def test_the_largest_core_count_is_read_as_it_is(tmp_path: Path) -> None:
    """2**31 - 1 SMs (int32 in XLA's proto) match no known chip: the audit says so, and runs
    with the chip named."""

    def config(text: str) -> str:
        return re.sub(r"core_count: \d+", "core_count: 2147483647", text)

    path = _archive(tmp_path, config=config)
    err = _audit(path, tmp_path, 3)
    assert "cannot tell which GPU" in err, err
    result = run(["audit", str(path), "--chip", "h100-sxm", "-f", "json"], tmp_path)
    assert_clean(result, (0,))
    assert json.loads(result.out)["chip"]["name"] == "h100-sxm"


def _launchers(global_id: str) -> dict[str, bytes]:
    """thread-metadata.parquet naming the first train-step thread's GPU `global_id`."""
    table = pa.table(
        {
            "Name": [f"XlaLauncher:#global={global_id},local=0,process=0,slice=0#"],
            "PID": [7883],
            "TID": [8482],
        }
    )
    out = io.BytesIO()
    pq.write_table(table, out)
    return {"thread-metadata.parquet": out.getvalue()}


def test_a_global_device_id_past_64_bits_is_corrupt(tmp_path: Path) -> None:
    err = _audit(_archive(tmp_path, members=_launchers("1" * 23)), tmp_path, 3)
    assert "thread-metadata.parquet" in err and "64 bits" in err, err


def test_the_largest_global_device_id_is_read_as_it_is(tmp_path: Path) -> None:
    report = _audit(_archive(tmp_path, members=_launchers(str(INT64_MAX))), tmp_path, 0)
    assert isinstance(report, dict)
    assert report["summary"]["devices"] >= 1
