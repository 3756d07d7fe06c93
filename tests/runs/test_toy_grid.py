"""The toy grid (trgrpo/runs/toy_grid.py; today trgrpo/toy.py's toy_spec, run_toy, run_grid, load_runs)."""

import json
from pathlib import Path

import pytest

from trgrpo import toy
from trgrpo.runs import toy_grid
from trgrpo.runs.spec import RunSpec

TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2)


def test_two_step_run_writes_a_valid_record_and_the_grid_skips_it(tmp_path, monkeypatch):
    from trgrpo import files
    from trgrpo.runs import records

    warm = dict(threshold=0.0, max_steps=4, check_every=2, cache=tmp_path / "ws", model_overrides=TINY)
    spec = toy_grid.toy_spec("tr", 0, placement="ratio", steps=2, prompts_per_step=2, num_generations=4, n_eval=16)
    writes: list[Path] = []
    real = files.write_json
    monkeypatch.setattr(records, "write_json", lambda p, rec: (writes.append(Path(p)), real(p, rec))[1])
    rec = toy_grid.run_toy(spec, results_dir=tmp_path / "res", warm_kwargs=warm, eval_every=1)
    path = tmp_path / "res" / "toy" / "micro" / f"{spec['name']}.json"
    # one pipeline: the record is written once, complete (no second edit-and-rewrite); spec.json is the checkpoint's
    assert [w for w in writes if w.name != "spec.json"] == [path]
    saved = records.read_record(path)  # validated against the schema
    assert saved == json.loads(json.dumps(files.jsonable(rec))) and saved["kind"] == "run"
    assert saved["name"] == rec["name"] == "addition-micro-tr-ratio-seed0"
    assert (saved["scheme"], saved["seed"], saved["steps"], saved["spec"]["placement"]) == ("tr", 0, 2, "ratio")
    assert saved["model"].startswith("micro-qwen2") and saved["machine"]["cpu_count"] >= 1
    assert len(saved["history"]) == 2
    for h in saved["history"]:
        for key in ("reward", "grad_norm", "tr/weight_mean", "tr/zero_grad_frac_pos_adv", "tr/zero_grad_frac_neg_adv"):
            assert key in h, key
    assert 0.0 <= saved["final"]["accuracy"] <= 1.0 and "sampled_accuracy" in saved["final"]
    assert [e["step"] for e in saved["eval_history"]] == [0, 1, 2]
    assert saved["wall_time_s"] > 0 and saved["cpu_time_s"] > 0
    assert toy_grid.run_label(saved) == "tr-ratio"
    assert [r["name"] for r in toy_grid.load_runs(tmp_path / "res")] == [saved["name"]]

    summary = toy_grid.run_grid([spec], results_dir=tmp_path / "res", warm_kwargs=warm, progress=False, threads=1)
    assert (summary["n_run"], summary["n_skipped"]) == (0, 1)


def test_toy_spec_names_carry_the_run_label():
    specs = [toy_grid.toy_spec("tr", 0, placement="surrogate", tau=0.5), toy_grid.toy_spec("equal", 1, reward="random")]
    assert [s["name"] for s in specs] == [
        "addition-micro-tr-surrogate-tau0.5-seed0",
        "addition-micro-equal-randomreward-seed1",
    ]
    assert all(s["group"] == "toy/micro" and s["steps"] == toy.TOY_DEFAULTS["steps"] for s in specs)


def test_toy_spec_is_a_validated_run_spec():
    """A toy spec is a RunSpec's fields: a bad value or an unknown field stops at the spec, naming the field."""
    assert toy_grid.toy_spec("tr", 0) == RunSpec.from_dict(toy_grid.toy_spec("tr", 0)).model_dump()
    with pytest.raises(ValueError, match=r"^tau must be > 0"):
        toy_grid.toy_spec("tr", 0, tau=-1.0)
    with pytest.raises(ValueError, match=r"^stpes is not a known field; known: \['alpha', "):
        toy_grid.toy_spec("tr", 0, stpes=3)
