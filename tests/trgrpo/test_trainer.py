"""TRGRPOTrainer on TRL's GRPOTrainer: equal weights reproduce TRL's GRPO; tr weights change the gradient."""

from __future__ import annotations

import math
import types
from collections import defaultdict

import pytest
import torch
from datasets import Dataset
from transformers import AutoTokenizer

from trgrpo import TRGRPOConfig, TRGRPOTrainer
from trgrpo.loss import METRIC_KEYS
from trgrpo.weights import WeightParams, token_weights

PROMPTS = [f"Count to {i}:" for i in range(8)]


def ids_reward(completions, completion_ids, **kwargs):
    """A deterministic reward with spread inside each group (tests only)."""
    return [float(sum(ids) % 7) for ids in completion_ids]


def common(tmp_path, **kw):
    base = dict(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=12,
        max_steps=3,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        seed=42,
        save_strategy="no",
        learning_rate=5e-3,
        beta=0.04,
        epsilon=0.2,
        epsilon_high=0.24,
        loss_type="dapo",
        use_bias_correction_kl=False,
        temperature=1.0,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    base.update(kw)
    return base


def train(trainer_cls, config, model_dir):
    ds = Dataset.from_dict({"prompt": PROMPTS})
    trainer = trainer_cls(model=model_dir, reward_funcs=ids_reward, args=config, train_dataset=ds)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    return trainer, logs


CLIP_KEYS = ("clip_ratio/low_mean", "clip_ratio/low_min", "clip_ratio/high_mean", "clip_ratio/high_max")


def assert_same_steps(ours, theirs, n_steps, keys=()):
    """Our log equals TRL's step by step: same rollouts, loss, grad-norm, KL and the given keys."""
    assert len(ours) == len(theirs) == n_steps
    for a, b in zip(ours, theirs):
        assert a.get("reward") == b.get("reward")  # identical rollouts (none logged on a reused batch)
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-6, abs=1e-9)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5)
        for key in ("kl", *keys):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-9), key
    assert any(h["grad_norm"] > 0 for h in ours)
    assert ours[0]["tr/weight_mean"] == 1.0


def test_equal_weights_reproduce_trl_grpo(tiny_model_dir, tmp_path):
    from trl import GRPOConfig, GRPOTrainer

    _, ours = train(TRGRPOTrainer, TRGRPOConfig(**common(tmp_path / "a"), weight_scheme="equal"), tiny_model_dir)
    _, theirs = train(GRPOTrainer, GRPOConfig(**common(tmp_path / "b")), tiny_model_dir)
    assert_same_steps(ours, theirs, 3, CLIP_KEYS)


def test_bias_corrected_kl_matches_trl_at_equal_weights(tiny_model_dir, tmp_path):
    """use_bias_correction_kl: the k3 KL times the ratio r, as TRL. Two iterations on one batch: the second is
    off-policy (r != 1, some tokens clipped), so the clip-ratio extremes are compared where they are not all 0."""
    from trl import GRPOConfig, GRPOTrainer

    kw = dict(max_steps=2, num_iterations=2, use_bias_correction_kl=True, beta=0.5, learning_rate=2e-2)
    _, ours = train(TRGRPOTrainer, TRGRPOConfig(**common(tmp_path / "a", **kw), weight_scheme="equal"), tiny_model_dir)
    _, theirs = train(GRPOTrainer, GRPOConfig(**common(tmp_path / "b", **kw)), tiny_model_dir)
    assert_same_steps(ours, theirs, 2, CLIP_KEYS)
    assert ours[1]["clip_ratio/high_max"] > 0 and ours[1]["kl"] > 0


