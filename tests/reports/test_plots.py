"""Figures of runs (trgrpo/reports/plots.py; today trgrpo/plots.py): every variant visible (plot_trajectories), smoke
runs say so (mark_smoke), the leverage figures (issue 17)."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure

from trgrpo import figures
from trgrpo.figures import mark_smoke
from trgrpo.reports import plots

matplotlib.use("Agg")


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

    recs = answers.leverage_records(Path(__file__).resolve().parents[2] / "results")
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


# From test_smoke_figures.py: Smoke-run figures say so (trgrpo.plots.mark_smoke, issue 17).


def test_mark_smoke_titles_the_figure(tmp_path):
    fig = Figure()
    ax = fig.subplots()
    ax.plot([1, 2], [0.1, 0.2])
    out = mark_smoke(fig, "1 step, embedded model", path=tmp_path / "f.png")
    assert out is fig and fig.get_suptitle() == "(smoke run: 1 step, embedded model)"
    assert (tmp_path / "f.png").stat().st_size > 0


def test_mark_smoke_keeps_an_existing_suptitle():
    fig = Figure()
    ax = fig.subplots()
    fig.suptitle("Agentic search")
    mark_smoke(fig, "1 step")
    assert fig.get_suptitle() == "Agentic search\n(smoke run: 1 step)" and ax.get_title() == ""


def test_mark_smoke_leaves_full_scale_figures_alone():
    fig = Figure()
    fig.subplots()
    mark_smoke(fig, "x", smoke=False)
    assert fig.get_suptitle() == ""


def test_the_smoke_line_never_covers_an_axes_title():
    """A figure laid out once (tight) is laid out again when mark_smoke adds its line: it sits above the titles."""
    from trgrpo.reports import plots

    history = [{"step": t, "reward": 0.1 * t, "grad_norm": 1.0} for t in (1, 2)]
    runs = [{"scheme": s, "seed": 0, "weight": {}, "history": history} for s in ("equal", "tr")]
    em_rows = [{"method": "GRPO", "em_by_type": {"one-hop": 0.5, "two-hop": 0.0}}]
    figs = [
        plots.plot_trajectories(runs, "reward", title="Training reward"),
        plots.plot_em_by_type(em_rows, title="Exact match by question type"),
        plots.plot_search_curves([{**r, "eval_curve": [{"step": 0, "em": 0.0}]} for r in runs], title="Search"),
    ]
    for fig in figs:
        mark_smoke(fig, "1 step, micro model, 1 seed; numbers mean nothing")
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        line = fig.get_suptitle().splitlines()[-1]
        assert line.startswith("(smoke run:")
        sup = fig._suptitle.get_window_extent(renderer)
        assert sup.y1 <= fig.bbox.y1  # inside the figure
        for ax in fig.axes:
            assert not sup.overlaps(ax.title.get_window_extent(renderer)), ax.get_title()
            assert sup.y0 >= ax.get_window_extent(renderer).y1
