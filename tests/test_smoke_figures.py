"""Smoke-run figures say so (trgrpo.figures.mark_smoke, issue 17)."""

from __future__ import annotations

from matplotlib.figure import Figure

from trgrpo.figures import mark_smoke


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
