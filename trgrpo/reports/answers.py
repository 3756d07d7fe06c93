"""Does TR-GRPO work? One verdict per claim of the paper, computed from the records under ``results/`` (notebook 08).

Each evaluator returns one row per part of its claim: verdict, strength, evidence, scale and the command that would
test the claim at the paper's scale ("not run yet" when its records are absent). A paired difference between arms is
judged by :func:`judge` (:data:`RULE`): the paper's effect is the margin, the interval is at Holm's first step.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trgrpo import paper, theory
from trgrpo.arms import label
from trgrpo.models import display_name
from trgrpo.reports.metrics import final_metric, group_by
from trgrpo.reports.tables import engines, on_substitute_data, primary_metric, scale_label, variant
from trgrpo.runs import lm_science
from trgrpo.runs.first_order import sd_interval
from trgrpo.runs.records import RecordError, read_json, record_path, run_records
from trgrpo.runs.spec import read_config
from trgrpo.runs.toy_controls import ARMS, EVAL_STEPS
from trgrpo.runs.toy_grid import load_runs, run_label
from trgrpo.stats import delta_ci, family_alpha, holm, mean_std, min_detectable_effect, num, paired_t
from trgrpo.weights import DEFAULTS

NOT_RUN = "not run yet"
VERDICTS = ("reproduced", "partly reproduced", "inconclusive", "not reproduced", "not tested", NOT_RUN)
ALPHA = 0.05  # family-wise, over the parts of one claim

# Oriented so that the paper's effect is positive; an interval "holds" a value when lo <= value <= hi.
RULE: tuple[tuple[str, str], ...] = (
    ("reproduced", "the interval excludes 0 on the paper's side and does not lie below the paper's effect"),
    (
        "partly reproduced",
        "the interval excludes 0 on the paper's side but lies below the paper's effect: the "
        "direction holds, an effect as large as the paper's is excluded",
    ),
    ("inconclusive", "the interval holds both 0 and the paper's effect"),
    (
        "not reproduced",
        "the interval excludes the paper's effect and does not exclude 0 on the paper's side: an "
        "effect as large as the paper's is excluded at this scale (equivalence at that margin)",
    ),
)


def judge(lo: float, hi: float, effect: float | None) -> str:
    """The verdict of :data:`RULE` for the interval [lo, hi] and the paper's effect (its sign is the direction);
    ``effect=None`` (a direction without a number, Figure 1): reproduced, inconclusive or not reproduced by 0 alone."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
        raise ValueError(f"judge needs a finite interval lo <= hi, got [{lo}, {hi}]")
    sign = 1.0 if effect is None or effect >= 0 else -1.0
    lo, hi = sorted((sign * lo, sign * hi))
    if effect is None:
        return "reproduced" if lo > 0 else "not reproduced" if hi < 0 else "inconclusive"
    margin = abs(effect)
    if lo > 0:
        return "reproduced" if hi >= margin else "partly reproduced"
    return "inconclusive" if hi >= margin else "not reproduced"


def versus(delta: float, p: float | None) -> str:
    """An arm against GRPO, in the README's and notebook 08's words: higher / lower when its Holm p < :data:`ALPHA`."""
    significant = p is not None and math.isfinite(p) and p < ALPHA
    return ("higher" if delta > 0 else "lower") if significant else "no detectable difference"


def contrast(treatment: list[float], control: list[float], effect: float | None, m: int) -> dict:
    """A paired difference: mean, 95 % interval, the interval at 1 - ALPHA / m (Holm's first step over the m parts),
    p, sign count, detectable effect at that level (80 % power) and :func:`judge`'s verdict."""
    alpha = family_alpha(m, ALPHA)
    t95 = paired_t(treatment, control)
    tf = paired_t(treatment, control, level=1 - alpha)
    return {
        "n": t95["n"],
        "delta": t95["mean_diff"],
        "ci95": list(t95["ci"]),
        "ci": list(tf["ci"]),
        "level": 1 - alpha,
        "m": m,
        "p": t95["p"],
        "higher": t95["higher"],
        "lower": t95["lower"],
        "ties": t95["ties"],
        "mde": min_detectable_effect(t95["sd_diff"], t95["n"], alpha=alpha),
        "paper_effect": effect,
        "verdict": judge(*tf["ci"], effect),
    }


def leave_one_out(treatment: list[float], control: list[float], effect: float | None, m: int) -> dict[str, int]:
    """How robust a verdict is to one seed: verdict -> in how many of the n leave-one-seed-out contrasts it comes
    out (the verdict of the whole sample first)."""
    out: dict[str, int] = {}
    for i in range(len(treatment)):
        v = contrast(treatment[:i] + treatment[i + 1 :], control[:i] + control[i + 1 :], effect, m)["verdict"]
        out[v] = out.get(v, 0) + 1
    first = contrast(treatment, control, effect, m)["verdict"]
    return dict(sorted(out.items(), key=lambda kv: (kv[0] != first, -kv[1])))


