"""What a run is: :class:`RunSpec` (checked on construction; its fields are the run's identity), read from a spec
YAML with a grid and overrides (:func:`load_specs`; every YAML of the project goes through the hardened
:func:`read_config`), and what it implies for the batch (:func:`batch_layout`); a batch plan of notebooks
(:func:`load_plan`: ``trgrpo batch`` runs it, ``trgrpo plan`` estimates it)."""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BeforeValidator, Field, model_validator

from trgrpo.config import COUNT, NON_NEGATIVE, POSITIVE, Checked, ConfigError
from trgrpo.files import ROOT
from trgrpo.loss import LOWER_CLIP, KLWeighting, Placement
from trgrpo.notebook import check_values, injected, parameter_defaults
from trgrpo.paper import BETA, EPS_HIGH, EPS_LOW, TEMPERATURES
from trgrpo.runs.records import check_folder_name, run_name
from trgrpo.tasks import get_task, task_names
from trgrpo.weights import DEFAULTS, TauMode, WeightParams

_NUMBER_TEXT = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _yaml_number(kind: type) -> BeforeValidator:
    """``"1e-6"`` -> 1e-06 for a float field, ``"1e3"`` -> 1000 for an int field: PyYAML (YAML 1.1) leaves such
    numbers strings; any other string stays an error."""

    def read(value: Any) -> Any:
        if not isinstance(value, str) or not _NUMBER_TEXT.fullmatch(value):
            return value
        number = float(value)
        return number if kind is float else int(number) if number.is_integer() else value

    return BeforeValidator(read)


VllmImportanceSampling = Literal["off", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]
Float = Annotated[float, _yaml_number(float)]
Int = Annotated[int, _yaml_number(int)]
MAX_EXAMPLES = 10_000_000  # n_train / n_eval: far beyond the paper's sets (the largest, ORZ, has 57k problems)
Count = Annotated[Int, COUNT]  # a bound's words are the one-line error's (trgrpo.config.error_line)


class RunSpec(Checked):
    """Everything that defines a run, validated by pydantic (strict types and bounds, the loss options' types, the
    task's options, folder names). Field names follow :class:`trgrpo.TRGRPOConfig` where they overlap."""

    task: str = "kk"
    model: str = "embedded"
    scheme: str = DEFAULTS.scheme
    tau: Float = DEFAULTS.tau
    tau_mode: TauMode = DEFAULTS.tau_mode
    alpha: Float = DEFAULTS.alpha
    mu: Float = DEFAULTS.mu
    lower: Float = DEFAULTS.lower
    upper: Float = DEFAULTS.upper
    placement: Placement = "ratio"
    kl_weighting: KLWeighting = "eq10"
    seed: Annotated[Int, Field(ge=0, lt=2**32, description="an integer in [0, 2**32) (numpy's and torch's seeds)")] = 0
    steps: Count = 20
    prompts_per_step: Count = 2
    num_generations: Annotated[Int, Field(ge=2, description="an integer >= 2")] = 8  # Eq. 4 needs a group
    max_completion_length: Count = 4096
    max_eval_tokens: Annotated[Int | None, COUNT] = None
    temperature: Annotated[Float | None, POSITIVE] = None  # None -> Table 6 value for the task
    learning_rate: Annotated[Float, POSITIVE] = 1e-6
    beta: Annotated[Float, NON_NEGATIVE] = BETA
    epsilon: Annotated[Float, LOWER_CLIP] = EPS_LOW
    epsilon_high: Annotated[Float, NON_NEGATIVE] = EPS_HIGH
    gradient_accumulation_steps: Count = 1
    micro_batch_size: Annotated[Int | None, COUNT] = None  # completions per device per pass (None: from accumulation)
    n_train: Annotated[
        Int,
        Field(ge=1, le=MAX_EXAMPLES, description=f"an integer in [1, {MAX_EXAMPLES:,}] (generated data is made whole)"),
    ] = 1000
    n_eval: Annotated[Int, Field(ge=0, le=MAX_EXAMPLES, description=f"an integer in [0, {MAX_EXAMPLES:,}]")] = 100
    eval_before: bool = False
    save_steps: Count = 20
    use_vllm: bool = False
    vllm_gpu_memory_utilization: Annotated[  # colocate: vLLM's share of each GPU's total; the one default
        Float, Field(gt=0, le=1, description="in (0, 1] (vLLM's share of each GPU)")
    ] = 0.5
    vllm_importance_sampling: VllmImportanceSampling = "off"  # TRL's vLLM correction; "off" as verl does
    ddp_timeout_s: Count = 6 * 3600  # others wait while the main process evaluates (hours with HF generate)
    bf16: bool = False
    gradient_checkpointing: bool = False
    report_to: Literal["none", "tensorboard", "trackio"] = "none"  # live logs in results/<group>/<name>.logs/
    task_options: dict[str, Any] = {}
    group: str = "runs"
    name: str | None = None

    @model_validator(mode="after")
    def _rules(self) -> RunSpec:
        WeightParams(**{k: getattr(self, k) for k in WeightParams.model_fields})  # Eq. 11's rules
        # a model given as a path (``/``, ``./``, ``../``, ``~``) must be an existing folder; a hub id is not checked
        if self.model.startswith(("/", "./", "../", "~")) and not Path(self.model).expanduser().is_dir():
            raise ValueError(f"model must be an existing folder or a hub id: the folder {self.model} does not exist")
        task = get_task(self.task)  # a ValueError names the registered tasks
        try:
            task.options(**self.task_options)
        except ValueError as e:
            raise ValueError(f"task_options.{e} (task {self.task!r})") from None
        check_folder_name("group", self.group, nested=True)  # results/<group>/<name>.json, checkpoints/<group>/<name>/
        if self.name is None:
            label = self.scheme
            if self.scheme in ("tr", "reverse"):
                label += f"-{self.placement}-tau{self.tau:g}-{self.tau_mode}-L{self.lower:g}-U{self.upper:g}"
            self.name = run_name(self.task, self.model, label, self.seed)
        check_folder_name("name", self.name)
        return self

    @property
    def sampling_temperature(self) -> float:
        return self.temperature if self.temperature is not None else TEMPERATURES.get(self.task, 1.0)

    @classmethod
    def from_dict(cls, d: dict) -> RunSpec:
        """A spec from a dict (a YAML file); the task's data files are read (``Task.check_data``), so a bad file
        stops the load, not the run."""
        spec = cls(**d)
        if (check := get_task(spec.task).check_data) is not None:
            check(spec)
        return spec


