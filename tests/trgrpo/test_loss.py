"""Eq. 4, 5, 6, 9, 10, 12: values and autograd gradients against an independent scalar implementation."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from tests.reference import loss_and_grads
from tests.reference import weight as ref_weight
from trgrpo import group_advantages, token_weights, tr_grpo_loss

SCHEMES = ["tr", "equal", "random", "reverse"]
TAU_MODES = ["scale", "divide"]
PLACEMENTS = ["ratio", "surrogate"]
KLS = ["eq10", "outside", "plain"]


def make_batch(seed=0, B=6, T=9, off_policy=True):
    g = torch.Generator().manual_seed(seed)
    logps = torch.log(torch.rand(B, T, generator=g, dtype=torch.float64).clamp(0.02, 0.999))
    old = logps + (0.3 * torch.randn(B, T, generator=g, dtype=torch.float64) if off_policy else 0.0)
    old = old.clamp(max=0.0)
    ref = (logps + 0.4 * torch.randn(B, T, generator=g, dtype=torch.float64)).clamp(max=0.0)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    mask = (torch.rand(B, T, generator=g) > 0.2).to(torch.float64)
    mask[0, 0] = 1.0
    return logps, old, ref, adv, mask


@pytest.mark.parametrize("scheme,tau_mode,placement,kl", list(itertools.product(SCHEMES, TAU_MODES, PLACEMENTS, KLS)))
def test_values_and_gradients_match_reference(scheme, tau_mode, placement, kl):
    logps, old, ref, adv, mask = make_batch(seed=len(scheme) * 7 + len(tau_mode) * 3 + len(placement) + len(kl))
    gen = torch.Generator().manual_seed(3)
    w = token_weights(logps.exp(), scheme, tau_mode=tau_mode, generator=gen)
    # the reference computes its own weights from p (for random: from the same uniform draws)
    u = torch.rand(logps.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float32).double()
    w_ref = [
        [ref_weight(p, scheme, tau_mode=tau_mode, u=u[i, t].item()) for t, p in enumerate(row)]
        for i, row in enumerate(logps.exp().tolist())
    ]
    assert torch.allclose(w, torch.tensor(w_ref, dtype=w.dtype), atol=1e-6)

    x = logps.clone().requires_grad_(True)
    out = tr_grpo_loss(x, old, adv, mask, w, ref_logps=ref, beta=0.05, placement=placement, kl_weighting=kl)
    out.loss.backward()
    adv2 = adv[:, None].expand_as(logps).tolist()
    ref_loss, ref_grad = loss_and_grads(
        logps.tolist(),
        old.tolist(),
        ref.tolist(),
        adv2,
        mask.tolist(),
        w.tolist(),
        beta=0.05,
        eps_l=0.2,
        eps_h=0.24,
        placement=placement,
        kl_weighting=kl,
    )
    assert out.loss.item() == pytest.approx(ref_loss, rel=1e-10, abs=1e-12)
    assert torch.allclose(x.grad, torch.tensor(ref_grad, dtype=x.dtype), rtol=1e-8, atol=1e-12)


def eq12_grad(logps, old, ref, adv, mask, w, beta, eps_l=0.2, eps_h=0.24):
    """Eq. 12 written out: gamma_t * w_t / N with the trust indicator at w^-1 (1 +- eps)."""
    r = torch.exp(logps - old)
    A = adv[:, None].expand_as(logps)
    trust = ~(((A > 0) & (r > (1 + eps_h) / w)) | ((A < 0) & (r < (1 - eps_l) / w)))
    gamma = r * A * trust + beta * torch.exp(ref - logps) - beta
    # dJ/dlogp = gamma * w; the loss is -J / N
    return -(gamma * w * mask) / mask.sum()


@pytest.mark.parametrize("seed", range(5))
def test_gradient_is_eq12_for_ratio_placement_and_outside_kl(seed):
    """Eq. 12 is the gradient of Eq. 9 (w inside the clip) with the KL weighted outside (w * k3)."""
    logps, old, ref, adv, mask = make_batch(seed)
    w = token_weights(logps.exp())
    x = logps.clone().requires_grad_(True)
    tr_grpo_loss(
        x, old, adv, mask, w, ref_logps=ref, beta=0.1, placement="ratio", kl_weighting="outside"
    ).loss.backward()
    assert torch.allclose(x.grad, eq12_grad(logps, old, ref, adv, mask, w, 0.1), rtol=1e-10, atol=1e-14)


def test_eq10_kl_gradient_differs_from_eq12():
    """Reading 3: Eq. 10's gradient is (1 - w rho) per token, not w (1 - rho) as Eq. 12 implies."""
    logps, old, ref, adv, mask = make_batch(1)
    w = token_weights(logps.exp())
    x = logps.clone().requires_grad_(True)
    tr_grpo_loss(x, old, adv, mask, w, ref_logps=ref, beta=0.1, kl_weighting="eq10").loss.backward()
    assert not torch.allclose(x.grad, eq12_grad(logps, old, ref, adv, mask, w, 0.1))


