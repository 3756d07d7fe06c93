"""Numbers quoted in prose agree with the records they come from.

* Every generated block of README.md and docs/syllabus.md (the toy findings among them) is exactly what
  ``scripts/render_docs.py`` renders from the committed records (regenerate with ``make docs``).
* Notebook 03 renders its verdict from the records (no result typed into its markdown): every decimal number in
  its Part A markdown is a setting or a constant of the method, and no "k of n" seed count is typed there.
* Every decimal number in the README's findings section outside the generated blocks is one that a committed
  record holds, at the precision quoted.
* The controls summary's numbers are those its named records give (independent recomputation:
  ``tests/runs/test_toy_controls.py``).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import yaml

from scripts import render_docs
from trgrpo.runs import toy_controls as tc

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
NB03 = ROOT / "notebooks" / "03_toy_runs.ipynb"
NUMBER = re.compile(r"(?<![\w.])[−-]?\d+\.\d+")
K_OF_N = re.compile(r"\b\d+\s*(?:of|/)\s*\d+\s+seeds\b")


REFERENCE = re.compile(
    r"(?:Theorems?|Sections?|Exercises?|Eqs?\.|App\.|Tables?|Figures?)\s*[A-Z]?\d+(?:\.\d+)*(?:\s*(?:and|,|–)\s*\d+(?:\.\d+)*)*"
)


def _numbers(text: str) -> list[str]:
    """Decimal numbers of ``text``, references to the paper's parts (Theorem 3.1, Eq. 10, ...) left out."""
    return [m.group(0).replace("−", "-") for m in NUMBER.finditer(REFERENCE.sub(" ", text))]


def _leaves(x) -> list[float]:
    out: list[float] = []
    if isinstance(x, dict):
        for v in x.values():
            out += _leaves(v)
    elif isinstance(x, list):
        for v in x[:200]:
            out += _leaves(v)
    elif isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x):
        out.append(float(x))
    return out


@pytest.mark.parametrize("path", list(render_docs.BLOCKS), ids=lambda p: p.name)
def test_generated_blocks_are_rendered_from_the_records(path):
    assert path.read_text() == render_docs.render(path), f"{path.name} is stale: make docs"


def test_a_block_with_an_edited_number_is_rendered_anew():
    """The check above can fail: a README whose toy block differs by one digit renders differently."""
    good = render_docs.toy_verdict()
    nums = _numbers(good)
    assert nums, "no numbers rendered (no summary committed)"
    bad = good.replace(nums[0], nums[0][:-1] + str((int(nums[0][-1]) + 1) % 10), 1)
    text = README.read_text()
    assert good in text
    assert render_docs.render(README, text.replace(good, bad)) == text


def _row(delta, p_holm, mde=0.02, n=12):
    d = {"delta_vs_equal": delta, "ci_low": delta - 0.01, "ci_high": delta + 0.01, "p": p_holm / 2, "p_holm": p_holm}
    return {**d, "mde": mde, "n_pairs": n, "higher": 6, "lower": 6, "ties": 0}


def test_classify_uses_holm_and_made_of_reads_the_controls():
    classify, strength, made_of = render_docs.classify, render_docs.strength, render_docs.made_of
    assert classify(_row(0.03, 0.01)) == "higher" and classify(_row(-0.03, 0.04)) == "lower"
    assert classify(_row(0.03, 0.2)) == "no detectable difference"  # raw p 0.1: not significant either way
    assert strength(_row(0.0, 0.5)).startswith("no evidence") and strength(_row(0.1, 0.001)) == "strong evidence"
    rows = {"tr-surrogate": _row(0.0, 0.9), "const-surrogate": _row(0.0, 0.9), "tr_norm-surrogate": _row(0.0, 0.9)}
    assert made_of(rows).startswith("neither")
    rows["const-surrogate"] = _row(0.03, 0.01)
    assert made_of(rows).startswith("scale")
    rows["tr_norm-surrogate"] = _row(-0.03, 0.01)
    assert made_of(rows).startswith("scale and regulation")
    rows = {"tr-surrogate": _row(0.03, 0.01), "const-surrogate": _row(0.0, 0.9), "tr_norm-surrogate": _row(0.0, 0.9)}
    assert made_of(rows).startswith("inconclusive")  # notebook 08's word (answers.VERDICTS)


