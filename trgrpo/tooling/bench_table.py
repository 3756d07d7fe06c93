"""The cost benchmark's results: JSON records in ``results/bench/`` and the Markdown table beside the paper's
Table 8 (``results/bench/table.md`` and the README's block between the bench markers)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .bench_common import PAPER_TABLE8, PHASE_LABELS, RESULTS_DIR, ROOT, STEP_PHASES, VARIANT_LABELS

# ----------------------------------------------------------------------------------------------------------------
# Results: JSON files and the Markdown table


def write_json(record: dict[str, Any], path: Path | str) -> Path:
    """Write a result record atomically (:func:`trgrpo.pipeline.experiment.write_json`)."""
    from ..pipeline.experiment import write_json as _write

    return _write(path, record)


def load_results(results_dir: Path | str = RESULTS_DIR) -> dict[str, dict]:
    """The benchmark records present in ``results_dir`` (keys: step, loss, notebooks)."""
    out = {}
    for name in ("step", "loss", "loss_patch", "notebooks", "pair/step"):
        p = Path(results_dir) / f"{name}.json"
        if p.exists():
            out[name.replace("/step", "")] = json.loads(p.read_text())
    return out


def _pct(r: float | None) -> str:
    return "n/a" if r is None else f"{(r - 1) * 100:+.1f}%"


def _ratio_cell(s: dict | None) -> str:
    if not s or s.get("median") is None:
        return "n/a"
    return f"{_pct(s['median'])} [{_pct(s['min'])}, {_pct(s['max'])}]"


def _val_cell(s: dict | None, fmt: str = "{:.2f}") -> str:
    if not s or s.get("median") is None:
        return "n/a"
    if s["n"] == 1:
        return fmt.format(s["median"])
    return f"{fmt.format(s['median'])} [{fmt.format(s['min'])}–{fmt.format(s['max'])}]"


def _machine_line(rec: dict) -> str:
    m, v = rec.get("machine", {}), rec.get("versions", {})
    dev = m.get("gpu") or f"{m.get('cpu_model', '?')} ({m.get('cpu_count', '?')} cores)"
    return (
        f"{dev}, torch threads {m.get('torch_threads')}, load average at start {m.get('load_average')}; "
        f"torch {v.get('torch')}, transformers {v.get('transformers')}, trl {v.get('trl')}; "
        f"commit {str(rec.get('git_commit'))[:10]}, {rec.get('created')}"
    )


def _paper_table(step: dict | None) -> list[str]:
    q, ll = PAPER_TABLE8["Qwen2.5-3B-Instruct"], PAPER_TABLE8["LLaMa3.1-8B-Instruct"]
    ours_cols = ["tr_ratio", "tr_surrogate"]
    head = (
        "| Procedure | Qwen2.5-3B GRPO | Qwen2.5-3B TR-GRPO | LLaMa3.1-8B GRPO | LLaMa3.1-8B TR-GRPO "
        "| ours: GRPO (TRL) | ours: TR-GRPO ratio | ours: TR-GRPO surrogate |"
    )
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|"]
    lines.append(
        f"| Training time / sample (minutes), paper | {q['time_min'][0]} | {q['time_min'][1]} "
        f"({_pct(q['time_min'][1] / q['time_min'][0])}) | {ll['time_min'][0]} | {ll['time_min'][1]} "
        f"({_pct(ll['time_min'][1] / ll['time_min'][0])}) | | | |"
    )
    lines.append(
        f"| Peak GPU memory (GB), paper | {q['memory_gb'][0]} | {q['memory_gb'][1]} "
        f"({_pct(q['memory_gb'][1] / q['memory_gb'][0])}) | {ll['memory_gb'][0]} | {ll['memory_gb'][1]} "
        f"({_pct(ll['memory_gb'][1] / ll['memory_gb'][0])}) | | | |"
    )
    if step:
        vs = step["variants"]

        def scaled(summary: dict, factor: float) -> dict:
            return {
                k: (v * factor if k in ("median", "min", "max") and v is not None else v) for k, v in summary.items()
            }

        def row(name: str, get_val, get_ratio, fmt: str = "{:.2f}") -> str:
            cells = [_val_cell(get_val(vs["grpo_trl"]), fmt)]
            for c in ours_cols:
                cells.append(
                    f"{_val_cell(get_val(vs[c]), fmt)} ({_ratio_cell(get_ratio(vs[c]))})" if c in vs else "n/a"
                )
            return f"| {name} | | | | | " + " | ".join(cells) + " |"

        for metric, label in (("wall", "wall"), ("cpu", "process CPU")):
            lines.append(
                row(
                    f"Training step, {label} (s/step)",
                    lambda r, m=metric: r["phases"]["step"][m],
                    lambda r, m=metric: r["ratio_vs_grpo"]["step"][m],
                )
            )
        lines.append(
            row(
                "Loss forward + backward, process CPU (s/step)",
                lambda r: r["phases"]["loss_backward"]["cpu"],
                lambda r: r["ratio_vs_grpo"]["loss_backward"]["cpu"],
            )
        )
        lines.append(
            row(
                "Loss head: weights + loss + metrics, process CPU (ms/step)",
                lambda r: scaled(r["phases"]["loss_head"]["cpu"], 1e3),
                lambda r: r["ratio_vs_grpo"]["loss_head"]["cpu"],
            )
        )
        cells = ["0 (baseline)"]
        for c in ours_cols:
            sh = vs[c].get("loss_head_added_share", {}).get("cpu") if c in vs else None
            cells.append(
                "n/a"
                if not sh or sh.get("median") is None
                else f"{100 * sh['median']:+.3f}% [{100 * sh['min']:+.3f}%, {100 * sh['max']:+.3f}%]"
            )
        lines.append(
            "| TR-GRPO's own cost: loss head minus GRPO's, share of GRPO's step (process CPU) | | | | | "
            + " | ".join(cells)
            + " |"
        )
        if "cuda_peak_mb" in vs["grpo_trl"]:
            lines.append(
                row(
                    "Peak GPU memory (GB)",
                    lambda r: scaled(r["cuda_peak_mb"], 1 / 1024),
                    lambda r: r["ratio_vs_grpo"]["cuda_peak"],
                )
            )
        lines.append(
            row(
                "Peak RSS during training (MiB)",
                lambda r: r["peak_rss_mb"],
                lambda r: r["ratio_vs_grpo"]["peak_rss"],
                "{:.0f}",
            )
        )
    return lines


def table_markdown(results_dir: Path | str = RESULTS_DIR, results: dict[str, dict] | None = None) -> str:
    """Render the benchmark JSON files (or ``results``) as Markdown: Table 8 beside ours, then details."""
    res = results if results is not None else load_results(results_dir)
    step, loss, nbs = res.get("step"), res.get("loss"), res.get("notebooks")
    out = ["## Cost of TR-GRPO against GRPO (paper Table 8, App. C.2)", ""]
    if step:
        c = step["config"]
        out.append(
            f"Ours: `{Path(str(step['model'])).name}` on {step['device']}, {c['prompts_per_step']} prompt x "
            f"{c['num_generations']} completions of at most {c['max_completion_length']} tokens per step, "
            f"{c['steps']} measured steps after {c['warmup_steps']} warm-up, {c['repeats']} repeats per variant, "
            f"rollouts identical across variants: {step['rollouts_identical']}. Cells: median [min–max] over "
            "repeats; in brackets after ours: TR-GRPO vs GRPO (TRL), median [min, max] of the paired per-repeat "
            "ratios. The paper's unit is minutes per sample on 8 GPUs; ours is seconds per step on a CPU. "
            "'TR-GRPO code, w = 1' computes TRL's loss (equal to float precision, tests/test_trainer.py): its "
            "change against GRPO (TRL), and that of phases with identical work (rollout, policy forward), is the "
            "noise floor of the end-to-end comparison; the loss-head rows measure the loss directly."
        )
        out.append("")
    out += _paper_table(step)
    out.append("")
    pair = res.get("pair")
    if pair:
        c = pair["config"]
        names = ", ".join(VARIANT_LABELS[v] for v in pair["variants"])
        out += [
            f"### A longer run of fewer variants ({names}): {c['repeats']} repeats, same settings otherwise "
            "(`--variants ... --repeats ... --out results/bench/pair`)",
            "",
        ]
        rows = _paper_table(pair)
        out += [rows[0], rows[1], *rows[4:], ""]
    if step:
        vs = step["variants"]
        names = list(vs)
        out += ["### Training step by phase (s/step, median [min–max]; change vs GRPO (TRL))", ""]
        out.append("| phase | clock | " + " | ".join(VARIANT_LABELS[v] for v in names) + " |")
        out.append("|---|---|" + "---:|" * len(names))
        for phase in STEP_PHASES:
            for metric in ("cpu", "wall"):
                cells = []
                for v in names:
                    val = _val_cell(vs[v]["phases"][phase][metric], "{:.4g}")
                    if v != "grpo_trl":
                        val += f" ({_ratio_cell(vs[v]['ratio_vs_grpo'][phase][metric])})"
                    cells.append(val)
                clock = "process CPU" if metric == "cpu" else "wall"
                out.append(f"| {PHASE_LABELS[phase]} | {clock} | " + " | ".join(cells) + " |")
        cells = []
        for v in names:
            val = _val_cell(vs[v]["peak_rss_mb"], "{:.0f}")
            if v != "grpo_trl":
                val += f" ({_ratio_cell(vs[v]['ratio_vs_grpo']['peak_rss'])})"
            cells.append(val)
        out.append("| peak RSS (MiB) | | " + " | ".join(cells) + " |")
        out += [
            "",
            f"Method: {step['method']}",
            "",
            f"Machine: {_machine_line(step)}; runtime {step['runtime_s']:.0f} s.",
            "",
        ]
    if loss:
        vars_ = list(loss["cases"][0]["variants"]) if loss["cases"] else []
        goal = loss.get("goal_ratio_vs_equal", 1.10)
        out += [
            f"### The loss alone: forward + backward, ms per call (process CPU), on {loss['device']}",
            "",
            f"Goal: TR-GRPO at most {goal:.2f}x the same computation with w = 1 ('equal'). Ratio columns: median "
            "[min–max] of per-block paired ratios (process CPU); wall-clock ratio after the slash.",
            "",
        ]
        head = "| B x T | dtype | " + " | ".join(VARIANT_LABELS[v] for v in vars_)
        head += " | tr_ratio / equal | tr_surrogate / equal | tr_ratio / GRPO (TRL) | saved for backward (MiB) |"
        out += [head, "|---|---|" + "---:|" * (len(vars_) + 4)]
        for case in loss["cases"]:
            V = case["variants"]
            cells = [_val_cell(V[v]["ms"]["cpu"], "{:.2f}") for v in vars_]

            def rcell(v: str, key: str = "ratio_vs_equal", V=V) -> str:
                if v not in V or key not in V[v]:
                    return "n/a"
                c, w = V[v][key]["cpu"], V[v][key]["wall"]
                return f"{c['median']:.3f} [{c['min']:.3f}–{c['max']:.3f}] / {w['median']:.3f}"

            saved = ", ".join(f"{v} {V[v]['saved_mb']:.1f}" for v in vars_)
            out.append(
                f"| {case['batch']} x {case['length']} | {case['dtype']} | "
                + " | ".join(cells)
                + f" | {rcell('tr_ratio')} | {rcell('tr_surrogate')} | {rcell('tr_ratio', 'ratio_vs_grpo_trl')} "
                f"| {saved} |"
            )
        out += [
            "",
            f"Method: {loss['method']}",
            "",
            f"Machine: {_machine_line(loss)}; runtime {loss['runtime_s']:.0f} s.",
        ]
        prof = loss.get("profile", {}).get("ops", {})
        if prof:
            out += ["", f"Profile (torch.profiler, B x T = {loss['profile']['shape']}, fp32, self CPU per call):", ""]
            for v, rows in prof.items():
                total = rows[0]["total_self_cpu_us"]
                top = ", ".join(f"{r['op']} x{r['calls']:g} {100 * r['share']:.0f}%" for r in rows[1:9])
                out.append(f"- {v}: {total / 1e3:.1f} ms per call under the profiler; top ops by self CPU: {top}")
        out.append("")
    patch = res.get("loss_patch")
    if patch:
        out += [
            "### A speed-up of trgrpo/core/loss.py and weights.py, measured before it was applied to the library",
            "",
            "Library vs a patched copy, same process, blocks alternating; ms per forward + backward (process CPU), "
            "median [min–max]. Loss, gradient and metrics of the copy equal the library's (max |diff| column). "
            "The patch is stored in the record (results/bench/loss_patch.json, field `patch`); the library has "
            "carried it since.",
            "",
            "| B x T | dtype | GRPO (TRL ops) | library: equal | library: tr_ratio | patched: equal "
            "| patched: tr_ratio "
            "| patched / library (tr_ratio) | patched tr_ratio / equal | max abs diff (loss, grad, metrics) |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for case in patch["cases"]:
            V = case["variants"]
            cells = [
                _val_cell(V[v]["ms"]["cpu"], "{:.2f}")
                for v in ("grpo_trl", "equal", "tr_ratio", "patched_equal", "patched_tr_ratio")
            ]
            gain = V["patched_tr_ratio"]["ratio_vs_library_same_scheme"]["cpu"]
            ratio = V["patched_tr_ratio"]["ratio_vs_equal_same_code"]["cpu"]
            d = case["max_abs_diff"]
            out.append(
                f"| {case['batch']} x {case['length']} | {case['dtype']} | "
                + " | ".join(cells)
                + f" | {_val_cell(gain, '{:.3f}')} | {_val_cell(ratio, '{:.3f}')} "
                f"| {d['loss']:.1e}, {d['grad']:.1e}, {d['metrics']:.1e} |"
            )
        out += ["", f"Machine: {_machine_line(patch)}; runtime {patch['runtime_s']:.0f} s.", ""]
    if nbs:
        out += ["### Notebooks: wall time (papermill)", ""]
        out += ["| notebook | mode | runs as | status | wall (s) | kernel CPU (s) |", "|---|---|---|---|---:|---:|"]
        for r in nbs["rows"]:
            status = "ok" if r["ok"] else f"FAILED: {r['error'][:60]}"
            reused = " (same run)" if r.get("reused") else ""
            out.append(
                f"| {r['notebook']} | {r['mode']} | {r['runs_as']}{reused} | {status} | {r['wall_s']:.0f} "
                f"| {r['children_cpu_s']:.0f} |"
            )
        if not nbs["rows"]:
            out.append("| (no notebook found) | | | | | |")
        out += ["", f"Machine: {_machine_line(nbs)}; runtime {nbs['runtime_s']:.0f} s.", ""]
    if not (step or loss or nbs):
        out.append("(no benchmark results yet: run `make bench`)")
    return "\n".join(out).rstrip() + "\n"


def write_table(results_dir: Path | str = RESULTS_DIR) -> Path:
    """Render :func:`table_markdown` into ``results_dir/table.md``."""
    path = Path(results_dir) / "table.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(table_markdown(results_dir))
    return path


README = ROOT / "README.md"
README_START, README_END = "<!-- bench:start (generated by python -m trgrpo.bench --table) -->", "<!-- bench:end -->"


def readme_table(results_dir: Path | str = RESULTS_DIR) -> str:
    """The Table 8 part of :func:`table_markdown` (up to the per-phase breakdown), as the README shows it."""
    text = table_markdown(results_dir)
    cut = text.find("### Training step by phase")
    return (text[:cut] if cut > 0 else text).strip() + "\n"


def update_readme(results_dir: Path | str = RESULTS_DIR, readme: Path = README) -> bool:
    """Replace the block between the README's bench markers with :func:`readme_table`; True if it changed."""
    from ..pipeline.experiment import update_marked_block

    return update_marked_block(readme, README_START, README_END, readme_table(results_dir))
