"""Evaluating the search task: rollouts through the trainer's own generation + tool loop (greedy EM with
search), the no-search baseline, and EM per question type and dataset."""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from typing import Any

from .search_prompts import search_messages
from .search_reward import exact_match, extract_answer, final_text


def trl_rollouts(
    trainer: Any,
    records: Sequence[dict[str, Any]],
    *,
    greedy: bool = True,
    batch_size: int = 32,
) -> list[dict[str, Any]]:
    """Rollouts of ``records`` through the trainer's own generation + tool loop (``GRPOTrainer._generate``,
    TRL 1.16), the same code path as training; greedy by default (evaluation).

    Each item: the record, ``prompt_ids``, ``completion_ids``, ``tool_mask`` (0 = tool tokens), the parsed
    ``messages``, the ``answer`` (last ``<answer>``), ``em`` (bool) and ``tool_calls`` (count).
    """
    model = trainer.model
    was_training = model.training
    saved_config = trainer.generation_config
    if greedy:
        gc = copy.deepcopy(saved_config)
        gc.do_sample, gc.temperature, gc.top_p, gc.top_k, gc.min_p = False, None, None, None, None
        trainer.generation_config = gc
    tools = {t.__name__: t for t in trainer._standalone_tools}
    out: list[dict[str, Any]] = []
    model.eval()
    try:
        for start in range(0, len(records), batch_size):
            chunk = list(records[start : start + batch_size])
            prompts = [search_messages(r["question"]) for r in chunk]
            trainer._sync_tool_dicts = [dict(tools) for _ in chunk]
            trainer._async_tool_dicts = [{} for _ in chunk]
            prompt_ids, completion_ids, tool_mask, completions, *_ = trainer._generate(prompts)
            for i, r in enumerate(chunk):
                mask = tool_mask[i] if tool_mask is not None else [1] * len(completion_ids[i])
                answer = extract_answer(final_text(completions[i]))
                out.append(
                    {
                        "record": r,
                        "prompt_ids": list(prompt_ids[i]),
                        "completion_ids": list(completion_ids[i]),
                        "tool_mask": list(mask),
                        "messages": completions[i],
                        "answer": answer,
                        "em": exact_match(answer, r["answers"]),
                        "tool_calls": sum(
                            len(m.get("tool_calls") or []) for m in completions[i] if isinstance(m, dict)
                        ),
                    }
                )
    finally:
        trainer.generation_config = saved_config
        model.train(was_training)
    return out


def summarise_em(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """EM overall and per question type / dataset (Table 3 layout), the answer-format rate, tool calls."""
    if not rows:
        return {"em": float("nan"), "accuracy": float("nan"), "n": 0, "em_by_type": {}, "em_by_dataset": {}}
    res: dict[str, Any] = {"n": len(rows)}
    res["em"] = res["accuracy"] = sum(r["em"] for r in rows) / len(rows)
    for key, name in (("type", "em_by_type"), ("dataset", "em_by_dataset")):
        groups: dict[str, list[bool]] = {}
        for r in rows:
            groups.setdefault(str(r["record"].get(key, "")), []).append(bool(r["em"]))
        res[name] = {k: sum(v) / len(v) for k, v in sorted(groups.items())}
        res[name.replace("em_", "n_")] = {k: len(v) for k, v in sorted(groups.items())}
    res["answer_rate"] = sum(r["answer"] is not None for r in rows) / len(rows)
    if "tool_calls" in rows[0]:
        res["tool_calls_mean"] = sum(r["tool_calls"] for r in rows) / len(rows)
    return res


def evaluate_search(
    trainer: Any, records: Sequence[dict[str, Any]], *, batch_size: int = 32, n_examples: int = 3
) -> dict[str, Any]:
    """Greedy EM with search (the tool loop of TRL), overall and per type/dataset, plus a few example texts."""
    t0 = time.time()
    rows = trl_rollouts(trainer, records, greedy=True, batch_size=batch_size)
    res = summarise_em(rows)
    res["examples"] = [
        {"question": r["record"]["question"], "answers": r["record"]["answers"], "answer": r["answer"], "em": r["em"]}
        for r in rows[:n_examples]
    ]
    res["seconds"] = time.time() - t0
    return res


def evaluate_no_search(
    model: Any, tokenizer: Any, records: Sequence[dict[str, Any]], *, batch_size: int = 16, max_new_tokens: int = 32
) -> dict[str, Any]:
    """The no-search baseline of the same model: greedy answers from parametric knowledge only.

    EM uses the last ``<answer>`` when there is one and the whole reply otherwise (a base model may ignore
    the tag; on fictional entities the baseline is near zero either way).
    """
    from .common import greedy_generate

    t0 = time.time()
    tokenizer.padding_side = "left"
    texts = greedy_generate(
        model,
        tokenizer,
        [search_messages(r["question"], search=False) for r in records],
        batch_size=batch_size,
        max_new_tokens=max_new_tokens,
    )
    rows = []
    for r, text in zip(records, texts):
        tagged = extract_answer(text)
        pred = tagged if tagged is not None else text.strip()
        rows.append({"record": r, "answer": tagged, "em": exact_match(pred, r["answers"])})
    res = summarise_em(rows)
    res["examples"] = [
        {"question": r["question"], "answers": r["answers"], "reply": t} for r, t in zip(records, texts)
    ][:3]
    res["seconds"] = time.time() - t0
    return res
