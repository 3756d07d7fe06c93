"""TR-GRPO on TRL's ``GRPOTrainer``: only ``_compute_loss`` changes, to :func:`trgrpo.loss.tr_grpo_loss` with the
weights of :func:`trgrpo.weights.token_weights` (Eq. 9-12). ``weight_scheme="equal"`` is TRL's GRPO loss (tested).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import torch
from accelerate.utils import set_seed
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import get_config_model_id, nanmax, nanmin

from trgrpo.loss import METRIC_KEYS, KLWeighting, LossOptions, Placement, kl_term, tr_grpo_loss
from trgrpo.paper import BETA, EPS_HIGH, EPS_LOW
from trgrpo.weights import DEFAULTS, TAU_MODES, WeightParams, token_weights, tr_weight

SUPPORTED_LOSS_TYPES = ("dapo", "bnpo")  # token-level normalisation (Eq. 5)
# vision-language inputs TRL's GRPOTrainer forwards from the batch to the log-prob call (its _compute_loss)
IMAGE_INPUTS = tuple(
    "pixel_values image_grid_thw num_images pixel_attention_mask spatial_shapes num_tiles image_sizes token_type_ids "
    "mm_token_type_ids image_position_ids".split()
)
# numeric TRL fields a TR-GRPO run sets that TRL 1.16 / transformers 5.17 do not check (TRL checks num_generations):
# name -> (type, rule, check)
TRL_NUMBERS = {
    "learning_rate": (float, ">= 0", lambda v: v >= 0),
    "temperature": (float, "> 0", lambda v: v > 0),
    "top_p": (float, "in (0, 1]", lambda v: 0 < v <= 1),
    "max_completion_length": (int, ">= 1", lambda v: v >= 1),
    "per_device_train_batch_size": (int, ">= 1", lambda v: v >= 1),
    "gradient_accumulation_steps": (int, ">= 1", lambda v: v >= 1),
}
# TRL options whose loss TR-GRPO does not implement: name -> the values allowed
UNSUPPORTED = {
    "importance_sampling_level": ("token",),
    "top_entropy_quantile": (1.0,),
    "entropy_coef": (0.0,),
    "use_adaptive_entropy": (False,),
    "delta": (None,),
}


@dataclass
class TRGRPOConfig(GRPOConfig):
    """TRL's ``GRPOConfig`` plus the token-weight options, with the paper's defaults where TRL's differ (Table 6,
    App. B.2): beta, epsilon, epsilon_high, ``use_bias_correction_kl=False``, ``loss_type="dapo"``."""

    weight_scheme: str = field(default=DEFAULTS.scheme, metadata={"help": "Token weight scheme (weights.SCHEMES)."})
    weight_alpha: float = field(default=DEFAULTS.alpha, metadata={"help": "alpha of Eq. 11."})
    weight_mu: float = field(default=DEFAULTS.mu, metadata={"help": "mu of Eq. 11 (< 0.5)."})
    weight_tau: float = field(default=DEFAULTS.tau, metadata={"help": "tau of Eq. 11 (> 0)."})
    weight_lower: float = field(default=DEFAULTS.lower, metadata={"help": "Lower clip L of Eq. 11 (> 0)."})
    weight_upper: float = field(default=DEFAULTS.upper, metadata={"help": "Upper clip U of Eq. 11 (>= L)."})
    weight_tau_mode: str = field(
        default=DEFAULTS.tau_mode, metadata={"help": f"{TAU_MODES}: sigmoid(tau*p), sigmoid(p/tau)."}
    )
    weight_placement: Placement = field(default="ratio", metadata={"help": "w inside the clip or outside."})
    kl_weighting: KLWeighting = field(default="eq10", metadata={"help": "Eq. 10, w times Eq. 6, Eq. 6."})
    beta: float = field(default=BETA, metadata={"help": "KL coefficient beta (Table 6)."})
    epsilon: float = field(default=EPS_LOW, metadata={"help": "Lower clip eps_l (Table 6)."})
    epsilon_high: float | None = field(default=EPS_HIGH, metadata={"help": "Upper clip eps_h (Table 6)."})
    use_bias_correction_kl: bool = field(default=False, metadata={"help": "True: the KL times the ratio r, as TRL."})
    loss_type: str = field(default="dapo", metadata={"help": f"Token-level normalisation: {SUPPORTED_LOSS_TYPES}."})

    def __post_init__(self) -> None:
        try:
            _ = self.weight_params  # WeightParams checks Eq. 11's fields; its messages start with the field name
        except ValueError as e:
            raise ValueError(f"weight_{e}") from None
        eps_high = self.epsilon if self.epsilon_high is None else self.epsilon_high
        try:
            LossOptions(
                placement=self.weight_placement,
                kl_weighting=self.kl_weighting,
                beta=self.beta,
                eps_low=self.epsilon,
                eps_high=eps_high,
            )
        except ValueError as e:  # its field named as this config names it
            name, _, rest = str(e).partition(" ")
            high = "epsilon" if self.epsilon_high is None else "epsilon_high"
            name = {"placement": "weight_placement", "eps_low": "epsilon", "eps_high": high}.get(name, name)
            raise ValueError(f"{name} {rest}") from None
        for name, (kind, rule, ok) in TRL_NUMBERS.items():
            v = getattr(self, name)
            if v is None and name == "max_completion_length":  # TRL's default applies
                continue
            if isinstance(v, bool) or not isinstance(v, (kind, int)) or not math.isfinite(v):
                raise ValueError(f"{name} must be a finite {kind.__name__}, got {v!r} ({type(v).__name__})")
            if not ok(v):
                raise ValueError(f"{name} must be {rule}, got {v!r}")
        for name, allowed in UNSUPPORTED.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}={getattr(self, name)!r} is not supported by TR-GRPO (allowed: {allowed})")
        if self.loss_type not in SUPPORTED_LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {SUPPORTED_LOSS_TYPES} (Eq. 5), got {self.loss_type!r}")
        super().__post_init__()

    @property
    def weight_params(self) -> WeightParams:
        """The flat ``weight_*`` fields (flat for TRL's command line and YAML) as one ``WeightParams``."""
        return WeightParams(**{f: getattr(self, f"weight_{f}") for f in WeightParams.model_fields})


def weight_rng_file(args: Any) -> str:
    """The checkpoint file of the random-weight generator's state, one per process (as HF's ``rng_state_{rank}``)."""
    return "trgrpo_weight_rng.pt" if args.world_size <= 1 else f"trgrpo_weight_rng_{args.process_index}.pt"


def _load_to_indexed_cpu() -> None:
    """Several CPU processes (torchrun, gloo): accelerate's device is ``cpu:<rank>`` and transformers resumes the
    optimizer with ``torch.load(map_location=args.device)``, which torch cannot place ("don't know how to restore
    data location ... cpu:0"); teach torch that ``cpu:N`` is the CPU."""
    from torch import serialization

    if not getattr(serialization, "_trgrpo_indexed_cpu", False):
        serialization.register_package(11, lambda obj: None, lambda obj, loc: obj if loc.startswith("cpu:") else None)
        serialization._trgrpo_indexed_cpu = True


class TRGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose loss is :func:`trgrpo.loss.tr_grpo_loss` with Eq. 11 token weights."""

    def __init__(self, model, reward_funcs=None, args: TRGRPOConfig | None = None, *rest, **kwargs) -> None:
        if args is None:  # as TRL: a default config named after the model, here with the paper's defaults
            model_name = model if isinstance(model, str) else get_config_model_id(model.config)
            args = TRGRPOConfig(output_dir=f"{model_name.split('/')[-1]}-TR-GRPO")
        if not isinstance(args, TRGRPOConfig):
            raise TypeError("TRGRPOTrainer needs args=TRGRPOConfig(...) (the token-weight options live there)")
        super().__init__(model, reward_funcs, args, *rest, **kwargs)
        if args.use_vllm:  # TRL seeds vLLM with the process rank, which resets the RNG the rollouts sample from:
            # the run's seed again, one stream per process as TRL's set_seed(seed, device_specific=True)
            set_seed(int(args.seed) + self.accelerator.process_index)
        if self.accelerator.device.type == "cpu" and self.accelerator.device.index is not None:
            _load_to_indexed_cpu()
        # the random scheme's own generator: the global RNG samples the rollouts
        self._weight_generator = torch.Generator().manual_seed(int(args.seed) + 7919 * self.accelerator.process_index)

    def _save_rng_state(self, output_dir):
        super()._save_rng_state(output_dir)
        torch.save(self._weight_generator.get_state(), os.path.join(output_dir, weight_rng_file(self.args)))

    def _load_rng_state(self, checkpoint):
        super()._load_rng_state(checkpoint)
        if checkpoint is not None:
            path = os.path.join(checkpoint, weight_rng_file(self.args))
            if os.path.exists(path):
                self._weight_generator.set_state(torch.load(path))

    def _compute_loss(self, model, inputs):
        args: TRGRPOConfig = self.args
        completion_mask = inputs["completion_mask"]
        # tool output never gets a gradient (agentic search): keep TRL's tool mask
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
        per_token_logps, entropies, aux_loss = self._get_per_token_logps_and_entropies(
            model,
            torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1),
            torch.cat([inputs["prompt_mask"], completion_mask], dim=1),
            inputs["completion_ids"].size(1),
            compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled,  # MoE router load balancing, set up by TRL
            **{key: inputs.get(key) for key in IMAGE_INPUTS},
        )
        old = inputs.get("old_per_token_logps")
        old = per_token_logps.detach() if old is None else old

        probs = per_token_logps.detach().exp().clamp(0.0, 1.0)  # Eq. 11: sg[pi]
        weights = token_weights(probs, **vars(args.weight_params), generator=self._weight_generator, mask=mask)

        # factors TRL applies to the policy term only (off-policy sequence mask, vLLM IS correction)
        policy_scale = None
        if self.off_policy_mask_threshold is not None:
            adv = inputs["advantages"]
            adv = adv.unsqueeze(1) if adv.dim() == 1 else adv
            policy_scale = self.get_off_policy_mask(
                advantages=adv,
                per_token_logps=per_token_logps,
                sampling_per_token_logps=inputs.get("sampling_per_token_logps", old),
                mask=mask,
                off_policy_threshold=self.off_policy_mask_threshold,
            )
        if self.use_vllm and self.vllm_importance_sampling_correction:
            is_ratio = inputs["importance_sampling_ratio"]
            policy_scale = is_ratio if policy_scale is None else policy_scale * is_ratio

        mode = "train" if self.model.training else "eval"
        if self.loss_type == "dapo":  # tokens of the whole accumulated global batch (as TRL)
            normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            if mode == "train":
                normalizer = normalizer * self.current_gradient_accumulation_steps / self.args.steps_per_generation
        else:  # "bnpo": tokens of the local batch, then gradient accumulation
            normalizer = mask.sum().clamp(min=1.0)
            if mode == "train":
                normalizer = normalizer * self.current_gradient_accumulation_steps

        if not bool(mask.any()):
            # every completion truncated and masked: TRL's loss is 0 (graph kept), its metrics zeros
            loss, metrics = (per_token_logps * mask).sum(), dict.fromkeys(METRIC_KEYS, 0.0)
        else:
            out = tr_grpo_loss(
                per_token_logps,
                old,
                inputs["advantages"],
                mask,
                weights,
                ref_logps=inputs.get("ref_per_token_logps"),
                beta=self.beta,
                eps_low=self.epsilon_low,
                eps_high=self.epsilon_high,
                placement=args.weight_placement,
                kl_weighting=args.kl_weighting,
                upper=args.weight_upper,
                normalizer=normalizer,
                bias_correction_kl=args.use_bias_correction_kl,
                policy_scale=policy_scale,
            )
            loss, metrics = out.loss, out.metrics
        # as TRL: the MoE router's load-balancing loss, scaled for gradient accumulation
        if self.aux_loss_enabled:
            loss = loss + self.router_aux_loss_coef * aux_loss / (
                self.current_gradient_accumulation_steps if mode == "train" else 1.0
            )
            self._metrics[mode]["aux_loss"].append(self.accelerator.gather_for_metrics(aux_loss).mean().item())
        self._log_tr_metrics(mode, metrics, per_token_logps, old, inputs, mask, entropies, probs)
        return loss

    def _log_tr_metrics(self, mode, metrics, logps, old, inputs, mask, entropies, probs) -> None:
        """TRL's metrics (kl, entropy, clip ratios), the weight diagnostics under ``tr/``, and ``tr/eq11_at_lower``,
        ``_between``, ``_at_upper``: the shares of tokens whose Eq. 11 weight (any scheme) is L, inside, U."""
        store = self._metrics[mode]

        def global_masked_mean(x: torch.Tensor) -> float:
            totals = self.accelerator.reduce(torch.stack([(x * mask).sum(), mask.sum().float()]), reduction="sum")
            return (totals[0] / totals[1].clamp(min=1.0)).item()

        logps = logps.detach()
        ratio = torch.exp(logps - old)
        if self.beta != 0.0:  # TRL's "kl": Eq. 6 (times r if bias-corrected), whatever the weighting
            k3 = kl_term(logps, inputs["ref_per_token_logps"], None, "plain")
            store["kl"].append(global_masked_mean(k3 * ratio if self.args.use_bias_correction_kl else k3))
        store["entropy"].append(global_masked_mean(entropies))
        adv = inputs["advantages"]
        adv = adv.unsqueeze(1) if adv.dim() == 1 else adv
        low = ((ratio < 1 - self.epsilon_low) & (adv < 0)).float()
        high = ((ratio > 1 + self.epsilon_high) & (adv > 0)).float()
        store["clip_ratio/low_mean"].append(global_masked_mean(low))
        store["clip_ratio/high_mean"].append(global_masked_mean(high))
        store["clip_ratio/region_mean"].append(global_masked_mean(torch.maximum(low, high)))
        # per completion, then the min / max over the global batch (NaN for a completion without valid tokens)
        per_completion = torch.stack([low * mask, high * mask], dim=-1).sum(1) / mask.sum(-1, keepdim=True)
        per_completion = self.accelerator.gather(per_completion)  # (completions of every process, 2)
        store["clip_ratio/low_min"].append(nanmin(per_completion[:, 0]).item())
        store["clip_ratio/high_max"].append(nanmax(per_completion[:, 1]).item())
        params = self.args.weight_params
        w = tr_weight(probs, params)  # Eq. 11 whatever the scheme
        at_lower = (w <= params.lower + 1e-6).float()
        at_upper = (w >= params.upper - 1e-6).float() * (1.0 - at_lower)
        for key, share in (("at_lower", at_lower), ("between", 1.0 - at_lower - at_upper), ("at_upper", at_upper)):
            store[f"tr/eq11_{key}"].append(global_masked_mean(share))
        # one gather and one host sync for the weight diagnostics, averaged over processes
        local = torch.tensor([[metrics[k] for k in METRIC_KEYS]], device=self.accelerator.device, dtype=torch.float32)
        for key, value in zip(METRIC_KEYS, self.accelerator.gather(local).mean(dim=0).tolist()):
            store[f"tr/{key}"].append(value)
