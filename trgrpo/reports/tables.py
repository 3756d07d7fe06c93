"""Tables and summaries from the ``results/`` records: the paper's tables beside ours (notebooks 05-08), the toy
grids' summaries (notebook 03, Part A) and the real-LM experiment (Part B). A cell without a run says "no run";
:func:`trgrpo.arms.label` is the one display name of every scheme, toy arm and KL weighting.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from trgrpo import paper, stats
from trgrpo.arms import ARMS, label
from trgrpo.files import RESULTS_DIR
from trgrpo.models import display_name
from trgrpo.reports import metrics
from trgrpo.runs import toy_controls as tc
from trgrpo.runs.fullscale import short_model_name
from trgrpo.runs.records import changed_since, record_path, summary_sources, write_result
from trgrpo.runs.toy_grid import load_runs, run_label
from trgrpo.weights import DEFAULTS

NO_RUN = "no run"


def variant(record: dict) -> str:
    """A readable name for what a run varies: scheme, and tau / (L, U) / placement when not the default."""
    s = record.get("spec", {})
    extra = []
    if record["scheme"] in ("tr", "reverse"):
        if s.get("tau", DEFAULTS.tau) != DEFAULTS.tau:
            extra.append(f"tau={s['tau']:g}")
        if (s.get("lower", DEFAULTS.lower), s.get("upper", DEFAULTS.upper)) != (DEFAULTS.lower, DEFAULTS.upper):
            extra.append(f"(L,U)=({s['lower']:g},{s['upper']:g})")
        if s.get("placement", "ratio") != "ratio":
            extra.append(s["placement"])
        if s.get("tau_mode", DEFAULTS.tau_mode) != DEFAULTS.tau_mode:
            extra.append(f"tau_mode={s['tau_mode']}")
    return label(record["scheme"]) + (f" [{', '.join(extra)}]" if extra else "")


def scale_label(records: list[dict]) -> str:
    """'model, N steps x P prompts x G, seeds [..], machine' for a set of runs of one variant."""
    r = records[0]
    s = r.get("spec", {})
    m = r.get("machine", {})
    where = m.get("gpu") or f"CPU x{m.get('cpu_count', '?')}"
    seeds = sorted({x["seed"] for x in records})
    return (
        f"{display_name(r.get('model'))}, {r.get('steps')} steps x {s.get('prompts_per_step', '?')} prompts x "
        f"{s.get('num_generations', '?')}, seeds {seeds}, {where}"
    )


def grad_accumulation(record: dict) -> str | None:
    """The dtype a run's gradients accumulated in: "bf16" under DeepSpeed ZeRO with bf16 on a GPU (DeepSpeed keeps
    them in the weights' dtype: ``runtime/engine.py:1807``, ``grad_accum_dtype`` unset), else "fp32" (fp32 weights,
    under bf16 autocast on one GPU; a CPU never runs bf16); None for a GPU record without ``engine``."""
    if not (record.get("machine") or {}).get("cuda"):
        return "fp32"
    if not record.get("engine"):
        return None
    return "bf16" if record["engine"].get("deepspeed_stage") and (record.get("spec") or {}).get("bf16") else "fp32"


def engines(records: Iterable[dict]) -> dict[str, int]:
    """Each engine of the runs (processes, ZeRO stage, :func:`grad_accumulation`: "8 GPUs ZeRO-2, bf16 grads") and
    its count of runs: runs of two engines are not the same experiment (docs/gpu.md)."""
    out: dict[str, int] = {}
    for r in records:
        e, gpu = r.get("engine") or {}, (r.get("machine") or {}).get("cuda")
        n = e.get("world_size") or (r.get("batch") or {}).get("world_size") or "?"
        stage = f" ZeRO-{e['deepspeed_stage']}" if e.get("deepspeed_stage") else ""
        unit = ("GPU", "GPUs") if gpu else ("CPU process", "CPU processes")
        key = f"{n} {unit[n != 1]}{stage}, {grad_accumulation(r) or '?'} grads"
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items()))


# The paper's tables (notebooks 05, 06, 08)


def kk_table(records: Iterable[dict]) -> list[dict]:
    """Table 1 / 4 / 7 / 9 layout: accuracy by number of people (mean over seeds) and the average."""
    rows = []
    for (model, name), runs in metrics.group_by(records, lambda r: (str(r.get("model")), variant(r))).items():
        row = {"model": model, "variant": name, "n_seeds": len(runs), "label": scale_label(runs)}
        finals = [r["final"] for r in runs if r.get("final")]
        for k in paper.KK_SIZES:
            vals = [v for f in finals if (v := _cell(f, k, 1)) is not None]
            row[k] = round(statistics.fmean(vals), 3) if vals else NO_RUN
        avg, sd, _ = stats.mean_std([_cell(f, "avg", 1) for f in finals])
        row["Avg."] = round(avg, 3) if avg == avg else NO_RUN
        row["sd"] = round(sd, 3) if sd == sd else NO_RUN
        rows.append(row)
    return rows


def cost_table(records: Iterable[dict]) -> list[dict]:
    """Table 8 layout from training runs: seconds per step and peak memory, GRPO vs TR-GRPO, per model."""
    rows = []
    for model, model_runs in metrics.group_by(records, lambda r: str(r.get("model"))).items():
        row = {"model": model}
        for scheme in ("equal", "tr"):
            runs = [r for r in model_runs if r["scheme"] == scheme]
            sps = [r["seconds_per_step"] for r in runs if r.get("seconds_per_step")]
            mem = [max(r["peak_memory"].values()) for r in runs if r.get("peak_memory")]
            row[f"{scheme}_s_per_step"] = round(statistics.median(sps), 2) if sps else NO_RUN
            row[f"{scheme}_peak_mem_mb"] = round(max(mem), 1) if mem else NO_RUN
        if all(isinstance(row[f"{s}_s_per_step"], float) for s in ("equal", "tr")):
            row["time_ratio"] = round(row["tr_s_per_step"] / row["equal_s_per_step"], 3)
        rows.append(row)
    return rows


METHOD_TO_SCHEME = {method: arm.spec["scheme"] for arm in ARMS.values() for method in arm.paper}  # the paper's rows
# Table 2's columns in our math records: column -> (benchmark, metric)
MATH_FIELDS = {
    "olympiad_bench": ("olympiadbench", "accuracy"),
    "minerva": ("minerva", "accuracy"),
    "math500": ("math500", "accuracy"),
    "amc_avg16": ("amc", "avg@16"),
    "aime_pass16": ("aime24", "pass@16"),
    "aime_avg16": ("aime24", "avg@16"),
}
MATH_DATASETS = {"DSR": "deepscaler", "ORZ": "orz"}


def _match(records: list[dict], prow: dict, table: int) -> list[dict]:
    """Our runs of one printed row: same model and scheme at the default weight (Table 2: same training set; a
    "base" row: the runs' initial evaluation; Table 7: TR on Qwen2.5-3B K&K at the swept tau or (L, U))."""
    out = []
    keys = ("tau", "lower", "upper")
    default = tuple(getattr(DEFAULTS, k) for k in keys)
    for r in records:
        spec, model = r.get("spec", {}), short_model_name(r.get("model"))
        weight = tuple(spec.get(k, d) for k, d in zip(keys, default))
        if table == 7:
            v = prow["value"]
            want = (v, *default[1:]) if prow["parameter"] == "tau" else (default[0], *v)
            if r["scheme"] == "tr" and model == "Qwen2.5-3B-Instruct" and r.get("task") == "kk" and weight == want:
                out.append(r)
        elif model != prow.get("model"):
            continue
        elif prow.get("method") == "base":
            if r.get("initial"):
                out.append({**r, "final": r["initial"]})
        elif METHOD_TO_SCHEME.get(prow.get("method")) == r["scheme"] and weight == default:
            train = spec.get("task_options", {}).get("train")
            if table != 2 or train == MATH_DATASETS.get(prow.get("dataset")):
                out.append(r)
    return out


def _cell(final: dict, column: str, table: int) -> float | None:
    """One run's number in a column of a paper table (Table 2: percent; None: not measured)."""
    if table == 2:
        if column == "avg":
            parts = [_cell(final, c, 2) for c in MATH_FIELDS]
            return None if None in parts else statistics.fmean(parts)
        name, metric = MATH_FIELDS[column]
        v = (final.get("by_set", {}).get(name) or {}).get(metric)
        return None if v is None else 100 * v
    if table == 3:
        return final.get(column, (final.get("by_dataset") or {}).get(column))
    by_n = final.get("by_n_people") or {}
    return final.get("avg") if column == "avg" else by_n.get(column, by_n.get(int(column)))


def on_substitute_data(record: dict) -> bool:
    """True when a run trained or evaluated on a stated substitute for the paper's data (generated puzzles or
    arithmetic: the task's ``data_source`` says ``substitute``)."""

    def found(x: Any) -> bool:
        return isinstance(x, dict) and (x.get("substitute") is True or any(found(v) for v in x.values()))

    return found(record.get("data_source"))


def paper_vs_ours(table: int, records: Iterable[dict]) -> list[dict]:
    """Every printed row of a paper table, each cell 'paper / ours' ('no run' where we have none), plus our label,
    which says when a run's data is a substitute for the paper's (the cell is then not the paper's experiment), and
    the runs' :func:`engines` (rows of two engines, or a row of runs on two, are not the same experiment)."""
    t = paper.table(table)
    records = list(records)
    rows = []
    for prow in t.records():
        runs = _match(records, prow, table)
        row = {k: prow[k] for k in t.index}
        for c in t.columns:
            vals = [float(v) for r in runs if (v := _cell(r.get("final") or {}, c, table)) is not None]
            row[c] = f"{prow.get(c)} / {round(statistics.fmean(vals), 2 if table == 2 else 3) if vals else NO_RUN}"
        subs = sum(map(on_substitute_data, runs))
        row["ours"] = scale_label(runs) + f", n={len(runs)}" if runs else NO_RUN
        row["ours"] += f", {subs} on substitute data (not the paper's)" if subs else ""
        row["engine"] = "; ".join(f"{k} (n={n})" for k, n in engines(runs).items()) or NO_RUN
        rows.append(row)
    return rows


# The toy controls grids (notebook 03, Part A): the plan's metric, paired differences, the summary records


def primary_metric(record: dict, steps: Sequence[int] = tc.EVAL_STEPS) -> float:
    """The plan's primary metric: mean greedy accuracy over the evaluations at ``steps`` (NaN if one lacks)."""
    at = {e.get("step"): float(e["greedy_accuracy"]) for e in record.get("eval_history", [])}
    vals = [at.get(s, math.nan) for s in steps]
    return float(sum(vals) / len(vals)) if all(math.isfinite(v) for v in vals) else math.nan


def arm_rows(arms: dict[str, list[dict]], baseline: str, order: Sequence[str], value=primary_metric) -> list[dict]:
    """One row per arm: n, mean of ``value`` and, against ``baseline`` on common seeds, the paired difference with
    95 % t-interval, p, Holm p over the arms, sign count and the detectable effect (80 % power) at 5 % and 5 % / m."""
    rows = []
    for arm in order:
        runs = sorted(arms.get(arm, []), key=lambda r: r["seed"])
        if not runs:
            continue
        m, s, n = stats.mean_std([value(r) for r in runs])
        row = {"arm": arm, "runs": [r["name"] for r in runs], "n": n, "mean": m, "std": s}
        if arm != baseline:
            t, c, seeds = metrics.paired_by_seed(runs, arms.get(baseline, []), value)
            res = stats.paired_t(t, c)
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
                mde=stats.min_detectable_effect(res["sd_diff"], res["n"]),
            )
        rows.append(row)
    compared = [r for r in rows if "p" in r]
    for r, p_adj in zip(compared, stats.holm([r["p"] for r in compared])):
        r["p_holm"] = p_adj
        r["family_size"] = len(compared)
        r["mde_family"] = stats.min_detectable_effect(
            r["sd_diff"], r["n_pairs"], alpha=stats.family_alpha(len(compared))
        )
    return rows