@dataclass(frozen=True)
class Claim:
    """A claim of the paper, the command that would test it at the paper's scale, and its evaluator."""

    name: str
    says: str
    command: str
    evaluate: Callable[[Claim, Path], dict | list[dict]]


def _records(folder: Path, role: str | None = None) -> list[dict]:
    """The run records anywhere under ``folder`` (:func:`trgrpo.runs.records.run_records`, ``role`` as there)."""
    return list(run_records(folder, role).values())


def _row(claim: Claim, verdict: str, strength: str, evidence: str, scale: str, part: str = "", judged=None) -> dict:
    return {
        "claim": claim.name,
        "part": part,
        "paper says": claim.says,
        "our evidence": evidence,
        "scale": scale,
        "verdict": verdict,
        "strength": strength,
        "full-scale command": f"`{claim.command}`",
        "judged": judged,
    }


def _not_run(claim: Claim, what: str) -> dict:
    return _row(claim, NOT_RUN, "none", f"no record ({what})", "—")


def _toy_scale(records: list[dict]) -> str:
    """:func:`~trgrpo.reports.tables.scale_label` ("—" for none), with the warm starts of all the runs' seeds (one each)
    instead of the first record's."""
    if not records:
        return "—"
    steps = sorted({r["warm_start"]["steps"] for r in records if isinstance(r.get("warm_start"), dict)})
    if not steps:
        return scale_label(records)
    first = str(records[0].get("model"))
    span = f"{steps[0]}" if len(steps) == 1 else f"{steps[0]}–{steps[-1]}"
    return scale_label(records).replace(first, f"{first.split(' (')[0]} (one warm start per seed, {span} SFT steps)")


def _cpu_scale(rec: dict) -> str:
    return f"{display_name(rec.get('model'))}, {rec.get('n_tokens')} tokens, CPU"


def _lm_runs(root: Path) -> tuple[list[dict], str]:
    """The SmolLM2 addition runs of results/toy/lm and each one's greedy accuracy before → after (no mean: two
    seeds per scheme cannot rank them)."""
    runs = sorted(
        (r for r in _records(root / "toy" / "lm", "toy_run") if r.get("task") == "arith"),
        key=lambda r: (variant(r), r["seed"]),
    )
    return runs, "; ".join(
        f"{variant(r)} seed {r['seed']} {num((r.get('initial') or {}).get('accuracy'), '.2f')} → "
        f"{num((r['final'] or {}).get('accuracy'), '.2f')}"
        for r in runs
    )


# ---------------------------------------------------------------- one evaluator per claim


def theorem31(claim: Claim, root: Path) -> dict:
    rec = read_json(record_path("notebooks", "01_gradient_norm_theorem", root), "notebook01")
    if rec is None:
        return _not_run(claim, "notebook 01 writes results/notebooks/01_gradient_norm_theorem.json")
    rho, fit = rec["spearman_pi_vs_grad_norm"], rec["fit_c_times_one_minus_pi"]
    evidence = (
        f"{rec['bounds_violations']} violations of the bounds in {rec['bounds_pairs']} random "
        f"distributions; on {rec['n_tokens']} tokens of {display_name(rec['model'])}: "
        f"Spearman(pi, grad norm) = {rho:.2f}, grad norm ~ {num(fit['c'], '.0f')} (1 - pi) "
        f"with R^2 {num(fit['r2'], '.2f')}"
    )
    ok = rec["bounds_violations"] == 0 and rho < -0.5
    strength = "strong (a proof, checked numerically; one small LM)" if ok else "—"
    return _row(claim, "reproduced" if ok else "not reproduced", strength, evidence, _cpu_scale(rec))


def theorem32(claim: Claim, root: Path) -> dict:
    rec = read_json(record_path("notebooks", "01_gradient_norm_theorem", root), "notebook01")
    if rec is None:
        return _not_run(claim, "notebook 01 writes the spread of w * grad norm")
    eq, tr, rev = (rec["spread"][k]["cv"] for k in ("scale/equal", "scale/tr", "scale/reverse"))
    evidence = (
        f"coefficient of variation of w * grad norm: GRPO {eq:.2f}, TR-GRPO {tr:.2f}, Reverse {rev:.2f} "
        f"(Eq. 11 with tau read as a scale); with tau as printed (divide) w = 1 and nothing changes"
    )
    strength = f"moderate (one model, {rec.get('n_tokens')} tokens, one sample)"
    return _row(claim, "reproduced" if tr < eq < rev else "not reproduced", strength, evidence, _cpu_scale(rec))


def _paper_scale_runs(folder: Path) -> list[dict]:
    return [r for r in _records(folder) if not str(r.get("group", "")).startswith("toy")]


