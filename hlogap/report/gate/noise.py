"""Run-to-run noise from the profile itself: a plausible range (interval) for a gated figure's
relative change, from the spread of each side's steady steps (docs/ci.md, "Noise-aware
verdicts").

The method: a Welch t-interval (unequal spreads, Welch-Satterthwaite degrees of freedom) over the
steps' per-step figures. Times are compared on a log scale, so an interval of a relative change
is `exp(log ratio +- t * se) - 1`; a median's standard error is the mean's times sqrt(pi / 2)
(a normal sample's). A side with a single step borrows the other side's spread (the same
program on the same runner); with neither side spread there is no interval and the fixed limit
decides. No randomness: the same two reports always give the same interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95  # each whole-step figure's interval; per-op intervals share it (Bonferroni)
MEDIAN_SE = math.sqrt(math.pi / 2)  # a median's standard error over a mean's (normal samples)


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Student's t distribution's CDF at t, `df` > 0 degrees of freedom (fractional allowed)."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t value below which a share `p` (0.5..1) of the distribution lies (bisection)."""
    if math.isinf(df):
        return statistics.NormalDist().inv_cdf(p)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
        if hi > 1e12:
            return math.inf
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class Spread:
    """One side's per-step figures: their count, mean and sample variance (None: one step)."""

    n: int
    mean: float
    var: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        n = len(values)
        mean = math.fsum(values) / n if n else math.nan
        return cls(n, mean, statistics.variance(values) if n >= 2 else None)


@dataclass(frozen=True)
class Estimate:
    """A difference of two sides' means on some scale, and its noise.

    `se` is the difference's standard error and `df` its (Welch) degrees of freedom; both None
    when neither side has two steps (no spread: no interval)."""

    center: float  # the difference, on its scale (log ratio, or a difference of means)
    se: float | None
    df: float | None
    n_base: int
    n_new: int
    var_sum: float | None  # the two sides' variances added (for how many steps would decide)

    def half(self, confidence: float = CONFIDENCE) -> float | None:
        """The interval's half-width on the difference's scale."""
        if self.se is None or self.df is None:
            return None
        if self.se == 0:
            return 0.0
        return t_quantile(0.5 + confidence / 2.0, self.df) * self.se

    def steps_to_decide(self, margin: float, confidence: float = CONFIDENCE) -> int | None:
        """About how many steps a side would make the interval clear the limit, `margin` away
        from the center on this scale (None: none would: the center is on the limit, or no
        spread to scale)."""
        if self.var_sum is None or not margin or not math.isfinite(margin):
            return None
        z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2.0)
        return max(math.ceil(z * z * self.var_sum / (margin * margin)), 2)


def welch(base: Spread, new: Spread, center: float, se_factor: float = 1.0) -> Estimate:
    """The Welch estimate of `center` (new's figure less base's on the scale of the spreads);
    a side with one step borrows the other's variance."""
    var_b, var_n = base.var, new.var
    if var_b is None and var_n is None:
        return Estimate(center, None, None, base.n, new.n, None)
    if var_b is None:
        var_b = var_n
    if var_n is None:
        var_n = var_b
    assert var_b is not None and var_n is not None
    a, b = var_b / base.n, var_n / new.n
    se = math.sqrt(a + b) * se_factor
    if a + b == 0:
        df = math.inf
    else:
        # Welch-Satterthwaite; a borrowed variance counts the degrees of freedom it came with.
        dof_b = (base.n if base.var is not None else new.n) - 1
        dof_n = (new.n if new.var is not None else base.n) - 1
        parts = (a * a / dof_b if a else 0.0) + (b * b / dof_n if b else 0.0)
        df = (a + b) ** 2 / parts if parts > 0 else math.inf
        df = min(df, float(dof_b + dof_n))
    return Estimate(center, se, df, base.n, new.n, (var_b + var_n) * se_factor**2)


def log_spread(values: Sequence[float]) -> Spread:
    """The spread of the logs of positive per-step figures (zeros and below left out)."""
    return Spread.of([math.log(v) for v in values if v > 0])
