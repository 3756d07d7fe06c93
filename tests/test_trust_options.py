"""Bad options are refused at construction, naming the field the user set (issue "trust", finding 7)."""

from __future__ import annotations

import math

import pytest
import torch

from trgrpo.loss import tr_grpo_loss
from trgrpo.runs.spec import RunSpec
from trgrpo.trainer import TRGRPOConfig
from trgrpo.weights import WeightParams, token_weights


def cfg(tmp_path, **kw):
    return TRGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", **kw)


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(weight_tau="9"), "weight_tau"),  # passed, then failed in torch with an unrelated TypeError
        (dict(weight_lower="1.0"), "weight_lower"),
        (dict(weight_alpha=True), "weight_alpha"),
        (dict(weight_upper=1e308), "weight_upper"),  # inf in the float32 weights
        (dict(weight_mu=float("nan")), "weight_mu"),
        (dict(weight_tau=float("inf")), "weight_tau"),
        (dict(weight_tau_mode=3), "weight_tau_mode"),
        (dict(epsilon=-0.1), "epsilon"),
        (dict(epsilon=1.5), "epsilon"),
        (dict(epsilon_high=float("nan")), "epsilon_high"),
        (dict(beta=True), "beta"),
        (dict(learning_rate=float("nan")), "learning_rate"),
        (dict(temperature=-1.0), "temperature"),
        (dict(temperature=0.0), "temperature"),
        (dict(top_p=1.5), "top_p"),
    ],
)
def test_trgrpo_config_refuses_bad_numbers_naming_the_field(tmp_path, kw, field):
    with pytest.raises(ValueError, match=rf"^{field} must"):
        cfg(tmp_path, **kw)


def test_epsilon_errors_name_epsilon_not_eps_low(tmp_path):
    with pytest.raises(ValueError) as err:
        cfg(tmp_path, epsilon=2.0)
    assert "eps_low" not in str(err.value).split(" must")[0] and str(err.value).startswith("epsilon must")
    with pytest.raises(ValueError, match="^epsilon_high must"):
        cfg(tmp_path, epsilon_high=-1.0)


def test_good_config_still_builds(tmp_path):
    c = cfg(tmp_path, weight_tau=9, weight_upper=1.4, learning_rate=1e-6)
    assert c.weight_tau == 9 and c.epsilon_high == 0.24


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(tau="ten"), "tau"),  # "Unknown format code 'g'" before
        (dict(learning_rate="1e-6x"), "learning_rate"),
        (dict(learning_rate=float("nan")), "learning_rate"),
        (dict(learning_rate=0.0), "learning_rate"),
        (dict(temperature=-1.0), "temperature"),
        (dict(alpha=True), "alpha"),
        (dict(upper=1e308), "upper"),
        (dict(epsilon=-0.2), "epsilon"),
        (dict(epsilon_high="0.28 "), "epsilon_high"),
        (dict(steps=True), "steps"),
        (dict(seed=-1), "seed"),
        (dict(seed=1.5), "seed"),
        (dict(max_eval_tokens=0), "max_eval_tokens"),
        (dict(bf16="yes"), "bf16"),
        (dict(model=""), "model"),
        (dict(task_options=[1]), "task_options"),
    ],
)
def test_runspec_refuses_bad_values_naming_the_field(kw, field):
    with pytest.raises(ValueError, match=rf"^{field} must"):
        RunSpec(**kw)


def test_yaml_scientific_notation_is_read_as_numbers():
    yaml = pytest.importorskip("yaml")
    data = yaml.safe_load("tau: 1e1\nlearning_rate: 1e-6\nbeta: 1.0e-3\nsteps: 2e1\nseed: 3\n")
    assert data["tau"] == "1e1" and data["learning_rate"] == "1e-6"  # PyYAML (YAML 1.1) leaves these as strings
    spec = RunSpec.from_dict(data)
    assert spec.tau == 10.0 and spec.learning_rate == 1e-6 and spec.beta == 1e-3 and spec.steps == 20
    assert isinstance(spec.steps, int) and spec.name.endswith("tau10-scale-L1-U1.4-seed3")
    assert RunSpec(tau="1e1") == RunSpec(tau=10.0)  # number text is a number in Python too (it was refused)
    with pytest.raises(ValueError, match="^steps must"):
        RunSpec.from_dict({"steps": "2.5e0"})
    with pytest.raises(ValueError, match="^tau must"):
        RunSpec.from_dict({"tau": "ten"})


@pytest.mark.parametrize(
    "kw, field",
    [(dict(tau="9"), "tau"), (dict(alpha=True), "alpha"), (dict(upper=1e308), "upper"), (dict(tau_mode=None), "tau")],
)
def test_weight_params_and_token_weights_name_the_field(kw, field):
    with pytest.raises(ValueError, match=rf"^{field}"):
        WeightParams(**kw)
    with pytest.raises(ValueError, match=rf"^{field}"):
        token_weights(torch.tensor([0.5]), "tr", **kw)


# --------------------------------------------------------------------------------------------------
# tr_grpo_loss: values, not only shapes
# --------------------------------------------------------------------------------------------------


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