def paper_effect(treatment: str, control: str = "equal") -> float:
    """Table 4's average K&K accuracy (Qwen2.5-3B-Instruct) of ``treatment`` minus ``control`` (schemes ``tr``,
    ``equal``, ``reverse``, ``random``, or a tau of Table 7 as ``"tau7"``)."""

    def avg(x: str) -> float:
        return (
            paper.table7_accuracy(tau=float(x[3:]))["avg"] if x[:3] == "tau" else paper.table(4).value("avg", scheme=x)
        )

    return avg(treatment) - avg(control)


def table1(claim: Claim, root: Path) -> dict:
    if runs := _paper_scale_runs(root / "kk"):
        subs = sum(map(on_substitute_data, runs))
        evidence = f"{len(runs)} K&K run record(s) of the trainer" + (f", {subs} on substitute data" if subs else "")
        row = _row(claim, "not tested", "see notebook 08's Table 1 beside the paper", evidence, scale_label(runs))
        return {**row, "engines": engines(runs)}  # two engines: not the same experiment (tables.grad_accumulation)
    runs, per_run = _lm_runs(root)
    if not runs:
        return _not_run(claim, "no K&K run at any scale")
    n_eval = sorted({(r["final"] or {}).get("n") for r in runs} - {None})
    text = (
        f"no K&K run at any scale. The only real-LM runs are SmolLM2-135M-Instruct (model `{runs[0].get('model')}`) "
        f"on two-number addition (results/toy/lm, another task than K&K; {len(runs)} runs of "
        f"{', '.join(map(str, sorted({r['steps'] for r in runs})))} steps): greedy accuracy on "
        f"{', '.join(map(str, n_eval))} held-out pairs before → after: {per_run}. "
        "A pipeline check on a different task, with two seeds per scheme: it cannot rank the schemes"
    )
    return _row(claim, "not tested", "none: no run of the claim's task and model", text, scale_label(runs))


def table2(claim: Claim, root: Path) -> dict:
    runs = _paper_scale_runs(root / "math")
    if not runs:
        return _not_run(claim, "notebook 06 on a GPU server writes results/math/")
    row = _row(claim, "not tested", "see notebook 08's Table 2", f"{len(runs)} math run record(s)", scale_label(runs))
    return {**row, "engines": engines(runs)}


def table3(claim: Claim, root: Path) -> dict:
    rec = read_json(record_path("notebooks", "07_agentic_search", root), "notebook07")
    if rec is None:
        return _not_run(claim, "notebook 07 writes results/notebooks/07_agentic_search.json")
    em, start = rec["em_final"], rec.get("em_start", math.nan)
    evidence = f"exact match {start:.1%} at the start; after {rec.get('steps')} steps: " + ", ".join(
        f"{k} {v:.1%}" for k, v in em.items()
    )
    scale = (
        f"{rec.get('model')} model, {rec.get('steps')} steps x G={rec.get('group_size')}, seeds {rec.get('seeds')}, CPU"
    )
    if not any(v > start for v in em.values()):
        return _row(claim, "not tested", "none (neither arm learned at this scale)", evidence, scale)
    n = len(rec.get("seeds", []))
    verdict = "reproduced" if em.get("TR-GRPO", math.nan) > em.get("GRPO", math.nan) else "not reproduced"
    return _row(claim, verdict, f"moderate ({n} paired seeds)" if n >= 3 else f"weak ({n} seeds)", evidence, scale)


def toy_metrics(root: Path, group: str) -> dict[str, dict[int, float]]:
    """arm label -> seed -> the toy plan's primary metric, from the run records of ``results/<group>``."""
    out: dict[str, dict[int, float]] = {}
    where: dict[tuple, Path] = {}
    for path, r in run_records(Path(root) / group, "toy_run").items():
        if (arm := (run_label(r), r["seed"])) in where:
            raise RecordError(f"{path}: field 'seed' {arm[1]} of arm {arm[0]} again, also in {where[arm]}")
        where[arm] = path
        try:
            value = primary_metric(r)
        except (KeyError, TypeError, ValueError):  # a null or missing value
            value = math.nan
        if not math.isfinite(value) and r.get("steps", 0) >= max(EVAL_STEPS):  # a shorter run (smoke) has none
            raise RecordError(f"{path}: field 'eval_history' lacks a greedy_accuracy at one of the steps {EVAL_STEPS}")
        out.setdefault(run_label(r), {})[r["seed"]] = value
    return out


def _tau_arms(root: Path) -> dict[str, dict[int, float]]:
    """The tau sweep's arms, with tau = 9 (``tr-surrogate``) and GRPO from the controls grid on the sweep's seeds."""
    taus = toy_metrics(root, "toy/tau")
    if not taus:
        return {}
    ctrl = toy_metrics(root, "toy/controls")
    seeds = {s for v in taus.values() for s in v}
    return {**taus, **{a: {s: v for s, v in ctrl.get(a, {}).items() if s in seeds} for a in (TR_ARM, "equal")}}


