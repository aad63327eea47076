"""The chip database (hlogap/chips/specs/*.toml) and chip detection (hlogap.chips)."""

from __future__ import annotations

import re
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
from hlogap.options import AuditOptions
from hlogap.proto import xplane_pb2

CONTRACT_NAMES = [
    "tpu-v2", "tpu-v3", "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7",
    "a100-sxm", "a100-sxm-40gb", "a100-pcie", "a100-pcie-40gb",
    "h100-sxm", "h100-pcie", "h100-nvl", "h200", "b200", "gb200", "l4",
    "mi250x", "mi300x", "mi325x", "mi355x",
]  # fmt: skip
SHARED_FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"
AMD_FIXTURES = SHARED_FIXTURES / "amd-gpu"
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


@pytest.mark.parametrize("name", [c.name for c in builtin_chips()])
def test_a_chip_named_is_the_one_the_list_gives(name: str) -> None:
    """`--chip NAME`, in any case and spacing, is the chip `builtin_chips()` names so."""
    listed = {c.name: c for c in builtin_chips()}
    assert load_chip(name) == listed[name]
    assert load_chip(f" {name.upper()} ") == listed[name]


def test_the_spec_files_read_back_from_the_cache_are_the_files_chips(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spec files' TOML is kept as JSON in the cache (keyed by the files' paths, sizes and
    mtimes): the chips read back equal the ones tomllib parses, an edited file is parsed
    again, and an unwritable cache only costs the parse."""
    from hlogap.chips import database

    specs = tmp_path / "specs"
    specs.mkdir()
    for name in ("h100-sxm", "mi300x"):
        (specs / f"{name}.toml").write_bytes((database._specs_dir() / f"{name}.toml").read_bytes())
    monkeypatch.setattr(database, "_specs_dir", lambda: specs)
    monkeypatch.setenv("HLOGAP_CACHE_DIR", str(tmp_path / "cache"))

    def fresh() -> list[Chip]:
        database._builtin.cache_clear()
        return builtin_chips()

    parsed = fresh()
    assert [c.name for c in parsed] == ["h100-sxm", "mi300x"]
    assert len(list((tmp_path / "cache" / "hlogap").glob("specs-*.json"))) == 1
    assert fresh() == parsed  # from the cache
    edited = (specs / "mi300x.toml").read_text().replace("hbm_bw = 5.3e12", "hbm_bw = 5.25e12")
    (specs / "mi300x.toml").write_text(edited)
    assert {c.name: c.hbm_bw for c in fresh()}["mi300x"] == 5.25e12
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("HLOGAP_CACHE_DIR", str(blocker / "sub"))  # cannot be made
    assert {c.name: c.hbm_bw for c in fresh()}["mi300x"] == 5.25e12
    database._builtin.cache_clear()


def test_unknown_name() -> None:
    with pytest.raises(UsageError, match=r"unknown chip 'zz9'; known: a100-pcie, .*h100-sxm"):
        load_chip("zz9")


@pytest.mark.parametrize(
    ("name", "suggested"),
    [
        ("h100", "h100-nvl, h100-pcie, h100-sxm"),
        ("a100", "a100-pcie, a100-pcie-40gb, a100-sxm, a100-sxm-40gb"),
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
    assert detected(nvidia(132, 100.5)) == "h100-nvl"  # 94 GB


def test_nvidia_others() -> None:
    assert detected(nvidia(58, 24.2, 8, 9)) == "l4"
    assert detected(nvidia(148, 192.3, 10, 0)) == "b200"
    assert detected(nvidia(148, 198.7, 10, 0)) == "gb200"


def test_a100_variants_without_a_name() -> None:
    """A trace without the device's name: memory size tells 40 GB from 80 GB, the driver's
    memory_bandwidth (CUPTI: 2 x memory clock x bus width) tells the 80 GB SXM from the PCIe
    card; the 40 GB SXM and PCIe parts report the same stats and have the same figures."""

    def a100(gb: float, bandwidth: float | None) -> dict[str, object]:
        stats = nvidia(108, gb, 8, 0)
        if bandwidth is None:
            del stats["memory_bandwidth"]
        else:
            stats["memory_bandwidth"] = bandwidth
        return stats

    assert detected(a100(85.2, 2.03904e12)) == "a100-sxm"
    assert detected(a100(85.2, 1.93536e12)) == "a100-pcie"
    assert detected(a100(42.4, 1.5552e12)) == "a100-sxm-40gb"
    found = detect_chip(a100(42.4, 1.5552e12), "/device:GPU:0")
    assert found is not None and "also matches a100-pcie-40gb" in found[1]
    twins = load_chip("a100-sxm-40gb"), load_chip("a100-pcie-40gb")
    assert twins[0].hbm_bw == twins[1].hbm_bw and twins[0].peak_flops == twins[1].peak_flops
    # No bandwidth stat: the SXM part, saying the PCIe card matches too.
    found = detect_chip(a100(85.2, None), "/device:GPU:0")
    assert found is not None and found[0].name == "a100-sxm"
    assert "also matches a100-pcie; pass --chip" in found[1]
    # A bandwidth near no part's data sheet chooses nothing.
    found = detect_chip(a100(85.2, 3.0e12), "/device:GPU:0")
    assert found is not None and "also matches a100-pcie" in found[1]
    assert "bandwidth" not in found[1]


def test_the_40gb_a100_is_not_judged_as_the_80gb_one() -> None:
    """Issue 40: an A100 40GB run was audited at the 80 GB part's 2.04 TB/s, and the header
    said '40 GiB -> a100-sxm ... 80GB'."""
    found = detect_chip(DEVICES["a100-sxm-40gb"], "/device:GPU:0")
    assert found is not None
    chip, how = found
    assert chip.name == "a100-sxm-40gb" and chip.hbm_bw == pytest.approx(1.555e12)
    assert chip.display == "NVIDIA A100 SXM4 40GB"
    assert how == (
        "detected: Nvidia compute capability 8.0, 108 SMs, 39 GiB, "
        "named 'NVIDIA A100-SXM4-40GB' -> a100-sxm-40gb"
    )


def test_a_name_no_file_lists_is_said() -> None:
    stats = dict(DEVICES["a100-sxm"], gpu_device_name="NVIDIA A800-SXM4-80GB")
    found = detect_chip(stats, "/device:GPU:0")
    assert found is not None and found[0].name == "a100-sxm"  # by its memory bandwidth
    assert "'NVIDIA A800-SXM4-80GB': not a name a100-sxm's file lists" in found[1]
    # A name that every candidate lacks does not stop the other stats choosing.
    assert "driver memory bandwidth 2.04 TB/s" in found[1]


def test_amd_bandwidth_stat_chooses_nothing() -> None:
    """ROCm's memory_bandwidth is half the data sheet's (2.66e12 on an MI300X): it is near no
    AMD file's figure, and memory size alone tells the MI300X from the MI325X."""
    assert detected(amd(192)) == "mi300x"
    found = detect_chip(amd(192), "/device:GPU:0")
    assert found is not None and "bandwidth" not in found[1]


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
    other = audit(amd_file, AuditOptions(chip="tpu-v6e"))
    (warning,) = (w for w in other.warnings if "judged against" in w)
    assert f"[{detected.chip.name}]" in warning and "--chip tpu-v6e" in warning
    same = audit(amd_file, AuditOptions(chip=detected.chip.name))
    assert not any("judged against" in w for w in same.warnings)


