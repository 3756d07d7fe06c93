"""Smoke-run figures say so (trgrpo.plots.mark_smoke, issue 17)."""

from __future__ import annotations

from matplotlib.figure import Figure

from trgrpo.plots import mark_smoke


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
