"""Generation shared by the task families: a prompt rendered by the chat template, batched completions (greedy or
k samples, Section 4.1), the pass@k estimator, and the probabilities of sampled tokens (Figure 1)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Prompt = str | list[dict[str, str]]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al., 2021) from ``n`` samples of which ``c`` are correct: 1 - C(n-c, k) / C(n, k),
    in exact integer binomials."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_pass_at_k(correct: Sequence[Sequence[bool]], k: int) -> float:
    """pass@k averaged over problems; ``correct[i]`` holds the n >= k sampled verdicts of problem i."""
    if len(correct) == 0:
        raise ValueError("mean_pass_at_k needs at least one problem")
    return sum(pass_at_k(len(row), sum(bool(x) for x in row), k) for row in correct) / len(correct)


def mean_avg_at_k(correct: Sequence[Sequence[bool]]) -> float:
    """avg@k: the mean accuracy over the k samples of each problem, averaged over problems."""
    if len(correct) == 0 or any(len(row) == 0 for row in correct):
        raise ValueError("mean_avg_at_k needs at least one problem and one sample per problem")
    return sum(sum(bool(x) for x in row) / len(row) for row in correct) / len(correct)


def render_prompt(tokenizer: Any, prompt: Prompt) -> tuple[str, bool]:
    """(text, templated): a string as is; messages through the chat template, continuing a final assistant turn
    (a pre-filled ``<think>``) and otherwise adding the generation prompt."""
    if isinstance(prompt, str):
        return prompt, False
    if not isinstance(prompt, list) or not prompt or not all(isinstance(m, dict) for m in prompt):
        raise TypeError("a prompt is a string or a non-empty list of {'role': ..., 'content': ...} messages")
    prefill = prompt[-1].get("role") == "assistant"
    text = tokenizer.apply_chat_template(
        prompt,
        tokenize=False,
        add_generation_prompt=not prefill,
        continue_final_message=prefill,
    )
    return text, True


def generate_completions(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[Prompt],
    *,
    batch_size: int = 8,
    max_new_tokens: int = 512,
    num_return_sequences: int = 1,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int | None = None,
) -> list[list[str]]:
    """``num_return_sequences`` decoded completions per prompt, in left-padded batches; greedy by default."""
    import torch

    from trgrpo.theory import pad_token_id

    if batch_size < 1 or max_new_tokens < 1 or num_return_sequences < 1:
        raise ValueError("batch_size, max_new_tokens and num_return_sequences must be >= 1")
    if not do_sample and num_return_sequences > 1:
        raise ValueError("greedy decoding gives one completion per prompt: set do_sample=True for several")
    pad_id = pad_token_id(tokenizer)
    encoded: list[list[int]] = []
    for prompt in prompts:
        text, templated = render_prompt(tokenizer, prompt)
        encoded.append(list(tokenizer(text, add_special_tokens=not templated)["input_ids"]))

    # greedy: None silences "temperature is set but do_sample=False" from the model's generation config
    sampling = (
        dict(temperature=temperature, top_p=top_p) if do_sample else dict(temperature=None, top_p=None, top_k=None)
    )
    if seed is not None:
        torch.manual_seed(seed)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out: list[list[str]] = []
    try:
        for start in range(0, len(encoded), batch_size):
            chunk = encoded[start : start + batch_size]
            width = max(len(ids) for ids in chunk)
            input_ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
            attention = torch.zeros((len(chunk), width), dtype=torch.long)
            for row, ids in enumerate(chunk):  # left padding
                if ids:
                    input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
                    attention[row, width - len(ids) :] = 1
            with torch.no_grad():
                generated = model.generate(
                    input_ids=input_ids.to(device),
                    attention_mask=attention.to(device),
                    max_new_tokens=max_new_tokens,
                    do_sample=do_sample,
                    num_return_sequences=num_return_sequences,
                    pad_token_id=pad_id,
                    **sampling,
                )
            texts = tokenizer.batch_decode(generated[:, width:], skip_special_tokens=True)
            for row in range(len(chunk)):
                out.append(texts[row * num_return_sequences : (row + 1) * num_return_sequences])
    finally:
        model.train(was_training)
    return out


def greedy_generate(
    model: Any, tokenizer: Any, prompts: Sequence[Prompt], *, batch_size: int = 8, max_new_tokens: int = 512
) -> list[str]:
    """One greedy completion per prompt (the evaluation mode of Table 1 and of MATH-500/Minerva/Olympiad)."""
    rows = generate_completions(model, tokenizer, prompts, batch_size=batch_size, max_new_tokens=max_new_tokens)
    return [row[0] for row in rows]


@dataclass
class TokenOccurrences:
    """Per sampled completion token: its id, its text, pi_theta(o_t) and the index of its completion (completions
    numbered prompt by prompt, ``samples_per_prompt`` each, so ``completion // samples_per_prompt`` is the prompt)."""

    token_ids: list[int]
    texts: list[str]
    probs: list[float]
    completion: list[int]


def sample_token_probabilities(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[Any],
    *,
    samples_per_prompt: int = 4,
    max_new_tokens: int = 128,
    temperature: float = 0.7,
    batch_size: int = 4,
    seed: int = 0,
) -> TokenOccurrences:
    """Every sampled completion token with its probability under the temperature-scaled logits it was drawn from
    (a second forward pass); prompts are strings or chat messages."""
    import torch

    from trgrpo.theory import sample_batch

    if samples_per_prompt < 1 or max_new_tokens < 1:
        raise ValueError("samples_per_prompt and max_new_tokens must be >= 1")
    texts = [render_prompt(tokenizer, p)[0] for p in prompts]
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    out = TokenOccurrences([], [], [], [])
    gen = torch.Generator().manual_seed(seed)
    model.eval()
    for start in range(0, len(texts), batch_size):
        chunk = texts[start : start + batch_size]
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
        enc, seqs = sample_batch(
            model,
            tokenizer,
            chunk,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            num_return_sequences=samples_per_prompt,
        )
        with torch.no_grad():
            attn = (seqs != tokenizer.pad_token_id).long()
            prompt_len = enc["input_ids"].shape[1]
            attn[:, :prompt_len] = enc["attention_mask"].repeat_interleave(samples_per_prompt, dim=0)
            logits = model(input_ids=seqs, attention_mask=attn).logits[:, prompt_len - 1 : -1].float()
            logp = torch.log_softmax(logits / temperature, dim=-1)
            comp = seqs[:, prompt_len:]
            tok_logp = logp.gather(-1, comp.unsqueeze(-1)).squeeze(-1)
        for j, (row_ids, row_lp) in enumerate(zip(comp.tolist(), tok_logp.tolist())):
            row = start * samples_per_prompt + j
            for tid, lp in zip(row_ids, row_lp):
                if tid == tokenizer.pad_token_id:
                    break
                out.token_ids.append(tid)
                out.texts.append(tokenizer.decode([tid]))
                out.probs.append(float(torch.tensor(lp).exp()))
                out.completion.append(row)
                if tid == tokenizer.eos_token_id:
                    break
    return out
