"""The real-LM experiment (SmolLM2-135M-Instruct on small arithmetic), one stage per committed plan
``results/lm/<stage>/plan.yaml``: ``stage0`` (task calibration: a GRPO probe per candidate, then ``decision.json``) or
``grid`` (the plan's arms x seeds, seed-major) or ``leverage`` (the GRPO-vs-TR gradient measurement before and after a
GRPO run, per-token samples beside the record). A restarted stage skips the records it has.
``trgrpo lm {stage0,grid,leverage} PLAN``; ``trgrpo lm first-order PLAN`` is :mod:`trgrpo.runs.first_order`."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trgrpo import theory
from trgrpo.config import ConfigError
from trgrpo.files import RESULTS_DIR, git_commit, git_dirty, write_json
from trgrpo.runs import first_order
from trgrpo.runs.experiment import run, run_pending
from trgrpo.runs.first_order import completion_logps, rollout
from trgrpo.runs.records import read_record, record_path
from trgrpo.runs.spec import RunSpec, read_config
from trgrpo.stats import to_numpy
from trgrpo.tasks import arith, get_task
from trgrpo.tasks.generation import render_prompt, sample_token_probabilities
from trgrpo.token_stats import weight_shares
from trgrpo.weights import WeightParams, as_weight_params, token_weights


def measure(model: Any, tokenizer: Any, problems: list[dict], m: dict) -> dict[str, Any]:
    """Sampled accuracy and the shares of sampled tokens whose Eq. 11 weight is at L, between, at U (settings ``m``)."""
    k = m["samples_per_prompt"]
    occ = sample_token_probabilities(
        model,
        tokenizer,
        [arith.arith_prompt(p) for p in problems],
        samples_per_prompt=k,
        max_new_tokens=m["max_new_tokens"],
        temperature=m["temperature"],
        batch_size=16,
        seed=m["seed"],
    )
    texts = [""] * (len(problems) * k)
    for row, text in zip(occ.completion, occ.texts):
        texts[row] += text
    right = [arith.answer_reward(t, problems[i // k]["answer"]) for i, t in enumerate(texts)]
    h = weight_shares(occ.probs, atol=1e-6)
    shares = {f: h[f] for f in ("share_at_lower", "share_between", "share_at_upper", "n_tokens")}
    return {"sampled_accuracy": sum(right) / len(right), "n_completions": len(right), **shares}


def probe_spec(plan: dict, cand: dict) -> RunSpec:
    """The GRPO probe of one candidate: the plan's ``probe`` settings with the candidate's task options."""
    options = {"kind": cand["kind"], "range": list(cand["range"]), "reward": plan["reward"]}
    return RunSpec.from_dict(
        {
            **plan["probe"],
            "task": "arith",
            "model": plan["model"],
            "task_options": options,
            "group": plan["group"],
            "name": f"probe-{cand['id']}",
        }
    )


def rule_checks(plan: dict, cal: dict) -> list[dict[str, Any]]:
    """The plan's acceptance rule on one candidate's ``calibration``, clause by clause: what is measured, its value,
    the bounds (``high`` None: no upper bound) and whether it passes."""
    rule = plan["accept"]
    lo, hi = rule["sampled_accuracy_before"]
    clauses = (
        ("sampled accuracy before RL", cal["before"]["sampled_accuracy"], lo, hi),
        (
            "share strictly between L and U before RL",
            cal["before"]["share_between"],
            rule["share_between_before_min"],
            None,
        ),
        (
            "share strictly between L and U after the probe",
            cal["after"]["share_between"],
            rule["share_between_after_min"],
            None,
        ),
    )
    return [
        {"clause": c, "value": v, "low": low, "high": high, "ok": low <= v and (high is None or v <= high)}
        for c, v, low, high in clauses
    ]


def accepted(plan: dict, cal: dict) -> bool:
    """The plan's acceptance rule on one candidate's ``calibration``: every clause of :func:`rule_checks`."""
    return all(c["ok"] for c in rule_checks(plan, cal))


def stage0(plan_path: str | Path, results_dir: str | Path | None = None) -> None:
    """Run (or skip, when recorded) each candidate's probe, then write ``decision.json`` beside the plan."""
    plan = read_config(plan_path, "plan")
    results = Path(results_dir or RESULTS_DIR)
    specs = [probe_spec(plan, c) for c in plan["candidates"]]
    cands = {s.name: c for s, c in zip(specs, plan["candidates"])}
    run_pending(specs, lambda s: _probe(plan, cands[s.name], s, results), results_dir=results, desc="stage0")
    rows = []
    for cand, spec in zip(plan["candidates"], specs):
        rec = read_record(record_path(spec.group, spec.name, results))
        cal = rec["calibration"]
        rows.append(
            {
                "id": cand["id"],
                "kind": cand["kind"],
                "range": cand["range"],
                "before": cal["before"],
                "after": cal["after"],
                "accepted": accepted(plan, cal),
                "seconds_per_step": rec["seconds_per_step"],
                "greedy_accuracy": [(rec.get("initial") or {}).get("accuracy"), rec["final"].get("accuracy")],
            }
        )
    choice = next((r["id"] for r in rows if r["accepted"]), None)
    decision = {
        "kind": "lm_stage0_decision",
        "plan": str(plan_path),
        "accepted": choice,
        "candidates": rows,
        "git_commit": git_commit(),
        "git_dirty": git_dirty(),
    }
    write_json(results / plan["group"] / "decision.json", decision)
    print(f"[stage0] accepted: {choice or 'none'}")


