"""Figures of the CPU toy (notebook 03): Figure 3 and 4 analogs, per-token gradient norm vs probability,
zero-gradient fractions, the final-accuracy table and the tau sweep as plots.

Every function takes run records grouped by label (``{label: [record, ...]}``, see
:func:`trgrpo.pipeline.toy.run_label` and :func:`trgrpo.results.analysis.group_by`), returns the matplotlib figure and,
given
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
    "const-surrogate": "tab:red",
    "tr_norm-surrogate": "tab:cyan",
}
NAMES = {
    "equal": "GRPO (equal w)",
    "tr-surrogate": "TR-GRPO, w outside clip",
    "tr-ratio": "TR-GRPO, w in ratio (Eq. 9)",
    "reverse-surrogate": "Reverse (2 - w)",
    "random": "Random w ~ U[0.5, 1.5]",
    "equal-randomreward": "GRPO, random reward",
    "const-surrogate": "const: TR's batch-mean scale only",
    "tr_norm-surrogate": "tr_norm: TR's regulation only (mean 1)",
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
            ev = [e for e in r.get("eval_history") or [] if key in e]  # sampled: only where it was measured
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

    from ..core.weights import token_weights

    p = np.asarray(record["prob"])
    g = np.asarray(record["grad_norm"])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    ax = axes[0]
    ax.scatter(p, g, s=6, alpha=0.35, color="tab:blue", lw=0)
    b = an.binned_means(p, g, bins)
    ax.errorbar(b["center"], b["mean"], yerr=b["std"], color="black", marker="o", ms=4, lw=1.5, label="bin mean ± std")
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
        bw = an.binned_means(p, w / w.mean() * g, bins)
        cv = record.get("weighted_spread", {}).get(scheme, {}).get("cv", float("nan"))
        ax.plot(
            bw["center"], bw["mean"], marker="o", ms=4, color=color(label), label=f"{scheme}: CV of w·||g|| {cv:.2f}"
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
    line: mean). ``rows`` from :func:`trgrpo.pipeline.toy.tau_table` (keys ``placement``, ``tau``, ``Δ per seed``)."""
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


def plot_paired_deltas(rows: Sequence[dict], *, path: Path | str | None = None, title: str = ""):
    """Each arm's paired difference to GRPO with its 95 % t-interval (rows of
    :func:`trgrpo.pipeline.toy_controls.arm_rows`), and the minimum detectable effect as a grey band around 0."""
    import matplotlib.pyplot as plt

    rows = [r for r in rows if "delta_vs_equal" in r]
    fig, ax = plt.subplots(figsize=(7.5, 0.55 * len(rows) + 1.4))
    for i, r in enumerate(rows):
        c = color(r["arm"])
        ax.errorbar(
            r["delta_vs_equal"],
            i,
            xerr=[[r["delta_vs_equal"] - r["ci_low"]], [r["ci_high"] - r["delta_vs_equal"]]],
            fmt="o",
            color=c,
            capsize=4,
        )
        ax.text(
            r["ci_high"], i, f"  p={r['p']:.2g} (Holm {r.get('p_holm', float('nan')):.2g})", va="center", fontsize=8
        )
    mde = np.nanmedian([r.get("mde", np.nan) for r in rows]) if rows else np.nan
    if np.isfinite(mde):
        ax.axvspan(-mde, mde, color="0.9", zorder=0, label=f"± median MDE ({mde:.3f})")
        ax.legend(loc="upper left", fontsize=8)
    ax.axvline(0, color="k", lw=0.8)
    ax.set_yticks(range(len(rows)), [name(r["arm"]) for r in rows])
    ax.set_xlabel("Δ vs GRPO, same seed (95 % t-interval)")
    ax.set_title(title)
    return _save(fig, path)


