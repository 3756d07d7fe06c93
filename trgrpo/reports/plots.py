"""The figures of runs (toy grids, real-LM stages, full-scale runs, the forest plot of the answers):
``plot_xxx(..., path=None) -> Figure``, written to ``path`` when given; the method's
figures are :mod:`trgrpo.figures`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch

from trgrpo import stats
from trgrpo.arms import color, label
from trgrpo.figures import _dress, _save, plot_grad_norm_vs_prob
from trgrpo.models import display_name
from trgrpo.paper import KK_SIZES
from trgrpo.reports import metrics
from trgrpo.reports.tables import by_arm_seed, kk_table, variant
from trgrpo.weights import token_weights


def _traces(ax, groups: dict, labels: Sequence[str], key, *, smooth: int = 1, name=label, style=None) -> None:
    """Per-seed traces faint, the median across seeds bold, the inter-quartile range shaded; ``style(i, runs)``
    gives a group's line keywords (default: its :func:`color`)."""
    for i, lb in enumerate(labels):
        runs = groups.get(lb, [])
        steps, m = metrics.stack(runs, key) if runs else (np.empty(0), None)
        if steps.size == 0:
            continue
        if smooth > 1:
            m = np.vstack([metrics.rolling_mean(row, smooth) for row in m])
        kw = style(i, runs) if style else {"color": color(lb)}
        for row in m:
            ax.plot(steps, row, alpha=0.18, lw=0.8, **kw)
        med, lo, hi = metrics.band(m)
        ax.plot(steps, med, lw=2.2, label=f"{name(lb)} (n={len(runs)})", **kw)
        if len(runs) > 1:
            ax.fill_between(steps, lo, hi, color=kw["color"], alpha=0.15, lw=0)


def plot_reward_accuracy(
    groups: dict, labels: Sequence[str], *, smooth: int = 10, path: Path | str | None = None, title: str = ""
):
    """Figure 4 analog: training reward (``smooth``-step mean) and held-out greedy and sampled accuracy."""
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
    return _save(fig, path, title)


def plot_grad_norms(groups: dict, labels: Sequence[str], *, path: Path | str | None = None, title: str = ""):
    """Figure 3 analog: the pre-clip gradient norm per step, raw and divided by the step's mean token weight."""
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
    _traces(axes[0], groups, labels, "grad_norm")
    axes[0].set(title="gradient norm (raw)", xlabel="step", ylabel="||grad||")
    _traces(axes[1], groups, labels, metrics.grad_norm_per_mean_weight)
    axes[1].set(title="gradient norm / mean token weight", xlabel="step", ylabel="||grad|| / mean w")
    axes[1].legend(fontsize=8)
    return _save(fig, path, title)


def plot_token_grad_norms(record: dict, *, path: Path | str | None = None):
    """Per-token ||grad log pi(o_t)|| against pi(o_t) (Eq. 8), and times the TR / Reverse weights (Eq. 13)."""
    p, g = np.asarray(record["prob"]), np.asarray(record["grad_norm"])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    title = (
        f"per-token gradient norm: corr with π {record['corr_prob_grad_norm']:+.2f}\n"
        f"({p.size} tokens, {np.mean(p > 0.9):.0%} of them with π > 0.9)"
    )
    plot_grad_norm_vs_prob(p, g, fit=False, ax=axes[0], ylabel="||∇θ log π(o_t)||", title=title)
    for scheme in ("equal", "tr", "reverse"):
        w = token_weights(torch.tensor(p), scheme).numpy()
        bw = stats.binned_means(p, w / w.mean() * g)
        cv = record.get("weighted_spread", {}).get(scheme, {}).get("cv", float("nan"))
        axes[1].plot(
            bw["center"], bw["mean"], marker="o", ms=4, color=color(scheme), label=f"{scheme}: CV of w·||g|| {cv:.2f}"
        )
    ylabel = "bin mean of (w / mean w) · ||∇θ log π||"
    _dress(axes[1], ylabel, "weighted, mean weight divided out (Eq. 13, |γ| = 1)", "token probability π(o_t)")
    return _save(fig, path)