def _tau_of(arm: str) -> float:
    """The tau of a TR arm label of the tau sweep (``tr-surrogate-tau2`` -> 2; ``tr-surrogate`` -> 9)."""
    return float(arm.rsplit("-tau", 1)[1]) if "-tau" in arm else DEFAULTS.tau


def _paired(metrics: dict[str, dict[int, float]], treatment: str, control: str = "equal") -> tuple[list, list]:
    t, c = metrics.get(treatment, {}), metrics.get(control, {})
    seeds = sorted(set(t) & set(c))
    return [t[s] for s in seeds], [c[s] for s in seeds]


def _toy_parts(claim: Claim, root: Path, group: str, metrics: dict, parts: list[tuple]) -> list[dict]:
    """One row per part ``(name, what, treatment, control, paper effect)``: :func:`contrast`, Holm over the parts."""
    pairs = [_paired(metrics, t, c) for _, _, t, c, _ in parts]
    judged = [contrast(*xy, e, len(parts)) for xy, (*_, e) in zip(pairs, parts)]
    for c, p_adj, xy, (*_, e) in zip(judged, holm([c["p"] for c in judged]), pairs, parts):
        c["p_holm"] = p_adj
        c["leave_one_out"] = leave_one_out(*xy, e, len(parts))
    r = load_runs(root, group=group)[0]
    s = r.get("spec", {})
    rows = []
    for (part, what, *_), c in zip(parts, judged):
        scale = (
            f"toy: {str(r.get('model')).split(' (')[0]}, 2-digit {r.get('task')}, {r.get('steps')} steps x "
            f"{s.get('prompts_per_step', '?')} prompts x {s.get('num_generations', '?')}, {c['n']} paired seeds, "
            f"CPU (results/{group}); not the paper's Qwen2.5-3B on K&K"
        )
        evidence = (
            f"{what}: Δ {delta_ci(c['delta'], *c['ci95'])} (95 %), at {c['level']:.1%}: "
            f"[{c['ci'][0]:+.4f}, {c['ci'][1]:+.4f}] vs the paper's {c['paper_effect']:+.2f}; Holm p "
            f"{c['p_holm']:.2g}; {c['higher']} higher / {c['lower']} lower / {c['ties']} tied"
        )
        loo = ", ".join(f"{v} in {k} of {c['n']}" for v, k in c["leave_one_out"].items())
        evidence += f"; leaving one seed out: {loo}"
        strength = f"{c['n']} paired seeds; MDE {c['mde']:.3f} (80 % power at α = {ALPHA:g}/{c['m']})"
        rows.append(_row(claim, c["verdict"], strength, evidence, scale, part=part, judged=c))
    return rows


# Table 4's parts: TR (surrogate, the reading of the prose) against one arm, judged with that scheme's paper effect
TABLE4_PARTS = (
    ("TR > GRPO", "equal", "equal"),
    ("TR > Reverse", "reverse-surrogate", "reverse"),
    ("TR > Random", "random", "random"),
)
TR_ARM = "tr-surrogate"


def table4(claim: Claim, root: Path) -> list[dict] | dict:
    metrics = toy_metrics(root, "toy/controls")
    if not metrics:
        return _not_run(claim, "trgrpo toy run controls writes results/toy/controls/")
    if TR_ARM not in metrics:
        return _not_run(claim, f"no {TR_ARM} runs in results/toy/controls/")
    parts = [(n, f"{TR_ARM} − {a}", TR_ARM, a, paper_effect("tr", s)) for n, a, s in TABLE4_PARTS if a in metrics]
    rows = _toy_parts(claim, root, "toy/controls", metrics, parts)
    missing = [n for n, a, _ in TABLE4_PARTS if a not in metrics]
    return rows + [_row(claim, NOT_RUN, "none", "no record of that arm", "—", part=n) for n in missing]


def table7(claim: Claim, root: Path) -> list[dict] | dict:
    """Each tau of the toy sweep minus GRPO on the same seeds, judged against Table 7's own tau - GRPO."""
    arms = _tau_arms(root)
    if not arms:
        return _not_run(claim, "trgrpo toy run tau writes results/toy/tau/")
    taus = sorted((_tau_of(a), a) for a in arms if a != "equal")
    parts = [(f"τ = {t:g} > GRPO", f"τ = {t:g} − GRPO", a, "equal", paper_effect(f"tau{t:g}")) for t, a in taus]
    return _toy_parts(claim, root, "toy/tau", arms, parts)


def forest_rows(results_dir: Path | str) -> list[dict]:
    """Every toy arm's paired difference to GRPO (controls grid, then tau sweep): :func:`contrast` without a verdict,
    with the paper's effect of that arm where it has one (Tables 4, 7)."""
    root = Path(results_dir)
    paper_of = {TR_ARM: "tr", "tr-ratio": "tr"} | {a: scheme for _, a, scheme in TABLE4_PARTS}
    ctrl, taus = toy_metrics(root, "toy/controls"), _tau_arms(root)
    families = (
        ("toy/controls", ctrl, [a for a in ARMS if a != "equal" and a in ctrl]),
        ("toy/tau", taus, sorted((a for a in taus if a not in ("equal", TR_ARM)), key=_tau_of)),  # tau 9: controls
    )
    out = []
    for group, metrics, arms in families:
        for a in arms:
            scheme = paper_of.get(a) if group == "toy/controls" else f"tau{_tau_of(a):g}"
            c = contrast(*_paired(metrics, a), paper_effect(scheme) if scheme else None, len(arms))
            c.pop("verdict")  # an arm against GRPO is not a claim of the paper
            out.append({"group": group, "arm": a, "label": label(a), **c})
    return out