def test_eq10_kl_offset_at_reference():
    """At pi = pi_ref Eq. 10 equals w - log w - 1 > 0 for w != 1, while k3 and w * k3 are 0."""
    logps = torch.log(torch.tensor([[0.05, 0.5, 0.9]], dtype=torch.float64))
    mask, adv = torch.ones_like(logps), torch.zeros(1, dtype=torch.float64)
    w = token_weights(logps.exp())
    for kl, expected in [
        ("eq10", w - torch.log(w) - 1),
        ("outside", torch.zeros_like(w)),
        ("plain", torch.zeros_like(w)),
    ]:
        out = tr_grpo_loss(logps, None, adv, mask, w, ref_logps=logps, beta=1.0, kl_weighting=kl)
        assert torch.allclose(out.per_token, expected, atol=1e-15)
        assert out.metrics["kl_mean"] == pytest.approx(expected.mean().item())


def test_equal_weights_reduce_to_grpo_eq5():
    """With w = 1 every placement and KL weighting is Eq. 5 with the k3 KL of Eq. 6."""
    logps, old, ref, adv, mask = make_batch(2)
    ones = torch.ones_like(logps)
    r = torch.exp(logps - old)
    A = adv[:, None]
    kl = torch.exp(ref - logps) - (ref - logps) - 1
    j = torch.min(r * A, r.clamp(0.8, 1.24) * A) - 0.04 * kl
    expected = -(j * mask).sum() / mask.sum()
    for placement, klw in itertools.product(PLACEMENTS, KLS):
        out = tr_grpo_loss(logps, old, adv, mask, ones, ref_logps=ref, beta=0.04, placement=placement, kl_weighting=klw)
        assert out.loss.item() == pytest.approx(expected.item(), rel=1e-12)


@pytest.mark.parametrize("off_policy", [True, False])
def test_bias_corrected_kl_is_trls_at_equal_weights(off_policy):
    """bias_correction_kl (TRL's use_bias_correction_kl): k3 times the differentiable ratio r; with w = 1 the loss and
    its gradient are TRL's, also on-policy, where r = 1 but its gradient is not zero; any KL weighting times r."""
    logps, old, ref, adv, mask = make_batch(5, off_policy=off_policy)
    x = logps.clone().requires_grad_(True)
    r = torch.exp(x - (old if off_policy else x.detach()))
    kl = torch.exp(ref - x) - (ref - x) - 1
    j = torch.min(r * adv[:, None], r.clamp(0.8, 1.24) * adv[:, None]) - 0.04 * kl * r
    (expected_grad,) = torch.autograd.grad(-(j * mask).sum() / mask.sum(), x)
    old_arg = old if off_policy else None
    out = tr_grpo_loss(x, old_arg, adv, mask, torch.ones_like(logps), ref_logps=ref, beta=0.04, bias_correction_kl=True)
    (grad,) = torch.autograd.grad(out.loss, x)
    assert torch.allclose(grad, expected_grad, atol=1e-12)
    w = token_weights(logps.exp())
    ratio = torch.exp(logps - old) if off_policy else torch.ones_like(logps)
    policy = tr_grpo_loss(logps, old_arg, adv, mask, w).per_token
    for klw in KLS:
        plain, corrected = (
            tr_grpo_loss(logps, old_arg, adv, mask, w, ref_logps=ref, beta=1.0, kl_weighting=klw, bias_correction_kl=b)
            for b in (False, True)
        )
        assert torch.allclose(corrected.per_token - policy, (plain.per_token - policy) * ratio, atol=1e-12)