# --- every variant, from the stats its devices report ---------------------------------------


# Plane stats as the device writes them (CUPTI: `gpu_device_name`, `memory_size` =
# cuDeviceTotalMem, `memory_bandwidth` = 2 x memory clock x bus width / 8, `clock_rate` in kHz).
# The H100 SXM's are those of the nsys-jax fixture (../shared/fixtures/nvidia-h100-nsys-jax,
# read from its XLA target config); the others are the parts' reported sizes, memory clocks and
# bus widths (A100 40GB: 40,441 MiB, 1,215 MHz x 5,120 bits; A100 80GB: 81,251 MiB, 1,593 MHz
# SXM / 1,512 MHz PCIe; H100 PCIe: HBM2e 1,593 MHz x 5,120 bits; H100 NVL: 95,830 MiB, 2,619 MHz
# x 6,016 bits; H200: 143,771 MiB; B200: 183,359 MiB; GB200: 189,471 MiB; L4: 23,034 MiB).
def _nv(
    name: str, sms: int, mib: int, bandwidth: float, clock_mhz: int, cc: tuple[int, int]
) -> dict[str, object]:
    return {
        "device_vendor": "Nvidia",
        "gpu_device_name": name,
        "clock_rate": clock_mhz * 1000,
        "core_count": sms,
        "memory_bandwidth": int(bandwidth),
        "memory_size": mib * 2**20,
        "compute_cap_major": cc[0],
        "compute_cap_minor": cc[1],
    }