def table4_at(results_dir: Path | str, m: int) -> dict[str, list[float]]:
    """Table 4's parts (TR − arm on the same seeds) with the interval at 1 − ALPHA / m instead of the verdict's level:
    e.g. the forest plot's, Holm's first step over its family's m arms."""
    metrics = toy_metrics(Path(results_dir), "toy/controls")
    parts = [(part, arm) for part, arm, _ in TABLE4_PARTS if TR_ARM in metrics and arm in metrics]
    return {part: contrast(*_paired(metrics, TR_ARM, arm), None, m)["ci"] for part, arm in parts}


def table8(claim: Claim, root: Path) -> dict:
    """``make bench``'s step record, as :func:`trgrpo.runs.bench.aggregate_step_runs` stored it: TR-GRPO's own work
    (its loss head minus GRPO's, process CPU) as a share of GRPO's step, and the paired step and memory ratios."""
    rec = read_json(record_path("bench", "step", root), "bench_step")
    if rec is None:
        return _not_run(claim, "make bench writes results/bench/step.json")
    variants = rec["variants"]
    tr = variants["tr_ratio"] if "tr_ratio" in variants else next(v for k, v in variants.items() if k.startswith("tr"))
    own, step = tr["loss_head_added_share"]["cpu"]["median"], tr["ratio_vs_grpo"]["step"]["cpu"]
    evidence = (
        f"TR-GRPO's own work {own:+.3%} of a GRPO step (process CPU); whole step x{step['median']:.3f} "
        f"[{step['min']:.3f}-{step['max']:.3f}], peak memory x{tr['ratio_vs_grpo']['peak_rss']['median']:.3f} "
        f"over {step['n']} repeats; this tests 'costs little' (TR's own work under 6 % of a step, the step and "
        "memory ratios beside it), not the paper's +5-6 % training time itself"
    )
    scale = f"{display_name(rec['model'])} on {rec['device']}, {rec['config']['steps']} steps per run"
    strength = f"moderate (small cost measured directly; {step['n']} repeats, CPU noise)"
    return _row(claim, "reproduced" if own < 0.06 else "not reproduced", strength, evidence, scale)


def figure1(claim: Claim, root: Path) -> dict:
    """Notebook 04's count of structural items, high end minus low end. The token level (planned first) gives the
    verdict (:func:`judge` without margin, on the prompt-level cluster interval when recorded); the whole-word level
    was added after a null token result and is reported as exploratory, Holm-adjusted over the two levels."""
    rec = read_json(record_path("notebooks", "04_token_probabilities", root), "notebook04")
    levels = (rec or {}).get("claim", {})
    if "token" not in levels:
        return _not_run(claim, "notebook 04 writes results/notebooks/04_token_probabilities.json")
    names = [k for k in ("token", "word") if k in levels]
    p_adj = dict(zip(names, holm([levels[k]["p_fisher_greater"] for k in names])))

    def part(k: str) -> str:
        c = levels[k]
        return (
            f"{k}s: {c['k_high']}/{c['n_high']} structural at the high end vs {c['k_low']}/{c['n_low']} at the "
            f"low end, difference {delta_ci(c['difference'], *c['difference_ci'], spec='+.2f')} (95 %), Fisher p "
            f"{c['p_fisher_greater']:.2g} (Holm over the levels {p_adj[k]:.2g})"
        )

    cluster = rec.get("cluster") or {}
    ci = cluster["token"]["ci"] if "token" in cluster else levels["token"]["difference_ci"]
    verdict = judge(*ci, None)
    evidence = part("token") + " — the planned test"
    if cluster:
        ct = cluster["token"]
        evidence += (
            f"; with the prompt as the unit (cluster bootstrap over {ct['n_prompts']} prompts, {ct['n_boot']} "
            f"resamples, {ct['level']:.1%} intervals): "
            + ", ".join(f"{k}s [{c['ci'][0]:+.2f}, {c['ci'][1]:+.2f}]" for k, c in cluster.items())
        )
    # the same design, sampled before
    first = read_json(record_path("notebooks", "04_token_probabilities_sample1", root), "notebook04")
    if first and "token" in (first.get("cluster") or {}):
        lo, hi = first["cluster"]["token"]["ci"]
        earlier = judge(lo, hi, None)
        evidence += (
            f"; the first sample of the same design (same {first.get('n_prompts')} prompts, other completions) gave "
            f"tokens [{lo:+.2f}, {hi:+.2f}]: {earlier}"
        )
        if earlier != verdict:
            evidence += "; the two samples disagree, so at this n the verdict is inconclusive"
            verdict = "inconclusive"
    if "word" in levels:
        evidence += (
            "; " + part("word") + " — exploratory: the word level and the one-third ends were added after "
            "the token-level result came out null, and the items are word types from one sample of "
            f"{rec.get('n_prompts')} prompts (the prompt, not the type, is the unit of independence)"
        )
    return _row(
        claim,
        verdict,
        f"weak (one small model, {rec.get('n_tokens')} tokens, {rec.get('n_prompts')} prompts)",
        evidence,
        _cpu_scale(rec),
        part="planned: tokens",
        judged={"ci": list(ci), "paper_effect": None, "verdict": verdict},
    )


