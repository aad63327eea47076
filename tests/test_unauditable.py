"""Files and profiles hlogap cannot audit are named as what they are (exit 3, one line):
xprof's tool outputs, TensorFlow profiles without XLA, and run directories whose hosts are
different chips."""

from __future__ import annotations

import gzip
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from hlogap import audit
from hlogap.errors import InputError
from hlogap.options import AuditOptions
from hlogap.proto import xplane_pb2
from tests import tpu_trace as tt
from tests.conftest import SHARED
from tests.test_errors import run_cli

HLO_STATS_ROWS = [
    {"program_id": "15", "hlo_op_name": "fusion.1", "category": "loop fusion", "occurrences": 4}
]


def test_an_hlo_stats_export_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "host0.hlo_stats.json"
    path.write_text(json.dumps(HLO_STATS_ROWS))
    code, out, err = run_cli(["audit", str(path)], capsys)
    assert (code, out) == (3, "")
    assert err.count("\n") == 1
    assert "xprof's `hlo_stats` tool output, not a profile" in err
    assert ".xplane.pb it was made from" in err


def test_a_gzipped_export_named_by_its_content(tmp_path: Path) -> None:
    path = tmp_path / "export.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"byProgram": {"children": []}}).encode()))
    with pytest.raises(InputError, match="xprof's `op_profile` tool output"):
        audit(path)


def test_other_json_is_not_called_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "notes.json"
    path.write_text('{"a": 1}')
    with pytest.raises(InputError, match="is a JSON file, not a profile"):
        audit(path)


@pytest.mark.parametrize(
    "export",
    [
        "amd-gpu/mi300x_conv3d.xprof_hlo_stats.json",
        "tpu-v5p-xprof/overview_page.json.gz",
        "tpu-v5p-xprof/roofline_model.json.gz",
    ],
)
def test_real_xprof_exports(export: str) -> None:
    path = SHARED / export
    if not path.is_file():
        pytest.skip(f"{path} absent (../shared not beside the project)")
    with pytest.raises(InputError, match="tool output, not a profile"):
        audit(path)


def _tensorflow_gpu_profile(path: Path) -> None:
    """A GPU plane whose kernels carry TensorFlow's `tf_op` and no `hlo_op` (TF without XLA)."""
    space = xplane_pb2.XSpace()
    plane = space.planes.add()
    plane.id, plane.name = 1, "/device:GPU:0"
    plane.stat_metadata[1].id, plane.stat_metadata[1].name = 1, "tf_op"
    plane.event_metadata[1].id, plane.event_metadata[1].name = 1, "volta_sgemm_128x64_nn"
    line = plane.lines.add()
    line.id, line.name = 1, "Stream #14(Compute)"
    for k in range(3):
        ev = line.events.add()
        ev.metadata_id, ev.offset_ps, ev.duration_ps = 1, k * 10_000_000, 5_000_000
        st = ev.stats.add()
        st.metadata_id, st.str_value = 1, "model/dense/MatMul:MatMul"
    path.write_bytes(space.SerializeToString())


def test_tensorflow_without_xla_is_named(tmp_path: Path) -> None:
    path = tmp_path / "host.xplane.pb"
    _tensorflow_gpu_profile(path)
    with pytest.raises(InputError, match=r"no XLA ops in this profile \(TensorFlow ops without"):
        audit(path)


def test_hosts_of_different_chips_are_refused(tmp_path: Path) -> None:
    run = tmp_path / "plugins" / "profile" / "run1"
    v6e = tt.small_spec(devices=1)
    tt.write_tpu_trace(run / "host-a.xplane.pb", replace(v6e, host="host-a"))
    tt.write_tpu_trace(run / "host-b.xplane.pb", replace(v6e, host="host-b", chip=tt.V5P))
    with pytest.raises(InputError, match="different chips") as exc:
        audit(run)
    assert "tpu-v6e on host-a" in str(exc.value) and "tpu-v5p on host-b" in str(exc.value)
    assert audit(run, AuditOptions(host="host-a")).chip.name == "tpu-v6e"  # one chip's hosts apart


def test_real_amd_hosts_of_two_chips(tmp_path: Path) -> None:
    files = [
        SHARED / "amd-gpu" / f for f in ("mi300x_conv3d.xplane.pb", "mi355x_te_attention.xplane.pb")
    ]
    if not all(f.is_file() for f in files):
        pytest.skip("AMD fixtures absent (../shared not beside the project)")
    run = tmp_path / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    for i, f in enumerate(files):
        shutil.copy(f, run / f"host{i}.xplane.pb")
    with pytest.raises(InputError, match="different chips"):
        audit(run)