# ---------------------------------------------------------------------------------------------------------------
# Batch arithmetic (Table 6 -> TRL): steps_per_generation = accumulation, one on-policy update per rollout.

BATCH_READING = (
    "Table 6 'Mini-batch size' = prompts per optimizer step (verl train_batch_size), each with G completions; "
    "'Micro-batch size (updates)' >= it (verl ppo_mini_batch_size), so one on-policy update per step. "
    "The global figures do not depend on the number of GPUs."
)


SPEC_FILE_KEYS = ("base", "grid", "imports")


def load_specs(path: str | Path, overrides: dict | None = None) -> list[RunSpec]:
    """The run specs of a YAML file, every one checked before any runs (bad input: a :class:`ConfigError`)."""
    path = Path(path)
    data = read_config(path)
    import_task_modules(path, data.get("imports", []))
    fields = [k for k in data if k not in SPEC_FILE_KEYS]
    if fields and ("base" in data or "grid" in data):
        raise ConfigError(f"{path}: field(s) {fields} beside 'base' / 'grid' would be ignored; put them in 'base'")
    base = data.get("base", {k: data[k] for k in fields})
    if not isinstance(base, dict):
        raise ConfigError(f"{path}: field 'base' must be a mapping of run-spec fields, got {type(base).__name__}")
    grid = data.get("grid", [{}])
    if not isinstance(grid, list) or not grid or not all(isinstance(g, dict) for g in grid):
        raise ConfigError(f"{path}: field 'grid' must be a non-empty list of mappings (one per run), got {grid!r:.80}")
    overrides = overrides or {}
    specs = []
    for i, row in enumerate(grid):
        where = f"{path}: grid[{i}]" if "grid" in data else str(path)
        fields = {**base, **row, **overrides}
        if "task" not in fields:
            raise ConfigError(f"{where}: field 'task' is missing (the run's task: {task_names()})")
        try:
            specs.append(RunSpec.from_dict(fields))
        except (ValueError, TypeError) as e:
            raise ConfigError(f"{where}: {e}" + (f" (with --set {sorted(overrides)})" if overrides else "")) from None
    seen: dict[tuple[str, str], int] = {}
    for i, spec in enumerate(specs):
        j = seen.setdefault((spec.group, str(spec.name)), i)
        if j != i:
            raise ConfigError(f"{path}: grid[{j}] and grid[{i}] are both {spec.group}/{spec.name} (field 'name')")
    return specs


