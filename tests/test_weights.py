"""Eq. 11 and the ablation schemes (paper Section 3, Section 4.3 / Table 4, App. B.2, C.1 / Table 7)."""

import math

import pytest
import torch

from trgrpo import token_weights, weight_range
from trgrpo.weights import WeightParams

from .reference import weight as ref_weight


def test_default_matches_hand_values():
    # w(p) = clip(2 * (sigmoid(9 p) - 0.25), 1, 1.4) computed by hand
    for p, expected in [
        (0.0, 1.0),
        (0.1, 2 * (1 / (1 + math.exp(-0.9)) - 0.25)),
        (0.2, 2 * (1 / (1 + math.exp(-1.8)) - 0.25)),
        (0.5, 1.4),
        (1.0, 1.4),
    ]:
        w = token_weights(torch.tensor([p], dtype=torch.float64))
        assert w.item() == pytest.approx(min(max(expected, 1.0), 1.4), abs=1e-12)


def test_printed_eq11_gives_weight_one_everywhere():
    """Reading 1: sigmoid(p / tau) with tau = 9 lies in [0.5, 0.528] -> alpha*(.-mu) in [0.5, 0.556] -> clip to 1."""
    p = torch.linspace(0, 1, 10001, dtype=torch.float64)
    w = token_weights(p, tau_mode="divide")
    assert torch.equal(w, torch.ones_like(p))
    # and the unclipped value really stays below L = 1
    raw = 2.0 * (torch.sigmoid(p / 9.0) - 0.25)
    assert raw.max().item() < 0.5561 and raw.min().item() == pytest.approx(0.5)


def test_scale_reading_spans_lower_to_upper():
    p = torch.linspace(0, 1, 1001, dtype=torch.float64)
    w = token_weights(p)
    assert w.min().item() == 1.0 and w.max().item() == pytest.approx(1.4)
    assert bool((w[1:] >= w[:-1]).all())  # monotone in p
    # w = 1 up to p ~ 0.12 (sigmoid(9p) = 0.75 -> p = ln 3 / 9), and 1.4 from p ~ 0.33 (sigmoid(9p) = 0.95)
    assert token_weights(torch.tensor([math.log(3) / 9 - 1e-3])).item() == 1.0
    assert token_weights(torch.tensor([math.log(19) / 9 + 1e-3])).item() == pytest.approx(1.4)


@pytest.mark.parametrize("scheme", ["tr", "equal", "reverse"])
@pytest.mark.parametrize("tau_mode", ["scale", "divide"])
@pytest.mark.parametrize("tau,lower,upper", [(9.0, 1.0, 1.4), (0.5, 1.0, 1.2), (20.0, 0.5, 1.5), (2.0, 0.8, 1.5)])
def test_matches_reference(scheme, tau_mode, tau, lower, upper):
    p = torch.rand(200, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    w = token_weights(p, scheme, tau=tau, lower=lower, upper=upper, tau_mode=tau_mode)
    ref = [ref_weight(x, scheme, tau=tau, lower=lower, upper=upper, tau_mode=tau_mode) for x in p.tolist()]
    assert w.tolist() == pytest.approx(ref, abs=1e-12)


def test_reverse_is_two_minus_tr():
    p = torch.rand(100)
    assert torch.allclose(token_weights(p, "reverse"), 2 - token_weights(p, "tr"))


def test_random_uses_only_its_generator():
    p = torch.rand(1000)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    w1 = token_weights(p, "random", generator=torch.Generator().manual_seed(5))
    assert torch.equal(torch.get_rng_state(), before)  # global RNG untouched
    w2 = token_weights(p, "random", generator=torch.Generator().manual_seed(5))
    assert torch.equal(w1, w2)
    assert w1.min() >= 0.5 and w1.max() <= 1.5 and w1.std() > 0.2
    with pytest.raises(ValueError, match="generator"):
        token_weights(p, "random")


def test_weights_are_detached():
    p = torch.rand(10, requires_grad=True)
    assert not token_weights(p).requires_grad


def test_weight_range_table7():
    assert weight_range(tau=9.0) == pytest.approx((1.0, 1.4))
    assert weight_range(tau=0.5) == pytest.approx((1.0, 1.0))  # sigmoid(0.5) ~ 0.62 -> 2*(0.62-0.25) = 0.75 < 1
    assert weight_range(tau_mode="divide", tau=0.5) == pytest.approx((1.0, 2 * (1 / (1 + math.exp(-2)) - 0.25)))
    # with tau >= 1 the printed reading never lifts a weight above L = 1
    for tau in (2.0, 7.0, 9.0, 10.0, 20.0):
        assert weight_range(tau=tau, tau_mode="divide") == (1.0, 1.0)


@pytest.mark.parametrize(
    "kwargs,field",
    [
        (dict(tau=0.0), "tau"),
        (dict(tau=-1.0), "tau"),
        (dict(lower=0.0), "lower"),
        (dict(lower=-0.5), "lower"),
        (dict(lower=1.5, upper=1.2), "lower"),
        (dict(alpha=0.0), "alpha"),
        (dict(mu=0.5), "mu"),
        (dict(mu=float("nan")), "mu"),
        (dict(tau_mode="times"), "tau_mode"),
        (dict(scheme="inverse"), "scheme"),
        (dict(scheme="reverse", upper=2.0), "upper"),
    ],
)
def test_bad_hyperparameters_name_the_field(kwargs, field):
    scheme = kwargs.pop("scheme", "tr")
    with pytest.raises(ValueError, match=field):
        token_weights(torch.rand(3), scheme, **kwargs)
    with pytest.raises(ValueError, match=field):
        WeightParams(scheme=scheme, **kwargs)


@pytest.mark.parametrize("bad", [[-0.1, 0.5], [0.5, 1.01], [float("nan"), 0.2]])
def test_probabilities_outside_unit_interval(bad):
    with pytest.raises(ValueError, match=r"probs must lie in \[0, 1\]"):
        token_weights(torch.tensor(bad))


def test_integer_probs_rejected():
    with pytest.raises(TypeError, match="floating"):
        token_weights(torch.tensor([0, 1]))