def test_ratio_placement_zeroes_high_probability_tokens_on_policy():
    """Reading 2: at r = 1, A > 0 and w > 1 + eps_h, Eq. 9 as printed gives no policy gradient."""
    p = torch.tensor([[0.05, 0.2, 0.6, 0.95]], dtype=torch.float64)
    logps = p.log().requires_grad_(True)
    w = token_weights(p)  # [1.0, ~1.22, 1.4, 1.4]
    mask = torch.ones_like(p)
    out = tr_grpo_loss(logps, None, torch.tensor([1.0], dtype=torch.float64), mask, w, placement="ratio")
    out.loss.backward()
    assert logps.grad[0, 0] < 0 and logps.grad[0, 1] < 0  # w <= 1.24: gradient flows
    assert logps.grad[0, 2] == 0 and logps.grad[0, 3] == 0  # w = 1.4 > 1.24: clipped away
    assert out.metrics["zero_grad_frac_pos_adv"] == pytest.approx(0.5)
    logps.grad = None
    out = tr_grpo_loss(logps, None, torch.tensor([1.0], dtype=torch.float64), mask, w, placement="surrogate")
    out.loss.backward()
    assert bool((logps.grad < 0).all()) and out.metrics["zero_grad_frac"] == 0.0
    assert torch.allclose(-logps.grad * 4, w)  # surrogate: gradient w * r * A / N


def test_negative_advantage_ratio_placement_keeps_gradient_on_policy():
    p = torch.tensor([[0.05, 0.95]], dtype=torch.float64)
    logps = p.log().requires_grad_(True)
    out = tr_grpo_loss(logps, None, torch.tensor([-1.0], dtype=torch.float64), torch.ones_like(p), token_weights(p))
    out.loss.backward()
    assert bool((logps.grad > 0).all()) and out.metrics["zero_grad_frac_neg_adv"] == 0.0


def test_metrics():
    logps, old, ref, adv, mask = make_batch(4)
    w = token_weights(logps.exp())
    m = tr_grpo_loss(logps, old, adv, mask, w, ref_logps=ref, beta=0.01, upper=1.4).metrics
    valid = mask > 0
    assert m["weight_mean"] == pytest.approx(w[valid].mean().item())
    assert m["weight_min"] == pytest.approx(w[valid].min().item())
    assert m["weight_max"] == pytest.approx(w[valid].max().item())
    assert m["weight_at_upper"] == pytest.approx((w[valid] >= 1.4 - 1e-6).double().mean().item())
    for key in ("zero_grad_frac", "zero_grad_frac_pos_adv", "zero_grad_frac_neg_adv", "kl_mean"):
        assert key in m


def test_advantages_per_token_equal_broadcast():
    logps, old, ref, adv, mask = make_batch(5)
    w = token_weights(logps.exp())
    a = tr_grpo_loss(logps, old, adv, mask, w).loss
    b = tr_grpo_loss(logps, old, adv[:, None].expand_as(logps).clone(), mask, w).loss
    assert a.item() == pytest.approx(b.item(), rel=1e-14)


def test_masked_tokens_get_no_gradient():
    logps, old, ref, adv, mask = make_batch(6)
    x = logps.clone().requires_grad_(True)
    tr_grpo_loss(x, old, adv, mask, token_weights(logps.exp()), ref_logps=ref, beta=0.1).loss.backward()
    assert bool((x.grad[mask == 0] == 0).all())


def test_group_advantages_eq4():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 3.0, 3.0, 3.0, 3.0])
    a = group_advantages(r, 4)
    std = torch.tensor([1.0, 0.0, 0.0, 1.0]).std().item()  # unbiased, as TRL
    assert a[:4].tolist() == pytest.approx(
        [0.5 / (std + 1e-4), -0.5 / (std + 1e-4), -0.5 / (std + 1e-4), 0.5 / (std + 1e-4)]
    )
    assert a[4:].tolist() == [0.0] * 4  # all-equal group -> no signal
    with pytest.raises(ValueError, match="group_size"):
        group_advantages(r, 3)