def _probe(plan: dict, cand: dict, spec: RunSpec, results: Path) -> None:
    """Train one candidate's probe; its record gets ``calibration`` (before and after, the same measurement)."""
    low, high = cand["range"]
    problems = arith.make_problems(plan["measure"]["n_prompts"], seed=0, low=low, high=high, kind=cand["kind"])
    cal: dict[str, Any] = {"measure": plan["measure"]}
    held: dict[str, Any] = {}

    def before(trainer, eval_records):
        held["trainer"] = trainer
        cal["before"] = measure(trainer.model, trainer.processing_class, problems, plan["measure"])
        print(f"[stage0] {cand['id']} before: {_fmt(cal['before'])}", flush=True)

    def after(record):
        trainer = held["trainer"]
        cal["after"] = measure(trainer.model, trainer.processing_class, problems, plan["measure"])
        print(f"[stage0] {cand['id']} after {spec.steps} steps: {_fmt(cal['after'])}", flush=True)
        return {"calibration": cal}

    run(spec, results_dir=results, trainer_ready=before, record_extras=after, keep_checkpoints=False)


def grid_specs(plan: dict) -> list[RunSpec]:
    """The plan's runs, seed by seed: ``<arm>-seed<k>`` in ``plan["group"]``."""
    return [
        RunSpec.from_dict(
            {
                **plan["base"],
                **arm.get("set", {}),
                "scheme": arm["scheme"],
                "seed": seed,
                "group": plan["group"],
                "name": f"{arm['id']}-seed{seed}",
            }
        )
        for seed in plan["seeds"]
        for arm in plan["arms"]
    ]


def grid(plan_path: str | Path, results_dir: str | Path | None = None) -> None:
    """Run every run of the plan that has no record yet (a killed run starts again from its beginning)."""
    plan = read_config(plan_path, "plan")
    results = Path(results_dir or RESULTS_DIR)
    run_pending(grid_specs(plan), lambda s: _grid_run(s, plan["eval_steps"], results), results_dir=results, desc="grid")


