"""Statistics: mean +- std, paired t-tests, step trajectories of run records (``history``, ``final``), binned means."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence

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
    if ok.any():
        out[ok] = multipletests(p[ok], method="holm")[1]
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


def clip_share(records: Iterable[dict], max_grad_norm: float) -> dict:
    """How often gradient clipping acted: the share of logged steps whose pre-clip ``grad_norm`` exceeds
    ``max_grad_norm``, and the median norm, over every step of ``records``."""
    norms = [h["grad_norm"] for r in records for h in r.get("history", []) if h.get("grad_norm") is not None]
    norms = np.asarray(norms, dtype=float)
    norms = norms[np.isfinite(norms)]
    if norms.size == 0:
        return {"n_steps": 0, "share_clipped": math.nan, "median_norm": math.nan, "max_grad_norm": max_grad_norm}
    return {
        "n_steps": int(norms.size),
        "share_clipped": float((norms > max_grad_norm).mean()),
        "median_norm": float(np.median(norms)),
        "max_grad_norm": float(max_grad_norm),
    }


def sign_count(diffs: Sequence[float]) -> str:
    """``"9 higher, 2 lower, 1 tie of 12"``: the per-seed signs, ties counted apart."""
    d = np.asarray(diffs, dtype=float)
    ties = int((d == 0).sum())
    return f"{int((d > 0).sum())} higher, {int((d < 0).sum())} lower, {ties} tie{'s' if ties != 1 else ''} of {d.size}"


# Trajectories


def series(record: dict, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of ``key`` over a record's history (steps where it is missing are left out)."""
    rows = [(h["step"], h[key]) for h in record.get("history", []) if h.get(key) is not None and "step" in h]
    if not rows:
        return np.zeros(0), np.zeros(0)
    s, v = zip(*rows)
    return np.asarray(s, dtype=float), np.asarray(v, dtype=float)


def grad_norm_per_mean_weight(record: dict) -> tuple[np.ndarray, np.ndarray]:
    """(steps, grad_norm / tr/weight_mean): the gradient norm with the weight's overall scale divided out (Eq. 13)."""
    s, g = series(record, "grad_norm")
    s2, w = series(record, "tr/weight_mean")
    if s.size == 0 or s2.size == 0:
        return s, g
    wmap = dict(zip(s2.tolist(), w.tolist()))
    return s, np.asarray([gi / wmap.get(si, math.nan) for si, gi in zip(s.tolist(), g.tolist())])


def stack(records: Sequence[dict], key: str | Callable[[dict], tuple[np.ndarray, np.ndarray]]) -> tuple:
    """(steps, runs x steps matrix) of a history key (or a function record -> (steps, values)), NaN where missing."""
    get = key if callable(key) else (lambda r: series(r, key))
    pairs = [get(r) for r in records]
    steps = np.asarray(sorted({float(s) for st, _ in pairs for s in st}))
    pos = {s: i for i, s in enumerate(steps.tolist())}
    m = np.full((len(records), steps.size), np.nan)
    for i, (st, v) in enumerate(pairs):
        for s, x in zip(st.tolist(), v.tolist()):
            m[i, pos[float(s)]] = x
    return steps, m


def band(matrix: np.ndarray, lo: float = 0.25, hi: float = 0.75) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Median and the (lo, hi) quantiles across runs (rows), per step, ignoring NaN."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(matrix, 0), np.nanquantile(matrix, lo, 0), np.nanquantile(matrix, hi, 0)


def rolling_mean(x: Sequence[float], window: int) -> np.ndarray:
    """Trailing moving average (the first values average what is there; a missing value stays missing)."""
    import pandas as pd

    x = pd.Series(x, dtype=float)
    return x.rolling(max(int(window), 1), min_periods=1).mean().where(x.notna()).to_numpy()


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


# Tables


def group_by(records: Iterable[dict], key: Callable[[dict], str]) -> dict[str, list[dict]]:
    """Records grouped by ``key(record)``, each group sorted by seed."""
    out: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        out[key(r)].append(r)
    return {k: sorted(v, key=lambda r: r.get("seed", 0)) for k, v in out.items()}


def final_metric(record: dict, key: str = "accuracy") -> float:
    """``record["final"][key]`` (NaN when missing)."""
    v = (record.get("final") or {}).get(key)
    return math.nan if v is None else float(v)


def history_mean(record: dict, key: str) -> float:
    """Mean of a history key over all steps."""
    _, v = series(record, key)
    return float(np.nanmean(v)) if v.size else math.nan


def paired_by_seed(treatment: Sequence[dict], control: Sequence[dict], value: Callable[[dict], float]) -> tuple:
    """The values of the runs whose seed both lists have, aligned by seed: (treatment, control, seeds)."""
    c = {r["seed"]: value(r) for r in control}
    t = {r["seed"]: value(r) for r in treatment}
    seeds = sorted(s for s in t if s in c)
    return [t[s] for s in seeds], [c[s] for s in seeds], seeds


def comparison_table(
    groups: dict[str, list[dict]],
    metrics: dict[str, Callable[[dict], float]],
    *,
    baseline: str = "equal",
    compare: str | None = None,
    digits: int = 3,
    order: Sequence[str] | None = None,
) -> list[dict]:
    """Rows ``{"run": label, "n": n, metric: "m ± s", ...}`` plus, for ``compare`` (a metric name), the paired
    difference against ``baseline`` on the seeds both have: mean [95 % t-interval], p, (higher/n up)."""
    rows = []
    for label in order or groups:
        runs = groups.get(label, [])
        if not runs:
            continue
        row = {"run": label, "n": len(runs)}
        for name, fn in metrics.items():
            m, s, k = mean_std(fn(r) for r in runs)
            row[name] = f"{m:.{digits}f} ± {s:.{digits}f}" if k else "–"
        if compare is not None and label != baseline and baseline in groups:
            treated, base, seeds = paired_by_seed(runs, groups[baseline], metrics[compare])
            if len(seeds) >= 2:
                t = paired_t(treated, base)
                (lo, hi), d, f = t["ci"], t["mean_diff"], f"+.{digits}f"
                row[f"Δ {compare} vs {baseline} [95% t-interval]"] = (
                    f"{d:{f}} [{lo:{f}}, {hi:{f}}], p={t['p']:.2g} ({t['higher']}/{t['n']} up)"
                )
        rows.append(row)
    return rows
