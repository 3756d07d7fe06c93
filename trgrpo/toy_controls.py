"""The controls experiments of notebook 03 (Part A): what TR-GRPO's effect at toy scale is made of.

Three grids on the ``addition`` task (the toy task whose sampled tokens most often fall strictly between the
weight bounds L and U, :func:`token_histogram`), each a list of :func:`trgrpo.toy.toy_spec` dicts:

* :func:`controls_grid` -- GRPO (``equal``), TR with the weight outside the clip (``surrogate``) and inside it
  (``ratio``, Eq. 9 as printed), ``const`` (TR's batch-mean scale, no regulation), ``tr_norm`` (TR's regulation,
  no scale) and ``reverse`` (2 - w), paired by seed: the same seed gives the same warm start and data order;
* :func:`kl_grid` -- Reading 3: ``kl_weighting`` eq10 / outside / plain under TR (surrogate) at two betas;
* :func:`tau_grid` -- Table 7's tau sweep; its GRPO baseline and tau = 9 are the controls grid's runs of the
  same seeds.

The primary metric and the evaluation steps are fixed here (:data:`PLAN`) before any run; the summary of a grid
(:func:`controls_summary`) is computed from the records it names. Command line::

    python -m trgrpo.toy_controls run controls      # resumable; refuses a tree with uncommitted changes
    python -m trgrpo.toy_controls summary            # writes results/toy/controls/summary.json (and kl/, tau/)
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .experiment import RESULTS_DIR, update_marked_block, write_result

TASK = "addition"
CONTROLS_GROUP = "toy/controls"
KL_GROUP = "toy/kl"
TAU_GROUP = "toy/tau"
EVAL_EVERY = 20
# 60 steps (revised from 100 before any run finished: the machine's 2 cores are shared by ~8 sessions, so a
# single-thread grid gets about a third of a core; 0.55 -> 0.8 of the accuracy gain comes in the first 60 steps).
STEPS = 60
EVAL_STEPS = tuple(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY))  # 20, 40, 60
N_EVAL = 400
PRIMARY_METRIC = (
    "mean greedy accuracy over the held-out evaluations at steps 20, 40 and 60 "
    "(400 test items each, same items for every run)"
)

# arm label (trgrpo.toy.run_label) -> toy_spec settings
ARMS: dict[str, dict] = {
    "equal": dict(scheme="equal"),
    "tr-surrogate": dict(scheme="tr", placement="surrogate"),
    "tr-ratio": dict(scheme="tr", placement="ratio"),
    "const-surrogate": dict(scheme="const", placement="surrogate"),
    "tr_norm-surrogate": dict(scheme="tr_norm", placement="surrogate"),
    "reverse-surrogate": dict(scheme="reverse", placement="surrogate"),
}
BASELINE = "equal"
CONTROL_SEEDS = tuple(range(12))
KL_WEIGHTINGS = ("eq10", "outside", "plain")
KL_BETAS = (0.001, 0.04)
KL_SEEDS = tuple(range(8))
# tau = 0.5 is left out: with sigma(0.5 p) every weight is L = 1 (weight_range), so the run *is* GRPO's.
TAUS = (2.0, 7.0, 10.0, 20.0)
TAU_SEEDS = tuple(range(5))
# The KL and tau grids run as long as the controls and are measured the same way; the controls grid's GRPO and
# TR runs of the same seed are their baselines.
SHORT_STEPS = STEPS
SHORT_EVAL_STEPS = EVAL_STEPS
SHORT_METRIC = PRIMARY_METRIC

PLAN = {
    "task": TASK,
    "primary_metric": PRIMARY_METRIC,
    "eval_steps": list(EVAL_STEPS),
    "n_eval": N_EVAL,
    "steps": STEPS,
    "baseline": BASELINE,
    "arms": {k: v for k, v in ARMS.items()},
    "seeds": list(CONTROL_SEEDS),
    "test": "paired t-test on the per-seed primary metric, arm minus GRPO; 95 % t-interval; Holm over the 5 arms",
    "kl_and_tau_grids": {
        "steps": SHORT_STEPS,
        "eval_steps": list(SHORT_EVAL_STEPS),
        "metric": SHORT_METRIC,
        "order": "controls, then kl at beta 0.04, then tau, then kl at beta 0.001 (what the compute allows)",
        "kl": {
            "scheme": "tr",
            "placement": "surrogate",
            "kl_weighting": list(KL_WEIGHTINGS),
            "beta": list(KL_BETAS),
            "seeds": list(KL_SEEDS),
            "kl_metric": "TRL's plain k3 KL(pi || pi_ref), mean over steps 41-60",
            "eq10_at_beta_0.001": "the controls grid's tr-surrogate runs (same settings)",
        },
        "tau": {
            "taus": list(TAUS),
            "seeds": list(TAU_SEEDS),
            "baseline": "the controls grid's equal and tr-surrogate (tau = 9) runs of the same seeds",
        },
    },
    "why": (
        "The mean over three fixed evaluations averages out part of the sampling error of one 400-item evaluation "
        "(+-0.02) and the step-to-step wobble of a run, and does not depend on which step is called final; "
        "step 0 (the warm start, equal for every arm of a seed) is left out. 60 steps instead of 100 (revised "
        "before any run finished): the shared 2-core machine gives one single-thread grid about a third of a core."
    ),
}


def _spec(arm: str, seed: int, group: str, steps: int = STEPS, **extra: Any) -> dict:
    from .toy import toy_spec

    return toy_spec(seed=seed, task=TASK, group=group, steps=steps, n_eval=N_EVAL, **ARMS[arm], **extra)


def controls_grid(seeds: Sequence[int] = CONTROL_SEEDS, arms: Sequence[str] = tuple(ARMS)) -> list[dict]:
    """Every arm on every seed, seed-major (a stopped grid leaves complete seeds behind)."""
    return [_spec(arm, s, CONTROLS_GROUP) for s in seeds for arm in arms]


def kl_name(kl_weighting: str, beta: float, seed: int) -> str:
    return f"{TASK}-micro-tr-surrogate-kl{kl_weighting}-beta{beta:g}-seed{seed}"


def kl_grid(
    seeds: Sequence[int] = KL_SEEDS, betas: Sequence[float] = KL_BETAS, weightings: Sequence[str] = KL_WEIGHTINGS
) -> list[dict]:
    """TR (surrogate) under each KL weighting at each beta (Reading 3: Eq. 10 vs Eq. 12 vs Eq. 6), 60 steps;
    eq10 at beta = 0.001 is the controls grid's ``tr-surrogate`` run (the same settings)."""
    return [
        _spec("tr-surrogate", s, KL_GROUP, SHORT_STEPS, kl_weighting=kw, beta=b, name=kl_name(kw, b, s))
        for b in sorted(betas, reverse=True)  # the beta where the KL matters first
        for s in seeds
        for kw in weightings
        if not (kw == "eq10" and b == 0.001)
    ]


