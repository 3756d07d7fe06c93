"""The run spec: every setting that defines one run (:class:`RunSpec`), checked when it is made.

Field names follow :class:`trgrpo.TRGRPOConfig` where they overlap; hyperparameters default to the paper's
Table 6. A bad value raises ``ValueError`` naming the field; a YAML file's numbers are read as numbers
(:meth:`RunSpec.from_dict`). The task must be registered (:mod:`trgrpo.tasks.registry`). The command lines' YAML
files are read with :func:`read_config`: a bad file is a :class:`ConfigError` of one line naming the file and the field.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..tasks.registry import TASKS
from .records import check_folder_name

# "off" or one of TRL 1.16's vllm_importance_sampling_mode values (GRPOConfig)
VLLM_IMPORTANCE_SAMPLING = ("off", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask")

# Table 6: sampling temperature per task.
TEMPERATURES = {"kk": 0.7, "math": 1.0, "search": 0.8, "arith": 1.0}


@dataclass
class RunSpec:
    """Everything that defines a run. Field names follow :class:`trgrpo.TRGRPOConfig` where they overlap."""

    task: str = "kk"
    model: str = "embedded"
    scheme: str = "tr"
    tau: float = 9.0
    tau_mode: str = "scale"
    alpha: float = 2.0
    mu: float = 0.25
    lower: float = 1.0
    upper: float = 1.4
    placement: str = "ratio"
    kl_weighting: str = "eq10"
    seed: int = 0
    steps: int = 20
    prompts_per_step: int = 2
    num_generations: int = 8
    max_completion_length: int = 4096
    max_eval_tokens: int | None = None
    temperature: float | None = None  # None -> Table 6 value for the task
    learning_rate: float = 1e-6
    beta: float = 0.001
    epsilon: float = 0.2
    epsilon_high: float = 0.24
    gradient_accumulation_steps: int = 1
    micro_batch_size: int | None = None  # completions per device per forward pass (None: from accumulation)
    n_train: int = 1000
    n_eval: int = 100
    eval_before: bool = False
    save_steps: int = 20
    use_vllm: bool = False
    vllm_gpu_memory_utilization: float = 0.3  # colocate: vLLM's share of each GPU (TRL's default)
    # TRL's correction for vLLM's sampling probabilities differing from the policy's: "off" as in verl, the paper's
    # code base (TRL's default, "sequence_mask" with C_max 3, gives whole completions no gradient); or a TRL mode
    vllm_importance_sampling: str = "off"
    # seconds processes wait for each other (NCCL / gloo): the main process evaluates while the others wait, and HF
    # generate of 500 puzzles x 4096 tokens takes hours (TRL's 1800 s would end the run); the planner checks it
    ddp_timeout_s: int = 6 * 3600
    bf16: bool = False
    gradient_checkpointing: bool = False
    report_to: str = "none"  # "tensorboard" / "trackio": live logs beside the results JSON (<run>.logs/)
    task_options: dict = field(default_factory=dict)
    group: str = "runs"
    name: str | None = None

    def __post_init__(self) -> None:
        from ..core.loss import validate_loss_options
        from ..core.weights import validate_weight_params

        validate_weight_params(self)  # Eq. 11's fields (scheme, alpha, mu, tau, lower, upper, tau_mode), named as here
        validate_loss_options(
            placement=self.placement,
            kl_weighting=self.kl_weighting,
            beta=self.beta,
            eps_low=self.epsilon,
            eps_high=self.epsilon_high,
            names={"eps_low": "epsilon", "eps_high": "epsilon_high"},
        )
        _check_spec_types(self)
        for name in (
            "steps",
            "prompts_per_step",
            "num_generations",
            "max_completion_length",
            "n_train",
            "n_eval",
            "save_steps",
            "gradient_accumulation_steps",
            "ddp_timeout_s",
        ):
            v = getattr(self, name)
            if not isinstance(v, int) or v < (0 if name == "n_eval" else 1):
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.micro_batch_size is not None and (
            not isinstance(self.micro_batch_size, int) or self.micro_batch_size < 1
        ):
            raise ValueError(f"micro_batch_size must be a positive integer or None, got {self.micro_batch_size!r}")
        if self.vllm_importance_sampling not in VLLM_IMPORTANCE_SAMPLING:
            raise ValueError(
                f"vllm_importance_sampling must be one of {list(VLLM_IMPORTANCE_SAMPLING)}, "
                f"got {self.vllm_importance_sampling!r}"
            )
        if self.num_generations < 2:
            raise ValueError(f"num_generations must be >= 2 (Eq. 4 needs a group), got {self.num_generations}")
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {sorted(TASKS)}, got {self.task!r}")
        if self.name is None:
            self.name = self.default_name()

    def default_name(self) -> str:
        scheme = self.scheme
        if self.scheme in ("tr", "reverse"):
            scheme += f"-{self.placement}-tau{self.tau:g}-{self.tau_mode}-L{self.lower:g}-U{self.upper:g}"
        return f"{self.task}-{Path(str(self.model)).name}-{scheme}-seed{self.seed}"

    @property
    def sampling_temperature(self) -> float:
        return self.temperature if self.temperature is not None else TEMPERATURES.get(self.task, 1.0)

    @classmethod
    def from_dict(cls, d: dict) -> RunSpec:
        """A spec from a dict (a YAML file): numbers that PyYAML leaves as strings (``1e-6``, ``1e1``: YAML 1.1 wants
        a dot and a signed exponent) are read as numbers for the numeric fields."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown run-spec field(s) {unknown}; known: {sorted(known)}")
        return cls(**{k: _yaml_number(k, v) for k, v in d.items()})


