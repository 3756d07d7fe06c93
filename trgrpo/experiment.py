"""One run, one entry point: a run spec -> train with TRGRPOTrainer -> evaluate -> ``results/<group>/<run>.json``.

Notebooks (in-process), the CLI (``python -m trgrpo.train --config experiments/x.yaml``) and
``accelerate launch`` for several GPUs all go through :func:`run`. Hyperparameters default to the
paper's Table 6 per task; every record carries the spec, per-step metrics, the final evaluation,
wall time, peak memory, machine, package versions and the git commit.

A run checkpoints every ``save_steps`` steps (App. B.2: every 20). Started again with the same spec,
it resumes from its last checkpoint and ends with the same metrics as an uninterrupted run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import numbers
import os
import platform
import re
import resource
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = Path(os.environ.get("TRGRPO_RESULTS", ROOT / "results"))
CHECKPOINT_DIR = Path(os.environ.get("TRGRPO_CHECKPOINTS", ROOT / "checkpoints"))

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
    bf16: bool = False
    gradient_checkpointing: bool = False
    report_to: str = "none"  # "tensorboard" / "trackio": live logs beside the results JSON (<run>.logs/)
    task_options: dict = field(default_factory=dict)
    group: str = "runs"
    name: str | None = None

    def __post_init__(self) -> None:
        from .loss import validate_loss_options
        from .weights import validate_weight_params

        validate_weight_params(
            scheme=self.scheme,
            alpha=self.alpha,
            mu=self.mu,
            tau=self.tau,
            lower=self.lower,
            upper=self.upper,
            tau_mode=self.tau_mode,
        )
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
        ):
            v = getattr(self, name)
            if not isinstance(v, int) or v < (0 if name == "n_eval" else 1):
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.micro_batch_size is not None and (
            not isinstance(self.micro_batch_size, int) or self.micro_batch_size < 1
        ):
            raise ValueError(f"micro_batch_size must be a positive integer or None, got {self.micro_batch_size!r}")
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
)
_BOOL_FIELDS = ("eval_before", "use_vllm", "bf16", "gradient_checkpointing")
_STR_FIELDS = ("task", "model", "scheme", "tau_mode", "placement", "kl_weighting", "group")
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
    if spec.name is not None and (not isinstance(spec.name, str) or not spec.name):
        raise ValueError(f"name must be a non-empty string (or None), got {spec.name!r}")
    if not isinstance(spec.task_options, dict):
        raise ValueError(f"task_options must be a mapping, got {type(spec.task_options).__name__}")


# ---------------------------------------------------------------------------------------------------------------
# Tasks: each provides data, reward functions and an evaluation. Others (toy, search) register their own.


@dataclass
class Task:
    """A task family: ``build(spec, tokenizer)`` -> (train dataset, eval records); rewards; evaluation.

    ``data_source(spec, train_dataset, eval_records)``, when given, says where the data came from (a path or the
    offline generator, split, size); the run record carries it as ``data_source``.
    """

    build: Callable[[RunSpec, Any], tuple[Any, list]]
    reward_funcs: Callable[[RunSpec], list]
    evaluate: Callable[[Any, Any, list, RunSpec], dict]
    data_source: Callable[[RunSpec, Any, Any], dict] | None = None


TASKS: dict[str, Task] = {}


def register_task(name: str, task: Task) -> None:
    TASKS[name] = task


def _kk_files(opts: dict, key: str, n: int, n_people) -> list[dict]:
    from .tasks import kk

    try:
        return kk.load_kk_files(opts[key], n=n, n_people=n_people)
    except (OSError, ValueError, TypeError) as e:
        raise type(e)(f"task_options.{key}: {e}") from e


def _kk_build(spec: RunSpec, tokenizer):
    """K&K data: the Logic-RL parquet files when ``train_path`` / ``eval_path`` are given (the paper's splits,
    ``test_new`` for evaluation), reasoning-gym's generator offline otherwise."""
    from .tasks import kk

    opts = spec.task_options
    n_people = opts.get("n_people", (3, 4, 5, 6, 7))
    eval_people = opts.get("eval_n_people", n_people)
    if opts.get("train_path"):
        train = _kk_files(opts, "train_path", spec.n_train, n_people)
    else:
        train, _ = kk.kk_splits(spec.n_train, 0, n_people=n_people, seed=spec.seed if opts.get("seed_data") else 0)
    if opts.get("eval_path"):
        test = _kk_files(opts, "eval_path", spec.n_eval, eval_people)
    else:
        _, test = kk.kk_splits(spec.n_train, spec.n_eval, n_people=eval_people, seed=0)
    train_keys = {r["quiz"] for r in train}
    test = [r for r in test if r["quiz"] not in train_keys]
    prefill = bool(opts.get("prefill_think", False))
    # TRL always adds a generation prompt to chat prompts: a pre-filled <think> needs text prompts.
    ds = kk.kk_dataset(train, prefill_think=prefill, tokenizer=tokenizer if prefill else None)
    return ds, test