def tau_grid(seeds: Sequence[int] = TAU_SEEDS, taus: Sequence[float] = TAUS) -> list[dict]:
    """TR (surrogate) at every tau of Table 7 but 9 (tau = 9 and GRPO: the controls grid, same seeds)."""
    return [_spec("tr-surrogate", s, TAU_GROUP, SHORT_STEPS, tau=t) for t in taus for s in seeds]


GRIDS = {
    "controls": controls_grid,
    "kl": kl_grid,
    "kl_high": lambda: kl_grid(betas=(max(KL_BETAS),)),  # the beta where the KL matters: first
    "kl_low": lambda: kl_grid(betas=(min(KL_BETAS),)),
    "tau": tau_grid,
}


# ---------------------------------------------------------------------------------------------------------------
# Task choice: how many sampled tokens the weight has to act on

PROB_BINS = [i / 20 for i in range(21)]  # 0, 0.05, ..., 1
WEIGHT_BINS = [1.0 + i * 0.02 for i in range(21)]  # L = 1 ... U = 1.4


def weight_shares(probs: Sequence[float], *, lower: float = 1.0, upper: float = 1.4) -> dict:
    """Histograms of sampled-token probabilities and their Eq. 11 weights (paper defaults), and the shares of
    tokens with w = L, L < w < U and w = U (the schema of ``results/toy/*/token_hist.json``)."""
    import numpy as np
    import torch

    from .weights import token_weights

    p = np.asarray(probs, dtype=float)
    w = token_weights(torch.tensor(p, dtype=torch.float64), "tr", lower=lower, upper=upper).numpy()
    n = int(p.size)
    at_lo = int((w <= lower).sum())
    at_hi = int((w >= upper).sum())
    return {
        "bins": PROB_BINS,
        "prob_counts": np.histogram(p, bins=PROB_BINS)[0].tolist(),
        "weight_bins": WEIGHT_BINS,
        "weight_counts": np.histogram(np.clip(w, lower, upper), bins=WEIGHT_BINS)[0].tolist(),
        "share_at_lower": at_lo / n,
        "share_between": (n - at_lo - at_hi) / n,
        "share_at_upper": at_hi / n,
        "n_tokens": n,
    }


