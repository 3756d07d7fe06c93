"""``make docs``: render every generated block of README.md and docs/{syllabus,gpu,cost}.md from the records.

A block is the text between ``<!-- NAME:start ... -->`` and ``<!-- NAME:end -->``; :data:`BLOCKS` says what renders
each NAME. The numbers and tables come from the library (:mod:`trgrpo.reports.tables`, :mod:`course.workbooks`,
:mod:`trgrpo.runs.bench`, :mod:`trgrpo.runs.plan`); the sentences around them are written here, none typed by hand.
``tests/integration/test_quoted_numbers.py`` keeps the committed files equal to :func:`render`. ``--check``: exit 1 when
a file is stale, write nothing.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from course import workbooks  # noqa: E402
from trgrpo.arms import label  # noqa: E402
from trgrpo.files import RESULTS_DIR  # noqa: E402
from trgrpo.reports import answers, tables  # noqa: E402
from trgrpo.reports.tables import delta_text, row_mde  # noqa: E402
from trgrpo.runs import bench, plan, toy_grid  # noqa: E402
from trgrpo.runs.records import RECORD_SCHEMA, RecordError, read_json, read_record, record_path  # noqa: E402
from trgrpo.runs.toy_controls import CONTROL_SEEDS, CONTROLS_GROUP, KL_BETAS, KL_GROUP, KL_WEIGHTINGS, TAU_GROUP  # noqa: E402
from trgrpo.stats import num  # noqa: E402

README = ROOT / "README.md"
SYLLABUS = ROOT / "docs" / "syllabus.md"
GPU_PAGE = ROOT / "docs" / "gpu.md"
COST_PAGE = ROOT / "docs" / "cost.md"
DESIGN = ROOT / "docs" / "design.md"
BLOCK = re.compile(r"(<!-- (?P<name>[\w-]+):start.*?-->\n)(?P<body>.*?)(<!-- (?P=name):end -->)", re.S)


# ---------------------------------------------------------------------------------------------------------------
# The toy's verdict (README toy-findings block, notebook 03 Part A): paper Section 4.3, Tables 4 and 7


def _read(group: str, name: str, results_dir: Path | str | None, role: str | None = None) -> dict | None:
    return read_json(record_path(group, name, results_dir), role)


def _p(row: dict) -> float | None:
    """The Holm-adjusted p (the raw p where there is no family)."""
    return row.get("p_holm", row.get("p"))


def classify(row: dict) -> str:
    """:func:`trgrpo.reports.answers.versus` of a summary row: its Holm-adjusted p (the raw p where no family)."""
    return answers.versus(row["delta_vs_equal"], _p(row))


def versus(row: dict, other: str = "GRPO") -> str:
    c = classify(row)
    return f"no detectable difference from {other}" if c == "no detectable difference" else f"{c} than {other}"


def strength(row: dict) -> str:
    """How strong the evidence for a difference is, from the Holm-adjusted p."""
    p = _p(row)
    if p is None or not math.isfinite(p):
        return "no test"
    for bound, word in ((0.01, "strong evidence"), (0.05, "evidence"), (0.1, "weak evidence")):
        if p < bound:
            return word
    return f"no evidence of a difference; MDE {num(row_mde(row))}"


def fmt_delta(row: dict) -> str:
    """``"Δ +0.012 [−0.010, +0.034], p = 0.27 (Holm 0.81); 7 higher, 4 lower, 1 tie of 12 (...)"``."""
    ties, holm = row["ties"], row.get("p_holm")
    htxt = "" if holm is None else f" (Holm {num(holm, '.2g')})"
    return (
        f"Δ {delta_text(row)}{htxt}; "
        f"{row['higher']} higher, {row['lower']} lower, {ties} tie{'s' if ties != 1 else ''} of {row['n_pairs']} "
        f"({strength(row)})"
    )


def made_of(rows: dict) -> str:
    """What TR's effect is made of: its scale (const), its regulation (tr_norm), both, neither or inconclusive."""
    scale, reg, tr = rows.get("const-surrogate"), rows.get("tr_norm-surrogate"), rows.get("tr-surrogate")
    if not (scale and reg and tr):
        return "not decided (an arm is missing)"
    mde_ = max((x for x in (row_mde(scale), row_mde(reg), row_mde(tr)) if x is not None), default=math.nan)
    n = tr["n_pairs"]
    parts = [name for name, r in (("scale", scale), ("regulation", reg)) if classify(r) != "no detectable difference"]
    if not parts and classify(tr) == "no detectable difference":
        return (
            f"neither: TR (surrogate) itself shows no detectable difference from GRPO, and neither does its scale "
            f"alone (const) or its regulation alone (tr_norm); at n = {n} seeds an effect smaller than about "
            f"{num(mde_)} would go unseen (80 % power at the Holm level α = 0.05 / {tr.get('family_size', 1)})"
        )
    if not parts:
        return (
            f"inconclusive: TR (surrogate) is {versus(tr)}, but neither its scale alone (const) nor its regulation "
            f"alone (tr_norm) differs detectably from GRPO (MDE about {num(mde_)} at n = {n})"
        )
    return (
        " and ".join(parts)
        + f" (const: {versus(scale)}; tr_norm: {versus(reg)}; TR (surrogate): {versus(tr)}; n = {n} seeds)"
    )


