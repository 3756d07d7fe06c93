"""The addition task for SmolLM2 (notebook 03, Part B): data, prompt, the two rewards, the run registration."""

import pytest

from trgrpo.reports import tables
from trgrpo.tasks import arith


def test_problems_distinct_in_range_and_seeded():
    ps = arith.make_problems(200, seed=3, low=10, high=49)
    pairs = [tuple(p["terms"]) for p in ps]
    assert len(set(pairs)) == 200
    assert all(10 <= a <= 49 and 10 <= b <= 49 and p["answer"] == a + b for (a, b), p in zip(pairs, ps))
    assert ps == arith.make_problems(200, seed=3, low=10, high=49)
    assert ps != arith.make_problems(200, seed=4, low=10, high=49)


@pytest.mark.parametrize("kind,answer", [("add3", lambda t: t[0] + t[1] + t[2]), ("mul", lambda t: t[0] * t[1])])
def test_other_kinds(kind, answer):
    ps = arith.make_problems(300, seed=1, low=10, high=99, kind=kind)
    assert len({tuple(p["terms"]) for p in ps}) == 300 and all(p["answer"] == answer(p["terms"]) for p in ps)
    if kind == "mul":
        assert all(10 <= p["terms"][0] <= 99 and 2 <= p["terms"][1] <= 9 for p in ps)
        assert arith.arith_prompt(ps[0])[2]["content"] == f"{ps[0]['terms'][0]} * {ps[0]['terms'][1]} ="
    else:
        assert len(ps[0]["terms"]) == 3 and arith.question(ps[0]).count(" + ") == 2
    with pytest.raises(ValueError, match="kind"):
        arith.make_problems(3, kind="div")


def test_answer_only_reward():
    (answer,) = arith.make_arith_reward_funcs("answer")
    assert answer(completions=[" 68", "68 apples", "7"], answer=[68, 68, 68]) == [1.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="reward"):
        arith.make_arith_reward_funcs("format")


@pytest.mark.parametrize("kw", [dict(n=-1), dict(n=5, low=9, high=3), dict(n=17, low=1, high=4)])
def test_problem_errors_name_the_field(kw):
    n = kw.pop("n")
    with pytest.raises(ValueError, match="n =|n must|low"):
        arith.make_problems(n, **kw)


def test_prompt_prefills_the_assistant_turn():
    msgs = arith.arith_prompt({"terms": [23, 45], "op": "+", "answer": 68})
    assert [m["role"] for m in msgs] == ["system", "user", "assistant"]
    assert msgs[1]["content"] == "23 + 45" and msgs[2]["content"] == "23 + 45 ="


@pytest.mark.parametrize(
    "completion,fmt,ans",
    [
        (" 68", 1.0, 1.0),
        (" 68.", 1.0, 1.0),
        (" 68\n", 1.0, 1.0),
        (" 67", 1.0, 0.0),
        (" 68 is the answer", 0.0, 1.0),
        (" 68\n\nHere is why", 0.0, 1.0),
        (" sixty-eight", 0.0, 0.0),
        ("", 0.0, 0.0),
        (" 6 8", 0.0, 0.0),
        ([{"role": "assistant", "content": " 68"}], 1.0, 1.0),
    ],
)
def test_rewards_by_hand(completion, fmt, ans):
    assert arith.format_reward(completion) == fmt
    assert arith.answer_reward(completion, 68) == ans


@pytest.mark.parametrize("bad", [None, 3, b"68", ["x"], {"a": 1}, "9" * 10_000, " 68" + " " * 1_000_000])
def test_rewards_never_raise(bad):
    assert arith.format_reward(bad) in (0.0, 1.0)
    assert arith.answer_reward(bad, 68) in (0.0, 1.0)
    assert arith.answer_reward(" 68", "not a number") == 0.0


def test_reward_funcs_are_logged_apart_and_need_the_answer_column():
    fmt, ans = arith.make_arith_reward_funcs()
    assert fmt.__name__ == "arith_format_reward" and ans.__name__ == "arith_answer_reward"
    comps = [" 68", " 68 because", " 12"]
    assert fmt(completions=comps, answer=[68, 68, 68]) == [1.0, 0.0, 1.0]
    assert ans(completions=comps, answer=[68, 68, 68]) == [1.0, 1.0, 0.0]
    with pytest.raises(KeyError, match="answer"):
        ans(completions=comps)
    with pytest.raises(ValueError, match="length"):
        ans(completions=comps, answer=[68])


