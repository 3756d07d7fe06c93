"""The TR-GRPO objective as pure tensor code (Eq. 4, 5, 6, 9, 10), differentiable in ``logps`` only.

Two readings of the paper (docs/design.md) are options of :func:`tr_grpo_loss`: ``placement`` puts w inside the clip
("ratio", Eq. 9 as printed) or outside ("surrogate"); ``kl_weighting`` is Eq. 10 ("eq10"), w times Eq. 6 ("outside",
the gradient of Eq. 12) or Eq. 6 ("plain").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Literal, get_args

import torch
from pydantic import Field

from trgrpo.config import NON_NEGATIVE, Checked
from trgrpo.paper import EPS_HIGH, EPS_LOW

Placement = Literal["ratio", "surrogate"]
KLWeighting = Literal["eq10", "outside", "plain"]
PLACEMENTS, KL_WEIGHTINGS = get_args(Placement), get_args(KLWeighting)
LOWER_CLIP = Field(ge=0, lt=1, description="a finite number in [0, 1) (1 - eps_l must stay > 0)")
METRIC_KEYS = (
    "weight_mean",
    "weight_min",
    "weight_max",
    "weight_std",
    "zero_grad_frac",
    "zero_grad_frac_pos_adv",
    "zero_grad_frac_neg_adv",
    "kl_mean",
    "weight_at_upper",
)


def group_advantages(rewards: torch.Tensor, group_size: int, *, eps: float = 1e-4) -> torch.Tensor:
    """Eq. 4: A_i = (r_i - mean_group(r)) / (std_group(r) + eps) (unbiased std, as TRL), rewards group after group."""
    if not torch.is_tensor(rewards) or rewards.dim() != 1:
        raise ValueError("rewards must be a 1-D tensor (one reward per completion)")
    if int(group_size) < 1 or rewards.numel() % int(group_size) != 0:
        raise ValueError(
            f"group_size must be >= 1 and divide the number of rewards ({rewards.numel()}), got {group_size}"
        )
    r = rewards.view(-1, int(group_size))
    std = r.std(dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(r)
    return ((r - r.mean(dim=1, keepdim=True)) / (std + eps)).reshape(-1)


class LossOptions(Checked):
    """The one check of the loss options: the readings of Eq. 9 and Eq. 10, the KL coefficient, the clip range (an
    error starts with the field's name)."""

    placement: Placement = "ratio"
    kl_weighting: KLWeighting = "eq10"
    beta: Annotated[float, NON_NEGATIVE] = 0.0
    eps_low: Annotated[float, LOWER_CLIP] = EPS_LOW
    eps_high: Annotated[float, NON_NEGATIVE] = EPS_HIGH


def kl_term(
    logps: torch.Tensor, ref_logps: torch.Tensor, weights: torch.Tensor | None, kl_weighting: KLWeighting = "eq10"
) -> torch.Tensor:
    """Per-token KL estimate: Eq. 6 (``plain``), Eq. 10 (``eq10``) or w times Eq. 6 (``outside``)."""
    log_rho = ref_logps - logps  # log(pi_ref / pi)
    k3 = torch.exp(log_rho) - log_rho - 1  # Eq. 6
    if kl_weighting == "plain":
        return k3
    if kl_weighting == "outside":
        return weights * k3
    # Eq. 10: w rho - log(w rho) - 1, with log(w rho) = log w + log rho
    return weights * torch.exp(log_rho) - (torch.log(weights) + log_rho) - 1


def zero_gradient_mask(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    eps_low: float,
    eps_high: float,
    placement: Placement = "ratio",
) -> torch.Tensor:
    """Tokens whose policy gradient is zero: the clipped branch is active (I_trust = 0, Eq. 7 / Eq. 12)."""
    x = weights * ratio if placement == "ratio" else ratio
    return ((advantages > 0) & (x > 1 + eps_high)) | ((advantages < 0) & (x < 1 - eps_low))


@dataclass
class LossOutput:
    """Result of :func:`tr_grpo_loss`."""

    loss: torch.Tensor  # scalar (Eq. 5)
    per_token: torch.Tensor  # (B, T), zero where mask is 0
    metrics: dict[str, float] = field(default_factory=dict)


def tr_grpo_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    weights: torch.Tensor,
    *,
    ref_logps: torch.Tensor | None = None,
    beta: float = 0.0,
    eps_low: float = EPS_LOW,
    eps_high: float = EPS_HIGH,
    placement: Placement = "ratio",
    kl_weighting: KLWeighting = "eq10",
    upper: float | None = None,
    normalizer: float | torch.Tensor | None = None,
    policy_scale: torch.Tensor | None = None,
    bias_correction_kl: bool = False,
) -> LossOutput:
    """Minus the TR-GRPO objective (Eq. 9, KL of Eq. 10), token-level normalised (Eq. 5); tensors (B, T) but
    ``advantages`` (B,) or (B, T); ``old_logps=None``: on-policy. ``upper`` feeds ``weight_at_upper``; ``normalizer``,
    ``policy_scale``, ``bias_correction_kl``: TRL's token count, off-policy/IS factors and KL times r."""
    LossOptions(placement=placement, kl_weighting=kl_weighting, beta=beta, eps_low=eps_low, eps_high=eps_high)
    if not torch.is_tensor(logps) or logps.dim() != 2:
        raise ValueError(f"logps must be a 2-D tensor (B, T), got {getattr(logps, 'shape', type(logps))}")
    shape = logps.shape
    old_logps = logps.detach() if old_logps is None else old_logps
    if torch.is_tensor(advantages) and advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    given = {"mask": mask, "weights": weights, "old_logps": old_logps, "advantages": advantages, "ref_logps": ref_logps}
    for name, x in given.items():
        ok = torch.is_tensor(x) and (x.shape == shape or (name == "advantages" and x.shape == (shape[0], 1)))
        if not ok and (x is not None or name != "ref_logps"):
            raise ValueError(
                f"{name} must be a tensor of the shape {tuple(shape)} of logps, got {getattr(x, 'shape', x)}"
            )
    if beta > 0 and ref_logps is None:
        raise ValueError("ref_logps is required when beta > 0 (the KL term of Eq. 10 needs pi_ref)")
    mask, weights = mask.to(logps.dtype), weights.detach().to(logps.dtype)
    old_logps, advantages = old_logps.detach(), advantages.detach().to(logps.dtype)
    valid, n_valid = mask > 0, mask.sum()
    bad_weights, bad_mask, empty = torch.stack(  # one host sync
        [
            ~torch.isfinite(weights).all() | ((weights <= 0) & valid).any(),
            ((mask != 0) & (mask != 1)).any(),
            n_valid <= 0,
        ]
    ).tolist()
    if bad_weights:
        raise ValueError("weights must be finite, and > 0 on valid tokens (Eq. 10 takes log w)")
    if bad_mask:
        raise ValueError("mask must hold only 0 and 1 (it selects tokens; other values would reweight them)")
    if empty:
        raise ValueError("mask selects no token (all zeros): the loss of Eq. 5 would divide by zero")
    one = normalizer.numel() == 1 if torch.is_tensor(normalizer) else isinstance(normalizer, (int, float))
    if normalizer is not None and (isinstance(normalizer, bool) or not one or not 0 < float(normalizer) < math.inf):
        raise ValueError(f"normalizer must be a finite number > 0 (it divides the summed loss), got {normalizer!r}")

    ratio = torch.exp(logps - old_logps)  # r_{i,t}(theta)
    if placement == "ratio":  # Eq. 9: min(w r A, clip(w r) A)
        wr = weights * ratio
        objective = torch.min(wr * advantages, wr.clamp(1 - eps_low, 1 + eps_high) * advantages)
    else:  # w min(r A, clip(r) A)
        objective = weights * torch.min(ratio * advantages, ratio.clamp(1 - eps_low, 1 + eps_high) * advantages)
    if policy_scale is not None:
        objective = objective * policy_scale.detach()
    kl = None
    if beta > 0:
        kl = kl_term(logps, ref_logps.detach(), weights, kl_weighting)
        if bias_correction_kl:
            kl = kl * ratio
        objective = objective - beta * kl
    per_token = -objective * mask
    loss = per_token.sum() / (n_valid if normalizer is None else normalizer)

    with torch.no_grad():
        metrics = loss_metrics(
            ratio, advantages.expand(shape), weights, valid, eps_low, eps_high, placement, kl=kl, upper=upper
        )
    return LossOutput(loss=loss, per_token=per_token, metrics=metrics)


