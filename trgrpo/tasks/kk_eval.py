"""Greedy K&K evaluation in the layout of the paper's Table 1: accuracy by number of people and their mean.

A completion is correct when Table 5's answer score is +2 (:func:`trgrpo.tasks.kk_reward.kk_reward_parts`);
``avg`` is the mean of the per-size accuracies, as in Table 1's "Avg." column (paper Section 4.2.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .common import greedy_generate
from .kk_prompts import kk_prompt
from .kk_reward import ANSWER_CORRECT, FORMAT_OK, kk_reward_parts

# --------------------------------------------------------------------------------------------------
# Evaluation (Table 1 layout)
# --------------------------------------------------------------------------------------------------


def kk_accuracy(
    completions: Sequence[Any], records: Sequence[dict[str, Any]], *, prefilled_think: bool = False
) -> dict[str, Any]:
    """Accuracy by number of people and their mean (Table 1's "Avg."); correct = answer score +2.

    Also the overall fraction correct (``overall``), the fraction with a valid format, and the counts.
    """
    if len(completions) != len(records):
        raise ValueError(f"{len(completions)} completions for {len(records)} records")
    if not records:
        raise ValueError("evaluate at least one record")
    hits: dict[int, list[bool]] = {}
    fmt_ok = 0
    for c, r in zip(completions, records):
        fmt, ans = kk_reward_parts(c, r["names"], r["solution"], prefilled_think=prefilled_think)
        hits.setdefault(int(r["n_people"]), []).append(ans == ANSWER_CORRECT)
        fmt_ok += fmt == FORMAT_OK
    by_n = {k: sum(v) / len(v) for k, v in sorted(hits.items())}
    total = sum(sum(v) for v in hits.values())
    return {
        "by_n_people": by_n,
        "avg": sum(by_n.values()) / len(by_n),
        "overall": total / len(records),
        "format_rate": fmt_ok / len(records),
        "n": len(records),
        "n_by_n_people": {k: len(v) for k, v in sorted(hits.items())},
    }


def evaluate_kk(
    model: Any,
    tokenizer: Any,
    records: Sequence[dict[str, Any]],
    *,
    batch_size: int = 8,
    max_new_tokens: int = 1024,
    prefill_think: bool = False,
    return_completions: bool = False,
) -> dict[str, Any]:
    """Greedy K&K evaluation in Table 1's layout: {"by_n_people": {3: acc, ...}, "avg": ..., "n": ...}.

    Batched greedy generation with left padding and the tokenizer's chat template (``continue_final_message``
    when ``prefill_think``). ``avg`` is the mean of the per-size accuracies, as in Table 1.
    """
    prompts = [kk_prompt(r, prefill_think) for r in records]
    completions = greedy_generate(model, tokenizer, prompts, batch_size=batch_size, max_new_tokens=max_new_tokens)
    result = kk_accuracy(completions, records, prefilled_think=prefill_think)
    if return_completions:
        result["completions"] = completions
    return result