def test_task_is_registered_with_temperature_one():
    from trgrpo.runs.spec import RunSpec
    from trgrpo.tasks import task_names

    assert "arith" in task_names()
    spec = RunSpec(task="arith", steps=1, max_completion_length=8)
    assert spec.sampling_temperature == 1.0


def test_dataset_renders_the_chat_and_continues_the_assistant_turn():
    from trgrpo.models import embedded_tokenizer

    try:
        tok = embedded_tokenizer()
    except Exception as e:  # the embedded model is converted on first use; absent on a bare machine
        pytest.skip(f"embedded tokenizer unavailable: {e}")
    ds = arith.arith_dataset(arith.make_problems(3, seed=0), tok)
    assert ds.column_names == ["prompt", "answer"]
    text = ds[0]["prompt"]
    p = arith.make_problems(3, seed=0)[0]
    assert text.rstrip().endswith(f"{p['terms'][0]} + {p['terms'][1]} =") and "You are a calculator." in text
    assert ds[0]["answer"] == p["answer"]


def _record(rewards, fmt, ans, **kw):
    hist = [
        {"step": i + 1, "reward": r, tables.REWARD_KEYS["format"]: f, tables.REWARD_KEYS["answer"]: a}
        for i, (r, f, a) in enumerate(zip(rewards, fmt, ans))
    ]
    return {"name": "x", "scheme": "equal", "seed": 0, "history": hist, "seconds_per_step": 2.0, **kw}


def test_first_last_and_run_summary_by_hand():
    rec = _record(
        [0, 1, 2, 3, 4, 5],
        [0, 0, 1, 1, 1, 1],
        [0, 1, 1, 2, 3, 4],
        initial={"accuracy": 0.2, "format_rate": 0.1},
        final={"accuracy": 0.4, "format_rate": 0.9},
        git_commit="abcdef0123",
        git_dirty=True,
    )
    assert tables.first_last(rec, "reward", n=2) == (0.5, 4.5)
    row = tables.run_summary(rec, n=2)
    assert (row["reward first 2"], row["reward last 2"], row["format last 2"], row["answer first 2"]) == (
        0.5,
        4.5,
        1.0,
        0.5,
    )
    assert row["greedy acc before → after"] == "0.20 → 0.40" and row["commit"] == "abcdef0+dirty" and row["steps"] == 6
    with pytest.raises(ValueError, match="fewer than n"):
        tables.first_last(rec, "reward", n=7)


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

    plan = yaml.safe_load((Path(__file__).parents[1] / "results/lm/stage0/plan.yaml").read_text())
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