def grid_cost(records: Sequence[dict]) -> dict:
    """Wall and CPU time of the grid from its records: runs plus the warm starts they used (each counted once)."""
    runs = [r for r in records if "history" in r]
    ws = {r.get("warm_start_cached_at", r.get("model_path")): r.get("warm_start", {}) for r in runs}
    return {
        "n_runs": len(runs),
        "runs_wall_s": sum(r.get("run_wall_time_s", r.get("wall_time_s", 0.0)) for r in runs),
        "runs_cpu_s": sum(r.get("cpu_time_s", 0.0) for r in runs),
        "n_warm_starts": len(ws),
        "warm_wall_s": sum(w.get("wall_time_s", 0.0) for w in ws.values()),
        "warm_cpu_s": sum(w.get("cpu_time_s", 0.0) for w in ws.values()),
        "steps_per_run": sorted({r["steps"] for r in runs}),
        "threads": sorted({r.get("torch_threads") for r in runs if r.get("torch_threads")}),
    }


def _summary(group: str, body: dict, recs: Sequence[dict], results_dir, used: Sequence[dict] = ()) -> dict:
    """A grid's summary record: ``body``, the grid's cost and provenance and the hashes of the records it was built
    from (``recs`` and ``used``: other groups' records it compares against); written as results/<group>/summary.json."""
    machines = {
        f"{m.get('platform', '?')}, {m.get('cpu_count', '?')} CPUs" for m in (r.get("machine") or {} for r in recs)
    }
    out = {
        **body,
        "cost": grid_cost(recs),
        "provenance": {
            "commits": sorted({str(r.get("git_commit")) for r in recs}),
            "dirty": sorted({str(r.get("git_dirty")) for r in recs}),
            "machine": sorted(machines)[:3],
        },
        "records": summary_sources([*recs, *used]),
    }
    write_result(group, "summary", out, results_dir)
    return out


