"""Figure functions for the notebooks: a flat module of ``plot_xxx(..., ax=None) -> Figure`` and :func:`save`.

Figures are built with :class:`matplotlib.figure.Figure` (not pyplot), so nothing is shown twice in a
notebook and nothing leaks between calls. :func:`save` writes ``figures/<name>.png`` at a modest dpi so the
PNGs stay small; :func:`show` displays a figure or a saved PNG in a notebook (``plots.show(plots.save(fig, name))``
embeds the very file in figures/).
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from matplotlib.figure import Figure

from ..core.loss import zero_gradient_mask
from ..core.weights import WeightParams, as_weight_params, token_weights
from .paper import TABLE7_LU, TABLE7_TAUS

DEFAULTS = WeightParams()  # the paper's Eq. 11 hyperparameters (App. B.2)
SCHEME_COLORS = {"equal": "tab:green", "tr": "tab:blue", "reverse": "tab:orange", "random": "tab:gray"}
SCHEME_LABELS = {"equal": "GRPO (w = 1)", "tr": "TR-GRPO", "reverse": "Reverse (2 - w)", "random": "Random"}


# --------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------


def figures_dir() -> Path:
    """Where :func:`save` writes: ``$TRGRPO_FIGURES``, else ``figures/`` of the checkout holding this package,
    else ``./figures``."""
    env = os.environ.get("TRGRPO_FIGURES")
    if env:
        return Path(env)
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").exists():
        return root / "figures"
    return Path.cwd() / "figures"


def save(fig: Figure, name: str, directory: str | os.PathLike | None = None, *, dpi: int = 100) -> Path:
    """Write ``fig`` to ``<directory or figures_dir()>/<name>.png`` and return the path."""
    d = Path(directory) if directory is not None else figures_dir()
    d.mkdir(parents=True, exist_ok=True)
    path = d / (name if name.endswith(".png") else f"{name}.png")
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    return path


def show(fig_or_path: Figure | str | os.PathLike, *, dpi: int = 100):
    """An IPython image of a figure (rendered to PNG) or of a saved PNG, e.g. ``plots.show(plots.save(fig, name))``.

    Figures here are not pyplot figures, so a notebook displays them through this (no ``%matplotlib`` needed).
    """
    from IPython.display import Image

    if isinstance(fig_or_path, (str, os.PathLike)):
        return Image(filename=str(fig_or_path))
    buf = io.BytesIO()
    fig_or_path.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return Image(data=buf.getvalue(), format="png")


def _has_data(ax) -> bool:
    """True if ``ax`` draws something visible: a line through two finite points, a bar of finite non-zero height,
    a non-empty scatter/collection or an image (a one-step run draws single points, which do not show)."""
    for line in ax.get_lines():
        x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
        if (np.isfinite(x) & np.isfinite(y)).sum() >= 2:
            return True
    for patch in ax.patches:
        h = getattr(patch, "get_height", lambda: 0.0)()
        if np.isfinite(h) and h != 0:
            return True
    return bool(ax.images) or any(len(c.get_offsets()) or len(c.get_paths()) for c in ax.collections)


def mark_smoke(fig, what: str, path: str | os.PathLike | None = None, *, smoke: bool = True):
    """Label a figure from a smoke run: its title (the suptitle if it has one, else each axis title) gets a line
    ``(smoke run: <what>)`` and each axis that draws nothing a note that it is empty by design. ``smoke=False``
    returns ``fig`` unchanged; ``path`` re-saves it."""
    if not smoke:
        return fig
    label = f"(smoke run: {what})"
    sup = fig.get_suptitle()
    if sup:
        fig.suptitle(f"{sup}\n{label}")
    for ax in fig.axes:
        if not sup:
            ax.set_title(f"{ax.get_title()}\n{label}" if ax.get_title() else label)
        if not _has_data(ax):
            ax.text(0.5, 0.5, "empty by design in a smoke run (too few steps to draw)", transform=ax.transAxes,
                    ha="center", va="center", fontsize=8, color="gray")
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120, bbox_inches="tight")
    return fig


def _axes(ax, figsize=(5.0, 3.6)):
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot()


def _np(x) -> np.ndarray:
    if torch.is_tensor(x):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def _p_grid(n: int = 1001) -> torch.Tensor:
    return torch.linspace(0.0, 1.0, n, dtype=torch.float64)


def _weights(p: torch.Tensor, params: WeightParams, scheme: str | None = None, *, seed: int = 0) -> np.ndarray:
    """Weights of ``params`` (its scheme, or ``scheme``) as numpy; ``"random"`` draws from a generator seeded
    ``seed``."""
    if scheme is not None and scheme != params.scheme:
        params = params.replace(scheme=scheme)
    return token_weights(p, params, generator=torch.Generator().manual_seed(int(seed))).numpy()


# --------------------------------------------------------------------------------------------------
# notebook 01: Theorem 3.1 / 3.2
# --------------------------------------------------------------------------------------------------


def plot_theorem31_bounds(samples: dict, *, ax=None, max_points: int = 6000, seed: int = 0) -> Figure:
    """||1_k - p|| against 1 - p_k for random distributions, between the lines y = x and y = sqrt(2) x (App. D).

    ``samples``: the dict of :func:`trgrpo.core.theory.theorem31_samples`; colour = vocabulary size.
    """
    fig, ax = _axes(ax, (5.2, 4.0))
    x, y, v = _np(samples["lower"]), _np(samples["norm"]), np.asarray(samples["vocab_size"])
    if x.size > max_points:
        idx = np.random.default_rng(seed).choice(x.size, max_points, replace=False)
        x, y, v = x[idx], y[idx], v[idx]
    for vs in sorted(set(v.tolist())):
        sel = v == vs
        ax.scatter(x[sel], y[sel], s=5, alpha=0.5, label=f"V = {vs}")
    line = np.linspace(0, 1, 50)
    ax.plot(line, line, "k-", lw=1, label="1 - p_k")
    ax.plot(line, math.sqrt(2) * line, "k--", lw=1, label="sqrt(2) (1 - p_k)")
    ax.set_xlabel("1 - p_k")
    ax.set_ylabel("||1_k - p||_2")
    ax.set_title("Theorem 3.1: (1 - p_k) <= ||1_k - p|| <= sqrt(2)(1 - p_k)")
    ax.legend(fontsize=7, markerscale=2)
    return fig


def plot_grad_norm_vs_prob(
    probs,
    grad_norms,
    *,
    bins: int | Sequence[float] = 10,
    fit: bool = True,
    ax=None,
    ylabel: str = "||grad log pi(o_t)||",
    title: str | None = None,
    max_points: int = 5000,
) -> Figure:
    """Scatter of per-token gradient norm against pi(o_t), binned means (+- s.e.) and the fit c (1 - pi) (Eq. 8)."""
    from ..core.theory import fit_proportional
    from .analysis import binned_means

    fig, ax = _axes(ax, (5.4, 3.8))
    p, g = _np(probs), _np(grad_norms)
    sp, sg = p, g
    if p.size > max_points:
        idx = np.random.default_rng(0).choice(p.size, max_points, replace=False)
        sp, sg = p[idx], g[idx]
    ax.scatter(sp, sg, s=6, alpha=0.3, color="tab:blue", label=f"tokens (n = {p.size})")
    b = binned_means(p, g, bins)
    ax.errorbar(b["x_mean"], b["mean"], yerr=b["sem"], fmt="o-", color="tab:red", ms=4, label="binned mean")
    if fit:
        c, r2 = fit_proportional(1 - p, g)
        line = np.linspace(0, 1, 101)
        ax.plot(line, c * (1 - line), "k--", lw=1, label=f"{c:.3g} (1 - pi)  (R² = {r2:.2f})")
    ax.set_xlabel("pi(o_t)")
    ax.set_ylabel(ylabel)
    ax.set_xlim(-0.02, 1.02)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=7)
    return fig


def plot_theorem32_spread(
    grad_norms,
    probs,
    *,
    tau_modes: Sequence[str] = ("scale", "divide"),
    ax=None,
    params: WeightParams | str = "tr",
    **fields: Any,
) -> Figure:
    """Eq. 13: box plots of w ||grad log pi|| / mean for GRPO, TR-GRPO and Reverse under each tau reading
    (the other Eq. 11 hyperparameters from ``params`` / ``fields``)."""
    from .analysis import spread_stats

    fig, ax = _axes(ax, (6.4, 3.8))
    g = torch.as_tensor(_np(grad_norms))
    p = torch.as_tensor(_np(probs)).clamp(0, 1)
    base = as_weight_params(params, **fields)
    data, labels, colors = [], [], []
    for mode in tau_modes:
        for scheme in ("equal", "tr", "reverse"):
            w = token_weights(p, base.replace(scheme=scheme, tau_mode=mode))
            v = (w * g).numpy()
            s = spread_stats(v)
            data.append(v / s["mean"])
            labels.append(f"{SCHEME_LABELS[scheme].split(' (')[0]}\n{mode}\nCV {s['cv']:.3f}")
            colors.append(SCHEME_COLORS[scheme])
    bp = ax.boxplot(data, patch_artist=True, showfliers=True, flierprops={"markersize": 2})
    ax.set_xticks(range(1, len(labels) + 1), labels, fontsize=7)
    for patch, c in zip(bp["boxes"], colors):
        patch.set_facecolor(c)
        patch.set_alpha(0.5)
    ax.set_ylabel("w ||grad log pi|| / its mean")
    ax.set_title("Theorem 3.2: spread of the weighted gradient norm", fontsize=10)
    return fig


# --------------------------------------------------------------------------------------------------
# notebook 02: the weight function (Eq. 11) and the three readings
# --------------------------------------------------------------------------------------------------


def _label(params: WeightParams) -> str:
    """The fields of ``params`` that differ from the paper defaults, ``"defaults"`` when none do."""
    changed = {k: v for k, v in vars(params).items() if v != getattr(DEFAULTS, k)}
    return ", ".join(f"{k}={v}" for k, v in changed.items()) or "defaults"


def plot_weight_function(
    settings: Sequence[WeightParams | dict] | None = None,
    *,
    labels: Sequence[str] | None = None,
    ax=None,
    title: str = "Eq. 11: w(p)",
) -> Figure:
    """w(p) on [0, 1] for each setting: a :class:`~trgrpo.core.weights.WeightParams` or a dict of its fields (missing
    keys take the paper defaults)."""
    fig, ax = _axes(ax)
    settings = list(settings) if settings is not None else [DEFAULTS]
    p = _p_grid()
    for i, s in enumerate(settings):
        params = s if isinstance(s, WeightParams) else as_weight_params(**s)
        ax.plot(p.numpy(), _weights(p, params), label=labels[i] if labels is not None else _label(params))
    ax.set_xlabel("p = pi(o_t)")
    ax.set_ylabel("w")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    return fig


def plot_tau_sweep(
    taus: Sequence[float] = TABLE7_TAUS, *, ax=None, params: WeightParams | str = "tr", **fields: Any
) -> Figure:
    """w(p) for each tau of Table 7 under one reading of tau (``params.tau_mode``, or the keyword ``tau_mode``)."""
    base = as_weight_params(params, **fields)
    form = "sigmoid(tau p)" if base.tau_mode == "scale" else "sigmoid(p / tau)"
    return plot_weight_function(
        [base.replace(tau=t) for t in taus],
        labels=[f"tau = {t:g}" for t in taus],
        ax=ax,
        title=f"Table 7 tau sweep, tau_mode='{base.tau_mode}': {form}",
    )


def plot_lu_ranges(
    ranges: Sequence[tuple[float, float]] = TABLE7_LU, *, ax=None, params: WeightParams | str = "tr", **fields: Any
) -> Figure:
    """w(p) for each (L, U) of Table 7."""
    base = as_weight_params(params, **fields)
    return plot_weight_function(
        [base.replace(lower=lo, upper=up) for lo, up in ranges],
        labels=[f"(L, U) = ({lo:g}, {up:g})" for lo, up in ranges],
        ax=ax,
        title="Table 7 clip ranges (L, U)",
    )


def plot_schemes(
    *, ax=None, seed: int = 0, n_random: int = 400, params: WeightParams | str = "tr", **fields: Any
) -> Figure:
    """TR-GRPO, Reverse (2 - w), Equal and Random (uniform on [0.5, 1.5]) weights against p (Table 4)."""
    fig, ax = _axes(ax)
    p = _p_grid()
    base = as_weight_params(params, **fields)
    for scheme in ("tr", "reverse", "equal"):
        ax.plot(p.numpy(), _weights(p, base, scheme), color=SCHEME_COLORS[scheme], label=SCHEME_LABELS[scheme])
    pr = torch.rand(n_random, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    ax.scatter(pr.numpy(), _weights(pr, base, "random", seed=seed), s=4, alpha=0.4,
               color=SCHEME_COLORS["random"], label="Random (U[0.5, 1.5])")  # fmt: skip
    ax.set_xlabel("p = pi(o_t)")
    ax.set_ylabel("w")
    ax.set_title("Weight schemes of Table 4", fontsize=10)
    ax.legend(fontsize=7)
    return fig


def plot_eq13_factor(*, ax=None, params: WeightParams | str = "tr", **fields: Any) -> Figure:
    """The factor of Eq. 13: w (1 - p) for TR-GRPO and Reverse against the bare 1 - p of Eq. 8."""
    fig, ax = _axes(ax)
    p = _p_grid()
    base = as_weight_params(params, **fields)
    for scheme in ("equal", "tr", "reverse"):
        w = _weights(p, base, scheme)
        ax.plot(p.numpy(), w * (1 - p.numpy()), color=SCHEME_COLORS[scheme], label=f"{SCHEME_LABELS[scheme]}")
    ax.set_xlabel("p = pi(o_t)")
    ax.set_ylabel("w (1 - p)")
    ax.set_title(f"Eq. 13 factor w(1 - p), tau_mode='{base.tau_mode}'", fontsize=10)
    ax.legend(fontsize=7)
    return fig


def plot_zero_gradient(
    *,
    placement: str = "ratio",
    ratio: float = 1.0,
    eps_low: float = 0.2,
    eps_high: float = 0.24,
    ax=None,
    params: WeightParams | str = "tr",
    **fields: Any,
) -> Figure:
    """Reading 2 (Eq. 9): the clipped quantity (w r or r) against p, the trust band [1 - eps_l, 1 + eps_h],
    and the p where a token with A > 0 (red) or A < 0 (blue) gets no policy gradient."""
    fig, ax = _axes(ax)
    p = _p_grid()
    w = torch.as_tensor(_weights(p, as_weight_params(params, **fields), "tr"))
    r = torch.full_like(p, float(ratio))
    x = (w * r) if placement == "ratio" else r
    ax.plot(p.numpy(), x.numpy(), color="k", label="w r" if placement == "ratio" else "r")
    ax.axhspan(1 - eps_low, 1 + eps_high, color="tab:green", alpha=0.12, label="trust band")
    for sign, color, name in ((1.0, "tab:red", "A > 0: no gradient"), (-1.0, "tab:blue", "A < 0: no gradient")):
        zero = zero_gradient_mask(r, torch.full_like(p, sign), w, eps_low, eps_high, placement).numpy()
        if zero.any():
            ax.fill_between(p.numpy(), 0, 1, where=zero, color=color, alpha=0.15, transform=ax.get_xaxis_transform(),
                            label=name)  # fmt: skip
    ax.set_ylim(min(0.7, float(x.min()) - 0.05), max(1.5, float(x.max()) + 0.05))
    ax.set_xlabel("p = pi(o_t)")
    ax.set_ylabel("clipped quantity")
    ax.set_title(f"placement='{placement}', r = {ratio:g}", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    return fig


def plot_kl_offset(*, ax=None, params: WeightParams | str = "tr", **fields: Any) -> Figure:
    """Reading 3: at pi = pi_ref, the value of Eq. 10 (w - log w - 1) and its slope in log pi (1 - w),
    against the 'outside' form (Eq. 12's gradient) and Eq. 6, both 0 there."""
    from ..core.readings import kl_offset_table

    fig, ax = _axes(ax)
    p = np.linspace(0.001, 1.0, 400)
    rows = kl_offset_table(p.tolist(), params=as_weight_params(params, **fields).replace(scheme="tr"))
    ax.plot(p, [r["eq10_value"] for r in rows], color="tab:purple", label="Eq. 10 value: w - log w - 1")
    ax.plot(p, [r["eq10_dlogpi"] for r in rows], color="tab:purple", ls="--", label="Eq. 10 d/dlog pi: 1 - w")
    ax.plot(p, [r["outside_value"] for r in rows], color="tab:gray", label="'outside' / Eq. 6: value and slope 0")
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xlabel("p = pi(o_t) = pi_ref(o_t)")
    ax.set_ylabel("KL term at pi = pi_ref")
    ax.set_title("Reading 3: Eq. 10 is not zero at pi = pi_ref", fontsize=10)
    ax.legend(fontsize=7)
    return fig


def plot_weight_explorer(
    params: WeightParams | str = "tr",
    *,
    placement: str = "ratio",
    eps_low: float = 0.2,
    eps_high: float = 0.24,
    **fields: Any,
) -> Figure:
    """Three panels for one setting (``params``, or the Eq. 11 keywords ``fields``): w(p) (paper default dashed),
    the Eq. 13 factor w(1 - p), and the zero-gradient regions of Eq. 9 at r = 1 under ``placement``.
    The callback of :func:`weight_explorer`."""
    fig = Figure(figsize=(12.0, 3.6), layout="constrained")
    axes = fig.subplots(1, 3)
    params = as_weight_params(params, **fields)
    p = _p_grid()
    w = _weights(p, params, "tr")
    axes[0].plot(p.numpy(), _weights(p, DEFAULTS), "k--", lw=1, label="paper default")
    axes[0].plot(p.numpy(), w, color="tab:blue", lw=2, label="this setting")
    axes[0].plot(p.numpy(), _weights(p, params, "reverse"), color="tab:orange", lw=1, label="Reverse 2 - w")
    axes[0].set_xlabel("p")
    axes[0].set_ylabel("w")
    flat = bool(np.allclose(w, 1.0))
    axes[0].set_title(f"w(p): tau_mode='{params.tau_mode}'" + (" (w = 1 = 2 - w: lines coincide)" if flat else ""),
                      fontsize=10)
    axes[0].legend(fontsize=7)
    plot_eq13_factor(ax=axes[1], params=params)
    plot_zero_gradient(ax=axes[2], placement=placement, eps_low=eps_low, eps_high=eps_high, params=params)
    return fig


def explorer_sample_probs(n: int = 2400, seed: int = 0) -> torch.Tensor:
    """The explorer's sample batch: the probability of a sampled token in peaked, medium and flat contexts over a
    1000-token vocabulary (a third each; the synthetic batch of notebook 02's exercises)."""
    from ..core.theory import pick_tokens, random_distributions

    g = torch.Generator().manual_seed(seed)
    parts = []
    for temperature in (0.05, 0.3, 1.0):
        probs = random_distributions(n // 3, 1000, temperature, generator=g)
        parts.append(probs.gather(-1, pick_tokens(probs, "sample", generator=g)[:, None]).squeeze(-1))
    return torch.cat(parts)


def explorer_readout(
    placement: str = "ratio",
    eps_low: float = 0.2,
    eps_high: float = 0.24,
    sample=None,
    params: WeightParams | str = "tr",
    **fields: Any,
) -> str:
    """One line for the explorer: the cut-off probability above which a token with A > 0 gets no gradient (and below
    which one with A < 0 gets none) at r = 1 under ``placement``, and the share of a sample batch silenced."""
    from ..core.readings import zero_gradient_fraction, zero_gradient_thresholds

    kw = {"params": as_weight_params(params, **fields).replace(scheme="tr")}
    th = zero_gradient_thresholds(eps_low=eps_low, eps_high=eps_high, resolution=1e-4, **kw)[placement]
    sample = explorer_sample_probs() if sample is None else torch.as_tensor(sample, dtype=torch.float64)
    frac = zero_gradient_fraction(sample, eps_low=eps_low, eps_high=eps_high, **kw)
    pos = "none" if th["pos_from_p"] is None else f"p >= {th['pos_from_p']:.3f}"
    neg = "none" if th["neg_up_to_p"] is None else f"p <= {th['neg_up_to_p']:.3f}"
    return (f"placement={placement!r}, r = 1: no gradient for A > 0 at {pos}, for A < 0 at {neg}. "
            f"Of {sample.numel()} sampled tokens, silenced if A > 0: {frac[placement + '_pos']:.1%}, "
            f"if A < 0: {frac[placement + '_neg']:.1%}.")


EXPLORER_TAUS = (0.1, 0.2, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 7.0, 9.0, 10.0, 12.0, 15.0, 20.0, 30.0)  # Table 7 and between


def weight_explorer(**defaults):
    """Sliders for alpha, mu, tau, L, U and dropdowns for tau_mode and placement that redraw
    :func:`plot_weight_explorer` live (ipywidgets). Returns the widget; display it in a notebook."""
    import ipywidgets as widgets
    from IPython.display import display

    d = {**vars(DEFAULTS), "placement": "ratio", **defaults}
    style = {"description_width": "initial"}  # the whole label, never "tau_m..."
    controls = {
        "alpha": widgets.FloatSlider(value=d["alpha"], min=0.5, max=4.0, step=0.1, description="alpha", style=style),
        "mu": widgets.FloatSlider(value=d["mu"], min=-0.5, max=0.45, step=0.05, description="mu", style=style),
        # A fixed list that holds Table 7's taus and the given one: a log slider snapped tau = 9 to 10^0.95 = 8.91.
        "tau": widgets.SelectionSlider(
            options=[(f"{t:g}", t) for t in sorted({*EXPLORER_TAUS, float(d["tau"])})], value=float(d["tau"]),
            description="tau", style=style,
        ),  # fmt: skip
        "lower": widgets.FloatSlider(value=d["lower"], min=0.1, max=1.5, step=0.05, description="L", style=style),
        "upper": widgets.FloatSlider(value=d["upper"], min=0.5, max=1.95, step=0.05, description="U", style=style),
        "tau_mode": widgets.Dropdown(
            options=["scale", "divide"], value=d["tau_mode"], description="tau_mode", style=style
        ),  # fmt: skip
        "placement": widgets.Dropdown(
            options=["ratio", "surrogate"], value=d["placement"], description="placement", style=style
        ),  # fmt: skip
    }
    out = widgets.Output()
    sample = explorer_sample_probs()

    def redraw(**kw) -> None:
        out.clear_output(wait=True)
        with out:
            if kw["lower"] > kw["upper"]:
                print(f"L = {kw['lower']} > U = {kw['upper']}: move L below U")
                return
            placement = kw.pop("placement")
            params = as_weight_params(**kw)  # the sliders' values, validated once
            print(explorer_readout(placement, sample=sample, params=params))
            display(show(plot_weight_explorer(params=params, placement=placement)))

    widgets.interactive_output(redraw, controls)
    box = widgets.VBox(
        [widgets.HBox([controls["alpha"], controls["mu"], controls["tau"]]),
         widgets.HBox([controls["lower"], controls["upper"], controls["tau_mode"], controls["placement"]]),
         out]
    )  # fmt: skip
    box.controls = controls  # for tests and for readers who want to set values from code
    box.output = out
    return box
