"""Toy runs that finish on a laptop CPU: a 1M-parameter Qwen2 learning 2-digit addition (notebook 03, Part A).

The pieces, smallest first:

* a word-level tokenizer built locally (every digit, ``+``, ``=``, ``;`` is one token; canonical text puts
  a space between tokens, so ``decode(encode(x)) == x``);
* a tiny Qwen2 from a config (4 layers x 128 hidden, about 1M parameters), saved to a cache folder because
  TRL reloads the reference model from the model's path;
* two tasks: ``addition`` (prompt ``"1 2 + 3 4 ="``, completion ``"4 6"``) and ``addition_trace``
  (completion ``"2 + 4 = 6 ; 1 + 3 + 0 = 4 ; 4 6"``, a worked column sum: ~19 tokens, mostly confident
  copies plus a few uncertain sums and carries);
* a supervised warm start (plain torch loop) that stops at the first held-out check above a threshold,
  cached by seed, so the RL phase starts from a policy with reward variance inside each group (Eq. 4);
* reward functions with TRL's signature, greedy and sampled held-out accuracy, registered as experiment
  tasks so a run goes through :func:`trgrpo.experiment.run` with :class:`trgrpo.TRGRPOTrainer`;
* :func:`run_grid`: the scheme x seed grid of Table 4 and the tau sweep of Table 7 at toy scale,
  resumable (runs whose result file exists are skipped);
* :func:`token_grad_analysis`: per-token ||grad log pi(o_t)|| against pi(o_t) (Theorem 3.1 / Eq. 8, and the
  weighted product of Theorem 3.2 / Eq. 13), through :mod:`trgrpo.theory`;
* tables of the grid (Table 4, Table 7, Figure 3 numbers, zero-gradient shares) for notebook 03.

Cost (measured on 2 shared cores, one torch thread): a 100-step ``addition`` run through TRL takes ~16 CPU-s
including six held-out evaluations and trainer set-up, i.e. ~0.14 CPU-s a step of 8 prompts x 8 samples; the bare
model work of a step (sampling, reference forward, policy forward + backward) measures ~0.13 CPU-s, so TRL's
per-step overhead is small (< 20 %).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import os
import random
import shutil
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .experiment import RESULTS_DIR, RunSpec, Task, register_task, update_json, write_result
from .models import cache_dir

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
SYMBOLS = ["+", "=", ";"]
VOCAB = [PAD, EOS, UNK, *[str(d) for d in range(10)], *SYMBOLS]
TASK_NAMES = ("addition", "addition_trace")
GROUP = "toy/micro"
MAX_COMPLETION = {"addition": 6, "addition_trace": 24}

# The micro model: ~1.0M parameters (4 layers x 128 hidden, tied embeddings).
MICRO_CONFIG = dict(
    hidden_size=128,
    intermediate_size=512,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=4,
    max_position_embeddings=64,
)

# RL hyperparameters of the toy (Table 6 where it applies: G = 8, eps 0.2/0.24, beta 0.001 with k3;
# lr 1e-4 instead of 1e-6 because the model is 1M parameters and the run is 150 steps).
TOY_DEFAULTS = dict(
    steps=100,
    prompts_per_step=8,
    num_generations=8,
    learning_rate=1e-4,
    temperature=1.0,
    n_train=2000,
    n_eval=400,
    beta=0.001,
    epsilon=0.2,
    epsilon_high=0.24,
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


def n_parameters(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------------------------------------------------------
# Data


def spaced(n: int) -> str:
    """``46 -> "4 6"``: the canonical text of a number (one token per digit)."""
    return " ".join(str(n))


def format_prompt(a: int, b: int) -> str:
    """``(12, 34) -> "1 2 + 3 4 ="``."""
    return f"{spaced(a)} + {spaced(b)} ="


def trace_completion(a: int, b: int) -> str:
    """The worked column sum of ``a + b`` (2-digit operands), ending in the answer after the last ``;``.

    ``12 + 34 -> "2 + 4 = 6 ; 1 + 3 + 0 = 4 ; 4 6"``; ``57 + 68 -> "7 + 8 = 1 5 ; 5 + 6 + 1 = 1 2 ; 1 2 5"``.
    """
    if not (0 <= a <= 99 and 0 <= b <= 99):
        raise ValueError(f"trace_completion needs operands in [0, 99], got {a}, {b}")
    u = a % 10 + b % 10
    t = a // 10 + b // 10 + u // 10
    return f"{a % 10} + {b % 10} = {spaced(u)} ; {a // 10} + {b // 10} + {u // 10} = {spaced(t)} ; {spaced(a + b)}"


def target_completion(a: int, b: int, task: str = "addition") -> str:
    """What the model should write after the prompt (EOS excluded)."""
    if task == "addition":
        return spaced(a + b)
    if task == "addition_trace":
        return trace_completion(a, b)
    raise ValueError(f"task must be one of {TASK_NAMES}, got {task!r}")


def parse_answer(completion: str) -> int | None:
    """The integer after the last ``;`` (or the whole text), digits and spaces only; None if malformed."""
    text = completion.split(";")[-1].replace(" ", "").strip()
    if not text or not text.isdigit() or len(text) > 4:
        return None
    return int(text)


def splits(*, n_test: int = 400, n_val: int = 200, lo: int = 10, hi: int = 99, seed: int = 1234) -> dict:
    """All pairs ``(a, b)`` with ``lo <= a, b <= hi``, split once (fixed ``seed``) into train / val / test."""
    if n_test + n_val >= (hi - lo + 1) ** 2:
        raise ValueError("n_test + n_val leaves no training pair")
    pairs = [(a, b) for a in range(lo, hi + 1) for b in range(lo, hi + 1)]
    random.Random(seed).shuffle(pairs)
    return {"test": pairs[:n_test], "val": pairs[n_test : n_test + n_val], "train": pairs[n_test + n_val :]}


def records(pairs: Iterable[tuple[int, int]], task: str = "addition") -> list[dict]:
    """Rows with ``prompt`` (plain text), ``answer`` (int) and ``target`` (the reference completion)."""
    return [{"prompt": format_prompt(a, b), "answer": a + b, "target": target_completion(a, b, task)} for a, b in pairs]


# ---------------------------------------------------------------------------------------------------------------
# Rewards (TRL's signature: prompts, completions, completion_ids, **dataset columns)


def correctness_reward(prompts: list, completions: list, answer: list, **kwargs: Any) -> list[float]:
    """1.0 when the completion's final number equals the answer, else 0.0 (the verifiable reward of RLVR)."""
    return [1.0 if parse_answer(c) == int(a) else 0.0 for c, a in zip(completions, answer)]