def _grid_run(spec: RunSpec, eval_steps: list[int], results: Path) -> None:
    """One run with greedy held-out evaluations at ``eval_steps`` (greedy: nothing drawn from the sampling RNG)."""
    from transformers import TrainerCallback

    task, rows, held = get_task(spec.task), [], {}

    class HeldOut(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
            if state.global_step in eval_steps:
                model.eval()
                acc = task.evaluate(model, processing_class, held["records"], spec)["accuracy"]
                model.train()
                rows.append({"step": state.global_step, "accuracy": acc})
                print(f"[grid] {spec.name} step {state.global_step}: accuracy {acc:.3f}", flush=True)

    def ready(trainer, eval_records):
        held["records"] = eval_records  # the run's own held-out set

    def extras(record):
        start = [{"step": 0, "accuracy": record["initial"]["accuracy"]}] if record.get("initial") else []
        return {"eval_history": [*start, *rows, {"step": spec.steps, "accuracy": record["final"]["accuracy"]}]}

    run(
        spec,
        results_dir=results,
        callbacks=[HeldOut()],
        trainer_ready=ready,
        record_extras=extras,
        keep_checkpoints=False,
    )


def leverage(plan_path: str | Path, results_dir: str | Path | None = None) -> None:
    """Per candidate without a record: :func:`update_leverage` before and after the plan's GRPO run; the
    per-token samples go to ``<group>/tokens-<id>.npz`` (keys ``before_*``, ``after_*``), the summary into the
    record. A candidate with ``task: addition`` is the toy: its seed's warm start and the toy controls' GRPO arm."""
    plan = read_config(plan_path, "plan")
    results = Path(results_dir or RESULTS_DIR)
    specs = [_toy_spec(plan, c) if c.get("task") == "addition" else probe_spec(plan, c) for c in plan["candidates"]]
    cands = {s.name: c for s, c in zip(specs, plan["candidates"])}
    run_pending(specs, lambda s: _leverage_run(plan, cands[s.name], s, results), results_dir=results, desc="leverage")


def _toy_spec(plan: dict, cand: dict) -> RunSpec:
    from trgrpo import toy
    from trgrpo.runs import toy_controls

    seed = plan["probe"]["seed"]
    (base,) = [s for s in toy_controls.grid("controls", [seed]) if s["scheme"] == "equal"]
    model = str(toy.warm_start(toy_controls.TASK, seed, verbose=False))
    return RunSpec.from_dict({**base, "model": model, "group": plan["group"], "name": f"probe-{cand['id']}"})


def _prompts(plan: dict, cand: dict, tokenizer: Any) -> tuple[list[str], Any]:
    """The rendered measurement prompts of a candidate and its reward ``(prompt index, text) -> 0/1``."""
    n = plan["measure"]["n_prompts"]
    if cand.get("task") == "addition":  # the toy: the first held-out items, plain text
        from trgrpo.tasks import addition

        rows = addition.records(addition.splits()["test"][:n])
        return [r["prompt"] for r in rows], lambda i, t: float(addition.parse_answer(t) == rows[i]["answer"])
    low, high = cand["range"]
    problems = arith.make_problems(n, seed=0, low=low, high=high, kind=cand["kind"])
    texts = [render_prompt(tokenizer, arith.arith_prompt(p))[0] for p in problems]
    return texts, lambda i, t: arith.answer_reward(t, problems[i]["answer"])


def leverage_summary(sample: dict[str, np.ndarray], upper: float) -> dict[str, Any]:
    """The shares below U (:func:`leverage_shares`), the sampled accuracy and the gradient cosines (None without
    a batch with a nonzero advantage) of one :func:`update_leverage` sample."""
    cos = sample["grad_cosine"]
    stat = {f"grad_cosine_{f}": float(getattr(np, f)(cos)) if cos.size else None for f in ("mean", "min", "max")}
    return {
        **leverage_shares(sample["prob"], sample["prob_sq_sum"], sample["weight"], upper),
        "sampled_accuracy": float(sample["reward"].mean()),
        "n_completions": int(sample["reward"].size),
        "grad_batches": int(cos.size),
        **stat,
    }


def _leverage_run(plan: dict, cand: dict, spec: RunSpec, results: Path) -> None:
    m = plan["measure"]
    samples: dict[str, np.ndarray] = {}
    held: dict[str, Any] = {}

    def measure_into(when: str) -> None:
        trainer = held["trainer"]
        texts, reward = _prompts(plan, cand, trainer.processing_class)
        out = update_leverage(
            trainer.model,
            trainer.processing_class,
            texts,
            reward,
            group_size=m["samples_per_prompt"],
            prompts_per_batch=m["prompts_per_batch"],
            grad_batches=m["grad_batches"],
            max_new_tokens=m["max_new_tokens"],
            temperature=m["temperature"],
            seed=m["seed"],
            params=theory.as_weight_params("tr", lower=spec.lower, upper=spec.upper),
        )
        samples.update({f"{when}_{k}": v for k, v in out.items()})
        print(f"[leverage] {cand['id']} {when}: {leverage_summary(out, spec.upper)}", flush=True)

    def before(trainer, eval_records):
        held["trainer"] = trainer
        measure_into("before")

    def after(record):
        measure_into("after")
        path = results / spec.group / f"tokens-{cand['id']}.npz"
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(path, **samples)
        split = {w: {k[len(w) + 1 :]: v for k, v in samples.items() if k.startswith(w)} for w in ("before", "after")}
        return {
            "leverage": {
                "measure": m,
                "samples": path.name,
                **{w: leverage_summary(s, spec.upper) for w, s in split.items()},
            }
        }

    run(spec, results_dir=results, trainer_ready=before, record_extras=after, keep_checkpoints=False)


def _fmt(m: dict) -> str:
    return (
        f"sampled accuracy {m['sampled_accuracy']:.3f}, tokens at L {m['share_at_lower']:.3f}, between "
        f"{m['share_between']:.3f}, at U {m['share_at_upper']:.3f} ({m['n_tokens']} tokens)"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="trgrpo lm", description="The real-LM experiment, one stage from its committed plan"
    )
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["first-order"]:  # its own options: trgrpo.runs.first_order
        return first_order.main(argv[1:])
    stages = ["stage0", "grid", "leverage", "pilot", "first-order"]
    ap.add_argument("stage", choices=stages, help="pilot: issue 46 B's analysis; first-order: see its --help")
    ap.add_argument("plan")
    ap.add_argument("--results", default=None)
    args = ap.parse_args(argv)
    try:
        stage = {"stage0": stage0, "grid": grid, "leverage": leverage, "pilot": first_order.pilot_analysis}
        stage[args.stage](args.plan, args.results)
    except ConfigError as e:  # a plan file that is missing, empty or not YAML: one line
        print(f"{ap.prog}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())


def leverage_shares(probs, prob_sq_sum, weights, upper: float, *, atol: float = 1e-6) -> dict[str, float]:
    """Shares carried by the tokens whose weight is below U (w < U - atol): of the tokens, of sum(1 - p), and of the
    exact logit-gradient norm sum ||e_k - pi|| = sum sqrt(1 - 2 p + ||pi||^2) (``prob_sq_sum`` = ||pi||^2)."""
    p, sq, w = (np.asarray(to_numpy(x), float) for x in (probs, prob_sq_sum, weights))
    below = w < upper - atol
    logit = np.sqrt(np.clip(1.0 - 2.0 * p + sq, 0.0, None))
    return {
        "n_tokens": int(p.size),
        "share_tokens_below_upper": float(below.mean()),
        "share_one_minus_p_below_upper": float((1 - p)[below].sum() / (1 - p).sum()),
        "share_logit_grad_norm_below_upper": float(logit[below].sum() / logit.sum()),
    }


def update_leverage(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    reward: Any,
    *,
    group_size: int = 8,
    prompts_per_batch: int = 2,
    grad_batches: int = 8,
    max_new_tokens: int = 6,
    temperature: float = 1.0,
    seed: int = 0,
    params: WeightParams | str = "tr",
) -> dict[str, np.ndarray]:
    """Sample ``group_size`` completions of each prompt (``texts``, rendered), ``prompts_per_batch`` prompts a batch
    (one training step's rollouts), score them with ``reward(prompt_index, text)``. Returns per completion token
    ``prob`` pi(o_t), ``prob_sq_sum`` ||pi||^2, ``weight`` (Eq. 11), ``advantage`` (Eq. 4), ``batch``, ``completion``;
    per completion its ``reward``; and, for the first ``grad_batches`` batches with a nonzero advantage,
    ``grad_cosine`` between the actual parameter gradients of the GRPO loss (w = 1) and the TR-GRPO loss (w of
    Eq. 11) on the same rollouts (on-policy, surrogate placement, beta 0), ``grad_norm_grpo``, ``grad_norm_tr`` and
    ``grad_batch``."""
    from trgrpo.loss import group_advantages, tr_grpo_loss

    wp = as_weight_params(params)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    names = ("prob", "prob_sq_sum", "weight", "advantage", "batch", "completion")
    tokens: dict[str, list] = {k: [] for k in names}
    grads: dict[str, list] = {k: [] for k in ("grad_cosine", "grad_norm_grpo", "grad_norm_tr", "grad_batch", "reward")}
    gen = torch.Generator().manual_seed(seed)
    theta = [p for p in model.parameters() if p.requires_grad]
    was_training = model.training
    model.eval()
    try:
        for b, start in enumerate(range(0, len(texts), prompts_per_batch)):
            torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
            ro = rollout(
                model,
                tokenizer,
                texts[start : start + prompts_per_batch],
                lambda i, t, start=start: reward(start + i, t),
                group_size=group_size,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
            )
            comp, mask, rewards = ro["completion"], ro["mask"], ro["rewards"]
            adv = group_advantages(rewards, group_size)
            grads["reward"].extend(rewards.tolist())
            want_grad = len(grads["grad_batch"]) < grad_batches and bool((adv != 0).any())
            with torch.set_grad_enabled(want_grad):
                logp, logp_all = completion_logps(model, ro, temperature)
            with torch.no_grad():
                p = logp.exp()
                sq = logp_all.exp().square().sum(-1)
                w = token_weights(p.clamp(0, 1), **vars(wp.replace(scheme="tr")))
            sel = mask.bool()
            rows = torch.arange(comp.shape[0]).unsqueeze(1).expand_as(comp)
            for k, v in zip(
                names, (p, sq, w, adv.unsqueeze(1).expand_as(comp), torch.full_like(comp, b), rows + start * group_size)
            ):
                tokens[k].append(v[sel].detach().numpy())
            if want_grad:
                fm = mask.float()
                g = [
                    torch.autograd.grad(
                        tr_grpo_loss(logp, None, adv, fm, wt, placement="surrogate").loss,
                        theta,
                        retain_graph=True,
                        allow_unused=True,
                    )
                    for wt in (torch.ones_like(p), w)
                ]
                dot = sum(float((x.double() * y.double()).sum()) for x, y in zip(*g) if x is not None)
                n0, n1 = (math.sqrt(sum(float(x.double().square().sum()) for x in gi if x is not None)) for gi in g)
                grads["grad_cosine"].append(dot / (n0 * n1))
                grads["grad_norm_grpo"].append(n0)
                grads["grad_norm_tr"].append(n1)
                grads["grad_batch"].append(b)
                del g, logp_all
    finally:
        model.train(was_training)
    out = {k: np.concatenate(v) for k, v in tokens.items()}
    out.update({k: np.asarray(v) for k, v in grads.items()})
    return out
