"""Token weights of TR-GRPO (Eq. 11) and the ablation schemes of Table 4.

``tau_mode`` is the first reading (docs/design.md): ``"scale"`` sigmoid(tau p) (default), ``"divide"`` sigmoid(p / tau)
(as printed). :data:`SCHEMES` maps a name to ``fn(p, *, params, mask, generator) -> w``; add one with
``weights.SCHEMES["mine"] = lambda p, **_: 0.3 * p + 0.7``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, get_args

import torch
from pydantic import ConfigDict, field_validator, model_validator

from trgrpo.config import Checked

TauMode = Literal["scale", "divide"]
TAU_MODES = get_args(TauMode)
RANDOM_RANGE = (0.5, 1.5)  # Table 4: "sampled uniformly from [0.5, 1.5]"
_FLOAT32_MAX = 3.4028234663852886e38  # the weights are float32 tensors: a larger value becomes inf there


class WeightParams(Checked):
    """The scheme and Eq. 11's hyperparameters (App. B.2 defaults), checked on construction (errors name the field).
    The one place these defaults are written: every other spec reads them from here."""

    model_config = ConfigDict(frozen=True)

    scheme: str = "tr"
    alpha: float = 2.0
    mu: float = 0.25
    tau: float = 9.0
    lower: float = 1.0
    upper: float = 1.4
    tau_mode: TauMode = "scale"

    @field_validator("scheme")
    @classmethod
    def _known_scheme(cls, scheme: str) -> str:
        if scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {tuple(SCHEMES)} (weights.SCHEMES), got {scheme!r}")
        return scheme

    @field_validator("alpha", "mu", "tau", "lower", "upper")
    @classmethod
    def _float32(cls, v: float, info) -> float:
        if abs(v) > _FLOAT32_MAX:
            raise ValueError(
                f"{info.field_name} must be finite (and within float32, the dtype of the weights), got {v!r}"
            )
        return float(v)

    @model_validator(mode="after")
    def _rules(self) -> WeightParams:
        alpha, mu, tau, lower, upper = self.alpha, self.mu, self.tau, self.lower, self.upper
        if tau <= 0:
            raise ValueError(f"tau must be > 0 (it scales or divides the probability), got {tau}")
        if alpha <= 0:
            raise ValueError(f"alpha must be > 0 so that w increases with p, got {alpha}")
        if not mu < 0.5:  # sigmoid(.) of a probability lies in [0.5, 1): alpha*(sigmoid - mu) > 0 iff mu < 0.5
            raise ValueError(f"mu must be < 0.5 so that alpha*(sigmoid(.) - mu) stays positive, got {mu}")
        if lower <= 0:
            raise ValueError(f"lower must be > 0 (Eq. 10 takes log w, so every weight must be positive), got {lower}")
        if lower > upper:
            raise ValueError(f"lower must be <= upper, got lower={lower} > upper={upper}")
        if self.scheme == "reverse" and upper >= 2:
            raise ValueError(f"upper must be < 2 for scheme='reverse' (2 - w must stay positive), got {upper}")
        return self


DEFAULTS = WeightParams()  # App. B.2's values, read by the specs, tables and figures


def as_weight_params(params: WeightParams | str = "tr", /, **fields: Any) -> WeightParams:
    """A :class:`WeightParams` from one (with ``fields`` changed) or from a scheme name and ``fields``."""
    return (
        params.replace(**fields) if isinstance(params, WeightParams) else WeightParams(**{"scheme": params, **fields})
    )


def tr_weight(probs: torch.Tensor, params: WeightParams) -> torch.Tensor:
    """Eq. 11: clip(alpha * (sigmoid(tau-scaled p) - mu), L, U), detached (sg[.]); ``params.scheme`` is not read."""
    p = probs.detach()
    z = p * params.tau if params.tau_mode == "scale" else p / params.tau  # a new tensor: in-place ops stay local
    return z.sigmoid_().sub_(params.mu).mul_(params.alpha).clamp_(params.lower, params.upper)


def _random(p: torch.Tensor, *, generator: torch.Generator | None, **_: Any) -> torch.Tensor:
    if generator is None:
        raise ValueError("scheme='random' needs generator=torch.Generator() (the global RNG samples the rollouts)")
    lo, hi = RANDOM_RANGE
    u = torch.rand(p.shape, generator=generator, device=generator.device, dtype=torch.float32)
    return (lo + (hi - lo) * u).to(device=p.device, dtype=p.dtype)


def _batch_mean(w: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """sum(w * mask) / sum(mask): the mean weight of the valid tokens given (in the trainer: the micro-batch)."""
    if not torch.is_tensor(mask) or mask.shape != w.shape:
        raise ValueError(f"schemes 'const' and 'tr_norm' need mask= of the probs' shape {tuple(w.shape)}")
    valid = mask.detach().to(w.dtype)
    if float(valid.sum()) <= 0:
        raise ValueError("mask selects no token: 'const' and 'tr_norm' need the mean weight over valid tokens")
    return (w * valid).sum() / valid.sum()


SCHEMES: dict[str, Callable[..., torch.Tensor]] = {  # const, tr_norm: notebook 03's controls
    "tr": lambda p, *, params, **_: tr_weight(p, params),
    "equal": lambda p, **_: torch.ones_like(p),
    "random": _random,
    "reverse": lambda p, *, params, **_: 2.0 - tr_weight(p, params),  # Table 4: "assigns it 2 - w"
    "const": lambda p, *, params, mask, **_: torch.ones_like(p) * _batch_mean(tr_weight(p, params), mask),
    "tr_norm": lambda p, *, params, mask, **_: tr_weight(p, params) / _batch_mean(tr_weight(p, params), mask),
}


def token_weights(
    probs: torch.Tensor,
    scheme: str = "tr",
    *,
    mask: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    **fields: Any,
) -> torch.Tensor:
    """Per-token weights w > 0 of ``scheme`` for probabilities ``probs`` (any shape), detached; ``fields``: Eq. 11's
    hyperparameters. ``mask`` (1 = valid) is read by ``"const"``/``"tr_norm"``, ``generator`` by ``"random"``."""
    params = WeightParams(scheme=scheme, **fields)
    if not torch.is_tensor(probs) or not probs.is_floating_point():
        raise TypeError(f"probs must be a floating-point torch.Tensor, got {getattr(probs, 'dtype', type(probs))}")
    if probs.numel() and not bool(((probs >= 0) & (probs <= 1)).all()):  # also catches NaN
        bad = probs[~((probs >= 0) & (probs <= 1))].flatten()
        raise ValueError(f"probs must lie in [0, 1] (token probabilities); {bad.numel()} are not, e.g. {bad[0]}")
    w = SCHEMES[scheme](probs.detach().clone(), params=params, mask=mask, generator=generator)
    if not torch.is_tensor(w) or w.shape != probs.shape:
        raise ValueError(f"scheme {scheme!r} must return a tensor of shape {tuple(probs.shape)}, got {w!r:.80}")
    w = w.detach().to(device=probs.device, dtype=probs.dtype)
    if w.numel() and not bool((torch.isfinite(w) & (w > 0)).all()):
        raise ValueError(f"scheme {scheme!r} must return finite weights > 0 (Eq. 10 takes log w)")
    return w


def weight_range(scheme: str = "tr", **fields: Any) -> tuple[float, float]:
    """The (min, max) of w over p in [0, 1] (a grid of 1001 points): ``weight_range(tau=0.5, tau_mode="divide")``."""
    params = WeightParams(scheme=scheme, **fields)
    if scheme == "const":  # the batch mean of weights in [L, U]
        return params.lower, params.upper
    if scheme == "tr_norm":  # w / mean with both in [L, U]
        return params.lower / params.upper, params.upper / params.lower
    if scheme == "random":
        return RANDOM_RANGE
    w = token_weights(torch.linspace(0.0, 1.0, 1001, dtype=torch.float64), scheme, **fields)
    return float(w.min()), float(w.max())
