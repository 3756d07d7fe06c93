"""Figures of notebook 07 (agentic search, Section 4.2.3 / Table 3): training curves and EM per question type.

Each function takes the result records written by :func:`trgrpo.tasks.search.run_search` and returns a
matplotlib figure; with ``path`` it also saves a PNG (the file name should say the scale it came from).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

COLORS = {"equal": "tab:blue", "tr": "tab:red", "reverse": "tab:green", "random": "tab:gray"}
LABELS = {"equal": "GRPO", "tr": "TR-GRPO", "reverse": "Reverse", "random": "Random"}


def _save(fig, path: str | os.PathLike | None):
    if path is not None:
        from pathlib import Path

        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120, bbox_inches="tight")
    return fig


def _mean_curve(curves: list[list[tuple[float, float]]]) -> tuple[list[float], list[float]]:
    steps = sorted({s for c in curves for s, _ in c})
    means = []
    for s in steps:
        vals = [v for c in curves for t, v in c if t == s and v is not None]
        means.append(sum(vals) / len(vals) if vals else float("nan"))
    return steps, means


def plot_search_curves(records: Sequence[dict[str, Any]], *, title: str = "", path: str | os.PathLike | None = None):
    """Reward (Eq. 14) and grad-norm per step, and greedy EM before/after (or every ``eval_every`` steps):
    GRPO vs TR-GRPO, one thin line per seed, the mean over seeds bold."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    panels = [("reward", "reward (Eq. 14, mean of the step's rollouts)"), ("grad_norm", "grad norm"), ("eval", "")]
    schemes = [s for s in COLORS if any(r["scheme"] == s for r in records)]
    for ax, (key, ylabel) in zip(axes, panels):
        for scheme in schemes:
            runs = [r for r in records if r["scheme"] == scheme]
            if key == "eval":
                curves = [[(p["step"], p["em"]) for p in r.get("eval_curve", [])] for r in runs]
            else:
                curves = [[(h["step"], h.get(key)) for h in r["history"] if h.get(key) is not None] for r in runs]
            for c in curves:
                if c:
                    ax.plot(*zip(*c), color=COLORS[scheme], alpha=0.3, lw=1, marker="o" if key == "eval" else None)
            steps, means = _mean_curve(curves)
            if steps:
                label = f"{LABELS.get(scheme, scheme)} (mean of {len(runs)} seed{'s' * (len(runs) > 1)})"
                ax.plot(steps, means, color=COLORS[scheme], lw=2.2, label=label, marker="o" if key == "eval" else None)
        if key == "eval":
            ax.set_ylim(0.0, max(0.1, min(1.0, ax.get_ylim()[1] * 1.1)))
        ax.set_xlabel("RL step")
        ax.set_ylabel(ylabel if key != "eval" else "greedy EM, held-out questions")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def plot_em_by_type(rows: Sequence[dict[str, Any]], *, title: str = "", path: str | os.PathLike | None = None):
    """Grouped bars of EM per question type (Table 3's columns) for each method row
    (``{"method": ..., "em_by_type": {...}}``)."""
    import matplotlib.pyplot as plt

    types = sorted({t for r in rows for t in r.get("em_by_type", {})}, key=_type_order)
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(types) * max(1, len(rows)) / 3, 3.4))
    width = 0.8 / max(1, len(rows))
    for i, r in enumerate(rows):
        xs = [j + (i - (len(rows) - 1) / 2) * width for j in range(len(types))]
        ys = [100 * r["em_by_type"].get(t, float("nan")) for t in types]
        ax.bar(xs, ys, width=width, label=r.get("method", f"row {i}"))
    ax.set_xticks(range(len(types)), types)
    ax.set_ylabel("exact match (%)")
    ax.set_ylim(0, 100)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def _type_order(t: str) -> tuple[int, str]:
    order = ["one-hop", "two-hop", "comparison", "nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique"]
    return (order.index(t) if t in order else len(order), t)