_FLOAT_FIELDS = ("tau", "alpha", "mu", "lower", "upper", "learning_rate", "beta", "epsilon", "epsilon_high")
_FLOAT_FIELDS += ("temperature",)
_INT_FIELDS = (
    "seed",
    "steps",
    "prompts_per_step",
    "num_generations",
    "max_completion_length",
    "max_eval_tokens",
    "n_train",
    "n_eval",
    "save_steps",
    "gradient_accumulation_steps",
    "ddp_timeout_s",
)
_BOOL_FIELDS = ("eval_before", "use_vllm", "bf16", "gradient_checkpointing")
_STR_FIELDS = ("task", "model", "scheme", "tau_mode", "placement", "kl_weighting", "group")
_STR_FIELDS += ("vllm_importance_sampling",)
_NUMBER_TEXT = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _yaml_number(name: str, value: Any) -> Any:
    """``"1e-6"`` -> 1e-06 for a float field, ``"1e3"`` -> 1000 for an int field; anything else unchanged."""
    if not isinstance(value, str) or not _NUMBER_TEXT.fullmatch(value.strip()):
        return value
    number = float(value)
    if name in _FLOAT_FIELDS:
        return number
    if name in _INT_FIELDS and number.is_integer():
        return int(number)
    return value


def _check_spec_types(spec: RunSpec) -> None:
    """Type, finiteness and range of the fields :func:`validate_weight_params` / ``validate_loss_options`` do not
    cover (ValueError naming the field)."""
    for name in ("learning_rate", "temperature"):
        v = getattr(spec, name)
        if v is None and name == "temperature":
            continue
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"{name} must be a finite number > 0, got {v!r} ({type(v).__name__})")
    for name in _INT_FIELDS:
        v = getattr(spec, name)
        if v is None and name == "max_eval_tokens":
            continue
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise ValueError(f"{name} must be an integer, got {v!r} ({type(v).__name__})")
    if spec.seed < 0:
        raise ValueError(f"seed must be >= 0, got {spec.seed}")
    if spec.max_eval_tokens is not None and spec.max_eval_tokens < 1:
        raise ValueError(f"max_eval_tokens must be >= 1 (or None), got {spec.max_eval_tokens}")
    for name in _BOOL_FIELDS:
        if not isinstance(getattr(spec, name), bool):
            raise ValueError(f"{name} must be true or false, got {getattr(spec, name)!r}")
    for name in _STR_FIELDS:
        if not isinstance(getattr(spec, name), str) or not getattr(spec, name):
            raise ValueError(f"{name} must be a non-empty string, got {getattr(spec, name)!r}")
    check_folder_name("group", spec.group, nested=True)  # results/<group>/<name>.json, checkpoints/<group>/<name>/
    if spec.name is not None:
        check_folder_name("name", spec.name)
    if not isinstance(spec.task_options, dict):
        raise ValueError(f"task_options must be a mapping, got {type(spec.task_options).__name__}")


class ConfigError(ValueError):
    """Bad input to a command line (train, batch, plan): one line naming the file and the field. The command lines
    print it without a traceback and exit with code 2, before anything is written."""


def read_config(path: str | Path, what: str = "config") -> dict:
    """A YAML file that must hold a non-empty mapping; every fault is a :class:`ConfigError` naming the file (and the
    line and column of a syntax error)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such {what} file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read the {what} file ({type(e).__name__}: {e})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}: not valid YAML{where}: {problem}") from None
    if data is None or data == {}:
        raise ConfigError(f"{path}: the {what} file is empty")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a {what} file holds a mapping, got a {type(data).__name__}")
    return data


def parse_overrides(items: list[str]) -> dict:
    """``--set`` of the command lines: ``["STEPS=10", "SEEDS=[0]"]`` -> ``{"STEPS": 10, "SEEDS": [0]}`` (values read
    as YAML); a bad item is a :class:`ConfigError` naming it."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ConfigError(f"--set {key.strip()}: {value!r} is not a YAML value") from None
    return out
