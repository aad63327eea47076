"""The chip database (hlogap/chips/specs/*.toml) and chip detection (hlogap.chips)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hlogap.chips import (
    PEAK_KEYS,
    Chip,
    builtin_chips,
    detect_chip,
    dtype_key,
    load_chip,
)
from hlogap.cost.base import widest as widest_type
from hlogap.errors import UsageError
from hlogap.proto import xplane_pb2

CONTRACT_NAMES = [
    "tpu-v2", "tpu-v3", "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7",
    "a100-sxm", "a100-pcie", "h100-sxm", "h100-pcie", "h200", "b200", "gb200", "l4",
    "mi250x", "mi300x", "mi325x", "mi355x",
]  # fmt: skip
AMD_FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "amd-gpu"
GIB = 2**30


def chip(name: str) -> Chip:
    return load_chip(name)


# --- the built-in files -------------------------------------------------------------------


def test_contract_names_exactly() -> None:
    chips = builtin_chips()
    assert [c.name for c in chips] == sorted(CONTRACT_NAMES)
    for c in chips:
        assert c.path is not None and Path(c.path).stem == c.name


@pytest.mark.parametrize("c", builtin_chips(), ids=lambda c: c.name)
def test_every_figure_has_a_source(c: Chip) -> None:
    assert c.vendor in {"google", "nvidia", "amd"}
    assert c.display and c.detect
    figures = [f"peak_flops.{k}" for k in c.peak_flops]
    figures += [f"vector_flops.{k}" for k in c.vector_flops]
    figures.append("memory.hbm_bw")
    if c.hbm_bytes is not None:
        figures.append("memory.hbm_bytes")
    if c.interconnect_bw is not None:
        figures.append("interconnect.bw")
    if c.host_bw is not None:
        figures.append("host.bw")
    for figure in figures:
        source = c.sources.get(figure, "")
        assert "https://" in source or source.startswith("seeds:"), f"{c.name}: {figure}"
    assert set(c.peak_flops) <= set(PEAK_KEYS) and "bf16" in c.peak_flops
    assert c.hbm_bytes is not None and c.interconnect_bw is not None


def test_ridge_points() -> None:
    assert chip("tpu-v5e").ridge_point() == pytest.approx(240, abs=2)
    assert chip("h100-sxm").ridge_point("bf16") == pytest.approx(295, abs=1)


def test_dense_peaks_per_device() -> None:
    # Dense, not the 2x sparse data-sheet figure.
    assert chip("h100-sxm").peak_flops["bf16"] == pytest.approx(9.89e14)
    assert chip("mi300x").peak_flops["bf16"] == pytest.approx(1.3074e15)
    # TPU v2/v3 and TPU7x devices are one TensorCore: half a chip.
    assert chip("tpu-v2").peak_flops["bf16"] == pytest.approx(2.3e13)
    assert chip("tpu-v3").peak_flops["bf16"] == pytest.approx(1.4e14 / 2)
    assert chip("tpu-v7").peak_flops["bf16"] == pytest.approx(2.307e15 / 2)
    # v4/v5p megacore and v5e/v6e: one chip.
    assert chip("tpu-v5p").peak_flops["bf16"] == pytest.approx(4.59e14)
    assert chip("tpu-v5e").peak_flops["int8"] == pytest.approx(3.94e14)


# --- dtypes and peaks ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("element_type", "key"),
    [
        ("bf16", "bf16"),
        ("f16", "f16"),
        ("f32", "f32"),
        ("f64", "f64"),
        ("s8", "int8"),
        ("u8", "int8"),
        ("f8e4m3fn", "fp8"),
        ("f8e5m2", "fp8"),
        ("f8e4m3b11fnuz", "fp8"),
        ("int8", "int8"),
        ("s32", "f32"),
        ("c128", "f64"),
    ],
)
def test_dtype_key(element_type: str, key: str) -> None:
    assert dtype_key(element_type) == key


@pytest.mark.parametrize(
    ("a", "b", "widest"),
    [
        ("bf16", "s8", "bf16"),
        ("s8", "bf16", "bf16"),
        ("s8", "s8", "int8"),
        ("u8", "s8", "int8"),
        ("f32", "bf16", "f32"),
        ("f8e4m3fn", "f8e5m2", "fp8"),
        ("f8e4m3fn", "bf16", "bf16"),
        ("f64", "f32", "f64"),
    ],
)
def test_widest_dtype(a: str, b: str, widest: str) -> None:
    # A dot runs at the peak of its widest operand type (the cost model picks it).
    assert dtype_key(widest_type([a, b]) or "") == widest


def test_matrix_peak_fallbacks() -> None:
    h100, v5e, mi355x = chip("h100-sxm"), chip("tpu-v5e"), chip("mi355x")
    assert h100.matrix_peak("f8e4m3fn") == pytest.approx(1.979e15)
    assert h100.matrix_peak("s8") == pytest.approx(1.979e15)
    assert h100.matrix_peak("f32") == pytest.approx(4.945e14)  # XLA's default: TF32
    assert v5e.matrix_peak("f8e5m2") == v5e.peak_flops["bf16"]  # no fp8 on v5e
    assert v5e.matrix_peak("f32") == v5e.peak_flops["bf16"]  # TPU f32 dots: bf16 passes
    assert v5e.matrix_peak("f16") == v5e.peak_flops["bf16"]
    assert mi355x.matrix_peak("f32") == mi355x.peak_flops["f32"]  # no TF32 on CDNA 4


def test_vector_peak() -> None:
    h100, v5e, v5p = chip("h100-sxm"), chip("tpu-v5e"), chip("tpu-v5p")
    assert h100.vector_peak("f32") == pytest.approx(6.7e13)
    assert h100.vector_peak("f64") == pytest.approx(3.4e13)
    assert h100.vector_peak("bf16") == pytest.approx(6.7e13)  # f32 rate for narrower types
    assert v5e.vector_peak("bf16") == v5e.matrix_peak("bf16")  # no [vector_flops]
    assert v5p.vector_peak("f32") == pytest.approx(1.4e13)


# --- loading ------------------------------------------------------------------------------


def test_load_by_name_and_by_path() -> None:
    h100 = load_chip("h100-sxm")
    assert h100 is load_chip("H100-SXM")
    assert h100.path is not None
    assert load_chip(h100.path) == h100


def test_unknown_name() -> None:
    with pytest.raises(UsageError, match=r"unknown chip 'zz9'; known: a100-pcie, .*h100-sxm"):
        load_chip("zz9")


@pytest.mark.parametrize(
    ("name", "suggested"),
    [
        ("h100", "h100-pcie, h100-sxm"),
        ("tpu-v5", "tpu-v5e, tpu-v5p"),
        ("tpuv6e", "tpu-v6e"),
        ("h900", "h200"),
        ("MI30", "mi300x"),
    ],
)
def test_a_near_name_gets_suggestions(name: str, suggested: str) -> None:
    with pytest.raises(UsageError, match=f"did you mean {suggested}\\?"):
        load_chip(name)


def test_cpu_is_the_calibrated_chip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HLOGAP_CACHE_DIR", str(tmp_path))
    with pytest.raises(UsageError, match="hlogap calibrate"):
        load_chip("cpu")
    (tmp_path / "hlogap").mkdir()
    (tmp_path / "hlogap" / "cpu.toml").write_text(
        'name = "cpu"\n[peak_flops]\nf32 = 1e11\n[memory]\nhbm_bw = 1e10\n'
    )
    assert load_chip("cpu").name == "cpu" and load_chip("CPU").hbm_bw == 1e10


def test_minimal_user_file(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('name = "my-chip"\n[peak_flops]\nbf16 = 1e14\n[memory]\nhbm_bw = 1e12\n')
    mine = load_chip(str(path))
    assert mine.name == "my-chip" and mine.display == "my-chip" and mine.vendor == "custom"
    assert mine.peak_flops == {"bf16": 1e14} and mine.vector_flops == {}
    assert mine.hbm_bw == 1e12 and mine.hbm_bytes is None and mine.interconnect_bw is None
    assert mine.path == str(path)
    assert mine.matrix_peak("f32") == mine.matrix_peak("s8") == 1e14
    assert mine.vector_peak("f32") == 1e14
    assert mine.ridge_point() == pytest.approx(100)


def test_user_file_with_only_an_int8_peak(tmp_path: Path) -> None:
    path = tmp_path / "int8.toml"
    path.write_text('name = "x"\n[peak_flops]\nint8 = 4e14\n[memory]\nhbm_bw = 1e12\n')
    assert load_chip(str(path)).matrix_peak("bf16") == 4e14


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('name = "x"\n[peak_flops]\nbf16 = 1e14\n', "hbm_bw"),
        ('name = "x"\n[peak_flops]\n[memory]\nhbm_bw = 1e12\n', "at least one"),
        ("[peak_flops]\nbf16 = 1e14\n[memory]\nhbm_bw = 1e12\n", "'name'"),
        ('name = "x"\n[peak_flops]\nfp16 = 1e14\n[memory]\nhbm_bw = 1e12\n', "unknown .* 'fp16'"),
        ('name = "x"\n[peak_flops]\nbf16 = -1\n[memory]\nhbm_bw = 1e12\n', "positive"),
        ('name = "x"\n[peak_flops]\nbf16 = 1e14\n[memory]\nhbm_bw = "fast"\n', "positive"),
        ('name = "x"\npeak_flops = 3\n[memory]\nhbm_bw = 1e12\n', "table"),
        ('name = "x\n', "invalid chip file"),
    ],
)
def test_invalid_user_file(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(UsageError, match=reason):
        load_chip(str(path))


def test_missing_user_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such chip file"):
        load_chip(str(tmp_path / "nope.toml"))


# --- detection ----------------------------------------------------------------------------


def plane_stats(path: Path) -> dict[str, dict[str, object]]:
    """Plane name -> {stat name: value} for the plane-level stats of an .xplane.pb file."""
    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    planes: dict[str, dict[str, object]] = {}
    for plane in space.planes:
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        stats: dict[str, object] = {}
        for stat in plane.stats:
            kind = stat.WhichOneof("value")
            if kind in ("double_value", "int64_value", "uint64_value", "str_value"):
                stats[names[stat.metadata_id]] = getattr(stat, kind)
        planes[plane.name] = stats
    return planes


@pytest.mark.parametrize(
    ("file", "expected", "described"),
    [
        ("mi300x_conv3d.xplane.pb", "mi300x", "AMD GFX 9.4, 304 CUs, 192 GiB"),
        ("mi355x_te_attention.xplane.pb", "mi355x", "AMD GFX 9.5, 256 CUs"),
    ],
)
def test_detect_real_amd_traces(file: str, expected: str, described: str) -> None:
    path = AMD_FIXTURES / file
    if not path.exists():
        pytest.skip(f"{path} absent")
    planes = plane_stats(path)
    found = detect_chip(planes["/device:GPU:0"], "/device:GPU:0")
    assert found is not None
    detected, how = found
    assert detected.name == expected
    assert how.startswith(f"detected: {described}")
    assert how.endswith(f"-> {expected}")
    # The driver's memory_bandwidth stat is far below the data sheet and is not used.
    driver_bw = planes["/device:GPU:0"]["memory_bandwidth"]
    assert isinstance(driver_bw, int) and detected.hbm_bw > 1.5 * driver_bw


def test_planes_with_only_a_vendor_detect_nothing() -> None:
    assert detect_chip({"device_vendor": "AMD"}, "/device:GPU:3") is None


def amd(memory_gib: float, *, cus: int = 304, minor: int = 4, clock: int = 2100000) -> dict:
    return {
        "device_vendor": "AMD",
        "clock_rate": clock,
        "core_count": cus,
        "memory_bandwidth": 2662400000000,
        "memory_size": int(memory_gib * GIB),
        "compute_cap_major": 9,
        "compute_cap_minor": minor,
    }


def detected(stats: dict, plane: str = "/device:GPU:0") -> str | None:
    found = detect_chip(stats, plane)
    return None if found is None else found[0].name


def test_mi325x_and_mi300x_differ_by_memory() -> None:
    assert detected(amd(192)) == "mi300x"
    assert detected(amd(256)) == "mi325x"
    assert detected(amd(128)) is None  # no such part


def test_mi355x_needs_its_clock() -> None:
    assert detected(amd(288, cus=256, minor=5, clock=2400000)) == "mi355x"
    assert detected(amd(288, cus=256, minor=5, clock=2200000)) is None  # an MI350X


def test_mi250x_gcd() -> None:
    assert detected(amd(64, cus=110, minor=0, clock=1700000)) == "mi250x"


def nvidia(sms: int, memory_gb: float, major: int = 9, minor: int = 0) -> dict:
    return {
        "device_vendor": "Nvidia",
        "clock_rate": 1980000,
        "core_count": sms,
        "memory_bandwidth": 3352000000000,
        "memory_size": int(memory_gb * 1e9),
        "compute_cap_major": major,
        "compute_cap_minor": minor,
    }


def test_nvidia_hopper() -> None:
    assert detected(nvidia(132, 85.5)) == "h100-sxm"
    assert detected(nvidia(114, 85.5)) == "h100-pcie"
    assert detected(nvidia(132, 150.7)) == "h200"
    assert detected(nvidia(132, 100.5)) is None  # H100 NVL 94 GB: not in the database


def test_nvidia_others() -> None:
    assert detected(nvidia(58, 24.2, 8, 9)) == "l4"
    assert detected(nvidia(148, 192.3, 10, 0)) == "b200"
    assert detected(nvidia(148, 198.7, 10, 0)) == "gb200"


def test_a100_sxm_and_pcie_are_ambiguous() -> None:
    found = detect_chip(nvidia(108, 85.1, 8, 0), "/device:GPU:0")
    assert found is not None
    assert found[0].name == "a100-sxm"
    assert "also matches a100-pcie" in found[1]


@pytest.mark.parametrize(
    ("device_type", "expected"),
    [
        ("TPU v2", "tpu-v2"),
        ("TPU v3", "tpu-v3"),
        ("TPU v4", "tpu-v4"),
        ("TPU v5 Lite", "tpu-v5e"),
        ("TPU v5 lite", "tpu-v5e"),
        ("TPU v5", "tpu-v5p"),
        ("TPU v6 Lite", "tpu-v6e"),
        ("TPU7x", "tpu-v7"),
        ("TPU v7x", "tpu-v7"),
        ("TPU v4 lite", None),
    ],
)
def test_detect_tpu(device_type: str, expected: str | None) -> None:
    stats = {"device_type_string": device_type, "peak_teraflops_per_second": 197.0}
    assert detected(stats, "/device:TPU:0") == expected


def test_detect_respects_the_plane_kind() -> None:
    assert detected({"device_type_string": "TPU v4"}, "/device:GPU:0") is None
    assert detected(amd(192), "/device:TPU:0") is None
    assert detected(amd(192), "/host:CPU") is None


def test_tpu_how() -> None:
    found = detect_chip({"device_type_string": "TPU v6 Lite"}, "/device:TPU:0")
    assert found is not None
    assert found[1] == "detected: device_type_string 'TPU v6 Lite' -> tpu-v6e"


def test_a_chip_other_than_the_traces_is_named(amd_file: Path) -> None:
    """`--chip` naming another chip than the trace's devices are: judged as asked, with a
    warning naming the chip the trace says (its device plane's own stats)."""
    from hlogap import audit

    detected = audit(amd_file)
    assert detected.chip is not None and not any("judged against" in w for w in detected.warnings)
    other = audit(amd_file, "tpu-v6e")
    (warning,) = (w for w in other.warnings if "judged against" in w)
    assert f"[{detected.chip.name}]" in warning and "--chip tpu-v6e" in warning
    same = audit(amd_file, detected.chip.name)
    assert not any("judged against" in w for w in same.warnings)
