"""A supervised warm start for the toy: AdamW on the reference completions of :mod:`trgrpo.tasks.addition`,
stopped at the first held-out check above a threshold and cached by (task, model config, seed, threshold), so
the RL phase starts from a policy with reward variance inside each group (Eq. 4)."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from ..tasks.addition import TASK_NAMES, evaluate_accuracy, records, splits
from .models import cache_dir
from .sft import pad_batch, sft_step
from .toy_model import MICRO_CONFIG, TOY_DEFAULTS, build_model, build_tokenizer, n_parameters

# ---------------------------------------------------------------------------------------------------------------
# Supervised warm start, cached by (task, model config, seed, threshold)


class WarmStartError(RuntimeError):
    """The warm start did not reach its threshold within its step budget."""


def _sft_batch(tokenizer, rows: Sequence[dict]):
    """Teacher-forcing batch of ``prompt`` -> ``target`` + EOS rows; the loss covers the completion only."""
    examples = []
    for r in rows:
        p = tokenizer(r["prompt"])["input_ids"]
        c = tokenizer(r["target"])["input_ids"] + [tokenizer.eos_token_id]
        examples.append((p + c, [0] * len(p) + [1] * len(c)))
    return pad_batch(examples, tokenizer.pad_token_id)


def warm_start_key(task: str, seed: int, threshold: float, config: dict) -> str:
    blob = json.dumps({"task": task, "seed": seed, "threshold": threshold, "config": config, "v": 1}, sort_keys=True)
    return f"{task}-micro-seed{seed}-thr{threshold:g}-{hashlib.sha1(blob.encode()).hexdigest()[:8]}"


def warm_start(
    task: str = "addition",
    seed: int = 0,
    *,
    threshold: float = 0.5,
    metric: str = "greedy_accuracy",
    max_steps: int = 3000,
    check_every: int = 50,
    batch_size: int = 64,
    lr: float = 1e-3,
    cache: Path | str | None = None,
    refresh: bool = False,
    model_overrides: dict | None = None,
    verbose: bool = True,
) -> Path:
    """Supervised warm start: AdamW on the reference completions, stopped at the first held-out check above
    ``threshold`` (the jump in accuracy moves with the seed, so a fixed step count would not do).

    Returns the folder of the saved model + tokenizer (TRL loads both from it), with ``warm_start.json``
    recording steps, time, and the held-out accuracy on the validation and test splits. Cached: a second
    call with the same arguments returns the folder at once. Raises :class:`WarmStartError` when the
    threshold is not reached within ``max_steps``.
    """
    import torch

    if task not in TASK_NAMES:
        raise ValueError(f"task must be one of {TASK_NAMES}, got {task!r}")
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold is an accuracy in [0, 1], got {threshold}")
    config = {**MICRO_CONFIG, **(model_overrides or {})}
    base = Path(cache) if cache is not None else cache_dir() / "toy"
    target = base / warm_start_key(
        task, seed, threshold, {**config, "max_steps": max_steps, "lr": lr, "bs": batch_size}
    )
    if (target / "warm_start.json").exists() and not refresh:
        return target

    t0, c0 = time.time(), time.process_time()
    tok = build_tokenizer()
    model = build_model(tok, seed=seed, **(model_overrides or {}))
    data = splits()
    train, val, test = (records(data[k], task) for k in ("train", "val", "test"))
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    history: list[dict] = []
    step, reached = 0, None
    while step < max_steps:
        batch = rng.sample(train, batch_size)
        loss = sft_step(model, opt, _sft_batch(tok, batch))
        step += 1
        if step % check_every == 0 or step == max_steps:
            acc = evaluate_accuracy(model, tok, val, task=task, sampled=False)
            history.append({"step": step, "loss": loss, "greedy_accuracy": acc["greedy_accuracy"]})
            if acc[metric] >= threshold:
                reached = step
                break
    best = max((h[metric] for h in history), default=0.0)
    if reached is None:
        raise WarmStartError(
            f"warm start of {task!r} (seed {seed}) did not reach {metric} >= {threshold} in {max_steps} steps "
            f"(best {best:.3f} on the validation split); raise max_steps or lower threshold"
        )
    test_acc = evaluate_accuracy(model, tok, test, task=task, temperature=TOY_DEFAULTS["temperature"], seed=seed)
    meta = {
        "task": task,
        "seed": seed,
        "threshold": threshold,
        "metric": metric,
        "steps": reached,
        "lr": lr,
        "batch_size": batch_size,
        "check_every": check_every,
        "wall_time_s": time.time() - t0,
        "cpu_time_s": time.process_time() - c0,
        "n_parameters": n_parameters(model),
        "model_config": config,
        "val_history": history,
        "test": test_acc,
    }
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=base, prefix=".tmp-"))
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / "warm_start.json").write_text(json.dumps(meta, indent=1))
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    if verbose:
        print(
            f"[toy] warm start {task} seed {seed}: {reached} steps, {meta['wall_time_s']:.0f} s, test greedy "
            f"{test_acc['greedy_accuracy']:.2f} / sampled {test_acc['sampled_accuracy']:.2f}"
        )
    return target


def warm_start_info(path: Path | str) -> dict:
    """The ``warm_start.json`` of a warm-start folder."""
    return json.loads((Path(path) / "warm_start.json").read_text())