def kl_sentence(kl: dict, results_dir: Path | str | None = None) -> str:
    """Reading 3 (Eq. 10 vs Eq. 12 vs Eq. 6) from the KL grid's summary."""
    parts = []
    for beta, block in sorted(kl["by_beta"].items(), key=lambda kv: -float(kv[0])):
        kr = {r["arm"]: r for r in block["kl_steps_41_60"]}
        ar = {r["arm"]: r for r in block["accuracy"]}
        if "plain" not in kr or len(kr) < 2:
            continue
        txt = [
            f"β = {beta} ({kr['plain']['n']} seeds): mean KL over steps 41–60 "
            + ", ".join(f"{k} {num(kr[k]['mean'], '.2g')}" for k in KL_WEIGHTINGS if k in kr)
        ]
        for k in ("eq10", "outside"):
            if k in kr and "delta_vs_equal" in kr[k]:
                txt.append(
                    f"{k} − plain: KL {delta_text(kr[k], '+.2g')}, accuracy {delta_text(ar[k])} "
                    f"({ar[k]['higher']} higher, {ar[k]['lower']} lower, {ar[k]['ties']} tied)"
                )
        parts.append("; ".join(txt))
    if not parts:
        return "The KL grid has not run yet."
    means = {(b, r["arm"]): r["mean"] for b, blk in kl["by_beta"].items() for r in blk["kl_steps_41_60"] if r["n"]}
    lo_b, hi_b = f"{min(KL_BETAS):g}", f"{max(KL_BETAS):g}"
    if (lo_b, "eq10") in means and (hi_b, "eq10") in means:
        parts.append(
            f"How much grip the KL term has at all: the same KL under eq10 is {num(means[(hi_b, 'eq10')], '.2g')} "
            f"at β = {hi_b} and {num(means[(lo_b, 'eq10')], '.2g')} at β = {lo_b}"
        )
    grip = tables.kl_grip(results_dir)
    if grip is not None and grip["n"] >= 2:
        lo, hi = grip["ci"]
        parts.append(
            f"Raising β from {lo_b} to {hi_b} moved eq10's KL by {num(grip['mean_diff'], '+.3f')} "
            f"[{num(lo, '+.3f')}, {num(hi, '+.3f')}] (95 % t-interval, {grip['n']} paired seeds)"
            + (
                ": the KL term had no detectable grip on the policy at either β, so these runs cannot tell the three "
                "readings apart"
                if lo <= 0 <= hi
                else ""
            )
        )
    text = ". ".join(parts) + (
        ". Eq. 10's per-token minimum is at π = w·π_ref, not π = π_ref: with w up to 1.4 it pulls every weighted "
        "token's probability above the reference instead of back to it"
    )
    high = kl["by_beta"].get(hi_b)
    eq10 = {r["arm"]: r for r in high["kl_steps_41_60"]}.get("eq10") if high else None
    if eq10 and "ci_low" in eq10:
        verdict = classify(eq10)
        text += (
            f"; at β = {hi_b} the plain KL under eq10 is {verdict} than under plain (Eq. 6)"
            if verdict != "no detectable difference"
            else f"; at β = {hi_b} the runs show no detectable difference in the plain KL from Eq. 6"
        )
    return text + "."


def tau_sentence(tau: dict) -> str:
    rows = [r for r in tau["rows"] if "delta_vs_equal" in r]
    cells = [f"τ = {r['arm'].split('tau')[-1] if 'tau' in r['arm'] else '9'}: {delta_text(r)}" for r in rows]
    n = rows[0]["n_pairs"] if rows else 0
    return (
        f"Δ vs GRPO on the same {n} seeds: " + "; ".join(cells) + ". τ = 0.5 was not run: σ(0.5·p) keeps every "
        "weight at L = 1, so that run is GRPO's."
    )