def token_histogram(
    task: str = TASK, seed: int = 0, *, n_prompts: int = 512, temperature: float = 1.0, warm_kwargs: dict | None = None
) -> dict:
    """Sample one completion per training prompt from the warm-start policy of ``seed`` (where RL begins, at the
    RL sampling temperature) and histogram pi(o_t) of every completion token (EOS included) and its weight."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from . import toy

    path = toy.warm_start(task, seed, **{"verbose": False, **(warm_kwargs or {})})
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(path)
    rows = toy.records(toy.splits()["train"][:n_prompts], task)
    prompts = [r["prompt"] for r in rows]
    comps = toy.generate(
        model, tok, prompts, max_new_tokens=toy.MAX_COMPLETION[task], do_sample=True, temperature=temperature, seed=seed
    )
    probs: list[float] = []
    model.eval()
    with torch.no_grad():
        for prompt, comp in zip(prompts, comps):
            p_ids = tok(prompt)["input_ids"]
            c_ids = tok(comp)["input_ids"] + [tok.eos_token_id]
            c_ids = c_ids[: toy.MAX_COMPLETION[task]]
            logits = model(input_ids=torch.tensor([p_ids + c_ids])).logits[0, len(p_ids) - 1 : -1] / temperature
            lp = torch.log_softmax(logits.float(), -1)[torch.arange(len(c_ids)), torch.tensor(c_ids)]
            probs += lp.exp().tolist()
    ws = toy.warm_start_info(path)
    return {
        "kind": "token_hist",
        "task": task,
        "model": f"micro-qwen2-{ws['n_parameters'] / 1e6:.2f}M warm start (seed {seed}, {ws['steps']} SFT steps)",
        "seed": seed,
        "temperature": temperature,
        "n_prompts": n_prompts,
        **weight_shares(probs),
    }


def task_choice(
    tasks: Sequence[str] = ("addition", "addition_trace"),
    *,
    write: bool = True,
    results_dir: Path | str | None = None,
    **kw: Any,
) -> dict:
    """:func:`token_histogram` of every candidate task; the chosen one (:data:`TASK`) is written to
    ``results/toy/controls/token_hist.json`` with the others under ``candidates``."""
    from .experiment import git_commit, git_dirty

    hists = {t: token_histogram(t, **kw) for t in tasks}
    out = {**hists[TASK], "candidates": hists, "git_commit": git_commit(), "git_dirty": git_dirty()}
    if write:
        write_result(CONTROLS_GROUP, "token_hist", out, results_dir)
    return out


# ---------------------------------------------------------------------------------------------------------------
# Metrics of a record


def eval_at(record: dict, step: int, key: str = "greedy_accuracy") -> float:
    """The held-out ``key`` of ``record``'s evaluation at ``step`` (NaN when there is none)."""
    for e in record.get("eval_history", []):
        if e.get("step") == step:
            return float(e[key])
    return math.nan


def primary_metric(record: dict, steps: Sequence[int] = EVAL_STEPS) -> float:
    """The plan's primary metric: mean greedy accuracy over the evaluations at ``steps`` (NaN if one lacks)."""
    vals = [eval_at(record, s) for s in steps]
    return float(sum(vals) / len(vals)) if all(math.isfinite(v) for v in vals) else math.nan


# ---------------------------------------------------------------------------------------------------------------
# Summaries


def load_group(group: str, results_dir: Path | str | None = None) -> list[dict]:
    from .toy import load_runs

    return load_runs(results_dir, group=group)


def _label(record: dict) -> str:
    from .toy import run_label

    return run_label(record)


