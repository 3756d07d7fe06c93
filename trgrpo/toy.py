"""The toy: a word-level tokenizer (one token per digit and symbol), a ~1M-parameter Qwen2 (4 layers x 128) and
its cached supervised warm start (:data:`TOY_DEFAULTS`: Table 6 where it applies). Its runs and grids are
:mod:`trgrpo.runs.toy_grid`."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trgrpo.models import cache_dir, pad_batch, sft_step
from trgrpo.paper import BETA, EPS_HIGH, EPS_LOW
from trgrpo.tasks.addition import TASK_NAMES, evaluate_accuracy, records, splits

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
VOCAB = [PAD, EOS, UNK, *[str(d) for d in range(10)], "+", "=", ";"]

MICRO_CONFIG = dict(
    hidden_size=128,
    intermediate_size=512,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=4,
    max_position_embeddings=64,
)

# Table 6 where it applies; lr 1e-4 instead of 1e-6 for a 1M-parameter model.
TOY_DEFAULTS = dict(
    steps=100,
    prompts_per_step=8,
    num_generations=8,
    learning_rate=1e-4,
    temperature=1.0,
    n_train=2000,
    n_eval=400,
    beta=BETA,
    epsilon=EPS_LOW,
    epsilon_high=EPS_HIGH,
)


# ---------------------------------------------------------------------------------------------------------------
# Tokenizer and model


def build_tokenizer() -> Any:
    """A word-level ``PreTrainedTokenizerFast`` over :data:`VOCAB` (digits split one token each)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(VOCAB)}, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Digits(individual_digits=True)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=UNK,
        clean_up_tokenization_spaces=False,
        model_max_length=MICRO_CONFIG["max_position_embeddings"],
    )
    fast.padding_side = "left"
    return fast


def build_model(tokenizer: Any, *, seed: int = 0, **overrides: Any) -> Any:
    """A randomly initialised Qwen2 of :data:`MICRO_CONFIG` size for ``tokenizer``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=len(tokenizer),
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        **{**MICRO_CONFIG, **overrides},
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = None
    return model


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


def warm_start(
    task: str = "addition",
    seed: int = 0,
    *,
    threshold: float = 0.5,
    max_steps: int = 3000,
    check_every: int = 50,
    batch_size: int = 64,
    lr: float = 1e-3,
    cache: Path | str | None = None,
    model_overrides: dict | None = None,
    verbose: bool = True,
) -> Path:
    """Supervised warm start until the validation greedy accuracy reaches ``threshold``; returns the cached folder
    (model, tokenizer, ``warm_start.json``), or raises :class:`WarmStartError` after ``max_steps``."""
    import torch

    if task not in TASK_NAMES:
        raise ValueError(f"task must be one of {TASK_NAMES}, got {task!r}")
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold is an accuracy in [0, 1], got {threshold}")
    config = {**MICRO_CONFIG, **(model_overrides or {})}
    base = Path(cache) if cache is not None else cache_dir() / "toy"
    key = {**config, "max_steps": max_steps, "lr": lr, "bs": batch_size}
    blob = json.dumps({"task": task, "seed": seed, "threshold": threshold, "config": key, "v": 1}, sort_keys=True)
    target = base / f"{task}-micro-seed{seed}-thr{threshold:g}-{hashlib.sha1(blob.encode()).hexdigest()[:8]}"
    if (target / "warm_start.json").exists():
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
    reached = None
    for step in range(1, max_steps + 1):
        loss = sft_step(model, opt, _sft_batch(tok, rng.sample(train, batch_size)))
        if step % check_every == 0 or step == max_steps:
            acc = evaluate_accuracy(model, tok, val, task=task, sampled=False)
            history.append({"step": step, "loss": loss, "greedy_accuracy": acc["greedy_accuracy"]})
            if acc["greedy_accuracy"] >= threshold:
                reached = step
                break
    if reached is None:
        best = max((h["greedy_accuracy"] for h in history), default=0.0)
        raise WarmStartError(
            f"warm start of {task!r} (seed {seed}) did not reach greedy_accuracy >= {threshold} in {max_steps} steps "
            f"(best {best:.3f} on the validation split); raise max_steps or lower threshold"
        )
    test_acc = evaluate_accuracy(model, tok, test, task=task, temperature=TOY_DEFAULTS["temperature"], seed=seed)
    meta = {
        "task": task,
        "seed": seed,
        "threshold": threshold,
        "metric": "greedy_accuracy",
        "steps": reached,
        "lr": lr,
        "batch_size": batch_size,
        "check_every": check_every,
        "wall_time_s": time.time() - t0,
        "cpu_time_s": time.process_time() - c0,
        "n_parameters": model.num_parameters(),
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


def quiet() -> None:
    """Silence the per-run chatter of transformers / TRL (progress bars, info logs) in grids and notebooks."""
    import logging
    import warnings

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    for name in ("transformers", "trl", "accelerate", "datasets"):
        logging.getLogger(name).setLevel(logging.ERROR)
    import datasets
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()
    for category in (UserWarning, FutureWarning):
        warnings.filterwarnings("ignore", category=category, module="trl")
        warnings.filterwarnings("ignore", category=category, module="transformers")