# Settings and constants of the method that notebook 03's Part A text may name (each is an input, not a result):
# Table 6 / TOY_DEFAULTS (beta, eps, lr), Eq. 11's defaults (mu, U), the KL betas of the grid, the clip edges
# 1 + eps_h = 1.24 and 1 - eps_l = 0.8, where w leaves L and reaches U (ln 3 / 9 = 0.12, ln 19 / 9 = 0.33),
# the binomial sampling error of one 400-item evaluation (sqrt(0.8 * 0.2 / 400) = 0.02), sigma(0.5) bound 0.745,
# Reverse's lower end 2 - U = 0.6.
ALLOWED = {
    "0.001",
    "0.04",
    "0.2",
    "0.24",
    "0.25",
    "1.4",
    "1.0",
    "1.24",
    "0.8",
    "0.12",
    "0.33",
    "0.02",
    "0.745",
    "0.5",
    "0.6",
}


def test_allowed_constants_are_what_they_claim():
    assert math.log(3) / 9 == pytest.approx(0.12, abs=0.005) and math.log(19) / 9 == pytest.approx(0.33, abs=0.005)
    assert math.sqrt(0.8 * 0.2 / 400) == pytest.approx(0.02, abs=1e-9)
    assert 2 * (1 / (1 + math.exp(-0.5)) - 0.25) == pytest.approx(0.745, abs=5e-4)
    assert 0.001 in tc.KL_BETAS and 0.04 in tc.KL_BETAS


def _part_a_markdown() -> list[str]:
    nb = json.loads(NB03.read_text())
    out = []
    for c in nb["cells"]:
        src = "".join(c["source"])
        if src.startswith("# Part B"):
            break
        if c["cell_type"] == "markdown":
            out.append(src)
    return out


def test_notebook03_part_a_types_no_result():
    cells = _part_a_markdown()
    assert cells, "notebook 03 has no Part A markdown"
    typed = sorted({n for src in cells for n in _numbers(src)} - ALLOWED)
    assert not typed, f"numbers typed into notebook 03's Part A markdown (render them from the records): {typed}"
    counts = [m.group(0) for src in cells for m in K_OF_N.finditer(src)]
    assert not counts, f"seed counts typed into notebook 03's markdown: {counts}"
    nb = json.loads(NB03.read_text())
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "answers.verdicts(RESULTS_DIR)" in code, "notebook 03 must show its verdict from the records (the library)"
    assert "runpy" not in code and "scripts/" not in code and '"scripts"' not in code, "a notebook imports no scripts/"
    assert all("DESIGN.md" not in src for src in cells), "cite docs/design.md, not DESIGN.md"


