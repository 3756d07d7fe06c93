"""Knights & Knaves (K&K) logic puzzles: data, prompt, reward, evaluation (paper Section 4.1, App. B.1.1, Table 5).

* Data. Puzzles with 2..7 people from reasoning-gym's ``knights_knaves`` generator (a port of Xie et al.'s
  mem-kk-logic generator), always worded with knights and knaves, deterministic by seed
  (:func:`generate_kk`, :func:`kk_splits`). The paper's own splits (Logic-RL / ``K-and-K/knights-and-knaves``
  schema: ``quiz``, ``names``, ``solution``, ``solution_text_format``, ...) load from a file
  (:func:`load_kk_file`) or from the hub where one is reachable (:func:`load_kk_hub`). Every loader
  returns the same record: ``quiz``, ``names``, ``solution`` (True = knight), ``n_people``, ``solution_text``.
* Prompt. The Logic-RL instruct prompt (:data:`KK_SYSTEM_PROMPT`) as TRL conversational messages,
  optionally with the assistant turn pre-filled with ``<think>`` as in Logic-RL (:func:`kk_prompt`).
* Reward (Table 5). Format: +1 if ``<think>``, ``</think>``, ``<answer>``, ``</answer>`` each appear exactly
  once and in this order, else -1. Answer: +2 all identities right, -1.5 parsed but wrong, -2 unparseable
  or format failed. Totals lie in {3, -0.5, -1, -3} (:func:`kk_reward`, :func:`kk_reward_parts`).
  The parser is Logic-RL's: the number of "knight"/"knave" mentions must equal the number of people, and
  every name must appear as "Name is a knight|knave". One guard is added: an answer with characters that imitate
  the letters of "knight"/"knave" ("ｋｎａｖｅ", "𝐤𝐧𝐚𝐯𝐞", Cyrillic "кnаvе") or hide inside a word (zero-width
  space, soft hyphen) is unparseable; without it "Zoey is a ｋｎａｖｅ. Zoey is a knight." scored the full 3
  while naming both roles: the count never saw the disguised mention (:func:`disguised_letters`).
* Evaluation. Greedy accuracy by number of people and their mean, the layout of Table 1 (:func:`evaluate_kk`).

Layout: :mod:`~trgrpo.tasks.kk_data` (record, generator), :mod:`~trgrpo.tasks.kk_files` (Logic-RL files, hub),
:mod:`~trgrpo.tasks.kk_prompts` (prompt, dataset), :mod:`~trgrpo.tasks.kk_reward` (Table 5 reward and parser),
:mod:`~trgrpo.tasks.kk_guard` (look-alike guard), :mod:`~trgrpo.tasks.kk_eval` (Table 1 evaluation). This module
re-exports their public names.
"""

from __future__ import annotations

from .kk_data import DEFAULT_N_PEOPLE, generate_kk, kk_splits, make_record, solution_text
from .kk_eval import evaluate_kk, kk_accuracy
from .kk_files import HUB_REPO, kk_source, load_kk_file, load_kk_files, load_kk_hub, normalize_kk_row
from .kk_guard import disguised_letters
from .kk_prompts import KK_SYSTEM_PROMPT, kk_dataset, kk_prompt
from .kk_reward import (
    ANSWER_CORRECT,
    ANSWER_UNPARSEABLE,
    ANSWER_WRONG,
    FORMAT_BAD,
    FORMAT_OK,
    KK_MIN_REWARD,
    KK_REWARD_VALUES,
    TAGS,
    _parse_answer_bytes,  # noqa: F401 - the parser without the guard (notebook 04's exercise)
    format_ok,
    kk_reward,
    kk_reward_parts,
    make_kk_reward_funcs,
    parse_kk_answer,
)

__all__ = [
    # Table 5 reward values and tags
    "FORMAT_OK",
    "FORMAT_BAD",
    "ANSWER_CORRECT",
    "ANSWER_WRONG",
    "ANSWER_UNPARSEABLE",
    "KK_REWARD_VALUES",
    "KK_MIN_REWARD",
    "TAGS",
    # data
    "DEFAULT_N_PEOPLE",
    "solution_text",
    "make_record",
    "generate_kk",
    "kk_splits",
    # files and hub
    "HUB_REPO",
    "normalize_kk_row",
    "load_kk_file",
    "load_kk_files",
    "kk_source",
    "load_kk_hub",
    # prompt and dataset
    "KK_SYSTEM_PROMPT",
    "kk_prompt",
    "kk_dataset",
    # reward
    "format_ok",
    "disguised_letters",
    "parse_kk_answer",
    "kk_reward_parts",
    "kk_reward",
    "make_kk_reward_funcs",
    # evaluation
    "kk_accuracy",
    "evaluate_kk",
]
