"""What run records measured, read out for the tables and figures: a metric's series and its final value, records
grouped by arm and paired by seed, the curves' median band, the share of clipped steps, a comparison table."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from trgrpo.stats import delta_ci, mean_std, paired_t


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
                delta = delta_ci(t["mean_diff"], *t["ci"], t["p"], spec=f"+.{digits}f")
                row[f"Δ {compare} vs {baseline} [95% t-interval]"] = f"{delta} ({t['higher']}/{t['n']} up)"
        rows.append(row)
    return rows
