"""The controls experiments (trgrpo.toy_controls): grids, metrics, and the committed summaries recomputed
independently from the records they name (scipy only, no trgrpo.stats)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from scripts import render_docs
from trgrpo import token_stats
from trgrpo.reports import tables
from trgrpo.runs import toy_controls as tc

ROOT = Path(__file__).resolve().parents[2]

RESULTS = ROOT / "results"


def test_controls_grid_pairs_every_arm_on_every_seed():
    specs = tc.grid("controls")
    assert len(specs) == len(tc.ARMS) * len(tc.CONTROL_SEEDS) and len(tc.CONTROL_SEEDS) >= 12
    by_arm = {}
    for s in specs:
        assert s["group"] == tc.CONTROLS_GROUP and s["task"] == tc.TASK and s["n_eval"] >= 400
        assert s["steps"] == tc.STEPS and s["beta"] == 0.001
        by_arm.setdefault((s["scheme"], s["placement"]), []).append(s["seed"])
    assert {k: sorted(v) for k, v in by_arm.items()} == {
        (a["scheme"], a.get("placement", "surrogate")): list(tc.CONTROL_SEEDS) for a in tc.ARMS.values()
    }
    assert len({s["name"] for s in specs}) == len(specs)
    # every eval step is a multiple of the evaluation interval and inside the run
    assert all(st % tc.EVAL_EVERY == 0 and st <= tc.STEPS for st in tc.EVAL_STEPS)


def test_kl_and_tau_grids():
    kl = tc.grid("kl")
    assert {(s["kl_weighting"], s["beta"]) for s in kl} == {
        ("eq10", 0.04),
        ("outside", 0.04),
        ("plain", 0.04),
        ("outside", 0.001),
        ("plain", 0.001),
    }
    assert all(
        sorted(s["seed"] for s in kl if (s["kl_weighting"], s["beta"]) == k) == list(range(8))
        for k in {(s["kl_weighting"], s["beta"]) for s in kl}
    )
    assert len({s["name"] for s in kl}) == len(kl)
    tau = tc.grid("tau")
    assert sorted({s["tau"] for s in tau}) == sorted(tc.TAUS) and len(tau) == len(tc.TAUS) * len(tc.TAU_SEEDS)


def test_primary_metric_by_hand():
    rec = {
        "eval_history": [{"step": 0, "greedy_accuracy": 0.5}]
        + [{"step": s, "greedy_accuracy": 0.1 * i} for i, s in enumerate(tc.EVAL_STEPS, 1)]
    }
    n = len(tc.EVAL_STEPS)
    assert tables.primary_metric(rec) == pytest.approx(0.1 * n * (n + 1) / 2 / n)
    rec["eval_history"].pop()  # a missing evaluation makes the metric undefined, not silently shorter
    assert math.isnan(tables.primary_metric(rec))


def test_weight_shares_by_hand():
    # w = 1 for p <= ln(3)/9 = 0.122, w = 1.4 for p >= ln(19)/9 = 0.327 (Eq. 11, sigma(9 p))
    h = token_stats.weight_shares([0.0, 0.1, 0.2, 0.3, 0.5, 0.9, 1.0, 0.15])
    assert (h["share_at_lower"], h["share_between"], h["share_at_upper"]) == pytest.approx((2 / 8, 3 / 8, 3 / 8))
    assert sum(h["prob_counts"]) == sum(h["weight_counts"]) == h["n_tokens"] == 8
    assert len(h["bins"]) == len(h["prob_counts"]) + 1 and len(h["weight_bins"]) == len(h["weight_counts"]) + 1


def _load(name):
    return json.loads((RESULTS / "toy" / "controls" / f"{name}.json").read_text())


def _independent(summary: dict, group: str, metric, results: Path = RESULTS) -> None:
    rows = {r["arm"]: r for r in summary["rows"]}
    recs = {}
    for row in summary["rows"]:
        for name in row["runs"]:
            recs[name] = json.loads((results / group / f"{name}.json").read_text())
    base = {recs[n]["seed"]: metric(recs[n]) for n in rows[summary.get("baseline", "equal")]["runs"]}
    ps = []
    for arm, row in rows.items():
        vals = {recs[n]["seed"]: metric(recs[n]) for n in row["runs"]}
        assert row["n"] == len(vals)
        assert row["mean"] == pytest.approx(np.mean(list(vals.values())), abs=1e-3)
        if arm == summary.get("baseline", "equal"):
            continue
        seeds = sorted(s for s in vals if s in base)
        d = np.array([vals[s] - base[s] for s in seeds])
        assert row["delta_vs_equal"] == pytest.approx(d.mean(), abs=1e-3)
        se = d.std(ddof=1) / math.sqrt(d.size)
        q = stats.t.ppf(0.975, d.size - 1)
        assert row["ci_low"] == pytest.approx(d.mean() - q * se, abs=1e-3)
        assert row["ci_high"] == pytest.approx(d.mean() + q * se, abs=1e-3)
        p = stats.ttest_rel([vals[s] for s in seeds], [base[s] for s in seeds]).pvalue
        assert row["p"] == pytest.approx(p, abs=1e-3)
        assert (row["higher"], row["lower"], row["ties"]) == (
            int((d > 0).sum()),
            int((d < 0).sum()),
            int((d == 0).sum()),
        )
        ps.append((p, row))
    # Holm, step-down, by hand
    ps.sort(key=lambda x: x[0])
    running = 0.0
    for k, (p, row) in enumerate(ps):
        running = max(running, min(1.0, (len(ps) - k) * p))
        assert row["p_holm"] == pytest.approx(running, abs=1e-3)


def _metric_from_evals(steps):
    def f(rec):
        acc = {e["step"]: e["greedy_accuracy"] for e in rec["eval_history"]}
        return float(np.mean([acc[s] for s in steps]))

    return f


@pytest.mark.skipif(not (RESULTS / "toy" / "controls" / "summary.json").exists(), reason="no committed summary")
def test_controls_summary_recomputes_from_its_records():
    s = _load("summary")
    assert set(s) >= {"primary_metric", "eval_steps", "rows"}
    assert s["eval_steps"] == list(tc.EVAL_STEPS)
    for row in s["rows"]:
        assert set(row) >= {"arm", "runs", "n", "mean"}
        if row["arm"] != "equal":
            assert set(row) >= {"delta_vs_equal", "ci_low", "ci_high", "p", "p_holm", "mde"}
    _independent(s, "toy/controls", _metric_from_evals(s["eval_steps"]))
    # records carry what the issue asks
    for row in s["rows"]:
        for name in row["runs"]:
            rec = json.loads((RESULTS / "toy" / "controls" / f"{name}.json").read_text())
            assert {"scheme", "placement", "seed", "git_commit", "git_dirty"} <= set(rec) and rec["git_dirty"] is False
            assert {e["step"] for e in rec["eval_history"]} >= set(s["eval_steps"])


@pytest.mark.skipif(not (RESULTS / "toy" / "tau" / "summary.json").exists(), reason="no committed tau summary")
def test_tau_summary_recomputes_from_its_records():
    s = json.loads((RESULTS / "toy" / "tau" / "summary.json").read_text())
    s["baseline"] = "equal"
    rows = s["rows"]
    # records live in two groups: resolve each name where it is
    for row in rows:
        row["runs"] = list(row["runs"])
    recs_dir = {}
    for row in rows:
        for n in row["runs"]:
            recs_dir[n] = "toy/tau" if (RESULTS / "toy" / "tau" / f"{n}.json").exists() else "toy/controls"
    metric = _metric_from_evals(s["eval_steps"])
    base = {}
    for n in next(r for r in rows if r["arm"] == "equal")["runs"]:
        rec = json.loads((RESULTS / recs_dir[n] / f"{n}.json").read_text())
        base[rec["seed"]] = metric(rec)
    for row in rows:
        if row["arm"] == "equal":
            continue
        vals = {}
        for n in row["runs"]:
            rec = json.loads((RESULTS / recs_dir[n] / f"{n}.json").read_text())
            vals[rec["seed"]] = metric(rec)
        d = np.array([vals[k] - base[k] for k in sorted(vals) if k in base])
        assert row["delta_vs_equal"] == pytest.approx(d.mean(), abs=1e-3)


def _fake_records(tmp_path, rng_seed=0):
    """Records shaped like run_toy's, with synthetic accuracies: enough to exercise summaries and prose."""
    from trgrpo.runs.records import write_result

    rng = np.random.default_rng(rng_seed)
    shift = {
        "equal": 0.0,
        "tr-surrogate": 0.01,
        "tr-ratio": -0.08,
        "const-surrogate": 0.0,
        "tr_norm-surrogate": 0.005,
        "reverse-surrogate": -0.01,
        "random": 0.0,
    }
    for spec in tc.grid("controls"):
        label = next(
            k
            for k, v in tc.ARMS.items()
            if v["scheme"] == spec["scheme"] and v.get("placement", "surrogate") == spec["placement"]
        )
        base = 0.7 + 0.01 * spec["seed"]
        evals = [{"step": 0, "greedy_accuracy": 0.5}] + [
            {"step": s, "greedy_accuracy": float(base + shift[label] + rng.normal(0, 0.02))} for s in tc.EVAL_STEPS
        ]
        rec = {
            "name": spec["name"],
            "group": spec["group"],
            "scheme": spec["scheme"],
            "seed": spec["seed"],
            "placement": spec["placement"],
            "spec": spec,
            "steps": spec["steps"],
            "history": [
                {"step": i, "tr/zero_grad_frac_pos_adv": 0.9 if label == "tr-ratio" else 0.0, "kl": 1e-3}
                for i in range(1, spec["steps"] + 1)
            ],
            "eval_history": evals,
            "cpu_time_s": 10.0,
            "git_commit": "abc1234",
            "git_dirty": False,
        }
        write_result(spec["group"], spec["name"], rec, tmp_path)


def test_summary_and_prose_on_synthetic_records(tmp_path):
    _fake_records(tmp_path)
    s = tables.controls_summary(tmp_path)
    assert (tmp_path / "toy" / "controls" / "summary.json").exists()
    _independent(s, "toy/controls", _metric_from_evals(s["eval_steps"]), tmp_path)
    rows = {r["arm"]: r for r in s["rows"]}
    assert rows["tr-ratio"]["ci_high"] < 0 and render_docs.classify(rows["tr-ratio"]) == "lower"
    text = render_docs.toy_verdict(tmp_path)
    assert f"{rows['tr-ratio']['delta_vs_equal']:+.3f}" in text and "made of" in text
    assert "90.0%" in text  # zero-gradient share of A > 0 tokens, from the records
