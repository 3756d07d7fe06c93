"""Statistics: mean +- std, spread, paired t-tests with Holm's correction and the detectable effect, Spearman's rho,
a proportional fit and binned means. What run records measured is read by :mod:`trgrpo.reports.metrics`."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np


def to_numpy(x) -> np.ndarray:
    """``x`` (a tensor, array or sequence) as a flat float64 array."""
    return np.asarray(x.detach().cpu() if hasattr(x, "detach") else x, dtype=np.float64).ravel()


def mean_std(values: Iterable[float]) -> tuple[float, float, int]:
    """(mean, std with ddof = 1 (0 for one value), n) of the finite values: the project's one spread convention."""
    x = np.asarray([v for v in values if v is not None], dtype=float).ravel()
    x = x[np.isfinite(x)]
    n = int(x.size)
    if n == 0:
        return math.nan, math.nan, 0
    return float(x.mean()), float(x.std(ddof=1)) if n > 1 else 0.0, n


def spread_stats(values) -> dict[str, float]:
    """n, mean, std, cv (NaN below two values), median, max, max / median of the finite values (Theorem 3.2)."""
    x = to_numpy(values)
    x = x[np.isfinite(x)]
    if x.size == 0:
        raise ValueError("spread_stats needs at least one finite value")
    mean, std, n = mean_std(x)
    med, top = float(np.median(x)), float(x.max())
    return {
        "n": n,
        "mean": mean,
        "std": std,
        "cv": std / mean if mean != 0 and n > 1 else math.nan,
        "median": med,
        "max": top,
        "max_over_median": top / med if med != 0 else math.nan,
    }


def paired_t(treatment: Sequence[float], control: Sequence[float], *, level: float = 0.95) -> dict:
    """Paired t-test of treatment minus control (same seed): n, mean_diff, sd_diff, the ``level`` t-interval ``ci``,
    t, two-sided p (1 when every difference is 0, NaN when n < 2), and the signs ``higher``, ``lower``, ``ties``."""
    from scipy import stats

    a = np.asarray(treatment, dtype=float)
    b = np.asarray(control, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired samples must have the same length, got {a.size} and {b.size}")
    d = a - b
    n = int(d.size)
    out = {
        "n": n,
        "mean_diff": float(d.mean()) if n else math.nan,
        "sd_diff": float(d.std(ddof=1)) if n > 1 else math.nan,
        "higher": int((d > 0).sum()),
        "lower": int((d < 0).sum()),
        "ties": int((d == 0).sum()),
    }
    if n < 2:
        out.update(ci=(math.nan, math.nan), t=math.nan, p=math.nan)
    elif out["sd_diff"] == 0:
        same = out["mean_diff"] == 0
        out.update(ci=(out["mean_diff"], out["mean_diff"]), t=math.nan, p=1.0 if same else 0.0)
    else:
        res = stats.ttest_rel(a, b)
        out.update(ci=tuple(map(float, res.confidence_interval(level))), t=float(res.statistic), p=float(res.pvalue))
    return out


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of a family of p-values (statsmodels; same order out; NaN stays NaN, not counted)."""
    from statsmodels.stats.multitest import multipletests

    p = np.asarray(pvalues, dtype=float)
    ok = np.isfinite(p)
    out = np.full(p.shape, math.nan)
    out[ok] = multipletests(p[ok], method="holm")[1]  # an empty family gives an empty array
    return out.tolist()


def min_detectable_effect(sd_diff: float, n: int, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest mean paired difference a two-sided t-test at ``alpha`` detects with ``power``, by the exact power of
    the noncentral t (both tails); (t_{1-alpha/2, n-1} + t_{power, n-1}) * sd / sqrt(n) brackets it from below."""
    from scipy import optimize, stats

    if n < 2 or not math.isfinite(sd_diff):
        return math.nan
    df, crit = n - 1, float(stats.t.ppf(1 - alpha / 2, n - 1))

    def shortfall(d: float) -> float:  # the lower tail is NaN in scipy where it is below 1e-16
        nc = d * math.sqrt(n)
        return stats.nct.sf(crit, df, nc) + np.nan_to_num(stats.nct.cdf(-crit, df, nc)) - power

    approx = (crit + float(stats.t.ppf(power, df))) / math.sqrt(n)
    return optimize.brentq(shortfall, 0.0, 4 * approx, xtol=1e-12) * sd_diff


def family_alpha(m: int, alpha: float = 0.05) -> float:
    """alpha / m: the level of one comparison in a family of ``m`` (Bonferroni; Holm's first step)."""
    if m < 1:
        raise ValueError(f"a family has at least one comparison, got m={m}")
    return alpha / m


def num(x: float | None, spec: str = ".3f") -> str:
    """``format(x, spec)``, or "–" for a missing value (NaN is stored as null in the JSON records)."""
    return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def delta_ci(delta: float, lo: float, hi: float, p: float | None = None, *, spec="+.3f", ci_spec=None) -> str:
    """``"+0.012 [-0.010, +0.034], p = 0.27"`` (no p when None): the one format of a difference and its interval."""
    text = f"{num(delta, spec)} [{num(lo, ci_spec or spec)}, {num(hi, ci_spec or spec)}]"
    return text if p is None else f"{text}, p = {num(p, '.2g')}"


def sign_count(diffs: Sequence[float]) -> str:
    """``"9 higher, 2 lower, 1 tie of 12"``: the per-seed signs, ties counted apart."""
    d = np.asarray(diffs, dtype=float)
    ties = int((d == 0).sum())
    return f"{int((d > 0).sum())} higher, {int((d < 0).sum())} lower, {ties} tie{'s' if ties != 1 else ''} of {d.size}"


def spearman(x, y) -> tuple[float, float]:
    """Spearman rank correlation and its two-sided p-value (scipy)."""
    from scipy.stats import spearmanr

    res = spearmanr(to_numpy(x), to_numpy(y))
    return float(res.statistic), float(res.pvalue)


def fit_proportional(x, y) -> tuple[float, float]:
    """Least squares y ~ c x through the origin (the 1 - pi trend of Eq. 8): (c, R^2 about the mean)."""
    x, y = to_numpy(x), to_numpy(y)
    c = float((x * y).sum() / (x * x).sum())
    ss_res, ss_tot = float(((y - c * x) ** 2).sum()), float(((y - y.mean()) ** 2).sum())
    return c, (1 - ss_res / ss_tot) if ss_tot > 0 else float("nan")


def binned_means(x, y, bins: int = 10) -> dict[str, np.ndarray]:
    """Mean, std (:func:`mean_std`), standard error and count of ``y`` in ``bins`` equal-width bins of ``x`` on [0, 1]
    (an edge belongs to the bin on its right, 1 to the last): arrays ``left, right, center, x_mean, mean, std, sem,
    count`` over the non-empty bins."""
    x, y = to_numpy(x), to_numpy(y)
    edges = np.linspace(0.0, 1.0, int(bins) + 1)
    idx = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, bins - 1)
    rows = []
    for b in range(bins):
        sel = idx == b
        c = int(sel.sum())
        if c:
            mean, sd, _ = mean_std(y[sel])
            rows.append((edges[b], edges[b + 1], 0.5 * (edges[b] + edges[b + 1]), x[sel].mean(), mean, sd,
                         sd / math.sqrt(c), c))  # fmt: skip
    names = ("left", "right", "center", "x_mean", "mean", "std", "sem", "count")
    arr = np.array(rows, dtype=np.float64).reshape(-1, len(names))
    return {k: (arr[:, i].astype(int) if k == "count" else arr[:, i]) for i, k in enumerate(names)}