def make_random_reward(seed: int = 0, p: float = 0.5) -> Any:
    """Control: a Bernoulli(p) reward independent of the completion (the policy can learn nothing from it)."""
    rng = random.Random(seed)

    def random_reward(prompts: list, completions: list, **kwargs: Any) -> list[float]:
        return [1.0 if rng.random() < p else 0.0 for _ in completions]

    return random_reward


# ---------------------------------------------------------------------------------------------------------------
# Evaluation


def generate(
    model,
    tokenizer,
    prompts: Sequence[str],
    *,
    max_new_tokens: int,
    do_sample: bool = False,
    temperature: float = 1.0,
    seed: int = 0,
    batch_size: int = 512,
) -> list[str]:
    """Batched generation; sampling uses a fixed seed and restores the global RNG afterwards."""
    import torch

    state = torch.get_rng_state()
    pad_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    was_training = model.training
    model.eval()
    out: list[str] = []
    try:
        torch.manual_seed(seed)
        for i in range(0, len(prompts), batch_size):
            enc = tokenizer(list(prompts[i : i + batch_size]), return_tensors="pt", padding=True)
            enc = {k: v.to(model.device) for k, v in enc.items()}
            kw = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if do_sample else {}
            with torch.no_grad():
                gen = model.generate(
                    **enc,
                    max_new_tokens=max_new_tokens,
                    pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=tokenizer.eos_token_id,
                    **(kw or dict(do_sample=False)),
                )
            out += tokenizer.batch_decode(gen[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    finally:
        torch.set_rng_state(state)
        tokenizer.padding_side = pad_side
        model.train(was_training)
    return out


def evaluate_accuracy(
    model,
    tokenizer,
    rows: Sequence[dict],
    *,
    task: str = "addition",
    temperature: float = 1.0,
    sampled: bool = True,
    seed: int = 0,
) -> dict:
    """Held-out accuracy: greedy, and one sample per prompt at ``temperature`` (the RL sampling setting)."""
    prompts = [r["prompt"] for r in rows]
    answers = [r["answer"] for r in rows]
    n_new = MAX_COMPLETION[task]
    greedy = generate(model, tokenizer, prompts, max_new_tokens=n_new)
    res = {"n": len(rows), "greedy_accuracy": sum(correctness_reward(prompts, greedy, answers)) / max(1, len(rows))}
    if sampled:
        samp = generate(
            model, tokenizer, prompts, max_new_tokens=n_new, do_sample=True, temperature=temperature, seed=seed
        )
        res["sampled_accuracy"] = sum(correctness_reward(prompts, samp, answers)) / max(1, len(rows))
    res["accuracy"] = res["greedy_accuracy"]
    return res


# ---------------------------------------------------------------------------------------------------------------
# Supervised warm start, cached by (task, model config, seed, threshold)


class WarmStartError(RuntimeError):
    """The warm start did not reach its threshold within its step budget."""


def _sft_batch(tokenizer, rows: Sequence[dict]):
    import torch

    seqs, labels = [], []
    for r in rows:
        p = tokenizer(r["prompt"])["input_ids"]
        c = tokenizer(r["target"])["input_ids"] + [tokenizer.eos_token_id]
        seqs.append(p + c)
        labels.append([-100] * len(p) + c)
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), tokenizer.pad_token_id)
    lab = torch.full((len(seqs), n), -100)
    att = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, (s, lb) in enumerate(zip(seqs, labels)):  # right padding for teacher forcing
        ids[i, : len(s)] = torch.tensor(s)
        lab[i, : len(lb)] = torch.tensor(lb)
        att[i, : len(s)] = 1
    return ids, att, lab


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
        ids, att, lab = _sft_batch(tok, batch)
        loss = model(input_ids=ids, attention_mask=att, labels=lab).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if step % check_every == 0 or step == max_steps:
            acc = evaluate_accuracy(model, tok, val, task=task, sampled=False)
            history.append({"step": step, "loss": loss.item(), "greedy_accuracy": acc["greedy_accuracy"]})
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
            f"{test_acc['greedy_accuracy']:.2f} / sampled {test_acc['sampled_accuracy']:.2f}")
    return target