def test_readme_findings_numbers_come_from_records():
    text = README.read_text()
    section = text.split("## What we found so far", 1)[1].split("\n## ", 1)[0]
    section = render_docs.BLOCK.sub("", section)
    values: list[float] = []
    for path in list((ROOT / "results").rglob("*.json")):
        if path.stat().st_size < 2_000_000:
            values += _leaves(json.loads(path.read_text()))
    missing = []
    for num in _numbers(section):
        d = len(num.split(".")[1])
        x = float(num)
        ok = any(
            round(v, d) == round(x, d) or round(100 * v, d) == round(x, d) or round(-v, d) == round(x, d)
            for v in values
        )
        if not ok:
            missing.append(num)
    assert not missing, f"README findings quote numbers no record holds: {missing}"


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_readme_findings_quote_these_record_values_exactly():
    """The findings bullets outside the generated block, each number against the one value it names (not any
    record's): Theorem 3.2 from notebook 01's record, the SmolLM2 runs and token shares from notebook 03's headline
    and the token histograms."""
    readme = _flat(README.read_text())
    nb01 = json.loads((ROOT / "results" / "notebooks" / "01_gradient_norm_theorem.json").read_text())
    nb03 = json.loads((ROOT / "results" / "notebooks" / "03_toy_runs.json").read_text())
    sp = nb01["spread"]
    lm_hist = json.loads((ROOT / "results" / "toy" / "lm" / "token_hist.json").read_text())
    toy_hist = json.loads((ROOT / "results" / "toy" / "controls" / "token_hist.json").read_text())
    tr0 = next(r for r in nb03["lm_runs"] if r["scheme"] == "tr" and r["seed"] == 0)
    at_u = [f"{100 * v:.1f} %" for v in nb03["lm_weight_at_upper"].values()]
    expected = [
        f"CV {sp['scale/equal']['cv']:.3f} → {sp['scale/tr']['cv']:.3f}",
        f"max/median {sp['scale/equal']['max_over_median']:.2f} → {sp['scale/tr']['max_over_median']:.2f}",
        f"Reverse ({sp['scale/reverse']['cv']:.3f}, {sp['scale/reverse']['max_over_median']:.2f})",
        f"TR-GRPO seed 0: {tr0['answer first 5']:.2f} → {tr0['answer last 5']:.2f}",
        f"{100 * lm_hist['share_between']:.1f} % strictly between L and U, the toy "
        f"{100 * toy_hist['share_between']:.1f} %",
        f"training {' and '.join(at_u)} of them sat at the cap U",
        f"the toy's TR {100 * nb03['toy_tr_weight_at_upper']:.1f} %",
    ]
    stage0 = json.loads((ROOT / "results" / "lm" / "stage0" / "decision.json").read_text())
    rule = yaml.safe_load((ROOT / "results" / "lm" / "stage0" / "plan.yaml").read_text())["accept"]
    lo, hi = rule["sampled_accuracy_before"]
    expected += [  # stage 0's whole rule (lm-leverage block): the accuracy window too, and each candidate's value
        f"sampled accuracy before RL lies in [{lo:.2f}, {hi:.2f}]",
        f"at least {100 * rule['share_between_before_min']:.0f} % of its sampled tokens strictly between L and U "
        f"before RL and at least {100 * rule['share_between_after_min']:.0f} % after the 30-step GRPO probe",
        *(f"{c['id']}: sampled accuracy {c['before']['sampled_accuracy']:.2f}" for c in stage0["candidates"]),
        "every one already failed its accuracy window before RL",
    ]
    assert all(not lo <= c["before"]["sampled_accuracy"] <= hi for c in stage0["candidates"])
    assert stage0["accepted"] is None and "No candidate met the plan's rule" in readme
    assert "sit at the cap U, where TR's weight is" not in readme and "are regulated at all" not in readme
    from trgrpo.reports import tables
    from trgrpo.runs.records import load_results

    stress_plan = yaml.safe_load((ROOT / "results" / "lm" / "stress" / "plan.yaml").read_text())
    st = tables.stress_summary(load_results("lm/stress", ROOT / "results"), stress_plan)
    lr = stress_plan["base"]["learning_rate"]
    expected += [
        f"At lr {lr:.0e}".replace("e-0", "e-") + f" on two-digit addition, {stress_plan['base']['steps']} steps",
        f"TR-GRPO collapsed in {st['collapsed']['tr']} of {st['n']} seeds and GRPO in {st['collapsed']['grpo']} of "
        f"{st['n']} ({st['both']} pairs both, {st['only tr']} TR-GRPO only; Fisher's exact test "
        f"p = {st['fisher_p']:.2f})",
        f"Four pairs can only detect a total contrast (p = {st['p_total']:.3f})",
        f"a single collapse short of that gives p = {st['p_one_short']:.3f}",
    ]
    assert st["n"] == 4 and st["only grpo"] == 0 and st["neither"] == 0  # the sentence's wording fits these counts
    missing = [e for e in expected if e not in readme]
    assert not missing, f"README findings differ from the records: expected {missing}"
    lm = [json.loads(p.read_text()) for p in sorted((ROOT / "results" / "toy" / "lm").glob("arith-*.json"))]
    for scheme, name in (("equal", "GRPO"), ("tr", "TR-GRPO")):
        after = " and ".join(
            f"{r['final']['accuracy']:.2f}" for r in sorted(lm, key=lambda r: r["seed"]) if r["scheme"] == scheme
        )
        assert f"{after} under {name}" in readme, (scheme, after)


def test_notebook08_types_no_result():
    """Notebook 08's markdown names no result: every number of the page is rendered by its code cells."""
    nb = json.loads((ROOT / "notebooks" / "08_results_vs_paper.ipynb").read_text())
    typed = sorted({n for c in nb["cells"] if c["cell_type"] == "markdown" for n in _numbers("".join(c["source"]))})
    assert not typed, f"numbers typed into notebook 08's markdown: {typed}"


