"""trgrpo: Token-Regulated Group Relative Policy Optimization (TR-GRPO), reproduced for reading and checking.

The math lives in small modules tied to the paper: :mod:`trgrpo.weights` (Eq. 11),
:mod:`trgrpo.loss` (Eq. 4-6, 9, 10), :mod:`trgrpo.trainer` (TRL integration). The trainer is imported
lazily because importing TRL takes seconds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trgrpo.loss import LossOutput, group_advantages, tr_grpo_loss
from trgrpo.weights import WeightParams, token_weights, weight_range

__version__ = "0.1.0"

__all__ = [
    "LossOutput",
    "TRGRPOConfig",
    "TRGRPOTrainer",
    "WeightParams",
    "group_advantages",
    "token_weights",
    "tr_grpo_loss",
    "weight_range",
]

if TYPE_CHECKING:  # pragma: no cover
    from trgrpo.trainer import TRGRPOConfig, TRGRPOTrainer


def __getattr__(name: str):
    if name in ("TRGRPOConfig", "TRGRPOTrainer"):
        from trgrpo import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module 'trgrpo' has no attribute {name!r}")
