"""The toy's runs: one run of the toy on a task (:func:`run_toy`), a grid of them (:func:`run_grid`), their records
read back (:func:`load_runs`) and the per-token gradient analysis of its warm start (:func:`token_grad_analysis`)."""

from __future__ import annotations

import contextlib
import io
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trgrpo.runs.experiment import run, run_pending
from trgrpo.runs.records import load_results, run_name
from trgrpo.runs.spec import RunSpec
from trgrpo.tasks.addition import MAX_COMPLETION, evaluate_accuracy, records, splits
from trgrpo.toy import TOY_DEFAULTS, quiet, warm_start, warm_start_info
from trgrpo.weights import DEFAULTS

GROUP = "toy/micro"
ACCURACIES = ("greedy_accuracy", "sampled_accuracy")  # a toy run's held-out evaluation


# ---------------------------------------------------------------------------------------------------------------
# Specs and the grid


UNWEIGHTED = ("equal", "random")  # schemes whose weights do not depend on p: placement and tau change nothing


def toy_spec(
    scheme: str = "equal",
    seed: int = 0,
    *,
    task: str = "addition",
    placement: str = "surrogate",
    tau: float = DEFAULTS.tau,
    reward: str = "correct",
    **overrides: Any,
) -> dict:
    """A run spec of the toy grid as its fields (a :class:`~trgrpo.runs.spec.RunSpec`, validated here, dumped as a
    record stores it), named by its :func:`run_label` (the model is set by :func:`run_toy`)."""
    settings = {"placement": placement, "tau": tau, "task_options": {"reward": reward}}
    label = run_label({"scheme": scheme, "spec": settings})
    fields = dict(
        task=task,
        scheme=scheme,
        placement=placement,
        tau=float(tau),
        seed=seed,
        group=GROUP,
        name=run_name(task, "micro", label, seed),
        max_completion_length=MAX_COMPLETION[task],
        task_options={"reward": reward},
        save_steps=10_000,
        **TOY_DEFAULTS,
    )
    return RunSpec.from_dict({**fields, **overrides}).model_dump()


def run_toy(
    spec: RunSpec | dict,
    *,
    results_dir: Path | str | None = None,
    warm_kwargs: dict | None = None,
    eval_every: int = 25,
    verbose: bool = False,
    eval_sampled: bool = True,
) -> dict:
    """One toy run from the warm start of its seed; the record adds ``eval_history`` (greedy only along the run
    with ``eval_sampled=False``), the warm start and CPU time."""
    import torch
    from transformers import TrainerCallback

    spec = RunSpec.from_dict(spec) if isinstance(spec, dict) else spec
    ws_path = warm_start(spec.task, spec.seed, **{"verbose": verbose, **(warm_kwargs or {})})
    ws = warm_start_info(ws_path)
    spec = spec.replace(model=str(ws_path))
    rows = records(splits()["test"][: spec.n_eval], spec.task)
    history: list[dict] = []  # held-out accuracy along the run

    class HeldOut(TrainerCallback):
        """Every ``eval_every`` steps; with ``eval_sampled`` also sampled accuracy, and at the last step."""

        def on_step_end(self, args, state, control, model=None, processing_class=None, **kw):
            at_last = state.global_step >= state.max_steps
            if model is None or ((not eval_sampled) if at_last else state.global_step % eval_every):
                return
            how = dict(task=spec.task, temperature=spec.sampling_temperature, seed=0, sampled=eval_sampled)
            res = evaluate_accuracy(model, processing_class, rows, **how)
            keys = ACCURACIES if eval_sampled else ACCURACIES[:1]
            history.append({"step": state.global_step, **{k: res[k] for k in keys}})

    t0, c0 = time.time(), time.process_time()

    def extras(record: dict) -> dict:
        initial = {k: ws["test"][k] for k in ACCURACIES}
        eval_history = [{"step": 0, **initial}, *history]
        if not eval_sampled:  # the last step's evaluation is the final one
            eval_history.append({"step": record["steps"], **{k: record["final"][k] for k in ACCURACIES}})
        by_step = {e["step"]: e for e in eval_history}
        for h in record["history"]:  # the evaluation of a step beside its training metrics
            h.update({f"eval/{k}": v for k, v in by_step.get(h.get("step"), {}).items() if k != "step"})
        return dict(
            model=f"micro-qwen2-{ws['n_parameters'] / 1e6:.2f}M (warm start seed {spec.seed}, {ws['steps']} SFT steps)",
            model_path=str(ws_path),
            initial=initial,
            eval_history=eval_history,
            warm_start={k: ws[k] for k in ("steps", "wall_time_s", "cpu_time_s", "threshold", "n_parameters", "test")},
            cpu_time_s=time.process_time() - c0,
            run_wall_time_s=time.time() - t0,
            torch_threads=torch.get_num_threads(),
            warm_start_cached_at=ws_path.name,
        )

    mute = contextlib.nullcontext() if verbose else contextlib.redirect_stdout(io.StringIO())
    with tempfile.TemporaryDirectory(prefix="trgrpo-toy-") as ckpt, mute:
        return run(
            spec,
            results_dir=results_dir,
            checkpoint_dir=ckpt,
            resume=False,
            callbacks=[HeldOut()],
            config_overrides=dict(save_strategy="no", disable_tqdm=True, log_level="warning"),
            keep_checkpoints=False,
            verbose=verbose,
            record_extras=extras,
        )