def _kk_data_source(spec: RunSpec, train_ds, records) -> dict:
    from .tasks import kk

    opts = spec.task_options
    return {
        "train": kk.kk_source(opts.get("train_path"), "train", len(train_ds)),
        "eval": kk.kk_source(opts.get("eval_path"), "test", len(records)),
        "prefill_think": bool(opts.get("prefill_think", False)),
    }


def _kk_rewards(spec: RunSpec):
    from .tasks import kk

    return kk.make_kk_reward_funcs(prefilled_think=bool(spec.task_options.get("prefill_think", False)))


def _kk_eval(model, tokenizer, records, spec: RunSpec) -> dict:
    from .tasks import kk

    res = kk.evaluate_kk(
        model,
        tokenizer,
        records,
        batch_size=spec.task_options.get("eval_batch_size", 8),
        max_new_tokens=spec.max_eval_tokens or spec.max_completion_length,
        prefill_think=bool(spec.task_options.get("prefill_think", False)),
    )
    res["accuracy"] = res["avg"]
    return res


SAMPLED_MATH_SETS = ("amc", "aime24")  # Section 4.1: avg@16 (and pass@16 for AIME) instead of greedy


def _load_math_source(source: str, n: int, seed: int) -> list[dict]:
    from .tasks import math as tm

    if source == "generated":
        return tm.generate_math(n, seed=seed)
    if source in tm.MATH_HUB:
        return tm.load_math_hub(source)[:n]
    return tm.load_math_file(source)[:n]


def _math_build(spec: RunSpec, tokenizer):
    """Train on generated arithmetic offline, or a file / hub set (``train``: deepscaler, orz, a path)."""
    from .tasks import math as tm

    opts = spec.task_options
    train = _load_math_source(opts.get("train", "generated"), spec.n_train, spec.seed + 1000)
    seen = {r["problem"] for r in train}
    evals = {}
    for name in opts.get("eval_sets", ["generated"]):
        records = _load_math_source(name, spec.n_eval, 99_999)
        evals[Path(name).stem] = [r for r in records if r["problem"] not in seen]
    return tm.math_dataset(train), evals


def _math_data_source(spec: RunSpec, train_ds, evals) -> dict:
    """Each set under the name Table 2 gives it, with its source; generated arithmetic is marked a substitute."""
    from .tasks import math as tm

    opts = spec.task_options
    names = opts.get("eval_sets", ["generated"])
    return {
        "train": tm.math_source(opts.get("train", "generated"), len(train_ds)),
        "eval": {Path(n).stem: tm.math_source(n, len(evals.get(Path(n).stem, []))) for n in names},
    }


def _math_rewards(spec: RunSpec):
    from .tasks import math as tm

    return [tm.make_math_reward_func()]