def plot_zero_grad(
    table: Sequence[dict], *, path: Path | str | None = None, title: str = "tokens the clip cuts off, by sign of A"
):
    """Share of tokens with zero policy gradient (Eq. 12) by sign of A per run: rows ``{"run", "pos", "neg"}``."""
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(table)), 3.8))
    x = np.arange(len(table))
    for dx, key, name, c in ((-0.2, "pos", "A > 0", "tab:green"), (0.2, "neg", "A < 0", "tab:red")):
        ax.bar(x + dx, [r[key] for r in table], 0.4, label=name, color=c)
        for i, r in enumerate(table):
            ax.text(i + dx, r[key] + 0.01, f"{r[key]:.2f}", ha="center", fontsize=8)
    ax.set_xticks(x, [label(r["run"]) for r in table], rotation=20, ha="right", fontsize=8)
    ax.set(ylabel="share of tokens with zero gradient", ylim=(0, 1.08), title=title)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_eval_curves(groups: dict, labels: Sequence[str], *, path: Path | str | None = None, title: str = ""):
    """Held-out greedy accuracy at the evaluation steps: mean over seeds per arm, 95 % t-interval."""
    from scipy.stats import t as student_t

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for j, lb in enumerate(labels):
        if not (runs := groups.get(lb, [])):
            continue
        steps = sorted({e["step"] for r in runs for e in r["eval_history"]})
        m, q = [], []
        for st in steps:
            mean, sd, n = stats.mean_std(
                e["greedy_accuracy"] for r in runs for e in r["eval_history"] if e["step"] == st
            )
            m.append(mean)
            q.append(student_t.ppf(0.975, n - 1) * sd / np.sqrt(n) if n > 1 else 0.0)
        x = np.asarray(steps) + (j - len(labels) / 2) * 0.6
        ax.errorbar(x, m, yerr=q, color=color(lb), marker="o", ms=3, capsize=2, label=f"{label(lb)} (n={len(runs)})")
    ax.set(xlabel="RL step", ylabel="held-out greedy accuracy (400 items)", title=title)
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_kl(arms: dict, *, path: Path | str | None = None):
    """KL(pi || pi_ref) (k3) along training per ``kl_weighting``, one panel per beta
    (:func:`trgrpo.reports.tables.kl_arms`)."""
    fig, axes = plt.subplots(1, len(arms), figsize=(6.5 * len(arms), 4), squeeze=False)
    for ax, (beta, groups) in zip(axes[0], sorted(arms.items(), key=lambda kv: -float(kv[0]))):
        _traces(ax, groups, sorted(groups), "kl")
        ax.set_yscale("log")
        ax.set(xlabel="RL step", ylabel="KL(π || π_ref), k3", title=f"β = {beta}")
        ax.legend(fontsize=8)
    return _save(fig, path)


def plot_token_hist(hists: dict, *, path: Path | str | None = None, title: str = ""):
    """Sampled-token probabilities (top) and their Eq. 11 weights (bottom), one column per histogram record."""
    fig, axes = plt.subplots(2, len(hists), figsize=(4.8 * len(hists), 5.6), squeeze=False)
    for j, (name, h) in enumerate(hists.items()):
        panels = [("bins", "prob_counts", "π of the sampled token"), ("weight_bins", "weight_counts", "w (Eq. 11)")]
        for i, (edges, counts, xl) in enumerate(panels):
            e = np.asarray(h[edges])
            frac = np.asarray(h[counts], float) / max(1, h["n_tokens"])
            axes[i][j].bar(e[:-1], frac, width=np.diff(e), align="edge", color=f"C{i}", edgecolor="white")
            axes[i][j].set(xlabel=xl, ylabel="share of tokens")
        axes[0][j].set_title(
            f"{name}: {h['n_tokens']} tokens\nw = L {h['share_at_lower']:.1%}, between {h['share_between']:.1%}, "
            f"w = U {h['share_at_upper']:.1%}",
            fontsize=9,
        )
    return _save(fig, path, title)


