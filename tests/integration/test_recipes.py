"""The recipes of docs/design.md, followed on throwaway code: each test does what its recipe says, step by step."""

from __future__ import annotations

import importlib
import sys
import textwrap

import torch

from trgrpo import arms, weights
from trgrpo.runs import toy_controls, toy_grid
from trgrpo.runs.experiment import run
from trgrpo.runs.records import read_record
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


# From test_recipe_scheme.py: Recipe: add a weight scheme and run it as a toy-grid arm, touching two library files.
#
# 1. ``trgrpo/weights.py``: one entry in ``SCHEMES`` (name -> ``fn(p, **_)``: the detached token probabilities in,
# ``params``, ``mask``, ``generator`` by keyword; a positive weight of the same shape out). 2.
# ``trgrpo/toy_controls.py``: one entry in ``ARMS`` (run label -> the ``toy_spec`` settings, e.g. ``"half-surrogate":
# dict(scheme="half", placement="surrogate")``); the ``controls`` grid runs every arm on every seed, so ``python -m
# trgrpo.toy_controls run controls`` runs the new arm next to GRPO, seed for seed.
#
# The test follows the recipe on a throwaway scheme (monkeypatch) and runs its arm at a tiny scale (2 steps, seed 0)
# through the grid's own code path (``toy_controls.grid`` -> ``toy.run_grid``).


TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2)


def test_add_a_scheme_recipe(tmp_path, monkeypatch):
    monkeypatch.setitem(weights.SCHEMES, "half", lambda p, **_: 0.5 + 0.0 * p)  # step 1
    arm = arms.Arm("half", "tab:pink", dict(scheme="half", placement="surrogate"), control=True)
    monkeypatch.setitem(arms.ARMS, "half-surrogate", arm)  # step 2
    monkeypatch.setitem(toy_controls.ARMS, "half-surrogate", arm.spec)  # what toy_controls reads of it on import
    specs = [s for s in toy_controls.grid("controls", seeds=[0]) if s["scheme"] == "half"]
    assert [s["name"] for s in specs] == ["addition-micro-half-surrogate-seed0"]
    spec = {**specs[0], "steps": 2, "n_eval": 8, "prompts_per_step": 2, "num_generations": 2}
    warm = dict(threshold=0.0, max_steps=2, check_every=2, cache=tmp_path / "ws", model_overrides=TINY)
    summary = toy_grid.run_grid([spec], results_dir=tmp_path, warm_kwargs=warm, eval_every=1, threads=1, progress=False)
    assert summary["n_run"] == 1
    rec = read_record(tmp_path / spec["group"] / f"{spec['name']}.json")
    assert rec["scheme"] == "half" and toy_grid.run_label(rec) == "half-surrogate" and len(rec["history"]) == 2
    assert arms.label("half-surrogate") == "half" and arms.color("half-surrogate") == "tab:pink"
    assert torch.equal(weights.token_weights(torch.tensor([0.2, 0.9]), "half"), torch.tensor([0.5, 0.5]))
