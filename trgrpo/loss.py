"""The TR-GRPO objective as pure tensor code (paper Section 2.3 and 3: Eq. 4, 5, 6, 9, 10).

Shapes: ``B`` completions, ``T`` completion tokens. Every function here is differentiable in
``logps`` (the current policy's per-token log-probabilities) and in nothing else; weights,
old and reference log-probabilities are treated as constants.

The two open readings of the objective (docs/design.md, "The three readings") are options of :func:`tr_grpo_loss`:
  * ``placement="ratio"``     min(w r A, clip(w r, 1-eps_l, 1+eps_h) A)      (Eq. 9 as printed)
    ``placement="surrogate"`` w * min(r A, clip(r, 1-eps_l, 1+eps_h) A)
  * ``kl_weighting="eq10"``   w rho - log(w rho) - 1,  rho = pi_ref / pi      (Eq. 10)
    ``kl_weighting="outside"`` w * (rho - log rho - 1)                        (the gradient of Eq. 12)
    ``kl_weighting="plain"``  rho - log rho - 1                               (Eq. 6)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

PLACEMENTS = ("ratio", "surrogate")
KL_WEIGHTINGS = ("eq10", "outside", "plain")


def group_advantages(rewards: torch.Tensor, group_size: int, *, scale: bool = True, eps: float = 1e-4) -> torch.Tensor:
    """Eq. 4: A_i = (r_i - mean_group(r)) / (std_group(r) + eps), rewards laid out group after group.

    ``std`` is unbiased (as TRL); ``scale=False`` keeps only the mean-centering."""
    if not torch.is_tensor(rewards) or rewards.dim() != 1:
        raise ValueError("rewards must be a 1-D tensor (one reward per completion)")
    if int(group_size) < 1 or rewards.numel() % int(group_size) != 0:
        raise ValueError(
            f"group_size must be >= 1 and divide the number of rewards ({rewards.numel()}), got {group_size}"
        )
    r = rewards.view(-1, int(group_size))
    adv = r - r.mean(dim=1, keepdim=True)
    if scale:
        std = r.std(dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(adv)
        adv = adv / (std + eps)
    return adv.reshape(-1)


def validate_loss_options(
    placement: str = "ratio",
    kl_weighting: str = "eq10",
    beta: float = 0.0,
    eps_low: float = 0.2,
    eps_high: float = 0.24,
    *,
    names: dict[str, str] | None = None,
) -> None:
    """The one check of the loss options: a ``ValueError`` naming the field as ``names`` renames it for the caller
    (``{"eps_low": "epsilon"}``)."""
    name = {"placement": "placement", "eps_low": "eps_low", "eps_high": "eps_high", **(names or {})}.get
    if not isinstance(placement, str) or placement not in PLACEMENTS:
        raise ValueError(f"{name('placement')} must be one of {PLACEMENTS}, got {placement!r}")
    if not isinstance(kl_weighting, str) or kl_weighting not in KL_WEIGHTINGS:
        raise ValueError(f"kl_weighting must be one of {KL_WEIGHTINGS}, got {kl_weighting!r}")
    for field_, v in (("beta", beta), ("eps_low", eps_low), ("eps_high", eps_high)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"{name(field_, field_)} must be a finite number >= 0, got {v!r}")
    if eps_low >= 1:
        raise ValueError(
            f"{name('eps_low')} must be < 1 (the lower clip 1 - eps_low must stay positive), got {eps_low}"
        )


def kl_term(
    logps: torch.Tensor, ref_logps: torch.Tensor, weights: torch.Tensor | None, kl_weighting: str = "eq10"
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
    placement: str = "ratio",
) -> torch.Tensor:
    """Tokens whose policy gradient is zero: the clipped branch is active (I_trust = 0, Eq. 7 / Eq. 12)."""
    x = weights * ratio if placement == "ratio" else ratio
    return ((advantages > 0) & (x > 1 + eps_high)) | ((advantages < 0) & (x < 1 - eps_low))


@dataclass
class LossOutput:
    """Result of :func:`tr_grpo_loss`."""

    loss: torch.Tensor  # scalar: -(Eq. 9 objective) summed over valid tokens / their count (Eq. 5)
    per_token: torch.Tensor  # (B, T) per-token loss, zero where mask is 0
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
    eps_low: float = 0.2,
    eps_high: float = 0.24,
    placement: str = "ratio",
    kl_weighting: str = "eq10",
    upper: float | None = None,
    normalizer: float | torch.Tensor | None = None,
    policy_scale: torch.Tensor | None = None,
    bias_correction_kl: bool = False,
) -> LossOutput:
    """Minus the TR-GRPO objective (Eq. 9 with the KL of Eq. 10), token-level normalised (Eq. 5).

    ``logps``, ``old_logps`` (``None``: on-policy, r = 1), ``ref_logps`` (needed when ``beta > 0``), ``mask`` (1 for
    tokens that count) and ``weights`` (constants) are (B, T); ``advantages`` (B,) or (B, T). ``upper`` (U) only
    feeds the metric ``weight_at_upper``. ``normalizer`` replaces the valid-token count (the trainer: the global
    batch's, as TRL's "dapo"); ``policy_scale`` multiplies the policy term only (TRL's off-policy mask, vLLM IS
    correction); ``bias_correction_kl`` multiplies the KL by r, as TRL's ``use_bias_correction_kl``.
    """
    validate_loss_options(placement, kl_weighting, beta, eps_low, eps_high)
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
                f"{name} must be a tensor of shape {tuple(shape)} like logps, got {getattr(x, 'shape', x)}"
            )
    if beta > 0 and ref_logps is None:
        raise ValueError("ref_logps is required when beta > 0 (the KL term of Eq. 10 needs pi_ref)")
    mask, weights = mask.to(logps.dtype), weights.detach().to(logps.dtype)
    old_logps, advantages = old_logps.detach(), advantages.detach().to(logps.dtype)
    n_valid = mask.sum()
    # one host sync for the value checks: NaN/inf weights, a mask that is not 0/1, an empty mask
    bad_weights, bad_mask, empty = torch.stack(
        [~torch.isfinite(weights).all(), ((mask != 0) & (mask != 1)).any(), n_valid <= 0]
    ).tolist()
    if bad_weights:
        raise ValueError("weights must be finite (they hold NaN or inf): the loss would be NaN")
    if bad_mask:
        raise ValueError("mask must hold only 0 and 1 (it selects tokens; other values would reweight them)")
    if empty:
        raise ValueError("mask selects no token (all zeros): the loss of Eq. 5 would divide by zero")
    if normalizer is not None:
        one = normalizer.numel() == 1 if torch.is_tensor(normalizer) else isinstance(normalizer, (int, float))
        if isinstance(normalizer, bool) or not one or not math.isfinite(float(normalizer)) or float(normalizer) <= 0:
            raise ValueError(f"normalizer must be a finite number > 0 (it divides the summed loss), got {normalizer!r}")
    valid = mask > 0
    if bool(((weights <= 0) & valid).any()):  # no boolean indexing (nonzero + gather)
        raise ValueError("weights must be > 0 on valid tokens (Eq. 10 takes log w)")

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
    denom = n_valid if normalizer is None else normalizer
    loss = per_token.sum() / denom

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
    placement: str,
    *,
    kl: torch.Tensor | None = None,
    upper: float | None = None,
) -> dict[str, float]:
    """Weight statistics and the share of tokens without policy gradient, split by sign of A (one host sync)."""
    w = weights.float()
    n = valid.sum()
    zero = zero_gradient_mask(ratio, advantages, weights, eps_low, eps_high, placement) & valid
    pos, neg = (advantages > 0) & valid, (advantages < 0) & valid
    mean = torch.where(valid, w, 0.0).sum() / n
    var = torch.where(valid, (w - mean).square(), 0.0).sum() / (n - 1).clamp(min=1)
    stats = [
        mean,
        torch.where(valid, w, float("inf")).amin(),
        torch.where(valid, w, float("-inf")).amax(),
        var.sqrt(),
        zero.sum() / n,
        (zero & pos).sum(),
        pos.sum(),
        (zero & neg).sum(),
        neg.sum(),
        torch.where(valid, kl.float(), 0.0).sum() / n if kl is not None else torch.zeros((), device=w.device),
        (valid & (w >= upper - 1e-6)).sum() / n if upper is not None else torch.zeros((), device=w.device),
        n,
    ]
    (mean, wmin, wmax, std, zero_frac, zp, np_, zn, nn, kl_mean, at_upper, count) = torch.stack(
        [s.to(torch.float64) for s in stats]
    ).tolist()
    m = {
        "weight_mean": mean,
        "weight_min": wmin,
        "weight_max": wmax,
        "weight_std": std if count > 1 else 0.0,
        "zero_grad_frac": zero_frac,
        "zero_grad_frac_pos_adv": zp / np_ if np_ else 0.0,
        "zero_grad_frac_neg_adv": zn / nn if nn else 0.0,
        "kl_mean": kl_mean,
    }
    if upper is not None:
        m["weight_at_upper"] = at_upper
    return m
