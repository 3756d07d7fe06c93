"""Figure functions for the notebooks: ``plot_xxx(...) -> Figure``, :func:`save` and :func:`show`.

One colour per scheme and arm (:data:`COLORS`, TR-GRPO blue as in the paper's Figure 2), one name
(``tables.LABELS``); the run figures take ``path=``.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from trgrpo import stats
from trgrpo.loss import zero_gradient_mask
from trgrpo.models import display_name
from trgrpo.paper import KK_SIZES, TABLE7_LU, TABLE7_TAUS
from trgrpo.tables import by_arm_seed, kk_table, label, variant
from trgrpo.weights import DEFAULTS, RANDOM_RANGE, WeightParams, as_weight_params, token_weights

# One colour per scheme, toy arm (trgrpo.toy.run_label), LM arm and KL weighting; a tau variant takes its arm's
COLORS = {
    "equal": "tab:green",
    "grpo": "tab:green",
    "tr": "tab:blue",
    "tr-surrogate": "tab:blue",
    "tr-ratio": "tab:purple",
    "reverse": "tab:orange",
    "reverse-surrogate": "tab:orange",
    "random": "tab:gray",
    "equal-randomreward": "black",
    "const-surrogate": "tab:red",
    "tr_norm-surrogate": "tab:cyan",
    "eq10": "tab:red",
    "outside": "tab:blue",
    "plain": "tab:green",
}


def color(key: str) -> str:
    """The colour of a scheme or arm id (``tr-surrogate-tau2`` takes ``tr-surrogate``'s)."""
    return COLORS.get(key.split("-tau")[0], "tab:brown")


def figures_dir() -> Path:
    """``$TRGRPO_FIGURES``, else ``runs/figures/`` of this checkout (git-ignored: a run rewrites no tracked file;
    ``python -m trgrpo.course records`` promotes a run's figures into the committed ``figures/``)."""
    return Path(os.environ.get("TRGRPO_FIGURES") or Path(__file__).resolve().parents[1] / "runs" / "figures")


def save(fig: Figure, name: str, directory: str | os.PathLike | None = None, *, dpi: int = 100) -> Path:
    """Write ``fig`` to ``<directory or figures_dir()>/<name>.png`` and return the path."""
    d = Path(directory) if directory is not None else figures_dir()
    d.mkdir(parents=True, exist_ok=True)
    path = d / (name if name.endswith(".png") else f"{name}.png")
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    return path


def show(fig_or_path: Figure | str | os.PathLike):
    """An IPython image of a figure or a saved PNG (``plots.show(plots.save(fig, name))`` embeds the file)."""
    from IPython.display import Image

    if isinstance(fig_or_path, (str, os.PathLike)):
        return Image(filename=str(fig_or_path))
    buf = io.BytesIO()
    fig_or_path.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return Image(data=buf.getvalue(), format="png")


def mark_smoke(fig, what: str, path: str | os.PathLike | None = None, *, smoke: bool = True):
    """Add ``(smoke run: <what>)`` under the figure's title (``smoke=False``: unchanged); ``path`` re-saves it."""
    if smoke:
        sup = fig.get_suptitle()
        _save(fig, path, f"{sup}\n(smoke run: {what})" if sup else f"(smoke run: {what})")
    return fig


def _axes(ax, figsize=(5.0, 3.6)):
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot()


def _dress(ax, ylabel: str, title: str = "", xlabel: str = "p = pi(o_t)", **legend) -> None:
    """Axis labels, a 10-pt title and a 7-pt legend."""
    ax.set(xlabel=xlabel, ylabel=ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(**{"fontsize": 7, **legend})


_P = torch.linspace(0.0, 1.0, 1001, dtype=torch.float64)  # the p axis of the weight figures


def _weights(p: torch.Tensor, params: WeightParams, scheme: str | None = None) -> np.ndarray:
    """Weights of ``params`` (or of ``scheme``) as numpy; ``"random"`` draws from a generator seeded 0."""
    if scheme is not None and scheme != params.scheme:
        params = params.replace(scheme=scheme)
    return token_weights(p, **vars(params), generator=torch.Generator().manual_seed(0)).numpy()


# notebook 01: Theorem 3.1 / 3.2


def plot_theorem31_bounds(samples: dict, *, ax=None) -> Figure:
    """||1_k - p|| against 1 - p_k for :func:`trgrpo.theory.theorem31_samples`, between y = x and y = sqrt(2) x."""
    fig, ax = _axes(ax, (5.2, 4.0))
    x, y, v = stats.to_numpy(samples["lower"]), stats.to_numpy(samples["norm"]), np.asarray(samples["vocab_size"])
    if x.size > 6000:
        idx = np.random.default_rng(0).choice(x.size, 6000, replace=False)
        x, y, v = x[idx], y[idx], v[idx]
    for vs in sorted(set(v.tolist())):
        sel = v == vs
        ax.scatter(x[sel], y[sel], s=5, alpha=0.5, label=f"V = {vs}")
    line = np.linspace(0, 1, 50)
    ax.plot(line, line, "k-", lw=1, label="1 - p_k")
    ax.plot(line, math.sqrt(2) * line, "k--", lw=1, label="sqrt(2) (1 - p_k)")
    _dress(ax, "||1_k - p||_2", "Theorem 3.1: (1 - p_k) <= ||1_k - p|| <= sqrt(2)(1 - p_k)", "1 - p_k", markerscale=2)
    return fig


def plot_grad_norm_vs_prob(
    probs,
    grad_norms,
    *,
    fit: bool = True,
    ax=None,
    ylabel: str = "||grad log pi(o_t)||",
    title: str | None = None,
) -> Figure:
    """Scatter of per-token gradient norm against pi(o_t), 10 binned means (+- s.e.) and the fit c (1 - pi) (Eq. 8)."""
    fig, ax = _axes(ax, (5.4, 3.8))
    p, g = stats.to_numpy(probs), stats.to_numpy(grad_norms)
    sp, sg = p, g
    if p.size > 5000:
        idx = np.random.default_rng(0).choice(p.size, 5000, replace=False)
        sp, sg = p[idx], g[idx]
    ax.scatter(sp, sg, s=6, alpha=0.3, color="tab:blue", label=f"tokens (n = {p.size})")
    b = stats.binned_means(p, g)
    ax.errorbar(b["x_mean"], b["mean"], yerr=b["sem"], fmt="o-", color="tab:red", ms=4, label="binned mean")
    if fit:
        c, r2 = stats.fit_proportional(1 - p, g)
        line = np.linspace(0, 1, 101)
        ax.plot(line, c * (1 - line), "k--", lw=1, label=f"{c:.3g} (1 - pi)  (R² = {r2:.2f})")
    ax.set_xlim(-0.02, 1.02)
    _dress(ax, ylabel, title or "", "pi(o_t)")
    return fig


def plot_theorem32_spread(grad_norms, probs, *, ax=None) -> Figure:
    """Eq. 13: box plots of w ||grad log pi|| / its mean for GRPO, TR-GRPO and Reverse under each tau reading."""
    fig, ax = _axes(ax, (6.4, 3.8))
    g, p = torch.as_tensor(stats.to_numpy(grad_norms)), torch.as_tensor(stats.to_numpy(probs)).clamp(0, 1)
    cases = [(mode, scheme) for mode in ("scale", "divide") for scheme in ("equal", "tr", "reverse")]
    data = [(token_weights(p, scheme, tau_mode=mode) * g).numpy() for mode, scheme in cases]
    bp = ax.boxplot([v / v.mean() for v in data], patch_artist=True, flierprops={"markersize": 2})
    ax.set_xticks(range(1, len(cases) + 1), [f"{label(s).split(' (')[0]}\n{m}" for m, s in cases], fontsize=7)
    for patch, (_, scheme) in zip(bp["boxes"], cases):
        patch.set_facecolor(color(scheme))
        patch.set_alpha(0.5)
    ax.set_ylabel("w ||grad log pi|| / its mean")
    ax.set_title("Theorem 3.2: spread of the weighted gradient norm", fontsize=10)
    return fig


# notebook 02: the weight function (Eq. 11) and the three readings


def plot_weight_function(
    settings: Sequence[WeightParams | dict],
    *,
    labels: Sequence[str] | None = None,
    ax=None,
    title: str = "Eq. 11: w(p)",
) -> Figure:
    """w(p) on [0, 1] for each setting: a :class:`~trgrpo.weights.WeightParams` or a dict of its fields; unlabelled,
    a line is named by the fields that differ from the paper defaults."""
    fig, ax = _axes(ax)
    for i, s in enumerate(settings):
        params = s if isinstance(s, WeightParams) else as_weight_params(**s)
        changed = ", ".join(f"{k}={v}" for k, v in vars(params).items() if v != getattr(DEFAULTS, k)) or "defaults"
        ax.plot(_P.numpy(), _weights(_P, params), label=labels[i] if labels is not None else changed)
    _dress(ax, "w", title)
    return fig


def plot_schemes(*, ax=None, params: WeightParams | str = "tr", **fields: Any) -> Figure:
    """TR-GRPO, Reverse (2 - w), Equal and Random (uniform on [0.5, 1.5]) weights against p (Table 4)."""
    fig, ax = _axes(ax)
    base = as_weight_params(params, **fields)
    for scheme in ("tr", "reverse", "equal"):
        ax.plot(_P.numpy(), _weights(_P, base, scheme), color=color(scheme), label=label(scheme))
    pr = torch.rand(400, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    ax.scatter(pr.numpy(), _weights(pr, base, "random"), s=4, alpha=0.4,
               color=color("random"), label="Random (U[{:g}, {:g}])".format(*RANDOM_RANGE))  # fmt: skip
    _dress(ax, "w", "Weight schemes of Table 4")
    return fig


def plot_eq13_factor(*, ax=None, params: WeightParams | str = "tr", **fields: Any) -> Figure:
    """The factor of Eq. 13: w (1 - p) for TR-GRPO and Reverse against the bare 1 - p of Eq. 8."""
    fig, ax = _axes(ax)
    base = as_weight_params(params, **fields)
    for scheme in ("equal", "tr", "reverse"):
        w = _weights(_P, base, scheme)
        ax.plot(_P.numpy(), w * (1 - _P.numpy()), color=color(scheme), label=label(scheme))
    _dress(ax, "w (1 - p)", f"Eq. 13 factor w(1 - p), tau_mode='{base.tau_mode}'")
    return fig


def plot_zero_gradient(
    *,
    placement: str = "ratio",
    eps_low: float = 0.2,
    eps_high: float = 0.24,
    ax=None,
    params: WeightParams | str = "tr",
    **fields: Any,
) -> Figure:
    """Reading 2 (Eq. 9): the clipped w r (or r) against p, the trust band, and where A > 0 / A < 0 get no gradient."""
    fig, ax = _axes(ax)
    w = torch.as_tensor(_weights(_P, as_weight_params(params, **fields), "tr"))
    r = torch.ones_like(_P)  # at pi = pi_old
    x = (w * r) if placement == "ratio" else r
    ax.plot(_P.numpy(), x.numpy(), color="k", label="w r" if placement == "ratio" else "r")
    ax.axhspan(1 - eps_low, 1 + eps_high, color="tab:green", alpha=0.12, label="trust band")
    for sign, color, name in ((1.0, "tab:red", "A > 0: no gradient"), (-1.0, "tab:blue", "A < 0: no gradient")):
        zero = zero_gradient_mask(r, torch.full_like(_P, sign), w, eps_low, eps_high, placement).numpy()
        if zero.any():
            ax.fill_between(_P.numpy(), 0, 1, where=zero, color=color, alpha=0.15, transform=ax.get_xaxis_transform(),
                            label=name)  # fmt: skip
    ax.set_ylim(min(0.7, float(x.min()) - 0.05), max(1.5, float(x.max()) + 0.05))
    _dress(ax, "clipped quantity", f"placement='{placement}', r = 1", loc="lower right")
    return fig


def plot_kl_offset(*, ax=None, params: WeightParams | str = "tr", **fields: Any) -> Figure:
    """Reading 3: at pi = pi_ref, Eq. 10's value w - log w - 1 and slope 1 - w against 'outside' and Eq. 6 (0)."""
    from trgrpo.readings import kl_offset_table

    fig, ax = _axes(ax)
    p = np.linspace(0.001, 1.0, 400)
    rows = kl_offset_table(p.tolist(), params=as_weight_params(params, **fields).replace(scheme="tr"))
    ax.plot(p, [r["eq10_value"] for r in rows], color="tab:purple", label="Eq. 10 value: w - log w - 1")
    ax.plot(p, [r["eq10_dlogpi"] for r in rows], color="tab:purple", ls="--", label="Eq. 10 d/dlog pi: 1 - w")
    ax.plot(p, [r["outside_value"] for r in rows], color="tab:gray", label="'outside' / Eq. 6: value and slope 0")
    ax.axhline(0, color="k", lw=0.5)
    _dress(ax, "KL term at pi = pi_ref", "Reading 3: Eq. 10 is not zero at pi = pi_ref", "p = pi(o_t) = pi_ref(o_t)")
    return fig


def plot_weight_explorer(
    params: WeightParams | str = "tr",
    *,
    placement: str = "ratio",
    eps_low: float = 0.2,
    eps_high: float = 0.24,
    **fields: Any,
) -> Figure:
    """Three panels for one setting: w(p) (paper default dashed), w(1 - p) (Eq. 13), Eq. 9's zero-gradient regions."""
    fig = Figure(figsize=(12.0, 3.6), layout="constrained")
    axes = fig.subplots(1, 3)
    params = as_weight_params(params, **fields)
    w = _weights(_P, params, "tr")
    axes[0].plot(_P.numpy(), _weights(_P, DEFAULTS), "k--", lw=1, label="paper default")
    axes[0].plot(_P.numpy(), w, color=color("tr"), lw=2, label="this setting")
    axes[0].plot(_P.numpy(), _weights(_P, params, "reverse"), color=color("reverse"), lw=1, label=label("reverse"))
    flat = " (w = 1 = 2 - w: lines coincide)" if np.allclose(w, 1.0) else ""
    _dress(axes[0], "w", f"w(p): tau_mode='{params.tau_mode}'{flat}", "p")
    plot_eq13_factor(ax=axes[1], params=params)
    plot_zero_gradient(ax=axes[2], placement=placement, eps_low=eps_low, eps_high=eps_high, params=params)
    return fig


def weight_explorer(**defaults):
    """ipywidgets sliders (alpha, mu, tau, L, U, tau_mode, placement) that redraw :func:`plot_weight_explorer`."""
    import ipywidgets as w
    from IPython.display import display

    d = {**vars(DEFAULTS), "placement": "ratio", **defaults}
    taus = sorted({*TABLE7_TAUS, 0.1, 0.2, 1.0, 1.5, 3.0, 5.0, 12.0, 15.0, 30.0, float(d["tau"])})  # a log slider snaps
    s = {"style": {"description_width": "initial"}}

    def slider(key: str, lo: float, hi: float, step: float, name: str = ""):
        return w.FloatSlider(value=d[key], min=lo, max=hi, step=step, description=name or key, **s)

    controls = {
        "alpha": slider("alpha", 0.5, 4.0, 0.1),
        "mu": slider("mu", -0.5, 0.45, 0.05),
        "tau": w.SelectionSlider(options=[(f"{t:g}", t) for t in taus], value=float(d["tau"]), description="tau", **s),
        "lower": slider("lower", 0.1, 1.5, 0.05, "L"),
        "upper": slider("upper", 0.5, 1.95, 0.05, "U"),
        "tau_mode": w.Dropdown(options=["scale", "divide"], value=d["tau_mode"], description="tau_mode", **s),
        "placement": w.Dropdown(options=["ratio", "surrogate"], value=d["placement"], description="placement", **s),
    }
    out = w.Output()

    def redraw(placement: str, **kw) -> None:
        out.clear_output(wait=True)
        with out:
            if kw["lower"] > kw["upper"]:
                print(f"L = {kw['lower']} > U = {kw['upper']}: move L below U")
            else:
                display(show(plot_weight_explorer(params=as_weight_params(**kw), placement=placement)))

    w.interactive_output(redraw, controls)
    items = list(controls.values())
    box = w.VBox([w.HBox(items[:3]), w.HBox(items[3:]), out])
    box.controls = controls  # for tests and for readers who want to set values from code
    return box


# notebooks 03-08: runs of the toy, the real LM, the paper-scale tasks and the answer page


def _save(fig, path: Path | str | None, title: str = ""):
    """Suptitle ``title``, lay the figure out and write it to ``path`` (150 dpi) when given."""
    if title:
        fig.suptitle(title, fontsize=10)
    if not fig.get_constrained_layout():  # a constrained figure lays itself out; once tight, a figure is re-tightened
        fig.tight_layout()
    if path is not None:
        save(fig, Path(path).name, Path(path).parent, dpi=150)
    return fig


def _traces(ax, groups: dict, labels: Sequence[str], key, *, smooth: int = 1, name=label, style=None) -> None:
    """Per-seed traces faint, the median across seeds bold, the inter-quartile range shaded; ``style(i, runs)``
    gives a group's line keywords (default: its :func:`color`)."""
    for i, lb in enumerate(labels):
        runs = groups.get(lb, [])
        steps, m = stats.stack(runs, key) if runs else (np.empty(0), None)
        if steps.size == 0:
            continue
        if smooth > 1:
            m = np.vstack([stats.rolling_mean(row, smooth) for row in m])
        kw = style(i, runs) if style else {"color": color(lb)}
        for row in m:
            ax.plot(steps, row, alpha=0.18, lw=0.8, **kw)
        med, lo, hi = stats.band(m)
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
    _traces(axes[1], groups, labels, stats.grad_norm_per_mean_weight)
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
    """KL(pi || pi_ref) (k3) along training per ``kl_weighting``, one panel per beta (:func:`trgrpo.tables.kl_arms`)."""
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
    """A row of :func:`trgrpo.tables.arm_rows` in the keys of :func:`trgrpo.answers.forest_rows`."""
    if "delta" in r:
        return r
    ci95 = [r["ci_low"], r["ci_high"]]
    return {**r, "label": label(r["arm"]), "n": r["n_pairs"], "delta": r["delta_vs_equal"], "ci95": ci95}


def plot_forest(rows: Sequence[dict], *, path: Path | str | None = None, title: str = ""):
    """Paired differences to GRPO (rows of :func:`trgrpo.answers.forest_rows` or :func:`trgrpo.tables.arm_rows`):
    thin the 95 % interval, thick the verdict's, an open diamond the paper's effect, p on the right, grey ± MDE."""
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
    thick = "; thick: at the verdict's level" if any("ci" in r for r in rows) else ""
    ax.set_xlabel(f"Δ primary metric vs GRPO, same seed (thin: 95 % t-interval{thick})")
    if drawn or np.isfinite(mde):
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, fontsize=8, frameon=False)
    ax.set_title(title, fontsize=10)
    return _save(fig, path)


def plot_trajectories(
    records: Sequence[dict], key: str, *, ax=None, title: str | None = None, ylabel: str | None = None
):
    """Figure 3 / 4 analog (``key`` grad_norm / reward): seeds faint, median bold, one line style per variant."""
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(6.5, 3.6))
    groups = stats.group_by(records, variant)

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
    groups = stats.group_by(records, lambda r: r["scheme"])

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


def plot_kantorovich(lower: float = DEFAULTS.lower, *, samples: dict | None = None) -> Figure:
    """The least cosine between GRPO's and TR's update over weights in [L, U] (orthogonal token gradients) against
    U / L, in degrees, with ``samples`` ({"ratio": [...], "degrees": [...]}: random draws) beneath it."""
    from trgrpo.theory import kantorovich_cosine

    r = np.linspace(1.0, 3.0, 201)
    deg = [math.degrees(math.acos(min(1.0, kantorovich_cosine(lower, lower * x)))) for x in r]
    fig, ax = plt.subplots(figsize=(5.6, 3.6), layout="constrained")
    if samples:
        ax.scatter(samples["ratio"], samples["degrees"], s=6, alpha=0.4, color="C7", label="random weights in [L, U]")
    ax.plot(r, deg, color="C3", lw=2, label="bound: arccos(2√(LU)/(L+U))")
    for lo, up in ((DEFAULTS.lower, DEFAULTS.upper), TABLE7_LU[-1]):  # the paper's default, Table 7's widest
        d = math.degrees(math.acos(kantorovich_cosine(lo, up)))
        ax.plot([up / lo], [d], "ko")
        ax.annotate(
            f"({lo:g}, {up:g}): {d:.1f}°", (up / lo, d), textcoords="offset points", xytext=(6, -10), fontsize=8
        )
    ax.set(xlabel="U / L", ylabel="largest angle between g_GRPO and g_TR (°)")
    ax.set_title("How far weights in [L, U] can turn an update (orthogonal token gradients)", fontsize=9)
    ax.legend(fontsize=8)
    return fig


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