@pytest.fixture(scope="module")
def tiny_moe_dir(tiny_model_dir, tmp_path_factory):
    """A tiny Qwen3 mixture-of-experts model with the tiny Llama's tokenizer (router aux loss weighted 0.1)."""
    from transformers import AutoTokenizer, Qwen3MoeConfig, Qwen3MoeForCausalLM

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    torch.manual_seed(0)
    cfg = Qwen3MoeConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_experts=4,
        num_experts_per_tok=2, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, head_dim=16,
        router_aux_loss_coef=0.1, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id, tie_word_embeddings=True,
    )  # fmt: skip
    path = tmp_path_factory.mktemp("tiny-qwen3-moe")
    Qwen3MoeForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.mark.slow  # ~7 s on 2 busy cores; the dense model's exact match is in the default tier
def test_equal_weights_reproduce_trl_grpo_on_a_moe_model(tiny_moe_dir, tmp_path):
    """TRL adds router_aux_loss_coef x the router's load-balancing loss and logs it; so must we."""
    from trl import GRPOConfig, GRPOTrainer

    kw = dict(max_steps=1)
    _, ours = train(TRGRPOTrainer, TRGRPOConfig(**common(tmp_path / "a", **kw), weight_scheme="equal"), tiny_moe_dir)
    _, theirs = train(GRPOTrainer, GRPOConfig(**common(tmp_path / "b", **kw)), tiny_moe_dir)
    assert_same_steps(ours, theirs, 1, ("aux_loss",))
    assert ours[0]["aux_loss"] > 0


def test_trainer_without_args_builds_the_paper_default_config(tiny_model_dir, tmp_path, monkeypatch):
    """As TRL: no args gives a default config named after the model, here TRGRPOConfig with the paper's defaults."""
    import transformers.training_args

    # TRL's default config asks for bf16, which a CPU-only machine refuses; pretend a bf16 GPU (nothing trains here)
    monkeypatch.setattr(transformers.training_args, "is_torch_bf16_gpu_available", lambda: True)
    monkeypatch.chdir(tmp_path)
    trainer = TRGRPOTrainer(
        model=tiny_model_dir, reward_funcs=ids_reward, train_dataset=Dataset.from_dict({"prompt": PROMPTS})
    )
    args = trainer.args
    assert type(args) is TRGRPOConfig and args.output_dir == "tiny-llama0-TR-GRPO"
    assert args.to_dict() == TRGRPOConfig(output_dir="tiny-llama0-TR-GRPO").to_dict()
    assert (args.weight_scheme, args.beta, args.epsilon_high, args.learning_rate) == ("tr", 0.001, 0.24, 1e-6)


def test_image_inputs_reach_the_log_prob_call_as_in_trl(tiny_model_dir, tmp_path):
    """Vision-language batches: pixel_values, image_grid_thw, ... go to the log-prob call exactly as TRL passes them."""
    import inspect

    from trl import GRPOTrainer

    params = list(inspect.signature(GRPOTrainer._get_per_token_logps_and_entropies).parameters)
    image_inputs = params[params.index("compute_aux_loss") + 1 :]  # pixel_values, image_grid_thw, ...
    trainer = TRGRPOTrainer(
        model=tiny_model_dir,
        reward_funcs=ids_reward,
        args=TRGRPOConfig(**common(tmp_path), weight_scheme="equal"),
        train_dataset=Dataset.from_dict({"prompt": PROMPTS}),
    )
    calls = []

    def logps_and_entropies(model, input_ids, attention_mask, logits_to_keep, **kwargs):
        calls.append(kwargs)
        logps = torch.full((input_ids.size(0), logits_to_keep), -1.0, requires_grad=True)
        return logps, torch.zeros_like(logps), None

    trainer._get_per_token_logps_and_entropies = logps_and_entropies
    images = {key: torch.rand(3) for key in image_inputs} | {"num_images": [1, 1]}
    inputs = {
        "prompt_ids": torch.ones(2, 2, dtype=torch.long),
        "prompt_mask": torch.ones(2, 2, dtype=torch.long),
        "completion_ids": torch.ones(2, 3, dtype=torch.long),
        "completion_mask": torch.ones(2, 3, dtype=torch.long),
        "advantages": torch.tensor([1.0, -1.0]),
        "num_items_in_batch": torch.tensor(6.0),
        "ref_per_token_logps": torch.full((2, 3), -1.1),
        **images,
    }
    trainer._compute_loss(trainer.model, inputs)
    GRPOTrainer._compute_loss(trainer, trainer.model, inputs)
    ours, theirs = calls
    assert ours.keys() == theirs.keys() and all(ours[k] is theirs[k] for k in ours)
    assert all(ours[key] is images[key] for key in ("pixel_values", "image_grid_thw", "mm_token_type_ids"))


