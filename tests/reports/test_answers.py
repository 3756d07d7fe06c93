"""The answer page (notebook 08): one verdict per claim of the paper, computed from records
(trgrpo/answers.py)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from trgrpo.reports import answers
from trgrpo.runs import lm_science

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
NINE = ["Theorem 3.1", "Theorem 3.2", "Table 1", "Table 2", "Table 3", "Table 4", "Table 7", "Table 8", "Figure 1"]


def test_nine_claims_each_with_a_command():
    assert [c.name for c in answers.CLAIMS] == NINE
    assert all(c.command and c.says for c in answers.CLAIMS)
    for c in answers.CLAIMS:  # a command names a plan that exists
        plan = next((w for w in c.command.split() if w.startswith("experiments/")), None)
        assert plan is None or (ROOT / plan).exists(), c


def test_without_records_every_claim_says_not_run_yet(tmp_path):
    rows = answers.verdicts(tmp_path)
    assert [r["claim"] for r in rows] == NINE
    assert {r["verdict"] for r in rows} == {answers.NOT_RUN}
    assert all(r["scale"] == "—" for r in rows)
    assert [r["result"] for r in answers.toy_extras(tmp_path)] == [answers.NOT_RUN] * 3
    assert answers.summary_line(rows) == "paired claims: 6 not run yet; checks (theorems, cost): 3 not run yet"


def test_committed_records_give_a_verdict_with_scale():
    rows = answers.verdicts(RESULTS)
    assert list(dict.fromkeys(r["claim"] for r in rows)) == NINE
    for r in rows:
        assert r["verdict"] in answers.VERDICTS
        if r["verdict"] != answers.NOT_RUN:
            assert r["scale"] != "—" and r["our evidence"], r
    by = {r["claim"]: r for r in rows}
    assert by["Theorem 3.1"]["verdict"] == "reproduced"  # results/notebooks/01_*.json: no violation of the bounds


def _copy(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dest)


def test_theorem31_verdict_follows_the_record(tmp_path):
    rec = json.loads((RESULTS / "notebooks" / "01_gradient_norm_theorem.json").read_text())
    rec["bounds_violations"] = 3
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "01_gradient_norm_theorem.json").write_text(json.dumps(rec))
    row = answers.verdicts(tmp_path)[0]
    assert row["verdict"] == "not reproduced" and "3 violations" in row["our evidence"]


def test_toy_extras_read_kl_tau_lm_records_when_present(tmp_path):
    grpo = sorted((RESULTS / "toy" / "controls").glob("addition-micro-equal-seed*.json"))[:2]
    for p in grpo:
        _copy(p, tmp_path / "toy" / "kl" / p.name)
    _copy(next((RESULTS / "toy" / "lm").glob("arith-*.json")), tmp_path / "toy" / "lm" / "run.json")
    rows = {r["folder"]: r for r in answers.toy_extras(tmp_path)}
    # the KL row names each weighting at each beta (the runs here: eq10 at beta 0.001), never one pooled mean
    kl = rows["results/toy/kl/"]["result"]
    assert kl.startswith("eq10-beta0.001 ") and "(n=2)" in kl
    assert rows["results/toy/tau/"]["result"] == answers.NOT_RUN
    assert rows["results/toy/lm/"]["result"] != answers.NOT_RUN and "CPU" in rows["results/toy/lm/"]["scale"]
    assert "→" in rows["results/toy/lm/"]["result"] and "±" not in rows["results/toy/lm/"]["result"]


@pytest.mark.parametrize(("table", "task"), [(1, "kk"), (2, "math"), (3, "search"), (4, "kk"), (7, "kk"), (9, "kk")])
def test_paper_vs_ours_has_one_row_per_printed_row(table, task):
    """Notebook 08's tables (moved here from an assert of the notebook): every printed row of the paper's table,
    with the committed records or none, each cell 'paper / ours'."""
    from trgrpo import paper
    from trgrpo.reports import tables
    from trgrpo.runs.records import load_results

    for records in (load_results(task, str(RESULTS)), []):
        rows = tables.paper_vs_ours(table, records)
        assert len(rows) == len(paper.table(table).rows), (table, len(records))
        assert all(" / " in str(row[c]) for row in rows for c in paper.table(table).columns)
        if not records:
            assert all(row["ours"] == tables.NO_RUN for row in rows)


# ---------------------------------------------------------------------------------------------------------------
# The verdict rule, and every judged verdict recomputed from the records with independent code (scipy only)


@pytest.mark.parametrize(
    ("lo", "hi", "effect", "verdict"),
    [
        (0.01, 0.30, 0.24, "reproduced"),  # excludes 0 on the paper's side, holds its effect
        (0.30, 0.40, 0.24, "reproduced"),  # beyond the paper's effect: still the paper's side
        (0.002, 0.047, 0.24, "partly reproduced"),  # the direction holds, the paper's size is excluded
        (-0.02, 0.30, 0.24, "inconclusive"),  # holds 0 and the paper's effect
        (-0.02, 0.02, 0.24, "not reproduced"),  # holds 0, excludes the paper's effect
        (-0.13, -0.03, 0.24, "not reproduced"),  # the other side
        (-0.30, -0.01, -0.24, "reproduced"),  # a negative paper effect: the direction is the sign
        (-0.02, 0.02, -0.24, "not reproduced"),
        (0.02, 0.23, None, "reproduced"),  # no number in the paper: direction only
        (-0.10, 0.10, None, "inconclusive"),
        (-0.10, -0.01, None, "not reproduced"),
    ],
)
def test_judge_follows_the_stated_rule(lo, hi, effect, verdict):
    assert answers.judge(lo, hi, effect) == verdict
    assert verdict in dict(answers.RULE) or effect is None


def test_rule_states_each_verdict_once():
    names = [v for v, _ in answers.RULE]
    assert sorted(names) == sorted({"reproduced", "partly reproduced", "inconclusive", "not reproduced"})
    with pytest.raises(ValueError):
        answers.judge(float("nan"), 0.1, 0.2)


def _primary(record: dict) -> float:
    evals = {e["step"]: e["greedy_accuracy"] for e in record["eval_history"]}
    return float(np.mean([evals[s] for s in (20, 40, 60)]))


def _by_arm(folder: Path) -> dict[str, dict[int, float]]:
    from trgrpo.runs.toy_grid import run_label

    out: dict[str, dict[int, float]] = {}
    for path in folder.glob("addition-micro-*.json"):
        rec = json.loads(path.read_text())
        out.setdefault(run_label(rec), {})[rec["seed"]] = _primary(rec)
    return out


def _interval(t: dict, c: dict, level: float) -> tuple[float, float, float]:
    seeds = sorted(set(t) & set(c))
    d = np.array([t[s] - c[s] for s in seeds])
    half = stats.t.ppf(0.5 + level / 2, d.size - 1) * d.std(ddof=1) / np.sqrt(d.size)
    return d.mean(), d.mean() - half, d.mean() + half


def _rule(lo: float, hi: float, margin: float) -> str:  # the rule, written again (margin > 0)
    if lo > 0:
        return "reproduced" if hi >= margin else "partly reproduced"
    return "inconclusive" if hi >= margin else "not reproduced"


def test_table4_parts_recomputed_from_the_records():
    arms = _by_arm(RESULTS / "toy" / "controls")
    rows = [r for r in answers.verdicts(RESULTS) if r["claim"] == "Table 4"]
    parts = {
        "TR > GRPO": ("equal", "equal"),
        "TR > Reverse": ("reverse-surrogate", "reverse"),
        "TR > Random": ("random", "random"),
    }
    assert [r["part"] for r in rows] == list(parts)
    present = [p for p, (arm, _) in parts.items() if arm in arms]
    from trgrpo import paper

    avg = {r["scheme"]: r["avg"] for r in paper.TABLE4.rows}
    for row in rows:
        arm, scheme = parts[row["part"]]
        if row["part"] not in present:
            assert row["verdict"] == answers.NOT_RUN
            continue
        d, lo, hi = _interval(arms["tr-surrogate"], arms[arm], 1 - 0.05 / len(present))
        margin = avg["tr"] - avg[scheme]
        c = row["judged"]
        assert c["delta"] == pytest.approx(d, abs=1e-12) and c["ci"] == pytest.approx([lo, hi], abs=1e-9)
        assert c["paper_effect"] == pytest.approx(margin) and row["verdict"] == _rule(lo, hi, margin), row
        assert f"{lo:+.4f}, {hi:+.4f}" in row["our evidence"] and "toy" in row["scale"]


def test_table7_parts_recomputed_from_the_records():
    from trgrpo import paper

    taus = _by_arm(RESULTS / "toy" / "tau")
    ctrl = _by_arm(RESULTS / "toy" / "controls")
    seeds = sorted({s for v in taus.values() for s in v})
    taus["tr-surrogate"] = {s: ctrl["tr-surrogate"][s] for s in seeds}
    grpo = {s: ctrl["equal"][s] for s in seeds}
    rows = [r for r in answers.verdicts(RESULTS) if r["claim"] == "Table 7"]
    assert len(rows) == len(taus) == 5
    for row in rows:
        tau = float(row["part"].split("=")[1].split(">")[0])
        arm = "tr-surrogate" if tau == 9 else f"tr-surrogate-tau{tau:g}"
        d, lo, hi = _interval(taus[arm], grpo, 1 - 0.05 / len(rows))
        margin = paper.table7_accuracy(tau=tau)["avg"] - paper.table(4).value("avg", scheme="equal")
        assert row["judged"]["ci"] == pytest.approx([lo, hi], abs=1e-9)
        assert row["verdict"] == _rule(lo, hi, margin), row


def test_a_verdict_follows_the_records(tmp_path):
    """The verdict is read from the records: the same grid with TR's accuracy raised by 0.3 on every seed turns
    'TR > GRPO' into reproduced (the test of the rule can fail)."""
    dest = tmp_path / "toy" / "controls"
    dest.mkdir(parents=True)
    for path in (RESULTS / "toy" / "controls").glob("addition-micro-*.json"):
        rec = json.loads(path.read_text())
        if "tr-surrogate" in path.name:
            for e in rec["eval_history"]:
                e["greedy_accuracy"] += 0.3 + 0.001 * rec["seed"]
        (dest / path.name).write_text(json.dumps(rec))
    row = next(r for r in answers.verdicts(tmp_path) if r["part"] == "TR > GRPO")
    assert row["verdict"] == "reproduced" and row["judged"]["ci"][0] > 0.25


def test_table1_row_says_what_the_smollm2_runs_are():
    row = next(r for r in answers.verdicts(RESULTS) if r["claim"] == "Table 1")
    runs = [json.loads(p.read_text()) for p in sorted((RESULTS / "toy" / "lm").glob("arith-*.json"))]
    assert row["verdict"] == "not tested"
    text = row["our evidence"]
    assert "two-number addition" in text and "K&K accuracy" not in text and "learns nothing" not in text
    for r in runs:  # each run's own before -> after, no mean over two seeds
        assert f"seed {r['seed']} {r['initial']['accuracy']:.2f} → {r['final']['accuracy']:.2f}" in text
        assert f"{r['steps']} steps" in text


def test_figure1_is_judged_from_notebook04s_record():
    rec = json.loads((RESULTS / "notebooks" / "04_token_probabilities.json").read_text())
    row = next(r for r in answers.verdicts(RESULTS) if r["claim"] == "Figure 1")
    tok = rec["claim"]["token"]
    ci = rec["cluster"]["token"]["ci"] if "cluster" in rec else tok["difference_ci"]
    first = json.loads((RESULTS / "notebooks" / "04_token_probabilities_sample1.json").read_text())
    verdicts = {answers.judge(*ci, None), answers.judge(*first["cluster"]["token"]["ci"], None)}
    assert row["verdict"] == (verdicts.pop() if len(verdicts) == 1 else "inconclusive") and row["judged"]["ci"] == ci
    assert f"{tok['k_high']}/{tok['n_high']}" in row["our evidence"] and "exploratory" in row["our evidence"]


def test_figure1_two_samples_that_disagree_are_inconclusive(tmp_path):
    """A second sample of the same design is a replication: if its verdict differs from the first's, the page says
    inconclusive, and both intervals are in the evidence."""
    rec = json.loads((RESULTS / "notebooks" / "04_token_probabilities.json").read_text())
    (tmp_path / "notebooks").mkdir()
    for name, ci in (("04_token_probabilities", [0.02, 0.16]), ("04_token_probabilities_sample1", [-0.06, 0.12])):
        rec["cluster"]["token"]["ci"] = ci
        (tmp_path / "notebooks" / f"{name}.json").write_text(json.dumps(rec))
    row = answers.figure1(next(c for c in answers.CLAIMS if c.name == "Figure 1"), tmp_path)
    assert row["verdict"] == "inconclusive" and "[-0.06, +0.12]: inconclusive" in row["our evidence"]
    (tmp_path / "notebooks" / "04_token_probabilities_sample1.json").write_text(json.dumps(rec))  # now they agree
    row = answers.figure1(next(c for c in answers.CLAIMS if c.name == "Figure 1"), tmp_path)
    assert row["verdict"] == answers.judge(-0.06, 0.12, None)


def test_forest_rows_cover_every_toy_arm_with_the_papers_effect():
    from trgrpo.runs.toy_controls import ARMS

    rows = answers.forest_rows(RESULTS)
    ctrl = [r for r in rows if r["group"] == "toy/controls"]
    present = _by_arm(RESULTS / "toy" / "controls")
    assert [r["arm"] for r in ctrl] == [a for a in ARMS if a != "equal" and a in present]
    for r in ctrl:
        d, lo, hi = _interval(present[r["arm"]], present["equal"], 0.95)
        assert r["ci95"] == pytest.approx([lo, hi], abs=1e-9) and r["ci"][0] <= lo and r["ci"][1] >= hi
    assert {r["arm"]: r["paper_effect"] for r in ctrl}["tr-surrogate"] == pytest.approx(0.63 - 0.39)
    assert all(r["paper_effect"] is not None for r in rows if r["group"] == "toy/tau")


def test_committed_headline_of_08_is_what_the_current_code_writes():
    """results/notebooks/08_results_vs_paper.json is notebook 08 run on the committed records by today's code."""
    rec = json.loads((RESULTS / "notebooks" / "08_results_vs_paper.json").read_text())
    rows = answers.verdicts(RESULTS)
    assert rec["smoke"] is False
    assert rec["verdicts"] == {f"{r['claim']}{': ' + r['part'] if r['part'] else ''}": r["verdict"] for r in rows}
    assert rec["records"]["toy_controls"] == len(list((RESULTS / "toy" / "controls").glob("addition-micro-*.json")))
    for key, judged in rec["judged"].items():
        row = next(r for r in rows if f"{r['claim']}: {r['part']}" == key)
        assert judged["ci"] == pytest.approx(row["judged"]["ci"]) and judged["verdict"] == row["verdict"]