def controls_summary(results_dir: Path | str | None = None, *, eval_steps=tc.EVAL_STEPS) -> dict:
    """``results/toy/controls/summary.json``: the primary metric per arm, paired against GRPO."""
    recs = load_runs(results_dir, group=tc.CONTROLS_GROUP)
    rows = arm_rows(
        metrics.group_by(recs, run_label), tc.BASELINE, list(tc.ARMS), value=lambda r: primary_metric(r, eval_steps)
    )
    metric = tc.PRIMARY_METRIC if tuple(eval_steps) == tc.EVAL_STEPS else f"mean greedy accuracy at {eval_steps}"
    body = {"kind": "controls_summary", "primary_metric": metric, "eval_steps": list(eval_steps)}
    body.update(baseline=tc.BASELINE, task=tc.TASK, rows=rows)
    return _summary(tc.CONTROLS_GROUP, body, recs, results_dir)


def kl_window(record: dict, first: int = 41, last: int = tc.STEPS) -> float:
    """Mean of TRL's logged ``kl`` (plain k3 of pi against pi_ref, Eq. 6) over steps ``first``..``last``."""
    vals = [h["kl"] for h in record.get("history", []) if first <= h.get("step", 0) <= last and "kl" in h]
    return float(sum(vals) / len(vals)) if vals else math.nan


