"""GRPO vs TR-GRPO on SmolLM2 as one device job (``scripts/device_grid.py`` installs its wheels and calls these;
plan ``results/leverage/device_plan.yaml``): every run of a seed pair draws its step's rollouts after reseeding from
(seed, step), the untouched model is evaluated once for all, no run writes a checkpoint, a timing run on every worker
sizes the pairs that fit the budget, and each finished run's record is appended to one file as it ends."""

from __future__ import annotations

import concurrent.futures as cf
import json
import math
import multiprocessing
import os
import shutil
import time
from pathlib import Path

NO_CHECKPOINT = {"save_strategy": "no", "disable_tqdm": True}
SCRATCH = Path("/tmp/device_grid_runs")  # the runs' output_dir: spec.json and a lock, never a checkpoint
SUMMARY_FILE, TIMING_FILE = "device_grid.json", "timing.json"  # the runs and step 0: records.RUNS_FILE, STEP0_FILE


def load_plan(path: str, overrides: dict, seeds: list[int] | None) -> dict:
    """The plan with ``overrides`` on its ``base`` and ``seeds`` instead of its own; each spec checked."""
    from trgrpo.runs import lm_science
    from trgrpo.runs.spec import read_config

    plan = read_config(path, "plan")  # a missing, empty or bad file: a ConfigError naming it
    if not {"group", "seeds", "arms", "base"} <= set(plan):
        raise ValueError(f"plan {path}: needs group, seeds, arms and base")
    plan["base"] = {**plan["base"], **overrides, "eval_before": False}  # step 0 is evaluated once, shared
    if seeds is not None:
        plan["seeds"] = seeds
    lm_science.grid_specs(plan)  # every run's spec, checked before anything runs
    return plan


def step_seed(seed: int, step: int) -> int:
    """The RNG seed of a run's step: a function of (seed, step) alone, so both arms draw the same rollouts."""
    import numpy as np

    return int(np.random.SeedSequence([seed, step]).generate_state(1)[0])


