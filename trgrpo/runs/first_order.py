"""First order (issue 46, section 2 A): where the optimiser acts. At checkpoints of one GRPO run of SmolLM2 on add2,
the gradient of a smooth held-out objective J (mean log P(correct answer), teacher-forced) and, for rollout batches,
the update AdamW applies (clipping included) for GRPO, TR-GRPO and the controls from the same optimiser state:
<grad J, u_scheme - u_GRPO> is the first-order change of J per step that choosing the scheme makes.
``trgrpo lm first-order PLAN`` (the committed plan ``results/first_order/plan.yaml``)."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trgrpo.config import ConfigError
from trgrpo.files import RESULTS_DIR, provenance, write_json
from trgrpo.loss import group_advantages, tr_grpo_loss
from trgrpo.runs.spec import read_config
from trgrpo.stats import min_detectable_effect, paired_t
from trgrpo.tasks import arith
from trgrpo.tasks.generation import render_prompt
from trgrpo.theory import pad_token_id, sample_batch
from trgrpo.weights import WeightParams, token_weights

BASELINE = "equal"  # GRPO: w = 1
CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_: coef = max_norm / (total_norm + 1e-6), at most 1


def clip_coefficient(grads: Sequence[torch.Tensor], max_norm: float | None) -> float:
    """The factor ``clip_grad_norm_`` multiplies every gradient by (1 without ``max_norm``)."""
    if max_norm is None:
        return 1.0
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.double()) for g in grads]))
    return min(1.0, max_norm / (float(total) + CLIP_EPS))


def adam_update(
    param: torch.Tensor, grad: torch.Tensor, state: dict | None, group: dict, clip: float = 1.0
) -> torch.Tensor:
    """The displacement one ``torch.optim.AdamW`` step makes on ``param`` for gradient ``grad`` (times ``clip``) from
    its ``state`` (``exp_avg``, ``exp_avg_sq``, ``step``; None or empty: a fresh state), in the parameter's dtype;
    nothing changes. ``group``: the optimiser's param group (``lr``, ``betas``, ``eps``, ``weight_decay``)."""
    (b1, b2), lr, eps, wd = group["betas"], group["lr"], group["eps"], group["weight_decay"]
    g = grad * clip
    step = int(state["step"]) + 1 if state else 1
    m = state["exp_avg"].mul(b1).add_(g, alpha=1 - b1) if state else g.mul(1 - b1)
    v = state["exp_avg_sq"].mul(b2).addcmul_(g, g, value=1 - b2) if state else g.square().mul_(1 - b2)
    denom = v.sqrt_().div_(math.sqrt(1 - b2**step)).add_(eps)
    u = m.div_(denom).mul_(-lr / (1 - b1**step))
    return u.sub_(param.detach(), alpha=lr * wd) if wd else u


def objective_gradient(
    model: Any, items: Sequence[tuple[list[int], list[int]]], pad_id: int, batch_size: int = 25
) -> tuple[float, list[torch.Tensor]]:
    """(J, grad J): J = mean over items (:func:`trgrpo.tasks.arith.answer_items`) of log P(answer tokens | prompt),
    teacher-forced (:func:`trgrpo.tasks.arith.answer_logps`); grad J in the parameters' dtype."""
    theta = [p for p in model.parameters() if p.requires_grad]
    total = [torch.zeros_like(p) for p in theta]
    value = 0.0
    for k in range(0, len(items), batch_size):
        part = arith.answer_logps(model, items[k : k + batch_size], pad_id).sum() / len(items)
        for acc, g in zip(total, torch.autograd.grad(part, theta)):
            acc += g
        value += float(part.detach())
    return value, total


def scheme_gradients(
    model: Any, ro: dict, schemes: Sequence[str], params: WeightParams, *, temperature: float, placement: str
) -> dict[str, list[torch.Tensor]]:
    """The parameter gradients of the library's loss (Eq. 5/9, on-policy, beta 0) of each scheme on one rollout."""
    theta = [p for p in model.parameters() if p.requires_grad]
    adv = group_advantages(ro["rewards"], ro["group_size"])
    logp, _ = completion_logps(model, ro, temperature)
    fm = ro["mask"].float()
    p = logp.detach().exp().clamp(0, 1)
    out: dict[str, list[torch.Tensor]] = {}
    for s in sorted(schemes, key=lambda s: s != BASELINE):  # the baseline first
        w = token_weights(p, s, mask=fm, **params.replace(scheme=s).model_dump(exclude={"scheme"}))
        c = w[fm > 0]
        if placement == "surrogate" and BASELINE in out and bool((c == c[0]).all()):
            out[s] = [c[0] * g for g in out[BASELINE]]  # w constant: the loss is w times GRPO's (linear in w)
            continue
        loss = tr_grpo_loss(logp, None, adv, fm, w, placement=placement).loss
        out[s] = list(torch.autograd.grad(loss, theta, retain_graph=True))
    return out