@pytest.mark.slow  # ~20 s on 2 busy cores; the same rendering is compared in process above
def test_the_docs_command_as_make_runs_it_finds_every_block_up_to_date():
    """`make docs` runs `scripts/render_docs.py` in its own process; with --check it writes nothing and exits 0 only
    when every generated block of README.md and docs/*.md equals its rendering from the records."""
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "scripts/render_docs.py", "--check"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]


def test_leverage_and_power_sentences_quote_independent_recomputations():
    """The lm-leverage block's reading of the records, recomputed here from the raw files (numpy; scipy's chi-square
    only for σ_d's interval): the projection coefficient c and (U − c)/(U − L) from the per-token samples, the share
    of tokens with advantage 0, the three 'strictly between' samplings, the two GRPO replicates, stage 0's untouched
    add3, the lowest batch's angle, σ_d's chi-square interval, the floor pairs and the time outside training."""
    import numpy as np
    from scipy.stats import chi2

    readme = _flat(README.read_text())
    res = ROOT / "results"
    lo_w, up_w = 1.0, 1.4  # the probes' (L, U): checked against their specs below
    expected = []
    for key in ("add2", "toy"):
        rec = json.loads((res / "leverage" / f"probe-{key}.json").read_text())
        assert (rec["spec"]["lower"], rec["spec"]["upper"]) == (lo_w, up_w), rec["spec"]
        z = np.load(res / "leverage" / f"tokens-{key}.npz")
        c, down, zero = {}, {}, {}
        for when in ("before", "after"):
            g = z[f"{when}_grad_cosine"] * z[f"{when}_grad_norm_tr"] / z[f"{when}_grad_norm_grpo"]
            c[when] = g.mean()
            down[when] = 100 * (up_w - g.mean()) / (up_w - lo_w)
            zero[when] = 100 * np.mean(z[f"{when}_advantage"] == 0)
        expected += [
            f"c = {c['before']:.2f} → {c['after']:.2f} of GRPO's, so (U − c)/(U − L) = {down['before']:.1f} % → "
            f"{down['after']:.1f} % of GRPO's gradient",
            f"{zero['before']:.1f} % → {zero['after']:.1f} % of the tokens have advantage 0",
        ]
        low = min(z["before_grad_cosine"].min(), z["after_grad_cosine"].min())
        if key == "toy":
            expected.append(f"the toy {low:.4f} ({np.degrees(np.arccos(low)):.1f}°, beside the bound's 9.6°)")
        if key == "add2":
            w = z["before_weight"]
            between = 100 * np.mean((w > lo_w + 1e-6) & (w < up_w - 1e-6))
            s0 = json.loads((res / "lm" / "stage0" / "decision.json").read_text())["candidates"]
            hist = json.loads((res / "toy" / "lm" / "token_hist.json").read_text())
            expected.append(
                f"{between:.1f} % of this sample, {100 * s0[0]['before']['share_between']:.1f} % of stage 0's, "
                f"{100 * hist['share_between']:.1f} % of notebook 03's"
            )
            probe0 = json.loads((res / "lm" / "stage0" / "probe-add2.json").read_text())
            assert (probe0["seed"], probe0["steps"]) == (rec["seed"], rec["steps"])
            expected.append(
                f"reached greedy held-out accuracy {probe0['final']['accuracy']:.2f} and {rec['final']['accuracy']:.2f}"
            )
    add3 = json.loads((res / "lm" / "stage0" / "probe-add3.json").read_text())
    assert all(h["reward"] == 0 for h in add3["history"])
    s0 = {c["id"]: c for c in json.loads((res / "lm" / "stage0" / "decision.json").read_text())["candidates"]}
    share = s0["add3"]["before"]["share_between"]
    assert s0["add3"]["after"]["share_between"] == share
    expected.append(f"model before; {100 * (0.25 - share):.2f} points short of the 25 % clause")
    over = []
    for folder, n_pairs in (("toy/lm", 2), ("lm/stress", 4)):
        recs = [json.loads(p.read_text()) for p in sorted((res / folder).glob("*.json"))]
        recs = [r for r in recs if r.get("kind") == "run" and r.get("task") == "arith"]
        over += [r["wall_time_s"] - r["train_time_s"] for r in recs]
        acc = {(r["scheme"], r["seed"]): r["final"]["accuracy"] for r in recs}
        d = np.array([acc[("tr", s)] - acc[("equal", s)] for s in range(n_pairs)])
        sd, df = d.std(ddof=1), n_pairs - 1
        lo, hi = sd * np.sqrt(df / chi2.ppf(0.975, df)), sd * np.sqrt(df / chi2.ppf(0.025, df))
        expected.append(f"σ_d between {lo:.3f} and {hi:.3g} (95 % chi-square interval on {df} degree")
        expected.append(f"point {sd:.3f}")
        if folder == "lm/stress":
            floor = sum(max(acc[("tr", s)], acc[("equal", s)]) <= 0.01 for s in range(n_pairs))
            expected.append(f"a floor effect: {floor} of its {n_pairs} pairs both ended at accuracy ≤ 0.01")
    expected.append(f"evaluation and set-up add {min(over):.0f}–{max(over):.0f} s a run")
    missing = [e for e in expected if _flat(e) not in readme]
    assert not missing, f"README's lm-leverage block differs from the records: expected {missing}"
    for stale in ("shared prefixes", "a guide, not a guarantee", "σ_d = 0.", "100-step run takes"):
        assert stale not in readme, stale


