"""Showing the search task's results: a rollout as HTML or text (tool tokens marked), Table 3's layout, means
over seeds."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

from .search_data import TABLE3_DATASETS, TABLE3_LABELS

# ---------------------------------------------------------------------------------------------------------------
# Showing a rollout and the Table 3 layout


def render_rollout_html(tokenizer: Any, rollout: dict[str, Any], *, show_prompt: bool = False) -> str:
    """HTML of one rollout, token by token: the model's tokens (trained, ``tool_mask = 1``) on green, the
    tool's tokens (``tool_mask = 0``, no gradient) on grey; hover shows the token id and mask."""
    parts = [
        '<div style="font-family:monospace;white-space:pre-wrap;line-height:1.6;font-size:12px">',
        '<div style="margin-bottom:6px"><span style="background:#c8f7c5;padding:1px 4px">model token '
        '(in the loss)</span> <span style="background:#e0e0e0;color:#555;padding:1px 4px">tool token (masked, no '
        "gradient)</span></div>",
    ]
    if show_prompt:
        parts.append(f'<span style="color:#999">{html.escape(tokenizer.decode(rollout["prompt_ids"]))}</span>')
    for tid, m in zip(rollout["completion_ids"], rollout["tool_mask"]):
        text = html.escape(tokenizer.decode([tid]))
        style = "background:#c8f7c5" if m else "background:#e0e0e0;color:#555"
        parts.append(f'<span style="{style}" title="id {tid}, tool_mask {m}">{text}</span>')
    parts.append("</div>")
    return "".join(parts)


def rollout_text(tokenizer: Any, rollout: dict[str, Any]) -> str:
    """Plain-text view of a rollout: tool (masked) spans inside ``[[masked: ...]]``."""
    out, span, cur = [], [], None
    for tid, m in zip(rollout["completion_ids"], rollout["tool_mask"]):
        if m != cur and span:
            text = tokenizer.decode(span)
            out.append(text if cur else f"[[masked: {text}]]")
            span = []
        cur = m
        span.append(tid)
    if span:
        text = tokenizer.decode(span)
        out.append(text if cur else f"[[masked: {text}]]")
    return "".join(out)


def table3(rows: Sequence[dict[str, Any]], *, percent: bool = True):
    """Table 3's layout as a DataFrame: one row per ``{"method": ..., "em_by_type": {...}}`` (or per-dataset
    results), General QA columns, then Multi-hop QA columns, then their average.

    Generated questions: General QA = one-hop; Multi-hop = two-hop, comparison. Real data: NQ, TriviaQA,
    PopQA | HQA, 2Wiki, Musique, Bamboogle. The average is over the columns, as in the paper.
    """
    import pandas as pd

    scale = 100.0 if percent else 1.0
    keys_seen = {k for r in rows for k in (r.get("em_by_type") or {})}
    if keys_seen & set(TABLE3_DATASETS):
        cols = [(("General QA" if k in TABLE3_DATASETS[:3] else "Multi-hop QA"), k) for k in TABLE3_DATASETS]
        label = TABLE3_LABELS
    else:
        cols = [("General QA", "one-hop"), ("Multi-hop QA", "two-hop"), ("Multi-hop QA", "comparison")]
        label = {}
    data, index = [], []
    for r in rows:
        by = r.get("em_by_type") or {}
        vals = [by.get(k, float("nan")) * scale for _, k in cols]
        present = [v for v in vals if not math.isnan(v)]
        data.append(vals + [sum(present) / len(present) if present else float("nan")])
        index.append(r.get("method", "?"))
    columns = pd.MultiIndex.from_tuples([(g, label.get(k, k)) for g, k in cols] + [("", "Avg.")])
    return pd.DataFrame(data, index=pd.Index(index, name="method"), columns=columns).round(2)


def mean_results(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Average ``em`` and ``em_by_type`` over several evaluation dicts (e.g. seeds)."""
    results = [r for r in results if r]
    if not results:
        return {}
    keys = sorted({k for r in results for k in r.get("em_by_type", {})})
    return {
        "em": sum(r["em"] for r in results) / len(results),
        "em_by_type": {
            k: sum(r["em_by_type"][k] for r in results if k in r["em_by_type"])
            / max(1, sum(k in r["em_by_type"] for r in results))
            for k in keys
        },
        "n_seeds": len(results),
    }
