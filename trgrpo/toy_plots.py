"""Figures of the CPU toy (notebook 03): Figure 3 and 4 analogs, per-token gradient norm vs probability,
zero-gradient fractions, the final-accuracy table and the tau sweep as plots.

Every function takes run records grouped by label (``{label: [record, ...]}``, see
:func:`trgrpo.toy.run_label` and :func:`trgrpo.analysis.group_by`), returns the matplotlib figure and, given
``path``, saves it there (PNG, 150 dpi).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from . import analysis as an

# Paper colours where it has them (Figure 2: TR-GRPO blue, Reverse orange, GRPO green).
COLORS = {
    "equal": "tab:green",
    "tr-surrogate": "tab:blue",
    "tr-ratio": "tab:purple",
    "reverse-surrogate": "tab:orange",
    "random": "tab:gray",
    "equal-randomreward": "black",
}
NAMES = {
    "equal": "GRPO (equal w)",
    "tr-surrogate": "TR-GRPO, w outside clip",
    "tr-ratio": "TR-GRPO, w in ratio (Eq. 9)",
    "reverse-surrogate": "Reverse (2 - w)",
    "random": "Random w ~ U[0.5, 1.5]",
    "equal-randomreward": "GRPO, random reward",
}


def color(label: str) -> str:
    return COLORS.get(label, "tab:brown")


def name(label: str) -> str:
    return NAMES.get(label, label)


def _save(fig, path: Path | str | None):
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=150, bbox_inches="tight")
    return fig


def _traces(ax, groups: dict, labels: Sequence[str], key, *, smooth: int = 1, band: bool = True) -> None:
    """Per-seed traces faint, the median across seeds bold, the inter-quartile range shaded."""
    for label in labels:
        runs = groups.get(label, [])
        if not runs:
            continue
        steps, m = an.stack(runs, key)
        if steps.size == 0:
            continue
        if smooth > 1:
            m = np.vstack([an.rolling_mean(row, smooth) for row in m])
        c = color(label)
        for row in m:
            ax.plot(steps, row, color=c, alpha=0.18, lw=0.8)
        med, lo, hi = an.band(m)
        ax.plot(steps, med, color=c, lw=2.2, label=f"{name(label)} (n={len(runs)})")
        if band and len(runs) > 1:
            ax.fill_between(steps, lo, hi, color=c, alpha=0.15, lw=0)


def plot_reward_accuracy(
    groups: dict, labels: Sequence[str], *, smooth: int = 10, path: Path | str | None = None, title: str = ""
):
    """Figure 4 analog: training reward (moving average over ``smooth`` steps) and held-out greedy and sampled
    accuracy during training, per seed faint, median bold."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    _traces(axes[0], groups, labels, "reward", smooth=smooth)
    axes[0].set(title=f"training reward (mean of {smooth}-step window)", xlabel="step", ylabel="reward")
    for ax, key, what in ((axes[1], "greedy_accuracy", "greedy"), (axes[2], "sampled_accuracy", "sampled, T = 1")):

        def get(r, key=key):
            ev = r.get("eval_history") or []
            return np.asarray([e["step"] for e in ev], float), np.asarray([e[key] for e in ev], float)

        _traces(ax, groups, labels, get)
        ax.set(title=f"held-out accuracy ({what})", xlabel="step", ylabel="accuracy")
    axes[0].legend(fontsize=8, loc="lower right")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, path)


