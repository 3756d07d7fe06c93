"""Small-number arithmetic for a small chat model on a CPU (the run task ``arith``; not a task of the paper).

Its reward is neither always 0 nor always 1 within a few tokens, so the group advantages of Eq. 4 are not all zero
(notebook 03, Part B). Problems (:data:`KINDS`): ``23 + 45``, three-operand sums, two-by-one-digit products; the
prompt pre-fills the assistant turn with ``23 + 45 =``. Rewards (never raising): format (the completion is one
integer) and answer (its first integer is the result); task option ``reward="answer"`` keeps the answer alone.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Sequence
from typing import Any, Literal

from trgrpo.tasks import Task, TaskOptions, register_task
from trgrpo.tasks.generation import greedy_generate, render_prompt
from trgrpo.tasks.rows import completion_text

SYSTEM = "You are a calculator."
DEFAULT_RANGE = (10, 49)  # two-digit operands: SmolLM2-135M gets about a third right at temperature 1
# kind -> (operator, number of operands, range of the last operand or None for [low, high])
KINDS = {"add": ("+", 2, None), "add3": ("+", 3, None), "mul": ("*", 2, (2, 9))}
REWARDS = ("answer+format", "answer")  # task option ``reward``: both terms (default), or the answer term alone
MAX_SCAN_CHARS = 200  # the rewards look at the first 200 characters only (bounded cost on any completion)
_INT = re.compile(r"-?\d{1,12}")
_ONLY_INT = re.compile(r"\s*(-?\d{1,12})\s*\.?\s*")


def make_problems(
    n: int, *, seed: int = 0, low: int = DEFAULT_RANGE[0], high: int = DEFAULT_RANGE[1], kind: str = "add"
) -> list[dict]:
    """``n`` distinct problems ``{"terms", "op", "answer"}`` of ``kind`` (:data:`KINDS`) with operands in
    [low, high] (a ``mul`` problem's second factor in [2, 9]), drawn with ``seed``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {sorted(KINDS)}, got {kind!r}")
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    if not (isinstance(low, int) and isinstance(high, int)) or low > high or low < 0:
        raise ValueError(f"low and high must be integers with 0 <= low <= high, got low={low!r}, high={high!r}")
    op, arity, last = KINDS[kind]
    ranges = [(low, high)] * (arity - 1) + [last or (low, high)]
    n_distinct = math.prod(hi - lo + 1 for lo, hi in ranges)
    if n > n_distinct:
        raise ValueError(f"n = {n} exceeds the {n_distinct} distinct {kind} problems with operands in [{low}, {high}]")
    rng = random.Random(seed)
    seen: set[tuple[int, ...]] = set()
    out = []
    while len(out) < n:
        terms = tuple(rng.randint(lo, hi) for lo, hi in ranges)
        if terms in seen:
            continue
        seen.add(terms)
        out.append({"terms": list(terms), "op": op, "answer": sum(terms) if op == "+" else math.prod(terms)})
    return out


def question(problem: dict) -> str:
    """``23 + 45``: the operands joined by the operator."""
    return f" {problem['op']} ".join(str(t) for t in problem["terms"])


def arith_prompt(problem: dict) -> list[dict[str, str]]:
    """The chat messages of one problem, ending with the pre-filled assistant turn ``23 + 45 =``."""
    q = question(problem)
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": q},
        {"role": "assistant", "content": f"{q} ="},
    ]


def arith_dataset(problems: Sequence[dict], tokenizer: Any) -> Any:
    """A ``datasets.Dataset`` with text ``prompt`` (chat template applied, assistant turn continued) and ``answer``."""
    import datasets

    return datasets.Dataset.from_dict(
        {
            "prompt": [render_prompt(tokenizer, arith_prompt(p))[0] for p in problems],
            "answer": [int(p["answer"]) for p in problems],
        }
    )


def format_reward(completion: Any) -> float:
    """1.0 if the completion is one integer (optionally a final period) and nothing else, else 0.0."""
    text = completion_text(completion)
    if not isinstance(text, str) or len(text) > MAX_SCAN_CHARS:
        return 0.0
    return 1.0 if _ONLY_INT.fullmatch(text) else 0.0


def answer_reward(completion: Any, answer: Any) -> float:
    """1.0 if the first integer of the completion equals ``answer``, else 0.0."""
    text = completion_text(completion)
    if not isinstance(text, str):
        return 0.0
    m = _INT.search(text[:MAX_SCAN_CHARS])
    try:
        return 1.0 if m is not None and int(m.group()) == int(answer) else 0.0
    except (TypeError, ValueError):
        return 0.0


