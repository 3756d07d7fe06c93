"""The toy controls (notebook 03, Part A; Section 4.3, Tables 4 and 7): the task, the metric and the grids
(:data:`GRIDS`: ``controls`` = :data:`ARMS` paired by seed; ``kl`` = Reading 3 of docs/design.md; ``tau`` = Table 7),
all fixed before any run, and ``trgrpo toy run <grid>``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trgrpo import arms, paper, toy
from trgrpo.files import git_commit, git_dirty
from trgrpo.loss import KL_WEIGHTINGS  # the KL grid runs every weighting
from trgrpo.runs import toy_grid
from trgrpo.runs.records import run_name, write_result
from trgrpo.tasks import addition
from trgrpo.token_stats import weight_shares

TASK = "addition"
CONTROLS_GROUP = "toy/controls"
KL_GROUP = "toy/kl"
TAU_GROUP = "toy/tau"
EVAL_EVERY = 20
# 60 steps, fixed before any run (committed plan results/toy/controls/plan.json)
STEPS = 60
EVAL_STEPS = tuple(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY))  # 20, 40, 60
N_EVAL = 400
PRIMARY_METRIC = (
    "mean greedy accuracy over the held-out evaluations at steps 20, 40 and 60 "
    "(400 test items each, same items for every run)"
)

# arm label (trgrpo.runs.toy_grid.run_label) -> toy_spec settings: the control arms of trgrpo.arms.ARMS
ARMS: dict[str, dict] = {name: arm.spec for name, arm in arms.ARMS.items() if arm.control}
BASELINE = "equal"
CONTROL_SEEDS = tuple(range(12))
KL_BETAS = (paper.BETA, 0.04)  # Table 6's and a 40 times stronger KL
KL_SEEDS = tuple(range(8))
# tau = 0.5 is left out: with sigma(0.5 p) every weight is L = 1 (weight_range), so the run *is* GRPO's.
TAUS = (2.0, 7.0, 10.0, 20.0)
TAU_SEEDS = tuple(range(5))

# grid -> (group, seeds, variants: an arm of ARMS with its overrides), run seed-major
_KL = [(b, kw) for b in sorted(KL_BETAS, reverse=True) for kw in KL_WEIGHTINGS if (kw, b) != ("eq10", paper.BETA)]
GRIDS: dict[str, tuple[str, Sequence[int], list[tuple[str, dict]]]] = {
    "controls": (CONTROLS_GROUP, CONTROL_SEEDS, []),  # [] here: every arm of ARMS, as it is when the grid is made
    "kl": (KL_GROUP, KL_SEEDS, [("tr-surrogate", {"beta": b, "kl_weighting": kw}) for b, kw in _KL]),
    "kl_high": (KL_GROUP, KL_SEEDS, [("tr-surrogate", {"beta": b, "kl_weighting": kw}) for b, kw in _KL if b > 0.01]),
    "kl_low": (KL_GROUP, KL_SEEDS, [("tr-surrogate", {"beta": b, "kl_weighting": kw}) for b, kw in _KL if b < 0.01]),
    "tau": (TAU_GROUP, TAU_SEEDS, [("tr-surrogate", {"tau": t}) for t in TAUS]),
}


def grid(name: str, seeds: Sequence[int] | None = None) -> list[dict]:
    """The :func:`trgrpo.runs.toy_grid.toy_spec` dicts of a grid of :data:`GRIDS` (on ``seeds``, default the grid's
    own)."""
    group, default_seeds, variants = GRIDS[name]
    variants = variants or [(arm, {}) for arm in ARMS]
    fixed = dict(task=TASK, group=group, steps=STEPS, n_eval=N_EVAL)
    specs = []
    for seed in default_seeds if seeds is None else seeds:
        for arm, extra in variants:
            if "kl_weighting" in extra:  # the run label does not carry the KL settings: the name does
                label = f"{arm}-kl{extra['kl_weighting']}-beta{extra['beta']:g}"
                extra = {**extra, "name": run_name(TASK, "micro", label, seed)}
            specs.append(toy_grid.toy_spec(seed=seed, **fixed, **ARMS[arm], **extra))
    return specs


def token_histogram(
    task: str = TASK, seed: int = 0, *, n_prompts: int = 512, temperature: float = 1.0, warm_kwargs: dict | None = None
) -> dict:
    """Sample one completion per training prompt from the warm-start policy of ``seed`` (where RL begins, at the
    RL sampling temperature) and histogram pi(o_t) of every completion token (EOS included) and its weight."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = toy.warm_start(task, seed, **{"verbose": False, **(warm_kwargs or {})})
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(path)
    rows = addition.records(addition.splits()["train"][:n_prompts], task)
    prompts = [r["prompt"] for r in rows]
    comps = addition.generate(
        model,
        tok,
        prompts,
        max_new_tokens=addition.MAX_COMPLETION[task],
        do_sample=True,
        temperature=temperature,
        seed=seed,
    )
    probs: list[float] = []
    model.eval()
    with torch.no_grad():
        for prompt, comp in zip(prompts, comps):
            p_ids = tok(prompt)["input_ids"]
            c_ids = (tok(comp)["input_ids"] + [tok.eos_token_id])[: addition.MAX_COMPLETION[task]]
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
    hists = {t: token_histogram(t, **kw) for t in tasks}
    out = {**hists[TASK], "candidates": hists, "git_commit": git_commit(), "git_dirty": git_dirty()}
    if write:
        write_result(CONTROLS_GROUP, "token_hist", out, results_dir)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="trgrpo toy", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a grid (resumable, seed by seed)")
    r.add_argument("grid", choices=sorted(GRIDS))
    r.add_argument("--results-dir", default=None)
    h = sub.add_parser("hist", help="write results/toy/controls/token_hist.json (task choice)")
    for p in (r, h):
        p.add_argument("--allow-dirty", action="store_true", help="run on uncommitted changes (records say so)")
    a = ap.parse_args(argv)
    if git_dirty() and not a.allow_dirty:
        raise SystemExit("the tree has uncommitted changes: commit first (or pass --allow-dirty)")
    if a.cmd == "run":
        kw = dict(eval_every=EVAL_EVERY, threads=1, progress=False, eval_sampled=False)
        print(json.dumps(toy_grid.run_grid(grid(a.grid), results_dir=a.results_dir, **kw)))
        return
    toy.quiet()
    toy_grid.token_grad_analysis(TASK, 0, n_prompts=128, group=CONTROLS_GROUP)  # Theorem 3.1 on the warm start
    for t, hst in task_choice()["candidates"].items():
        print(
            f"{t}: {hst['n_tokens']} tokens, at L {hst['share_at_lower']:.3f}, between "
            f"{hst['share_between']:.3f}, at U {hst['share_at_upper']:.3f}"
        )