def arm_rows(arms: dict[str, list[dict]], baseline: str, order: Sequence[str], value=primary_metric) -> list[dict]:
    """One row per arm: records named, n, mean of ``value``, and (arms other than ``baseline``) the paired
    difference to the baseline on common seeds with 95 % t-interval, p, Holm-adjusted p, the sign count (ties
    apart) and the minimum detectable effect at this n (two-sided 5 %, power 80 %)."""
    from .analysis import holm, mean_std, min_detectable_effect, paired_t

    base = {r["seed"]: r for r in arms.get(baseline, [])}
    rows = []
    for arm in order:
        runs = sorted(arms.get(arm, []), key=lambda r: r["seed"])
        if not runs:
            continue
        m, s, n = mean_std([value(r) for r in runs])
        row = {"arm": arm, "runs": [r["name"] for r in runs], "n": n, "mean": m, "std": s}
        if arm != baseline:
            seeds = [r["seed"] for r in runs if r["seed"] in base]
            t = [value(r) for r in runs if r["seed"] in base]
            c = [value(base[sd]) for sd in seeds]
            res = paired_t(t, c)
            row.update(
                n_pairs=res["n"],
                seeds=seeds,
                delta_vs_equal=res["mean_diff"],
                ci_low=res["ci"][0],
                ci_high=res["ci"][1],
                p=res["p"],
                sd_diff=res["sd_diff"],
                higher=res["higher"],
                lower=res["lower"],
                ties=res["ties"],
                mde=min_detectable_effect(res["sd_diff"], res["n"]),
            )
        rows.append(row)
    compared = [r for r in rows if "p" in r]
    for r, p_adj in zip(compared, holm([r["p"] for r in compared])):
        r["p_holm"] = p_adj
    return rows


def controls_summary(
    results_dir: Path | str | None = None, *, write: bool = True, eval_steps: Sequence[int] = EVAL_STEPS
) -> dict:
    """``results/toy/controls/summary.json``: the primary metric per arm and its paired difference to GRPO
    (``eval_steps``: the plan's, other values only for smoke runs)."""
    recs = load_group(CONTROLS_GROUP, results_dir)
    arms: dict[str, list[dict]] = {}
    for r in recs:
        arms.setdefault(_label(r), []).append(r)
    rows = arm_rows(arms, BASELINE, list(ARMS), value=lambda r: primary_metric(r, eval_steps))
    out = {
        "kind": "controls_summary",
        "primary_metric": PRIMARY_METRIC
        if tuple(eval_steps) == EVAL_STEPS
        else f"mean greedy accuracy at {eval_steps}",
        "eval_steps": list(eval_steps),
        "baseline": BASELINE,
        "task": TASK,
        "rows": rows,
        "cost": _cost(recs),
        "provenance": _provenance(recs),
    }
    if write:
        write_result(CONTROLS_GROUP, "summary", out, results_dir)
    return out


def kl_label(record: dict) -> str:
    spec = record.get("spec", {})
    return f"{spec.get('kl_weighting')}-beta{float(spec.get('beta')):g}"


def kl_window(record: dict, first: int = 41, last: int = SHORT_STEPS) -> float:
    """Mean of TRL's logged ``kl`` (plain k3 of pi against pi_ref, Eq. 6) over steps ``first``..``last``."""
    vals = [h["kl"] for h in record.get("history", []) if first <= h.get("step", 0) <= last and "kl" in h]
    return float(sum(vals) / len(vals)) if vals else math.nan


def short_metric(record: dict) -> float:
    """The KL and tau grids' metric: mean greedy accuracy at steps 20, 40, 60."""
    return primary_metric(record, SHORT_EVAL_STEPS)


def kl_arms(results_dir: Path | str | None = None) -> dict[str, dict[str, list[dict]]]:
    """beta -> kl_weighting -> records (eq10 at beta = 0.001: the controls grid's tr-surrogate runs)."""
    out: dict[str, dict[str, list[dict]]] = {f"{b:g}": {} for b in KL_BETAS}
    for r in load_group(KL_GROUP, results_dir):
        out.setdefault(f"{float(r['spec']['beta']):g}", {}).setdefault(r["spec"]["kl_weighting"], []).append(r)
    ctrl = [r for r in load_group(CONTROLS_GROUP, results_dir) if _label(r) == "tr-surrogate"]
    out["0.001"]["eq10"] = [r for r in ctrl if r["seed"] in set(KL_SEEDS)]
    return out


def kl_summary(
    results_dir: Path | str | None = None, *, write: bool = True, eval_steps: Sequence[int] = EVAL_STEPS
) -> dict:
    """Reading 3 per beta: accuracy (steps 20-60) and KL(pi || pi_ref) (TRL's plain k3, mean over steps 41-60)
    per KL weighting, each paired against ``plain`` (Eq. 6) on the same seeds."""
    arms = kl_arms(results_dir)
    last = max(eval_steps)
    first = last - last // 3 + 1  # the last third of the run: steps 41-60 of 60

    def acc(r: dict) -> float:
        return primary_metric(r, eval_steps)

    def kl(r: dict) -> float:
        return kl_window(r, first, last)

    by_beta = {}
    for beta, groups in arms.items():
        order = list(KL_WEIGHTINGS)
        by_beta[beta] = {
            "accuracy": arm_rows(groups, "plain", order, value=acc),
            "kl_steps_41_60": arm_rows(groups, "plain", order, value=kl),
        }
    recs = load_group(KL_GROUP, results_dir)
    out = {
        "kind": "kl_summary",
        "metric": SHORT_METRIC,
        "eval_steps": list(eval_steps),
        "kl_steps": [first, last],
        "baseline": "plain",
        "by_beta": by_beta,
        "cost": _cost(recs),
        "provenance": _provenance(recs),
    }
    if write:
        write_result(KL_GROUP, "summary", out, results_dir)
    return out


