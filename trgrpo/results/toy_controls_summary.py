"""Summaries of the toy controls grids (notebook 03, Part A; paper Section 4.3), from their records.

The plan's primary metric of a run (:func:`primary_metric`), and per grid one ``summary.json``: each arm's mean and
its paired difference to the baseline on common seeds, with the t-interval, p, Holm's adjustment, the sign count
and the minimum detectable effect (:func:`arm_rows`; the statistics are :mod:`trgrpo.results.analysis`'s). The controls
grid compares with GRPO (:func:`controls_summary`), the KL grid with the plain KL of Eq. 6 (:func:`kl_summary`),
the tau sweep with GRPO on the same seeds (:func:`tau_summary`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from ..pipeline.experiment import write_result
from ..pipeline.toy_controls_grids import (
    ARMS,
    BASELINE,
    CONTROLS_GROUP,
    EVAL_STEPS,
    KL_BETAS,
    KL_GROUP,
    KL_SEEDS,
    KL_WEIGHTINGS,
    PRIMARY_METRIC,
    SHORT_EVAL_STEPS,
    SHORT_METRIC,
    SHORT_STEPS,
    TASK,
    TAU_GROUP,
    TAU_SEEDS,
    TAUS,
)

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
    from ..pipeline.toy import load_runs

    return load_runs(results_dir, group=group)


def _label(record: dict) -> str:
    from ..pipeline.toy import run_label

    return run_label(record)


def arm_rows(arms: dict[str, list[dict]], baseline: str, order: Sequence[str], value=primary_metric) -> list[dict]:
    """One row per arm: records named, n, mean of ``value``, and (arms other than ``baseline``) the paired
    difference to the baseline on common seeds with 95 % t-interval, p, Holm-adjusted p over the arms compared, the
    sign count (ties apart) and the minimum detectable effect at this n (power 80 %): ``mde`` at two-sided 5 %,
    ``mde_family`` at 5 % / m, the level of Holm's first step over the m arms compared."""
    from .analysis import family_alpha, holm, mean_std, min_detectable_effect, paired_t

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
        # Holm's adjusted p, and the detectable effect at the level of Holm's first step (alpha / m), the level at
        # which a verdict reads its interval
        r["p_holm"] = p_adj
        r["family_size"] = len(compared)
        r["mde_family"] = min_detectable_effect(r["sd_diff"], r["n_pairs"], alpha=family_alpha(len(compared)))
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
    from ..pipeline.toy import grid_cost

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
