"""Eq. 11 and the ablation schemes (paper Section 3, Section 4.3 / Table 4, App. B.2, C.1 / Table 7)."""

from __future__ import annotations

import math

import pytest
import torch

from tests.reference import weight as ref_weight
from trgrpo import token_weights, weight_range
from trgrpo.runs.spec import RunSpec
from trgrpo.weights import WeightParams


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


# ---------------------------------------------------------------------------------------------------------------
# weights.SCHEMES: a user-defined scheme is one entry (e.g. a Lopti-style linear weight w = 0.3 p + 0.7)


def lopti(p, **_):
    return 0.3 * p + 0.7


@pytest.fixture
def registry(monkeypatch):
    """weights, with "lopti" in SCHEMES for this test only."""
    from trgrpo import weights

    monkeypatch.setitem(weights.SCHEMES, "lopti", lopti)
    return weights


def test_builtin_schemes():
    from trgrpo import weights

    assert tuple(weights.SCHEMES) == ("tr", "equal", "random", "reverse", "const", "tr_norm")


def test_a_scheme_added_to_schemes(registry):
    p = torch.rand(4, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    w = token_weights(p, "lopti")
    assert w.shape == p.shape and w.dtype == p.dtype
    assert torch.equal(w, 0.3 * p + 0.7)
    assert weight_range(scheme="lopti") == pytest.approx((0.7, 1.0))
    assert WeightParams(scheme="lopti").scheme == "lopti"
    del registry.SCHEMES["lopti"]
    with pytest.raises(ValueError, match="scheme"):
        token_weights(p, "lopti")


def test_scheme_weights_are_detached_and_leave_probs_alone(registry, monkeypatch):
    monkeypatch.setitem(registry.SCHEMES, "inplace", lambda p, **_: p.mul_(0.5).add_(0.5))
    p = torch.rand(10, requires_grad=True)
    p0 = p.detach().clone()
    w = token_weights(p, "inplace")
    assert not w.requires_grad
    assert torch.equal(p.detach(), p0)  # fn got a copy
    assert torch.allclose(w, 0.5 * p0 + 0.5)
    # float64 output for float32 probs comes back in the probs' dtype
    monkeypatch.setitem(registry.SCHEMES, "f64", lambda p, **_: (0.3 * p + 0.7).double())
    assert token_weights(torch.rand(3), "f64").dtype == torch.float32
    assert token_weights(torch.empty(0, 5), "f64").shape == (0, 5)


def test_unknown_scheme_error_lists_the_schemes(registry):
    with pytest.raises(ValueError, match=r"scheme must be one of .*'reverse'.*'lopti'"):
        WeightParams(scheme="inverse")
    for bad in (None, ["tr"], 1):
        with pytest.raises(ValueError, match="scheme"):
            token_weights(torch.rand(3), bad)


@pytest.mark.parametrize(
    "fn,match",
    [
        (lambda p, **_: p[..., :1] + 1, "shape"),
        (lambda p, **_: torch.ones(p.numel()), "shape"),
        (lambda p, **_: (p + 1).tolist(), "shape"),
        (lambda p, **_: p * float("nan") + 1, "finite weights > 0"),
        (lambda p, **_: p + float("inf"), "finite weights > 0"),
        (lambda p, **_: torch.zeros_like(p), "finite weights > 0"),
        (lambda p, **_: p - 2, "finite weights > 0"),
    ],
)
def test_bad_outputs_raise_naming_the_scheme(monkeypatch, fn, match):
    from trgrpo import weights

    monkeypatch.setitem(weights.SCHEMES, "bad", fn)
    with pytest.raises(ValueError, match=match) as info:
        token_weights(torch.rand(2, 3), "bad")
    assert "'bad'" in str(info.value)


def test_config_runspec_and_toy_accept_a_registered_scheme(registry, tmp_path):
    from trgrpo import TRGRPOConfig
    from trgrpo.runs import toy_grid

    with pytest.raises(ValueError, match="weight_scheme"):
        TRGRPOConfig(output_dir=str(tmp_path), weight_scheme="nope", report_to="none", use_cpu=True)
    cfg = TRGRPOConfig(output_dir=str(tmp_path), weight_scheme="lopti", report_to="none", use_cpu=True)
    assert cfg.weight_scheme == "lopti"
    assert RunSpec(task="addition", model="m", scheme="lopti").scheme == "lopti"
    spec = toy_grid.toy_spec("lopti", 3, placement="surrogate")
    assert spec["scheme"] == "lopti" and spec["name"] == "addition-micro-lopti-surrogate-seed3"
    assert toy_grid.run_label({"scheme": "lopti", "spec": spec}) == "lopti-surrogate"
    assert toy_grid.toy_spec("lopti", 3, placement="ratio")["name"] != spec["name"]  # two placements, two result files


def test_trainer_trains_with_a_registered_scheme(registry, tiny_model_dir, tmp_path):
    """One TRGRPOTrainer step: the logged weights are those of 0.3 p + 0.7."""
    from datasets import Dataset

    from trgrpo import TRGRPOConfig, TRGRPOTrainer

    cfg = TRGRPOConfig(
        output_dir=str(tmp_path),
        weight_scheme="lopti",
        weight_placement="surrogate",
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        max_steps=1,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
    )
    ds = Dataset.from_dict({"prompt": ["Count to 3:", "Count to 4:"]})

    def reward(completions, completion_ids, **kwargs):
        return [float(sum(ids) % 5) for ids in completion_ids]

    trainer = TRGRPOTrainer(model=tiny_model_dir, reward_funcs=reward, args=cfg, train_dataset=ds)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 1
    assert 0.7 <= logs[0]["tr/weight_min"] <= logs[0]["tr/weight_mean"] <= logs[0]["tr/weight_max"] <= 1.0


def test_registered_scheme_runs_through_the_toy_grid(registry, tmp_path):
    """toy_grid.run_grid runs in this process, so a scheme registered here trains there (tiny model, 1 step)."""
    from trgrpo.runs import toy_grid

    tiny = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2)
    warm = dict(threshold=0.0, max_steps=2, check_every=2, cache=tmp_path / "ws", model_overrides=tiny)
    spec = toy_grid.toy_spec("lopti", 0, steps=1, prompts_per_step=2, num_generations=4, n_eval=8)
    summary = toy_grid.run_grid([spec], results_dir=tmp_path / "res", warm_kwargs=warm, progress=False, threads=1)
    assert summary["n_run"] == 1
    (rec,) = toy_grid.load_runs(tmp_path / "res")
    assert rec["scheme"] == "lopti" and toy_grid.run_label(rec) == "lopti-surrogate" and len(rec["history"]) == 1
    h = rec["history"][0]
    assert 0.7 <= h["tr/weight_min"] <= h["tr/weight_mean"] <= h["tr/weight_max"] <= 1.0