def _math_eval(model, tokenizer, evals, spec: RunSpec) -> dict:
    """Table 2 layout: greedy accuracy per set; avg@k / pass@k for AMC and AIME; ``accuracy`` = mean of sets."""
    from .tasks import math as tm

    opts = spec.task_options
    max_new = spec.max_eval_tokens or spec.max_completion_length
    out: dict[str, Any] = {"by_set": {}}
    for name, records in evals.items():
        if not records:
            continue
        if name in SAMPLED_MATH_SETS:
            k = int(opts.get("sampled_k", 16))
            res = tm.evaluate_math_sampled(
                model,
                tokenizer,
                records,
                k=k,
                max_new_tokens=max_new,
                seed=spec.seed,
                batch_size=opts.get("eval_batch_size", 2),
            )
            out["by_set"][name] = {key: v for key, v in res.items() if key.startswith(("avg@", "pass@"))}
        else:
            res = tm.evaluate_math(
                model, tokenizer, records, batch_size=opts.get("eval_batch_size", 8), max_new_tokens=max_new
            )
            out["by_set"][name] = {"accuracy": res["accuracy"]}
    scores = [next(iter(v.values())) for v in out["by_set"].values()]
    out["accuracy"] = sum(scores) / len(scores) if scores else None
    return out


def _arith_build(spec: RunSpec, tokenizer):
    """Two-number addition for a small chat model (notebook 03, Part B): train and held-out pairs are disjoint."""
    from .tasks import arith

    low, high = spec.task_options.get("range", arith.DEFAULT_RANGE)
    train, test = arith.split_problems(spec.n_train, spec.n_eval, seed=0, low=int(low), high=int(high))
    return arith.arith_dataset(train, tokenizer), test


def _arith_rewards(spec: RunSpec):
    from .tasks import arith

    return arith.make_arith_reward_funcs()


def _arith_eval(model, tokenizer, records, spec: RunSpec) -> dict:
    from .tasks import arith

    return arith.evaluate_arith(
        model,
        tokenizer,
        records,
        batch_size=spec.task_options.get("eval_batch_size", 32),
        max_new_tokens=spec.max_eval_tokens or spec.max_completion_length,
    )


register_task("kk", Task(_kk_build, _kk_rewards, _kk_eval, _kk_data_source))
register_task("math", Task(_math_build, _math_rewards, _math_eval, _math_data_source))
register_task("arith", Task(_arith_build, _arith_rewards, _arith_eval))


# ---------------------------------------------------------------------------------------------------------------
# Provenance


def machine_info() -> dict:
    import torch

    info = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_count"] = torch.cuda.device_count()
    return info


