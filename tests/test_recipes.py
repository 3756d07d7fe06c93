"""The recipes of docs/design.md, followed on throwaway code: each test does what its recipe says, step by step."""

import importlib
import sys
import textwrap

from trgrpo.runs.experiment import run
from trgrpo.runs.spec import RunSpec
from trgrpo.tasks import get_task, task_names

# Recipe "add a task", step 1: one module that builds the data, scores completions, evaluates, and registers.
TASK_MODULE = '''
"""Say "yes": a throwaway task."""

from trgrpo.tasks import Task, register_task


def build(spec, tokenizer):
    from datasets import Dataset

    prompts = [f"Question {i}: say yes." for i in range(spec.n_train)]
    return Dataset.from_dict({"prompt": prompts}), ["yes"] * spec.n_eval


def yes_reward(completions, **kwargs):
    return [1.0 if "yes" in c.lower() else 0.0 for c in completions]


def evaluate(model, tokenizer, records, spec):
    return {"accuracy": 0.0, "n": len(records)}


register_task("say_yes", Task(build, lambda spec: [yes_reward], evaluate))
'''


def test_add_a_task_recipe(tiny_model_dir, tmp_path, monkeypatch):
    (tmp_path / "say_yes_task.py").write_text(textwrap.dedent(TASK_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("say_yes_task")  # step 2: importing the module registers the task
    try:
        assert "say_yes" in task_names() and get_task("say_yes").build.__module__ == "say_yes_task"
        # step 3: a run spec names the task; the run builds the trainer and writes the record
        spec = RunSpec(
            task="say_yes",
            model=tiny_model_dir,
            steps=2,
            prompts_per_step=2,
            num_generations=2,
            max_completion_length=4,
            n_train=4,
            n_eval=2,
            group="recipe",
            name="say-yes",
        )
        record = run(spec, results_dir=tmp_path / "results", checkpoint_dir=tmp_path / "ckpt", verbose=False)
        assert record["task"] == "say_yes" and len(record["history"]) == 2
        assert "rewards/yes_reward/mean" in record["history"][0]
        assert record["final"] == {"accuracy": 0.0, "n": 2}
    finally:
        sys.modules.pop("say_yes_task", None)