# ---------------------------------------------------------------------------------------------------------------
# Controls: const (TR's batch-mean scale, no regulation) and tr_norm (TR's regulation, no scale)

_P = torch.tensor([[0.05, 0.2, 0.6, 0.9], [0.5, 0.9, 0.0, 0.0]], dtype=torch.float64)
_M = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])


def test_const_and_tr_norm_hand_values():
    w02 = 2 * (1 / (1 + math.exp(-1.8)) - 0.25)  # w(0.2); w(0.05) = 1 (clip), w(p >= 0.5) = 1.4
    mean = (1.0 + w02 + 1.4 * 4) / 6  # over the 6 valid tokens only
    const = token_weights(_P, "const", mask=_M)
    assert torch.allclose(const, torch.full_like(_P, mean), atol=1e-12)
    norm = token_weights(_P, "tr_norm", mask=_M)
    tr = token_weights(_P, "tr")
    assert torch.allclose(norm, tr / mean, atol=1e-12)
    assert float((norm * _M).sum() / _M.sum()) == pytest.approx(1.0, abs=1e-12)  # no scale
    assert norm[0, 0].item() == pytest.approx(1.0 / mean, abs=1e-12)
    assert not const.requires_grad and not norm.requires_grad


def test_batch_schemes_ignore_padding_values():
    padded = _P.clone()
    padded[1, 2:] = 0.99  # changes only masked-out positions
    for scheme in ("const", "tr_norm"):
        a, b = token_weights(_P, scheme, mask=_M), token_weights(padded, scheme, mask=_M)
        assert torch.allclose(a[_M.bool()], b[_M.bool()])