def kl_arms(results_dir: Path | str | None = None) -> dict[str, dict[str, list[dict]]]:
    """beta -> kl_weighting -> records (eq10 at beta = 0.001: the controls grid's tr-surrogate runs)."""
    out: dict[str, dict[str, list[dict]]] = {f"{b:g}": {} for b in tc.KL_BETAS}
    for r in load_runs(results_dir, group=tc.KL_GROUP):
        out.setdefault(f"{float(r['spec']['beta']):g}", {}).setdefault(r["spec"]["kl_weighting"], []).append(r)
    ctrl = [r for r in load_runs(results_dir, group=tc.CONTROLS_GROUP) if run_label(r) == "tr-surrogate"]
    out["0.001"]["eq10"] = [r for r in ctrl if r["seed"] in set(tc.KL_SEEDS)]
    return out


def kl_summary(results_dir: Path | str | None = None, *, eval_steps=tc.EVAL_STEPS) -> dict:
    """Reading 3 per beta: accuracy and KL(pi || pi_ref) (k3, last third of the run) per KL weighting, paired
    against ``plain`` (Eq. 6)."""
    last = max(eval_steps)
    first = last - last // 3 + 1  # the last third of the run: steps 41-60 of 60
    arms = kl_arms(results_dir)
    by_beta = {
        beta: {
            "accuracy": arm_rows(groups, "plain", tc.KL_WEIGHTINGS, value=lambda r: primary_metric(r, eval_steps)),
            "kl_steps_41_60": arm_rows(groups, "plain", tc.KL_WEIGHTINGS, value=lambda r: kl_window(r, first, last)),
        }
        for beta, groups in arms.items()
    }
    body = {"kind": "kl_summary", "metric": tc.PRIMARY_METRIC, "eval_steps": list(eval_steps)}
    body.update(kl_steps=[first, last], baseline="plain", by_beta=by_beta)
    used = [r for groups in arms.values() for rs in groups.values() for r in rs]
    return _summary(tc.KL_GROUP, body, load_runs(results_dir, group=tc.KL_GROUP), results_dir, used)


def tau_summary(results_dir: Path | str | None = None, *, eval_steps=tc.EVAL_STEPS) -> dict:
    """Table 7 at toy scale: every tau against GRPO on the same seeds (tau = 9 and GRPO from the controls grid)."""
    recs = load_runs(results_dir, group=tc.TAU_GROUP)
    ctrl = [r for r in load_runs(results_dir, group=tc.CONTROLS_GROUP) if r["seed"] in set(tc.TAU_SEEDS)]
    arms = metrics.group_by([r for r in ctrl if run_label(r) in ("equal", "tr-surrogate")] + recs, run_label)
    taus = sorted({*tc.TAUS, DEFAULTS.tau})
    order = ["equal"] + [f"tr-surrogate-tau{t:g}" if t != DEFAULTS.tau else "tr-surrogate" for t in taus]
    rows = arm_rows(arms, tc.BASELINE, order, value=lambda r: primary_metric(r, eval_steps))
    body = {"kind": "tau_summary", "metric": tc.PRIMARY_METRIC, "eval_steps": list(eval_steps), "rows": rows}
    return _summary(tc.TAU_GROUP, body, recs, results_dir, [r for rs in arms.values() for r in rs])


# The grids' summaries: group -> the role of results.schema.json its summary.json follows
SUMMARIES = {tc.CONTROLS_GROUP: "controls_summary", tc.KL_GROUP: "kl_summary", tc.TAU_GROUP: "tau_summary"}


def changed_summaries(results_dir: Path | str | None = None) -> dict[Path, list[str]]:
    """Each summary of :data:`SUMMARIES` built from other records than those there now: its path -> what changed
    (:func:`~trgrpo.runs.records.changed_since`); empty when every one is current."""
    paths = {record_path(group, "summary", results_dir): role for group, role in SUMMARIES.items()}
    return {path: c for path, role in paths.items() if (c := changed_since(path, role, results_dir))}


def write_summaries(results_dir: Path | str | None = None, **kw) -> list:
    """Write ``results/toy/{controls,kl,tau}/summary.json`` from the grids' records; returns the summaries."""
    return [summary(results_dir, **kw) for summary in (controls_summary, kl_summary, tau_summary)]


def grad_table(groups: dict, labels: Sequence[str]) -> list[dict]:
    """Figure 3 numbers: mean grad norm, mean token weight, grad norm / mean weight, its step-to-step CV (paired
    against GRPO)."""
    columns = {
        "grad norm": lambda r: metrics.history_mean(r, "grad_norm"),
        "mean w": lambda r: metrics.history_mean(r, "tr/weight_mean"),
        "grad norm / mean w": lambda r: stats.mean_std(metrics.grad_norm_per_mean_weight(r)[1])[0],
        "CV over steps of grad/mean w": lambda r: stats.spread_stats(metrics.grad_norm_per_mean_weight(r)[1])["cv"],
    }
    return metrics.comparison_table(groups, columns, baseline="equal", compare="grad norm / mean w", order=labels)


