"""The task registry: a task registers its data, reward functions and evaluation under a name, and
:func:`trgrpo.experiment.run` trains any registered task the same way (a run spec's ``task`` field names it).

Built in: ``kk``, ``math``, ``arith`` (:mod:`trgrpo.tasks.paper_tasks`), ``search`` (:mod:`trgrpo.tasks.search`)
and the toy's ``addition`` / ``addition_trace`` (:mod:`trgrpo.tasks.addition`); they register when this module is
first imported. A task never builds a trainer: the run does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from trgrpo.experiment import RunSpec


@dataclass
class Task:
    """A task family: ``build(spec, tokenizer)`` -> (train dataset, eval records); rewards; evaluation.

    ``data_source(spec, train_dataset, eval_records)``, when given, says where the data came from (a path or the
    offline generator, split, size); the run record carries it as ``data_source``. Optional hooks for tasks that
    need more than a model and a reward (search: a tool): ``tokenizer(model_path, spec)`` loads the tokenizer (default:
    the model's own), ``trainer_kwargs(spec)`` adds keyword arguments of the trainer (``tools=[...]``), and
    ``evaluate_with_trainer`` hands ``evaluate`` the trainer (rollouts through its tool loop) instead of the model.
    """

    build: Callable[[RunSpec, Any], tuple[Any, list]]
    reward_funcs: Callable[[RunSpec], list]
    evaluate: Callable[[Any, Any, list, RunSpec], dict]
    data_source: Callable[[RunSpec, Any, Any], dict] | None = None
    tokenizer: Callable[[str, RunSpec], Any] | None = None
    trainer_kwargs: Callable[[RunSpec], dict] | None = None
    evaluate_with_trainer: bool = False


TASKS: dict[str, Task] = {}


def register_task(name: str, task: Task) -> None:
    """Register ``task`` under ``name`` (a run spec's ``task``); registering a name again replaces it."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"task name must be a non-empty string, got {name!r}")
    if not isinstance(task, Task):
        raise TypeError(f"task must be a trgrpo.tasks.Task, got {type(task).__name__}")
    TASKS[name] = task


# The built-in tasks register themselves (their heavy imports wait until a run needs them).


# The built-in tasks register themselves (their heavy imports wait until a run needs them).
from trgrpo.tasks import addition, paper_tasks, search  # noqa: E402, F401