def warm_start_info(path: Path | str) -> dict:
    """The ``warm_start.json`` of a warm-start folder."""
    return json.loads((Path(path) / "warm_start.json").read_text())


# ---------------------------------------------------------------------------------------------------------------
# Experiment tasks: registered so that trgrpo.experiment.run trains them with TRGRPOTrainer


def _build(spec: RunSpec, tokenizer):
    from datasets import Dataset

    data = splits()
    pool = list(data["train"])
    random.Random(spec.seed).shuffle(pool)
    train = records(pool[: spec.n_train], spec.task)
    test = records(data["test"][: spec.n_eval], spec.task)
    ds = Dataset.from_list([{"prompt": r["prompt"], "answer": r["answer"]} for r in train])
    return ds, test


def _rewards(spec: RunSpec) -> list:
    kind = spec.task_options.get("reward", "correct")
    if kind == "correct":
        return [correctness_reward]
    if kind == "random":
        return [make_random_reward(spec.seed + 31_337)]
    raise ValueError(f"task_options['reward'] must be 'correct' or 'random', got {kind!r}")


def _evaluate(model, tokenizer, rows: list, spec: RunSpec) -> dict:
    return evaluate_accuracy(model, tokenizer, rows, task=spec.task, temperature=spec.sampling_temperature, seed=0)


for _name in TASK_NAMES:
    register_task(_name, Task(_build, _rewards, _evaluate))