def toy_verdict(results_dir: Path | str | None = None) -> str:
    """The toy's verdict, every number from the summaries and records: README block and notebook 03 text."""
    from trgrpo.weights import weight_range

    s = _read(CONTROLS_GROUP, "summary", results_dir, "controls_summary")
    if s is None:
        return "_No controls summary yet: run `trgrpo toy run controls`, then `summary`._"
    rows = {r["arm"]: r for r in s["rows"]}
    cost = s["cost"]
    cpu_min = (cost["runs_cpu_s"] + cost["warm_cpu_s"]) / 60
    commits = ", ".join(c[:7] for c in s["provenance"]["commits"])
    planned = len(CONTROL_SEEDS)
    short = (
        f" ({planned} planned: the rest did not fit the session's share of the shared CPU; the grid resumes)"
        if rows["equal"]["n"] < planned
        else ""
    )
    added = [label(a) for a in (_read(CONTROLS_GROUP, "plan", results_dir) or {}).get("added_arms", {})]
    added_text = f" Added after the first five arms' results, with the same plan and seeds: {', '.join(added)}."
    out = [
        f"**Toy controls** (notebook 03, Part A): a {cost['n_runs']}-run grid, the 1M-parameter Qwen2 on 2-digit "
        f"`{s['task']}`, {rows['equal']['n']} seeds × {cost['steps_per_run'][0]} steps per arm{short}, paired by seed "
        f"(same warm start, same data order); primary metric fixed before the runs: {s['primary_metric']}. "
        f"Paired t-tests against GRPO, Holm over the {len(rows) - 1} arms; CPU time of the grid "
        f"{cpu_min:.0f} min (one thread, shared 2-core VM; commit {commits}, clean tree: "
        f"{s['provenance']['dirty'] == ['False']})." + (added_text if added else ""),
        "",
        tables.controls_table(s),
        "",
    ]
    hist = _read(CONTROLS_GROUP, "token_hist", results_dir)
    if hist:
        share = ", ".join(f"`{t}` {h['share_between']:.1%}" for t, h in hist.get("candidates", {}).items())
        out.append(
            f"- **Task choice.** Share of sampled tokens with L < w < U on the warm-start policy: {share}; "
            f"the rest sits at the bounds (`{hist['task']}`: {hist['share_at_lower']:.1%} at L, "
            f"{hist['share_at_upper']:.1%} at U). The grid runs the task with the largest share."
        )
    if "tr-ratio" in rows:
        runs = toy_grid.load_runs(results_dir, group=CONTROLS_GROUP)
        ratio = [r for r in runs if toy_grid.run_label(r) == "tr-ratio"]
        rows_zero = tables.zero_grad_table({"tr-ratio": ratio}, ["tr-ratio"])  # "pos": the share of A > 0 tokens
        zero_grad = rows_zero[0]["pos"] if rows_zero else math.nan  # no tr-ratio runs beside the summary
        out.append(
            f"- **Reading 2 (where w enters the clip).** TR with w inside the clipped ratio (Eq. 9 as printed): "
            f"{fmt_delta(rows['tr-ratio'])} — {versus(rows['tr-ratio'])}"
            f"; {zero_grad:.1%} of the tokens with A > 0 get no policy gradient (mean over "
            f"steps). With w outside the clip (surrogate): {fmt_delta(rows['tr-surrogate'])}."
        )
    if "const-surrogate" in rows and "tr_norm-surrogate" in rows:
        out.append(
            f"- **Scale vs regulation.** const (TR's batch-mean weight on every token): "
            f"{fmt_delta(rows['const-surrogate'])}. tr_norm (TR's weights divided by their batch mean): "
            f"{fmt_delta(rows['tr_norm-surrogate'])}. Reverse (2 − w): {fmt_delta(rows['reverse-surrogate'])}. "
            f"**What TR-GRPO's effect at this scale is made of: {made_of(rows)}.**"
        )
        clip = tables.clip_of(toy_grid.load_runs(results_dir, group=CONTROLS_GROUP), "equal")
        if clip["n_steps"]:
            out.append(
                f"- **What this optimiser setting can test.** The gradient is clipped to norm "
                f"{clip['max_grad_norm']:g} before each AdamW step; GRPO's pre-clip norm was above it on "
                f"{clip['share_clipped']:.1%} of its {clip['n_steps']} steps (median {clip['median_norm']:.2g}), and "
                "AdamW divides by a running gradient scale as well. A constant rescaling of the loss is therefore "
                'undone by construction: `const` cannot show a scale effect here, and "neither scale nor '
                "regulation\" is a statement about this optimiser setting, not about TR-GRPO's weights in general."
            )
    kl = _read(KL_GROUP, "summary", results_dir, "kl_summary")
    if kl:
        out.append("- **Reading 3 (Eq. 10 vs Eq. 12 vs Eq. 6, TR surrogate).** " + kl_sentence(kl, results_dir))
    tau = _read(TAU_GROUP, "summary", results_dir, "tau_summary")
    lo, hi = weight_range(tau_mode="divide")
    out.append(
        f"- **Reading 1 (how τ enters Eq. 11).** As printed, σ(p/τ) at τ = 9 gives weights in [{lo:g}, {hi:g}]: "
        "TR-GRPO would be GRPO exactly, so that reading needs no run (and contradicts Table 7's spread of scores). "
        + ("τ sweep under σ(τ·p): " + tau_sentence(tau) if tau else "The τ sweep has not run yet.")
    )
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------------------------
# The real-LM question (README lm-leverage block, notebooks 03 Part B and 08): stage 0's whole rule, how far TR can
# turn an update (bound and measurement), and what a powered comparison would need


def _share(x: float) -> str:
    return f"{100 * x:.1f} %"


def stage0_sentence(results_dir: Path | str | None = None) -> str:
    """Stage 0's rule, all its clauses, and what each candidate measured against them."""
    root = Path(results_dir or RESULTS_DIR)
    rows = answers.stage0_checks(root)
    if rows is None:
        return "_Stage 0 has no decision yet (`trgrpo lm stage0 results/lm/stage0/plan.yaml`)._"
    acc, before, after = rows[0]["checks"]
    steps = read_record(root / "lm" / "stage0" / f"probe-{rows[0]['id']}.json")["steps"]
    rule = (
        f"accept the first candidate whose sampled accuracy before RL lies in [{acc['low']:.2f}, {acc['high']:.2f}] "
        f"(room to learn), with at least {100 * before['low']:.0f} % of its sampled tokens strictly between L and U "
        f"before RL and at least {100 * after['low']:.0f} % after the {steps}-step GRPO probe"
    )

    def untouched(r: dict) -> str:  # a probe whose every reward was 0 had zero gradient: its model did not move
        if any(h.get("reward") for h in read_record(root / "lm" / "stage0" / f"probe-{r['id']}.json")["history"]):
            return ""
        short = 100 * (r["checks"][1]["low"] - r["checks"][1]["value"])
        return (
            " (every reward of the probe was 0, so every advantage and gradient was 0 and the model after is the "
            + (f"model before; {short:.2f} points short of the {100 * before['low']:.0f} % clause)")
        )

    per = "; ".join(
        f"{r['id']}: sampled accuracy {r['checks'][0]['value']:.2f}, strictly between L and U "
        f"{_share(r['checks'][1]['value'])} → {_share(r['checks'][2]['value'])}{untouched(r)}"
        + (" (accepted)" if r["accepted"] else f", failing {sum(not c['ok'] for c in r['checks'])} of 3 clauses")
        for r in rows
    )
    accepted = [r["id"] for r in rows if r["accepted"]]
    window = all(not r["checks"][0]["ok"] for r in rows)
    end = (
        f"Accepted: {', '.join(accepted)}."
        if accepted
        else "No candidate met the plan's rule"
        + (", and every one already failed its accuracy window before RL, whatever the shares" if window else "")
        + ", so the controlled GRPO vs TR-GRPO comparison this plan gates was not run."
    )
    return (
        "**Where TR-GRPO can act on SmolLM2-135M-Instruct** (the real-LM experiment's calibration, stage 0: plan "
        "`results/lm/stage0/plan.yaml` fixed before its runs, records beside it, notebook 03 Part B). The plan's "
        f"whole rule: {rule}. Measured: {per}. {end}"
    )