DEVICES: dict[str, dict[str, object]] = {
    "a100-sxm-40gb": _nv("NVIDIA A100-SXM4-40GB", 108, 40441, 1.5552e12, 1410, (8, 0)),
    "a100-pcie-40gb": _nv("NVIDIA A100-PCIE-40GB", 108, 40339, 1.5552e12, 1410, (8, 0)),
    "a100-sxm": _nv("NVIDIA A100-SXM4-80GB", 108, 81251, 2.03904e12, 1410, (8, 0)),
    "a100-pcie": _nv("NVIDIA A100 80GB PCIe", 108, 81251, 1.93536e12, 1410, (8, 0)),
    "h100-sxm": {
        **_nv("NVIDIA H100 80GB HBM3", 132, 80995, 3.35232e12, 1980, (9, 0)),
        "memory_size": 84929478656,
    },
    "h100-pcie": _nv("NVIDIA H100 PCIe", 114, 81559, 2.03904e12, 1755, (9, 0)),
    "h100-nvl": _nv("NVIDIA H100 NVL", 132, 95830, 3.939e12, 1785, (9, 0)),
    "h200": _nv("NVIDIA H200", 132, 143771, 4.8e12, 1980, (9, 0)),
    "b200": _nv("NVIDIA B200", 148, 183359, 7.7e12, 1965, (10, 0)),
    "gb200": _nv("NVIDIA GB200", 148, 189471, 8.0e12, 2062, (10, 0)),
    "l4": _nv("NVIDIA L4", 58, 23034, 3.0e11, 2040, (8, 9)),
    # ROCm (the AMD fixtures' planes: no device name, memory_bandwidth half the data sheet's)
    "mi250x": amd(64, cus=110, minor=0, clock=1700000),
    "mi300x": amd(192),
    "mi325x": amd(256),
    "mi355x": amd(288, cus=256, minor=5, clock=2400000),
}

# The data sheets' figures per device (dense bf16 FLOP/s, HBM B/s, HBM bytes as printed in GB),
# written here apart from the chip files: the table in docs/chips.md.
DATASHEETS: dict[str, tuple[float, float, float]] = {
    "a100-sxm-40gb": (312e12, 1.555e12, 40e9),
    "a100-pcie-40gb": (312e12, 1.555e12, 40e9),
    "a100-sxm": (312e12, 2.039e12, 80e9),
    "a100-pcie": (312e12, 1.935e12, 80e9),
    "h100-sxm": (1979e12 / 2, 3.35e12, 80e9),
    "h100-pcie": (1513e12 / 2, 2.0e12, 80e9),
    "h100-nvl": (1671e12 / 2, 3.9e12, 94e9),
    "h200": (1979e12 / 2, 4.8e12, 141e9),
    "b200": (4.5e15 / 2, 7.7e12, 180e9),
    "gb200": (5e15 / 2, 8e12, 186e9),
    "l4": (242e12 / 2, 300e9, 24e9),
    "mi250x": (383e12 / 2, 3.2768e12 / 2, 128e9 / 2),
    "mi300x": (1307.4e12, 5.3e12, 192e9),
    "mi325x": (1307.4e12, 6e12, 256e9),
    "mi355x": (2.5166e15, 8e12, 288e9),
    "tpu-v4": (275e12, 1200e9, 32 * GIB),
    "tpu-v5e": (197e12, 819e9, 16e9),
    "tpu-v5p": (459e12, 2765e9, 95 * GIB),
    "tpu-v6e": (918e12, 1638e9, 32e9),
    "tpu-v7": (2307e12 / 2, 7380e9 / 2, 192 * GIB / 2),
}


@pytest.mark.parametrize("name", sorted(DATASHEETS))
def test_figures_are_the_data_sheets(name: str) -> None:
    bf16, hbm_bw, hbm_bytes = DATASHEETS[name]
    c = load_chip(name)
    assert c.peak_flops["bf16"] == pytest.approx(bf16, rel=1e-3)
    assert c.hbm_bw == pytest.approx(hbm_bw, rel=1e-3)
    assert c.hbm_bytes == pytest.approx(hbm_bytes, rel=1e-3)


def test_every_gpu_chip_has_its_device() -> None:
    gpus = {c.name for c in builtin_chips() if c.vendor != "google"}
    assert set(DEVICES) == gpus
    assert set(DATASHEETS) >= gpus