def heldout_callback(
    rows: list, task: str, *, every: int = 25, temperature: float = 1.0, sampled: bool = True, last: bool = True
) -> Any:
    """A ``TrainerCallback`` that measures held-out accuracy every ``every`` steps and (``last``) at the last step;
    ``sampled=False`` measures greedy accuracy only (half the cost)."""
    from transformers import TrainerCallback

    class HeldOut(TrainerCallback):
        def __init__(self) -> None:
            self.history: list[dict] = []

        def on_step_end(self, args, state, control, model=None, processing_class=None, **kw):
            at_last = state.global_step >= state.max_steps
            if model is None or not ((state.global_step % every == 0 and not at_last) or (at_last and last)):
                return
            res = evaluate_accuracy(
                model, processing_class, rows, task=task, temperature=temperature, seed=0, sampled=sampled
            )
            keys = ("greedy_accuracy", "sampled_accuracy") if sampled else ("greedy_accuracy",)
            self.history.append({"step": state.global_step, **{k: res[k] for k in keys}})

    return HeldOut()


# ---------------------------------------------------------------------------------------------------------------
# Specs and the grid


UNWEIGHTED = ("equal", "random")  # schemes whose weights do not depend on p: placement and tau change nothing


def toy_spec(
    scheme: str = "equal",
    seed: int = 0,
    *,
    task: str = "addition",
    placement: str = "surrogate",
    tau: float = 9.0,
    reward: str = "correct",
    **overrides: Any,
) -> dict:
    """A run-spec dict of the toy grid (model filled in by :func:`run_toy` from the warm start of ``seed``); its
    name carries the :func:`run_label` of these settings."""
    settings = {"placement": placement, "tau": tau, "task_options": {"reward": reward}}
    label = run_label({"scheme": scheme, "spec": settings})
    spec = dict(
        task=task,
        scheme=scheme,
        placement=placement,
        tau=float(tau),
        seed=seed,
        group=GROUP,
        name=f"{task}-micro-{label}-seed{seed}",
        max_completion_length=MAX_COMPLETION[task],
        task_options={"reward": reward},
        save_steps=10_000,
        **{k: v for k, v in TOY_DEFAULTS.items() if k not in overrides},
    )
    spec.update(overrides)
    return spec


def micro_grid(
    seeds: Sequence[int] = range(5),
    *,
    task: str = "addition",
    taus: Sequence[float] = (0.5, 2.0, 7.0, 10.0, 20.0),
    tau_seeds: Sequence[int] = range(2),
    tau_placements: Sequence[str] = ("surrogate", "ratio"),
    control_seeds: Sequence[int] = range(2),
    **overrides: Any,
) -> list[dict]:
    """Table 4 at toy scale (equal, tr ratio/surrogate, reverse, random x ``seeds``; reverse and random with the
    weight outside the clip, ``placement="surrogate"``), Table 7's tau sweep for tr under both placements (tau = 9
    is the main grid's run), and a random-reward control (GRPO on a coin-flip reward)."""
    specs = []
    for seed in seeds:
        specs.append(toy_spec("equal", seed, task=task, **overrides))
        specs.append(toy_spec("tr", seed, task=task, placement="ratio", **overrides))
        specs.append(toy_spec("tr", seed, task=task, placement="surrogate", **overrides))
        specs.append(toy_spec("reverse", seed, task=task, placement="surrogate", **overrides))
        specs.append(toy_spec("random", seed, task=task, **overrides))
    for placement in tau_placements:
        for tau in taus:
            for seed in tau_seeds:
                specs.append(toy_spec("tr", seed, task=task, placement=placement, tau=tau, **overrides))
    for seed in control_seeds:
        specs.append(toy_spec("equal", seed, task=task, reward="random", **overrides))
    return specs


def trace_grid(
    seeds: Sequence[int] = range(5),
    *,
    ratio_seeds: Sequence[int] = range(3),
    steps: int = 60,
    **overrides: Any,
) -> list[dict]:
    """The ``addition_trace`` task (answers with a worked column sum, ~19 tokens): GRPO and TR (weight outside
    the clip) on ``seeds``, TR with the printed Eq. 9 placement on ``ratio_seeds``; fewer steps (a step costs
    about 2.5x an ``addition`` step)."""
    specs = []
    for seed in seeds:
        specs.append(toy_spec("equal", seed, task="addition_trace", steps=steps, **overrides))
        specs.append(toy_spec("tr", seed, task="addition_trace", placement="surrogate", steps=steps, **overrides))
        if seed in ratio_seeds:
            specs.append(toy_spec("tr", seed, task="addition_trace", placement="ratio", steps=steps, **overrides))
    return specs