def test_first_order_sentence_quotes_an_independent_recomputation():
    """The lm-first-order block (issue 46 section 2 A): the primary <grad J, u_TR - u_GRPO> with its 95 % t-interval,
    GRPO's own first-order gain and TR's fresh-state row at the Bonferroni level, recomputed from the record's
    per-batch samples (numpy and scipy's t quantile; the library uses scipy's ttest_rel)."""
    import numpy as np
    import yaml
    from scipy.stats import t as student

    readme = _flat(README.read_text())
    path = ROOT / "results" / "first_order" / "analysis-add2.json"
    if not path.exists():
        assert "_Not measured yet._" in readme
        return
    rec = json.loads(path.read_text())
    plan = yaml.safe_load((ROOT / "results" / "first_order" / "plan.yaml").read_text())
    assert rec["plan"] == plan and rec["git_dirty"] is False  # the committed plan, a clean tree
    (step,) = plan["decision"]["primary_checkpoints"]
    batches = next(c for c in rec["checkpoints"] if c["step"] == step)["batches"]
    n_other = sum(2 if c["batches"] and "diff_state" in c["batches"][0]["tr"] else 1 for c in rec["checkpoints"])
    n_other = n_other * (len(plan["schemes"]) - 1) - 1

    def interval(d, level):
        d = np.asarray(d)
        half = student.ppf(1 - (1 - level) / 2, d.size - 1) * d.std(ddof=1) / np.sqrt(d.size)
        return f"{d.mean():+.4f} [{d.mean() - half:+.4f}, {d.mean() + half:+.4f}]"

    expected = [
        interval([b["tr"]["diff_state"] for b in batches], 0.95) + " nats (95 % t-interval, n = " + str(len(batches)),
        f"⟨∇J, u_GRPO⟩ = {np.mean([b['equal']['dot_state'] for b in batches]):+.4f}",
        "TR − GRPO is " + interval([b["tr"]["diff_fresh"] for b in batches], 1 - 0.05 / n_other),
        f"Bonferroni over the {n_other} rows besides the primary",
    ]
    missing = [e for e in expected if _flat(e) not in readme]
    assert not missing, f"README's lm-first-order block differs from the record: expected {missing}"