def loss_metrics(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    valid: torch.Tensor,
    eps_low: float,
    eps_high: float,
    placement: Placement,
    *,
    kl: torch.Tensor | None = None,
    upper: float | None = None,
) -> dict[str, float]:
    """:data:`METRIC_KEYS`: weight statistics and the share of tokens without policy gradient, split by sign of A
    (one host sync; ``kl_mean`` 0 without ``kl``, ``weight_at_upper`` NaN without ``upper``)."""
    w = weights.float()
    n = valid.sum()
    zero = zero_gradient_mask(ratio, advantages, weights, eps_low, eps_high, placement) & valid
    pos, neg = (advantages > 0) & valid, (advantages < 0) & valid
    mean = torch.where(valid, w, 0.0).sum() / n
    var = torch.where(valid, (w - mean).square(), 0.0).sum() / (n - 1).clamp(min=1)
    none = torch.tensor(math.nan, device=w.device)
    values = (
        mean,
        torch.where(valid, w, float("inf")).amin(),
        torch.where(valid, w, float("-inf")).amax(),
        var.sqrt(),
        zero.sum() / n,
        (zero & pos).sum() / pos.sum().clamp(min=1),
        (zero & neg).sum() / neg.sum().clamp(min=1),
        torch.where(valid, kl.float(), 0.0).sum() / n if kl is not None else torch.zeros_like(mean),
        (valid & (w >= upper - 1e-6)).sum() / n if upper is not None else none,
    )
    return dict(zip(METRIC_KEYS, torch.stack([v.to(torch.float64) for v in values]).tolist()))