def result_path(spec: dict, results_dir: Path | str | None = None) -> Path:
    return Path(results_dir or RESULTS_DIR) / spec.get("group", GROUP) / f"{spec['name']}.json"


def run_toy(
    spec: dict,
    *,
    results_dir: Path | str | None = None,
    warm_kwargs: dict | None = None,
    eval_every: int = 25,
    threads: int | None = None,
    verbose: bool = False,
    eval_sampled: bool = True,
) -> dict:
    """One toy run through :func:`trgrpo.experiment.run` (TRGRPOTrainer), then the record gains the held-out
    trajectory, the warm start it began from, CPU time; rewritten with :func:`trgrpo.experiment.write_result`.

    ``eval_sampled=False``: the evaluations before the last step measure greedy accuracy only, and the last
    step's entry is the run's final evaluation (same model, items and seed: the callback would repeat it)."""
    import torch

    from .experiment import git_dirty, run

    if threads is not None:
        torch.set_num_threads(threads)
    spec = copy.deepcopy(spec)
    ws_path = warm_start(spec["task"], spec["seed"], verbose=verbose, **(warm_kwargs or {}))
    ws = warm_start_info(ws_path)
    spec["model"] = str(ws_path)
    rows = records(splits()["test"][: spec.get("n_eval", TOY_DEFAULTS["n_eval"])], spec["task"])
    cb = heldout_callback(
        rows,
        spec["task"],
        every=eval_every,
        temperature=spec.get("temperature") or 1.0,
        sampled=eval_sampled,
        last=eval_sampled,
    )
    t0, c0 = time.time(), time.process_time()
    # The Trainer prints every step's log dict to stdout; keep it out of notebooks and grids unless verbose.
    mute = contextlib.nullcontext() if verbose else contextlib.redirect_stdout(io.StringIO())
    with tempfile.TemporaryDirectory(prefix="trgrpo-toy-") as ckpt, mute:
        record = run(
            spec,
            results_dir=results_dir,
            checkpoint_dir=ckpt,
            resume=False,
            callbacks=[cb],
            config_overrides=dict(save_strategy="no", disable_tqdm=True, log_level="warning"),
            keep_checkpoints=False,
            verbose=verbose,
        )
    cpu = time.process_time() - c0
    initial = {k: ws["test"][k] for k in ("greedy_accuracy", "sampled_accuracy")}
    eval_history = [{"step": 0, **initial}, *cb.history]
    if not eval_sampled:  # the last step's evaluation is the final one
        final = record["final"]
        eval_history.append({"step": record["steps"], **{k: final[k] for k in ("greedy_accuracy", "sampled_accuracy")}})
    by_step = {e["step"]: e for e in eval_history}
    for h in record["history"]:
        e = by_step.get(h.get("step"))
        if e is not None:
            h["eval/greedy_accuracy"] = e["greedy_accuracy"]
            if "sampled_accuracy" in e:
                h["eval/sampled_accuracy"] = e["sampled_accuracy"]
    record.update(
        model=f"micro-qwen2-{ws['n_parameters'] / 1e6:.2f}M (warm start seed {spec['seed']}, {ws['steps']} SFT steps)",
        model_path=str(ws_path),
        placement=spec.get("placement"),
        tau=spec.get("tau"),
        reward_kind=spec.get("task_options", {}).get("reward", "correct"),
        initial=initial,
        eval_history=eval_history,
        warm_start={k: ws[k] for k in ("steps", "wall_time_s", "cpu_time_s", "threshold", "n_parameters", "test")},
        cpu_time_s=cpu,
        run_wall_time_s=time.time() - t0,
        torch_threads=torch.get_num_threads(),
        warm_start_cached_at=ws_path.name,
        git_dirty=git_dirty(),  # the commit is record["git_commit"]; True: the tree differed from it
    )
    record["spec"]["model"] = record["model_path"]
    write_result(record["group"], record["name"], record, results_dir)
    return record