def test_the_answer_paragraph_of_08_says_what_the_records_say(monkeypatch):
    """The first thing notebook 08 shows, executed from its own cells (smoke mode, the committed records): each
    number and verdict of the answer is the one the records give, and no count is typed."""
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **_: shown.extend(objs))
    monkeypatch.setenv("TRGRPO_SMOKE", "1")
    cells = [c for c in json.loads((ROOT / "notebooks" / "08_results_vs_paper.ipynb").read_text())["cells"]]
    code = [("".join(c["source"])) for c in cells if c["cell_type"] == "code"]
    ns: dict = {}
    for src in code[: next(i for i, s in enumerate(code) if "answer = [" in s) + 1]:
        exec(compile(src, "08", "exec"), ns)
    text = next(o.data for o in shown if getattr(o, "data", None) and str(o.data).startswith("**Does TR-GRPO work?**"))
    rows = answers.verdicts(RESULTS)
    for r in rows:
        if r["claim"] in ("Table 1", "Table 2", "Table 3"):
            assert f"{r['claim']}: {r['verdict']}" in text
        if r["claim"] == "Table 4":
            d, (lo, hi) = r["judged"]["delta"], r["judged"]["ci"]
            assert f"{r['part']}: {d:+.3f} [{lo:+.4f}, {hi:+.4f}] against the paper's " in text
            assert f"{r['judged']['paper_effect']:+.2f}: **{r['verdict']}**" in text
        if r["claim"].startswith("Theorem"):
            assert f"{r['claim']} {r['verdict']}" in text
    t7 = [r["verdict"] for r in rows if r["claim"] == "Table 7"]
    for v in set(t7):
        assert f"{t7.count(v)} {v}" in text and f" of {len(t7)}." in text
    n_tau = {r["n"] for r in answers.forest_rows(RESULTS) if r["group"] == "toy/tau"}
    assert f"({'/'.join(map(str, sorted(n_tau)))} paired seeds per τ)" in text
    assert "Table 8's cost: " + next(r["verdict"] for r in rows if r["claim"] == "Table 8") in text