def test_pilot_sentence_quotes_an_independent_recomputation():
    """The lm-pilot block (issue 46 section 2 B): TR - GRPO of final P(correct) and greedy accuracy with their 95 %
    t-intervals, sigma_d with its chi-square range and the minimum detectable effect, recomputed from the per-run
    records (runs.jsonl, paired here by name) with numpy and scipy's t, chi-square and noncentral t; the runs ran the
    committed plan's runs at the commit that added it, from a clean tree."""
    import subprocess

    import numpy as np
    from scipy import optimize, stats

    readme = _flat(README.read_text())
    folder = ROOT / "results" / "first_order" / "pilot"
    if not (ROOT / "results" / "first_order" / "analysis-pilot.json").exists():
        assert "_Not run yet._" in readme
        return
    plan = yaml.safe_load((ROOT / "results" / "first_order" / "pilot_plan.yaml").read_text())
    runs = {r["name"]: r for r in map(json.loads, (folder / "runs.jsonl").read_text().splitlines())}
    added = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%H", "--", "results/first_order/pilot_plan.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.split()
    for r in runs.values():
        assert r["git_dirty"] is False and r["git_commit"] in added, r["name"]
        assert {k: r["spec"][k] for k in plan["base"]} == plan["base"], r["name"]
    seeds = [s for s in plan["seeds"] if f"grpo-seed{s}" in runs and f"tr-seed{s}" in runs]
    n = len(seeds)
    step0 = json.loads((folder / "step0.json").read_text())
    expected = [f"{n} seed pair{'s' * (n != 1)} (seeds", f"P(correct) {step0['p_correct']:.4f}"]
    expected.append(f"same {step0['n']} held-out problems")
    first = {name: r["history"][0]["reward"] for name, r in runs.items()}
    same = sum(first[f"grpo-seed{s}"] == first[f"tr-seed{s}"] for s in seeds)
    expected.append(f"the step-1 reward is the same in both arms in {same} of {n} pairs")
    lacking = [f"{a}-seed{s}" for s in plan["seeds"] for a in ("grpo", "tr") if f"{a}-seed{s}" not in runs]
    if lacking and n >= 2:
        expected.append("Not run, for time: " + ", ".join(lacking) + ".")
    if n >= 2:
        for metric, f in (("p_correct", "+.4f"), ("accuracy", "+.3f")):
            d = np.array([runs[f"tr-seed{s}"]["final"][metric] - runs[f"grpo-seed{s}"]["final"][metric] for s in seeds])
            half = stats.t.ppf(0.975, n - 1) * d.std(ddof=1) / math.sqrt(n)
            expected.append(f"{d.mean():{f}} [{d.mean() - half:{f}}, {d.mean() + half:{f}}]")
            if metric == "p_correct":
                sd = d.std(ddof=1)
                lo, hi = (
                    sd * math.sqrt((n - 1) / stats.chi2.ppf(0.975, n - 1)),
                    sd * math.sqrt((n - 1) / stats.chi2.ppf(0.025, n - 1)),
                )
                crit = stats.t.ppf(0.975, n - 1)

                def power(delta, crit=crit):  # both tails of the noncentral t, effect in units of sigma_d
                    nc = delta * math.sqrt(n)
                    return stats.nct.sf(crit, n - 1, nc) + np.nan_to_num(stats.nct.cdf(-crit, n - 1, nc)) - 0.8

                mde = optimize.brentq(power, 1e-6, 30) * sd
                expected += [f"σ_d (the sd of the pair differences) {sd:.4f}", f"{lo:.4f}–{hi:.4f} (95 %, chi-square)"]
                expected.append(f"80 % power is {mde:.4f}")
                gate = plan["decision"]["gate_sigma_d"]
                expected.append(f"Gate σ_d ≤ {gate:g}: " + ("passed" if sd <= gate else "failed"))
    missing = [e for e in expected if _flat(e) not in readme]
    assert not missing, f"README's lm-pilot block differs from the records: expected {missing}"


def _readme_block(text: str, name: str) -> str:
    return _flat(re.search(rf"<!-- {name}:start[^>]*-->(.*?)<!-- {name}:end -->", text, re.S).group(1))


def test_the_answer_first_quotes_only_what_the_blocks_below_quote():
    """The README's answer first (bottom-line) repeats numbers and verdicts; each number is one the toy-findings,
    lm-first-order and lm-pilot blocks quote (each pinned to its records by the tests above), each verdict is theirs,
    and the paper-scale claims read as notebook 08's verdict rows."""
    from trgrpo.reports import answers

    text = README.read_text()
    top = _readme_block(text, "bottom-line")
    below = {name: _readme_block(text, name) for name in ("toy-findings", "lm-first-order", "lm-pilot")}
    quoted = set(_numbers(" ".join(below.values())))
    assert _numbers(top) and not set(_numbers(top)) - quoted, set(_numbers(top)) - quoted
    for verdict in (
        "no detectable difference",
        "lower",
        "no difference detected",
        "no difference detected at this scale",
    ):
        assert f": {verdict}" in top  # the toy's two arms (Holm), first order, the pilot
    assert "no difference detected at this scale" in below["lm-first-order"] + below["lm-pilot"]
    for row in answers.verdicts(ROOT / "results"):
        if row["claim"] in ("Table 1", "Table 2", "Table 3"):
            assert f"{row['claim']}: {row['verdict']}" in top
