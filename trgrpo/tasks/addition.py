"""The toy's task, two-digit addition (notebook 03, Part A): data, prompts, rewards, generation and held-out
accuracy, registered as the run tasks ``addition`` and ``addition_trace`` for :func:`trgrpo.runs.experiment.run`.

``addition``: prompt ``"1 2 + 3 4 ="``, completion ``"4 6"``. ``addition_trace``: completion
``"2 + 4 = 6 ; 1 + 3 + 0 = 4 ; 4 6"``, a worked column sum (~19 tokens, mostly confident copies plus a few uncertain
sums and carries). Rewards have TRL's signature (prompts, completions, **dataset columns) and never raise.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from trgrpo.tasks import Task, TaskOptions, register_task

MAX_COMPLETION = {"addition": 6, "addition_trace": 24}  # task -> completion tokens
TASK_NAMES = tuple(MAX_COMPLETION)


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


def splits() -> dict:
    """All pairs ``(a, b)`` of two-digit numbers, split once (seed 1234) into 400 test, 200 val and the rest train."""
    pairs = [(a, b) for a in range(10, 100) for b in range(10, 100)]
    random.Random(1234).shuffle(pairs)
    return {"test": pairs[:400], "val": pairs[400:600], "train": pairs[600:]}


def records(pairs: Iterable[tuple[int, int]], task: str = "addition") -> list[dict]:
    """Rows with ``prompt`` (plain text), ``answer`` (int) and ``target`` (the reference completion)."""
    return [{"prompt": format_prompt(a, b), "answer": a + b, "target": target_completion(a, b, task)} for a, b in pairs]


def correctness_reward(prompts: list, completions: list, answer: list, **kwargs: Any) -> list[float]:
    """1.0 when the completion's final number equals the answer, else 0.0 (the verifiable reward of RLVR)."""
    return [1.0 if parse_answer(c) == int(a) else 0.0 for c, a in zip(completions, answer)]


def make_random_reward(seed: int) -> Any:
    """Control: a Bernoulli(1/2) reward independent of the completion (the policy can learn nothing from it)."""
    rng = random.Random(seed)

    def random_reward(prompts: list, completions: list, **kwargs: Any) -> list[float]:
        return [1.0 if rng.random() < 0.5 else 0.0 for _ in completions]

    return random_reward


def generate(
    model,
    tokenizer,
    prompts: Sequence[str],
    *,
    max_new_tokens: int,
    do_sample: bool = False,
    temperature: float = 1.0,
    seed: int = 0,
) -> list[str]:
    """Generation in batches of 512 prompts; sampling uses a fixed seed and restores the global RNG afterwards."""
    import torch

    state = torch.get_rng_state()
    pad_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    was_training = model.training
    model.eval()
    sampling = dict(temperature=temperature, top_k=0, top_p=1.0) if do_sample else {}
    out: list[str] = []
    try:
        torch.manual_seed(seed)
        for i in range(0, len(prompts), 512):
            enc = tokenizer(list(prompts[i : i + 512]), return_tensors="pt", padding=True)
            enc = {k: v.to(model.device) for k, v in enc.items()}
            with torch.no_grad():
                gen = model.generate(
                    **enc,
                    max_new_tokens=max_new_tokens,
                    do_sample=do_sample,
                    pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=tokenizer.eos_token_id,
                    **sampling,
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


def _build(spec: Any, tokenizer):
    from datasets import Dataset

    data = splits()
    pool = list(data["train"])
    random.Random(spec.seed).shuffle(pool)
    train = records(pool[: spec.n_train], spec.task)
    test = records(data["test"][: spec.n_eval], spec.task)
    ds = Dataset.from_list([{"prompt": r["prompt"], "answer": r["answer"]} for r in train])
    return ds, test


def _rewards(spec: Any) -> list:
    if AdditionOptions(**spec.task_options).reward == "random":
        return [make_random_reward(spec.seed + 31_337)]
    return [correctness_reward]


def _evaluate(model, tokenizer, rows: list, spec: Any) -> dict:
    return evaluate_accuracy(model, tokenizer, rows, task=spec.task, temperature=spec.sampling_temperature, seed=0)


class AdditionOptions(TaskOptions):
    reward: Literal["correct", "random"] = "correct"


for _name in TASK_NAMES:
    register_task(_name, Task(_build, _rewards, _evaluate, options=AdditionOptions))