def _paired_row(r: dict) -> dict:
    """A row of :func:`trgrpo.reports.tables.arm_rows` in the keys of :func:`trgrpo.reports.answers.forest_rows`."""
    if "delta" in r:
        return r
    ci95 = [r["ci_low"], r["ci_high"]]
    return {**r, "label": label(r["arm"]), "n": r["n_pairs"], "delta": r["delta_vs_equal"], "ci95": ci95}


def plot_forest(rows: Sequence[dict], *, path: Path | str | None = None, title: str = ""):
    """Paired differences to GRPO (rows of :func:`trgrpo.reports.answers.forest_rows` or
    :func:`trgrpo.reports.tables.arm_rows`):
    thin the 95 % interval, thick a row's ``ci`` (its family's level), a diamond the paper's effect, grey ± MDE."""
    rows = [_paired_row(r) for r in rows if "delta" in r or "delta_vs_equal" in r]
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(rows) + 2.0))
    drawn = False
    for i, r in enumerate(rows):
        y, c = len(rows) - 1 - i, color(r["arm"])
        ax.plot(r["ci95"], [y, y], color=c, lw=1.2)
        if "ci" in r:
            ax.plot(r["ci"], [y, y], color=c, lw=4, alpha=0.45, solid_capstyle="butt")
        ax.plot(r["delta"], y, "o", color=c)
        holm = f" (Holm {r['p_holm']:.2g})" if "p_holm" in r else ""
        ax.annotate(f"p={r['p']:.2g}{holm}", (1.02, y), xycoords=("axes fraction", "data"), va="center", fontsize=8)
        if r.get("paper_effect") is not None:
            ax.plot(
                r["paper_effect"], y, "D", color="k", mfc="none", ms=7, label=None if drawn else "the paper's effect"
            )
            drawn = True
    mde = np.nanmedian([r.get("mde_family", r.get("mde", np.nan)) for r in rows]) if rows else np.nan
    if np.isfinite(mde):
        ax.axvspan(-mde, mde, color="0.9", zorder=0, label=f"± median MDE ({mde:.3f})")
    ax.axvline(0, color="k", lw=0.8)
    ax.set_yticks(range(len(rows)), [f"{r['label']} (n = {r['n']})" for r in rows][::-1])
    thick = "; thick: Holm's first step over its family's arms, not a verdict's level" * any("ci" in r for r in rows)
    ax.set_xlabel(f"Δ primary metric, arm − GRPO on the same seed (thin: 95 % t-interval{thick})")
    if drawn or np.isfinite(mde):
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, fontsize=8, frameon=False)
    ax.set_title(title, fontsize=10)
    return _save(fig, path)


def plot_trajectories(
    records: Sequence[dict], key: str, *, ax=None, title: str | None = None, ylabel: str | None = None
):
    """Figure 3 / 4 analog (``key`` grad_norm / reward): seeds faint, median bold, one line style per variant."""
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(6.5, 3.6))
    groups = metrics.group_by(records, variant)

    def style(i: int, runs: list[dict]) -> dict:
        return {"color": color(runs[0]["scheme"]), "ls": ("-", "--", "-.", ":")[i % 4]}

    _traces(ax, groups, sorted(groups), key, name=str, style=style)
    ax.set(xlabel="training step", ylabel=ylabel or key, title=title or key)
    ax.legend(fontsize=7)
    return _save(fig, None)