def test_prompt_bootstrap_resamples_prompts():
    """Figure 1's cluster bootstrap: whole prompts are resampled; a structural token that only one prompt's
    samples carry at the high end gives a wide interval, and the observed difference is the plain count's."""
    from trgrpo import token_stats as ts
    from trgrpo.tasks.generation import TokenOccurrences

    rng = np.random.default_rng(0)
    texts, probs, comp = [], [], []
    words = [" (", " +", " Zoey", " the", " says", " so", " then", " is", " a", " that"]
    for c in range(20):  # 5 prompts x 4 samples
        for w in words:
            texts.append(w)
            probs.append(float(rng.uniform(0.6, 0.9) if w in (" (", " +") else rng.uniform(0.1, 0.5)))
            comp.append(c)
    occ = TokenOccurrences([0] * len(texts), texts, probs, comp)
    out = ts.prompt_bootstrap(occ, 4, n_boot=50, min_count=1, end_share=0.3, top_k=3, names=["Zoey"])
    assert set(out) == {"token", "word"} and out["token"]["n_prompts"] == 5 and out["token"]["level"] == 0.975
    assert (
        out["token"]["difference"]
        == ts.figure1_difference(occ, "token", min_count=1, end_share=0.3, top_k=3, names=["Zoey"])
        > 0
    )
    assert out["token"]["ci"][0] <= out["token"]["ci95"][0] <= out["token"]["ci95"][1] <= out["token"]["ci"][1]