def run_grid(
    specs: Sequence[dict],
    *,
    results_dir: Path | str | None = None,
    warm_kwargs: dict | None = None,
    eval_every: int = 25,
    threads: int | None = 2,
    force: bool = False,
    progress: bool = True,
    eval_sampled: bool = True,
) -> dict:
    """Run every spec not yet done (its result file exists -> skipped, so an interrupted grid resumes), one at a
    time in this process. Warm starts are made first (cached by seed). Returns wall and CPU time of this call
    (also appended to ``<group>/grid-summary.json``). ``threads=1`` is fastest on a shared or 2-core machine:
    a 1M-parameter model gains little from a second thread, and oversubscribed threads lose a lot."""
    import torch
    from tqdm.auto import tqdm

    if threads is not None:
        torch.set_num_threads(threads)
    quiet()
    t0, c0 = time.time(), time.process_time()
    todo = [s for s in specs if force or not result_path(s, results_dir).exists()]
    ws_t0 = time.time()
    for task, seed in sorted({(s["task"], s["seed"]) for s in todo}):
        warm_start(task, seed, **(warm_kwargs or {}))
    ws_wall = time.time() - ws_t0
    bar = tqdm(todo, desc="toy grid", disable=not progress)
    done = []
    for spec in bar:
        bar.set_postfix_str(spec["name"])
        rec = run_toy(
            spec, results_dir=results_dir, warm_kwargs=warm_kwargs, eval_every=eval_every, eval_sampled=eval_sampled
        )
        done.append(rec["name"])
    summary = {
        "n_specs": len(specs),
        "n_run": len(done),
        "n_skipped": len(specs) - len(todo),
        "wall_time_s": time.time() - t0,
        "cpu_time_s": time.process_time() - c0,
        "warm_start_wall_s": ws_wall,
        "threads": torch.get_num_threads(),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if done:  # one line per invocation, so an interrupted and resumed grid keeps every part's timing
        groups = sorted({s.get("group", GROUP) for s in specs})
        for group in groups:
            path = Path(results_dir or RESULTS_DIR) / group / "grid-summary.json"
            update_json(  # locked read-modify-write: two grids writing at once lose no line
                path,
                lambda prev: {"kind": "grid_summary", "invocations": [*(prev or {}).get("invocations", []), summary]},
            )
    return summary


def quiet() -> None:
    """Silence the per-run chatter of transformers / TRL (progress bars, info logs) in grids and notebooks."""
    import logging
    import warnings

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    for name in ("transformers", "trl", "accelerate", "datasets"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover
        pass
    try:
        import datasets

        datasets.disable_progress_bars()
    except ImportError:  # pragma: no cover
        pass
    for category in (UserWarning, FutureWarning):
        warnings.filterwarnings("ignore", category=category, module="trl")
        warnings.filterwarnings("ignore", category=category, module="transformers")


def load_runs(results_dir: Path | str | None = None, group: str = GROUP, task: str | None = None) -> list[dict]:
    """The run records of the toy grid, of one ``task`` or all (other JSON files, e.g. analyses, are left out)."""
    from .experiment import load_results

    recs = [r for r in load_results(group, results_dir) if "history" in r and "scheme" in r]
    return [r for r in recs if task is None or r.get("task") == task]


def run_label(record: dict) -> str:
    """``"equal"``, ``"tr-ratio"``, ``"tr-surrogate"``, ``"reverse"``, ``"random"``, ``"tr-surrogate-tau2"``,
    ``"equal-randomreward"``: the name a record's configuration goes by in tables and figures."""
    spec = record.get("spec", {})
    scheme = record["scheme"]
    label = scheme
    if scheme not in UNWEIGHTED:
        label += f"-{spec.get('placement', record.get('placement'))}"
        tau = float(spec.get("tau", 9.0))
        if tau != 9.0 and scheme in ("tr", "reverse", "const", "tr_norm"):  # tau is a parameter of Eq. 11 only
            label += f"-tau{tau:g}"
    reward = spec.get("task_options", {}).get("reward", "correct")
    if reward != "correct":
        label += f"-{reward}reward"
    return label


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
    from . import theory

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

    from .analysis import weighted_norm_spread
    from .weights import token_weights

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
    from .experiment import git_commit, git_dirty

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
                        row["Δ vs GRPO [95% CI]"] = fmt_paired(paired_comparison(t, c))
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
