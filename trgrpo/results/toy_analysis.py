"""Per-token gradient analysis and the tables of the toy grid (notebook 03).

:func:`token_grad_analysis`: per-token ||grad log pi(o_t)|| against pi(o_t) on a warm-start policy (Theorem 3.1 /
Eq. 8, and the weighted product of Theorem 3.2 / Eq. 13), through :mod:`trgrpo.core.theory`. The tables: Table 4
(:func:`final_table`), Table 7 (:func:`tau_table`), Figure 3 numbers (:func:`grad_table`), zero-gradient shares
(:func:`zero_grad_table`) and the grid's cost (:func:`grid_cost`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..pipeline.records import git_commit, git_dirty, write_result
from ..pipeline.toy_run import GROUP, run_label
from ..pipeline.warm_start import warm_start
from ..tasks.addition import MAX_COMPLETION, generate, parse_answer, records, splits

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

    A minimal fallback; :func:`token_grad_analysis` uses :func:`trgrpo.core.theory.per_token_grad_norms` when that
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
    """The same measurement through :mod:`trgrpo.core.theory` (all blocks, final norm, head in closed form)."""
    from ..core import theory

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
    of w * ||grad log pi|| under each weight scheme (Theorem 3.2, Eq. 13). Uses :mod:`trgrpo.core.theory` when present.
    Written to ``results/<group>/analysis-token-grad-<task>-seed<seed>.json`` (``kind: token_grad_analysis``)."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..core.weights import token_weights
    from .analysis import weighted_norm_spread

    path = warm_start(task, seed, **{"verbose": False, **(warm_kwargs or {})})
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(path)
    rows = records(splits()["test"][:n_prompts], task)
    prompts = [r["prompt"] for r in rows]
    t0 = time.time()
    kw = dict(max_new_tokens=MAX_COMPLETION[task], temperature=temperature, seed=seed)
    try:
        data = _theory_token_grad_norms(model, tok, prompts, **kw)
        method = "trgrpo.core.theory.per_token_grad_norms (all blocks + final norm + head closed form)"
    except ImportError:
        data = token_grad_norms(model, tok, prompts, **kw)
        method = "trgrpo.pipeline.toy.token_grad_norms (all parameters, one backward per token)"
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
TAUS = (0.5, 2.0, 7.0, 9.0, 10.0, 20.0)  # Table 7


def group_runs(records: Iterable[dict]) -> dict[str, list[dict]]:
    """Run records grouped by :func:`run_label`, each group sorted by seed."""
    from .analysis import group_by

    return group_by(records, run_label)


def _metric(key: str):
    from .analysis import final_metric

    return lambda r: final_metric(r, key)


def grad_per_weight(record: dict) -> float:
    """Mean over steps of grad_norm / tr/weight_mean (Figure 3 with the weight's overall scale divided out)."""
    import numpy as np

    from .analysis import grad_norm_per_mean_weight

    _, v = grad_norm_per_mean_weight(record)
    return float(np.nanmean(v)) if v.size else float("nan")


def grad_per_weight_cv(record: dict) -> float:
    """Step-to-step coefficient of variation of grad_norm / mean weight ("fewer spikes", Figure 3)."""
    from .analysis import grad_norm_per_mean_weight, trajectory_stats

    return trajectory_stats(grad_norm_per_mean_weight(record)[1])["cv"]


def final_table(groups: dict, labels: Sequence[str] = tuple(MAIN_LABELS), baseline: str = "equal") -> list[dict]:
    """Table 4 analog: final held-out greedy and sampled accuracy (mean ± std over seeds) and the paired
    difference against GRPO (same seed = same warm start) with a bootstrap interval and t-test p."""
    from .analysis import comparison_table, history_mean

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
    from .analysis import comparison_table, history_mean

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

    from .analysis import history_mean

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
    from .analysis import final_metric, fmt_paired, history_mean, mean_std, paired_by_seed, paired_comparison

    keep = None if seeds is None else set(seeds)
    rows = []
    for placement in ("surrogate", "ratio"):
        for tau in TAUS:
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
                        row["Δ vs GRPO [95% t-interval]"] = fmt_paired(paired_comparison(t, c))
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