def plot_accuracy_by_size(records: Sequence[dict], *, title: str = "K&K accuracy by number of people"):
    """Figure 2 analog: final accuracy per puzzle size for each variant (mean over seeds)."""
    rows = kk_table(records)
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    width, x = 0.8 / max(1, len(rows)), np.arange(len(KK_SIZES))
    for i, row in enumerate(rows):
        vals = [row[k] if isinstance(row[k], float) else np.nan for k in KK_SIZES]
        ax.bar(x + i * width, vals, width, label=f"{row['variant']} (n={row['n_seeds']})")
    ax.set_xticks(x + width * (len(rows) - 1) / 2, KK_SIZES)
    ax.set(xlabel="number of people", ylabel="accuracy", ylim=(0, 1), title=title)
    ax.legend(fontsize=7)
    return _save(fig, None)


def plot_stage0(decision: dict, plan: dict, path: Any = None):
    """Per stage-0 candidate, the share of tokens with L < w < U before and after the probe, and the plan's bars."""
    rows = decision["candidates"]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(7, 3.8), layout="constrained")
    for dx, when, c in ((-0.2, "before", "C0"), (0.2, "after", "C1")):
        name = "before RL" if when == "before" else f"after {plan['probe']['steps']} GRPO steps"
        ax.bar(x + dx, [r[when]["share_between"] for r in rows], width=0.4, color=c, label=name)
    for key, style in (("share_between_before_min", "--"), ("share_between_after_min", ":")):
        ax.axhline(plan["accept"][key], color="k", ls=style, lw=1, label=f"plan: {key.replace('_', ' ')}")
    for i, r in enumerate(rows):  # the other half of the rule: room to learn
        acc = f"sampled accuracy\n{r['before']['sampled_accuracy']:.2f} → {r['after']['sampled_accuracy']:.2f}"
        ax.annotate(acc, (i, 0.005), ha="center", va="bottom", fontsize=8, color="white", fontweight="bold")
    ax.set_xticks(x, [f"{r['id']} ({r['kind']}, {r['range'][0]}–{r['range'][1]})" for r in rows])
    ax.set(ylim=(0, 0.32), ylabel="share of sampled tokens with L < w < U")
    ax.legend(fontsize=8, loc="upper right", ncols=2)
    m = plan["measure"]
    ax.set_title(
        f"{display_name(plan.get('model'))}, stage 0: {m['n_prompts']} prompts × {m['samples_per_prompt']} samples "
        f"at T = {m['temperature']}, seed {plan['probe']['seed']}",
        fontsize=9,
    )
    return _save(fig, path)


def plot_stress(records: Sequence[dict], plan: dict, path: Any = None):
    """Held-out greedy accuracy along each run of the stress arm, one panel per seed, the arms side by side."""
    by = by_arm_seed(records)
    seeds = sorted({s for _, s in by})
    fig, axes = plt.subplots(1, len(seeds), figsize=(3.2 * len(seeds), 3.2), sharey=True, layout="constrained",
                             squeeze=False)  # fmt: skip
    for ax, seed in zip(axes[0], seeds):
        for arm in (a["id"] for a in plan["arms"]):
            if (rec := by.get((arm, seed))) is not None:
                ev = rec["eval_history"]
                ax.plot([e["step"] for e in ev], [e["accuracy"] for e in ev], "o-", color=color(arm), label=arm)
        ax.set(title=f"seed {seed}", xlabel="step")
    axes[0, 0].set_ylabel("held-out greedy accuracy")
    axes[0, 0].legend(fontsize=8)
    b = plan["base"]
    fig.suptitle(
        f"{display_name(b.get('model'))}, stress arm: lr {b['learning_rate']:g}, {b['steps']} steps, "
        f"{b['n_eval']} held-out problems, {len(seeds)} paired seeds",
        fontsize=10,
    )
    return _save(fig, path)


