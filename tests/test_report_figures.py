"""Training-curve figures keep every variant visible (trgrpo.plots.plot_trajectories, issue 17)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from trgrpo import plots


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
