"""Recipe: add a weight scheme and run it as a toy-grid arm, touching two library files.

1. ``trgrpo/weights.py``: one entry in ``SCHEMES`` (name -> ``fn(p, **_)``: the detached token probabilities in,
   ``params``, ``mask``, ``generator`` by keyword; a positive weight of the same shape out).
2. ``trgrpo/arms.py``: one entry in ``ARMS`` (run label -> its label, colour and ``toy_spec`` settings, e.g.
   ``"half-surrogate": Arm("half", "tab:pink", dict(scheme="half", placement="surrogate"), control=True)``);
   ``toy_controls.ARMS`` holds the settings of every ``control=True`` arm, and the ``controls`` grid runs each on
   every seed, so ``trgrpo toy run controls`` runs the new arm next to GRPO, seed for seed.

The test follows the recipe on a throwaway scheme (monkeypatch) and runs its arm at a tiny scale (2 steps, seed 0)
through the grid's own code path (``toy_controls.grid`` -> ``toy_grid.run_grid``)."""

from __future__ import annotations

import torch

from trgrpo import arms, weights
from trgrpo.runs import toy_controls, toy_grid
from trgrpo.runs.records import read_record

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