def tau_summary(
    results_dir: Path | str | None = None, *, write: bool = True, eval_steps: Sequence[int] = EVAL_STEPS
) -> dict:
    """Table 7 at toy scale: every tau and GRPO on the same seeds (tau = 9 and GRPO from the controls grid),
    compared at steps 20, 40, 60."""
    recs = load_group(TAU_GROUP, results_dir)
    seeds = set(TAU_SEEDS)
    arms: dict[str, list[dict]] = {}
    for r in load_group(CONTROLS_GROUP, results_dir):
        if r["seed"] in seeds and _label(r) in ("equal", "tr-surrogate"):
            arms.setdefault(_label(r), []).append(r)
    for r in recs:
        arms.setdefault(_label(r), []).append(r)
    order = ["equal"] + [f"tr-surrogate-tau{t:g}" if t != 9.0 else "tr-surrogate" for t in sorted({*TAUS, 9.0})]
    out = {
        "kind": "tau_summary",
        "metric": SHORT_METRIC,
        "eval_steps": list(eval_steps),
        "rows": arm_rows(arms, BASELINE, order, value=lambda r: primary_metric(r, eval_steps)),
        "cost": _cost(recs),
        "provenance": _provenance(recs),
    }
    if write:
        write_result(TAU_GROUP, "summary", out, results_dir)
    return out


def _cost(recs: Sequence[dict]) -> dict:
    from .toy import grid_cost

    return grid_cost(recs)


def _provenance(recs: Sequence[dict]) -> dict:
    return {
        "commits": sorted({str(r.get("git_commit")) for r in recs}),
        "dirty": sorted({str(r.get("git_dirty")) for r in recs}),
        "machine": sorted(
            {
                f"{m.get('platform', '?')}, {m.get('cpu_count', '?')} CPUs"
                for m in (r.get("machine") or {} for r in recs)
            }
        )[:3],
    }


SUMMARIES = {"controls": controls_summary, "kl": kl_summary, "tau": tau_summary}


# ---------------------------------------------------------------------------------------------------------------
# Command line


def run(grid: str, *, results_dir: Path | str | None = None, allow_dirty: bool = False, limit: int | None = None):
    """Run a grid (resumable) on a clean tree; every record carries the commit and ``git_dirty``."""
    from . import toy
    from .experiment import git_dirty

    if git_dirty() and not allow_dirty:
        raise SystemExit("the tree has uncommitted changes: commit first (or pass --allow-dirty; records say so)")
    specs = GRIDS[grid]()
    if limit is not None:
        specs = specs[:limit]
    # one seed at a time (its warm start, then its runs): a grid stopped early leaves complete, paired seeds
    summaries = []
    for seed in dict.fromkeys(s["seed"] for s in specs):
        part = [s for s in specs if s["seed"] == seed]
        summaries.append(
            toy.run_grid(
                part, results_dir=results_dir, eval_every=EVAL_EVERY, threads=1, progress=False, eval_sampled=False
            )
        )
    return {k: sum(x[k] for x in summaries) for k in ("n_specs", "n_run", "n_skipped", "wall_time_s", "cpu_time_s")}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m trgrpo.toy_controls", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a grid (resumable)")
    r.add_argument("grid", choices=sorted(GRIDS))
    r.add_argument("--results-dir", default=None)
    r.add_argument("--allow-dirty", action="store_true")
    r.add_argument("--limit", type=int, default=None)
    s = sub.add_parser("summary", help="write the summary.json of each grid from its records")
    s.add_argument("grids", nargs="*", default=sorted(SUMMARIES))
    s.add_argument("--results-dir", default=None)
    sub.add_parser("readme", help="rewrite the README's toy-findings block from the summaries")
    h = sub.add_parser("hist", help="write results/toy/controls/token_hist.json (task choice)")
    h.add_argument("--allow-dirty", action="store_true")
    p = sub.add_parser("plan", help="write results/toy/controls/plan.json")
    p.add_argument("--results-dir", default=None)
    a = ap.parse_args(argv)
    if a.cmd == "run":
        print(json.dumps(run(a.grid, results_dir=a.results_dir, allow_dirty=a.allow_dirty, limit=a.limit)))
    elif a.cmd == "summary":
        for g in a.grids:
            SUMMARIES[g](a.results_dir)
            print(f"wrote {Path(a.results_dir or RESULTS_DIR) / GRIDS_GROUP[g] / 'summary.json'}")
    elif a.cmd == "readme":
        print("README changed" if update_readme() else "README unchanged")
    elif a.cmd == "hist":
        from .experiment import git_dirty

        if git_dirty() and not a.allow_dirty:
            raise SystemExit("the tree has uncommitted changes: commit first (or pass --allow-dirty)")
        from . import toy

        toy.quiet()
        toy.token_grad_analysis(TASK, 0, n_prompts=128, group=CONTROLS_GROUP)  # Theorem 3.1 on the warm start
        out = task_choice()
        for t, hst in out["candidates"].items():
            print(
                f"{t}: {hst['n_tokens']} tokens, at L {hst['share_at_lower']:.3f}, between "
                f"{hst['share_between']:.3f}, at U {hst['share_at_upper']:.3f}"
            )
    else:
        write_result(CONTROLS_GROUP, "plan", {"kind": "plan", **PLAN}, a.results_dir)