@pytest.mark.parametrize("text,needle", [(None, "no such plan file"), ("", "empty"), ("a: 1\na: 2\n", "duplicate key")])
def test_trgrpo_lm_refuses_a_bad_plan_file_in_one_line(tmp_path, capsys, text, needle):
    """The plans go through the hardened loader (trgrpo.runs.spec.read_config): one line, exit 2, nothing run."""
    from trgrpo.runs import lm_science

    plan = tmp_path / "plan.yaml"
    if text is not None:
        plan.write_text(text)
    assert lm_science.main(["grid", str(plan), "--results", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(plan) in err[0] and needle in err[0], err
    assert not (tmp_path / "results").exists()


def _stress_record(arm, seed, rewards, accs):
    hist = [{"step": i + 1, "rewards/arith_answer_reward/mean": r} for i, r in enumerate(rewards)]
    evals = [{"step": s, "accuracy": a} for s, a in zip((0, 30, 60), accs)]
    return {"name": f"{arm}-seed{seed}", "seed": seed, "history": hist, "eval_history": evals}


def test_collapse_rule_and_stress_summary_by_hand():
    from trgrpo.reports import tables

    rule = {"final_below_start": True, "reward_floor": 0.05, "floor_steps": 10}
    floor = [0.3] * 5 + [0.0] * 10 + [0.3] * 5  # steps 6-15 at the floor
    assert tables.collapse_step(_stress_record("x", 0, floor, [0.2, 0.3, 0.4]), rule) == 6
    nine = [0.3] * 5 + [0.0] * 9 + [0.3] * 6  # nine steps only: no floor collapse
    assert tables.collapse_step(_stress_record("x", 0, nine, [0.2, 0.3, 0.4]), rule) is None
    assert tables.collapse_step(_stress_record("x", 0, nine, [0.2, 0.3, 0.19]), rule) == 60
    ok, bad = [0.3] * 20, [0.0] * 20
    recs = [_stress_record("grpo", s, bad, [0.2, 0, 0]) for s in range(4)]
    recs += [_stress_record("tr", s, ok, [0.2, 0.3, 0.4]) for s in range(4)]
    out = tables.stress_summary(recs, {"collapse": rule})
    assert out["collapsed"] == {"tr": 0, "grpo": 4} and out["only grpo"] == 4 and out["both"] == 0
    assert out["fisher_p"] == pytest.approx(2 / 70)  # 4 of 4 vs 0 of 4: the most extreme of 70 tables, both tails
    assert out["p_total"] == pytest.approx(2 / 70) and out["p_one_short"] == pytest.approx(10 / 70)


def test_stage0_table_and_figure_from_the_committed_records():
    import json
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import yaml

    from trgrpo.reports import plots, tables
    from trgrpo.runs import lm_science as runs

    base = Path(__file__).parents[1] / "results/lm/stage0"
    plan, decision = yaml.safe_load((base / "plan.yaml").read_text()), json.loads((base / "decision.json").read_text())
    rows = tables.stage0_rows(decision)
    assert [r["candidate"] for r in rows] == [c["id"] for c in plan["candidates"]]
    assert [r["accepted"] for r in rows] == [runs.accepted(plan, c) for c in decision["candidates"]]
    fig = plots.plot_stage0(decision, plan)
    assert len(fig.axes[0].patches) == 2 * len(rows) and "SmolLM2" in fig.axes[0].get_title()


def test_stress_table_and_figure_from_the_committed_records():
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import yaml

    from trgrpo.reports import plots, tables
    from trgrpo.runs.records import load_results

    root = Path(__file__).parents[1] / "results"
    plan = yaml.safe_load((root / "lm/stress/plan.yaml").read_text())
    recs = load_results("lm/stress", root)
    rows = tables.stress_rows(recs, plan)
    assert [r["seed"] for r in rows] == plan["seeds"] and len(recs) == len(plan["seeds"]) * len(plan["arms"])
    s = tables.stress_summary(recs, plan)
    assert sum(r["tr: collapsed at step"] is not None for r in rows) == s["collapsed"]["tr"]
    assert s["both"] + s["neither"] + s["only tr"] + s["only grpo"] == s["n"] == len(rows)
    fig = plots.plot_stress(recs, plan)
    assert len(fig.axes) == len(rows) and "lr 5e-05" in fig._suptitle.get_text()


def test_registered_evaluation_scores_its_greedy_completions(tiny_model_dir):
    """The run task's evaluation (what `trgrpo train` and the grid call): greedy completions of the
    pre-filled prompts, scored by the two rewards, means over the items."""
    from trgrpo.models import load_model_and_tokenizer
    from trgrpo.runs.spec import RunSpec
    from trgrpo.tasks import get_task

    model, tok = load_model_and_tokenizer(tiny_model_dir)
    problems = arith.make_problems(4, seed=0)
    spec = RunSpec(task="arith", steps=1, max_completion_length=8, task_options={"eval_batch_size": 3})
    res = get_task("arith").evaluate(model, tok, problems, spec)
    comps = res["examples"]
    assert res["n"] == len(comps) == 4 and all(isinstance(c, str) for c in comps)
    acc = sum(arith.answer_reward(c, p["answer"]) for c, p in zip(comps, problems)) / 4
    fmt = sum(arith.format_reward(c) for c in comps) / 4
    assert (res["accuracy"], res["format_rate"], res["reward"]) == (acc, fmt, acc + fmt)
    assert get_task("arith").evaluate(model, tok, [], spec)["accuracy"] is None
