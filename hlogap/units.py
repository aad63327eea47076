"""Numbers for people: SI prefixes, times in us/ms/s, percentages."""

from __future__ import annotations


def fmt_si(value: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def fmt_us(us: float) -> str:
    if abs(us) >= 1e6:
        return f"{us / 1e6:.2f} s"
    if abs(us) >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} us"


def fmt_eff(eff: float | None) -> str:
    return "-" if eff is None else f"{eff:.0%}"