def import_task_modules(path: Path, imports) -> None:
    """Import the modules that register the specs' tasks: ``trgrpo...`` modules or ``.py`` files beside the config."""
    if not isinstance(imports, list) or not all(isinstance(m, str) and m for m in imports):
        raise ConfigError(f"{path}: field 'imports' must be a list of module names, got {imports!r:.80}")
    for name in imports:
        if name.endswith(".py"):
            local = path.parent / name
            if "/" in name or "\\" in name or not local.is_file():
                raise ConfigError(f"{path}: imports: {name!r} is not a .py file in the config's folder {path.parent}")
            module_spec = importlib.util.spec_from_file_location(local.stem, local)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[local.stem] = module
            module_spec.loader.exec_module(module)
        elif name == "trgrpo" or name.startswith("trgrpo."):
            try:
                importlib.import_module(name)
            except ImportError as e:
                raise ConfigError(f"{path}: imports: {name!r} cannot be imported ({e})") from None
        else:
            raise ConfigError(
                f"{path}: imports: {name!r} is neither a module of this project (trgrpo...) nor a .py file next "
                "to the config"
            )


def batch_layout(spec: RunSpec, world_size: int = 1) -> dict:
    """TRL's per-device batch and accumulation for the spec's global batch on ``world_size`` processes
    (``micro_batch_size`` fixes the per-device batch, else ``gradient_accumulation_steps`` the accumulation)."""
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
    completions = spec.prompts_per_step * spec.num_generations
    knob, value = "micro_batch_size", spec.micro_batch_size
    if value is None:
        knob, value = "gradient_accumulation_steps", spec.gradient_accumulation_steps
    if completions % (value * world_size):
        raise ValueError(
            f"prompts_per_step x num_generations = {completions} completions do not split into {knob} {value} x "
            f"{world_size} process(es): change {knob} or prompts_per_step"
        )
    split = completions // (value * world_size)
    per_device, accumulation = (value, split) if knob == "micro_batch_size" else (split, value)
    return {
        "world_size": world_size,
        "per_device_train_batch_size": per_device,
        "gradient_accumulation_steps": accumulation,
        "steps_per_generation": accumulation,
        "num_generations": spec.num_generations,
        "global_prompts_per_step": completions // spec.num_generations,
        "global_completions_per_step": per_device * accumulation * world_size,
        "updates_per_step": 1,
    }


def vllm_max_model_length(spec: RunSpec) -> int:
    """vLLM's context: the prompt budget (the task's option ``max_prompt_tokens``) + the completion."""
    return get_task(spec.task).options(**spec.task_options).max_prompt_tokens + spec.max_completion_length


def env_world_size() -> int:
    """The process count ``accelerate launch`` / ``torchrun`` set (1 when started alone)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def train_config_summary(spec: RunSpec, world_size: int = 1) -> dict:
    """What ``train --print-config`` prints: the batch layout and the memory settings, without loading a model."""
    memory = (
        "vllm_gpu_memory_utilization",
        "vllm_importance_sampling",
        "ddp_timeout_s",
        "max_completion_length",
        "steps",
    )
    return {
        **{k: getattr(spec, k) for k in ("name", "model")},
        **batch_layout(spec, world_size),
        **{k: getattr(spec, k) for k in ("gradient_checkpointing", "bf16", "use_vllm")},
        "vllm_max_model_length": vllm_max_model_length(spec),
        **{k: getattr(spec, k) for k in memory},
        "batch_reading": BATCH_READING,
    }


MAX_YAML_VALUES = 100_000  # values of a config with every alias expanded (a "billion laughs" file has 10**9)


class ConfigLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses a key given twice in one mapping (PyYAML keeps the last) and, before
    anything is built, aliases that expand to more than :data:`MAX_YAML_VALUES` values."""

    def construct_document(self, node: yaml.Node) -> Any:
        if _expanded_size(node, {}) > MAX_YAML_VALUES:
            raise yaml.constructor.ConstructorError(
                None, None, f"its aliases expand to more than {MAX_YAML_VALUES:,} values", node.start_mark
            )
        return super().construct_document(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = self.construct_object(key_node)
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep)


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """The number of values ``node`` stands for with every alias expanded (each shared node counted once per use)."""
    if id(node) not in memo:
        memo[id(node)] = 1  # a recursive alias counts once
        children = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else node.value
        if isinstance(node, yaml.CollectionNode):
            memo[id(node)] = 1 + sum(_expanded_size(c, memo) for c in children)
    return memo[id(node)]