# ---------------------------------------------------------------- the real-LM question: stage 0, leverage, power


def test_leverage_numbers_recompute_from_the_stored_samples():
    """Every summary number of each committed leverage record comes back from its per-token sample (npz)."""
    recs = answers.leverage_records(RESULTS)
    assert recs, "no leverage record committed under results/leverage/"
    for key, rec in recs.items():
        with np.load(RESULTS / answers.LEVERAGE_GROUP / rec["leverage"]["samples"]) as z:
            sample = {k: z[k] for k in z.files}
        again = {
            w: lm_science.leverage_summary(
                {k[len(w) + 1 :]: v for k, v in sample.items() if k.startswith(w + "_")}, rec["spec"]["upper"]
            )
            for w in ("before", "after")
        }
        for when in ("before", "after"):
            stored = rec["leverage"][when]
            assert set(again[when]) == set(stored)
            for k, v in stored.items():
                assert again[when][k] == pytest.approx(v, rel=1e-9, abs=1e-12), (key, when, k)
            assert stored["grad_batches"] >= 1 and -1 <= stored["grad_cosine_min"] <= 1


def test_pairs_for_power_is_the_exact_noncentral_t():
    st = stats
    assert answers.pairs_for_power(1.0, 1.0) == 10  # d = 1: power 0.80 at n = 10, 0.75 at n = 9

    def power(n, sd, eff):
        t = st.t.ppf(0.975, n - 1)
        nc = eff * math.sqrt(n) / sd
        return st.nct.sf(t, n - 1, nc) + st.nct.cdf(-t, n - 1, nc)

    for sd, eff in ((0.339, 0.05), (0.093, 0.03), (0.2, -0.05)):
        n = answers.pairs_for_power(sd, eff)
        assert power(n, sd, abs(eff)) >= 0.8 > power(n - 1, sd, abs(eff))
    # d = 6.7 at n = 2: scipy's noncentral t cdf is NaN there; the power is 0.54, so 2 pairs are too few
    assert answers.pairs_for_power(0.03, 0.2) == 3 and power(3, 0.03, 0.2) >= 0.8
    with pytest.raises(ValueError, match="sd_diff"):
        answers.pairs_for_power(0.0, 0.05)