@pytest.mark.parametrize("name", sorted(DEVICES))
def test_each_variant_is_detected_from_its_device(name: str) -> None:
    found = detect_chip(DEVICES[name], "/device:GPU:0")
    assert found is not None
    chip, how = found
    assert chip.name == name, how
    assert "also matches" not in how and "not a name" not in how
    # The header never contradicts itself: the memory the detection line quotes (what the
    # device reports: a GiB or so under the nominal size, 1/16 less on the L4, whose GDDR6
    # keeps ECC in it) is the chip's data-sheet size.
    gib = float(how.split(" GiB")[0].rsplit(", ", 1)[1])
    assert chip.hbm_bytes is not None
    nominal = chip.hbm_bytes / 1e9
    assert abs(gib - nominal) <= 0.1 * nominal, (how, chip.display)
    printed = re.search(r"(\d+)GB", chip.display)
    if printed and chip.name != "mi250x":  # the MI250X file is one GCD of a 128GB package
        assert float(printed.group(1)) == pytest.approx(nominal)


@pytest.mark.parametrize("name", sorted(n for n, s in DEVICES.items() if "gpu_device_name" in s))
def test_each_variant_without_its_name(name: str) -> None:
    """Older traces carry no device name: memory size, SMs and the driver's bandwidth tell every
    part but the A100 40GB PCIe, whose stats and figures are the 40GB SXM part's."""
    stats = {k: v for k, v in DEVICES[name].items() if k != "gpu_device_name"}
    expected = "a100-sxm-40gb" if name == "a100-pcie-40gb" else name
    assert detected(stats) == expected


def test_nsys_stats_name_the_device() -> None:
    """An nsys-jax archive's target config gives `device_name` (hlogap.trace.nsys)."""
    stats = {k: v for k, v in DEVICES["a100-pcie"].items() if k != "gpu_device_name"}
    del stats["memory_bandwidth"]
    assert detected(stats) == "a100-sxm"
    assert detected({**stats, "device_name": "NVIDIA A100 80GB PCIe"}) == "a100-pcie"


def test_real_h100_nsys_fixture_stats() -> None:
    zipped = SHARED_FIXTURES / "nvidia-h100-nsys-jax" / "maxtext_fsdp4_test_data.zip"
    if not zipped.exists():
        pytest.skip(f"{zipped} absent")
    from hlogap.trace import nsys

    with nsys._open(zipped) as archive:
        stats = nsys._device_stats(archive, "")
    assert stats["device_name"] == "NVIDIA H100 80GB HBM3"
    found = detect_chip(stats, "/device:GPU:0")
    assert found is not None
    assert found[1] == "detected: Nvidia compute capability 9.0, 132 SMs, 79 GiB -> h100-sxm"


def test_real_tpu_fixture_stats() -> None:
    path = SHARED_FIXTURES / "tpu-v6e-offload" / "tpu_inference_2.xplane.pb"
    if not path.exists():
        pytest.skip(f"{path} absent")
    planes = plane_stats(path)
    found = detect_chip(planes["/device:TPU:0"], "/device:TPU:0")
    assert found is not None and found[0].name == "tpu-v6e"
    # The trace's own peaks agree with the data sheet's.
    v6e, stats = found[0], planes["/device:TPU:0"]
    flops, hbm = stats["peak_teraflops_per_second"], stats["peak_hbm_bw_gigabytes_per_second"]
    assert isinstance(flops, float) and flops * 1e12 == pytest.approx(v6e.peak_flops["bf16"])
    assert isinstance(hbm, float) and hbm * 1e9 == pytest.approx(v6e.hbm_bw, rel=1e-3)


def test_gpu_detect_ranges_do_not_overlap() -> None:
    """Two GPU files whose required stats can both match tell themselves apart by name, by
    bandwidth, or one prefers: never a silent first-listed pick."""
    gpus = [c for c in builtin_chips() if c.vendor != "google"]
    for i, a in enumerate(gpus):
        for b in gpus[i + 1 :]:
            if not _overlap(a.detect, b.detect):
                continue
            names, others = _detect_names(a), _detect_names(b)
            assert names and others and not names & others, (a.name, b.name)
            same = a.hbm_bw == b.hbm_bw and a.peak_flops == b.peak_flops
            bandwidth_tells = abs(a.hbm_bw / b.hbm_bw - 1) > 0.04
            assert same or bandwidth_tells, (a.name, b.name)
            assert (a.detect.get("prefer") is True) != (b.detect.get("prefer") is True)


