"""Agentic search as a run task (``task: search``) for :func:`trgrpo.pipeline.experiment.run`: the data, the Eq. 14
reward,
the tool the trainer calls, and greedy EM through the trainer's own tool loop.

:func:`search_task` makes the task over records and a tool the caller already built
(:func:`trgrpo.pipeline.search_run.run_search`, notebook 07); the registered ``search`` task builds them from the spec's
``task_options`` (``corpus_seed``, ``retriever``, ``top_k``, ``template``) on the offline synthetic corpus: the
first ``n_train`` train and ``n_eval`` test questions.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .registry import Task, register_task

if TYPE_CHECKING:  # pragma: no cover
    from ..pipeline.spec import RunSpec


def search_task(
    train_records: Sequence[dict[str, Any]],
    eval_records: Sequence[dict[str, Any]],
    tool: Callable[..., str],
    *,
    template: str = "auto",
) -> Task:
    """The search task over given train / eval question records and a ``search`` tool."""
    from .search_eval import evaluate_search
    from .search_micro import load_tokenizer
    from .search_prompts import search_dataset
    from .search_reward import search_reward

    return Task(
        build=lambda spec, tokenizer: (search_dataset(list(train_records)), list(eval_records)),
        reward_funcs=lambda spec: [search_reward],
        evaluate=lambda trainer, tokenizer, records, spec: evaluate_search(trainer, records),
        tokenizer=lambda path, spec: load_tokenizer(path, template),
        trainer_kwargs=lambda spec: {"tools": [tool]},
        evaluate_with_trainer=True,
    )


@functools.lru_cache(maxsize=4)
def _corpus_and_tool(corpus: str, corpus_seed: int, retriever: str, top_k: int) -> tuple[Any, Callable[..., str]]:
    from .search_data import make_corpus
    from .search_retrieval import make_retriever
    from .search_tool import make_search_tool

    if corpus != "synthetic":
        raise ValueError(f"task_options.corpus: only the offline 'synthetic' corpus is built here, got {corpus!r}")
    c = make_corpus(int(corpus_seed))
    return c, make_search_tool(make_retriever(retriever, c.passages), top_k=int(top_k))


def _from_options(spec: RunSpec) -> Task:
    o = spec.task_options
    corpus, tool = _corpus_and_tool(
        o.get("corpus", "synthetic"), o.get("corpus_seed", 0), o.get("retriever", "bm25"), o.get("top_k", 3)
    )
    train = corpus.questions["train"][: spec.n_train]
    return search_task(train, corpus.questions["test"][: spec.n_eval], tool, template=o.get("template", "auto"))


register_task(
    "search",
    Task(
        build=lambda spec, tokenizer: _from_options(spec).build(spec, tokenizer),
        reward_funcs=lambda spec: _from_options(spec).reward_funcs(spec),
        evaluate=lambda trainer, tokenizer, records, spec: _from_options(spec).evaluate(
            trainer, tokenizer, records, spec
        ),
        tokenizer=lambda path, spec: _from_options(spec).tokenizer(path, spec),
        trainer_kwargs=lambda spec: _from_options(spec).trainer_kwargs(spec),
        evaluate_with_trainer=True,
    ),
)