GRIDS_GROUP = {"controls": CONTROLS_GROUP, "kl": KL_GROUP, "tau": TAU_GROUP}


# ---------------------------------------------------------------------------------------------------------------
# Prose rendered from the summaries (README findings block, notebook 03's verdict): numbers never typed by hand

README_START = "<!-- toy-findings:start (generated by python -m trgrpo.toy_controls readme) -->"
README_END = "<!-- toy-findings:end -->"
ARM_TEXT = {
    "equal": "GRPO",
    "tr-surrogate": "TR (surrogate)",
    "tr-ratio": "TR (ratio, Eq. 9 as printed)",
    "const-surrogate": "const (scale only)",
    "tr_norm-surrogate": "tr_norm (regulation only)",
    "reverse-surrogate": "Reverse",
}


def _read(group: str, name: str, results_dir: Path | str | None) -> dict | None:
    path = Path(results_dir or RESULTS_DIR) / group / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def num(x: float | None, spec: str = ".3f") -> str:
    """``format(x, spec)``, or "–" for a missing value (NaN is stored as null in the JSON records)."""
    return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def delta_text(row: dict, spec: str = "+.3f") -> str:
    """``"+0.012 [-0.010, +0.034], p=0.27"`` of a row of :func:`arm_rows` ("" for the baseline)."""
    if "delta_vs_equal" not in row:
        return ""
    return (
        f"{num(row['delta_vs_equal'], spec)} [{num(row['ci_low'], spec)}, {num(row['ci_high'], spec)}], "
        f"p={num(row['p'], '.2g')}"
    )


def classify(row: dict) -> str:
    """``"higher"`` / ``"lower"`` when the difference is significant at 5 % after Holm's adjustment (the raw p
    where there is none), else ``"no detectable difference"``."""
    p = row.get("p_holm", row.get("p"))
    if p is not None and math.isfinite(p) and p < 0.05:
        return "higher" if row["delta_vs_equal"] > 0 else "lower"
    return "no detectable difference"


def versus(row: dict, other: str = "GRPO") -> str:
    c = classify(row)
    return f"no detectable difference from {other}" if c == "no detectable difference" else f"{c} than {other}"


def strength(row: dict) -> str:
    """How strong the evidence for a difference is, from the Holm-adjusted p (the raw p where there is none)."""
    p = row.get("p_holm", row.get("p"))
    if p is None or not math.isfinite(p):
        return "no test"
    if p < 0.01:
        return "strong evidence"
    if p < 0.05:
        return "evidence"
    if p < 0.1:
        return "weak evidence"
    return f"no evidence of a difference; MDE {num(row['mde'])}"


def fmt_delta(row: dict) -> str:
    """``"Δ +0.012 [−0.010, +0.034], p = 0.27 (Holm 0.81); 7 higher, 4 lower, 1 tie of 12"``."""
    ties = row["ties"]
    holm = row.get("p_holm")
    htxt = "" if holm is None else f" (Holm {num(holm, '.2g')})"
    return (
        f"Δ {num(row['delta_vs_equal'], '+.3f')} [{num(row['ci_low'], '+.3f')}, {num(row['ci_high'], '+.3f')}], "
        f"p = {num(row['p'], '.2g')}{htxt}; "
        f"{row['higher']} higher, {row['lower']} lower, {ties} tie{'s' if ties != 1 else ''} of {row['n_pairs']} "
        f"({strength(row)})"
    )