def reseed_callback(seed: int):
    """A TrainerCallback that reseeds torch (every device) at the start of each optimizer step, before TRL generates
    that step's rollouts (``transformers/trainer.py:1830``: ``on_step_begin`` precedes the step's first micro-batch)."""
    import torch
    from transformers import TrainerCallback

    class Reseed(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            torch.manual_seed(step_seed(seed, state.global_step))

    return Reseed()


def _worker_setup() -> None:
    import torch

    torch.set_num_threads(1)
    if torch.cuda.is_available():
        torch.set_float32_matmul_precision("high")  # TF32 matmuls: fp32 weights, tensor-core speed


def _one(spec_dict: dict, results: str, deadline: float) -> dict:
    """One run in a worker process (skipped when it would end past ``deadline``): its record (None when skipped),
    name, seconds, and the checkpoints its output folder held when it ended (none: ``NO_CHECKPOINT``)."""
    from trgrpo.runs.checkpoints import checkpoint_folder
    from trgrpo.runs.experiment import run
    from trgrpo.runs.spec import RunSpec

    if time.time() > deadline:
        return {"name": spec_dict["name"], "ran": False, "record": None}
    _worker_setup()
    spec, scratch = RunSpec.from_dict(spec_dict), SCRATCH / str(os.getpid())
    t0 = time.time()
    rec = run(
        spec,
        results_dir=Path(results),
        checkpoint_dir=scratch,
        callbacks=[reseed_callback(spec.seed)],
        config_overrides=NO_CHECKPOINT,
        keep_checkpoints=True,  # looked at below, then removed
        verbose=False,
    )
    saved = sorted(p.name for p in checkpoint_folder(spec, scratch).glob("checkpoint-*"))
    shutil.rmtree(scratch, ignore_errors=True)
    return {"name": spec.name, "ran": True, "seconds": time.time() - t0, "checkpoints": saved, "record": rec}


def _step0(spec_dict: dict) -> dict:
    """The held-out evaluation of the untouched model, shared by every run (greedy, the plan's items)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trgrpo.models import resolve_model
    from trgrpo.runs.spec import RunSpec
    from trgrpo.tasks import get_task

    _worker_setup()
    spec = RunSpec.from_dict(spec_dict)
    task, path = get_task(spec.task), resolve_model(spec.model)
    tok = task.tokenizer(path, spec) if task.tokenizer else AutoTokenizer.from_pretrained(path)
    tok.pad_token = tok.pad_token or tok.eos_token
    _, records = task.build(spec, tok)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path).to("cuda" if torch.cuda.is_available() else "cpu").eval()
    return {"kind": "device_step0", "step": 0, "n_eval": spec.n_eval, **task.evaluate(model, tok, records, spec)}


def _pool(workers: int) -> cf.ProcessPoolExecutor:
    return cf.ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))


def timing(plan: dict, *, workers: int, steps: int, budget_s: float, results: Path) -> dict:
    """``steps``-step runs of the plan's arms on every worker at once (each with its final evaluation): seconds per
    step and per run while ``workers`` share the device, and the seed pairs that fit ``budget_s``."""
    from trgrpo.runs import lm_science

    specs = lm_science.grid_specs({**plan, "seeds": list(range(-(-workers // len(plan["arms"]))))})[:workers]
    specs = [s.replace(steps=steps, group="timing", name=f"timing-{i}") for i, s in enumerate(specs)]
    shutil.rmtree(results / "timing", ignore_errors=True)  # timed anew each time
    t0 = time.time()
    with _pool(workers) as pool:
        done = list(pool.map(_one, [s.model_dump() for s in specs], [str(results)] * workers, [math.inf] * workers))
    per_step = max(d["record"]["train_time_s"] for d in done) / steps
    rest = max(d["seconds"] - d["record"]["train_time_s"] for d in done)  # loading, data, the final evaluation
    run_s = rest + plan["base"]["steps"] * per_step
    waves = max(0, int((budget_s - rest) // run_s))  # every worker busy with one run per wave; step 0 ~ one rest
    return {
        "workers": workers,
        "timing_steps": steps,
        "wall_s": time.time() - t0,
        "seconds_per_step": per_step,
        "seconds_outside_training": rest,
        "run_s": run_s,
        "budget_s": budget_s,
        "pairs": waves * workers // len(plan["arms"]),
    }


def run_grid(
    plan: dict, out: Path, results: Path, *, workers: int, budget_s: float, run_s: float, plan_path: str
) -> dict:
    """The shared step-0 evaluation (``out/step0.json``), then every run of ``plan`` without a record in
    ``results``, seed-major, ``workers`` at a time, none started that would end after ``budget_s`` (a run takes
    ``run_s``). Each finished run's record is appended to ``out/runs.jsonl`` and ``out/device_grid.json`` rewritten
    (the device returns at most 8 files: one line per run, not one file)."""
    import torch

    from trgrpo.files import machine_info, provenance
    from trgrpo.models import embedded_model_path
    from trgrpo.runs import lm_science
    from trgrpo.runs.records import RUNS_FILE, STEP0_FILE, record_path

    t0 = time.time()
    if plan["base"].get("model") in (None, "embedded"):
        embedded_model_path()  # converted once, before the workers race for it
    specs = lm_science.grid_specs(plan)
    todo = [s for s in specs if not record_path(s.group, s.name, results).exists()]
    summary = {
        "kind": "device_grid",
        "plan": plan_path,
        "group": plan["group"],
        "seeds": plan["seeds"],
        "arms": [a["id"] for a in plan["arms"]],
        "base": plan["base"],
        "precision": "tf32" if torch.cuda.is_available() else "fp32",
        "workers": workers,
        "budget_s": budget_s,
        "runs": [],
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "machine": machine_info(),
        **provenance(),
    }

    def write() -> None:
        summary.update(n_ran=sum(d["ran"] for d in summary["runs"]), wall_time_s=time.time() - t0)
        (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=1))

    with _pool(workers) as pool:
        if todo and not (out / STEP0_FILE).exists():
            step0 = pool.submit(_step0, specs[0].model_dump()).result()
            (out / STEP0_FILE).write_text(json.dumps(step0, indent=1))
        deadline = t0 + budget_s - run_s
        futures = [pool.submit(_one, s.model_dump(), str(results), deadline) for s in todo]  # seed-major order
        for f in cf.as_completed(futures):
            done = f.result()
            if (rec := done.pop("record")) is not None:
                with open(out / RUNS_FILE, "a") as fh:
                    fh.write(json.dumps(rec) + "\n")
            summary["runs"].append(done)
            write()
    write()
    return summary
