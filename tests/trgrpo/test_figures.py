"""The method's figures (trgrpo/figures.py; today in trgrpo/plots.py): the theory plots and the weight explorer."""

import pytest
import torch

from trgrpo import figures, theory
from trgrpo.weights import WeightParams


def test_plots_return_figures_and_save_small_pngs(tmp_path):
    from matplotlib.figure import Figure

    p = torch.rand(300, generator=torch.Generator().manual_seed(0))
    g = 3 * (1 - p) + 0.1
    figs = {
        "bounds": figures.plot_theorem31_bounds(theory.theorem31_samples(n=10, vocab_sizes=(2, 50))),
        "scatter": figures.plot_grad_norm_vs_prob(p, g),
        "spread": figures.plot_theorem32_spread(g, p),
        "w": figures.plot_weight_function([{}, {"tau": 2.0}]),
        "schemes": figures.plot_schemes(),
        "eq13": figures.plot_eq13_factor(),
        "zero": figures.plot_zero_gradient(lower=0.5, upper=1.5),
        "zero_s": figures.plot_zero_gradient(placement="surrogate"),
        "kl": figures.plot_kl_offset(),
        "explorer": figures.plot_weight_explorer(tau=2.0, placement="surrogate"),
    }
    for name, fig in figs.items():
        assert isinstance(fig, Figure), name
        path = figures.save(fig, f"t_{name}", tmp_path)
        assert path == tmp_path / f"t_{name}.png" and 1000 < path.stat().st_size < 200_000
    fig = Figure()
    ax = fig.add_subplot()
    assert figures.plot_schemes(ax=ax) is fig  # draws into a given axes


def test_figures_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("TRGRPO_FIGURES", str(tmp_path / "f"))
    assert figures.figures_dir() == tmp_path / "f"
    monkeypatch.delenv("TRGRPO_FIGURES")
    assert figures.figures_dir().name == "figures"


def test_weight_explorer_widget_redraws():
    pytest.importorskip("ipywidgets")
    calls = []
    real = figures.plot_weight_explorer
    try:
        figures.plot_weight_explorer = lambda **kw: calls.append(kw) or real(**kw)
        box = figures.weight_explorer()
        n0 = len(calls)
        box.controls["tau"].value = 2.0
        box.controls["tau_mode"].value = "divide"
        box.controls["placement"].value = "surrogate"
        box.controls["upper"].value = 0.6  # L > U: message, no figure
    finally:
        figures.plot_weight_explorer = real
    assert n0 >= 1 and len(calls) == n0 + 3
    assert calls[-1]["params"] == WeightParams(tau=2.0, tau_mode="divide") and calls[-1]["placement"] == "surrogate"
    assert set(box.controls) == {"alpha", "mu", "tau", "lower", "upper", "tau_mode", "placement"}


def test_weight_explorer_tau_slider_holds_the_given_tau_exactly():
    """A log slider snapped tau = 9 to 8.91 in the browser; the slider's values hold Table 7's taus and the default."""
    pytest.importorskip("ipywidgets")
    box = figures.weight_explorer()
    assert box.controls["tau"].value == 9.0
    values = [v for _, v in box.controls["tau"].options]
    assert {0.5, 2.0, 7.0, 9.0, 10.0, 20.0} <= set(values) and values == sorted(values)
    assert figures.weight_explorer(tau=4.2).controls["tau"].value == 4.2
