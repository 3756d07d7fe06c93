"""The binary math reward of paper App. B.1.2: 1.0 if the last boxed answer equals the reference, else 0.0.

No format term. :func:`math_reward` never raises and always returns 0.0 or 1.0: the answer is found by a bounded
scan (:mod:`trgrpo.tasks.math_extract`), an exact string match scores at once, and otherwise math-verify compares
(:mod:`trgrpo.tasks.math_verifier`) under a CPU-time budget of the calling thread (:mod:`trgrpo.tasks.math_budget`):
the verdict does not depend on the machine's load.
:func:`make_math_reward_func` wraps it as TRL's reward function.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from .common import completion_text
from .math_budget import BudgetExceeded, time_budget
from .math_extract import MAX_NESTING, _normalize, extract_boxed_answer, nesting_depth
from .math_gold import analyze_gold, gold_forms
from .math_verifier import _equivalent, warm_up

DEFAULT_TIMEOUT_S = 1.0  # CPU seconds of sympy's parse + verify per completion (the calling thread's own clock)
MATH_REWARD_VALUES = frozenset({0.0, 1.0})

logger = logging.getLogger(f"{__package__}.math")  # the math task's logger, one name for its modules


def math_reward(completion: Any, answer: Any, *, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> float:
    """Binary math reward of App. B.1.2: 1.0 if the last boxed answer equals ``answer`` under math-verify.

    ``answer`` is a string, a number, or a list of accepted forms (any one scores). Never raises and always
    returns 0.0 or 1.0: non-strings, missing/unbalanced/over-long boxes, parse errors, blow-ups and running out
    of the ``timeout_s`` CPU budget (any thread) all give 0.0. math-verify is loaded and the reference parsed before
    the budget starts.
    """
    try:
        if not isinstance(completion, str):
            return 0.0
        golds = gold_forms(answer)
        pred = extract_boxed_answer(completion)
        if pred is None or not pred.strip() or not golds:
            return 0.0
        norm_pred = _normalize(pred)
        if norm_pred and any(norm_pred == _normalize(g) for g in golds):
            return 1.0
        if nesting_depth(pred) > MAX_NESTING:
            return 0.0
        warm_up()
        for gold in golds:  # trusted and cached: outside the budget
            analyze_gold(gold)
        with time_budget(timeout_s):
            return 1.0 if any(_equivalent(pred, gold) for gold in golds) else 0.0
    except BudgetExceeded:
        return 0.0
    except Exception:  # parse/verify failures of any kind (RecursionError and MemoryError included)
        logger.debug("math_reward failed", exc_info=True)
        return 0.0


def make_math_reward_func(*, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> Callable[..., list[float]]:
    """TRL reward function ``math_accuracy_reward(prompts, completions, completion_ids=None, answer=..., **kw)``.

    ``completions`` are strings or message lists; the dataset column ``answers`` (every accepted form, see
    :func:`math_dataset`) or ``answer`` arrives as a kwargs list. math-verify is loaded and warmed here, before
    any budget.
    """
    warm_up()

    def math_accuracy_reward(
        prompts: Any = None, completions: Sequence[Any] = (), completion_ids: Any = None, **kwargs: Any
    ) -> list[float]:
        """App. B.1.2: 1 if the last boxed answer matches the reference, else 0."""
        answers = kwargs.get("answers")
        if answers is None:
            answers = kwargs.get("answer")
        if answers is None:
            raise KeyError("the math reward needs the dataset column 'answer' (see math_dataset)")
        if len(answers) != len(completions):
            raise ValueError("completions and answer must have the same length")
        return [math_reward(completion_text(c), a, timeout_s=timeout_s) for c, a in zip(completions, answers)]

    return math_accuracy_reward

