"""The task registry: each module of this package registers its tasks (data, rewards, evaluation) under the names a
run spec's ``task`` uses; :func:`get_task` and :func:`task_names` import them on first use. A task never builds a
trainer: :func:`trgrpo.runs.experiment.run` does.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import field_validator

from trgrpo.config import Checked


class TaskOptions(Checked):
    """The ``task_options`` every task accepts: a task's own options subclass it, so a misspelt option or a value of
    the wrong type is refused when the spec is made; the task reads this model's values, so an absent option takes
    the default written here."""

    max_prompt_tokens: int = 1024  # vLLM's prompt budget (trgrpo.runs.spec.vllm_max_model_length)
    eval_batch_size: int | None = None  # None: the batch size of the task's evaluation function

    @field_validator("max_prompt_tokens", "eval_batch_size")
    @classmethod
    def _count(cls, v: int | None, info) -> int | None:
        if v is not None and v < 1:
            raise ValueError(f"{info.field_name} must be an integer >= 1, got {v}")
        return v

    def eval_batch(self) -> dict:
        """``batch_size`` for the task's evaluation function where ``eval_batch_size`` is set."""
        return {} if self.eval_batch_size is None else {"batch_size": self.eval_batch_size}


@dataclass
class Task:
    """A task family: ``build(spec, tokenizer)`` -> (train dataset, eval records), reward functions, evaluation.

    ``options``: the :class:`TaskOptions` model of its ``task_options``. Optional: ``data_source`` (the record's
    ``data_source``), and for tasks with a tool (search) ``tokenizer``, ``trainer_kwargs`` (``tools=[...]``),
    ``config`` (config fields, e.g. the tool-call budget), ``evaluate_with_trainer`` (``evaluate`` gets the
    trainer), ``trainer_ready(trainer, spec)`` (once it is built) and ``record_extras(trainer, record, spec) ->
    fields`` (the task's own record fields); ``check_data(spec)`` reads the spec's data files when a spec is loaded
    (a ``ValueError`` naming the option and the file), before anything runs."""

    build: Callable[[Any, Any], tuple[Any, list]]
    reward_funcs: Callable[[Any], list]
    evaluate: Callable[[Any, Any, list, Any], dict]
    data_source: Callable[[Any, Any, Any], dict] | None = None
    tokenizer: Callable[[str, Any], Any] | None = None
    trainer_kwargs: Callable[[Any], dict] | None = None
    evaluate_with_trainer: bool = False
    options: type[TaskOptions] = TaskOptions
    check_data: Callable[[Any], None] | None = None
    hub_data: Callable[[Any], list[tuple[str, str, str | None]]] | None = None  # (option, repo, config) read
    config: Callable[[Any], dict] | None = None
    trainer_ready: Callable[[Any, Any], None] | None = None
    record_extras: Callable[[Any, dict, Any], dict] | None = None


_TASKS: dict[str, Task] = {}


def register_task(name: str, task: Task) -> None:
    """Register ``task`` under ``name`` (a run spec's ``task``); registering a name again replaces it."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"task name must be a non-empty string, got {name!r}")
    if not isinstance(task, Task):
        raise TypeError(f"task must be a trgrpo.tasks.Task, got {type(task).__name__}")
    _TASKS[name] = task


@functools.cache
def _load_builtin_tasks() -> None:
    """Import every module of this package once: each registers its own tasks."""
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")


def task_names() -> list[str]:
    """The names of the registered tasks, sorted (the built-in ones included)."""
    _load_builtin_tasks()
    return sorted(_TASKS)


def get_task(name: str) -> Task:
    """The task registered under ``name``; a ValueError lists the registered names."""
    _load_builtin_tasks()
    if name not in _TASKS:
        raise ValueError(f"task must be one of {sorted(_TASKS)}, got {name!r}")
    return _TASKS[name]
