"""trgrpo: Token-Regulated Group Relative Policy Optimization (TR-GRPO), reproduced for reading and checking.

The math lives in small modules tied to the paper: :mod:`trgrpo.weights` (Eq. 11),
:mod:`trgrpo.loss` (Eq. 4-6, 9, 10), :mod:`trgrpo.trainer` (TRL integration). The public names below are imported
on first use, so that ``import trgrpo`` has no side effect (importing torch adds warning filters, TRL takes
seconds); :func:`trgrpo.notebook.setup` configures a notebook.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_HOME = {
    "LossOutput": "loss",
    "group_advantages": "loss",
    "tr_grpo_loss": "loss",
    "WeightParams": "weights",
    "token_weights": "weights",
    "weight_range": "weights",
    "TRGRPOConfig": "trainer",
    "TRGRPOTrainer": "trainer",
}
__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name in _HOME:
        return getattr(importlib.import_module(f"trgrpo.{_HOME[name]}"), name)
    raise AttributeError(f"module 'trgrpo' has no attribute {name!r}")