@pytest.mark.parametrize("scheme", ["const", "tr_norm"])
def test_batch_schemes_need_a_mask(scheme):
    with pytest.raises(ValueError, match="mask"):
        token_weights(_P, scheme)
    with pytest.raises(ValueError, match="mask"):
        token_weights(_P, scheme, mask=torch.ones(3))
    with pytest.raises(ValueError, match="mask"):
        token_weights(_P, scheme, mask=torch.zeros_like(_M))


def test_batch_scheme_weight_ranges():
    assert weight_range(scheme="const") == (1.0, 1.4)
    assert weight_range(scheme="tr_norm") == pytest.approx((1 / 1.4, 1.4))


def test_config_and_toy_accept_batch_schemes():
    from trgrpo import TRGRPOConfig
    from trgrpo.runs import toy_grid

    for scheme in ("const", "tr_norm"):
        cfg = TRGRPOConfig(output_dir="/tmp/x", weight_scheme=scheme, use_cpu=True, report_to="none")
        assert cfg.weight_scheme == scheme
        spec = toy_grid.toy_spec(scheme, 3, placement="surrogate")
        assert spec["name"] == f"addition-micro-{scheme}-surrogate-seed3"


# ---------------------------------------------------------------- WeightParams: one object for Eq. 11's parameters


def test_weight_params_and_keywords_give_the_same_weights():
    p = torch.rand(300, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    for fields in ({}, dict(tau=3.0, tau_mode="divide"), dict(alpha=1.5, mu=0.1, lower=0.8, upper=1.2)):
        for scheme in ("tr", "reverse", "equal"):
            params = WeightParams(scheme=scheme, **fields)
            assert torch.equal(token_weights(p, **vars(params)), token_weights(p, scheme, **fields))
            assert weight_range(**vars(params)) == weight_range(scheme=scheme, **fields)


def test_weight_params_replace():
    params = WeightParams(scheme="reverse", tau=3.0)
    assert params.replace(tau=4.0) == WeightParams(scheme="reverse", tau=4.0) and params.tau == 3.0
    with pytest.raises(ValueError, match="upper"):  # 2 - w must stay > 0
        params.replace(upper=2.0)
    with pytest.raises(ValueError, match="^taus is not a known field"):  # pydantic: a ValueError, was a TypeError
        params.replace(taus=3.0)
    with pytest.raises(ValueError, match="^taus is not a known field"):
        token_weights(torch.rand(3), taus=3.0)
    with pytest.raises(ValueError, match=r"^lower must be <= upper"):
        WeightParams(lower=1.2, upper=1.1)


@pytest.mark.parametrize(
    "kw, field",
    [(dict(tau="9"), "tau"), (dict(alpha=True), "alpha"), (dict(upper=1e308), "upper"), (dict(tau_mode=None), "tau")],
)
def test_weight_params_and_token_weights_name_the_field(kw, field):
    with pytest.raises(ValueError, match=rf"^{field}"):
        WeightParams(**kw)
    with pytest.raises(ValueError, match=rf"^{field}"):
        token_weights(torch.tensor([0.5]), "tr", **kw)