def leverage_sentence(results_dir: Path | str | None = None) -> str:
    """How far TR can turn one update: the orthogonal bound and the measured shares and gradient cosines."""
    root = Path(results_dir or RESULTS_DIR)
    (b14, b0515) = answers.leverage_bounds()
    bound = (
        f"With w in [L, U] and mutually orthogonal token gradients, cos(g_GRPO, g_TR) ≥ 2√(LU)/(L + U): "
        f"{b14['cosine']:.3f} ({b14['degrees']:.1f}°) at the paper's (L, U) = ({b14['lower']:g}, {b14['upper']:g}), "
        f"{b0515['cosine']:.3f} ({b0515['degrees']:.1f}°) at Table 7's ({b0515['lower']:g}, {b0515['upper']:g})"
    )
    recs = answers.leverage_records(root)

    def greedy(rec: dict) -> str:
        start, end = (rec.get("initial") or {}).get("accuracy"), rec["final"].get("accuracy")
        return "greedy held-out accuracy " + (f"{start:.2f} → " if start is not None else "after: ") + f"{end:.2f}"

    if not recs:
        return f"**How far TR-GRPO can turn one update.** {bound}. _No measurement yet (`results/leverage/`)._"
    proj = answers.leverage_projection(root)
    parts = []
    for key, rec in recs.items():
        lev = rec["leverage"]
        b, a = lev["before"], lev["after"]
        m = rec["machine"]

        def both(key: str, b=b, a=a) -> str:
            return f"{_share(b[key])} → {_share(a[key])}"

        parts.append(
            f"{answers.LEVERAGE_RUNS[key]} (`results/leverage/probe-{key}.json`, {b['n_tokens']} → {a['n_tokens']} "
            f"sampled tokens of {lev['measure']['n_prompts']} prompts × {lev['measure']['samples_per_prompt']}, "
            f"before RL → after {rec['steps']} GRPO steps ({greedy(rec)}), seed {rec['seed']}, "
            f"{m.get('torch_threads')} thread of a "
            f"{m.get('cpu_count')}-core CPU, commit {str(rec['git_commit'])[:7]}, clean tree: "
            f"{rec['git_dirty'] is False}): tokens with w < U are {both('share_tokens_below_upper')} of the tokens "
            f"and carry {both('share_one_minus_p_below_upper')} of Σ(1 − p) and "
            f"{both('share_logit_grad_norm_below_upper')} of "
            f"Σ‖e_k − π‖; the actual parameter gradients of GRPO and TR-GRPO on the same rollouts "
            f"({b['grad_batches']} batches of one training step each) have cosine {b['grad_cosine_min']:.4f}–"
            f"{b['grad_cosine_max']:.4f} (mean {b['grad_cosine_mean']:.4f}) → {a['grad_cosine_min']:.4f}–"
            f"{a['grad_cosine_max']:.4f} (mean {a['grad_cosine_mean']:.4f})"
            + (
                f"; TR's gradient projected on GRPO's is c = {proj[key]['before']['c']:.2f} → "
                f"{proj[key]['after']['c']:.2f} of GRPO's, so (U − c)/(U − L) = {_share(proj[key]['before']['down'])}"
                f" → {_share(proj[key]['after']['down'])} of GRPO's gradient is down-weighted relative to the cap; "
                f"{_share(proj[key]['before']['zero_adv'])} → {_share(proj[key]['after']['zero_adv'])} of the "
                "tokens have advantage 0"
                if key in proj
                else ""
            )
        )
    below = [
        f"{answers.LEVERAGE_RUNS[k].split(',')[0]} {low:.4f} ({math.degrees(math.acos(low)):.1f}°, beside the bound's "
        f"{b14['degrees']:.1f}°)"
        for k, r in recs.items()
        if (low := min(r["leverage"][w]["grad_cosine_min"] for w in ("before", "after"))) < b14["cosine"]
    ]
    c_text = ""
    if proj:
        c_text = (
            " Σ(1 − p) is not the gradient: c = cos(g_GRPO, g_TR)·|g_TR|/|g_GRPO| (mean over the batches) is a "
            "weighted mean of w (weights g_GRPO·g_t/|g_GRPO|², summing to 1; no orthogonality needed), and the share "
            "of GRPO's gradient TR down-weights relative to the cap is (U − c)/(U − L), about half the share of "
            "Σ(1 − p) below U."
        )
    h, s0 = read_json(root / "toy" / "lm" / "token_hist.json"), {r["id"]: r for r in answers.stage0_checks(root) or []}
    if h and "add2" in s0 and "add2" in proj:
        c_text += (
            f" SmolLM2's tokens strictly between L and U before RL: {_share(proj['add2']['before']['between'])} of "
            f"this sample, {_share(s0['add2']['checks'][1]['value'])} of stage 0's, {_share(h['share_between'])} of "
            f"notebook 03's (separate samplings of {h['n_prompts']} prompts × {h['samples_per_prompt']}, one model)."
        )
    return (
        f"**How far TR-GRPO can turn one update** (notebook 02, section 11; notebook 03, Part B). {bound}. The cap "
        f"U does not make TR one constant: a token at L gets L/U = {b14['lower'] / b14['upper']:.2f} of a capped "
        "token's weight, the largest relative down-weighting Eq. 11 applies, and a token's gradient scales with "
        "1 − p (Theorem 3.1). Measured: "
        + "; ".join(parts)
        + "."
        + c_text
        + (
            f" Below the orthogonal bound: {', '.join(below)} (lowest batch). Identical (context, token) pairs get "
            "the same w and cannot push the cosine below the bound; correlated gradients of different tokens with "
            "different weights and advantages of opposite signs can, and without orthogonality there is no bound "
            "(the cosine can reach −1)."
            if below
            else " Every measured cosine lies above the orthogonal bound."
        )
        + " These are cosines of raw gradients: under AdamW with gradient clipping an update is rescaled per "
        "coordinate, so they do not say how far TR turns an update, nor that one TR update is a small turn."
    )


