"""Agentic search, Search-R1 style (paper Section 4.1 "agentic", Section 4.2.3, App. B.1.3, Eq. 14, Table 3).

The model answers a question by calling a ``search`` tool over a corpus, reading the passages it returns,
and writing ``<answer>...</answer>``. Training is TRL's own multi-turn tool loop: ``GRPOTrainer(tools=[...])``
parses each ``<tool_call>``, runs the tool, appends its response to the sequence and generates again,
and marks the tool's tokens with ``tool_mask = 0``; :class:`trgrpo.TRGRPOTrainer` multiplies its loss mask by
that mask, so tool output never gets a gradient ("intermediate tool calls are masked in the policy loss",
Section 4.1). The reward is Eq. 14: +1 when the normalised last answer exactly matches a gold answer,
-1 otherwise.

Differences from the paper's setting, all explicit:

* Tool-call format: TRL's (Qwen2.5) ``<tool_call>{"name": "search", "arguments": {"query": ...}}</tool_call>``
  and ``<tool_response>`` turns instead of Search-R1's ``<search>``/``<information>`` tags; the same
  information flows, and the masking is the same. SmolLM2's own chat template cannot render tool calls,
  so :func:`prepare_tokenizer` installs TRL's Qwen2.5 template (same ``<|im_start|>`` tokens).
* Retriever: BM25 (``bm25s``) by default and in tests; :class:`DenseRetriever` (MiniLM + FAISS) as an
  option; the paper's E5 + FAISS over the 2018 Wikipedia dump is reached through :class:`ServerRetriever`
  (Search-R1's ``retrieval_server.py`` protocol on localhost), not exercised offline.
* Data: offline, a generated encyclopedia of fictional entities (:mod:`trgrpo.tasks.search_data`) whose
  one-hop / two-hop / comparison questions stand in for Table 3's General QA / Multi-hop QA columns; the
  seven real sets load with :func:`trgrpo.tasks.search_data.load_qa` where files or a hub are available.
* A small model never calls a tool by itself, so a CPU run starts with a short supervised warm start on
  scripted search trajectories (:func:`warm_start`), then GRPO or TR-GRPO. The CPU toy uses a ~1M-parameter
  Llama with a word-level tokenizer over the corpus (:func:`micro_model`): on 2 shared cores SmolLM2-135M
  needs minutes for a single RL step of the toy's size.

Layout: :mod:`~trgrpo.tasks.search_retrieval` (retrievers), :mod:`~trgrpo.tasks.search_tool` (the tool),
:mod:`~trgrpo.tasks.search_prompts` (chat templates, prompts, dataset), :mod:`~trgrpo.tasks.search_micro` (word
tokenizer, micro model, warm start), :mod:`~trgrpo.tasks.search_reward` (Eq. 14),
:mod:`~trgrpo.tasks.search_eval` (rollouts, EM), :mod:`~trgrpo.tasks.search_render` (HTML, Table 3 layout), and
the run loop with the trainer in :mod:`trgrpo.pipeline.search_run` (outside ``tasks/``: a task never imports the
trainer).
This module re-exports all of them; the run-loop names load from :mod:`trgrpo.pipeline.search_run` on first access.
"""

from __future__ import annotations

from typing import Any

from .search_data import TABLE3_DATASETS, TABLE3_LABELS, Corpus, make_corpus
from .search_eval import (
    evaluate_no_search,
    evaluate_search,
    summarise_em,
    trl_rollouts,
)
from .search_micro import (
    WORD_PATTERN,
    WORD_SPECIALS,
    build_word_tokenizer,
    corpus_texts,
    encode_trajectory,
    load_tokenizer,
    micro_model,
    scripted_turns,
    warm_start,
)
from .search_prompts import (
    COMPACT_CHAT_TEMPLATE,
    NO_SEARCH_SYSTEM_PROMPT,
    SYSTEM_PROMPT,
    TEMPLATES,
    prepare_tokenizer,
    search_dataset,
    search_messages,
)
from .search_render import (
    mean_results,
    render_rollout_html,
    rollout_text,
    table3,
)
from .search_retrieval import (
    RETRIEVERS,
    BM25Retriever,
    DenseRetriever,
    ServerRetriever,
    make_retriever,
    recall_at_k,
)
from .search_reward import (
    exact_match,
    extract_answer,
    final_text,
    normalize_answer,
    search_reward,
)
from .search_tool import (
    MALFORMED_KEY,
    SEARCH_TOOL_NAME,
    format_passages,
    make_search_tool,
    tool_call_text,
)

__all__ = [
    "BM25Retriever",
    "DenseRetriever",
    "ServerRetriever",
    "make_retriever",
    "recall_at_k",
    "make_search_tool",
    "prepare_tokenizer",
    "load_tokenizer",
    "build_word_tokenizer",
    "micro_model",
    "COMPACT_CHAT_TEMPLATE",
    "search_messages",
    "search_dataset",
    "normalize_answer",
    "extract_answer",
    "exact_match",
    "search_reward",
    "scripted_turns",
    "encode_trajectory",
    "warm_start",
    "make_search_trainer",  # noqa: F822 - loaded from trgrpo.pipeline.search_run by __getattr__
    "trl_rollouts",
    "evaluate_search",
    "evaluate_no_search",
    "render_rollout_html",
    "rollout_text",
    "summarise_em",
    "mean_results",
    "table3",
    "SearchSpec",  # noqa: F822 - loaded from trgrpo.pipeline.search_run by __getattr__
    "run_search",  # noqa: F822 - loaded from trgrpo.pipeline.search_run by __getattr__
    "make_corpus",
    "Corpus",
    "TABLE3_DATASETS",
    "TABLE3_LABELS",
    "SCHEME_LABELS",  # noqa: F822 - loaded from trgrpo.pipeline.search_run by __getattr__
    "MALFORMED_KEY",
    "NO_SEARCH_SYSTEM_PROMPT",
    "RETRIEVERS",
    "SEARCH_TOOL_NAME",
    "SYSTEM_PROMPT",
    "TEMPLATES",
    "WORD_PATTERN",
    "WORD_SPECIALS",
    "corpus_texts",
    "final_text",
    "format_passages",
    "tool_call_text",
]

# The run loop builds the trainer, so it lives in trgrpo.pipeline.search_run; its names stay reachable from here, loaded
# only when asked for (importing this task module never imports the trainer).
_RUN_NAMES = ("SCHEME_LABELS", "SearchSpec", "make_search_trainer", "run_search")


def __getattr__(name: str) -> Any:
    if name in _RUN_NAMES:
        from ..pipeline import search_run

        return getattr(search_run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
