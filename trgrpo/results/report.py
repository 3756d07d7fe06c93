"""Tables and figures of the paper from our ``results/`` records (Tables 1, 2, 4, 7, 8, 9; Figures 2-4).

Each of our rows carries its label: model, scale (steps x prompts x group), seeds, machine. A table cell we
have no run for says so ("no run") rather than staying blank. Figures follow the repository convention:
per-seed traces faint, the median across seeds bold.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable

from ..pipeline.fullscale import short_model_name
from .analysis import mean_std

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
        ax.plot(x, np.nanmedian(arr, axis=0), color=color, ls=style, lw=2.0, marker=marker, ms=4,
                markevery=((i * every // 2) % every, every), label=f"{name} (n={len(runs)})")
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
    from . import paper

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