def update_products(
    model: Any,
    optimizer: torch.optim.Optimizer,
    grads: dict[str, list[torch.Tensor]],
    grad_j: list[torch.Tensor],
    max_grad_norm: float | None,
) -> dict[str, dict[str, float]]:
    """Per scheme and optimiser state (``state``: the run's, ``fresh``: a first step): <grad J, u_scheme> and, for
    every scheme but the baseline, <grad J, u_scheme - u_GRPO> (summed in float64 tensor by tensor), and the clip
    factor; u is :func:`adam_update` of the scheme's gradient, clipped as ``clip_grad_norm_`` would."""
    group = optimizer.param_groups[0]
    theta = [p for p in model.parameters() if p.requires_grad]
    clip = {s: clip_coefficient(g, max_grad_norm) for s, g in grads.items()}
    out: dict[str, dict[str, float]] = {s: {"clip": clip[s]} for s in grads}
    fresh = not any(optimizer.state.get(p) for p in theta)
    for kind in ("fresh",) if fresh else ("state", "fresh"):
        dots = {s: 0.0 for s in grads}
        diffs = {s: 0.0 for s in grads if s != BASELINE}
        for i, (param, gj) in enumerate(zip(theta, grad_j)):
            st = optimizer.state.get(param) if kind == "state" else None
            base = adam_update(param, grads[BASELINE][i], st, group, clip[BASELINE])
            dots[BASELINE] += float(gj.mul(base).sum(dtype=torch.float64))
            for s in diffs:
                u = adam_update(param, grads[s][i], st, group, clip[s])
                dots[s] += float(gj.mul(u).sum(dtype=torch.float64))
                diffs[s] += float(gj.mul(u.sub_(base)).sum(dtype=torch.float64))
        for s in grads:
            out[s][f"dot_{kind}"] = dots[s]
            if s in diffs:
                out[s][f"diff_{kind}"] = diffs[s]
    return out


def grpo_step(model, optimizer, ro: dict, *, temperature: float, placement: str, max_grad_norm: float | None) -> dict:
    """One GRPO step (w = 1) of the run on a rollout: the library's loss, ``clip_grad_norm_``, ``optimizer.step``."""
    adv = group_advantages(ro["rewards"], ro["group_size"])
    logp, _ = completion_logps(model, ro, temperature)
    fm = ro["mask"].float()
    loss = tr_grpo_loss(logp, None, adv, fm, torch.ones_like(fm), placement=placement).loss
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm or math.inf))
    optimizer.step()
    return {"reward": float(ro["rewards"].mean()), "grad_norm": norm}


def _seeded_rollout(model, tok, texts, answers, seed: int, plan: dict) -> dict:
    torch.manual_seed(seed)
    g = plan["group_size"]
    with torch.no_grad():
        ro = rollout(
            model,
            tok,
            texts,
            lambda i, t: arith.answer_reward(t, answers[i]),
            group_size=g,
            max_new_tokens=plan["max_new_tokens"],
            temperature=plan["temperature"],
        )
    return {**ro, "group_size": g}


def summarise(samples: dict[str, list[float]], family: int, alpha: float) -> dict[str, Any]:
    """Paired t over batches of one list of differences: mean, sd, the 95 % and the family-corrected interval
    (Bonferroni over ``family`` comparisons), p, and the minimum detectable effect at that level with 80 % power."""
    d = np.asarray(samples, float)
    zero = np.zeros_like(d)
    t95 = paired_t(d, zero)
    tfam = paired_t(d, zero, level=1 - alpha / family)
    return {
        "n": t95["n"],
        "mean": t95["mean_diff"],
        "sd": t95["sd_diff"],
        "ci95": list(t95["ci"]),
        "ci_family": list(tfam["ci"]),
        "family_level": 1 - alpha / family,
        "p": t95["p"],
        "higher": t95["higher"],
        "lower": t95["lower"],
        "mde_family": min_detectable_effect(t95["sd_diff"], t95["n"], alpha=alpha / family),
    }