def verdicts(results_dir: Path | str) -> list[dict]:
    """One row per part of each claim of :data:`CLAIMS`, in order; a record that cannot be read raises
    :class:`RecordError` (one line naming the file and the field), another fault gives "not tested"."""
    rows = []
    for claim in CLAIMS:
        try:
            out = claim.evaluate(claim, Path(results_dir))
        except RecordError:
            raise
        except (KeyError, TypeError, ValueError, StopIteration) as exc:
            out = _row(
                claim, "not tested", "none", f"records present but unreadable ({type(exc).__name__}: {exc})", "—"
            )
        rows += out if isinstance(out, list) else [out]
    return rows


def toy_extras(results_dir: Path | str) -> list[dict]:
    """The science runs beside the claims: toy KL variants, tau sweep and SmolLM2 Part B runs (run by run)."""
    root = Path(results_dir)
    # each KL weighting at each beta apart: they share the run label tr-surrogate
    keys = {"kl": lambda r: f"{r['spec']['kl_weighting']}-beta{float(r['spec']['beta']):g}", "tau": run_label}
    out = []
    for sub, what in (
        ("kl", "KL weighting variants (Eq. 6 / 10 / 12)"),
        ("tau", "tau sweep (Table 7)"),
        ("lm", "SmolLM2-135M-Instruct on two-number addition (notebook 03, Part B)"),
    ):
        runs = _records(root / "toy" / sub, "toy_run")
        row = {"runs": what, "folder": f"results/toy/{sub}/", "result": NOT_RUN, "scale": _toy_scale(runs)}
        if sub == "lm" and runs:  # no mean that would invite a ranking
            row["result"] = _lm_runs(root)[1]
        elif runs:
            parts = []
            for name, rs in sorted(group_by(runs, keys[sub]).items()):
                m, s, n = mean_std(final_metric(r, "greedy_accuracy") for r in rs)
                parts.append(f"{name} {m:.3f}" + (f" ± {s:.3f}" if n > 1 else "") + f" (n={n})")
            row["result"] = "; ".join(parts)
        out.append(row)
    return out


CHECKS = ("Theorem 3.1", "Theorem 3.2", "Table 8")  # checks with their own criterion, not paired differences


def summary_line(rows: list[dict]) -> str:
    """'paired claims: 2 partly reproduced, 3 not run yet, ...; checks (theorems, cost): 3 reproduced' over the rows."""

    def counts(sel: list[dict]) -> str:
        c = {v: sum(r["verdict"] == v for r in sel) for v in VERDICTS}
        return ", ".join(f"{n} {v}" for v, n in c.items() if n) or "none"

    paired = [r for r in rows if r["claim"] not in CHECKS]
    checks = [r for r in rows if r["claim"] in CHECKS]
    return f"paired claims: {counts(paired)}; checks (theorems, cost): {counts(checks)}"


# ---------------------------------------------------------------- the real-LM question: stage 0, leverage, power

LEVERAGE_GROUP = "leverage"
LEVERAGE_RUNS = {"add2": "SmolLM2-135M-Instruct, two-digit addition", "toy": "the toy, 2-digit addition"}


def stage0_checks(results_dir: Path | str) -> list[dict] | None:
    """Stage 0's decision with the plan's rule clause by clause (:func:`trgrpo.runs.lm_science.rule_checks`) per
    candidate: ``[{"id", "accepted", "checks": [...]}]``; None without the records."""
    root = Path(results_dir) / "lm" / "stage0"
    decision, plan = read_json(root / "decision.json"), (root / "plan.yaml")
    if decision is None or not plan.exists():
        return None
    rule_plan = read_config(plan, "plan")
    return [
        {"id": c["id"], "accepted": c["accepted"], "checks": lm_science.rule_checks(rule_plan, c)}
        for c in decision["candidates"]
    ]


def leverage_records(results_dir: Path | str) -> dict[str, dict]:
    """id -> the leverage record (``results/leverage/probe-<id>.json``) of each run of :data:`LEVERAGE_RUNS` there."""
    root = Path(results_dir) / LEVERAGE_GROUP
    return {k: rec for k in LEVERAGE_RUNS if (rec := read_json(root / f"probe-{k}.json")) is not None}