def zero_grad_table(groups: dict, labels: Sequence[str]) -> list[dict]:
    """Share of tokens with zero policy gradient (I_trust = 0) by sign of A, mean over steps and seeds."""
    keys = {
        "pos": "tr/zero_grad_frac_pos_adv",
        "neg": "tr/zero_grad_frac_neg_adv",
        "all": "tr/zero_grad_frac",
        "w at U": "tr/weight_at_upper",
    }
    return [
        {"run": lb, "n": len(groups[lb])}
        | {k: stats.mean_std([metrics.history_mean(r, key) for r in groups[lb]])[0] for k, key in keys.items()}
        for lb in labels
        if groups.get(lb)
    ]


# The real-LM experiment (SmolLM2-135M-Instruct on small arithmetic; notebook 03, Part B)

REWARD_KEYS = {
    "reward": "reward",
    "format": "rewards/arith_format_reward/mean",
    "answer": "rewards/arith_answer_reward/mean",
}


def stage0_rows(decision: dict) -> list[dict[str, Any]]:
    """One row per stage-0 candidate: its measures before → after the GRPO probe and the plan's decision."""

    def both(c: dict, key: str) -> tuple:
        return c["before"][key], c["after"][key]

    return [
        {
            "candidate": c["id"],
            "sampled accuracy before → after": both(c, "sampled_accuracy"),
            "L < w < U before → after": both(c, "share_between"),
            "w = U before → after": both(c, "share_at_upper"),
            "greedy accuracy before → after": tuple(c["greedy_accuracy"]),
            "s / step": c["seconds_per_step"],
            "accepted": c["accepted"],
        }
        for c in decision["candidates"]
    ]


def collapse_step(record: dict, rule: dict) -> int | None:
    """The first step of ``floor_steps`` consecutive steps with answer reward <= ``reward_floor``, else (with
    ``final_below_start``) the last step if the final held-out accuracy is below the first; None: no collapse."""
    run = 0
    for h in record["history"]:
        run = run + 1 if h[REWARD_KEYS["answer"]] <= rule["reward_floor"] else 0
        if run == rule["floor_steps"]:
            return h["step"] - rule["floor_steps"] + 1
    evals = record["eval_history"]
    if rule.get("final_below_start") and evals[-1]["accuracy"] < evals[0]["accuracy"]:
        return evals[-1]["step"]
    return None


def by_arm_seed(records: Sequence[dict]) -> dict[tuple[str, int], dict]:
    """The runs of a grid keyed by (arm id, seed): a run is named ``<arm>-seed<k>``."""
    return {(r["name"].rsplit("-seed", 1)[0], r["seed"]): r for r in records}


def stress_summary(records: Sequence[dict], plan: dict, *, treatment: str = "tr", control: str = "grpo") -> dict:
    """Collapses per arm over the common seeds, the pair counts, and Fisher's exact test (two-sided) on arm x
    collapsed, with the p the design gives for a total contrast and for one collapse short of it."""
    from scipy.stats import fisher_exact

    by = by_arm_seed(records)
    seeds = sorted(s for a, s in by if a == treatment and (control, s) in by)
    steps = {key: collapse_step(rec, plan["collapse"]) for key, rec in sorted(by.items())}
    col = {arm: [steps[(arm, s)] is not None for s in seeds] for arm in (treatment, control)}
    k_t, k_c, n = sum(col[treatment]), sum(col[control]), len(seeds)
    pairs = list(zip(col[treatment], col[control]))

    def fisher(table) -> float:
        return float(fisher_exact(table)[1]) if n else math.nan

    return {
        "seeds": seeds,
        "collapsed": {treatment: k_t, control: k_c},
        "n": n,
        "both": sum(t and c for t, c in pairs),
        "neither": sum(not t and not c for t, c in pairs),
        f"only {treatment}": sum(t and not c for t, c in pairs),
        f"only {control}": sum(c and not t for t, c in pairs),
        "collapse_steps": {f"{a}-seed{s}": step for (a, s), step in steps.items()},
        "fisher_p": fisher([[k_t, n - k_t], [k_c, n - k_c]]),
        "p_total": fisher([[n, 0], [0, n]]),
        "p_one_short": fisher([[n, 0], [1, n - 1]]),
    }


def stress_rows(records: Sequence[dict], plan: dict) -> list[dict[str, Any]]:
    """One row per seed: each arm's held-out greedy accuracy before and after, and the step it collapsed at."""
    by = by_arm_seed(records)
    rows = []
    for seed in sorted({s for _, s in by}):
        row: dict[str, Any] = {"seed": seed}
        for arm in (a["id"] for a in plan["arms"]):
            if (rec := by.get((arm, seed))) is not None:
                ev = rec["eval_history"]
                row[f"{arm}: accuracy before → after"] = (ev[0]["accuracy"], ev[-1]["accuracy"])
                row[f"{arm}: collapsed at step"] = collapse_step(rec, plan["collapse"])
        rows.append(row)
    return rows