def power_sentence(results_dir: Path | str | None = None) -> str:
    """What a powered GRPO vs TR-GRPO comparison on SmolLM2 would need, from the records."""
    p = answers.power_sizing(results_dir or RESULTS_DIR)
    if not p["designs"]:
        return "_No paired SmolLM2 runs to size a comparison from._"
    e5, e3 = answers.POWER_EFFECTS

    def pr(d: dict, e: float) -> str:
        lo, hi = d["pairs_range"][e]
        return f"{lo}–{hi}" if hi is not None else f"{lo} to over 100,000"

    def floor(d: dict) -> str:
        n = d["both_floor"]
        return f"; a floor effect: {n} of its {d['n_pairs']} pairs both ended at accuracy ≤ {answers.FLOOR:g}" * bool(n)

    per = "; ".join(
        f"{d['design']} (`results/{d['folder']}/`: {d['n_pairs']} pairs, {d['n_eval']} held-out items, "
        f"{d['steps']} steps): σ_d between {d['sd_ci'][0]:.3f} and {d['sd_ci'][1]:.3g} (95 % chi-square interval on "
        f"{d['n_pairs'] - 1} degree{'s' if d['n_pairs'] > 2 else ''} of freedom, point {d['sd_diff']:.3f}{floor(d)})"
        f", so {pr(d, e5)} pairs for {100 * e5:.0f} points and {pr(d, e3)} for {100 * e3:.0f}"
        for d in p["designs"]
    )
    rep = p["replicates"]
    anchor = (
        f" A better anchor for the noise: two GRPO probes of one configuration and seed (SmolLM2 add2, seed "
        f"{rep['seed']}, {rep['steps']} steps; stage 0 and the leverage record) reached greedy held-out accuracy "
        f"{rep['accuracy'][0]:.2f} and {rep['accuracy'][1]:.2f}."
        if rep
        else ""
    )
    o0, o1 = p["overhead_s"] or (math.nan, math.nan)
    h0, h1 = p["hours_per_100"]
    best = min(p["designs"], key=lambda d: d["sd_diff"])
    c5, c3 = best["cpu_hours"][e5], best["cpu_hours"][e3]
    return (
        "**What a powered GRPO vs TR-GRPO comparison on SmolLM2 would need** (from the records; σ_d: sample standard "
        "deviation of the paired final held-out accuracy TR − GRPO; seed pairs for 80 % power in a two-sided paired "
        f"t-test at α = 0.05, exact noncentral t): {per}.{anchor} One 100-step run trains for {h0:.2f}–{h1:.2f} "
        f"CPU hours on one thread (the records' seconds per step, {p['seconds_per_step'][0]:.1f}–"
        f"{p['seconds_per_step'][1]:.1f} s; evaluation and set-up add {o0:.0f}–{o1:.0f} s a run, left out here), so "
        f"even the smaller σ_d's point needs {c5[0]:.0f}–{c5[1]:.0f} CPU hours for {100 * e5:.0f} points and "
        f"{c3[0]:.0f}–{c3[1]:.0f} for {100 * e3:.0f} (two runs a pair): out of reach of a shared 2-core machine. "
        "One GPU changes that arithmetic; `scripts/device_grid.py` is the grid prepared as one device job. It was "
        "not run: no GPU was lent to the session that wrote it, so no GPU time is quoted here."
    )


def bottom_line(results_dir: Path | str | None = None) -> str:
    """The README's answer first (issue 46): what the toy shows, what SmolLM2 shows, what only the paper's scale can
    show, each from the record the blocks below quote in full."""
    root = Path(results_dir or RESULTS_DIR)
    s = _read(CONTROLS_GROUP, "summary", results_dir, "controls_summary")
    fo, pl = (read_json(root.joinpath(*parts)) for parts in (tables.FIRST_ORDER, tables.PILOT))
    if s is None or fo is None or pl is None:
        return "_Not all of the toy controls, the first-order measurement and the pilot have records yet._"
    rows = {r["arm"]: r for r in s["rows"]}
    tr, ratio = rows["tr-surrogate"], rows["tr-ratio"]
    prim = next(r for r in fo["summary"]["rows"] if r["primary"])
    pc = pl["summary"]["p_correct"]
    paper_rows = [c.evaluate(c, root) for c in answers.CLAIMS if c.name in ("Table 1", "Table 2", "Table 3")]
    return (
        f"**The answer so far.** On the toy (notebook 03, Part A: a 1M-parameter model, {tr['n_pairs']} paired seeds), "
        f"TR-GRPO with its weight outside the clip against GRPO: {classify(tr)}, Δ held-out accuracy "
        f"{delta_text(tr)}, where an effect above {tr['mde_family']:.3f} would have been seen (80 % power at the Holm "
        f"level); with "
        f"the weight inside the clip, as Eq. 9 is printed: {classify(ratio)}, Δ {delta_text(ratio)}. On "
        f"SmolLM2-135M-Instruct early in training, where the optimiser acts (one AdamW step, to first order: "
        f"{prim['mean']:+.4f} [{prim['ci95'][0]:+.4f}, {prim['ci95'][1]:+.4f}] nats of mean log P(correct) a step, "
        f"n = {prim['n']} batches): "
        f"{prim['verdict']}; after {pl['plan']['base']['steps']} steps ({pl['n_pairs']} paired seeds, final "
        f"P(correct) {pc['mean_diff']:+.4f} [{pc['ci'][0]:+.4f}, {pc['ci'][1]:+.4f}]): {pl['primary']['verdict']}. "
        "Both are small designs; their scale and power are below. What only the paper's scale can show, its "
        "models trained to the end on its tasks: "
        + "; ".join(f"{v['claim']}: {v['verdict']}" for v in paper_rows)
        + ". Notebook 08 answers claim by claim."
    )


def lm_leverage() -> str:
    """The README's lm-leverage block: stage 0's rule, the leverage, the power sizing."""
    return "\n".join(f"- {t}" for t in (stage0_sentence(), leverage_sentence(), power_sentence()))