def leverage_projection(results_dir: Path | str) -> dict[str, dict[str, dict]]:
    """id -> moment ("before", "after") -> numbers from the stored per-token samples (``tokens-<id>.npz``):
    ``c``, the mean over the gradient batches of cos(g_GRPO, g_TR)·|g_TR|/|g_GRPO|, TR's gradient projected on
    GRPO's in units of GRPO's (a weighted mean of w, the weights g_GRPO·g_t/|g_GRPO|² summing to 1, of any sign);
    ``down``, (U − c)/(U − L), the share of GRPO's gradient TR down-weights relative to the cap U; ``zero_adv``, the
    share of the sampled tokens with advantage 0; ``between``, the share with L < w < U (1e-6 from each bound)."""
    import numpy as np

    lo, up = DEFAULTS.lower, DEFAULTS.upper
    out: dict[str, dict[str, dict]] = {}
    for k in leverage_records(results_dir):
        path = Path(results_dir) / LEVERAGE_GROUP / f"tokens-{k}.npz"
        if not path.exists():
            continue
        z = np.load(path)
        out[k] = {}
        for when in ("before", "after"):
            c = float(np.mean(z[f"{when}_grad_cosine"] * z[f"{when}_grad_norm_tr"] / z[f"{when}_grad_norm_grpo"]))
            w = z[f"{when}_weight"]
            out[k][when] = {
                "c": c,
                "down": (up - c) / (up - lo),
                "zero_adv": float(np.mean(z[f"{when}_advantage"] == 0)),
                "between": float(np.mean((w > lo + 1e-6) & (w < up - 1e-6))),
            }
    return out


def leverage_bounds() -> list[dict]:
    """The least cosine between GRPO's and TR's update with orthogonal token gradients, at the paper's (L, U) and
    Table 7's widest range, with its angle in degrees."""
    out = []
    for lo, up in ((DEFAULTS.lower, DEFAULTS.upper), paper.TABLE7_LU[-1]):
        c = theory.kantorovich_cosine(lo, up)
        out.append({"lower": lo, "upper": up, "cosine": c, "degrees": math.degrees(math.acos(c))})
    return out


def pairs_for_power(sd_diff: float, effect: float) -> int:
    """The least number of seed pairs n (up to 100,000) whose two-sided paired t-test at 5 % detects a mean
    difference ``effect`` with 80 % power: the least n whose :func:`trgrpo.stats.min_detectable_effect` (the exact
    noncentral t) is at most ``|effect|``, by bisection (the detectable effect falls with n)."""
    if not (sd_diff > 0 and effect != 0):
        raise ValueError(f"need sd_diff > 0 and effect != 0, got {sd_diff}, {effect}")
    ns = range(2, 100_001)
    i = bisect.bisect_left(ns, True, key=lambda n: min_detectable_effect(sd_diff, n) <= abs(effect))
    if i == len(ns):
        raise ValueError(f"more than {ns[-1]} pairs needed")
    return ns[i]


POWER_EFFECTS = (0.05, 0.03)  # 5 and 3 accuracy points
FLOOR = 0.01  # a final accuracy at or below this is at the floor (collapsed)


def power_sizing(results_dir: Path | str) -> dict:
    """What a powered GRPO vs TR-GRPO comparison on SmolLM2 would need, from the records: sigma_d (sample sd of the
    paired final-accuracy differences TR - GRPO) of each committed SmolLM2 design, the pairs for each effect of
    :data:`POWER_EFFECTS` at 80 % power (alpha 0.05, two-sided), sigma_d's 95 % chi-square interval and the pairs at
    its two ends (None: over 100,000), the pairs with both finals at :data:`FLOOR` or below, the CPU hours of one
    100-step run (from the seconds per step of every SmolLM2 two-number-addition record) and of the whole comparison
    (two runs a pair), the seconds a run spends outside training (evaluation, set-up: wall minus train time) and
    :func:`grpo_replicates`."""
    root = Path(results_dir)
    sps = [
        x
        for f in ("toy/lm", "lm/stress", "lm/stage0")
        for r in _records(root / f)
        if r.get("task") == "arith" and r["spec"].get("task_options", {}).get("kind", "add") == "add"
        if (x := r["seconds_per_step"]) and math.isfinite(x)
    ]
    hours = (100 * min(sps) / 3600, 100 * max(sps) / 3600) if sps else (math.nan, math.nan)
    designs = []
    for name, folder in (
        ("addition runs (notebook 03 Part B)", "toy/lm"),
        ("stress arm (lr 5e-5, collapses)", "lm/stress"),
    ):
        by = {(r["scheme"], r["seed"]): r for r in _records(root / folder) if r.get("task") == "arith"}
        seeds = sorted(s for sch, s in by if sch == "tr" and ("equal", s) in by)
        if len(seeds) < 2:
            continue
        tr, eq = ([by[(arm, s)]["final"]["accuracy"] for s in seeds] for arm in ("tr", "equal"))
        sd = paired_t(tr, eq)["sd_diff"]
        pairs = {e: pairs_for_power(sd, e) if sd > 0 else None for e in POWER_EFFECTS}
        ci = sd_interval(sd, len(seeds) - 1)
        designs.append(
            {
                "design": name,
                "folder": folder,
                "n_pairs": len(seeds),
                "n_eval": by[("equal", seeds[0])]["final"].get("n"),
                "steps": by[("equal", seeds[0])]["steps"],
                "sd_diff": sd,
                "pairs": pairs,
                "sd_ci": ci,
                "pairs_range": {e: tuple(_pairs_or_none(x, e) for x in ci) for e in POWER_EFFECTS},
                "both_floor": sum(max(a, b) <= FLOOR for a, b in zip(tr, eq, strict=True)),
                "cpu_hours": {e: (2 * n * hours[0], 2 * n * hours[1]) for e, n in pairs.items() if n},
            }
        )
    over = [
        r["wall_time_s"] - r["train_time_s"]
        for f in ("toy/lm", "lm/stress")
        for r in _records(root / f)
        if r.get("task") == "arith" and r.get("wall_time_s") and r.get("train_time_s")
    ]
    return {
        "designs": designs,
        "seconds_per_step": (min(sps), max(sps)) if sps else None,
        "hours_per_100": hours,
        "overhead_s": (min(over), max(over)) if over else None,
        "replicates": grpo_replicates(root),
    }