def make_arith_reward_funcs(reward: str = "answer+format") -> list[Callable[..., list[float]]]:
    """TRL reward functions ``arith_format_reward`` and ``arith_answer_reward`` (logged apart, summed), or with
    ``reward="answer"`` the answer term alone."""
    if reward not in REWARDS:
        raise ValueError(f"task option reward must be one of {REWARDS}, got {reward!r}")

    def arith_format_reward(completions: Sequence[Any] = (), **kwargs: Any) -> list[float]:
        """1 if the completion is only the number, else 0."""
        return [format_reward(c) for c in completions]

    def arith_answer_reward(completions: Sequence[Any] = (), **kwargs: Any) -> list[float]:
        """1 if the first number of the completion is the sum, else 0 (the dataset column ``answer``)."""
        answers = kwargs.get("answer")
        if answers is None:
            raise KeyError("the arith reward needs the dataset column 'answer' (see arith_dataset)")
        if len(answers) != len(completions):
            raise ValueError(f"completions ({len(completions)}) and answer ({len(answers)}) differ in length")
        return [answer_reward(c, a) for c, a in zip(completions, answers)]

    return [arith_format_reward, arith_answer_reward] if reward == "answer+format" else [arith_answer_reward]


def answer_items(tokenizer: Any, problems: Sequence[dict]) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, answer ids) of each problem: the rendered prompt (ends ``a + b =``) and `` <answer>``."""
    out = []
    for p in problems:
        text = render_prompt(tokenizer, arith_prompt(p))[0]
        out.append((tokenizer(text, add_special_tokens=False)["input_ids"], tokenizer(f" {p['answer']}")["input_ids"]))
    return out


def answer_logps(model: Any, items: Sequence[tuple[list[int], list[int]]], pad_id: int) -> Any:
    """log P(answer tokens | prompt) of each :func:`answer_items` item, teacher-forced (right padding, one batch;
    differentiable when grad is enabled): the sum of the answer tokens' log-probabilities, no terminator."""
    import torch

    width = max(len(a) + len(b) for a, b in items)
    ids = torch.full((len(items), width), pad_id)
    attn, target = torch.zeros_like(ids), torch.zeros(len(items), width, dtype=torch.bool)
    for r, (a, b) in enumerate(items):
        ids[r, : len(a) + len(b)] = torch.tensor(a + b)
        attn[r, : len(a) + len(b)] = 1
        target[r, len(a) : len(a) + len(b)] = True
    dev = next(model.parameters()).device
    logits = model(input_ids=ids.to(dev), attention_mask=attn.to(dev)).logits[:, :-1].float()
    tok = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:].to(dev).unsqueeze(-1)).squeeze(-1)
    return (tok * target[:, 1:].to(dev)).sum(-1)


def answer_probability(model: Any, tokenizer: Any, problems: Sequence[dict], batch_size: int = 32) -> dict:
    """``p_correct``: the mean over problems of P(answer | prompt) = exp(:func:`answer_logps`), and ``logp_correct``
    the mean log P (the first-order objective J), teacher-forced, without gradient."""
    import torch

    items, pad, b = answer_items(tokenizer, problems), tokenizer.pad_token_id, batch_size
    with torch.no_grad():
        logp = torch.cat([answer_logps(model, items[k : k + b], pad) for k in range(0, len(items), b)])
    return {"p_correct": float(logp.exp().mean()), "logp_correct": float(logp.mean())}


def _evaluate(model: Any, tokenizer: Any, problems: Sequence[dict], spec: Any) -> dict[str, Any]:
    """Greedy evaluation: ``accuracy`` (answer reward), ``format_rate`` and ``reward`` (their sum), means over items;
    with task option ``answer_prob`` also :func:`answer_probability` (``p_correct``, ``logp_correct``)."""
    if not problems:
        return {"accuracy": None, "format_rate": None, "reward": None, "n": 0}
    opts = ArithOptions(**spec.task_options)
    prompts = [arith_prompt(p) for p in problems]
    completions = greedy_generate(
        model,
        tokenizer,
        prompts,
        max_new_tokens=spec.max_eval_tokens or spec.max_completion_length,
        batch_size=opts.eval_batch_size or 32,
    )
    acc = [answer_reward(c, p["answer"]) for c, p in zip(completions, problems)]
    fmt = [format_reward(c) for c in completions]
    n = len(problems)
    return {
        "accuracy": sum(acc) / n,
        "format_rate": sum(fmt) / n,
        "reward": (sum(acc) + sum(fmt)) / n,
        "n": n,
        "examples": completions[:4],
        **(answer_probability(model, tokenizer, problems, opts.eval_batch_size or 32) if opts.answer_prob else {}),
    }


def _build(spec: Any, tokenizer):
    """Train and held-out problems are disjoint (one draw of distinct problems, split in two)."""
    o = ArithOptions(**spec.task_options)
    low, high = o.range
    problems = make_problems(spec.n_train + spec.n_eval, seed=0, low=low, high=high, kind=o.kind)
    return arith_dataset(problems[: spec.n_train], tokenizer), problems[spec.n_train :]


class ArithOptions(TaskOptions):
    """The arithmetic task's options (:data:`KINDS`, :data:`REWARDS`, the operand ``range`` [low, high])."""

    range: tuple[int, int] | list[int] = DEFAULT_RANGE
    kind: Literal[tuple(KINDS)] = "add"
    reward: Literal[REWARDS] = "answer+format"
    answer_prob: bool = False  # the evaluation also reports P(correct answer), teacher-forced (answer_probability)


register_task(
    "arith",
    Task(
        _build,
        lambda spec: make_arith_reward_funcs(ArithOptions(**spec.task_options).reward),
        _evaluate,
        options=ArithOptions,
    ),
)