def delta_text(row: dict, spec: str = "+.3f") -> str:
    """:func:`trgrpo.stats.delta_ci` of a row of :func:`arm_rows` ("" for the baseline)."""
    if "delta_vs_equal" not in row:
        return ""
    return stats.delta_ci(row["delta_vs_equal"], row["ci_low"], row["ci_high"], row["p"], spec=spec)


def row_mde(row: dict) -> float | None:
    """The detectable effect at the level the Holm-adjusted test uses (alpha / m; the 5 % one where no family)."""
    return row.get("mde_family", row.get("mde"))


def controls_table(summary: dict) -> str:
    """A toy summary's rows as a markdown table."""
    m = max((r.get("family_size", 1) for r in summary["rows"] if "delta_vs_equal" in r), default=1)
    head = "| arm | n | mean | Δ vs GRPO [95 % t-interval], p | Holm p | higher / lower / tied | MDE (80 % power, "
    lines = [head + f"α = 0.05/{m}) |", "|---|---:|---:|---|---:|---|---:|"]
    for r in summary["rows"]:
        rest = "(baseline) | | |"
        if "delta_vs_equal" in r:
            signs = f"{r['higher']} / {r['lower']} / {r['ties']}"
            rest = f"{delta_text(r)} | {stats.num(r['p_holm'], '.2g')} | {signs} | {stats.num(row_mde(r))}"
        lines.append(f"| {label(r['arm'])} | {r['n']} | {stats.num(r['mean'])} | {rest} |")
    return "\n".join(lines)


def clip_of(records: list[dict], arm: str | None = None) -> dict:
    """:func:`trgrpo.reports.metrics.clip_share` of ``arm``'s records (all when None) at TRGRPOConfig's default clip
    norm."""

    from trgrpo.trainer import TRGRPOConfig

    return metrics.clip_share(
        [r for r in records if arm is None or run_label(r) == arm], float(TRGRPOConfig.max_grad_norm)
    )


def kl_grip(results_dir: Path | str | None = None) -> dict | None:
    """How much the KL term moved the KL at all: eq10's KL (mean over steps 41-60) at the high beta minus at the low
    beta on the same seeds (:func:`trgrpo.stats.paired_t`); None when either arm has no record."""
    arms = kl_arms(results_dir)
    hi, lo = (arms.get(f"{beta(tc.KL_BETAS):g}", {}).get("eq10", []) for beta in (max, min))
    hi, lo, seeds = metrics.paired_by_seed(hi, lo, kl_window)
    return stats.paired_t(hi, lo) if seeds else None


def first_last(record: dict, key: str, n: int = 5) -> tuple[float, float]:
    """Mean of ``key`` over the first ``n`` and over the last ``n`` logged steps of a run record."""
    values = [float(h[key]) for h in record.get("history", []) if key in h]
    if len(values) < n:
        raise ValueError(f"run {record.get('name')!r} has {len(values)} logged values of {key!r}, fewer than n = {n}")
    return sum(values[:n]) / n, sum(values[-n:]) / n


def run_summary(record: dict, n: int = 5) -> dict[str, Any]:
    """One table row: the rewards of the first and last ``n`` steps, greedy held-out scores before and after."""
    row: dict[str, Any] = {"run": record["name"], "scheme": record["scheme"], "seed": record["seed"]}
    row["steps"] = len(record.get("history", []))
    for short, key in REWARD_KEYS.items():
        first, last = first_last(record, key, n)
        row[f"{short} first {n}"] = round(first, 3)
        row[f"{short} last {n}"] = round(last, 3)
    before, after = record.get("initial") or {}, record.get("final") or {}
    for name, key in (("acc", "accuracy"), ("format", "format_rate")):
        row[f"greedy {name} before → after"] = f"{before.get(key, math.nan):.2f} → {after.get(key, math.nan):.2f}"
    row["s / step"] = round(record.get("seconds_per_step", float("nan")), 1)
    row["commit"] = (record.get("git_commit") or "?")[:7] + ("+dirty" if record.get("git_dirty") else "")
    return row


def table3(rows: Sequence[dict[str, Any]]):
    """Table 3's layout in percent, one row per ``{"method", "em_by_type"}``: General QA columns (one-hop, or NQ,
    TriviaQA, PopQA), Multi-hop QA columns, and their average."""
    import pandas as pd

    from trgrpo.tasks.search_data import TABLE3_DATASETS, TABLE3_LABELS

    keys_seen = {k for r in rows for k in (r.get("em_by_type") or {})}
    if keys_seen & set(TABLE3_DATASETS):
        cols = [(("General QA" if k in TABLE3_DATASETS[:3] else "Multi-hop QA"), k) for k in TABLE3_DATASETS]
        label = TABLE3_LABELS
    else:
        cols = [("General QA", "one-hop"), ("Multi-hop QA", "two-hop"), ("Multi-hop QA", "comparison")]
        label = {}
    data = [[(r.get("em_by_type") or {}).get(k, math.nan) * 100.0 for _, k in cols] for r in rows]
    index = pd.Index([r.get("method", "?") for r in rows], name="method")
    df = pd.DataFrame(data, index=index, columns=pd.MultiIndex.from_tuples([(g, label.get(k, k)) for g, k in cols]))
    df[("", "Avg.")] = df.mean(axis=1)  # over the columns measured
    return df.round(2)


