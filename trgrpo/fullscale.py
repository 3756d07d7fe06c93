"""Full-scale runs (paper Section 4, Table 6, App. C.1-C.3): run specs for K&K and math, and launching them.

One device: runs execute in-process through :func:`trgrpo.experiment.run`. Several GPUs: the same specs
are written to a YAML file and ``python -m trgrpo.train`` starts under ``accelerate launch`` with the
DeepSpeed ZeRO configuration in ``configs/``; its log streams into the notebook. No home-made
distributed code.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import yaml

from .experiment import RESULTS_DIR, ROOT, RunSpec, run

# Table 7 sweeps (App. C.1)
TABLE7_TAUS = (0.5, 2.0, 7.0, 9.0, 10.0, 20.0)
TABLE7_RANGES = ((1.0, 1.2), (1.0, 1.4), (0.8, 1.5), (0.5, 1.5))


def short_model_name(model: str) -> str:
    return "embedded" if model in ("embedded", None) else Path(str(model)).name


def kk_specs(
    model: str = "Qwen/Qwen2.5-3B-Instruct",
    *,
    schemes=("equal", "tr", "reverse", "random"),
    seeds=(0,),
    steps: int = 200,
    taus=(),
    ranges=(),
    prompts_per_step: int = 8,
    num_generations: int = 8,
    max_completion_length: int = 4096,
    n_train: int = 5000,
    n_eval_per_size: int = 100,
    n_people=(3, 4, 5, 6, 7),
    placement: str = "ratio",
    tau_mode: str = "scale",
    use_vllm: bool = False,
    bf16: bool = True,
    group: str | None = None,
    **extra,
) -> list[RunSpec]:
    """Table 1/4 runs (one per scheme and seed), plus the Table 7 sweeps over tau and (L, U) for ``tr``."""
    group = group or f"kk/{short_model_name(model)}"
    common = dict(
        task="kk",
        model=model,
        steps=steps,
        prompts_per_step=prompts_per_step,
        num_generations=num_generations,
        max_completion_length=max_completion_length,
        n_train=n_train,
        n_eval=n_eval_per_size * len(n_people),
        placement=placement,
        tau_mode=tau_mode,
        use_vllm=use_vllm,
        bf16=bf16,
        learning_rate=1e-6,
        beta=0.001,
        temperature=0.7,
        task_options={"n_people": list(n_people), "eval_n_people": list(n_people)},
    )
    for key, value in extra.items():
        if key == "task_options":
            common["task_options"] = {**common["task_options"], **value}
        else:
            common[key] = value
    specs = [RunSpec(**common, scheme=s, seed=seed, group=f"{group}/main") for s in schemes for seed in seeds]
    specs += [
        RunSpec(**common, scheme="tr", tau=float(t), seed=seed, group=f"{group}/tau") for t in taus for seed in seeds
    ]
    specs += [
        RunSpec(**common, scheme="tr", lower=float(lo), upper=float(up), seed=seed, group=f"{group}/range")
        for lo, up in ranges
        for seed in seeds
    ]
    return specs


TABLE2_EVAL_SETS = ("olympiadbench", "minerva", "math500", "amc", "aime24")


def math_specs(
    model: str = "Qwen/Qwen2.5-7B",
    *,
    schemes=("equal", "tr"),
    seeds=(0,),
    steps: int = 200,
    train: str = "deepscaler",
    eval_sets=TABLE2_EVAL_SETS,
    prompts_per_step: int = 16,
    num_generations: int = 8,
    max_completion_length: int = 4096,
    n_train: int = 10000,
    n_eval: int = 500,
    sampled_k: int = 16,
    use_vllm: bool = False,
    bf16: bool = True,
    group: str | None = None,
    **extra,
) -> list[RunSpec]:
    """Table 2 runs: base model, binary boxed-answer reward (App. B.1.2), temperature 1.0.

    ``train``: "deepscaler" (DSR), "orz", "generated" (offline arithmetic) or a local parquet/jsonl path;
    ``eval_sets``: hub names of :data:`trgrpo.tasks.math.MATH_HUB`, "generated", or paths.
    """
    group = group or f"math/{short_model_name(model)}/{Path(train).stem}"
    common = dict(
        task="math",
        model=model,
        steps=steps,
        prompts_per_step=prompts_per_step,
        num_generations=num_generations,
        max_completion_length=max_completion_length,
        n_train=n_train,
        n_eval=n_eval,
        use_vllm=use_vllm,
        bf16=bf16,
        learning_rate=1e-6,
        beta=0.001,
        temperature=1.0,
        task_options={"train": train, "eval_sets": list(eval_sets), "sampled_k": sampled_k},
    )
    common.update(extra)
    return [RunSpec(**common, scheme=s, seed=seed, group=group) for s in schemes for seed in seeds]


def n_devices() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001
        return 0


def vllm_available() -> bool:
    import importlib.util

    return n_devices() > 0 and importlib.util.find_spec("vllm") is not None


def write_specs(specs: list[RunSpec], path: Path) -> Path:
    """A YAML file that ``python -m trgrpo.train --config`` reads (base + grid)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    grid = [dataclasses.asdict(s) for s in specs]
    path.write_text(yaml.safe_dump({"base": {}, "grid": grid}, sort_keys=False))
    return path


def launch(
    specs: list[RunSpec],
    *,
    gpus: int | None = None,
    accelerate_config: str = "configs/zero2.yaml",
    results_dir: Path | str | None = None,
    force: bool = False,
    keep_checkpoints: bool = True,
) -> list[dict]:
    """Run specs: in-process on <= 1 device, else under ``accelerate launch`` with streamed logs.

    ``keep_checkpoints=False`` deletes a run's checkpoint folder once its result is written (smoke runs: a
    SmolLM2 checkpoint with its optimizer state is 1.6 GB).

    Returns the result records (read back from ``results/``). Specs whose results exist are skipped unless
    ``force``; a spec with a checkpoint resumes from it.
    """
    import json

    results_dir = Path(results_dir or RESULTS_DIR)
    gpus = n_devices() if gpus is None else gpus
    todo = [s for s in specs if force or not (results_dir / s.group / f"{s.name}.json").exists()]
    print(
        f"{len(specs)} run(s), {len(specs) - len(todo)} already done, {len(todo)} to run on "
        f"{'CPU' if gpus == 0 else f'{gpus} GPU(s)'}",
        flush=True,
    )
    if gpus > 1 and todo:
        cfg = write_specs(todo, ROOT / "runs" / "launch" / f"specs-{os.getpid()}.yaml")
        cmd = [
            "accelerate",
            "launch",
            "--config_file",
            str(ROOT / accelerate_config),
            "--num_processes",
            str(gpus),
            "-m",
            "trgrpo.train",
            "--config",
            str(cfg),
            "--results",
            str(results_dir),
        ] + (["--force"] if force else []) + ([] if keep_checkpoints else ["--no-keep-checkpoints"])
        print("$", " ".join(cmd), flush=True)
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
        if proc.wait() != 0:
            raise RuntimeError(f"accelerate launch failed with exit code {proc.returncode}")
    else:
        for k, spec in enumerate(todo, 1):
            print(f"[{k}/{len(todo)}] {spec.name}", flush=True)
            run(spec, results_dir=results_dir, keep_checkpoints=keep_checkpoints)
    return [
        json.loads((results_dir / s.group / f"{s.name}.json").read_text())
        for s in specs
        if (results_dir / s.group / f"{s.name}.json").exists()
    ]