def plot_eval_curves(groups: dict, labels: Sequence[str], *, path: Path | str | None = None, title: str = ""):
    """Held-out greedy accuracy at the fixed evaluation steps: mean over seeds per arm with its 95 % t-interval."""
    import matplotlib.pyplot as plt
    from scipy import stats

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for j, label in enumerate(labels):
        runs = groups.get(label, [])
        if not runs:
            continue
        steps = sorted({e["step"] for r in runs for e in r["eval_history"]})
        m, lo, hi = [], [], []
        for st in steps:
            v = [e["greedy_accuracy"] for r in runs for e in r["eval_history"] if e["step"] == st]
            mean, sd, n = an.mean_std(v)
            q = stats.t.ppf(0.975, n - 1) * sd / np.sqrt(n) if n > 1 else 0.0
            m.append(mean), lo.append(mean - q), hi.append(mean + q)
        x = np.asarray(steps) + (j - len(labels) / 2) * 0.6
        ax.errorbar(
            x,
            m,
            yerr=[np.subtract(m, lo), np.subtract(hi, m)],
            color=color(label),
            marker="o",
            ms=3,
            capsize=2,
            label=f"{name(label)} (n={len(runs)})",
        )
    ax.set_xlabel("RL step")
    ax.set_ylabel("held-out greedy accuracy (400 items)")
    ax.set_title(title)
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_kl(arms: dict, *, path: Path | str | None = None):
    """KL(pi || pi_ref) (TRL's plain k3) along training under each ``kl_weighting``, one panel per beta
    (``arms``: beta -> weighting -> records, :func:`trgrpo.pipeline.toy_controls.kl_arms`)."""
    import matplotlib.pyplot as plt

    colors = {"eq10": "tab:red", "outside": "tab:blue", "plain": "tab:green"}
    fig, axes = plt.subplots(1, len(arms), figsize=(6.5 * len(arms), 4), squeeze=False)
    for ax, (beta, groups) in zip(axes[0], sorted(arms.items(), key=lambda kv: -float(kv[0]))):
        for kw, runs in sorted(groups.items()):
            steps, m = an.stack(runs, "kl")
            if steps.size == 0:
                continue
            keep = steps <= min(len(r["history"]) for r in runs if r.get("history")) + 0.5
            med = np.nanmean(m[:, keep], 0)
            for row in m[:, keep]:
                ax.plot(steps[keep], row, color=colors.get(kw, "k"), alpha=0.12, lw=0.7)
            ax.plot(steps[keep], med, color=colors.get(kw, "k"), lw=2, label=f"{kw} (n={len(runs)})")
        ax.set_yscale("log")
        ax.set_xlabel("RL step")
        ax.set_ylabel("KL(π || π_ref), k3")
        ax.set_title(f"β = {beta}")
        ax.legend(fontsize=8)
    return _save(fig, path)


def plot_token_hist(hists: dict, *, path: Path | str | None = None):
    """Sampled-token probabilities and their Eq. 11 weights, one column per histogram record (task or model),
    with the shares at L, strictly between, and at U in the titles."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(hists), figsize=(5 * len(hists), 6), squeeze=False)
    for j, (label, h) in enumerate(hists.items()):
        for i, (edges, counts, xl) in enumerate(
            [(h["bins"], h["prob_counts"], "π(o_t) of sampled tokens"), (h["weight_bins"], h["weight_counts"], "w")]
        ):
            ax = axes[i][j]
            e = np.asarray(edges)
            frac = np.asarray(counts, float) / max(1, h["n_tokens"])
            ax.bar(e[:-1], frac, width=np.diff(e), align="edge", color="tab:blue" if i == 0 else "tab:orange")
            ax.set_xlabel(xl)
            ax.set_ylabel("share of tokens")
        axes[0][j].set_title(
            f"{label}: {h['n_tokens']} tokens\nw = L {h['share_at_lower']:.1%}, between {h['share_between']:.1%}, "
            f"w = U {h['share_at_upper']:.1%}",
            fontsize=9,
        )
    fig.tight_layout()
    return _save(fig, path)


def plot_forest(rows: Sequence[dict], *, path: Path | str | None = None, title: str = ""):
    """The answer page's figure (notebook 08): each arm's paired difference to GRPO (rows of
    :func:`trgrpo.results.answers.forest_rows`), thin line the 95 % t-interval, thick line the interval at the
    level of Holm's first step over its family (the one the verdicts read), an open black diamond the paper's own
    effect of that arm (Table 4 or 7, Qwen2.5-3B on K&K) where the paper has one."""
    import matplotlib.pyplot as plt

    rows = list(rows)
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(rows) + 2.0))
    labels, drawn = [], False
    for i, r in enumerate(rows):
        y = len(rows) - 1 - i
        c = color(r["arm"].split("-tau")[0]) if r["group"] == "toy/controls" else "tab:blue"
        ax.plot(r["ci95"], [y, y], color=c, lw=1.2)
        ax.plot(r["ci"], [y, y], color=c, lw=4, alpha=0.45, solid_capstyle="butt")
        ax.plot(r["delta"], y, "o", color=c)
        if r.get("paper_effect") is not None:
            label = None if drawn else "the paper's effect"
            ax.plot(r["paper_effect"], y, "D", color="k", mfc="none", ms=7, label=label)
            drawn = True
        labels.append(f"{r['label']} (n = {r['n']})")
    ax.axvline(0, color="k", lw=0.8)
    ax.set_yticks(range(len(rows)), labels[::-1])
    ax.set_xlabel("Δ primary metric vs GRPO, same seed (thin: 95 % t-interval; thick: at the verdict's level)")
    if drawn:
        ax.legend(loc="lower right", fontsize=8)
    ax.set_title(title, fontsize=10)
    return _save(fig, path)