# ---------------------------------------------------------------------------------------------------------------
# The course's times (README first screen, syllabus) and the cost table (README)


DIFFICULTIES = ("easy", "medium", "hard")


def exercise_meta(cell) -> dict:
    """An exercise statement's ``metadata.course``: ``difficulty`` and ``minutes`` (a student's time); a ``ValueError``
    names a missing or malformed field."""
    meta = cell.get("metadata", {}).get("course", {})
    if meta.get("difficulty") not in DIFFICULTIES:
        raise ValueError(f"metadata.course.difficulty must be one of {DIFFICULTIES}, got {meta.get('difficulty')!r}")
    if not isinstance(meta.get("minutes"), int) or meta["minutes"] <= 0:
        raise ValueError(f"metadata.course.minutes must be a positive int, got {meta.get('minutes')!r}")
    return {"difficulty": meta["difficulty"], "minutes": meta["minutes"]}


def _minutes(row: dict | None) -> str:
    if row is None:
        return "—"
    if not row["ok"]:
        return "failed"
    return f"{row['wall_s']:.0f} s" if row["wall_s"] < 120 else f"{row['wall_s'] / 60:.1f} min"


def times_table(record: dict) -> str:
    """The syllabus' time table (markdown) from a ``notebook_times.json`` record."""
    by_name = {Path(r["notebook"]).name: r for r in record["rows"]}
    lines = ["| notebook | mode | notebook time | solutions time |", "|---|---|---|---|"]
    for name, row in by_name.items():
        if "_solutions" not in name:
            sol = by_name.get(name.replace(".ipynb", "_solutions.ipynb"))
            lines.append(f"| {Path(name).stem} | {row['mode']} | {_minutes(row)} | {_minutes(sol)} |")
    return "\n".join(lines)


def readme_times_table(record: dict) -> str:
    """The README's first-screen table: each notebook, its first heading and its measured time."""
    by_name = {Path(r["notebook"]).name: r for r in record["rows"]}
    lines = ["| notebook | what | time on a 2-core CPU |", "|---|---|---|"]
    for path in workbooks.main_notebooks():
        title = workbooks.read(path).cells[0].source.splitlines()[0].lstrip("# ").split(" — ", 1)[-1].strip()
        row = by_name.get(path.name)
        when = "—" if row is None else f"{_minutes(row)} ({row['mode']})"
        lines.append(f"| [{path.stem[:2]}](notebooks/{path.name}) | {title} | {when} |")
    return "\n".join(lines)


def exercises_table() -> str:
    """The syllabus' list of exercises (markdown), read from the notebooks' ``exercise`` cells."""
    lines = ["| exercise | kind | difficulty | time | title | notebook |", "|---|---|---|---|---|---|"]
    for path in workbooks.main_notebooks():
        for cell in workbooks.read(path).cells:
            if (ex := workbooks.exercise_heading(cell)) is None:
                continue
            meta = exercise_meta(cell)
            lines.append(
                f"| {ex['id']} | {ex['kind']} | {meta['difficulty']} | {meta['minutes']} min | "
                f"{ex['title']} | {path.stem} |"
            )
    return "\n".join(lines)


def _times_record() -> dict | None:
    return read_json(workbooks.TIMES_PATH, "course_times")


def readme_times() -> str:
    rec = _times_record()
    return (
        f"{readme_times_table(rec)}\n\nTimes measured {rec['measured_at']} by `trgrpo course times` "
        f"(commit {str(rec.get('git_commit'))[:10]}); details in the syllabus."
    )


def syllabus_times() -> str:
    rec = _times_record()
    m = rec["machine"]
    return (
        f"{times_table(rec)}\n\nMeasured {rec['measured_at']} by `trgrpo course times`, one notebook "
        f"at a time, on the project's CPU machine ({m.get('cpu_count', '?')} cores, "
        f"{m.get('processor') or m.get('platform', '?')}; no GPU), commit {str(rec.get('git_commit'))[:10]}"
        f"{' with uncommitted changes' if rec.get('dirty') else ''}."
    )


def _pct(r: float | None) -> str:
    return "n/a" if r is None else f"{(r - 1) * 100:+.1f}%"


def _cell(s: dict | None, fmt: str = "{:.2f}", scale: float = 1.0, ratio: dict | None = None) -> str:
    """``median [min–max]`` of a summary, then ``(ratio median [min, max])`` when given."""
    if not s or s.get("median") is None:
        return "n/a"
    m, lo, hi = (fmt.format(s[k] * scale) for k in ("median", "min", "max"))
    out = m if s["n"] == 1 else f"{m} [{lo}–{hi}]"
    if ratio and ratio.get("median") is not None:
        out += f" ({_pct(ratio['median'])} [{_pct(ratio['min'])}, {_pct(ratio['max'])}])"
    return out


def bench_records(results_dir: Path | str = bench.RESULTS_DIR) -> dict[str, dict]:
    """The benchmark records present in ``results_dir`` (keys: step, loss, pair)."""
    out = {}
    for name in ("step", "loss", "pair/step"):
        if rec := read_json(Path(results_dir) / f"{name}.json", "bench_loss" if name == "loss" else "bench_step"):
            out[name.replace("/step", "")] = rec
    return out


PHASE_LABELS = {
    "step": "training step",
    "rollout": "rollout (generate + reward + ref log-probs)",
    "loss_forward": "loss forward (policy forward + loss)",
    "policy_forward": "policy forward (log-probs)",
    "loss_head": "loss head (weights + loss + metrics)",
    "backward": "backward",
    "loss_backward": "loss forward + backward",
    "other": "optimizer + rest",
}