def arm_text(arm: str) -> str:
    """A table's name for an arm label (``tr-surrogate-tau2`` -> ``TR (surrogate), τ = 2``)."""
    if "-tau" in arm:
        return f"{ARM_TEXT.get(arm.split('-tau')[0], arm)}, τ = {arm.split('-tau')[1]}"
    return ARM_TEXT.get(arm, arm)


def controls_table(summary: dict) -> str:
    """The summary's rows as a markdown table."""
    lines = [
        "| arm | n | mean | Δ vs GRPO [95 % t-interval] | p | Holm p | higher / lower / tied | MDE (80 % power) |",
        "|---|---:|---:|---|---:|---:|---|---:|",
    ]
    for r in summary["rows"]:
        if "delta_vs_equal" in r:
            lines.append(
                f"| {arm_text(r['arm'])} | {r['n']} | {num(r['mean'])} | "
                f"{num(r['delta_vs_equal'], '+.3f')} [{num(r['ci_low'], '+.3f')}, {num(r['ci_high'], '+.3f')}] | "
                f"{num(r['p'], '.2g')} | "
                f"{num(r['p_holm'], '.2g')} | {r['higher']} / {r['lower']} / {r['ties']} | {num(r['mde'])} |"
            )
        else:
            lines.append(f"| {arm_text(r['arm'])} | {r['n']} | {num(r['mean'])} | (baseline) | | | | |")
    return "\n".join(lines)


def _made_of(rows: dict) -> str:
    scale, reg = rows.get("const-surrogate"), rows.get("tr_norm-surrogate")
    tr = rows.get("tr-surrogate")
    if not (scale and reg and tr):
        return "not decided (an arm is missing)"
    cs, cr, ct = classify(scale), classify(reg), classify(tr)
    mde = max((x for x in (scale["mde"], reg["mde"], tr["mde"]) if x is not None), default=math.nan)
    n = tr["n_pairs"]
    parts = [name for name, c in (("scale", cs), ("regulation", cr)) if c != "no detectable difference"]
    if not parts and ct == "no detectable difference":
        return (
            f"neither: TR (surrogate) itself shows no detectable difference from GRPO, and neither does its scale "
            f"alone (const) or its regulation alone (tr_norm); at n = {n} seeds an effect smaller than about "
            f"{num(mde)} would go unseen"
        )
    if not parts:
        return (
            f"undecided: TR (surrogate) is {versus(tr)}, but neither its scale alone (const) nor its regulation "
            f"alone (tr_norm) differs detectably from GRPO (MDE about {num(mde)} at n = {n})"
        )
    return (
        " and ".join(parts)
        + f" (const: {versus(scale)}; tr_norm: {versus(reg)}; TR (surrogate): {versus(tr)}; n = {n} seeds)"
    )