def read_config(path: str | Path, what: str = "config") -> dict:
    """A YAML file holding a non-empty mapping; every fault is a :class:`ConfigError` naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such {what} file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read the {what} file ({type(e).__name__}: {e})") from None
    try:
        data = yaml.load(text, Loader=ConfigLoader)
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
    """``--set`` items: ``["STEPS=10", "SEEDS=[0]"]`` -> ``{"STEPS": 10, "SEEDS": [0]}`` (values read as YAML)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = yaml.load(value, Loader=ConfigLoader)
        except yaml.YAMLError:
            raise ConfigError(f"--set {key.strip()}: {value!r} is not a YAML value") from None
    return out


class PlanEntry(Checked):
    """A notebook of a batch plan: its path (from the project's root), parameters and mode (default: the plan's)."""

    notebook: str
    parameters: dict[str, Any] | None = None  # `parameters:` left empty is None
    smoke: bool | None = None


class BatchPlan(Checked):
    """A batch plan file: its name (default: the file's), its mode, its notebooks (each a :class:`PlanEntry`)."""

    name: str | None = None
    smoke: bool = False
    notebooks: Annotated[
        list[dict], Field(min_length=1, description="a non-empty list of {notebook, parameters} entries")
    ]


def load_plan(path: Path, overrides: dict | None = None) -> tuple[str, list[tuple[Path, bool, dict]]]:
    """A batch plan as (name, [(notebook, smoke, parameters)]), ``overrides`` applied where a notebook has them.
    Bad input, including a parameter no parameters cell assigns (papermill only warns), is a ``ConfigError``."""
    path, overrides = Path(path), overrides or {}
    data = read_config(path, "batch plan")
    try:
        spec = BatchPlan(**{str(k): v for k, v in data.items()})  # a key 1 is an unknown field, not a TypeError
        name = check_folder_name("name", spec.name or path.stem)
    except ValueError as e:
        raise ConfigError(f"{path}: {e}") from None
    plan, declared = [], set()
    for i, fields in enumerate(spec.notebooks):
        where = f"{path}: notebooks[{i}]"
        try:
            entry = PlanEntry(**{str(k): v for k, v in fields.items()})
        except ValueError as e:
            raise ConfigError(f"{where}: {e}") from None
        nb = Path(entry.notebook)
        nb = nb if nb.is_absolute() else ROOT / nb
        if not nb.is_file():
            raise ConfigError(f"{where}.notebook: {nb} does not exist")
        params = entry.parameters or {}
        try:
            known = parameter_defaults(nb)
        except Exception as e:  # noqa: BLE001 - not a notebook, or a parameters cell that does not parse
            raise ConfigError(f"{where}.notebook: {nb} is not a readable notebook ({type(e).__name__})") from None
        bad = sorted(set(params) - set(known) - {"SMOKE"})
        if bad:
            raise ConfigError(f"{where}.parameters: {bad} not in {nb.name}'s parameters cell ({sorted(known)})")
        check_values(params, known, f"{where}.parameters")
        mine = {k: v for k, v in overrides.items() if k in known}
        check_values(mine, known, f"{path}: --set")
        declared |= set(known)
        plan.append((nb, spec.smoke if entry.smoke is None else entry.smoke, {**params, **mine}))
    bad = sorted(set(overrides) - declared - {"SMOKE"})
    if bad:
        raise ConfigError(f"{path}: --set {bad}: no notebook of the plan has such a parameter")
    return name, plan


def smoke_replaced(namespace: dict) -> None:
    """At the end of a notebook's smoke branch: one line naming the parameters passed to it (papermill's injected cell,
    :func:`trgrpo.notebook.injected`) whose values smoke mode replaced, which its small run therefore ignores."""
    replaced = []
    for name, node in injected(namespace).items():
        with contextlib.suppress(ValueError):  # not a literal (papermill writes float('nan')): not compared
            if name != "SMOKE" and (value := ast.literal_eval(node)) is not None and namespace.get(name) != value:
                replaced.append(f"{name}={value!r}")
    if replaced:
        print(f"smoke mode replaces the parameters you passed: {', '.join(replaced)} (without smoke mode they apply)")
