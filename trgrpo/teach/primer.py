"""The GRPO primer (notebook 00): Eq. 1-6 on one group of answers of the toy addition task (:mod:`trgrpo.pipeline.toy`).

The notebook writes each equation as a few lines of torch and checks them against :mod:`trgrpo.core.loss`; this module
holds what it needs around them: a policy whose samples for one prompt disagree (so a group has rewards of both
kinds), the group itself, and the per-token log-probabilities of a group's completions (teacher forcing, the same
quantity TRL computes).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from ..pipeline import toy


def taught_policy(row: dict, *, steps: int = 40, seed: int = 0, lr: float = 3e-3, wrong_offset: int = 1) -> Any:
    """A fresh micro model (:func:`trgrpo.pipeline.toy.build_model`) taught ONE prompt in seconds: half of each batch
    shows the
    right sum, half the sum + ``wrong_offset``, so the model ends up unsure between the two and a sampled group holds
    right and wrong answers (a stand-in for the warm start of notebook 03 when time is short)."""
    import torch

    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    tok = toy.build_tokenizer()
    model = toy.build_model(tok, seed=seed)
    wrong = {**row, "target": toy.spaced(int(row["answer"]) + wrong_offset)}
    batch = [row, wrong] * 8
    ids, att, lab = toy._sft_batch(tok, batch)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=ids, attention_mask=att, labels=lab).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    model.eval()
    return model, tok


def sample_group(model: Any, tok: Any, row: dict, group_size: int, *, seed: int = 0, temperature: float = 1.0) -> list:
    """``group_size`` sampled completions of one prompt (the group o_1..o_G of Eq. 1)."""
    return toy.generate(
        model,
        tok,
        [row["prompt"]] * group_size,
        max_new_tokens=toy.MAX_COMPLETION["addition"],
        do_sample=True,
        temperature=temperature,
        seed=seed,
    )


def first_mixed_group(
    model: Any, tok: Any, rows: Sequence[dict], group_size: int, *, seed: int = 0, tries: int = 50
) -> tuple[dict, list[str]]:
    """The first prompt of ``rows`` (shuffled by ``seed``) whose sampled group has both rewards 0 and 1.

    Raises ``RuntimeError`` when none of ``tries`` prompts does (every advantage of Eq. 4 would be 0)."""
    order = list(rows)
    random.Random(seed).shuffle(order)
    for row in order[:tries]:
        completions = sample_group(model, tok, row, group_size, seed=seed)
        rewards = toy.correctness_reward([row["prompt"]] * group_size, completions, [row["answer"]] * group_size)
        if 0 < sum(rewards) < group_size:
            return row, completions
    raise RuntimeError(f"no prompt among {min(tries, len(order))} gave a group with mixed rewards; raise tries")


def completion_logps(model: Any, tok: Any, prompt: str, completions: Sequence[str], *, temperature: float = 1.0):
    """Per-token log pi(o_t | q, o_<t) of each completion (+ its end-of-sequence token), by cross-entropy of the
    shifted logits: ``(logps (G, T), mask (G, T), token_ids (G, T))``, right-padded, mask 1 on completion tokens."""
    import torch
    import torch.nn.functional as F

    p_ids = tok(prompt)["input_ids"]
    comp = [tok(c)["input_ids"] + [tok.eos_token_id] for c in completions]
    T = max(len(c) for c in comp)
    ids = torch.full((len(comp), len(p_ids) + T), tok.pad_token_id)
    mask = torch.zeros(len(comp), T)
    for i, c in enumerate(comp):
        ids[i, : len(p_ids)] = torch.tensor(p_ids)
        ids[i, len(p_ids) : len(p_ids) + len(c)] = torch.tensor(c)
        mask[i, : len(c)] = 1
    att = (torch.arange(ids.shape[1]) < len(p_ids) + mask.sum(1, keepdim=True)).long()
    logits = model(input_ids=ids, attention_mask=att).logits[:, len(p_ids) - 1 : -1] / temperature
    targets = ids[:, len(p_ids) :]
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
    return -nll.view(targets.shape) * mask, mask, targets
