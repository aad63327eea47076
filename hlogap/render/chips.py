"""Output of `hlogap chips`: the spec database as a table or JSON, with ridge points."""

from __future__ import annotations

import io
import json

from rich.console import Console
from rich.table import Table

from hlogap.chips import Chip, builtin_chips
from hlogap.units import fmt_si


def chip_dict(chip: Chip) -> dict[str, object]:
    return {
        "name": chip.name,
        "display": chip.display,
        "vendor": chip.vendor,
        "peak_flops": dict(chip.peak_flops),
        "vector_flops": dict(chip.vector_flops),
        "hbm_bw": chip.hbm_bw,
        "hbm_bytes": chip.hbm_bytes,
        "interconnect_bw": chip.interconnect_bw,
        "ridge_points": {k: v / chip.hbm_bw for k, v in chip.peak_flops.items()},
        "detect": chip.detect,
        "sources": dict(chip.sources),
    }


def render_chips(fmt: str) -> str:
    chips = builtin_chips()
    if fmt == "json":
        return (
            json.dumps(
                {"schema": "hlogap.chips/1", "chips": [chip_dict(c) for c in chips]},
                indent=2,
                default=str,
            )
            + "\n"
        )
    table = Table(show_edge=False, header_style="bold")
    for col in ("name", "chip", "bf16", "int8", "f32", "HBM", "link", "ridge bf16"):
        table.add_column(col, justify="left" if col in ("name", "chip") else "right")
    for c in chips:
        peak = c.peak_flops
        table.add_row(
            c.name,
            c.display,
            *(fmt_si(peak[k], "FLOP/s") if k in peak else "-" for k in ("bf16", "int8", "f32")),
            fmt_si(c.hbm_bw, "B/s"),
            fmt_si(c.interconnect_bw, "B/s") if c.interconnect_bw else "-",
            f"{c.ridge_point('bf16'):.0f}" if "bf16" in peak else "-",
        )
    out = io.StringIO()
    Console(file=out, width=140, no_color=True).print(table)
    return (
        out.getvalue()
        + "Sources for every figure: `hlogap chips --format json` or hlogap/chips/specs/*.toml\n"
    )