def test_power_sizing_reads_sigma_d_from_the_records():
    p = answers.power_sizing(RESULTS)
    stress = next(d for d in p["designs"] if d["folder"] == "lm/stress")
    runs = {(r["scheme"], r["seed"]): r["final"]["accuracy"] for r in answers._records(RESULTS / "lm" / "stress")}
    d = [runs[("tr", s)] - runs[("equal", s)] for s in range(4)]
    assert stress["sd_diff"] == pytest.approx(np.std(d, ddof=1))
    assert stress["pairs"][0.05] == answers.pairs_for_power(stress["sd_diff"], 0.05)
    lo, hi = p["hours_per_100"]
    assert 0 < lo <= hi
    assert stress["cpu_hours"][0.05][0] == pytest.approx(2 * stress["pairs"][0.05] * lo)


def test_versus_is_the_words_of_the_readme_and_notebook_08():
    assert answers.versus(0.03, 0.01) == "higher" and answers.versus(-0.03, 0.049) == "lower"
    assert answers.versus(0.03, 0.05) == answers.versus(0.03, None) == "no detectable difference"


def test_pairs_for_power_is_statsmodels_sample_size_on_the_committed_designs():
    """On the committed SmolLM2 designs the pairs equal statsmodels' TTestPower solved for n, rounded up (that solver
    is not called: it gives NaN at d = 6.7 and n = 2 at d = 10, where the power is 0.73)."""
    from statsmodels.stats.power import TTestPower

    designs = answers.power_sizing(RESULTS)["designs"]
    assert designs
    for d in designs:
        for effect, pairs in d["pairs"].items():
            n = TTestPower().solve_power(effect_size=effect / d["sd_diff"], nobs=None, alpha=0.05, power=0.8)
            assert pairs == math.ceil(float(np.ravel(n)[0]))