def test_tr_weights_change_the_gradient(tiny_model_dir, tmp_path):
    cfg = dict(max_steps=1)
    _, eq = train(TRGRPOTrainer, TRGRPOConfig(**common(tmp_path / "a", **cfg), weight_scheme="equal"), tiny_model_dir)
    _, tr = train(
        TRGRPOTrainer,
        TRGRPOConfig(
            **common(tmp_path / "b", **cfg),
            weight_scheme="tr",
            weight_tau=3e4,
            weight_lower=0.5,
            weight_placement="surrogate",
        ),
        tiny_model_dir,
    )
    assert eq[0]["reward"] == tr[0]["reward"]  # same rollouts: the weight does not touch sampling
    assert tr[0]["tr/weight_min"] < tr[0]["tr/weight_max"]
    assert not math.isclose(eq[0]["grad_norm"], tr[0]["grad_norm"], rel_tol=1e-4)


def test_eq11_shares_are_logged_whatever_the_scheme(tiny_model_dir, tmp_path):
    """Where TR can act: the shares of tokens with Eq. 11's weight at L, between, at U are TR's, for every arm."""
    keys = ("tr/eq11_at_lower", "tr/eq11_between", "tr/eq11_at_upper")
    runs = {}
    for scheme in ("equal", "tr"):
        cfg = TRGRPOConfig(**common(tmp_path / scheme, max_steps=1), weight_scheme=scheme, weight_tau=1e5)
        runs[scheme] = train(TRGRPOTrainer, cfg, tiny_model_dir)[1][0]
    assert [runs["equal"][k] for k in keys] == pytest.approx([runs["tr"][k] for k in keys])  # same rollouts
    assert all(0.0 <= runs["equal"][k] <= 1.0 for k in keys) and sum(runs["equal"][k] for k in keys) == pytest.approx(1)
    # tau = 1e5 puts this random model's tiny probabilities (~2e-5) on Eq. 11's slope
    assert runs["equal"]["tr/eq11_between"] > 0.5 and runs["equal"]["tr/weight_mean"] == 1.0


def test_random_scheme_runs_and_logs(tiny_model_dir, tmp_path):
    _, logs = train(
        TRGRPOTrainer, TRGRPOConfig(**common(tmp_path, max_steps=1), weight_scheme="random"), tiny_model_dir
    )
    assert 0.5 <= logs[0]["tr/weight_min"] <= logs[0]["tr/weight_max"] <= 1.5
    for key in (
        "tr/weight_mean",
        "tr/zero_grad_frac_pos_adv",
        "tr/zero_grad_frac_neg_adv",
        "tr/kl_mean",
        "tr/weight_at_upper",
        "tr/eq11_between",
        "grad_norm",
        "reward",
        "kl",
        "clip_ratio/region_mean",
    ):
        assert key in logs[0]


def test_paper_defaults():
    cfg = TRGRPOConfig(output_dir="/tmp/trgrpo-defaults", report_to="none", use_cpu=True)
    assert (cfg.beta, cfg.epsilon, cfg.epsilon_high, cfg.learning_rate) == (0.001, 0.2, 0.24, 1e-6)
    assert cfg.num_generations == 8 and cfg.loss_type == "dapo" and cfg.use_bias_correction_kl is False
    assert (cfg.weight_scheme, cfg.weight_alpha, cfg.weight_mu, cfg.weight_tau) == ("tr", 2.0, 0.25, 9.0)
    assert (cfg.weight_lower, cfg.weight_upper, cfg.weight_tau_mode) == (1.0, 1.4, "scale")
    assert (cfg.weight_placement, cfg.kl_weighting) == ("ratio", "eq10")
    assert cfg.weight_params == WeightParams()  # the flat weight_* fields as one object


