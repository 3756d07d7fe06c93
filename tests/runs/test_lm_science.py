"""The small-LM science runs (trgrpo/runs/lm_science.py; today trgrpo/lm_science.py): stage 0, the grid, the records."""

import pytest

from trgrpo.reports import tables


def test_committed_smollm2_runs_learn():
    """Issue 14: results/toy/lm holds SmolLM2 runs of GRPO and TR-GRPO, >= 2 seeds each, each with a higher mean
    reward over its last 5 logged steps than over its first 5, made on a clean committed tree."""
    from trgrpo.files import ROOT
    from trgrpo.runs.records import load_results

    records = [r for r in load_results("toy/lm", ROOT / "results") if r["task"] == "arith"]
    seeds = {s: {r["seed"] for r in records if r["scheme"] == s} for s in ("equal", "tr")}
    assert all(len(v) >= 2 for v in seeds.values()), seeds
    for r in records:
        first, last = tables.first_last(r, "reward", 5)
        assert last > first, (r["name"], first, last)
        assert r["model"] == "embedded" and r["git_commit"] and r["git_dirty"] is False, r["name"]
        assert tables.REWARD_KEYS["format"] in r["history"][0] and tables.REWARD_KEYS["answer"] in r["history"][0]


def test_committed_token_histogram_follows_the_schema():
    import json

    from trgrpo.files import ROOT
    from trgrpo.token_stats import weight_shares

    rec = json.loads((ROOT / "results" / "toy" / "lm" / "token_hist.json").read_text())
    assert set(weight_shares([0.5])) <= set(rec) and rec["task"] == "arith" and rec["n_tokens"] > 500
    assert sum(rec["prob_counts"]) == sum(rec["weight_counts"]) == rec["n_tokens"]
    assert rec["share_at_lower"] + rec["share_between"] + rec["share_at_upper"] == pytest.approx(1.0)


def test_stage0_plan_builds_its_probes_and_rule():
    """The committed stage-0 plan of the real-LM experiment: each candidate gives a valid run spec; the rule."""
    from pathlib import Path

    import yaml

    from trgrpo.runs import lm_science

    plan = yaml.safe_load((Path(__file__).parents[2] / "results/lm/stage0/plan.yaml").read_text())
    specs = [lm_science.probe_spec(plan, c) for c in plan["candidates"]]
    assert [s.task_options["kind"] for s in specs] == ["add", "add3", "mul"] and {s.scheme for s in specs} == {"equal"}
    ok = {"sampled_accuracy": 0.4, "share_between": 0.3}
    assert lm_science.accepted(plan, {"before": ok, "after": {"share_between": 0.2}})
    assert not lm_science.accepted(plan, {"before": ok, "after": {"share_between": 0.19}})
    assert not lm_science.accepted(plan, {"before": {**ok, "sampled_accuracy": 0.61}, "after": ok})
    assert not lm_science.accepted(plan, {"before": {**ok, "share_between": 0.24}, "after": ok})


def test_grid_specs_go_seed_by_seed_with_the_arms_settings():
    from trgrpo.runs import lm_science

    plan = {
        "group": "lm/x",
        "seeds": [0, 1],
        "base": {"task": "arith", "steps": 5},
        "arms": [{"id": "grpo", "scheme": "equal"}, {"id": "tr", "scheme": "tr", "set": {"placement": "surrogate"}}],
    }
    specs = lm_science.grid_specs(plan)
    assert [s.name for s in specs] == ["grpo-seed0", "tr-seed0", "grpo-seed1", "tr-seed1"]
    assert [s.placement for s in specs[:2]] == ["ratio", "surrogate"] and {s.group for s in specs} == {"lm/x"}
