"""The method's figures, for notebooks 01-02: ``plot_xxx(...) -> Figure`` of the weight function, the theorems
and the Kantorovich bound; :func:`save`, :func:`show`, :func:`mark_smoke`. The figures of runs are
:mod:`trgrpo.reports.plots`. One colour per scheme and arm (``arms.ARMS``, TR-GRPO blue as in the paper's Figure 2)."""

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
from trgrpo.arms import color, label
from trgrpo.loss import zero_gradient_mask
from trgrpo.paper import EPS_HIGH, EPS_LOW, TABLE7_LU, TABLE7_TAUS
from trgrpo.weights import DEFAULTS, RANDOM_RANGE, WeightParams, as_weight_params, token_weights


def figures_dir() -> Path:
    """``$TRGRPO_FIGURES``, else ``runs/figures/`` of this checkout (git-ignored: a run rewrites no tracked file;
    ``trgrpo records`` promotes a run's figures into the committed ``figures/``)."""
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
    eps_low: float = EPS_LOW,
    eps_high: float = EPS_HIGH,
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
    for sign, shade, name in ((1.0, "tab:red", "A > 0: no gradient"), (-1.0, "tab:blue", "A < 0: no gradient")):
        zero = zero_gradient_mask(r, torch.full_like(_P, sign), w, eps_low, eps_high, placement).numpy()
        if zero.any():
            ax.fill_between(_P.numpy(), 0, 1, where=zero, color=shade, alpha=0.15, transform=ax.get_xaxis_transform(),
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
    eps_low: float = EPS_LOW,
    eps_high: float = EPS_HIGH,
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
