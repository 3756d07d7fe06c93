"""Math: binary boxed-answer reward, data, simple prompt, evaluation (paper Section 4.1, App. B.1.2, Table 2).

* Reward (App. B.1.2). 1.0 if the last ``\\boxed{...}`` of the completion (brace-matched; only the text after
  the last ``</think>`` when there is one) is equivalent to the reference under math-verify, else 0.0. No format
  term. The model's answer is parsed with math-verify's LaTeX extractor only (latex2sympy, an ANTLR grammar):
  its plain-expression extractor, which hands text to sympy's ``parse_expr`` (``eval``), is kept for the trusted
  reference. The one ``eval`` the answer still reaches is ``sympy.Number`` on a lexer NUMBER token (digits,
  ``.``, ``,``), e.g. ``Integer (123 )`` (tested).
  Bounded cost: the scan is a couple of C-level ``rfind`` plus at most ``MAX_ANSWER_CHARS`` characters of brace
  matching, so a 1 MB completion costs about a millisecond. Answers longer than ``MAX_ANSWER_CHARS`` or nested
  deeper than ``MAX_NESTING`` score 0 (unless equal to the reference as strings). Numbers that would blow up in
  C-level arithmetic (``9^{9^{9}}``, ``100000!``) are refused after parsing, before sympy compares them. Sympy's
  parse + verify get a CPU-time budget of the calling thread (``timeout_s``, default 1 s; a watchdog thread
  delivers it in any thread), so a verdict does not depend on the machine's load or on a thread pool
  (math-verify's own integer-second alarms are disabled).
* Data. Offline arithmetic from reasoning-gym (``basic_arithmetic``, ``chain_sum``) with exact integer answers
  (:func:`generate_math`); local files (:func:`load_math_file`) and the paper's hub datasets
  (:data:`MATH_HUB`, :func:`load_math_hub`: DeepScaleR, Open-Reasoner-Zero, MATH-500, Minerva,
  OlympiadBench, AMC 2022-23, AIME 2024).
* Prompt. A simple prompt with no chat template (App. B.1.2: base model, no instruction template).
* Evaluation. Greedy accuracy (MATH-500, Minerva, OlympiadBench) and avg@k / pass@k with k = 16 (AMC, AIME).

Layout: :mod:`~trgrpo.tasks.math_extract` (boxed answer), :mod:`~trgrpo.tasks.math_budget` (time budget, watchdog),
:mod:`~trgrpo.tasks.math_gold` (reference answers), :mod:`~trgrpo.tasks.math_blowup` (blow-up guard),
:mod:`~trgrpo.tasks.math_verifier` (math-verify comparison, warm-up), :mod:`~trgrpo.tasks.math_reward` (the
reward), :mod:`~trgrpo.tasks.math_data` (data, prompt), :mod:`~trgrpo.tasks.math_eval` (evaluation). This module
re-exports their public names.
"""

from __future__ import annotations

import logging

from .math_budget import BudgetExceeded, time_budget
from .math_data import (
    MATH_HUB,
    MATH_INSTRUCTION,
    MATH_PAPER_NAMES,
    exact_arithmetic,
    generate_math,
    load_math_file,
    load_math_hub,
    math_dataset,
    math_prompt,
    math_source,
    normalize_math_row,
)
from .math_eval import evaluate_math, evaluate_math_sampled
from .math_extract import BOXED, MAX_ANSWER_CHARS, MAX_NESTING, THINK_END, extract_boxed_answer, nesting_depth
from .math_gold import GoldAnswer, analyze_gold, gold_forms
from .math_reward import DEFAULT_TIMEOUT_S, MATH_REWARD_VALUES, make_math_reward_func, math_reward
from .math_verifier import REL_TOL, warm_up

logger = logging.getLogger(__name__)  # the logger the math_* modules write to

__all__ = [
    # constants
    "MAX_ANSWER_CHARS",
    "MAX_NESTING",
    "DEFAULT_TIMEOUT_S",
    "MATH_REWARD_VALUES",
    "BOXED",
    "THINK_END",
    "MATH_INSTRUCTION",
    "REL_TOL",
    # answer extraction
    "extract_boxed_answer",
    "nesting_depth",
    # time budget
    "BudgetExceeded",
    "time_budget",
    # reference answers
    "GoldAnswer",
    "analyze_gold",
    "gold_forms",
    # verification and reward
    "warm_up",
    "math_reward",
    "make_math_reward_func",
    # data and prompt
    "exact_arithmetic",
    "generate_math",
    "math_prompt",
    "math_dataset",
    "normalize_math_row",
    "load_math_file",
    "MATH_HUB",
    "MATH_PAPER_NAMES",
    "math_source",
    "load_math_hub",
    # evaluation
    "evaluate_math",
    "evaluate_math_sampled",
]
