"""Token weights of TR-GRPO (paper Section 3, Eq. 11) and the ablation schemes of Table 4.

    w_{i,t} = clip( alpha * [ sigmoid( sg[pi(o_{i,t})] scaled by tau ) - mu ], L, U )       (Eq. 11)

How tau enters is the first of the paper's open readings (docs/design.md, "The three readings"):
  * ``tau_mode="scale"``  -> sigmoid(tau * p)   (default; fits Table 7 and App. B.2 "scaling parameter")
  * ``tau_mode="divide"`` -> sigmoid(p / tau)   (as printed; with tau = 9 every weight is exactly 1)

Ablations (Section 4.3, Table 4): ``"equal"`` (w = 1, plain GRPO), ``"random"`` (uniform on
[0.5, 1.5]), ``"reverse"`` (2 - w).

Controls that split TR's effect into scale and regulation (notebook 03); both are functions of the whole batch,
so they need the ``mask`` of valid tokens (:func:`batch_weights`):
  * ``"const"``   every valid token gets m = mean of the Eq. 11 weights over the batch's valid tokens
                  (TR's overall scale, no regulation between tokens);
  * ``"tr_norm"`` w / m (TR's regulation between tokens, mean 1: no scale).

Extension point: :func:`register_scheme` adds a named scheme ``w = fn(p)`` (e.g. a Lopti-style linear weight
``0.3 p + 0.7``) that every consumer accepts by name, as it accepts the built-ins: :func:`token_weights`,
:func:`validate_weight_params`, :class:`WeightParams`, :class:`trgrpo.TRGRPOConfig` (``weight_scheme``),
:class:`trgrpo.experiment.RunSpec` and the toy grid (:func:`trgrpo.toy.toy_spec`, which runs in this
process).
The registry lives in this process only: register the scheme before building a config, in every process that
trains. Built-in names cannot be overwritten.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

BATCH_SCHEMES = ("const", "tr_norm")  # controls: TR's batch-mean scale alone, TR's regulation alone
SCHEMES = ("tr", "equal", "random", "reverse", *BATCH_SCHEMES)  # built-ins (paper Eq. 11, Table 4, controls)
TAU_MODES = ("scale", "divide")
RANDOM_RANGE = (0.5, 1.5)  # Table 4: "sampled uniformly from [0.5, 1.5]"


# ---------------------------------------------------------------------------------------------------------------
# Registry of user-defined schemes

SchemeFn = Callable[[torch.Tensor], torch.Tensor]
_REGISTRY: dict[str, SchemeFn] = {}
# A scheme name ends up in run names and result file names (trgrpo.toy.toy_spec): keep it a plain identifier.
_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")


def register_scheme(name: str, fn: SchemeFn, *, overwrite: bool = False) -> None:
    """Register a token-weight scheme ``w = fn(p)`` under ``name``, usable wherever a scheme name is accepted.

    ``fn`` gets the detached token probabilities (a copy: changing it in place changes nothing else) and must
    return a tensor of the same shape, finite and > 0 (Eq. 10 takes log w); :func:`token_weights` checks this on
    every call and raises ``ValueError`` naming the scheme otherwise. The Eq. 11 hyperparameters (alpha, mu, tau,
    L, U, tau_mode) are still validated but not passed to ``fn``. ``name``: a letter then up to 63 letters,
    digits or ``_`` (it becomes part of run and file names); built-in names (:data:`SCHEMES`) cannot be
    overwritten, a registered one only with ``overwrite=True``.
    """
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ValueError(
            f"a scheme name must be a str of a letter then up to 63 letters, digits or '_' (it becomes part of run "
            f"and file names), got {name!r}"
        )
    if name in SCHEMES:
        raise ValueError(f"{name!r} is a built-in scheme {SCHEMES} and cannot be overwritten; pick another name")
    if not callable(fn):
        raise TypeError(f"fn must be callable (probs -> weights), got {type(fn).__name__}")
    if name in _REGISTRY and not overwrite and _REGISTRY[name] is not fn:
        raise ValueError(f"scheme {name!r} is already registered; pass overwrite=True to replace it")
    _REGISTRY[name] = fn


def unregister_scheme(name: str) -> None:
    """Remove a scheme added with :func:`register_scheme` (``ValueError`` for built-in or unknown names)."""
    if name in SCHEMES:
        raise ValueError(f"{name!r} is a built-in scheme and cannot be unregistered")
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"no registered scheme {name!r}; registered: {registered_schemes()}")
    del _REGISTRY[name]


def registered_schemes() -> tuple[str, ...]:
    """The names added with :func:`register_scheme`, sorted."""
    return tuple(sorted(_REGISTRY))


def available_schemes() -> tuple[str, ...]:
    """Built-in schemes, then the registered ones: every name :func:`token_weights` accepts now."""
    return SCHEMES + registered_schemes()


def is_registered_scheme(name: str) -> bool:
    return isinstance(name, str) and name in _REGISTRY


@dataclass(frozen=True)
class WeightParams:
    """The hyperparameters of Eq. 11 (paper defaults, App. B.2), validated once, on construction.

    Pass one object wherever the weights are computed: ``token_weights(p, params)``. Variants are copies:
    ``params.replace(tau=3.0)`` (validated again). :attr:`trgrpo.TRGRPOConfig.weight_params` builds one from the
    config's flat ``weight_*`` fields.
    """

    scheme: str = "tr"
    alpha: float = 2.0
    mu: float = 0.25
    tau: float = 9.0
    lower: float = 1.0
    upper: float = 1.4
    tau_mode: str = "scale"

    def __post_init__(self) -> None:
        validate_weight_params(self)

    def replace(self, **fields: Any) -> WeightParams:
        """A copy with ``fields`` changed (``TypeError`` naming an unknown field), validated."""
        _check_field_names(fields)
        return dataclasses.replace(self, **fields)

    def eq11(self) -> dict[str, float | str]:
        """The six Eq. 11 hyperparameters (every field but ``scheme``) as a dict, e.g. for a record."""
        return {f: getattr(self, f) for f in EQ11_FIELDS}


WEIGHT_FIELDS = tuple(f.name for f in dataclasses.fields(WeightParams))  # scheme + the six of Eq. 11
EQ11_FIELDS = WEIGHT_FIELDS[1:]  # alpha, mu, tau, lower, upper, tau_mode
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(WeightParams)}


def _check_field_names(fields: dict) -> None:
    unknown = sorted(set(fields) - set(WEIGHT_FIELDS))
    if unknown:
        raise TypeError(f"unknown weight parameter(s) {unknown}; WeightParams has {WEIGHT_FIELDS}")


def as_weight_params(params: WeightParams | str = "tr", /, **fields: Any) -> WeightParams:
    """``params`` as a :class:`WeightParams`: one given is returned as is (already validated) or copied with
    ``fields`` changed; a scheme name (the older keyword style ``token_weights(p, "tr", tau=3.0)``) is combined
    with ``fields``, the missing ones taking the paper defaults."""
    if isinstance(params, WeightParams):
        return params.replace(**fields) if fields else params
    _check_field_names(fields)
    return WeightParams(**{"scheme": params, **fields})


_FLOAT32_MAX = 3.4028234663852886e38  # the weights are float32 tensors: a larger value becomes inf there


def _finite(name: str, value: float) -> float:
    """``value`` as a float: a real number (not a bool, not a string such as YAML's ``"1e1"``), finite in float32."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    v = float(value)
    if not math.isfinite(v) or abs(v) > _FLOAT32_MAX:
        raise ValueError(f"{name} must be finite (and within float32, the dtype of the weights), got {value!r}")
    return v


def validate_weight_params(params: object | None = None, /, *, prefix: str = "", **fields: Any) -> None:
    """Raise ``ValueError`` naming the field and its allowed range for any bad hyperparameter of Eq. 11.

    The fields are read from ``params``, any object with the attributes ``prefix + name`` (a
    :class:`WeightParams`, whose construction calls this; the trainer config with ``prefix="weight_"``, whose flat
    fields are ``weight_alpha``, ...), else from the keywords ``fields``; missing ones take the paper defaults.
    Error messages name the field as ``prefix + name``.
    """
    _check_field_names(fields)
    values = dict(_DEFAULTS, **fields)
    if params is not None:
        values.update({f: getattr(params, prefix + f) for f in WEIGHT_FIELDS if hasattr(params, prefix + f)})
    scheme, tau_mode = values["scheme"], values["tau_mode"]
    if not isinstance(scheme, str) or (scheme not in SCHEMES and scheme not in _REGISTRY):
        raise ValueError(
            f"{prefix}scheme must be a built-in scheme {SCHEMES} or a registered one {registered_schemes()} "
            f"(add one with trgrpo.weights.register_scheme), got {scheme!r}"
        )
    if not isinstance(tau_mode, str) or tau_mode not in TAU_MODES:
        raise ValueError(f"{prefix}tau_mode must be one of {TAU_MODES}, got {tau_mode!r}")
    alpha, mu, tau, lower, upper = (_finite(prefix + f, values[f]) for f in ("alpha", "mu", "tau", "lower", "upper"))
    if tau <= 0:
        raise ValueError(f"{prefix}tau must be > 0 (it scales or divides the probability), got {tau}")
    if alpha <= 0:
        raise ValueError(f"{prefix}alpha must be > 0 so that w increases with p, got {alpha}")
    # sigmoid(.) of a probability lies in [0.5, 1): alpha*(sigmoid - mu) > 0 for every p iff mu < 0.5.
    if not mu < 0.5:
        raise ValueError(
            f"{prefix}mu must be < 0.5 so that alpha*(sigmoid(.) - mu) stays positive "
            f"(the sigmoid of a probability is at least 0.5), got {mu}"
        )
    if lower <= 0:
        raise ValueError(
            f"{prefix}lower must be > 0 (Eq. 10 takes log w, so every weight must be positive), got {lower}"
        )
    if lower > upper:
        raise ValueError(f"{prefix}lower must be <= {prefix}upper, got lower={lower} > upper={upper}")
    if scheme == "reverse" and upper >= 2:
        raise ValueError(f"{prefix}upper must be < 2 for scheme='reverse' (2 - w must stay positive), got {upper}")


def _check_probs(probs: torch.Tensor) -> None:
    if not torch.is_tensor(probs):
        raise TypeError(f"probs must be a torch.Tensor, got {type(probs).__name__}")
    if not probs.is_floating_point():
        raise TypeError(f"probs must be a floating-point tensor, got dtype {probs.dtype}")
    if probs.numel() == 0:
        return
    lo, hi = torch.aminmax(probs.detach())  # one pass, one host sync; NaN propagates and fails the test
    if not bool((lo >= 0) & (hi <= 1)):
        bad = ~((probs >= 0) & (probs <= 1))  # also catches NaN
        first = probs[bad].flatten()[0].item()
        raise ValueError(
            f"probs must lie in [0, 1] (token probabilities); found {int(bad.sum())} value(s) outside, e.g. {first}"
        )


def tr_weight(probs: torch.Tensor, params: WeightParams) -> torch.Tensor:
    """Eq. 11 with validated ``params``: clip(alpha * (sigmoid(tau-scaled p) - mu), L, U)."""
    p = probs.detach()  # sg[.] in Eq. 11
    z = p * params.tau if params.tau_mode == "scale" else p / params.tau  # a new tensor: in-place ops stay local
    return z.sigmoid_().sub_(params.mu).mul_(params.alpha).clamp_(params.lower, params.upper)


def token_weights(
    probs: torch.Tensor,
    params: WeightParams | str = "tr",
    *,
    generator: torch.Generator | None = None,
    mask: torch.Tensor | None = None,
    **fields: Any,
) -> torch.Tensor:
    """Per-token weights w for token probabilities ``probs`` (any shape), detached.

    ``params``: a :class:`WeightParams` (``token_weights(p, params)``), or a scheme name with the Eq. 11
    hyperparameters as keywords ``fields`` (``token_weights(p, "tr", tau=3.0)``; missing ones: paper defaults).

    ``mask`` (same shape, 1 for valid tokens) is required by the batch schemes ``"const"`` and ``"tr_norm"``
    (:func:`batch_weights`) and ignored by the others.

    ``scheme="random"`` draws from ``generator`` only (never the global RNG, so sampling of
    rollouts is not perturbed); it is required for that scheme. A scheme added with :func:`register_scheme`
    gets a detached copy of ``probs``; its output is checked (same shape, finite, > 0) and returned detached,
    in ``probs``'s dtype and device.
    """
    params = as_weight_params(params, **fields)  # validated once, when the WeightParams was made
    scheme = params.scheme
    _check_probs(probs)
    if scheme in _REGISTRY:
        return _registered_weights(scheme, probs)
    if scheme == "equal":
        return torch.ones_like(probs).detach()
    if scheme == "random":
        if generator is None:
            raise ValueError(
                "scheme='random' needs generator=torch.Generator(): weights are drawn from it so the "
                "global RNG (used for sampling rollouts) is not perturbed"
            )
        lo, hi = RANDOM_RANGE
        u = torch.rand(probs.shape, generator=generator, device=generator.device, dtype=torch.float32)
        return (lo + (hi - lo) * u).to(device=probs.device, dtype=probs.dtype)
    w = tr_weight(probs, params)
    if scheme == "reverse":
        return 2.0 - w  # Table 4: "assigns it 2 - w"
    if scheme in BATCH_SCHEMES:
        return batch_weights(w, mask, scheme)
    return w


def batch_weights(tr_weights: torch.Tensor, mask: torch.Tensor | None, scheme: str) -> torch.Tensor:
    """The controls from Eq. 11 weights of a batch and its ``mask`` of valid tokens:
    m = sum(w * mask) / sum(mask); ``"const"`` -> m everywhere, ``"tr_norm"`` -> w / m.

    The mean runs over the tensor given: in the trainer, the batch the loss sees (one process's micro-batch).
    """
    if scheme not in BATCH_SCHEMES:
        raise ValueError(f"scheme must be one of {BATCH_SCHEMES} for batch_weights, got {scheme!r}")
    if mask is None:
        raise ValueError(f"scheme {scheme!r} needs mask= (1 for valid tokens): its weights use the batch mean")
    if not torch.is_tensor(mask) or tuple(mask.shape) != tuple(tr_weights.shape):
        raise ValueError(
            f"mask must be a tensor of the weights' shape {tuple(tr_weights.shape)}, got "
            f"{tuple(mask.shape) if torch.is_tensor(mask) else type(mask).__name__}"
        )
    valid = mask.detach().to(tr_weights.dtype)
    n = valid.sum()
    if float(n) <= 0:
        raise ValueError(f"mask selects no token: scheme {scheme!r} needs the mean weight over valid tokens")
    m = (tr_weights * valid).sum() / n
    if scheme == "const":
        return torch.full_like(tr_weights, 1.0) * m
    return tr_weights / m


def _registered_weights(scheme: str, probs: torch.Tensor) -> torch.Tensor:
    w = _REGISTRY[scheme](probs.detach().clone())
    where = f"weight scheme {scheme!r} (registered with trgrpo.weights.register_scheme)"
    if not torch.is_tensor(w):
        raise ValueError(f"{where} must return a torch.Tensor, got {type(w).__name__}")
    if tuple(w.shape) != tuple(probs.shape):
        raise ValueError(f"{where} returned shape {tuple(w.shape)} for probs of shape {tuple(probs.shape)}")
    if w.is_complex() or w.dtype == torch.bool:
        raise ValueError(f"{where} must return real weights, got dtype {w.dtype}")
    w = w.detach().to(device=probs.device, dtype=probs.dtype)
    if w.numel():
        lo = w.min()
        if not bool(torch.isfinite(w).all() & (lo > 0)):
            bad = ~(torch.isfinite(w) & (w > 0))
            raise ValueError(
                f"{where} must return finite weights > 0 (Eq. 10 takes log w); {int(bad.sum())} of {w.numel()} "
                f"are not, e.g. {w[bad].flatten()[0].item()}"
            )
    return w


def weight_range(params: WeightParams | str = "tr", **fields: Any) -> tuple[float, float]:
    """The (min, max) of w over p in [0, 1] (w is monotone in p, so the endpoints decide; a registered scheme
    need not be, so it is evaluated on a grid of 1001 points). ``params`` and ``fields`` as in
    :func:`token_weights`: ``weight_range(params)`` or ``weight_range(tau=0.5, tau_mode="divide")``."""
    params = as_weight_params(params, **fields)
    if params.scheme == "const":  # the batch mean of weights in [L, U]
        return float(params.lower), float(params.upper)
    if params.scheme == "tr_norm":  # w / mean with both in [L, U]
        return params.lower / params.upper, params.upper / params.lower
    if params.scheme == "random":
        return RANDOM_RANGE
    p = torch.tensor([0.0, 1.0], dtype=torch.float64)
    if is_registered_scheme(params.scheme):
        p = torch.linspace(0.0, 1.0, 1001, dtype=torch.float64)
    w = token_weights(p, params)
    return float(w.min()), float(w.max())
