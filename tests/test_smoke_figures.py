"""Smoke-run figures say so (trgrpo.plots.mark_smoke, issue 17)."""

from __future__ import annotations

import math

from matplotlib.figure import Figure

from trgrpo.plots import mark_smoke


def _texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_mark_smoke_titles_the_figure_and_notes_only_empty_axes(tmp_path):
    fig = Figure()
    drawn, one_point, zero_bars = fig.subplots(1, 3)
    drawn.plot([1, 2], [0.1, 0.2])
    one_point.plot([1], [0.3])  # a one-step run: a single point does not show
    zero_bars.bar([0, 1], [0.0, math.nan])
    drawn.set_title("reward")
    out = mark_smoke(fig, "1 step, embedded model", path=tmp_path / "f.png")
    assert out is fig and drawn.get_title() == "reward\n(smoke run: 1 step, embedded model)"
    assert zero_bars.get_title() == "(smoke run: 1 step, embedded model)"
    assert _texts(drawn) == []
    assert all("empty by design" in " ".join(_texts(ax)) for ax in (one_point, zero_bars))
    assert (tmp_path / "f.png").stat().st_size > 0


def test_mark_smoke_keeps_an_existing_suptitle():
    fig = Figure()
    ax = fig.subplots()
    fig.suptitle("Agentic search")
    mark_smoke(fig, "1 step")
    assert fig.get_suptitle() == "Agentic search\n(smoke run: 1 step)" and ax.get_title() == ""


def test_mark_smoke_leaves_full_scale_figures_alone():
    fig = Figure()
    ax = fig.subplots()
    mark_smoke(fig, "x", smoke=False)
    assert fig.get_suptitle() == "" and _texts(ax) == []