@pytest.mark.parametrize(
    "change,match",
    [
        (dict(placement="inside"), "placement"),
        (dict(kl_weighting="eq11"), "kl_weighting"),
        (dict(beta=-1.0), "beta"),
        (dict(eps_low=1.0), "eps_low"),
        (dict(eps_high=float("inf")), "eps_high"),
        (dict(beta=0.1), "ref_logps"),
    ],
)
def test_bad_options(change, match):
    logps, old, ref, adv, mask = make_batch(7)
    with pytest.raises(ValueError, match=match):
        tr_grpo_loss(logps, old, adv, mask, torch.ones_like(logps), **change)


def test_bad_shapes_and_mask():
    logps, old, ref, adv, mask = make_batch(8)
    w = torch.ones_like(logps)
    with pytest.raises(ValueError, match="mask"):
        tr_grpo_loss(logps, old, adv, mask[:, :-1], w)
    with pytest.raises(ValueError, match="weights"):
        tr_grpo_loss(logps, old, adv, mask, w[:-1])
    with pytest.raises(ValueError, match="advantages"):
        tr_grpo_loss(logps, old, adv[:-1], mask, w)
    with pytest.raises(ValueError, match="old_logps"):
        tr_grpo_loss(logps, old.T, adv, mask, w)
    with pytest.raises(ValueError, match="all zeros"):
        tr_grpo_loss(logps, old, adv, torch.zeros_like(mask), w)
    with pytest.raises(ValueError, match="weights must be finite, and > 0"):
        tr_grpo_loss(logps, old, adv, mask, torch.zeros_like(w))
    with pytest.raises(ValueError, match="logps"):
        tr_grpo_loss(logps[0], old, adv, mask, w)


def test_bf16_runs():
    logps, old, ref, adv, mask = make_batch(9)
    x = logps.to(torch.bfloat16).requires_grad_(True)
    out = tr_grpo_loss(
        x,
        old.bfloat16(),
        adv.bfloat16(),
        mask.bfloat16(),
        token_weights(x.detach().float().exp()).bfloat16(),
        ref_logps=ref.bfloat16(),
        beta=0.01,
    )
    out.loss.backward()
    assert torch.isfinite(out.loss) and x.grad.dtype == torch.bfloat16


def loss_inputs():
    torch.manual_seed(0)
    logps = torch.log(torch.rand(2, 3) * 0.9 + 0.05).requires_grad_()
    return logps, logps.detach() + 0.01, torch.tensor([1.0, -1.0]), torch.ones(2, 3), torch.full((2, 3), 1.2)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_loss_refuses_non_finite_weights(bad):
    logps, old, adv, mask, w = loss_inputs()
    w[0, 1] = bad
    with pytest.raises(ValueError, match="^weights must be finite"):
        tr_grpo_loss(logps, old, adv, mask, w)


def test_loss_refuses_non_finite_weights_on_masked_tokens_too():
    logps, old, adv, mask, w = loss_inputs()
    mask[1, 2] = 0.0
    w[1, 2] = float("nan")  # NaN * 0 is NaN: it would reach the loss
    with pytest.raises(ValueError, match="^weights must be finite"):
        tr_grpo_loss(logps, old, adv, mask, w)


@pytest.mark.parametrize("normalizer", [0, 0.0, -3.0, float("nan"), float("inf"), torch.tensor(0.0), torch.ones(2)])
def test_loss_refuses_a_bad_normalizer(normalizer):
    logps, old, adv, mask, w = loss_inputs()
    with pytest.raises(ValueError, match="^normalizer must"):
        tr_grpo_loss(logps, old, adv, mask, w, normalizer=normalizer)


@pytest.mark.parametrize("value", [0.5, 2.0, -1.0])
def test_loss_refuses_a_non_binary_mask(value):
    logps, old, adv, mask, w = loss_inputs()
    mask[0, 0] = value
    with pytest.raises(ValueError, match="^mask must hold only 0 and 1"):
        tr_grpo_loss(logps, old, adv, mask, w)


def test_loss_accepts_good_inputs_and_a_bool_mask():
    logps, old, adv, mask, w = loss_inputs()
    a = tr_grpo_loss(logps, old, adv, mask, w, normalizer=6.0).loss
    b = tr_grpo_loss(logps, old, adv, mask.bool(), w, normalizer=torch.tensor(6.0)).loss
    assert math.isfinite(float(a.detach())) and torch.equal(a, b)