def verdict_markdown(results_dir: Path | str | None = None) -> str:
    """The toy's verdict, every number from the summaries and records: README block and notebook 03 text."""
    s = _read(CONTROLS_GROUP, "summary", results_dir)
    if s is None:
        return "_No controls summary yet: run `python -m trgrpo.toy_controls run controls`, then `summary`._"
    rows = {r["arm"]: r for r in s["rows"]}
    cost = s["cost"]
    cpu_min = (cost["runs_cpu_s"] + cost["warm_cpu_s"]) / 60
    hist = _read(CONTROLS_GROUP, "token_hist", results_dir)
    commits = ", ".join(c[:7] for c in s["provenance"]["commits"])
    planned = len(CONTROL_SEEDS)
    short = (
        f" ({planned} planned: the rest did not fit the session's share of the shared CPU; the grid resumes)"
        if rows["equal"]["n"] < planned
        else ""
    )
    out = [
        f"**Toy controls** (notebook 03, Part A): a {cost['n_runs']}-run grid, the 1M-parameter Qwen2 on 2-digit "
        f"`{s['task']}`, {rows['equal']['n']} seeds × {cost['steps_per_run'][0]} steps per arm{short}, paired by seed "
        f"(same warm start, same data order); primary metric fixed before the runs: {s['primary_metric']}. "
        f"Paired t-tests against GRPO, Holm over the {len(rows) - 1} arms; CPU time of the grid "
        f"{cpu_min:.0f} min (one thread, shared 2-core VM; commit {commits}, clean tree: "
        f"{s['provenance']['dirty'] == ['False']}).",
        "",
        controls_table(s),
        "",
    ]
    if hist:
        cands = hist.get("candidates", {})
        share = ", ".join(f"`{t}` {h['share_between']:.1%}" for t, h in cands.items())
        out.append(
            f"- **Task choice.** Share of sampled tokens with L < w < U on the warm-start policy: {share}; "
            f"the rest sits at the bounds (`{hist['task']}`: {hist['share_at_lower']:.1%} at L, "
            f"{hist['share_at_upper']:.1%} at U). The grid runs the task with the largest share."
        )
    if "tr-ratio" in rows:
        out.append(
            f"- **Reading 2 (where w enters the clip).** TR with w inside the clipped ratio (Eq. 9 as printed): "
            f"{fmt_delta(rows['tr-ratio'])} — {versus(rows['tr-ratio'])}"
            + f"; {_zero_pos(results_dir):.1%} of the tokens with A > 0 get no policy gradient (mean over steps)"
            + f". With w outside the clip (surrogate): {fmt_delta(rows['tr-surrogate'])}."
        )
    if "const-surrogate" in rows and "tr_norm-surrogate" in rows:
        out.append(
            f"- **Scale vs regulation.** const (TR's batch-mean weight on every token): "
            f"{fmt_delta(rows['const-surrogate'])}. tr_norm (TR's weights divided by their batch mean): "
            f"{fmt_delta(rows['tr_norm-surrogate'])}. Reverse (2 − w): {fmt_delta(rows['reverse-surrogate'])}. "
            f"**What TR-GRPO's effect at this scale is made of: {_made_of(rows)}.**"
        )
    kl = _read(KL_GROUP, "summary", results_dir)
    if kl:
        out.append("- **Reading 3 (Eq. 10 vs Eq. 12 vs Eq. 6, TR surrogate).** " + kl_sentence(kl))
    tau = _read(TAU_GROUP, "summary", results_dir)
    lo, hi = weight_range_divide()
    reading1 = (
        f"- **Reading 1 (how τ enters Eq. 11).** As printed, σ(p/τ) at τ = 9 gives weights in [{lo:g}, {hi:g}]: "
        "TR-GRPO would be GRPO exactly, so that reading needs no run (and contradicts Table 7's spread of scores). "
    )
    out.append(reading1 + ("τ sweep under σ(τ·p): " + tau_sentence(tau) if tau else "The τ sweep has not run yet."))
    return "\n".join(out)


def weight_range_divide() -> tuple[float, float]:
    """The weight range of Eq. 11 as printed (sigma(p / tau), tau = 9): (1, 1)."""
    from .weights import weight_range

    return weight_range(tau_mode="divide")


def _zero_pos(results_dir) -> float:
    import numpy as np

    from .analysis import history_mean

    recs = [r for r in load_group(CONTROLS_GROUP, results_dir) if _label(r) == "tr-ratio"]
    vals = [history_mean(r, "tr/zero_grad_frac_pos_adv") for r in recs]
    return float(np.mean(vals)) if vals else math.nan


def kl_sentence(kl: dict) -> str:
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
                r = kr[k]
                txt.append(
                    f"{k} − plain: KL {delta_text(r, '+.2g')}, accuracy {delta_text(ar[k])} "
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
    text = ". ".join(parts) + (
        ". Eq. 10's per-token minimum is at π = w·π_ref, not π = π_ref: with w up to 1.4 it pulls every weighted "
        "token's probability above the reference instead of back to it"
    )
    high = kl["by_beta"].get(f"{max(KL_BETAS):g}")
    eq10 = {r["arm"]: r for r in high["kl_steps_41_60"]}.get("eq10") if high else None
    if eq10 and "ci_low" in eq10:
        verdict = classify(eq10)
        text += (
            f"; at β = {max(KL_BETAS):g} the plain KL under eq10 is {verdict} than under plain (Eq. 6)"
            if verdict != "no detectable difference"
            else f"; at β = {max(KL_BETAS):g} the runs show no detectable difference in the plain KL from Eq. 6"
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


def update_readme(results_dir: Path | str | None = None, readme: Path | None = None) -> bool:
    """Replace the README block between :data:`README_START` and :data:`README_END`; True if it changed."""
    readme = readme or Path(__file__).resolve().parents[1] / "README.md"
    return update_marked_block(readme, README_START, README_END, verdict_markdown(results_dir) + "\n")


if __name__ == "__main__":
    main()
