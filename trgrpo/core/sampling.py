"""The one sampler of the library: completions drawn from the policy's own distribution (paper Section 3).

Theorem 3.1 and Figure 1 are statements about tokens the policy itself samples, so the theory
(:func:`trgrpo.core.theory.sample_completions`) and the token statistics
(:func:`trgrpo.results.token_stats.sample_token_probabilities`) both draw with :func:`sample_batch`: temperature
scaling only, no top-k and no nucleus cut, prompts left-padded so every completion starts at one column.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def pad_token_id(tokenizer: Any) -> int:
    """The id a batch is padded with: the tokenizer's pad token, else its EOS token."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad is None:
        raise ValueError("the tokenizer has neither a pad token nor an eos token to pad with")
    return pad


@torch.no_grad()
def sample_batch(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    *,
    max_new_tokens: int,
    temperature: float,
    num_return_sequences: int = 1,
) -> tuple[dict, torch.Tensor]:
    """(the left-padded encoding of ``texts``, the sampled sequences: prompt columns then completion columns).

    ``texts`` are rendered prompts (chat template already applied; no special tokens are added). The caller
    seeds torch's generator first. Each prompt gives ``num_return_sequences`` rows, next to each other.
    """
    if max_new_tokens < 1 or num_return_sequences < 1:
        raise ValueError("max_new_tokens and num_return_sequences must be >= 1")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 to sample, got {temperature!r}")
    old_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        enc = tokenizer(list(texts), return_tensors="pt", padding=True, add_special_tokens=False)
    finally:
        tokenizer.padding_side = old_side
    seqs = model.generate(
        **enc,
        do_sample=True,
        temperature=temperature,
        top_k=0,  # the policy's whole distribution at this temperature
        top_p=1.0,
        max_new_tokens=max_new_tokens,
        num_return_sequences=num_return_sequences,
        pad_token_id=pad_token_id(tokenizer),
    )
    return enc, seqs