def paper_table() -> str:
    """Paper Table 8, TR-GRPO's change against GRPO in brackets."""
    from trgrpo.paper import TABLE8

    models = {"Qwen2.5-3B": "Qwen2.5-3B-Instruct", "LLaMa3.1-8B": "LLaMa3.1-8B-Instruct"}
    lines = ["| Procedure | " + " | ".join(f"{m} {x}" for m in models for x in ("GRPO", "TR-GRPO")) + " |"]
    lines.append("|---|" + "---:|" * 2 * len(models))
    for col, name in (
        ("train_time_per_sample_min", "Training time / sample (minutes)"),
        ("peak_gpu_memory_gb", "Peak GPU memory (GB)"),
    ):
        cells = []
        for model in models.values():
            grpo, tr = (TABLE8.value(col, model=model, method=m) for m in ("GRPO", "TR-GRPO"))
            cells += [f"{grpo}", f"{tr} ({_pct(tr / grpo)})"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def step_table(step: dict, phases=bench.STEP_PHASES) -> str:
    """A step record's table: s/step per phase, clock and variant with its change against GRPO (TRL); peak memory;
    TR-GRPO's own cost (its loss head minus GRPO's, as a share of GRPO's step)."""
    vs = step["variants"]
    lines = ["| phase | " + " | ".join(r["label"] for r in vs.values()) + " |", "|---|" + "---:|" * len(vs)]

    def row(title: str, get, ratio, fmt: str = "{:.4g}", scale: float = 1.0) -> None:
        cells = [_cell(get(r), fmt, scale, None if v == "grpo_trl" else ratio(r)) for v, r in vs.items()]
        lines.append(f"| {title} | " + " | ".join(cells) + " |")

    for phase in phases:
        for m, clock in bench.CLOCKS.items():
            get, ratio = (lambda r, p=phase, m=m: r["phases"][p][m]), (lambda r, p=phase, m=m: r["ratio_vs_grpo"][p][m])
            row(f"{PHASE_LABELS[phase]}, {clock} (s)", get, ratio)
    for key, name, fmt, scale in (
        ("peak_rss", "peak RSS during training (MiB)", "{:.0f}", 1),
        ("cuda_peak", "peak GPU memory (GB)", "{:.2f}", 1 / 1024),
    ):
        if f"{key}_mb" in vs["grpo_trl"]:
            row(name, lambda r, k=key: r.get(f"{k}_mb"), lambda r, k=key: r["ratio_vs_grpo"].get(k), fmt, scale)
    share = [
        _cell(r.get("loss_head_added_share", {}).get("cpu"), "{:+.3f}%", 100) if v != "grpo_trl" else "0 (baseline)"
        for v, r in vs.items()
    ]
    lines.append(
        "| TR-GRPO's own cost: loss head minus GRPO's, share of GRPO's step (process CPU) | " + " | ".join(share) + " |"
    )
    return "\n".join(lines)


def loss_table(loss: dict) -> str:
    """A loss record's table: ms per forward + backward per variant, paired ratios, MiB saved for backward."""
    vars_ = list(loss["cases"][0]["variants"]) if loss["cases"] else []
    ratios = [("tr_ratio", "equal"), ("tr_surrogate", "equal"), ("tr_ratio", "grpo_trl")]
    head = [
        "B x T",
        "dtype",
        *(loss["cases"][0]["variants"][v]["label"] for v in vars_),
        *(f"{a} / {b}" for a, b in ratios),
    ]
    lines = ["| " + " | ".join(head) + " | saved for backward (MiB) |", "|---|---|" + "---:|" * (len(head) - 1)]
    for case in loss["cases"]:
        V = case["variants"]
        cells = [_cell(V[v]["ms"]["cpu"]) for v in vars_]
        for a, b in ratios:
            r = V.get(a, {}).get(f"ratio_vs_{b}")
            c, w = (r or {}).get("cpu"), (r or {}).get("wall")
            cells.append(f"{c['median']:.3f} [{c['min']:.3f}–{c['max']:.3f}] / {w['median']:.3f}" if c else "n/a")
        saved = ", ".join(f"{v} {V[v]['saved_mb']:.1f}" for v in vars_)
        lines.append(f"| {case['batch']} x {case['length']} | {case['dtype']} | " + " | ".join(cells) + f" | {saved} |")
    return "\n".join(lines)


def _bench_ours(step: dict) -> str:
    c = step["config"]
    return (
        f"Ours: `{Path(str(step['model'])).name}` on {step['device']}, {c['prompts_per_step']} prompt x "
        f"{c['num_generations']} completions of at most {c['max_completion_length']} tokens per step, "
        f"{c['steps']} measured steps after {c['warmup_steps']} warm-up, {c['repeats']} repeats per variant, "
        f"rollouts identical across variants: {step['rollouts_identical']}. Cells: median [min–max] over "
        "repeats; in brackets: the change against GRPO (TRL), median [min, max] of the paired per-repeat "
        "ratios. The paper's unit is minutes per sample on 8 GPUs; ours is seconds per step on a CPU. "
        "'TR-GRPO code, w = 1' computes TRL's loss (equal to float precision, tests/trgrpo/test_trainer.py): its "
        "change against GRPO (TRL), and that of phases with identical work (rollout, policy forward), is the "
        "noise floor of the end-to-end comparison; the loss-head rows measure the loss directly."
    )


def _bench_pair(pair: dict, phases) -> str:
    names = ", ".join(r["label"] for r in pair["variants"].values())
    return (
        f"### A longer run of fewer variants ({names}): {pair['config']['repeats']} repeats, same settings "
        f"otherwise (`--variants ... --repeats ... --out results/bench/pair`)\n\n{step_table(pair, phases)}"
    )


def _machine_line(rec: dict) -> str:
    m, v = rec.get("machine", {}), rec.get("versions", {})
    dev = m.get("gpu") or f"{m.get('cpu_model') or m.get('processor') or '?'} ({m.get('cpu_count', '?')} cores)"
    return (
        f"Machine: {dev}, torch threads {m.get('torch_threads')}, load average {m.get('load_average')}; torch "
        f"{v.get('torch')}, transformers {v.get('transformers')}, trl {v.get('trl')}; commit "
        f"{str(rec.get('git_commit'))[:10]}, {rec.get('created')}; runtime {rec['runtime_s']:.0f} s."
    )


README_PHASES = ("step", "loss_backward", "loss_head")


def cost_table() -> str:
    """The README's cost table: paper Table 8, then ours (:mod:`trgrpo.runs.bench`'s records, the phases that
    matter)."""
    res = bench_records()
    parts = ["## Cost of TR-GRPO against GRPO (paper Table 8, App. C.2)", paper_table()]
    if "step" in res:
        parts += [_bench_ours(res["step"]), step_table(res["step"], README_PHASES)]
    if "pair" in res:
        parts.append(_bench_pair(res["pair"], README_PHASES))
    return "\n\n".join(parts)


def plan_table() -> str:
    """The README's table of the full-scale plans (memory and time from the planner)."""
    lines = [
        "| plan | GPUs | runs | peak GB per GPU | h per run | h in all | disk GB (every run's checkpoint) | fits |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in plan.readme_rows():
        lo, hi = (round(h, 1) for h in r["hours_per_run"])
        h = f"{lo:.1f}" if lo == hi else f"{lo:.1f}-{hi:.1f}"
        fits = "yes" if r["change"] is None else f"no: {r['change']}"
        lines.append(
            f"| `{r['plan']}` | {r['gpus']} x {r['gpu']} {r['gpu_mem_gb']:.1f} GB, {r['engine']} | "
            f"{r['runs']} | {r['peak_gb']:.0f} | {h} | {r['hours']:.0f} | {r['disk_gb']:.0f} | {fits} |"
        )
    return "\n".join(lines)


def bench_table() -> str:
    """``results/bench/table.md``: every table of the benchmark records, with the method and the machine."""
    res = bench_records()
    step, loss, pair = res.get("step"), res.get("loss"), res.get("pair")
    parts = ["## Cost of TR-GRPO against GRPO (paper Table 8, App. C.2)", paper_table()]
    if step:
        parts += ["### Training step by phase (s/step)", _bench_ours(step), step_table(step)]
        parts += [f"Method: `trgrpo bench` (its docstring). {_machine_line(step)}"]
    if pair:
        parts.append(_bench_pair(pair, bench.STEP_PHASES))
    if loss:
        goal = loss.get("goal_ratio_vs_equal", 1.10)
        parts += [
            f"### The loss alone: forward + backward, ms per call (process CPU), on {loss['device']}",
            f"Goal: TR-GRPO at most {goal:.2f}x the same computation with w = 1 ('equal'). Ratio columns: median "
            "[min–max] of per-block paired ratios (process CPU); wall-clock ratio after the slash. Inputs: "
            "`trgrpo.runs.bench.loss_inputs`; the CPU heap kept freed memory (`trgrpo.runs.bench.steady_allocator`), "
            "as a GPU caching allocator would.",
            loss_table(loss),
            _machine_line(loss),
        ]
    return "\n\n".join(parts) + "\n"


def record_table() -> str:
    """design.md's record table, from trgrpo/record.schema.json: each field, its JSON type, what it holds."""
    required = set(RECORD_SCHEMA["then"]["required"])
    rows = ["| field | type | required | meaning |", "|---|---|---|---|"]
    for name, field in RECORD_SCHEMA["properties"].items():
        kind = field.get("type") or ("const " + json.dumps(field["const"]) if "const" in field else "")
        kind = kind or {"#/$defs/steps": "array of step rows", "#/$defs/evaluation": "object"}.get(field.get("$ref"))
        kind = kind or " or ".join(o.get("type") or "object" for o in field["oneOf"])
        kind = " or ".join(kind) if isinstance(kind, list) else kind
        rows.append(f"| `{name}` | {kind} | {'yes' if name in required else ''} | {field['description']} |")
    return "\n".join(rows)


BLOCKS = {
    DESIGN: {"record-table": record_table},
    README: {
        "bottom-line": bottom_line,
        "course-times": readme_times,
        "toy-findings": toy_verdict,
        "lm-leverage": lm_leverage,
        "lm-first-order": lambda: f"- {tables.first_order_text()}",
        "lm-pilot": lambda: f"- {tables.pilot_text()}",
    },
    GPU_PAGE: {"plan": plan_table},
    COST_PAGE: {"bench": cost_table},
    SYLLABUS: {"times": syllabus_times, "exercises": exercises_table},
}


def render(path: Path, text: str | None = None) -> str:
    """``path``'s text (or ``text``) with each of its blocks rendered anew."""
    renderers = BLOCKS[path]
    text = path.read_text() if text is None else text
    missing = set(renderers) - {m["name"] for m in BLOCK.finditer(text)}
    if missing:
        raise ValueError(f"{path.name} lacks the blocks {sorted(missing)}")
    return BLOCK.sub(lambda m: f"{m.group(1)}{renderers[m['name']]()}\n{m.group(4)}", text)


def main(argv: list[str] | None = None) -> int:
    check = "--check" in (argv if argv is not None else sys.argv[1:])
    table = bench.RESULTS_DIR / "table.md"
    try:  # every file rendered before any is written
        new = {path: render(path) for path in BLOCKS} | ({table: bench_table()} if table.exists() else {})
        changed = tables.changed_summaries()  # a summary quoted, built from other records than those there now
    except RecordError as e:  # an unreadable record: one line naming the file and the field, nothing written
        print(f"error: {e}", file=sys.stderr)
        return 2
    for path, what in changed.items():  # nothing written
        print(f"stale: {path} was built from other records ({', '.join(what)}); rerun notebook 03", file=sys.stderr)
    if changed:
        return 1
    stale = [path for path, text in new.items() if path.read_text() != text]
    for path in stale if not check else ():
        path.write_text(new[path])
    names = ", ".join(str(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p) for p in stale)
    print(("stale: " if check else "rewrote: ") + names if stale else "up to date")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