def _pairs_or_none(sd: float, effect: float) -> int | None:
    try:
        return pairs_for_power(sd, effect)
    except ValueError:
        return None  # more than 100,000 pairs


def grpo_replicates(results_dir: Path | str) -> dict | None:
    """The two GRPO probes of one configuration and seed (stage 0's and the leverage record's add2): their final
    greedy held-out accuracies, or None unless both exist with the same model, task options, seed and steps."""
    root = Path(results_dir)
    a, b = read_json(root / "lm" / "stage0" / "probe-add2.json"), read_json(root / LEVERAGE_GROUP / "probe-add2.json")
    if a is None or b is None:
        return None
    same = ("model", "task", "task_options", "seed", "steps", "learning_rate", "lower", "upper", "scheme")
    if any(a["spec"].get(k) != b["spec"].get(k) for k in same):
        return None
    return {"seed": a["seed"], "steps": a["steps"], "accuracy": (a["final"]["accuracy"], b["final"]["accuracy"])}


_NB01 = "papermill notebooks/01_gradient_norm_theorem.ipynb out.ipynb -p MODEL Qwen/Qwen2.5-3B-Instruct -p N_PROMPTS 64"
_BATCH = "trgrpo batch experiments/"
CLAIMS: tuple[Claim, ...] = (
    Claim(
        "Theorem 3.1",
        "a token's gradient norm lies between (1 - p) and sqrt(2) (1 - p): unlikely tokens dominate",
        _NB01,
        theorem31,
    ),
    Claim(
        "Theorem 3.2",
        "weighting by an increasing w(p) narrows the spread of per-token gradient norms",
        _NB01,
        theorem32,
    ),
    Claim(
        "Table 1",
        "on K&K (3-7 people) Qwen2.5-3B rises from 0.39 (GRPO) to 0.63 (TR-GRPO) average accuracy",
        _BATCH + "kk_qwen3b.yaml",
        table1,
    ),
    Claim(
        "Table 2",
        "TR-GRPO beats GRPO on math benchmarks (avg@k, pass@k) with Qwen2.5 models",
        _BATCH + "math_qwen7b.yaml",
        table2,
    ),
    Claim(
        "Table 3",
        "TR-GRPO beats GRPO in exact match on agentic search (one-hop and multi-hop QA)",
        "papermill notebooks/07_agentic_search.ipynb out.ipynb (full-scale parameters, GPU server)",
        table3,
    ),
    Claim(
        "Table 4",
        "TR weights beat equal, random and reverse weights: the probability-aware direction matters",
        _BATCH + "kk_qwen3b_table4.yaml",
        table4,
    ),
    Claim(
        "Table 7",
        "accuracy rises with tau up to tau = 9, and tau = 0.5 scores as GRPO",
        _BATCH + "kk_qwen3b_table7.yaml",
        table7,
    ),
    Claim(
        "Table 8",
        "TR-GRPO costs little: +5-6 % training time, no extra GPU memory",
        "make bench (on the GPU server, with the full-scale model)",
        table8,
    ),
    Claim(
        "Figure 1",
        "high-probability tokens are structural (operators, brackets, names); low ones carry reasoning",
        "papermill notebooks/04_token_probabilities.ipynb out.ipynb -p MODEL Qwen/Qwen2.5-3B-Instruct",
        figure1,
    ),
)