def plot_search_curves(records: Sequence[dict[str, Any]], *, title: str = "", path: str | os.PathLike | None = None):
    """Reward (Eq. 14), grad norm and greedy EM per step by scheme: seeds faint, the median bold."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    groups = metrics.group_by(records, lambda r: r["scheme"])

    def em(r: dict) -> tuple[np.ndarray, np.ndarray]:
        curve = r.get("eval_curve", [])
        return np.asarray([c["step"] for c in curve], float), np.asarray([c["em"] for c in curve], float)

    panels = [("reward", "reward (Eq. 14, mean of the step's rollouts)"), ("grad_norm", "grad norm")]
    for ax, (key, ylabel) in zip(axes, panels + [(em, "greedy EM, held-out questions")]):
        _traces(ax, groups, ("equal", "tr", "reverse", "random"), key)
        ax.set(xlabel="RL step", ylabel=ylabel)
        ax.grid(alpha=0.3)
    axes[2].set_ylim(0.0, max(0.1, min(1.0, axes[2].get_ylim()[1] * 1.1)))
    axes[0].legend(fontsize=8)
    return _save(fig, path, title)


def plot_em_by_type(rows: Sequence[dict[str, Any]], *, title: str = "", path: str | os.PathLike | None = None):
    """Grouped bars of EM per question type for each row ``{"method": ..., "em_by_type": {...}}``."""
    from trgrpo.tasks.search_data import QUESTION_TYPES, TABLE3_DATASETS

    order = {t: i for i, t in enumerate(QUESTION_TYPES + TABLE3_DATASETS)}
    types = sorted({t for r in rows for t in r.get("em_by_type", {})}, key=lambda t: (order.get(t, len(order)), t))
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(types) * max(1, len(rows)) / 3, 3.4))
    width = 0.8 / max(1, len(rows))
    for i, r in enumerate(rows):
        xs = [j + (i - (len(rows) - 1) / 2) * width for j in range(len(types))]
        ems = [100 * r["em_by_type"].get(t, float("nan")) for t in types]
        ax.bar(xs, ems, width=width, label=r.get("method", f"row {i}"))
    ax.set_xticks(range(len(types)), types)
    ax.set(ylabel="exact match (%)", ylim=(0, 100))
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    return _save(fig, path)


def plot_leverage(records: dict[str, dict], bound: float, *, names: dict[str, str] | None = None, path: Any = None):
    """Left: per run and before/after GRPO, the shares carried by the tokens with w < U (of the tokens, of sum(1 - p),
    of sum ||e_k - pi||). Right: the measured cosines between GRPO's and TR's parameter gradients per batch, with
    the orthogonal bound."""
    keys = (
        ("share_tokens_below_upper", "tokens"),
        ("share_one_minus_p_below_upper", "Σ(1 − p)"),
        ("share_logit_grad_norm_below_upper", "Σ‖e_k − π‖"),
    )
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
    cols = [(k, w) for k in records for w in ("before", "after")]
    x = np.arange(len(cols))
    for j, (key, text) in enumerate(keys):
        a0.bar(x + (j - 1) * 0.27, [records[k]["leverage"][w][key] for k, w in cols], width=0.27, label=text)
    lab = [
        (names or {}).get(k, k) + "\n" + ("before RL" if w == "before" else f"after {records[k]['steps']} steps")
        for k, w in cols
    ]
    a0.set_xticks(x, lab, fontsize=7)
    a0.set(ylim=(0, 1), ylabel="share carried by tokens with w < U")
    a0.legend(fontsize=8, title="share of", title_fontsize=8)
    for i, (k, w) in enumerate(cols):
        cos = records[k]["leverage"][w]
        a1.plot([i, i], [cos["grad_cosine_min"], cos["grad_cosine_max"]], color="C0", lw=3)
        a1.plot([i], [cos["grad_cosine_mean"]], "ko", ms=4)
    a1.axhline(bound, color="C3", ls="--", lw=1, label=f"orthogonal bound {bound:.3f}")
    a1.set_xticks(x, lab, fontsize=7)
    a1.set(ylabel="cos(g_GRPO, g_TR) per batch (range, mean)")
    a1.legend(fontsize=8)
    fig.suptitle("How far TR-GRPO turns one update: the same rollouts, both losses, all parameters", fontsize=10)
    return _save(fig, path)
