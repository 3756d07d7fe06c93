"""The K&K prompt and TRL dataset (paper App. B.1.1): Logic-RL's instruct prompt as conversational messages.

:data:`KK_SYSTEM_PROMPT` (the Logic-RL data's own, verbatim) asks for ``<think> ... </think><answer> ... </answer>``
with one "(k) Name is a knight/knave" line per person; :func:`kk_prompt` optionally pre-fills the assistant turn
with ``<think>`` as Logic-RL does; :func:`kk_dataset` builds the ``datasets.Dataset`` that TRL's ``GRPOTrainer``
reads (its extra columns ``names`` and ``solution`` reach the reward functions of :mod:`trgrpo.tasks.kk_reward`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .common import render_prompt

# The system prompt of Logic-RL's K&K data (Xie et al. 2025; the paper's App. B.1.1), character for character as its
# verl parquet rows carry it (examples/data_preprocess/kk.py, template "qwen-instruct"), "and<answer>" included. The
# rows render it in ChatML as "<|im_start|>system\n{this}\n<|im_end|>\n<|im_start|>user\n{quiz}\n<|im_end|>\n
# <|im_start|>assistant\n<think>": :func:`kk_prompt` gives both turns that trailing newline, so a ChatML chat template
# (Qwen2.5's) reproduces the rows' prompt exactly (tests/test_data_sources.py).
KK_SYSTEM_PROMPT = (
    "You are a helpful assistant. The assistant first thinks about the reasoning process in the mind and then "
    "provides the user with the answer. The reasoning process and answer are enclosed within <think> </think> "
    "and<answer> </answer> tags, respectively, i.e., <think> reasoning process here </think>"
    "<answer> answer here </answer>.  Now the user asks you to solve a logical reasoning problem. After thinking, "
    "when you finally reach a conclusion, clearly state the identity of each character within <answer> </answer> "
    "tags. i.e., <answer> (1) Zoey is a knight\n(2) ... </answer>."
)


# --------------------------------------------------------------------------------------------------
# Prompt and dataset
# --------------------------------------------------------------------------------------------------


def kk_prompt(record: dict[str, Any], prefill_think: bool = False) -> list[dict[str, str]]:
    """The Logic-RL instruct prompt as TRL conversational messages (App. B.1.1).

    With ``prefill_think`` the assistant turn is opened with ``<think>`` (Logic-RL's template); render it with
    ``continue_final_message=True`` and score with ``prefilled_think=True``.
    """
    messages = [  # each turn ends with a newline, as in Logic-RL's rendered rows
        {"role": "system", "content": f"{KK_SYSTEM_PROMPT}\n"},
        {"role": "user", "content": f"{str(record['quiz']).strip()}\n"},
    ]
    if prefill_think:
        messages.append({"role": "assistant", "content": "<think>"})
    return messages


def kk_dataset(records: Sequence[dict[str, Any]], prefill_think: bool = False, *, tokenizer: Any = None) -> Any:
    """A ``datasets.Dataset`` for TRL's ``GRPOTrainer``: ``prompt``, ``names``, ``solution``, ``n_people``.

    TRL passes the extra columns to the reward functions as keyword lists. With ``tokenizer`` the prompts are
    rendered to text with the chat template (needed for ``prefill_think`` under TRL 1.16, whose trainer always
    adds a generation prompt to conversational prompts and so cannot continue a pre-filled assistant turn).
    """
    import datasets

    prompts: list[Any] = [kk_prompt(r, prefill_think) for r in records]
    if tokenizer is not None:
        prompts = [render_prompt(tokenizer, p)[0] for p in prompts]
    return datasets.Dataset.from_dict(
        {
            "prompt": prompts,
            "names": [list(r["names"]) for r in records],
            "solution": [list(r["solution"]) for r in records],
            "n_people": [int(r["n_people"]) for r in records],
        }
    )