def mean_results(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Average ``em`` and ``em_by_type`` over several evaluation dicts (e.g. seeds)."""
    results = [r for r in results if r]
    if not results:
        return {}
    keys = sorted({k for r in results for k in r.get("em_by_type", {})})
    return {
        "em": statistics.fmean(r["em"] for r in results),
        "em_by_type": {k: statistics.fmean(r["em_by_type"][k] for r in results if k in r["em_by_type"]) for k in keys},
        "n_seeds": len(results),
    }


FIRST_ORDER = ("first_order", "analysis-add2.json")  # the first-order record (trgrpo lm first-order)


def _ci(row: dict, key: str = "ci95") -> str:
    lo, hi = row[key]
    return f"{row['mean']:+.4f} [{lo:+.4f}, {hi:+.4f}]"


def first_order_text(results_dir: Path | str | None = None) -> str:
    """The README's lm-first-order sentence (issue 46 section 2 A, :mod:`trgrpo.runs.first_order`): <grad J,
    u_TR - u_GRPO> of AdamW's applied updates, its interval, the controls, the scale and what it cannot test."""
    path = Path(results_dir or RESULTS_DIR).joinpath(*FIRST_ORDER)
    head = (
        "**Does one TR-GRPO update raise a held-out objective more than GRPO's, as AdamW applies it?** (first order: "
        "plan `results/first_order/plan.yaml` fixed before its run, record `results/first_order/analysis-add2.json`, "
        "`trgrpo lm first-order`, notebook 03 Part B)"
    )
    if not path.exists():
        return f"{head}. _Not measured yet._"
    rec = json.loads(path.read_text())
    plan, rows = rec["plan"], rec["summary"]["rows"]
    prim = next(r for r in rows if r["primary"])
    ck = next(c for c in rec["checkpoints"] if c["step"] == prim["step"])
    pick = {(r["state"], r["scheme"]): r for r in rows if r["step"] == prim["step"]}
    fam, fresh = rec["summary"]["n_secondary"], pick[("fresh", "tr")]
    verdict = {
        "scheme larger": "TR's first-order gain is larger than GRPO's",
        "GRPO larger": "TR's first-order gain is smaller than GRPO's",
        "no difference detected": "no difference detected at this scale",
    }[prim["verdict"]]
    ctrl = "; ".join(
        f"{name} {kind}: " + (_ci(r, "ci_family") if s != "const" else f"within ±{max(map(abs, r['ci_family'])):.0e}")
        for s, name in (("reverse", "Reverse"), ("const", "const"))
        for kind in ("state", "fresh")
        if (r := pick.get((kind, s)))
    )
    return (
        f"{head}. SmolLM2-135M-Instruct after {prim['step']} GRPO steps on two-digit addition (seed {plan['seed']}, "
        f"lr {plan['adamw']['lr']:g}, clip {plan['max_grad_norm']:g}; reduced to this machine: one checkpoint, "
        f"{prim['n']} rollout batches of {plan['prompts_per_step']} prompts × {plan['group_size']}, J on "
        f"{plan['n_heldout']} held-out items, where the issue asks for checkpoints 0–60, ≥ 16 batches and ≥ 500 "
        f"items). J is the mean log P(correct answer), teacher-forced; u is the displacement one AdamW step applies "
        f"(clipping included) from the run's optimiser state; ⟨∇J, u_TR − u_GRPO⟩, paired by batch, is the "
        f"first-order change of J per step that choosing TR makes: {_ci(prim)} nats (95 % t-interval, n = "
        f"{prim['n']}; {prim['higher']} batches higher, {prim['lower']} lower) against GRPO's own "
        f"⟨∇J, u_GRPO⟩ = {prim['grpo_dot_mean']:+.4f}: {verdict} (smallest effect this design detects with 80 % "
        f"power: {prim['mde_family']:.4f}). From a fresh optimiser state (a run's first step) TR − GRPO is "
        f"{_ci(fresh, 'ci_family')} against GRPO's {fresh['grpo_dot_mean']:+.4f}; controls, Reverse and const "
        f"against GRPO: {ctrl} "
        f"({100 * (1 - 0.05 / fam):.0f} % intervals, Bonferroni over the {fam} rows besides the primary; const's "
        f"gradient is a multiple of GRPO's, so after clipping its update is GRPO's: ≈ 0 by construction). "
        f"{len(rec['checkpoints'][0]['batches'])} batches measured, {ck['skipped_batches']} redrawn (every "
        f"advantage 0); {rec['wall_time_s'] / 60:.0f} min on {rec['machine']['torch_threads']} thread of a shared "
        f"{rec['machine']['cpu_count']}-core CPU, commit {rec['git_commit'][:7]}, clean tree: "
        f"{rec['git_dirty'] is False}. What it cannot test: only early in training (one checkpoint), a smooth "
        "metric to first order (one step's linear change of mean log P(correct), not an accuracy change), and "
        "nothing about the paper's end-of-training accuracy."
    )


PILOT = ("first_order", "analysis-pilot.json")  # issue 46 B's pilot analysis (trgrpo lm pilot)


def pilot_text(results_dir: Path | str | None = None) -> str:
    """The README's lm-pilot sentence (issue 46 section 2 B, :func:`trgrpo.runs.first_order.pilot_analysis`): the
    paired TR - GRPO of final P(correct) and greedy accuracy, sigma_d with its range, what n pairs detect, the gate."""
    path = Path(results_dir or RESULTS_DIR).joinpath(*PILOT)
    head = (
        "**Over 30 steps, does TR-GRPO raise the held-out probability of the correct answer more than GRPO?** "
        "(issue 46 B's pilot: plan `results/first_order/pilot_plan.yaml` fixed before its runs, records "
        "`results/first_order/pilot/`, analysis `results/first_order/analysis-pilot.json`, `trgrpo lm pilot`, "
        "notebook 03 Part B)"
    )
    if not path.exists():
        return f"{head}. _Not run yet._"
    rec = json.loads(path.read_text())
    plan, base, s0, n = rec["plan"], rec["plan"]["base"], rec["step0"], rec["n_pairs"]
    seeds = ", ".join(str(p["seed"]) for p in rec["pairs"])
    same = sum(p["step1_reward_same"] for p in rec["pairs"])
    text = (
        f"{head}. SmolLM2-135M-Instruct on two-digit addition, {_count(n, 'seed pair')} (seeds {seeds}) of GRPO and "
        "TR-GRPO, "
        f"{base['steps']} steps of {base['prompts_per_step']} prompts × {base['num_generations']} at lr "
        f"{base['learning_rate']:g}, with common random numbers (each step's rollouts drawn after reseeding from "
        f"(seed, step): the step-1 reward is the same in both arms in {same} of {n} pairs), each run evaluated on the "
        f"same {s0['n']} held-out problems (the untouched model, shared: P(correct) {s0['p_correct']:.4f}, greedy "
        f"accuracy {s0['accuracy']:.3f}). P(correct) is the mean over items of the answer's teacher-forced probability."
    )
    if n < 2:
        diffs = ", ".join(f"{d:+.4f}" for d in rec["diffs"]["p_correct"])
        return f"{text} Too few pairs for an interval: TR − GRPO of P(correct) {diffs or 'none'}."
    p, acc, prim, gate = rec["summary"]["p_correct"], rec["summary"]["accuracy"], rec["primary"], rec["gate"]
    (lo, hi), (slo, shi), mde = p["ci"], prim["sigma_d_range95"], prim["mde"]
    full = [str(k) for k in plan["decision"]["full_pairs"]]
    hours = "–".join(f"{gate['full_hours'][k]:.0f}" for k in full)
    verdict = (
        f"passed: the {'–'.join(full)}-pair run is the next step, about {hours} h on this machine at the measured "
        f"{rec['run_wall_s'] / 60:.0f} min a run on 2 workers (n = {full[-1]} would detect "
        f"{mde[full[-1]][0]:.4f} at this σ_d)"
        if gate["passes"]
        else "failed: the full run is not worth its cost at this spread, and the pilot with its interval is B's result"
    )
    missing = f" Not run, for time: {', '.join(rec['not_run'])}." if rec["not_run"] else ""
    return (
        f"{text} TR − GRPO of final P(correct): {p['mean_diff']:+.4f} [{lo:+.4f}, {hi:+.4f}] (95 % t-interval, "
        f"n = {n}; {_count(p['higher'], 'pair')} higher, {p['lower']} lower): {prim['verdict']}; of greedy accuracy "
        f"{acc['mean_diff']:+.3f} [{acc['ci'][0]:+.3f}, {acc['ci'][1]:+.3f}]. σ_d (the sd of the pair differences) "
        f"{prim['sigma_d']:.4f}, on "
        f"{_count(n - 1, 'degree')} of freedom a range, not a number: {slo:.4f}–{shi:.4f} (95 %, chi-square); "
        f"with n = {n} the "
        f"smallest effect a two-sided paired t-test at 0.05 detects with 80 % power is {mde[str(n)][0]:.4f} "
        f"({mde[str(n)][1]:.4f}–{mde[str(n)][2]:.4f} over that range). Gate σ_d ≤ {gate['threshold']:g}: "
        f"{verdict}.{missing} Runs at commit {', '.join(c[:7] for c in rec['runs_commits'])}, clean tree: "
        f"{rec['runs_clean']}; {rec['run_wall_s'] / 60:.0f} min a run ({rec['seconds_per_step'][0]:.0f}–"
        f"{rec['seconds_per_step'][1]:.0f} s a step) on 1 torch thread of a shared {rec['machine']['cpu_count']}-core "
        "CPU. What it cannot test: this is early in training (30 steps) on a smooth metric; it says nothing about "
        "the paper's end-of-training accuracy."
    )


def _count(k: int, noun: str) -> str:
    return f"{k} {noun}{'s' * (k != 1)}"