def run_plan(plan_path: str | Path, results_dir: str | Path | None = None, *, model=None, tokenizer=None) -> dict:
    """The plan's GRPO run with the measurement at each checkpoint; the record is written after each checkpoint
    (a run cut short keeps what it measured) and returned."""
    from trgrpo.models import load_model_and_tokenizer

    plan = read_config(plan_path, "plan")
    t0 = time.time()
    torch.manual_seed(plan["seed"])
    if model is None:
        model, tokenizer = load_model_and_tokenizer(plan["model"])
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.eval()  # no dropout: the same function in training and measurement
    low, high = plan["range"]
    n_train, n_held = plan["n_train"], plan["n_heldout"]
    problems = arith.make_problems(n_train + n_held, seed=plan["problem_seed"], low=low, high=high, kind=plan["kind"])
    train, held = problems[:n_train], problems[n_train:]
    texts = [render_prompt(tokenizer, arith.arith_prompt(p))[0] for p in train]
    answers = [p["answer"] for p in train]
    items = arith.answer_items(tokenizer, held)
    wp = WeightParams(**plan.get("weights", {}))
    opt = torch.optim.AdamW(model.parameters(), **plan["adamw"])
    k, mg, temp, place = plan["prompts_per_step"], plan["max_grad_norm"], plan["temperature"], plan["placement"]
    rng = np.random.default_rng(plan["seed"])
    out = Path(results_dir or RESULTS_DIR) / plan["group"] / f"analysis-{plan['name']}.json"
    history: list[dict] = []
    checkpoints: list[dict] = []

    def draw(step: int, idx, seed: int) -> dict:
        return _seeded_rollout(model, tokenizer, [texts[i] for i in idx], [answers[i] for i in idx], seed, plan)

    for step in range(plan["steps"] + 1):
        if step in plan["checkpoints"]:
            tc = time.time()
            j, grad_j = objective_gradient(model, items, tokenizer.pad_token_id)
            batches, skipped, n = [], 0, 0
            mrng = np.random.default_rng([plan["seed"], step, 1])
            while len(batches) < plan["batches"] and n < plan["max_draws"]:
                ro = draw(step, mrng.choice(n_train, k, replace=False), 10**7 * plan["seed"] + 10**6 + 1000 * step + n)
                n += 1
                if not bool((group_advantages(ro["rewards"], ro["group_size"]) != 0).any()):
                    skipped += 1  # every advantage 0: no gradient, the schemes' updates coincide
                    continue
                grads = scheme_gradients(model, ro, plan["schemes"], wp, temperature=temp, placement=place)
                row = update_products(model, opt, grads, grad_j, mg)
                batches.append({"draw": n - 1, "reward": float(ro["rewards"].mean()), **row})
                del grads
                print(f"[first-order] step {step} batch {len(batches)}: {_brief(row)}", flush=True)
            norm = math.sqrt(sum(float(g.square().sum()) for g in grad_j))
            checkpoints.append(
                {
                    "step": step,
                    "J": j,
                    "grad_J_norm": norm,
                    "skipped_batches": skipped,
                    "batches": batches,
                    "seconds": time.time() - tc,
                }
            )
            del grad_j
            print(f"[first-order] step {step}: J {j:.4f}, {len(batches)} batches ({skipped} skipped)", flush=True)
            record = {
                "kind": "first_order",
                "plan": plan,
                "plan_path": str(plan_path),
                "checkpoints": checkpoints,
                "history": history,
                "complete": step == max(plan["checkpoints"]),
                "summary": summary(plan, checkpoints),
                "wall_time_s": time.time() - t0,
                **provenance(),
            }
            write_json(out, record)
        if step == max(plan["checkpoints"]):
            break
        ro = draw(step, rng.choice(n_train, k, replace=False), 10**7 * plan["seed"] + step)  # (seed, step)
        history.append(
            {"step": step + 1, **grpo_step(model, opt, ro, temperature=temp, placement=place, max_grad_norm=mg)}
        )
    print(f"[first-order] wrote {out}", flush=True)
    return record


def _brief(row: dict) -> str:
    return ", ".join(f"{s} {v.get('diff_state', v.get('diff_fresh')):+.3g}" for s, v in row.items() if s != BASELINE)


