"""The reward of the search task (Eq. 14): +1 when the normalised last ``<answer>`` exactly matches a gold
answer, -1 otherwise; answer extraction and normalisation (Search-R1 / SQuAD style)."""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import Any

# ---------------------------------------------------------------------------------------------------------------
# Reward (Eq. 14) and exact match


_PUNCTUATION = re.compile(f"[{re.escape(string.punctuation)}]+")
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")


def normalize_answer(s: Any) -> str:
    """SQuAD normalisation: lowercase, drop punctuation and the articles a/an/the, collapse whitespace (linear)."""
    text = _PUNCTUATION.sub("", str(s)).lower()
    return " ".join(_ARTICLES.sub(" ", text).split())


_TAG = re.compile(r"<(/?)answer>", re.IGNORECASE)


def extract_answer(text: Any) -> str | None:
    """The content of the last ``<answer>...</answer>``, as Search-R1 takes it (the last match of
    ``<answer>(.*?)</answer>``, any case), or None. One pass over the tags: the regex itself retried at every unclosed
    ``<answer>`` and took quadratic time (480 KB: 270 s)."""
    if not isinstance(text, str):
        return None
    last, start = None, None
    for tag in _TAG.finditer(text):
        if not tag.group(1):  # an opening tag: the first one after the last match opens the next
            start = tag.end() if start is None else start
        elif start is not None:
            last, start = (start, tag.start()), None
    return text[last[0] : last[1]].strip() if last else None


def exact_match(prediction: Any, answers: Any) -> bool:
    """Normalised exact match against any gold answer."""
    if prediction is None:
        return False
    golds = [answers] if isinstance(answers, (str, int, float)) else list(answers or [])
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(g) for g in golds)


def final_text(completion: Any) -> str:
    """The model's own text of a completion: a string, or the assistant messages of a tool conversation
    (tool responses excluded, so a retrieved passage cannot supply the answer tag)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, (list, tuple)):
        parts = [
            str(m.get("content") or "")
            for m in completion
            if isinstance(m, dict) and m.get("role", "assistant") == "assistant"
        ]
        return "\n".join(parts)
    return ""


def search_reward(completions: Sequence[Any], answers: Sequence[Any] | None = None, **kwargs: Any) -> list[float]:
    """Eq. 14: R = +1 if the normalised last ``<answer>`` exactly matches a gold answer, else -1. Never raises."""
    out = []
    answers = list(answers) if answers is not None else [None] * len(completions)
    for i, completion in enumerate(completions):
        try:
            golds = answers[i] if i < len(answers) else None
            if golds is not None and not isinstance(golds, (str, int, float)):
                golds = list(golds)
            ok = golds is not None and exact_match(extract_answer(final_text(completion)), golds)
        except Exception:  # a reward must never stop training
            ok = False
        out.append(1.0 if ok else -1.0)
    return out