def _detect_names(c: Chip) -> set[str]:
    names = c.detect.get("names", [])
    return {n.lower() for n in names if isinstance(n, str)} if isinstance(names, list) else set()


def _overlap(a: dict[str, object], b: dict[str, object]) -> bool:
    """Some plane's stats could match both `[detect]` tables."""
    for key in set(a) & set(b) - {"prefer", "names"}:
        x, y = a[key], b[key]
        if isinstance(x, list) and isinstance(y, list) and not isinstance(x[0], str):
            if not (float(x[0]) < float(y[1]) and float(y[0]) < float(x[1])):
                return False
        elif x != y:
            return False
    return True


# --- each figure is the number its source quotes ---------------------------------------------

_UNITS = {
    "pflops": 1e15, "pops": 1e15, "tflops": 1e12, "tops": 1e12, "teraflops": 1e12,
    "tb/s": 1e12, "gb/s": 1e9, "gbps": 1e9, "gib": 2**30, "gb": 1e9,
    "flop/s": 1.0, "b/s": 1.0, "b": 1.0,
}  # fmt: skip
_QUOTED = re.compile(
    r"(?<![\w.])(\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?)\s*"
    r"(pflops|pops|tflops|tops|teraflops|tb/s|gb/s|gbps|gib|gb|flop/s|b/s|b)?(?![\w/])",
    re.IGNORECASE,
)
# Devices per chip or package: the sources quote per-chip figures, the files hold per device.
_DEVICES_PER_CHIP = {"tpu-v2": 2, "tpu-v3": 2, "tpu-v7": 2, "mi250x": 2}


def _quoted(source: str) -> list[tuple[float, float]]:
    """(value, relative precision) of each figure a source quotes with a unit (or in e-notation):
    `1,979 TFLOPS` -> (1.979e15, 0.5/1979)."""
    found = []
    for m in _QUOTED.finditer(source):
        number, unit = m.group(1), (m.group(2) or "").lower()
        if not unit and "e" not in number.lower():
            continue
        digits = number.replace(",", "")
        mantissa = digits.lower().split("e")[0]
        decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
        value = float(digits) * _UNITS.get(unit, 1.0)
        if value > 0:
            found.append((value, 0.5 * 10**-decimals / float(mantissa)))
    return found


@pytest.mark.parametrize("c", builtin_chips(), ids=lambda c: c.name)
def test_each_figure_is_what_its_source_quotes(c: Chip) -> None:
    """The number in each figure's source, as printed (sparse figures halved, per-chip figures
    split between the chip's devices, per-TensorCore ones times a megacore's cores), is the
    file's figure to the source's own rounding."""
    figures = {f"peak_flops.{k}": v for k, v in c.peak_flops.items()}
    figures |= {f"vector_flops.{k}": v for k, v in c.vector_flops.items()}
    figures["memory.hbm_bw"] = c.hbm_bw
    if c.hbm_bytes is not None:
        figures["memory.hbm_bytes"] = c.hbm_bytes
    devices = _DEVICES_PER_CHIP.get(c.name, 1)
    for figure, value in figures.items():
        source = c.sources[figure]
        sparse = "sparsity" in source.lower()
        factors = {1.0, float(devices), 1.0 / c.cores_per_device}
        if sparse:
            factors |= {2.0 * f for f in factors}
        quoted = _quoted(source)
        assert quoted, f"{c.name} {figure}: no figure in {source!r}"
        assert any(
            abs(printed / f / value - 1) <= max(1e-3, precision) + 1e-9
            for printed, precision in quoted
            for f in factors
        ), f"{c.name} {figure} = {value:g}, but {source!r} quotes {[q for q, _ in quoted]}"


def test_quoted_figures_are_parsed() -> None:
    ((value, precision),) = _quoted("x (BFLOAT16 Tensor Core 1,979 TFLOPS with sparsity)")
    assert value == pytest.approx(1.979e15) and precision == pytest.approx(0.5 / 1979)
    assert [v for v, _ in _quoted("(Peak memory bandwidth 3.2768 TB/s); 32 GiB, 4.6e13")] == [
        pytest.approx(3.2768e12),
        32 * 2**30,
        4.6e13,
    ]
    assert _quoted("ch.9 (v2), 8x128 lanes, 4 links") == []
