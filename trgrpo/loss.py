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
    """Eq. 4: A_i = (r_i - mean_group(r)) / std_group(r), for rewards laid out group after group.

    ``std`` is the unbiased sample std (as TRL's ``GRPOTrainer`` computes it) and ``eps`` keeps a
    group whose rewards are all equal at A = 0. ``scale=False`` keeps only the mean-centering.
    """
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
    """The one check of the loss options (``ValueError`` naming the field, as ``names`` renames it for the caller:
    ``{"eps_low": "epsilon"}``)."""
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


def policy_term(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    eps_low: float,
    eps_high: float,
    placement: str = "ratio",
) -> torch.Tensor:
    """The clipped surrogate of Eq. 9 (``ratio``) or w times the clipped surrogate of Eq. 5 (``surrogate``)."""
    if placement == "ratio":
        wr = weights * ratio
        return torch.min(wr * advantages, wr.clamp(1 - eps_low, 1 + eps_high) * advantages)
    return weights * torch.min(ratio * advantages, ratio.clamp(1 - eps_low, 1 + eps_high) * advantages)


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


def _as_2d(name: str, x: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    if not torch.is_tensor(x):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.shape != shape:
        raise ValueError(f"{name} must have shape {tuple(shape)} like logps, got {tuple(x.shape)}")
    return x


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

    Args:
        logps: (B, T) log pi_theta(o_t), differentiable.
        old_logps: (B, T) log pi_old(o_t) of the sampling policy; ``None`` means on-policy (r = 1).
        advantages: (B,) per completion (Eq. 4), broadcast over tokens, or (B, T).
        mask: (B, T) 1 for completion tokens that count (0 for padding and masked tool output).
        weights: (B, T) token weights w (Eq. 11 or an ablation), treated as constants.
        ref_logps: (B, T) log pi_ref(o_t); required when ``beta > 0``.
        upper: the weight cap U, only used for the metric ``weight_at_upper``.
        normalizer: divide the summed loss by this instead of the number of valid tokens
            (the trainer passes the token count of the whole global batch, as TRL's "dapo" does).
        policy_scale: optional (B, T) or (B, 1) factor on the policy term only (TRL's off-policy mask
            and vLLM importance-sampling correction); the KL term is not scaled.
        bias_correction_kl: multiply the per-token KL (whichever ``kl_weighting``) by the ratio r, differentiable,
            as TRL's ``use_bias_correction_kl``: the estimate under pi_theta of tokens sampled from pi_old (the
            KL's gradient becomes the unbiased reverse-KL gradient). Off by default: Eq. 6 and 10 have no r.
    """
    validate_loss_options(placement, kl_weighting, beta, eps_low, eps_high)
    if not torch.is_tensor(logps) or logps.dim() != 2:
        raise ValueError(f"logps must be a 2-D tensor (B, T), got {getattr(logps, 'shape', type(logps))}")
    shape = logps.shape
    mask = _as_2d("mask", mask, shape).to(logps.dtype)
    weights = _as_2d("weights", weights, shape).detach().to(logps.dtype)
    if old_logps is None:
        old_logps = logps.detach()
    old_logps = _as_2d("old_logps", old_logps, shape).detach()
    if not torch.is_tensor(advantages):
        raise TypeError("advantages must be a torch.Tensor")
    if advantages.dim() == 1:
        if advantages.shape[0] != shape[0]:
            raise ValueError(f"advantages of shape (B,) must have B={shape[0]} entries, got {advantages.shape[0]}")
        advantages = advantages.unsqueeze(1)
    elif advantages.shape != shape:
        raise ValueError(f"advantages must have shape ({shape[0]},) or {tuple(shape)}, got {tuple(advantages.shape)}")
    advantages = advantages.detach().to(logps.dtype)
    if beta > 0 and ref_logps is None:
        raise ValueError("ref_logps is required when beta > 0 (the KL term of Eq. 10 needs pi_ref)")
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
        if torch.is_tensor(normalizer) and normalizer.numel() != 1:
            raise ValueError(f"normalizer must be a scalar, got shape {tuple(normalizer.shape)}")
        value = float(normalizer) if torch.is_tensor(normalizer) or isinstance(normalizer, (int, float)) else None
        if isinstance(normalizer, bool) or value is None or not math.isfinite(value) or value <= 0:
            raise ValueError(f"normalizer must be a finite number > 0 (it divides the summed loss), got {normalizer!r}")
    valid = mask > 0
    if bool(((weights <= 0) & valid).any()):  # no boolean indexing (nonzero + gather)
        raise ValueError("weights must be > 0 on valid tokens (Eq. 10 takes log w)")

    ratio = torch.exp(logps - old_logps)  # r_{i,t}(theta)
    objective = policy_term(ratio, advantages, weights, eps_low, eps_high, placement)
    if policy_scale is not None:
        objective = objective * policy_scale.detach()
    kl = None
    if beta > 0:
        kl = kl_term(logps, _as_2d("ref_logps", ref_logps, shape).detach(), weights, kl_weighting)
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
    """Weight statistics and the share of tokens that get no policy gradient, split by sign of A.

    Masked reductions (no boolean indexing) gathered into one tensor: one host sync on a GPU.
    """
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