def test_stage0_checks_state_the_whole_rule():
    rows = answers.stage0_checks(RESULTS)
    assert [r["id"] for r in rows] == ["add2", "add3", "mul"]
    assert all(not r["accepted"] for r in rows)
    window = [r["checks"][0] for r in rows]
    assert all(c["clause"] == "sampled accuracy before RL" and (c["low"], c["high"]) == (0.25, 0.6) for c in window)
    assert [round(c["value"], 2) for c in window] == [0.16, 0.0, 0.16] and not any(c["ok"] for c in window)


def test_leave_one_out_and_summary_line():
    t, c = [0.1, 0.2, 0.3, 0.25], [0.0, 0.0, 0.0, 0.3]
    loo = answers.leave_one_out(t, c, 0.05, 1)
    assert sum(loo.values()) == 4
    assert next(iter(loo)) == answers.contrast(t, c, 0.05, 1)["verdict"]  # the whole sample's verdict first
    rows = [{"claim": "Theorem 3.1", "verdict": "reproduced"}, {"claim": "Table 4", "verdict": "inconclusive"}]
    assert answers.summary_line(rows) == "paired claims: 1 inconclusive; checks (theorems, cost): 1 reproduced"


def test_a_table_built_from_substitute_data_says_so():
    """Issue "engines" (4): Table 1 from runs on reasoning-gym's generated puzzles (experiments/train_kk_qwen3b.yaml
    trained on them) read as the paper's experiment: the 'ours' label now counts the runs on substitute data."""
    from trgrpo.reports import tables

    run = {"group": "kk/Qwen2.5-3B-Instruct/main", "task": "kk", "scheme": "tr", "seed": 0, "steps": 300,
           "model": "Qwen/Qwen2.5-3B-Instruct", "spec": {}, "final": {"accuracy": 0.5}}  # fmt: skip
    generated = {"train": {"source": "reasoning-gym", "substitute": True}, "eval": {"substitute": False}}
    hub = {"train": {"source": "hub", "substitute": False}, "eval": {"gsm8k": {"substitute": False}}}
    assert tables.on_substitute_data({**run, "data_source": generated})
    assert not tables.on_substitute_data({**run, "data_source": hub}) and not tables.on_substitute_data(run)
    for source, said in ((generated, True), (hub, False)):
        ours = [r["ours"] for r in tables.paper_vs_ours(1, [{**run, "data_source": source}]) if r["ours"] != "no run"]
        assert len(ours) == 1 and ("1 on substitute data (not the paper's)" in ours[0]) is said, ours


