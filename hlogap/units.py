"""Numbers and names for people: SI prefixes, times in us/ms/s, percentages, printable text."""

from __future__ import annotations


def si_scale(value: float) -> tuple[float, str]:
    """The SI prefix a value is shown with, and its scale: 1.26e11 -> (1e9, "G")."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return scale, prefix
    return 1.0, ""


def fmt_si(value: float, unit: str) -> str:
    scale, prefix = si_scale(value)
    return f"{value / scale:.3g} {prefix}{unit}"


def fmt_us(us: float) -> str:
    if abs(us) >= 1e6:
        return f"{us / 1e6:.2f} s"
    if abs(us) >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} us"


def fmt_eff(eff: float | None) -> str:
    return "-" if eff is None else f"{eff:.0%}"


def printable(text: str) -> str:
    """A name (an op's, a module's, a host's, a path) fit for every output: control characters
    (an ANSI escape, a newline) dropped, and bytes that are not UTF-8 (a Linux path's, kept by
    Python as surrogate escapes) shown escaped (`\\xff`)."""
    if text.isprintable():
        return text
    shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "".join(c for c in shown if c.isprintable() or c == " ")
