"""Supervised fine-tuning, the one loop every warm start uses (the toy's :mod:`trgrpo.pipeline.warm_start` and the
search
task's :func:`trgrpo.tasks.search_micro.warm_start`): right-padded teacher-forcing batches whose labels keep only
the tokens the model should learn to write, and one AdamW step on their cross-entropy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def pad_batch(examples: Sequence[tuple[Sequence[int], Sequence[int]]], pad_id: int) -> tuple[Any, Any, Any]:
    """``(token ids, loss mask)`` pairs -> ``(input_ids, attention_mask, labels)``, right-padded to the longest;
    a label is the token where the mask is 1 and -100 (ignored by the loss) where it is 0 or padding."""
    import torch

    if not examples:
        raise ValueError("pad_batch needs at least one example")
    width = max(len(x) for x, _ in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(examples), width), dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    for i, (x, m) in enumerate(examples):
        if len(x) != len(m):
            raise ValueError(f"example {i}: {len(x)} token ids but {len(m)} loss-mask entries")
        ids[i, : len(x)] = torch.tensor(list(x), dtype=torch.long)
        att[i, : len(x)] = 1
        labels[i, : len(x)] = torch.tensor([t if k else -100 for t, k in zip(x, m)], dtype=torch.long)
    return ids, att, labels


def sft_step(model: Any, optimizer: Any, batch: tuple[Any, Any, Any], *, clip_norm: float | None = None) -> float:
    """One supervised step: mean cross-entropy of the labelled tokens, backward, optional gradient clipping to
    ``clip_norm``, optimizer step. Returns the loss before the step."""
    import torch

    ids, att, labels = batch
    loss = model(input_ids=ids, attention_mask=att, labels=labels).loss
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if clip_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    return loss.item()