def test_rows_of_a_one_gpu_and_an_eight_gpu_zero_run_say_their_engines(tmp_path):
    """Issue "engines" (6): under DeepSpeed ZeRO the gradients accumulate in bf16, on one GPU in fp32, so Table 1's
    GRPO row from one GPU and its TR-GRPO row from 8 GPUs under ZeRO-2 are not the same experiment: each row of the
    table names its runs' engine (a column) and Table 1's verdict row counts the engines (a field), from each record's
    ``engine``, ``spec.bf16`` and ``machine``."""
    from trgrpo import paper
    from trgrpo.files import provenance
    from trgrpo.reports import tables
    from trgrpo.runs.records import RUN_KIND, load_results, write_result
    from trgrpo.runs.spec import RunSpec

    gpu = {"platform": "Linux-6.8-x86_64-with-glibc2.35", "python": "3.11.7", "processor": "x86_64", "cpu_count": 192,
           "torch_threads": 96, "cuda": True, "gpu": "NVIDIA H100 80GB HBM3", "gpu_count": 8}  # fmt: skip
    final = {"accuracy": 0.5, "avg": 0.5, "by_n_people": dict.fromkeys(paper.KK_SIZES, 0.5), "n": 500}
    one_gpu, zero2 = {"world_size": 1, "deepspeed_stage": None}, {"world_size": 8, "deepspeed_stage": 2}
    for scheme, engine in (("equal", one_gpu), ("tr", zero2)):
        s = RunSpec(task="kk", model="Qwen/Qwen2.5-3B-Instruct", scheme=scheme, bf16=True, use_vllm=True,
                    group="kk/Qwen2.5-3B-Instruct/main", name=f"kk-{scheme}-seed0")  # fmt: skip
        rec = {"kind": RUN_KIND, **{k: getattr(s, k) for k in ("name", "group", "task", "scheme", "model", "steps")}}
        rec |= {"seed": 0, "spec": s.model_dump(), "engine": engine, "history": [], "initial": None, "final": final}
        rec |= {"train_time_s": 9e3, "seconds_per_step": 30.0, "wall_time_s": 1e4, **provenance(), "machine": gpu}
        write_result(s.group, s.name, rec, tmp_path)
    runs = load_results("kk", tmp_path)
    rows = {r["method"]: r for r in tables.paper_vs_ours(1, runs) if r["model"] == "Qwen2.5-3B-Instruct"}
    assert rows["GRPO"]["engine"] == "1 GPU, fp32 grads (n=1)" and rows["base"]["engine"] == tables.NO_RUN
    assert rows["TR-GRPO"]["engine"] == "8 GPUs ZeRO-2, bf16 grads (n=1)"
    row = next(r for r in answers.verdicts(tmp_path) if r["claim"] == "Table 1")
    assert row["engines"] == {"1 GPU, fp32 grads": 1, "8 GPUs ZeRO-2, bf16 grads": 1}
    zero = next(r for r in runs if r["scheme"] == "tr")
    assert tables.grad_accumulation({**zero, "spec": {**zero["spec"], "bf16": False}}) == "fp32"  # fp32 weights
    assert tables.grad_accumulation({**zero, "machine": {"cuda": False}}) == "fp32"  # the CPU ZeRO tier
    assert tables.grad_accumulation({k: v for k, v in zero.items() if k != "engine"}) is None  # not recorded