def test_config_weight_params_follow_the_flat_fields():
    cfg = TRGRPOConfig(
        output_dir="/tmp/trgrpo-wp", report_to="none", use_cpu=True, weight_scheme="reverse", weight_alpha=1.5,
        weight_mu=0.1, weight_tau=3.0, weight_lower=0.9, weight_upper=1.3, weight_tau_mode="divide",
    )  # fmt: skip
    expected = WeightParams(scheme="reverse", alpha=1.5, mu=0.1, tau=3.0, lower=0.9, upper=1.3, tau_mode="divide")
    assert cfg.weight_params == expected
    p = torch.rand(50, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert torch.equal(token_weights(p, **vars(cfg.weight_params)), token_weights(p, **vars(expected)))


@pytest.mark.parametrize(
    "kw,field",
    [
        (dict(weight_tau=0.0), "weight_tau"),
        (dict(weight_lower=0.0), "weight_lower"),
        (dict(weight_lower=1.5, weight_upper=1.2), "weight_lower"),
        (dict(weight_alpha=-1.0), "weight_alpha"),
        (dict(weight_mu=0.6), "weight_mu"),
        (dict(weight_scheme="foo"), "weight_scheme"),
        (dict(weight_tau_mode="x"), "weight_tau_mode"),
        (dict(weight_placement="x"), "weight_placement"),
        (dict(kl_weighting="x"), "kl_weighting"),
        (dict(loss_type="grpo"), "loss_type"),
    ],
)
def test_bad_config_fails_before_any_model_loads(kw, field):
    with pytest.raises(ValueError, match=field):
        TRGRPOConfig(output_dir="/tmp/trgrpo-bad", report_to="none", use_cpu=True, **kw)


def test_trainer_needs_trgrpo_config(tiny_model_dir, tmp_path):
    from trl import GRPOConfig

    with pytest.raises(TypeError, match="TRGRPOConfig"):
        TRGRPOTrainer(
            model=tiny_model_dir,
            reward_funcs=ids_reward,
            args=GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none"),
            train_dataset=Dataset.from_dict({"prompt": PROMPTS}),
        )


def test_weight_generator_leaves_global_rng(tiny_model_dir, tmp_path):
    torch.manual_seed(0)
    _ = torch.rand(1)
    # constructing the trainer draws nothing from the global RNG for the weights
    state = torch.get_rng_state()
    g = torch.Generator().manual_seed(1)
    from trgrpo import token_weights

    token_weights(torch.rand(5, generator=g), "random", generator=g)
    assert torch.equal(state, torch.get_rng_state())


@pytest.mark.parametrize("scheme", ["const", "tr_norm"])
def test_batch_schemes_train_and_log_their_mean(scheme, tiny_model_dir, tmp_path):
    """const: every weight equals the batch mean (std 0, mean in [L, U]); tr_norm: weights with mean 1."""
    _, logs = train(
        TRGRPOTrainer,
        TRGRPOConfig(**common(tmp_path, max_steps=1), weight_scheme=scheme, weight_placement="surrogate"),
        tiny_model_dir,
    )
    log = logs[0]
    if scheme == "const":
        assert log["tr/weight_std"] == pytest.approx(0.0, abs=1e-6)
        assert 1.0 <= log["tr/weight_mean"] <= 1.4
    else:
        assert log["tr/weight_mean"] == pytest.approx(1.0, abs=1e-5)
        assert log["tr/weight_min"] >= 1 / 1.4 - 1e-6 and log["tr/weight_max"] <= 1.4 + 1e-6
    assert math.isfinite(log["loss"])


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


# From test_trust_trainer.py: TRGRPOTrainer with mask_truncated_completions=True (issue "trust", finding 4): a micro-
# batch whose completions are all truncated gives TRL's own result (loss 0, no update) instead of stopping the run.


def run(trainer_cls, config_cls, tmp_path, model_dir, **kw):
    tok = AutoTokenizer.from_pretrained(model_dir)
    never_end = sorted({t for t in (tok.eos_token_id, tok.pad_token_id) if t is not None})
    config = config_cls(
        **common(tmp_path, max_steps=2, max_completion_length=3),
        mask_truncated_completions=True,
        generation_kwargs={"suppress_tokens": never_end},  # every completion runs into the length limit
        **kw,
    )
    trainer = trainer_cls(
        model=model_dir, reward_funcs=ids_reward, args=config, train_dataset=Dataset.from_dict({"prompt": PROMPTS})
    )
    trainer.train()
    return [h for h in trainer.state.log_history if "loss" in h]


def test_all_truncated_micro_batch_matches_trl(tiny_model_dir, tmp_path):
    from trl import GRPOConfig, GRPOTrainer

    ours = run(TRGRPOTrainer, TRGRPOConfig, tmp_path / "ours", tiny_model_dir, weight_scheme="tr")
    theirs = run(GRPOTrainer, GRPOConfig, tmp_path / "trl", tiny_model_dir)
    assert len(ours) == len(theirs) == 2
    for a, b in zip(ours, theirs):
        assert a["completions/clipped_ratio"] == b["completions/clipped_ratio"] == 1.0
        assert a["loss"] == b["loss"] == 0.0
        assert a["grad_norm"] == pytest.approx(b["grad_norm"]) and a["grad_norm"] == 0.0
        assert a["tr/weight_mean"] == 0.0  # no valid token: the diagnostics log zeros, as TRL's own metrics do


def test_weight_rng_file_is_per_process_under_several_processes():
    from types import SimpleNamespace

    from trgrpo.trainer import weight_rng_file

    assert weight_rng_file(SimpleNamespace(world_size=1, process_index=0)) == "trgrpo_weight_rng.pt"
    names = {weight_rng_file(SimpleNamespace(world_size=4, process_index=r)) for r in range(4)}
    assert len(names) == 4 and "trgrpo_weight_rng_3.pt" in names


def test_clip_ratio_extremes_are_taken_over_every_process():
    """Defect 10: ``clip_ratio/low_min`` and ``high_max`` over the completions of both processes (as TRL gathers
    them), not over the first process's rows of a gathered (2, B) tensor."""
    peer = torch.tensor([[0.0, 1.0], [0.0, 1.0], [0.0, 1.0]])  # the other process: no low clip, all high clipped

    class TwoRanks:
        device = torch.device("cpu")

        def reduce(self, t, reduction="sum"):
            return t

        def gather(self, t):
            return torch.cat([t, peer if t.shape == peer.shape else t])

    fake = types.SimpleNamespace(
        _metrics=defaultdict(lambda: defaultdict(list)),
        accelerator=TwoRanks(),
        beta=0.0,
        epsilon_low=0.2,
        epsilon_high=0.28,
        args=types.SimpleNamespace(use_bias_correction_kl=False, weight_params=WeightParams()),
    )
    old = torch.zeros(3, 2)
    logps = torch.log(torch.tensor([[0.5, 1.0]] * 3))  # ratio 0.5 on one token of two, negative advantage: low
    inputs = {"advantages": -torch.ones(3)}
    mask = torch.ones(3, 2)
    metrics = dict.fromkeys(METRIC_KEYS, 0.0)
    TRGRPOTrainer._log_tr_metrics(fake, "train", metrics, logps, old, inputs, mask, torch.zeros(3, 2), mask * 0.5)
    store = fake._metrics["train"]
    assert store["clip_ratio/low_min"] == [0.0] and store["clip_ratio/high_max"] == [pytest.approx(1.0)]