def summary(plan: dict, checkpoints: list[dict]) -> dict[str, Any]:
    """Per checkpoint, scheme (not GRPO) and optimiser state (``state``: the run's; ``fresh``: a first step; at a
    checkpoint without state only ``fresh``), :func:`summarise` of <grad J, u_scheme - u_GRPO> over batches. The
    primary family (TR, the run's state, at the plan's primary checkpoints) is Bonferroni-corrected over its size,
    every other row (the secondaries and controls) over theirs."""
    alpha, prim = plan["decision"]["alpha"], plan["decision"]["primary_checkpoints"]
    keys = []
    for c in checkpoints:
        kinds = [k for k in ("state", "fresh") if c["batches"] and f"diff_{k}" in c["batches"][0]["tr"]]
        keys += [(c, kind, s) for kind in kinds for s in plan["schemes"] if s != BASELINE]
    is_primary = [s == "tr" and kind == "state" and c["step"] in prim for c, kind, s in keys]
    n_primary = sum(is_primary)
    rows = []
    for (c, kind, s), primary in zip(keys, is_primary):
        d = [b[s][f"diff_{kind}"] for b in c["batches"]]
        base = [b[BASELINE][f"dot_{kind}"] for b in c["batches"]]
        res = summarise(d, n_primary if primary else len(keys) - n_primary, alpha)
        lo, hi = res["ci_family"]
        verdict = "scheme larger" if lo > 0 else "GRPO larger" if hi < 0 else "no difference detected"
        rows.append(
            {
                "step": c["step"],
                "state": kind,
                "scheme": s,
                "primary": primary,
                "verdict": verdict,
                "grpo_dot_mean": float(np.mean(base)),
                **res,
            }
        )
    return {"rows": rows, "n_primary": n_primary, "n_secondary": len(keys) - n_primary}


def sd_interval(sd: float, df: int, level: float = 0.95) -> tuple[float, float]:
    """The ``level`` confidence interval of a normal population's standard deviation from a sample sd on ``df``
    degrees of freedom (chi-square): sd·√(df/χ²_{1−a/2}) to sd·√(df/χ²_{a/2})."""
    from scipy.stats import chi2

    a = 1 - level
    return sd * math.sqrt(df / chi2.ppf(1 - a / 2, df)), sd * math.sqrt(df / chi2.ppf(a / 2, df))


PILOT_METRICS = ("p_correct", "accuracy", "logp_correct")  # the primary first: the final evaluation's fields


def pilot_analysis(plan_path: str | Path, results_dir: str | Path | None = None) -> dict[str, Any]:
    """Issue 46 B's pilot from its records (``results/<group>/runs.jsonl`` and ``step0.json`` of the device job):
    per complete pair (both arms of a seed; the plan's first arm is the control) the second arm minus the first of
    each final :data:`PILOT_METRICS`; per metric the paired t summary; for the primary sigma_d with its chi-square
    range, the minimum detectable effect at the plan's power for these pairs and the full design (at sigma_d and the
    ends of its range), the gate ``sigma_d <= gate_sigma_d`` and the full design's hours at the measured run time.
    Writes ``results/first_order/analysis-pilot.json`` and returns it."""
    from trgrpo.runs.records import RUNS_FILE, STEP0_FILE

    plan, root = read_config(plan_path, "plan"), Path(results_dir or RESULTS_DIR)
    folder, dec = root / plan["group"], plan["decision"]
    runs = {r["name"]: r for r in map(json.loads, (folder / RUNS_FILE).read_text().splitlines())}
    (base, treat), pairs = [a["id"] for a in plan["arms"]], []
    names = [f"{arm}-seed{s}" for s in plan["seeds"] for arm in (base, treat)]
    for s in plan["seeds"]:
        a, b = runs.get(f"{base}-seed{s}"), runs.get(f"{treat}-seed{s}")
        if a and b:
            row = {"seed": s, "step1_reward_same": a["history"][0]["reward"] == b["history"][0]["reward"]}
            pairs.append(row | {f"{k}_{m}": r["final"][m] for k, r in ((base, a), (treat, b)) for m in PILOT_METRICS})
    n = len(pairs)
    diffs = {m: [p[f"{treat}_{m}"] - p[f"{base}_{m}"] for p in pairs] for m in PILOT_METRICS}
    summary = {m: paired_t(d, [0.0] * n) if n > 1 else None for m, d in diffs.items()}
    prim = summary[PILOT_METRICS[0]]
    done = [r for r in runs.values() if r["name"] in names]
    run_s = float(np.mean([r["wall_time_s"] for r in done])) if done else math.nan
    record: dict[str, Any] = {
        "kind": "pilot_analysis",
        "plan": plan,
        "plan_path": str(plan_path),
        "arms": [base, treat],
        "step0": {k: json.loads((folder / STEP0_FILE).read_text())[k] for k in ("n", *PILOT_METRICS)},
        "pairs": pairs,
        "n_pairs": n,
        "not_run": [x for x in names if x not in runs],
        "diffs": diffs,
        "summary": summary,
        "runs_commits": sorted({r["git_commit"] for r in done}),
        "runs_clean": all(r["git_dirty"] is False for r in done),
        "run_wall_s": run_s,
        "seconds_per_step": [min(r["seconds_per_step"] for r in done), max(r["seconds_per_step"] for r in done)],
        "machine": done[0]["machine"] if done else None,
    }
    if prim is not None:
        sd, lo_hi = prim["sd_diff"], sd_interval(prim["sd_diff"], n - 1)
        power, sizes = dec["power"], sorted({n, *dec["full_pairs"]})
        mde = {k: [min_detectable_effect(x, k, power=power) for x in (sd, *lo_hi)] for k in sizes}
        lo, hi = prim["ci"]
        record["primary"] = {
            "sigma_d": sd,
            "sigma_d_range95": list(lo_hi),
            "mde": {str(k): v for k, v in mde.items()},  # [at sigma_d, at the range's low end, at its high end]
            "verdict": "TR higher" if lo > 0 else "GRPO higher" if hi < 0 else "no difference detected at this scale",
        }
        record["gate"] = {
            "threshold": dec["gate_sigma_d"],
            "passes": sd <= dec["gate_sigma_d"],
            "full_hours": {str(k): 2 * k * run_s / 2 / 3600 for k in dec["full_pairs"]},  # 2 runs a pair, 2 workers
        }
    write_json(root / "first_order" / "analysis-pilot.json", record)
    return record