def run_grid(specs: Sequence[RunSpec | dict], *, threads: int | None = 2, progress: bool = True, **run_kw: Any) -> dict:
    """Run every spec without a record, seed by seed (a seed's warm start first); ``run_kw`` as :func:`run_toy`."""
    import torch

    if threads is not None:
        torch.set_num_threads(threads)
    quiet()
    t0, c0 = time.time(), time.process_time()
    specs = [RunSpec.from_dict(s) if isinstance(s, dict) else s for s in specs]  # every spec checked before a run
    seeds = list(dict.fromkeys(s.seed for s in specs))

    def one(spec: RunSpec) -> None:
        warm_start(spec.task, spec.seed, **(run_kw.get("warm_kwargs") or {}))  # once per seed and task: then cached
        run_toy(spec, **run_kw)

    by_seed = sorted(specs, key=lambda s: seeds.index(s.seed))
    todo = run_pending(by_seed, one, results_dir=run_kw.get("results_dir"), desc="toy grid", disable=not progress)
    return {
        "n_specs": len(specs),
        "n_run": len(todo),
        "n_skipped": len(specs) - len(todo),
        "wall_time_s": time.time() - t0,
        "cpu_time_s": time.process_time() - c0,
        "threads": torch.get_num_threads(),
    }


def load_runs(results_dir: Path | str | None = None, group: str = GROUP, task: str | None = None) -> list[dict]:
    """The run records of the toy grid, of one ``task`` or all (other JSON files, e.g. analyses, are left out)."""
    return [r for r in load_results(group, results_dir, "toy_run") if task is None or r.get("task") == task]


def run_label(record: dict) -> str:
    """``"equal"``, ``"tr-ratio"``, ``"tr-surrogate"``, ``"reverse"``, ``"random"``, ``"tr-surrogate-tau2"``,
    ``"equal-randomreward"``: the name a record's configuration goes by in tables and figures."""
    spec = record.get("spec", {})
    scheme = record["scheme"]
    label = scheme
    if scheme not in UNWEIGHTED:
        label += f"-{spec.get('placement', record.get('placement'))}"
        tau = float(spec.get("tau", DEFAULTS.tau))
        if tau != DEFAULTS.tau and scheme in ("tr", "reverse", "const", "tr_norm"):  # tau is a parameter of Eq. 11 only
            label += f"-tau{tau:g}"
    reward = spec.get("task_options", {}).get("reward", "correct")
    if reward != "correct":
        label += f"-{reward}reward"
    return label


def token_grad_analysis(
    task: str = "addition",
    seed: int = 0,
    *,
    n_prompts: int = 128,
    temperature: float = 1.0,
    results_dir: Path | str | None = None,
    warm_kwargs: dict | None = None,
    group: str = GROUP,
) -> dict:
    """Per-token ||grad log pi|| vs pi on the warm-start policy (Theorem 3.1, Eq. 8) and the spread of
    w * ||grad log pi|| per scheme (Eq. 13); written as ``<group>/analysis-token-grad-<task>-seed<seed>.json``."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trgrpo import theory
    from trgrpo.files import git_commit, git_dirty
    from trgrpo.runs.records import write_result
    from trgrpo.stats import spread_stats
    from trgrpo.tasks.addition import parse_answer
    from trgrpo.weights import token_weights

    path = warm_start(task, seed, **{"verbose": False, **(warm_kwargs or {})})
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(path)
    rows = records(splits()["test"][:n_prompts], task)
    t0 = time.time()
    batch = theory.sample_completions(
        model, tok, [r["prompt"] for r in rows], max_new_tokens=MAX_COMPLETION[task], temperature=temperature, seed=seed
    )
    tg = theory.per_token_grad_norms(
        model, batch, last_k_blocks=model.config.num_hidden_layers, temperature=temperature
    )
    completions = tok.batch_decode(batch.input_ids[:, batch.prompt_length :], skip_special_tokens=True)
    p, g = tg.probs.numpy().astype(float), tg.grad_norm.numpy().astype(float)
    ok = [parse_answer(c) == r["answer"] for c, r in zip(completions, rows)]
    spread = {s: spread_stats(g * token_weights(torch.tensor(p), s).numpy()) for s in ("equal", "tr", "reverse")}
    record = {
        "kind": "token_grad_analysis",
        "task": task,
        "seed": seed,
        "method": "trgrpo.theory.per_token_grad_norms (all blocks + final norm + head closed form)",
        "temperature": temperature,
        "model_path": str(path),
        "n_tokens": int(p.size),
        "corr_prob_grad_norm": float(np.corrcoef(p, g)[0, 1]),
        "corr_one_minus_p_grad_norm": float(np.corrcoef(1 - p, g)[0, 1]),
        "weighted_spread": spread,
        "wall_time_s": time.time() - t0,
        "prob": p.tolist(),
        "grad_norm": g.tolist(),
        "position": [x - batch.prompt_length for x in tg.position.tolist()],
        "token": tok.convert_ids_to_tokens(tg.token_ids.tolist()),
        "sequence": tg.sequence.tolist(),
        "completions": completions,
        "subset": tg.subset,
        "correct": [bool(ok[i]) for i in tg.sequence.tolist()],
        "git_commit": git_commit(),
        "git_dirty": git_dirty(),
    }
    write_result(group, f"analysis-token-grad-{task}-seed{seed}", record, results_dir)
    return record
