"""Tables of runs (trgrpo/reports/tables.py; today trgrpo/tables.py): summaries by hand and from the records."""

import json
from pathlib import Path

import pytest

from trgrpo.reports import metrics, tables
from trgrpo.runs import toy_grid


def _fake(scheme, seed, acc, *, placement="surrogate", tau=9.0, reward="correct", zpos=0.0, w=1.0):
    spec = {"placement": placement, "tau": tau, "task_options": {"reward": reward}}
    hist = [
        {"step": s, "reward": 0.5, "grad_norm": 2.0 * w, "tr/weight_mean": w, "tr/zero_grad_frac_pos_adv": zpos}
        | {"tr/zero_grad_frac_neg_adv": 0.0, "tr/zero_grad_frac": zpos / 2, "tr/weight_at_upper": 0.0}
        for s in (1, 2)
    ]
    final = {"greedy_accuracy": acc, "sampled_accuracy": acc / 2, "accuracy": acc}
    return {"scheme": scheme, "seed": seed, "spec": spec, "history": hist, "final": final, "steps": 2}


def test_summary_tables_from_records():
    recs = [_fake("equal", s, 0.5 + 0.125 * s) for s in range(3)]  # exact in binary: differences are exact
    recs += [_fake("tr", s, 0.625 + 0.125 * s, placement="ratio", zpos=0.9, w=1.4) for s in range(3)]
    recs += [_fake("tr", s, 0.375 + 0.125 * s, tau=2.0) for s in range(2)]
    recs += [_fake("equal", 0, 0.1, reward="random")]
    groups = metrics.group_by(recs, toy_grid.run_label)
    assert set(groups) == {"equal", "tr-ratio", "tr-surrogate-tau2", "equal-randomreward"}
    zero = {r["run"]: r for r in tables.zero_grad_table(groups, ["equal", "tr-ratio"])}
    assert zero["tr-ratio"]["pos"] == pytest.approx(0.9) and zero["equal"]["pos"] == 0.0
    grad = {r["run"]: r for r in tables.grad_table(groups, ["equal", "tr-ratio"])}
    assert grad["tr-ratio"]["grad norm / mean w"] == "2.000 ± 0.000"  # 2 w / w
    cost = tables.grid_cost(recs)
    assert cost["n_runs"] == len(recs) and cost["steps_per_run"] == [2]


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
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import yaml

    from trgrpo.reports import plots, tables
    from trgrpo.runs import lm_science as runs

    base = Path(__file__).parents[2] / "results/lm/stage0"
    plan, decision = yaml.safe_load((base / "plan.yaml").read_text()), json.loads((base / "decision.json").read_text())
    rows = tables.stage0_rows(decision)
    assert [r["candidate"] for r in rows] == [c["id"] for c in plan["candidates"]]
    assert [r["accepted"] for r in rows] == [runs.accepted(plan, c) for c in decision["candidates"]]
    fig = plots.plot_stage0(decision, plan)
    assert len(fig.axes[0].patches) == 2 * len(rows) and "SmolLM2" in fig.axes[0].get_title()


def test_stress_table_and_figure_from_the_committed_records():

    import matplotlib

    matplotlib.use("Agg")
    import yaml

    from trgrpo.reports import plots, tables
    from trgrpo.runs.records import load_results

    root = Path(__file__).parents[2] / "results"
    plan = yaml.safe_load((root / "lm/stress/plan.yaml").read_text())
    recs = load_results("lm/stress", root)
    rows = tables.stress_rows(recs, plan)
    assert [r["seed"] for r in rows] == plan["seeds"] and len(recs) == len(plan["seeds"]) * len(plan["arms"])
    s = tables.stress_summary(recs, plan)
    assert sum(r["tr: collapsed at step"] is not None for r in rows) == s["collapsed"]["tr"]
    assert s["both"] + s["neither"] + s["only tr"] + s["only grpo"] == s["n"] == len(rows)
    fig = plots.plot_stress(recs, plan)
    assert len(fig.axes) == len(rows) and "lr 5e-05" in fig._suptitle.get_text()


def test_table3_layout():
    synthetic = tables.table3([{"method": "GRPO", "em_by_type": {"one-hop": 0.5, "two-hop": 0.25, "comparison": 0.0}}])
    assert list(synthetic.columns.get_level_values(1)) == ["one-hop", "two-hop", "comparison", "Avg."]
    assert synthetic.iloc[0, -1] == 25.0
    real = tables.table3([{"method": "TR-GRPO", "em_by_type": {"nq": 0.418, "bamboogle": 0.08}}])
    assert list(real.columns.get_level_values(1)) == [
        "NQ",
        "TriviaQA",
        "PopQA",
        "HQA",
        "2Wiki",
        "Musique",
        "Bamboogle",
        "Avg.",
    ]
    assert real.iloc[0, -1] == pytest.approx(24.9)