def package_versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("trgrpo", "torch", "transformers", "trl", "accelerate", "datasets", "papermill", "vllm"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    if "trgrpo" not in out:  # run from the source tree, not installed
        from . import __version__

        out["trgrpo"] = __version__
    return out


def _git(*args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None


def git_commit() -> str | None:
    out = _git("rev-parse", "HEAD")
    return (out.stdout.strip() or None) if out is not None else None


def git_dirty() -> bool | None:
    """True if tracked files differ from the commit (numbers then belong to a tree no commit names); None if unknown."""
    out = _git("status", "--porcelain", "--untracked-files=no")
    return bool(out.stdout.strip()) if out is not None and out.returncode == 0 else None


def peak_memory_mb() -> dict:
    import torch

    out = {"rss_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if torch.cuda.is_available():
        out["cuda_max_allocated_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def write_result(group: str, name: str, record: dict, results_dir: Path | str | None = None) -> Path:
    """Write ``results/<group>/<name>.json`` atomically (shared by every task and notebook)."""
    return write_json(Path(results_dir or RESULTS_DIR) / group / f"{name}.json", record)


def update_marked_block(path: Path | str, start: str, end: str, body: str) -> bool:
    """Replace the text between the markers ``start`` and ``end`` of the file at ``path`` with ``body`` (a generated
    README block); True if the file changed. Raises ValueError naming the file when a marker is missing."""
    path = Path(path)
    text = path.read_text()
    if start not in text or end not in text:
        raise ValueError(f"{path} lacks the markers {start!r} ... {end!r}")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    new = f"{head}{start}\n{body}{end}{tail}"
    if new != text:
        path.write_text(new)
    return new != text


def write_json(path: Path | str, record: Any) -> Path:
    """Write ``record`` as JSON atomically: a temporary file of a unique name in the same folder (two writers never
    share one), flushed to disk (fsync), then renamed over ``path`` (``os.replace``). A reader sees the old file or
    the new one, never a part; a killed write leaves at most a stray temporary file."""
    import tempfile

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(jsonable(record), indent=1, sort_keys=False)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return path


@contextlib.contextmanager
def file_lock(path: Path | str) -> Iterator[None]:
    """An exclusive lock (``fcntl.flock``) on the sidecar file ``<path>.lock``, for read-modify-write updates."""
    import fcntl

    lock = Path(f"{path}.lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def update_json(path: Path | str, update: Callable[[Any], Any], default: Any = None) -> Any:
    """Read ``path`` (``default`` when it does not exist), apply ``update``, write the result atomically, all under
    :func:`file_lock`: concurrent updaters (two grids appending to ``grid-summary.json``) lose no update."""
    path = Path(path)
    with file_lock(path):
        current = json.loads(path.read_text(encoding="utf-8")) if path.exists() else default
        new = update(current)
        write_json(path, new)
    return new


def load_results(
    group: str, results_dir: Path | str | None = None, *, require: tuple[str, ...] = ("scheme", "history")
) -> list[dict]:
    """Every run record under ``results/<group>/`` (recursively, sorted by path).

    Files without the ``require`` keys (auxiliary analyses stored beside the runs) are skipped.
    """
    base = Path(results_dir or RESULTS_DIR) / group
    if not base.exists():
        return []
    out = []
    for p in sorted(base.rglob("*.json")):
        rec = json.loads(p.read_text())
        if isinstance(rec, dict) and all(k in rec for k in require):
            out.append(rec)
    return out


def jsonable(x):
    """Plain JSON values: tuples to lists, tensors/numpy scalars to numbers, non-finite floats to null."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if hasattr(x, "item") and callable(x.item):
        return jsonable(x.item())
    return x


# ---------------------------------------------------------------------------------------------------------------
# Batch arithmetic (Table 6 -> TRL). TRL 1.16: one optimizer step sums ``gradient_accumulation_steps`` micro-batches
# of ``per_device_train_batch_size`` completions on each of ``world_size`` processes; a generation round makes
# per_device x world x steps_per_generation completions. steps_per_generation = accumulation gives one on-policy
# update per rollout, as verl does with ppo_mini_batch_size >= train_batch_size.

# Table 6 "Mini-batch size" read as verl's train_batch_size: prompts per optimizer step (x G = 8 completions).
PAPER_PROMPTS_PER_STEP = {"kk": 64, "math": 128, "search": 32}
BATCH_READING = (
    "Table 6 'Mini-batch size' = prompts per optimizer step (verl train_batch_size), each with G completions; "
    "'Micro-batch size (updates)' >= it (verl ppo_mini_batch_size), so one on-policy update per step. "
    "The global figures do not depend on the number of GPUs."
)
# Prompt tokens budgeted for vLLM's context (the chat template + puzzle / problem; search adds tool output).
PROMPT_TOKENS = {"kk": 1024, "math": 1024, "search": 4096}


def batch_layout(spec: RunSpec, world_size: int = 1) -> dict:
    """TRL's per-device batch, accumulation and steps per generation for the spec's *global* batch.

    Global completions per optimizer step = prompts_per_step x num_generations
    = per_device_train_batch_size x gradient_accumulation_steps x world_size, on any ``world_size``.
    With ``micro_batch_size`` set, the per-device batch is that and the accumulation follows; otherwise the
    accumulation is ``gradient_accumulation_steps`` and the per-device batch follows.
    """
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
    completions = spec.prompts_per_step * spec.num_generations
    if spec.micro_batch_size is not None:
        per_device = spec.micro_batch_size
        if completions % (per_device * world_size):
            raise ValueError(
                f"prompts_per_step x num_generations = {completions} completions do not split into micro_batch_size "
                f"{per_device} x {world_size} process(es): change micro_batch_size or prompts_per_step"
            )
        accumulation = completions // (per_device * world_size)
    else:
        accumulation = spec.gradient_accumulation_steps
        if completions % (accumulation * world_size):
            raise ValueError(
                f"prompts_per_step x num_generations = {completions} completions do not split into "
                f"gradient_accumulation_steps {accumulation} x {world_size} process(es): change "
                "gradient_accumulation_steps or set micro_batch_size"
            )
        per_device = completions // (accumulation * world_size)
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
    """vLLM's context: prompt budget (``task_options.max_prompt_tokens`` or :data:`PROMPT_TOKENS`) + completion."""
    prompt = int(spec.task_options.get("max_prompt_tokens", PROMPT_TOKENS.get(spec.task, 1024)))
    return prompt + spec.max_completion_length


def env_world_size() -> int:
    """The process count ``accelerate launch`` / ``torchrun`` set (1 when started alone)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def train_config_summary(spec: RunSpec, world_size: int = 1) -> dict:
    """What ``train --print-config`` prints: the batch layout and the memory settings, without loading a model."""
    return {
        "name": spec.name,
        "model": spec.model,
        **batch_layout(spec, world_size),
        "gradient_checkpointing": spec.gradient_checkpointing,
        "bf16": spec.bf16,
        "use_vllm": spec.use_vllm,
        "vllm_max_model_length": vllm_max_model_length(spec),
        "vllm_gpu_memory_utilization": spec.vllm_gpu_memory_utilization,
        "max_completion_length": spec.max_completion_length,
        "steps": spec.steps,
        "batch_reading": BATCH_READING,
    }


# ---------------------------------------------------------------------------------------------------------------
# Training


def make_config(spec: RunSpec, output_dir: Path, world_size: int | None = None, **overrides):
    """The :class:`TRGRPOConfig` for a spec (Table 6 defaults, logging every step, checkpoints)."""
    import torch

    from .trainer import TRGRPOConfig

    cuda = torch.cuda.is_available()
    layout = batch_layout(spec, env_world_size() if world_size is None else world_size)
    kw = dict(
        output_dir=str(output_dir),
        seed=spec.seed,
        data_seed=spec.seed,
        max_steps=spec.steps,
        per_device_train_batch_size=layout["per_device_train_batch_size"],
        gradient_accumulation_steps=layout["gradient_accumulation_steps"],
        steps_per_generation=layout["steps_per_generation"],
        num_generations=spec.num_generations,
        max_completion_length=spec.max_completion_length,
        temperature=spec.sampling_temperature,
        learning_rate=spec.learning_rate,
        beta=spec.beta,
        epsilon=spec.epsilon,
        epsilon_high=spec.epsilon_high,
        weight_scheme=spec.scheme,
        weight_alpha=spec.alpha,
        weight_mu=spec.mu,
        weight_tau=spec.tau,
        weight_lower=spec.lower,
        weight_upper=spec.upper,
        weight_tau_mode=spec.tau_mode,
        weight_placement=spec.placement,
        kl_weighting=spec.kl_weighting,
        logging_steps=1,
        save_strategy="steps",
        save_steps=spec.save_steps,
        save_total_limit=1,  # resuming needs only the last checkpoint (model + optimizer: 1.6 GB for SmolLM2)
        save_only_model=False,
        report_to=spec.report_to,
        use_cpu=not cuda,
        bf16=spec.bf16 and cuda,
        disable_tqdm=False,
        gradient_checkpointing=spec.gradient_checkpointing,
        use_vllm=spec.use_vllm,
        dataloader_num_workers=0,
        lr_scheduler_type="constant",
    )
    if spec.use_vllm:
        kw.update(
            vllm_mode="colocate",
            vllm_max_model_length=vllm_max_model_length(spec),
            vllm_gpu_memory_utilization=spec.vllm_gpu_memory_utilization,
        )
    kw.update(overrides)
    return TRGRPOConfig(**kw)


def live_log_dir(spec: RunSpec, results_dir: Path | str | None = None) -> Path | None:
    """Where ``report_to`` logging goes: ``results/<group>/<name>.logs/`` beside the record; None without it."""
    if spec.report_to in ("none", "", None):
        return None
    return Path(results_dir or RESULTS_DIR).resolve() / spec.group / f"{spec.name}.logs"


def last_checkpoint(output_dir: Path) -> str | None:
    ckpts = sorted(output_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    ckpts = [c for c in ckpts if (c / "trainer_state.json").exists()]
    return str(ckpts[-1]) if ckpts else None


def history_from_log(log_history: list[dict]) -> list[dict]:
    """One dict per optimizer step (TRL logs every step with ``logging_steps=1``)."""
    rows = []
    for h in log_history:
        if "loss" in h and "step" in h:
            rows.append({k: v for k, v in h.items() if isinstance(v, (int, float))})
    return rows


def run(
    spec: RunSpec | dict,
    *,
    results_dir: Path | str | None = None,
    checkpoint_dir: Path | str | None = None,
    resume: bool = True,
    callbacks: list | None = None,
    config_overrides: dict | None = None,
    keep_checkpoints: bool = True,
    verbose: bool = True,
) -> dict:
    """Train and evaluate one spec; write and return its results record."""
    import torch
    from transformers import AutoTokenizer

    from .models import resolve_model
    from .trainer import TRGRPOTrainer

    spec = RunSpec.from_dict(spec) if isinstance(spec, dict) else spec
    task = TASKS[spec.task]
    model_path = resolve_model(spec.model)
    out_dir = Path(checkpoint_dir or CHECKPOINT_DIR) / spec.group / spec.name
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "spec.json").write_text(json.dumps(dataclasses.asdict(spec), indent=1))
    t0 = time.time()

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    train_ds, eval_records = task.build(spec, tokenizer)
    data_source = task.data_source(spec, train_ds, eval_records) if task.data_source else None
    logs = live_log_dir(spec, results_dir)
    if logs is not None:  # transformers' TensorBoard callback reads it when the trainer is built
        os.environ["TENSORBOARD_LOGGING_DIR"] = str(logs)
        if verbose:
            print(f"[trgrpo] live logs ({spec.report_to}): {logs}")
    config = make_config(spec, out_dir, **(config_overrides or {}))
    trainer = TRGRPOTrainer(
        model=model_path,
        reward_funcs=task.reward_funcs(spec),
        args=config,
        train_dataset=train_ds,
        processing_class=tokenizer,
        callbacks=callbacks,
    )
    if not verbose:  # transformers prints every step's log dict otherwise
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        trainer.remove_callback(PrinterCallback)
        trainer.remove_callback(ProgressCallback)
    initial = None
    if spec.eval_before and spec.n_eval > 0:
        initial = _evaluate(trainer, tokenizer, task, eval_records, spec)
    ckpt = last_checkpoint(out_dir) if resume else None
    if ckpt and verbose:
        print(f"[trgrpo] resuming {spec.name} from {ckpt}")
    train_t0 = time.time()
    trainer.train(resume_from_checkpoint=ckpt)
    train_s = time.time() - train_t0
    main_process = trainer.accelerator.is_main_process
    final = _evaluate_main(trainer, tokenizer, task, eval_records, spec) if spec.n_eval > 0 else {}
    history = history_from_log(trainer.state.log_history)
    steps_run = sum(1 for h in history if h["step"] > _checkpoint_step(ckpt))  # this process's steps only
    layout = batch_layout(spec, trainer.accelerator.num_processes)
    record = {
        "name": spec.name,
        "group": spec.group,
        "task": spec.task,
        "scheme": spec.scheme,
        "seed": spec.seed,
        "model": spec.model,
        "steps": spec.steps,
        "spec": dataclasses.asdict(spec),
        "data_source": data_source,
        "history": history,
        "initial": initial,
        "final": final,
        "train_time_s": train_s,
        "seconds_per_step": train_s / max(1, steps_run),
        "steps_run": steps_run,
        "batch": {**layout, "trl_generation_batch_size": trainer.args.generation_batch_size, "reading": BATCH_READING},
        "wall_time_s": time.time() - t0,
        "peak_memory": peak_memory_mb(),
        "resumed_from": ckpt,
        "live_logs": str(logs) if logs is not None else None,
        "machine": machine_info(),
        "versions": package_versions(),
        "git_commit": git_commit(),
        "git_dirty": git_dirty(),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    path = write_result(spec.group, spec.name, record, results_dir) if main_process else None
    if verbose and main_process:
        acc = final.get("accuracy")
        print(
            f"[trgrpo] {spec.name}: {len(history)} steps, final accuracy "
            f"{'n/a' if acc is None else f'{acc:.3f}'}, {record['wall_time_s']:.0f} s -> {path}")
    if not keep_checkpoints:
        import shutil

        shutil.rmtree(out_dir, ignore_errors=True)
    del trainer
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return record


def _checkpoint_step(ckpt: str | None) -> int:
    return int(Path(ckpt).name.split("-")[-1]) if ckpt else 0


def _evaluate_main(trainer, tokenizer, task: Task, records: list, spec: RunSpec) -> dict:
    """Evaluate on the main process only (the others wait), through the run's colocated vLLM engine when it has one
    (its weights synced to the final policy first, by every rank); HF generate on ZeRO-3 needs every rank."""
    acc = trainer.accelerator
    engine = getattr(getattr(trainer, "vllm_generation", None), "llm", None)
    if engine is not None:
        trainer.vllm_generation.sync_weights()  # collective under ZeRO-3: every rank
        if hasattr(engine, "wake_up") and getattr(trainer.args, "vllm_enable_sleep_mode", False):
            engine.wake_up()
    if acc.num_processes == 1:
        return _evaluate(trainer, tokenizer, task, records, spec, engine=engine)
    zero3 = getattr(getattr(acc.state, "deepspeed_plugin", None), "zero_stage", 0) == 3
    run_here = acc.is_main_process or (zero3 and engine is None)
    result = _evaluate(trainer, tokenizer, task, records, spec, engine=engine) if run_here else {}
    acc.wait_for_everyone()
    return result


class VLLMGenerate:
    """``model.generate`` of HF's interface on a vLLM engine, for :func:`trgrpo.tasks.common.generate_completions`:
    greedy when ``do_sample`` is false (temperature 0), else the given temperature / top-p; left-padded prompts in,
    prompt + completion ids out (completions padded with ``pad_token_id``)."""

    def __init__(self, engine, policy) -> None:
        self.engine, self.policy, self.training = engine, policy, False

    def parameters(self):
        return self.policy.parameters()

    def eval(self):
        return self

    def train(self, mode: bool = True):
        return self

    def generate(
        self,
        input_ids,
        attention_mask,
        max_new_tokens: int,
        do_sample: bool = False,
        num_return_sequences: int = 1,
        pad_token_id: int = 0,
        temperature=None,
        top_p=None,
        **_,
    ):
        import torch
        from vllm import SamplingParams

        ids_masks = zip(input_ids.cpu(), attention_mask.cpu())
        prompts = [{"prompt_token_ids": ids[m.bool()].tolist()} for ids, m in ids_masks]
        params = SamplingParams(
            n=num_return_sequences,
            max_tokens=max_new_tokens,
            temperature=float(temperature or 1.0) if do_sample else 0.0,
            top_p=float(top_p or 1.0) if do_sample else 1.0,
        )
        outputs = self.engine.generate(prompts, sampling_params=params, use_tqdm=False)
        rows = [list(c.token_ids) for o in outputs for c in o.outputs]
        width = input_ids.shape[1]
        out = torch.full((len(rows), width + max(1, max(map(len, rows)))), pad_token_id, dtype=torch.long)
        out[:, :width] = input_ids.cpu().repeat_interleave(num_return_sequences, dim=0)
        for i, r in enumerate(rows):
            out[i, width : width + len(r)] = torch.tensor(r, dtype=torch.long)
        return out


def _evaluate(trainer, tokenizer, task: Task, records: list, spec: RunSpec, engine=None) -> dict:
    model = trainer.accelerator.unwrap_model(trainer.model)
    if engine is not None:  # vLLM batches itself: hand it every prompt at once
        opts = {**spec.task_options, "eval_batch_size": spec.task_options.get("eval_batch_size", 1024)}
        spec = dataclasses.replace(spec, task_options=opts)
        return task.evaluate(VLLMGenerate(engine, model), tokenizer, records, spec)
    was_training = model.training
    model.eval()
    pad_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        return task.evaluate(model, tokenizer, records, spec)
    finally:
        tokenizer.padding_side = pad_side
        model.train(was_training)
