"""Math evaluation of paper Section 4.1 / Table 2: greedy accuracy (MATH-500, Minerva, OlympiadBench) and avg@k /
pass@k from k = 16 samples (AMC, AIME), scored with the reward of :mod:`trgrpo.tasks.math_reward`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .common import generate_completions, greedy_generate, mean_avg_at_k, mean_pass_at_k
from .math_data import math_prompt
from .math_reward import math_reward

# --------------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------------


def evaluate_math(
    model: Any,
    tokenizer: Any,
    records: Sequence[dict[str, Any]],
    *,
    batch_size: int = 8,
    max_new_tokens: int = 1024,
    return_completions: bool = False,
) -> dict[str, Any]:
    """Greedy accuracy (Section 4.1: MATH-500, Minerva, OlympiadBench): {"accuracy", "n"}."""
    if not records:
        raise ValueError("evaluate at least one record")
    prompts = [math_prompt(r) for r in records]
    completions = greedy_generate(model, tokenizer, prompts, batch_size=batch_size, max_new_tokens=max_new_tokens)
    scores = [math_reward(c, r.get("answers") or r["answer"]) for c, r in zip(completions, records)]
    result: dict[str, Any] = {"accuracy": sum(scores) / len(scores), "n": len(scores)}
    if return_completions:
        result["completions"] = completions
    return result


def evaluate_math_sampled(
    model: Any,
    tokenizer: Any,
    records: Sequence[dict[str, Any]],
    *,
    k: int = 16,
    pass_ks: Iterable[int] | None = None,
    batch_size: int = 2,
    max_new_tokens: int = 1024,
    temperature: float = 0.6,
    top_p: float = 0.95,
    seed: int = 0,
    return_completions: bool = False,
) -> dict[str, Any]:
    """avg@k and pass@k from k samples per problem (Section 4.1: AMC and AIME, k = 16).

    Returns {"avg@k": ..., "pass@k": ..., "n": ..., "k": ...} plus pass@j for each j in ``pass_ks``.
    Sampling temperature/top-p are not given in the paper; 0.6/0.95 are the usual choice for avg@k.
    """
    if not records:
        raise ValueError("evaluate at least one record")
    prompts = [math_prompt(r) for r in records]
    samples = generate_completions(
        model,
        tokenizer,
        prompts,
        batch_size=batch_size,
        max_new_tokens=max_new_tokens,
        num_return_sequences=k,
        do_sample=True,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
    )
    correct = [
        [math_reward(c, r.get("answers") or r["answer"]) == 1.0 for c in row] for row, r in zip(samples, records)
    ]
    result: dict[str, Any] = {f"avg@{k}": mean_avg_at_k(correct), f"pass@{k}": mean_pass_at_k(correct, k)}
    for j in pass_ks or ():
        result[f"pass@{j}"] = mean_pass_at_k(correct, j)
    result.update(n=len(records), k=k)
    if return_completions:
        result["completions"] = samples
    return result
