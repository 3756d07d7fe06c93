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
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .experiment import RESULTS_DIR, write_result

TASK = "addition"
CONTROLS_GROUP = "toy/controls"
KL_GROUP = "toy/kl"
TAU_GROUP = "toy/tau"
EVAL_EVERY = 20
STEPS = 100
EVAL_STEPS = tuple(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY))  # 20, 40, 60, 80, 100
N_EVAL = 400
PRIMARY_METRIC = (
    "mean greedy accuracy over the held-out evaluations at steps 20, 40, 60, 80 and 100 "
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
TAUS = (0.5, 2.0, 7.0, 10.0, 20.0)
TAU_SEEDS = tuple(range(5))

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
    "why": (
        "The mean over five fixed evaluations averages out most of the sampling error of one 400-item evaluation "
        "(+-0.02) and the step-to-step wobble of a 100-step run, and does not depend on which step is called final; "
        "step 0 (the warm start, equal for every arm of a seed) is left out."
    ),
}


def _spec(arm: str, seed: int, group: str, **extra: Any) -> dict:
    from .toy import toy_spec

    return toy_spec(seed=seed, task=TASK, group=group, steps=STEPS, n_eval=N_EVAL, **ARMS[arm], **extra)


def controls_grid(seeds: Sequence[int] = CONTROL_SEEDS, arms: Sequence[str] = tuple(ARMS)) -> list[dict]:
    """Every arm on every seed, seed-major (a stopped grid leaves complete seeds behind)."""
    return [_spec(arm, s, CONTROLS_GROUP) for s in seeds for arm in arms]


def kl_name(kl_weighting: str, beta: float, seed: int) -> str:
    return f"{TASK}-micro-tr-surrogate-kl{kl_weighting}-beta{beta:g}-seed{seed}"


def kl_grid(
    seeds: Sequence[int] = KL_SEEDS, betas: Sequence[float] = KL_BETAS, weightings: Sequence[str] = KL_WEIGHTINGS
) -> list[dict]:
    """TR (surrogate) under each KL weighting at each beta (Reading 3: Eq. 10 vs Eq. 12 vs Eq. 6)."""
    return [
        _spec("tr-surrogate", s, KL_GROUP, kl_weighting=kw, beta=b, name=kl_name(kw, b, s))
        for b in sorted(betas, reverse=True)  # the beta where the KL matters first
        for s in seeds
        for kw in weightings
    ]


def tau_grid(seeds: Sequence[int] = TAU_SEEDS, taus: Sequence[float] = TAUS) -> list[dict]:
    """TR (surrogate) at every tau of Table 7 but 9 (tau = 9 and GRPO: the controls grid, same seeds)."""
    return [_spec("tr-surrogate", s, TAU_GROUP, tau=t) for t in taus for s in seeds]


GRIDS = {"controls": controls_grid, "kl": kl_grid, "tau": tau_grid}


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


def controls_summary(results_dir: Path | str | None = None, *, write: bool = True) -> dict:
    """``results/toy/controls/summary.json``: the primary metric per arm and its paired difference to GRPO."""
    recs = load_group(CONTROLS_GROUP, results_dir)
    arms: dict[str, list[dict]] = {}
    for r in recs:
        arms.setdefault(_label(r), []).append(r)
    rows = arm_rows(arms, BASELINE, list(ARMS))
    out = {
        "kind": "controls_summary",
        "primary_metric": PRIMARY_METRIC,
        "eval_steps": list(EVAL_STEPS),
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


def kl_summary(results_dir: Path | str | None = None, *, write: bool = True) -> dict:
    """Reading 3 per beta: accuracy (primary metric) and KL(pi || pi_ref) (TRL's plain k3, mean over the last 20
    steps) per KL weighting, paired against ``plain`` (Eq. 6) on the same seeds."""
    from .analysis import history_mean

    recs = load_group(KL_GROUP, results_dir)
    out: dict[str, Any] = {"kind": "kl_summary", "primary_metric": PRIMARY_METRIC, "eval_steps": list(EVAL_STEPS)}
    by_beta = {}
    for beta in KL_BETAS:
        arms: dict[str, list[dict]] = {}
        for r in recs:
            if float(r["spec"]["beta"]) == beta:
                arms.setdefault(r["spec"]["kl_weighting"], []).append(r)
        order = list(KL_WEIGHTINGS)
        acc = arm_rows(arms, "plain", order)
        kl = arm_rows(arms, "plain", order, value=lambda r: history_mean(r, "kl", last=20))
        by_beta[f"{beta:g}"] = {"accuracy": acc, "kl_last20": kl}
    out["by_beta"] = by_beta
    out["cost"] = _cost(recs)
    out["provenance"] = _provenance(recs)
    if write:
        write_result(KL_GROUP, "summary", out, results_dir)
    return out


def tau_summary(results_dir: Path | str | None = None, *, write: bool = True) -> dict:
    """Table 7 at toy scale: every tau and GRPO on the same seeds (tau = 9 and GRPO from the controls grid)."""
    recs = load_group(TAU_GROUP, results_dir)
    seeds = set(TAU_SEEDS)
    ctrl = [r for r in load_group(CONTROLS_GROUP, results_dir) if r["seed"] in seeds]
    arms: dict[str, list[dict]] = {}
    for r in [*recs, *ctrl]:
        label = _label(r)
        if label in ("equal", "tr-surrogate") or r in recs:
            arms.setdefault(label, []).append(r)
    order = ["equal"] + [f"tr-surrogate-tau{t:g}" if t != 9.0 else "tr-surrogate" for t in sorted({*TAUS, 9.0})]
    out = {
        "kind": "tau_summary",
        "primary_metric": PRIMARY_METRIC,
        "eval_steps": list(EVAL_STEPS),
        "rows": arm_rows(arms, BASELINE, order),
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
        "machine": sorted({(r.get("machine") or {}).get("cpu", "?") for r in recs})[:3],
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
    return toy.run_grid(
        specs, results_dir=results_dir, eval_every=EVAL_EVERY, threads=1, progress=False, eval_sampled=False
    )


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
    p = sub.add_parser("plan", help="write results/toy/controls/plan.json")
    p.add_argument("--results-dir", default=None)
    a = ap.parse_args(argv)
    if a.cmd == "run":
        print(json.dumps(run(a.grid, results_dir=a.results_dir, allow_dirty=a.allow_dirty, limit=a.limit)))
    elif a.cmd == "summary":
        for g in a.grids:
            SUMMARIES[g](a.results_dir)
            print(f"wrote {Path(a.results_dir or RESULTS_DIR) / GRIDS_GROUP[g] / 'summary.json'}", file=sys.stderr)
    else:
        write_result(CONTROLS_GROUP, "plan", {"kind": "plan", **PLAN}, a.results_dir)


GRIDS_GROUP = {"controls": CONTROLS_GROUP, "kl": KL_GROUP, "tau": TAU_GROUP}

if __name__ == "__main__":
    main()
