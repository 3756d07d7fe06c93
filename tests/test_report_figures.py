"""Training-curve figures keep every variant visible (trgrpo.reports.plots.plot_trajectories, issue 17)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from trgrpo import figures
from trgrpo.reports import plots


def _rec(scheme: str, seed: int) -> dict:
    return {
        "scheme": scheme,
        "seed": seed,
        "weight": {},
        "history": [{"step": t, "reward": 0.1 * t} for t in range(12)],
    }


def test_equal_curves_differ_in_style_and_labels_are_readable():
    fig, axes = plt.subplots(1, 2, layout="constrained")
    plots.plot_trajectories([_rec("equal", 0), _rec("tr", 0)], "reward", ax=axes[0], ylabel="total reward")
    medians = [line for line in axes[0].get_lines() if line.get_label().endswith("(n=1)")]
    assert len(medians) == 2
    assert len({(m.get_linestyle(), m.get_marker()) for m in medians}) == 2  # same data, still two visible lines
    assert axes[0].get_ylabel() == "total reward"
    assert fig.get_layout_engine() is not None and type(fig.get_layout_engine()).__name__.startswith("Constrained")
    plt.close(fig)


def test_leverage_figures_draw_the_records_and_the_bound(tmp_path):
    """plot_leverage: one bar group per run and before/after, one cosine range each, the bound line at its value;
    plot_kantorovich: the bound's curve passes through the paper's (1, 1.4) at its angle."""
    import math
    from pathlib import Path

    from trgrpo import theory
    from trgrpo.reports import answers

    recs = answers.leverage_records(Path(__file__).resolve().parents[1] / "results")
    bound = theory.kantorovich_cosine()
    fig = plots.plot_leverage(recs, bound, path=tmp_path / "lev.png")
    left, right = fig.axes[:2]
    assert len(left.get_xticklabels()) == 2 * len(recs)
    assert any(abs(line.get_ydata()[0] - bound) < 1e-12 for line in right.get_lines() if line.get_linestyle() == "--")
    assert (tmp_path / "lev.png").stat().st_size > 0
    fig = figures.plot_kantorovich(1.0)
    curve = next(line for line in fig.axes[0].get_lines() if "bound" in line.get_label())
    x, y = curve.get_xdata(), curve.get_ydata()
    i = int(abs(x - 1.4).argmin())
    assert y[i] == pytest.approx(math.degrees(math.acos(theory.kantorovich_cosine(1.0, x[i]))))
    plt.close("all")