def plot_grad_norms(
    groups: dict, labels: Sequence[str], *, smooth: int = 1, path: Path | str | None = None, title: str = ""
):
    """Figure 3 analog: the gradient norm per step (before clipping), raw and divided by the step's mean token
    weight (so a scheme whose weights are larger on average is not penalised for it)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
    _traces(axes[0], groups, labels, "grad_norm", smooth=smooth)
    axes[0].set(title="gradient norm (raw)", xlabel="step", ylabel="||grad||")
    _traces(axes[1], groups, labels, an.grad_norm_per_mean_weight, smooth=smooth)
    axes[1].set(title="gradient norm / mean token weight", xlabel="step", ylabel="||grad|| / mean w")
    axes[1].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, path)


def plot_token_grad_norms(record: dict, *, path: Path | str | None = None, bins: int = 10):
    """Per-token ||grad log pi(o_t)|| against pi(o_t) (Theorem 3.1, Eq. 8), with binned means, and the same
    norms multiplied by the TR weight and by the Reverse weight (Theorem 3.2, Eq. 13)."""
    import matplotlib.pyplot as plt
    import torch

    from .weights import token_weights

    p = np.asarray(record["prob"])
    g = np.asarray(record["grad_norm"])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    ax = axes[0]
    ax.scatter(p, g, s=6, alpha=0.35, color="tab:blue", lw=0)
    b = an.binned(p, g, bins)
    ax.errorbar(b["centers"], b["mean"], yerr=b["std"], color="black", marker="o", ms=4, lw=1.5, label="bin mean ± std")
    ax.set(
        xlabel="token probability π(o_t)",
        ylabel="||∇θ log π(o_t)||",
        title=f"per-token gradient norm: corr with π {record['corr_prob_grad_norm']:+.2f}\n"
        f"({p.size} tokens, {np.mean(p > 0.9):.0%} of them with π > 0.9)",
    )
    ax.legend(fontsize=8)
    ax = axes[1]
    pt = torch.tensor(p)
    for scheme, label in (("equal", "equal"), ("tr", "tr-surrogate"), ("reverse", "reverse-surrogate")):
        w = token_weights(pt, scheme).numpy()
        bw = an.binned(p, w / w.mean() * g, bins)
        cv = record.get("weighted_spread", {}).get(scheme, {}).get("cv", float("nan"))
        ax.plot(
            bw["centers"], bw["mean"], marker="o", ms=4, color=color(label), label=f"{scheme}: CV of w·||g|| {cv:.2f}"
        )
    ax.set(
        xlabel="token probability π(o_t)",
        ylabel="bin mean of (w / mean w) · ||∇θ log π||",
        title="weighted, mean weight divided out (Eq. 13, |γ| = 1)",
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def plot_zero_grad(table: Sequence[dict], *, path: Path | str | None = None):
    """Share of completion tokens with zero policy gradient (I_trust = 0, Eq. 12), split by the sign of the
    advantage, per run label: rows ``{"run", "pos", "neg"}`` (means over steps and seeds)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(table)), 3.8))
    x = np.arange(len(table))
    ax.bar(x - 0.2, [r["pos"] for r in table], 0.4, label="A > 0", color="tab:green")
    ax.bar(x + 0.2, [r["neg"] for r in table], 0.4, label="A < 0", color="tab:red")
    for i, r in enumerate(table):
        ax.text(i - 0.2, r["pos"] + 0.01, f"{r['pos']:.2f}", ha="center", fontsize=8)
        ax.text(i + 0.2, r["neg"] + 0.01, f"{r['neg']:.2f}", ha="center", fontsize=8)
    ax.set_xticks(x, [name(r["run"]) for r in table], rotation=20, ha="right", fontsize=8)
    ax.set(ylabel="share of tokens with zero gradient", ylim=(0, 1.08), title="tokens the clip cuts off, by sign of A")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def plot_final(groups: dict, labels: Sequence[str], key: str = "accuracy", *, path: Path | str | None = None):
    """Table 4 analog as a plot: final held-out accuracy per seed (dots, same seed joined) and mean ± std."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(labels)), 3.8))
    seeds = sorted({r["seed"] for lb in labels for r in groups.get(lb, [])})
    for s in seeds:
        ys = [next((an.final_metric(r, key) for r in groups.get(lb, []) if r["seed"] == s), np.nan) for lb in labels]
        ax.plot(range(len(labels)), ys, color="gray", alpha=0.25, lw=0.8)
    for i, lb in enumerate(labels):
        v = [an.final_metric(r, key) for r in groups.get(lb, [])]
        ax.scatter([i] * len(v), v, color=color(lb), s=18, alpha=0.7)
        m, sd, _ = an.mean_std(v)
        ax.errorbar([i + 0.15], [m], yerr=[sd], color=color(lb), marker="D", ms=6, capsize=4, lw=2)
    ax.set_xticks(range(len(labels)), [name(lb) for lb in labels], rotation=20, ha="right", fontsize=8)
    ax.set(ylabel=f"final held-out {key}", title="after RL (dots: seeds, lines join a seed's runs)")
    fig.tight_layout()
    return _save(fig, path)


def plot_tau_sweep(rows: Sequence[dict], *, path: Path | str | None = None):
    """Table 7 analog as a plot: final accuracy minus GRPO's on the same seed, per tau and placement (dots: seeds,
    line: mean). ``rows`` from :func:`trgrpo.toy.tau_table` (keys ``placement``, ``tau``, ``Δ per seed``)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    placements = sorted({r["placement"] for r in rows})
    for k, placement in enumerate(placements):
        sel = sorted((r for r in rows if r["placement"] == placement and "Δ per seed" in r), key=lambda r: r["tau"])
        if not sel:
            continue
        lbl = f"tr-{placement}"
        shift = 1.0 + 0.04 * (k - (len(placements) - 1) / 2)  # side by side on the log axis
        for r in sel:
            ax.scatter([r["tau"] * shift] * len(r["Δ per seed"]), r["Δ per seed"], color=color(lbl), s=14, alpha=0.5)
        ax.plot(
            [r["tau"] * shift for r in sel],
            [float(np.mean(r["Δ per seed"])) for r in sel],
            marker="o",
            color=color(lbl),
            label=f"{name(lbl)} (mean of {max(len(r['Δ per seed']) for r in sel)} seeds)",
        )
    ax.axhline(0.0, color=color("equal"), ls="--", label="GRPO")
    if any("Δ per seed" in r for r in rows):
        ax.set_xscale("log")
    else:
        ax.text(0.5, 0.5, "no tau run paired with a GRPO run", transform=ax.transAxes, ha="center")
    ax.set(
        xlabel="τ (weight σ(τ·p), tau_mode='scale')",
        ylabel="Δ final greedy accuracy vs GRPO",
        title="τ sweep (Table 7 analog), paired by seed",
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path)