def rollout(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    reward: Any,
    *,
    group_size: int,
    max_new_tokens: int,
    temperature: float,
) -> dict[str, Any]:
    """One training step's rollouts: ``group_size`` samples of each rendered prompt (the caller seeds torch), scored
    by ``reward(prompt index in texts, text)``. Returns ``sequences`` (prompt then completion columns), ``prompt_len``,
    ``completion``, ``mask`` (completion tokens up to the first EOS), ``attention_mask`` and ``rewards``."""
    enc, seqs = sample_batch(
        model,
        tokenizer,
        list(texts),
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        num_return_sequences=group_size,
    )
    s = enc["input_ids"].shape[1]
    comp = seqs[:, s:]
    pad, is_eos = pad_token_id(tokenizer), comp == tokenizer.eos_token_id
    mask = ((is_eos.cumsum(1) - is_eos.long()) == 0) & ((comp != pad) | is_eos)  # up to the first EOS
    attn = torch.cat([enc["attention_mask"].repeat_interleave(group_size, 0), mask.long()], dim=1)
    decoded = tokenizer.batch_decode(torch.where(mask, comp, pad), skip_special_tokens=True)
    rewards = torch.tensor([reward(i // group_size, t) for i, t in enumerate(decoded)], dtype=torch.float32)
    return {
        "sequences": seqs,
        "prompt_len": s,
        "completion": comp,
        "mask": mask,
        "attention_mask": attn,
        "rewards": rewards,
    }


def completion_logps(model: Any, ro: dict[str, Any], temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(log pi(o_t) of each completion token, the whole log-softmax) of a :func:`rollout`, at ``temperature``
    (differentiable when grad is enabled)."""
    s, comp = ro["prompt_len"], ro["completion"]
    logits = model(input_ids=ro["sequences"], attention_mask=ro["attention_mask"]).logits[:, s - 1 : -1]
    logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logp_all.gather(-1, comp.unsqueeze(-1)).squeeze(-1), logp_all


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="trgrpo lm first-order",
        description="First order (issue 46 A): <grad J, u_scheme - u_GRPO> of AdamW's applied updates at checkpoints "
        "of one GRPO run, from a committed plan; writes results/<group>/analysis-<name>.json",
    )
    ap.add_argument("plan", help="the plan YAML (results/first_order/plan.yaml)")
    ap.add_argument("--results", default=None, help="the results folder (default: the repository's results/)")
    args = ap.parse_args(argv)
    try:
        run_plan(args.plan, args.results)
    except ConfigError as e:
        print(f"{ap.prog}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
