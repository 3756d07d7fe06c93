"""One run, one entry point: a run spec -> train with TRGRPOTrainer -> evaluate -> ``results/<group>/<run>.json``.

Notebooks (in-process), the CLI (``python -m trgrpo.train --config experiments/x.yaml``) and
``accelerate launch`` for several GPUs all go through :func:`run`. Hyperparameters default to the
paper's Table 6 per task; every record carries the spec, per-step metrics, the final evaluation,
wall time, peak memory, machine, package versions and the git commit.

A run checkpoints every ``save_steps`` steps (App. B.2: every 20). Started again with the same spec,
it resumes from its last checkpoint and ends with the same metrics as an uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Callable
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
    n_train: int = 1000
    n_eval: int = 100
    eval_before: bool = False
    save_steps: int = 20
    use_vllm: bool = False
    bf16: bool = False
    gradient_checkpointing: bool = False
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
        )
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
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown run-spec field(s) {unknown}; known: {sorted(known)}")
        return cls(**d)


# ---------------------------------------------------------------------------------------------------------------
# Tasks: each provides data, reward functions and an evaluation. Others (toy, search) register their own.


@dataclass
class Task:
    """A task family: ``build(spec, tokenizer)`` -> (train dataset, eval records); rewards; evaluation."""

    build: Callable[[RunSpec, Any], tuple[Any, list]]
    reward_funcs: Callable[[RunSpec], list]
    evaluate: Callable[[Any, Any, list, RunSpec], dict]


TASKS: dict[str, Task] = {}


def register_task(name: str, task: Task) -> None:
    TASKS[name] = task


def _kk_build(spec: RunSpec, tokenizer):
    from .tasks import kk

    opts = spec.task_options
    n_people = opts.get("n_people", (3, 4, 5, 6, 7))
    eval_people = opts.get("eval_n_people", n_people)
    train, _ = kk.kk_splits(spec.n_train, 0, n_people=n_people, seed=spec.seed if opts.get("seed_data") else 0)
    _, test = kk.kk_splits(spec.n_train, spec.n_eval, n_people=eval_people, seed=0)
    train_keys = {r["quiz"] for r in train}
    test = [r for r in test if r["quiz"] not in train_keys]
    prefill = bool(opts.get("prefill_think", False))
    # TRL always adds a generation prompt to chat prompts: a pre-filled <think> needs text prompts.
    ds = kk.kk_dataset(train, prefill_think=prefill, tokenizer=tokenizer if prefill else None)
    return ds, test


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


register_task("kk", Task(_kk_build, _kk_rewards, _kk_eval))
register_task("math", Task(_math_build, _math_rewards, _math_eval))
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


def write_json(path: Path | str, record: dict) -> Path:
    """Write ``record`` as JSON atomically (a temporary file, then a rename): an interrupted write loses nothing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(jsonable(record), indent=1, sort_keys=False))
    tmp.replace(path)
    return path


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
# Training


def make_config(spec: RunSpec, output_dir: Path, **overrides):
    """The :class:`TRGRPOConfig` for a spec (Table 6 defaults, logging every step, checkpoints)."""
    import torch

    from .trainer import TRGRPOConfig

    cuda = torch.cuda.is_available()
    kw = dict(
        output_dir=str(output_dir),
        seed=spec.seed,
        data_seed=spec.seed,
        max_steps=spec.steps,
        per_device_train_batch_size=spec.prompts_per_step * spec.num_generations // spec.gradient_accumulation_steps,
        gradient_accumulation_steps=spec.gradient_accumulation_steps,
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
        report_to="none",
        use_cpu=not cuda,
        bf16=spec.bf16 and cuda,
        disable_tqdm=False,
        gradient_checkpointing=spec.gradient_checkpointing,
        use_vllm=spec.use_vllm,
        dataloader_num_workers=0,
        lr_scheduler_type="constant",
    )
    if spec.use_vllm:
        kw.update(vllm_mode="colocate")
    kw.update(overrides)
    return TRGRPOConfig(**kw)


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
        print(f"[trgrpo] resuming {spec.name} from {ckpt}", file=sys.stderr)
    train_t0 = time.time()
    trainer.train(resume_from_checkpoint=ckpt)
    train_s = time.time() - train_t0
    final = _evaluate(trainer, tokenizer, task, eval_records, spec) if spec.n_eval > 0 else {}
    history = history_from_log(trainer.state.log_history)
    record = {
        "name": spec.name,
        "group": spec.group,
        "task": spec.task,
        "scheme": spec.scheme,
        "seed": spec.seed,
        "model": spec.model,
        "steps": spec.steps,
        "spec": dataclasses.asdict(spec),
        "history": history,
        "initial": initial,
        "final": final,
        "train_time_s": train_s,
        "seconds_per_step": train_s / max(1, len(history)),
        "wall_time_s": time.time() - t0,
        "peak_memory": peak_memory_mb(),
        "resumed_from": ckpt,
        "machine": machine_info(),
        "versions": package_versions(),
        "git_commit": git_commit(),
        "git_dirty": git_dirty(),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    main_process = trainer.accelerator.is_main_process
    path = write_result(spec.group, spec.name, record, results_dir) if main_process else None
    if verbose and main_process:
        acc = final.get("accuracy")
        print(
            f"[trgrpo] {spec.name}: {len(history)} steps, final accuracy "
            f"{'n/a' if acc is None else f'{acc:.3f}'}, {record['wall_time_s']:.0f} s -> {path}",
            file=sys.stderr,
        )
    if not keep_checkpoints:
        import shutil

        shutil.rmtree(out_dir, ignore_errors=True)
    del trainer
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return record


def _evaluate(trainer, tokenizer, task: Task, records: list, spec: RunSpec) -> dict:
    model = trainer.accelerator.unwrap_model(trainer.model)
    was_training = model.training
    model.eval()
    pad_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        return task.evaluate(model, tokenizer, records, spec)
    finally:
        tokenizer.padding_side = pad_side
        model.train(was_training)
