"""Tables and figures of the paper from our ``results/`` records (Tables 1, 2, 4, 7, 8, 9; Figures 2-4).

Each of our rows carries its label: model, scale (steps x prompts x group), seeds, machine. A table cell we
have no run for says so ("no run") rather than staying blank. Figures follow the repository convention:
per-seed traces faint, the median across seeds bold.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from trgrpo.experiment import git_commit, git_dirty, write_result
from trgrpo.fullscale import short_model_name
from trgrpo.stats import mean_std
from trgrpo.tasks.addition import MAX_COMPLETION, generate, parse_answer, records, splits
from trgrpo.toy import GROUP, run_label, warm_start
from trgrpo.toy_controls import (
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

KK_SIZES = (3, 4, 5, 6, 7)
NO_RUN = "no run"


def variant(record: dict) -> str:
    """A readable name for what a run varies: scheme, and tau / (L, U) / placement when not the default."""
    s = record.get("spec", {})
    name = {"equal": "GRPO (equal)", "tr": "TR-GRPO", "reverse": "Reverse", "random": "Random"}.get(
        record["scheme"], record["scheme"]
    )
    extra = []
    if record["scheme"] in ("tr", "reverse"):
        if s.get("tau", 9.0) != 9.0:
            extra.append(f"tau={s['tau']:g}")
        if (s.get("lower", 1.0), s.get("upper", 1.4)) != (1.0, 1.4):
            extra.append(f"(L,U)=({s['lower']:g},{s['upper']:g})")
        if s.get("placement", "ratio") != "ratio":
            extra.append(s["placement"])
        if s.get("tau_mode", "scale") != "scale":
            extra.append(f"tau_mode={s['tau_mode']}")
    return name + (f" [{', '.join(extra)}]" if extra else "")


def scale_label(records: list[dict]) -> str:
    """'model, N steps x P prompts x G, seeds [..], machine' for a set of runs of one variant."""
    r = records[0]
    s = r.get("spec", {})
    m = r.get("machine", {})
    where = m.get("gpu") or f"CPU x{m.get('cpu_count', '?')}"
    seeds = sorted({x["seed"] for x in records})
    return (
        f"{r.get('model')}, {r.get('steps')} steps x {s.get('prompts_per_step', '?')} prompts x "
        f"{s.get('num_generations', '?')}, seeds {seeds}, {where}"
    )


def group_by_variant(records: Iterable[dict]) -> dict[tuple[str, str], list[dict]]:
    out: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in records:
        out[(str(r.get("model")), variant(r))].append(r)
    return dict(out)


def kk_table(records: Iterable[dict], *, key: str = "final") -> list[dict]:
    """Table 1 / 4 / 7 / 9 layout: accuracy by number of people (mean over seeds) and the average."""
    rows = []
    for (model, name), runs in group_by_variant(records).items():
        row = {"model": model, "variant": name, "n_seeds": len(runs), "label": scale_label(runs)}
        for k in KK_SIZES:
            vals = [
                r[key]["by_n_people"].get(str(k), r[key]["by_n_people"].get(k))
                for r in runs
                if r.get(key) and "by_n_people" in r[key]
            ]
            vals = [v for v in vals if v is not None]
            row[str(k)] = round(statistics.fmean(vals), 3) if vals else NO_RUN
        avg, sd, _ = mean_std([r[key]["avg"] for r in runs if r.get(key) and "avg" in r[key]])
        row["Avg."] = round(avg, 3) if avg == avg else NO_RUN
        row["sd"] = round(sd, 3) if sd == sd else NO_RUN
        rows.append(row)
    return rows


def cost_table(records: Iterable[dict]) -> list[dict]:
    """Table 8 layout from training runs: seconds per step and peak memory, GRPO vs TR-GRPO, per model."""
    by_model: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        by_model[str(r.get("model"))][r["scheme"]].append(r)
    rows = []
    for model, schemes in by_model.items():
        row = {"model": model}
        for scheme in ("equal", "tr"):
            runs = schemes.get(scheme, [])
            sps = [r["seconds_per_step"] for r in runs if r.get("seconds_per_step")]
            mem = [max(r["peak_memory"].values()) for r in runs if r.get("peak_memory")]
            row[f"{scheme}_s_per_step"] = round(statistics.median(sps), 2) if sps else NO_RUN
            row[f"{scheme}_peak_mem_mb"] = round(max(mem), 1) if mem else NO_RUN
        if all(isinstance(row[f"{s}_s_per_step"], float) for s in ("equal", "tr")):
            row["time_ratio"] = round(row["tr_s_per_step"] / row["equal_s_per_step"], 3)
        rows.append(row)
    return rows


def trajectories(records: Iterable[dict], key: str) -> dict[str, list[list[float]]]:
    """Per variant, the per-seed series of ``history[key]``."""
    out: dict[str, list[list[float]]] = defaultdict(list)
    for r in records:
        series = [h.get(key) for h in r.get("history", [])]
        out[variant(r)].append([float("nan") if v is None else float(v) for v in series])
    return dict(out)


LINE_STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D")


def plot_trajectories(
    records: Iterable[dict], key: str, *, ax=None, title: str | None = None, ylabel: str | None = None
):
    """Figure 3 (key='grad_norm') / Figure 4 (key='reward') analog: seeds faint, median bold. Each variant has its
    own colour, line style and marker, so equal curves (GRPO and TR-GRPO often coincide early) stay both visible."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(6.5, 3.6))
    for i, (name, runs) in enumerate(sorted(trajectories(records, key).items())):
        color, style, marker = f"C{i}", LINE_STYLES[i % len(LINE_STYLES)], MARKERS[i % len(MARKERS)]
        n = min(len(s) for s in runs) if runs else 0
        if n == 0:
            continue
        arr = np.array([s[:n] for s in runs], dtype=float)
        x = np.arange(1, n + 1)
        for s in arr:
            ax.plot(x, s, color=color, ls=style, alpha=0.25, lw=0.8)
        every = max(1, n // 10)  # markers staggered between variants so they do not sit on each other
        ax.plot(
            x,
            np.nanmedian(arr, axis=0),
            color=color,
            ls=style,
            lw=2.0,
            marker=marker,
            ms=4,
            markevery=((i * every // 2) % every, every),
            label=f"{name} (n={len(runs)})",
        )
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel or key)
    ax.set_title(title or key)
    ax.legend(fontsize=7)
    if fig.get_layout_engine() is None:  # a constrained figure of several panels lays itself out
        fig.tight_layout()
    return fig


def plot_accuracy_by_size(records: Iterable[dict], *, ax=None, title: str = "K&K accuracy by number of people"):
    """Figure 2 analog: final accuracy per puzzle size for each variant (mean over seeds)."""
    import matplotlib.pyplot as plt
    import numpy as np

    rows = kk_table(records)
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(6.5, 3.6))
    width = 0.8 / max(1, len(rows))
    x = np.arange(len(KK_SIZES))
    for i, row in enumerate(rows):
        vals = [row[str(k)] if isinstance(row[str(k)], float) else np.nan for k in KK_SIZES]
        ax.bar(x + i * width, vals, width, label=f"{row['variant']} (n={row['n_seeds']})")
    ax.set_xticks(x + width * (len(rows) - 1) / 2, [str(k) for k in KK_SIZES])
    ax.set_xlabel("number of people")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def markdown_table(rows: list[dict], columns: list[str] | None = None) -> str:
    """Render a list of dicts as a Markdown table (for notebooks, the README and issue notes)."""
    if not rows:
        return "(no rows)"
    columns = columns or list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join(str(r.get(c, "")) for c in columns) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# The paper's tables beside ours (notebook 08)

METHOD_TO_SCHEME = {
    "GRPO": "equal",
    "Equal weight": "equal",
    "TR-GRPO": "tr",
    "Random weight": "random",
    "Reverse weight": "reverse",
}
MATH_COLUMNS = {
    "olympiad_bench": ("olympiadbench", "accuracy"),
    "minerva": ("minerva", "accuracy"),
    "math500": ("math500", "accuracy"),
    "amc_avg16": ("amc", "avg@16"),
    "aime_pass16": ("aime24", "pass@16"),
    "aime_avg16": ("aime24", "avg@16"),
}
MATH_DATASETS = {"DSR": "deepscaler", "ORZ": "orz"}


def _default_weight(spec: dict) -> bool:
    return (spec.get("tau", 9.0), spec.get("lower", 1.0), spec.get("upper", 1.4)) == (9.0, 1.0, 1.4)


def _match(records: list[dict], paper_row: dict, table: int) -> list[dict]:
    """Our runs that correspond to one printed row (same model, scheme and, for Table 7, the swept value)."""
    model = paper_row.get("model")
    out = []
    for r in records:
        spec = r.get("spec", {})
        if table == 7:
            if (
                r["scheme"] != "tr"
                or short_model_name(r.get("model")) != "Qwen2.5-3B-Instruct"
                or r.get("task") != "kk"
            ):
                continue
            v = paper_row["value"]
            if (
                paper_row["parameter"] == "tau"
                and spec.get("tau") == v
                and (spec.get("lower"), spec.get("upper")) == (1.0, 1.4)
            ):
                out.append(r)
            elif (
                paper_row["parameter"] != "tau"
                and (spec.get("lower"), spec.get("upper")) == tuple(v)
                and spec.get("tau") == 9.0
            ):
                out.append(r)
            continue
        if short_model_name(r.get("model")) != model:
            continue
        method = paper_row.get("method")
        if method == "base":
            if r.get("initial"):
                out.append({**r, "final": r["initial"]})
            continue
        if METHOD_TO_SCHEME.get(method) != r["scheme"] or not _default_weight(spec):
            continue
        if table == 2 and spec.get("task_options", {}).get("train") != MATH_DATASETS.get(paper_row.get("dataset")):
            continue
        out.append(r)
    return out


def _our_value(runs: list[dict], column: str, table: int) -> float | None:
    vals = []
    for r in runs:
        final = r.get("final") or {}
        if table in (1, 4, 7, 9):
            v = final.get("avg") if column == "avg" else (final.get("by_n_people") or {}).get(column)
            if v is None:
                v = (final.get("by_n_people") or {}).get(int(column)) if column.isdigit() else None
        elif table == 2:
            if column == "avg":
                parts = [_our_value([r], c, 2) for c in MATH_COLUMNS]
                v = statistics.fmean(parts) if parts and all(p is not None for p in parts) else None
            else:
                name, metric = MATH_COLUMNS[column]
                v = (final.get("by_set", {}).get(name) or {}).get(metric)
                v = None if v is None else 100 * v
        else:  # table 3: exact match in percent, per dataset
            v = final.get(column, (final.get("by_dataset") or {}).get(column))
        if v is not None:
            vals.append(float(v))
    return statistics.fmean(vals) if vals else None


def paper_vs_ours(table: int, records: Iterable[dict]) -> list[dict]:
    """Every printed row of a paper table, each cell 'paper / ours' ('no run' where we have none), plus our label."""
    from trgrpo import paper

    t = paper.table(table)
    records = list(records)
    rows = []
    for prow in t.records():
        runs = _match(records, prow, table)
        row = {k: prow[k] for k in t.index}
        for c in t.columns:
            ours = _our_value(runs, c, table) if runs else None
            p = prow.get(c)
            row[c] = f"{p} / {NO_RUN if ours is None else round(ours, 3 if table != 2 else 2)}"
        row["ours"] = scale_label(runs) + f", n={len(runs)}" if runs else NO_RUN
        rows.append(row)
    return rows


# ---- toy_controls_summary: Summaries of the toy controls grids (notebook 03, Part A; paper Section 4.3), from their


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
    from trgrpo.toy import load_runs

    return load_runs(results_dir, group=group)


def _label(record: dict) -> str:
    from trgrpo.toy import run_label

    return run_label(record)


def arm_rows(arms: dict[str, list[dict]], baseline: str, order: Sequence[str], value=primary_metric) -> list[dict]:
    """One row per arm: records named, n, mean of ``value``, and (arms other than ``baseline``) the paired
    difference to the baseline on common seeds with 95 % t-interval, p, Holm-adjusted p over the arms compared, the
    sign count (ties apart) and the minimum detectable effect at this n (power 80 %): ``mde`` at two-sided 5 %,
    ``mde_family`` at 5 % / m, the level of Holm's first step over the m arms compared."""
    from trgrpo.stats import family_alpha, holm, mean_std, min_detectable_effect, paired_t

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
    from trgrpo.tables import grid_cost

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


# ---- toy_analysis: Per-token gradient analysis and the tables of the toy grid (notebook 03).


# ---------------------------------------------------------------------------------------------------------------
# Per-token gradient norms (Theorem 3.1 / Eq. 8 and Theorem 3.2 / Eq. 13 at toy scale)


def token_grad_norms(
    model,
    tokenizer,
    prompts: Sequence[str],
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    seed: int = 0,
) -> dict:
    """Sample one completion per prompt, then for every completion token o_t: pi(o_t) at ``temperature`` (as the
    trainer's weight sees it) and ||grad_theta log pi(o_t)||_2 over all parameters, one backward pass per token.

    A minimal fallback; :func:`token_grad_analysis` uses :func:`trgrpo.theory.per_token_grad_norms` when that
    module is there. Returns lists ``prob``, ``grad_norm``, ``position``, ``token``, ``sequence``, and
    ``completions`` (one per prompt).
    """
    import torch

    completions = generate(
        model, tokenizer, prompts, max_new_tokens=max_new_tokens, do_sample=True, temperature=temperature, seed=seed
    )
    params = [p for p in model.parameters() if p.requires_grad]
    was_training = model.training
    model.eval()
    out: dict[str, list] = {"prob": [], "grad_norm": [], "position": [], "token": [], "sequence": []}
    try:
        for i, (prompt, comp) in enumerate(zip(prompts, completions)):
            p_ids = tokenizer(prompt)["input_ids"]
            c_ids = tokenizer(comp)["input_ids"] + [tokenizer.eos_token_id]
            logits = model(input_ids=torch.tensor([p_ids + c_ids])).logits[0, len(p_ids) - 1 : -1] / temperature
            tok_logp = torch.log_softmax(logits.float(), dim=-1)[torch.arange(len(c_ids)), torch.tensor(c_ids)]
            for t in range(len(c_ids)):
                grads = torch.autograd.grad(tok_logp[t], params, retain_graph=t < len(c_ids) - 1, allow_unused=True)
                out["prob"].append(float(tok_logp[t].exp()))
                out["grad_norm"].append(sum(float((g.double() ** 2).sum()) for g in grads if g is not None) ** 0.5)
                out["position"].append(t)
                out["token"].append(tokenizer.convert_ids_to_tokens(c_ids[t]))
                out["sequence"].append(i)
    finally:
        model.train(was_training)
    out["completions"] = completions
    return out


def _theory_token_grad_norms(model, tokenizer, prompts, *, max_new_tokens: int, temperature: float, seed: int):
    """The same measurement through :mod:`trgrpo.theory` (all blocks, final norm, head in closed form)."""
    from trgrpo import theory

    batch = theory.sample_completions(
        model, tokenizer, list(prompts), max_new_tokens=max_new_tokens, temperature=temperature, seed=seed
    )
    n_layers = model.config.num_hidden_layers
    tg = theory.per_token_grad_norms(model, batch, last_k_blocks=n_layers, temperature=temperature)
    comp_ids = batch.input_ids[:, batch.prompt_length :]
    pos = tg.position.tolist()
    return {
        "prob": tg.probs.tolist(),
        "grad_norm": tg.grad_norm.tolist(),
        "position": [p - batch.prompt_length for p in pos],
        "token": tokenizer.convert_ids_to_tokens(tg.token_ids.tolist()),
        "sequence": tg.sequence.tolist(),
        "completions": tokenizer.batch_decode(comp_ids, skip_special_tokens=True),
        "subset": tg.subset,
    }


def token_grad_analysis(
    task: str = "addition",
    seed: int = 0,
    *,
    n_prompts: int = 128,
    temperature: float = 1.0,
    results_dir: Path | str | None = None,
    warm_kwargs: dict | None = None,
    write: bool = True,
    group: str = GROUP,
) -> dict:
    """Per-token gradient norm vs probability on the warm-start policy of ``seed`` (where RL begins): the
    correlation of ||grad log pi(o_t)|| with pi(o_t) (Theorem 3.1, Eq. 8: it scales with 1 - pi) and the spread
    of w * ||grad log pi|| under each weight scheme (Theorem 3.2, Eq. 13). Uses :mod:`trgrpo.theory` when present.
    Written to ``results/<group>/analysis-token-grad-<task>-seed<seed>.json`` (``kind: token_grad_analysis``)."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trgrpo.stats import weighted_norm_spread
    from trgrpo.weights import token_weights

    path = warm_start(task, seed, **{"verbose": False, **(warm_kwargs or {})})
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(path)
    rows = records(splits()["test"][:n_prompts], task)
    prompts = [r["prompt"] for r in rows]
    t0 = time.time()
    kw = dict(max_new_tokens=MAX_COMPLETION[task], temperature=temperature, seed=seed)
    try:
        data = _theory_token_grad_norms(model, tok, prompts, **kw)
        method = "trgrpo.theory.per_token_grad_norms (all blocks + final norm + head closed form)"
    except ImportError:
        data = token_grad_norms(model, tok, prompts, **kw)
        method = "trgrpo.toy.token_grad_norms (all parameters, one backward per token)"
    p = np.asarray(data["prob"])
    g = np.asarray(data["grad_norm"])
    ok = [parse_answer(c) == r["answer"] for c, r in zip(data["completions"], rows)]
    data["correct"] = [bool(ok[i]) for i in data["sequence"]]
    spread = {}
    for scheme in ("equal", "tr", "reverse"):
        w = token_weights(torch.tensor(p), scheme).numpy()
        spread[scheme] = weighted_norm_spread(g, w)
    record = {
        "kind": "token_grad_analysis",
        "task": task,
        "seed": seed,
        "method": method,
        "temperature": temperature,
        "model_path": str(path),
        "n_tokens": int(p.size),
        "corr_prob_grad_norm": float(np.corrcoef(p, g)[0, 1]),
        "corr_one_minus_p_grad_norm": float(np.corrcoef(1 - p, g)[0, 1]),
        "weighted_spread": spread,
        "wall_time_s": time.time() - t0,
        **data,
    }
    record.update(git_commit=git_commit(), git_dirty=git_dirty())
    if write:
        write_result(group, f"analysis-token-grad-{task}-seed{seed}", record, results_dir)
    return record


# ---------------------------------------------------------------------------------------------------------------
# Summaries of the grid (tables of notebook 03)

MAIN_LABELS = ["equal", "tr-surrogate", "tr-ratio", "reverse-surrogate", "random"]


def group_runs(records: Iterable[dict]) -> dict[str, list[dict]]:
    """Run records grouped by :func:`run_label`, each group sorted by seed."""
    from trgrpo.stats import group_by

    return group_by(records, run_label)


def _metric(key: str):
    from trgrpo.stats import final_metric

    return lambda r: final_metric(r, key)


def grad_per_weight(record: dict) -> float:
    """Mean over steps of grad_norm / tr/weight_mean (Figure 3 with the weight's overall scale divided out)."""
    import numpy as np

    from trgrpo.stats import grad_norm_per_mean_weight

    _, v = grad_norm_per_mean_weight(record)
    return float(np.nanmean(v)) if v.size else float("nan")


def grad_per_weight_cv(record: dict) -> float:
    """Step-to-step coefficient of variation of grad_norm / mean weight ("fewer spikes", Figure 3)."""
    from trgrpo.stats import grad_norm_per_mean_weight, trajectory_stats

    return trajectory_stats(grad_norm_per_mean_weight(record)[1])["cv"]


def final_table(groups: dict, labels: Sequence[str] = tuple(MAIN_LABELS), baseline: str = "equal") -> list[dict]:
    """Table 4 analog: final held-out greedy and sampled accuracy (mean ± std over seeds) and the paired
    difference against GRPO (same seed = same warm start) with a bootstrap interval and t-test p."""
    from trgrpo.stats import comparison_table, history_mean

    metrics = {
        "greedy acc": _metric("greedy_accuracy"),
        "sampled acc": _metric("sampled_accuracy"),
        "reward (last 20 steps)": lambda r: history_mean(r, "reward", last=20),
    }
    rows = comparison_table(groups, metrics, baseline=baseline, compare="greedy acc", order=labels)
    rows2 = comparison_table(groups, metrics, baseline=baseline, compare="sampled acc", order=labels)
    for r, r2 in zip(rows, rows2):
        r.update({k: v for k, v in r2.items() if k.startswith("Δ")})
    return rows


def grad_table(groups: dict, labels: Sequence[str] = tuple(MAIN_LABELS), baseline: str = "equal") -> list[dict]:
    """Figure 3 numbers: mean grad norm, mean token weight, grad norm / mean weight, its step-to-step CV."""
    from trgrpo.stats import comparison_table, history_mean

    metrics = {
        "grad norm": lambda r: history_mean(r, "grad_norm"),
        "mean w": lambda r: history_mean(r, "tr/weight_mean"),
        "grad norm / mean w": grad_per_weight,
        "CV over steps of grad/mean w": grad_per_weight_cv,
    }
    return comparison_table(groups, metrics, baseline=baseline, compare="grad norm / mean w", order=labels)


def zero_grad_table(groups: dict, labels: Sequence[str] = tuple(MAIN_LABELS)) -> list[dict]:
    """Share of tokens with zero policy gradient (I_trust = 0) by sign of A, mean over steps and seeds."""
    import numpy as np

    from trgrpo.stats import history_mean

    rows = []
    for label in labels:
        runs = groups.get(label, [])
        if runs:
            rows.append(
                {
                    "run": label,
                    "n": len(runs),
                    "pos": float(np.nanmean([history_mean(r, "tr/zero_grad_frac_pos_adv") for r in runs])),
                    "neg": float(np.nanmean([history_mean(r, "tr/zero_grad_frac_neg_adv") for r in runs])),
                    "all": float(np.nanmean([history_mean(r, "tr/zero_grad_frac") for r in runs])),
                    "w at U": float(np.nanmean([history_mean(r, "tr/weight_at_upper") for r in runs])),
                }
            )
    return rows


def tau_table(
    groups: dict, key: str = "greedy_accuracy", baseline: str = "equal", seeds: Iterable[int] | None = None
) -> list[dict]:
    """Table 7 analog: final accuracy of tr per tau and placement (mean, std, n) and the paired difference
    against GRPO on the same seeds (only ``seeds`` when given, so every tau averages the same seeds)."""
    from trgrpo.paper import TABLE7_TAUS
    from trgrpo.stats import final_metric, fmt_paired, history_mean, mean_std, paired_by_seed, paired_t

    keep = None if seeds is None else set(seeds)
    rows = []
    for placement in ("surrogate", "ratio"):
        for tau in TABLE7_TAUS:
            label = f"tr-{placement}" + ("" if tau == 9.0 else f"-tau{tau:g}")
            runs = [r for r in groups.get(label, []) if keep is None or r["seed"] in keep]
            if not runs:
                continue
            m, s, n = mean_std([final_metric(r, key) for r in runs])
            row = {"placement": placement, "tau": tau, "mean": m, "std": s, "n": n}
            if baseline in groups:
                t, c, seeds = paired_by_seed(runs, groups[baseline], _metric(key))
                if t:
                    row["grpo same seeds"] = mean_std(c)[0]
                    row["Δ vs GRPO"] = mean_std([a - b for a, b in zip(t, c)])[0]
                    if len(t) >= 2:
                        row["Δ vs GRPO [95% t-interval]"] = fmt_paired(paired_t(t, c))
                    row["Δ per seed"] = [round(a - b, 4) for a, b in zip(t, c)]
            row["mean w"] = mean_std([history_mean(r, "tr/weight_mean") for r in runs])[0]
            row["zero grad A>0"] = mean_std([history_mean(r, "tr/zero_grad_frac_pos_adv") for r in runs])[0]
            rows.append(row)
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


# ---- lm_science: The real-LM experiment's numbers (SmolLM2-135M-Instruct on small arithmetic; runs by


ANSWER_REWARD = "rewards/arith_answer_reward/mean"


def stage0_rows(decision: dict) -> list[dict[str, Any]]:
    """One row per stage-0 candidate: sampled accuracy and the share of tokens strictly between L and U before and
    after the GRPO probe, greedy held-out accuracy before and after, and whether the plan's rule accepts it."""
    return [
        {
            "candidate": c["id"],
            "sampled accuracy before → after": (c["before"]["sampled_accuracy"], c["after"]["sampled_accuracy"]),
            "L < w < U before → after": (c["before"]["share_between"], c["after"]["share_between"]),
            "w = U before → after": (c["before"]["share_at_upper"], c["after"]["share_at_upper"]),
            "greedy accuracy before → after": tuple(c["greedy_accuracy"]),
            "s / step": c["seconds_per_step"],
            "accepted": c["accepted"],
        }
        for c in decision["candidates"]
    ]


def collapse_step(record: dict, rule: dict) -> int | None:
    """The step at which a run has collapsed by the plan's ``rule``, None if it has not: the first step of
    ``rule["floor_steps"]`` consecutive steps with answer reward <= ``rule["reward_floor"]``, else (with
    ``final_below_start``) the last step when the final held-out accuracy is below the one before the first step."""
    run = 0
    for h in record["history"]:
        run = run + 1 if h[ANSWER_REWARD] <= rule["reward_floor"] else 0
        if run == rule["floor_steps"]:
            return h["step"] - rule["floor_steps"] + 1
    evals = record["eval_history"]
    if rule.get("final_below_start") and evals[-1]["accuracy"] < evals[0]["accuracy"]:
        return evals[-1]["step"]
    return None


def _by_arm_seed(records: Sequence[dict]) -> dict[tuple[str, int], dict]:
    """The runs of a grid keyed by (arm id, seed): a run is named ``<arm>-seed<k>``."""
    return {(r["name"].rsplit("-seed", 1)[0], r["seed"]): r for r in records}


def stress_summary(records: Sequence[dict], plan: dict, *, treatment: str = "tr", control: str = "grpo") -> dict:
    """Collapses k of n per arm over the seed pairs both arms have, pairs where both or neither collapsed (ties)
    apart, and Fisher's exact test (two-sided) on the 2x2 table of arm x collapsed."""
    from scipy.stats import fisher_exact

    by = _by_arm_seed(records)
    seeds = sorted(s for a, s in by if a == treatment and (control, s) in by)
    steps = {key: collapse_step(rec, plan["collapse"]) for key, rec in sorted(by.items())}
    col = {arm: [steps[(arm, s)] is not None for s in seeds] for arm in (treatment, control)}
    k_t, k_c, n = sum(col[treatment]), sum(col[control]), len(seeds)
    pairs = list(zip(col[treatment], col[control]))
    p = fisher_exact([[k_t, n - k_t], [k_c, n - k_c]])[1] if n else float("nan")
    return {
        "seeds": seeds,
        "collapsed": {treatment: k_t, control: k_c},
        "n": n,
        "both": sum(t and c for t, c in pairs),
        "neither": sum(not t and not c for t, c in pairs),
        f"only {treatment}": sum(t and not c for t, c in pairs),
        f"only {control}": sum(c and not t for t, c in pairs),
        "collapse_steps": {f"{a}-seed{s}": step for (a, s), step in steps.items()},
        "fisher_p": float(p),
        # what the design can detect: a total contrast (n of n against 0) and one a single collapse short of it
        "p_total": float(fisher_exact([[n, 0], [0, n]])[1]) if n else float("nan"),
        "p_one_short": float(fisher_exact([[n, 0], [1, n - 1]])[1]) if n else float("nan"),
    }


def plot_stage0(decision: dict, plan: dict, path: Any = None):
    """Per candidate, the share of sampled tokens strictly between L and U before and after the GRPO probe, with
    the plan's two thresholds: where Eq. 11 can regulate on the real model."""
    import matplotlib.pyplot as plt
    import numpy as np

    rows = decision["candidates"]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(7, 3.8), layout="constrained")
    for dx, when, color in ((-0.2, "before", "C0"), (0.2, "after", "C1")):
        label = "before RL" if when == "before" else f"after {plan['probe']['steps']} GRPO steps"
        ax.bar(x + dx, [r[when]["share_between"] for r in rows], width=0.4, color=color, label=label)
    for key, style in (("share_between_before_min", "--"), ("share_between_after_min", ":")):
        ax.axhline(plan["accept"][key], color="k", ls=style, lw=1, label=f"plan: {key.replace('_', ' ')}")
    for i, r in enumerate(rows):  # the other half of the rule: room to learn
        acc = f"sampled accuracy\n{r['before']['sampled_accuracy']:.2f} → {r['after']['sampled_accuracy']:.2f}"
        ax.annotate(acc, (i, 0.005), ha="center", va="bottom", fontsize=8, color="white", fontweight="bold")
    ax.set_xticks(x, [f"{r['id']} ({r['kind']}, {r['range'][0]}–{r['range'][1]})" for r in rows])
    ax.set_ylim(0, 0.32)
    ax.set_ylabel("share of sampled tokens with L < w < U")
    ax.legend(fontsize=8, loc="upper right", ncols=2)
    m = plan["measure"]
    ax.set_title(
        f"SmolLM2-135M-Instruct, stage 0: {m['n_prompts']} prompts × {m['samples_per_prompt']} samples "
        f"at T = {m['temperature']}, seed {plan['probe']['seed']}",
        fontsize=9,
    )
    if path is not None:
        fig.savefig(path, dpi=100, bbox_inches="tight")
    return fig


def stress_rows(records: Sequence[dict], plan: dict) -> list[dict[str, Any]]:
    """One row per seed: each arm's held-out greedy accuracy before and after, and the step it collapsed at."""
    by = _by_arm_seed(records)
    arms = [a["id"] for a in plan["arms"]]
    rows = []
    for seed in sorted({s for _, s in by}):
        row: dict[str, Any] = {"seed": seed}
        for arm in arms:
            rec = by.get((arm, seed))
            if rec is not None:
                ev = rec["eval_history"]
                row[f"{arm}: accuracy before → after"] = (ev[0]["accuracy"], ev[-1]["accuracy"])
                row[f"{arm}: collapsed at step"] = collapse_step(rec, plan["collapse"])
        rows.append(row)
    return rows


def plot_stress(records: Sequence[dict], plan: dict, path: Any = None):
    """Held-out greedy accuracy along each run, one panel per seed, the arms side by side (paired by seed)."""
    import matplotlib.pyplot as plt

    by = _by_arm_seed(records)
    seeds = sorted({s for _, s in by})
    fig, axes = plt.subplots(
        1, len(seeds), figsize=(3.2 * len(seeds), 3.2), sharey=True, layout="constrained", squeeze=False
    )
    for ax, seed in zip(axes[0], seeds):
        for k, arm in enumerate(a["id"] for a in plan["arms"]):
            rec = by.get((arm, seed))
            if rec is not None:
                ev = rec["eval_history"]
                ax.plot([e["step"] for e in ev], [e["accuracy"] for e in ev], "o-", color=f"C{k}", label=arm)
        ax.set_title(f"seed {seed}", fontsize=9)
        ax.set_xlabel("step")
    axes[0, 0].set_ylabel("held-out greedy accuracy")
    axes[0, 0].legend(fontsize=8)
    b = plan["base"]
    fig.suptitle(
        f"SmolLM2-135M-Instruct, stress arm: lr {b['learning_rate']:g}, {b['steps']} steps, "
        f"{b['n_eval']} held-out problems, {len(seeds)} paired seeds",
        fontsize=10,
    )
    if path is not None:
        fig.savefig(path, dpi=100, bbox_inches="tight")
    return fig
