"""One run, one entry point: a run spec -> train with TRGRPOTrainer -> evaluate -> ``results/<group>/<run>.json``.

Notebooks (in-process), the CLI (``python -m trgrpo.train --config experiments/x.yaml``), the toy grid
(:func:`trgrpo.pipeline.toy_run.run_toy`) and ``accelerate launch`` for several GPUs all go through :func:`run`, for
every
registered task (:mod:`trgrpo.tasks.registry`). Hyperparameters default to the paper's Table 6 per task
(:class:`trgrpo.pipeline.spec.RunSpec`); every record follows one schema (:mod:`trgrpo.pipeline.records`) and carries
the spec,
per-step metrics, the final evaluation, wall time, peak memory, machine, package versions and the git commit.
It is written once, complete: a caller adds its own fields through ``record_extras``.

A run checkpoints every ``save_steps`` steps (App. B.2: every 20). Started again with the same spec,
it resumes from its last checkpoint and ends with the same metrics as an uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..tasks.paper_tasks import SAMPLED_MATH_SETS  # noqa: F401
from ..tasks.registry import TASKS, Task, register_task  # noqa: F401
from .records import (  # noqa: F401  (re-exported: the record's IO and provenance lived here)
    RESULTS_DIR,
    ROOT,
    RecordError,
    build_record,
    check_folder_name,
    file_lock,
    git_commit,
    git_dirty,
    jsonable,
    load_results,
    machine_info,
    package_versions,
    peak_memory_mb,
    read_record,
    update_json,
    update_marked_block,
    validate_record,
    write_json,
    write_result,
)
from .spec import TEMPERATURES, RunSpec  # noqa: F401

CHECKPOINT_DIR = Path(os.environ.get("TRGRPO_CHECKPOINTS", ROOT / "checkpoints"))


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
        "vllm_importance_sampling": spec.vllm_importance_sampling,
        "ddp_timeout_s": spec.ddp_timeout_s,
        "max_completion_length": spec.max_completion_length,
        "steps": spec.steps,
        "batch_reading": BATCH_READING,
    }


# ---------------------------------------------------------------------------------------------------------------
# Training


def make_config(spec: RunSpec, output_dir: Path, world_size: int | None = None, **overrides):
    """The :class:`TRGRPOConfig` for a spec (Table 6 defaults, logging every step, checkpoints)."""
    import torch

    from ..core.trainer import TRGRPOConfig

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
        ddp_timeout=spec.ddp_timeout_s,
        vllm_importance_sampling_correction=spec.vllm_importance_sampling != "off",
    )
    if spec.vllm_importance_sampling != "off":
        kw["vllm_importance_sampling_mode"] = spec.vllm_importance_sampling
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


def checkpoint_folder(spec: RunSpec, checkpoint_dir: Path | str | None = None) -> Path:
    """``<checkpoints>/<group>/<name>/``, its names checked again (a spec's fields can be reassigned after it is made):
    the ``rmtree`` of ``resume=False`` and ``keep_checkpoints=False`` never leaves the checkpoints root."""
    root = Path(checkpoint_dir or CHECKPOINT_DIR)
    return root / check_folder_name("group", spec.group, nested=True) / check_folder_name("name", spec.name)


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
    record_extras: Callable[[dict], dict] | None = None,
    trainer_ready: Callable[[Any], None] | None = None,
    task: Task | None = None,
) -> dict:
    """Train and evaluate one spec; write its results record once (validated, :mod:`trgrpo.pipeline.records`) and
    return it.

    ``callbacks`` go to the trainer; ``record_extras(record)``, called after the final evaluation, returns fields
    to add to or replace in the record before it is written (declared in
    :data:`trgrpo.pipeline.records.OPTIONAL_FIELDS`);
    ``trainer_ready(trainer)`` sees the trainer once it is built (a callback that evaluates through it); ``task``
    replaces the registered task of ``spec.task`` (data held in objects, e.g.
    :func:`trgrpo.pipeline.search_run.run_search`'s
    records and tool)."""
    import torch
    from transformers import AutoTokenizer

    from ..core.trainer import TRGRPOTrainer
    from .models import resolve_model

    spec = RunSpec.from_dict(spec) if isinstance(spec, dict) else spec
    task = task or TASKS[spec.task]
    model_path = resolve_model(spec.model)
    out_dir = checkpoint_folder(spec, checkpoint_dir)
    if not resume:  # from scratch: no checkpoint of an earlier run may be resumed or outlive this one's rotation
        shutil.rmtree(out_dir, ignore_errors=True)
    ckpt = last_checkpoint(out_dir) if resume else None
    finished = _checkpoint_step(ckpt) >= spec.steps  # killed during the final evaluation: evaluate only
    if _checkpoint_step(ckpt) > spec.steps:
        raise ValueError(
            f"{ckpt} is past the run's last step (steps = {spec.steps}): another spec ran under the name "
            f"{spec.name!r}; start from scratch (resume=False, train --force) or give this run another name"
        )
    t0 = time.time()

    tokenizer = task.tokenizer(model_path, spec) if task.tokenizer else AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    train_ds, eval_records = task.build(spec, tokenizer)
    data_source = task.data_source(spec, train_ds, eval_records) if task.data_source else None
    logs = live_log_dir(spec, results_dir)
    if logs is not None:  # transformers' TensorBoard callback reads it when the trainer is built
        os.environ["TENSORBOARD_LOGGING_DIR"] = str(logs)
        if verbose:
            print(f"[trgrpo] live logs ({spec.report_to}): {logs}")
    out_dir.mkdir(parents=True, exist_ok=True)  # once the data is built: a run that cannot start leaves nothing
    (out_dir / "spec.json").write_text(json.dumps(dataclasses.asdict(spec), indent=1))
    config = make_config(spec, out_dir, **(config_overrides or {}))
    trainer = TRGRPOTrainer(
        model=model_path,
        reward_funcs=task.reward_funcs(spec),
        args=config,
        train_dataset=train_ds,
        processing_class=tokenizer,
        callbacks=callbacks,
        **(task.trainer_kwargs(spec) if task.trainer_kwargs else {}),
    )
    if trainer_ready is not None:
        trainer_ready(trainer)
    if not verbose:  # transformers prints every step's log dict otherwise
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        trainer.remove_callback(PrinterCallback)
        trainer.remove_callback(ProgressCallback)
    initial = None
    if spec.eval_before and spec.n_eval > 0:
        initial = _evaluate(trainer, tokenizer, task, eval_records, spec)
    if ckpt and verbose:
        print(f"[trgrpo] {'evaluating' if finished else 'resuming'} {spec.name} from {ckpt}")
    train_t0 = time.time()
    if finished:  # train() would make one more step; load the last step's weights and log instead
        from transformers import TrainerState

        trainer._load_from_checkpoint(ckpt)
        trainer.state = TrainerState.load_from_json(str(Path(ckpt) / "trainer_state.json"))
    else:
        trainer.train(resume_from_checkpoint=ckpt)
    train_s = time.time() - train_t0
    main_process = trainer.accelerator.is_main_process
    final = _evaluate_main(trainer, tokenizer, task, eval_records, spec) if spec.n_eval > 0 else {}
    history = history_from_log(trainer.state.log_history)
    steps_run = sum(1 for h in history if h["step"] > _checkpoint_step(ckpt))  # this process's steps only
    layout = batch_layout(spec, trainer.accelerator.num_processes)
    record = build_record(
        name=spec.name,
        group=spec.group,
        task=spec.task,
        scheme=spec.scheme,
        seed=spec.seed,
        model=spec.model,
        steps=spec.steps,
        spec=dataclasses.asdict(spec),
        history=history,
        initial=initial,
        final=final,
        train_time_s=train_s,
        steps_run=steps_run,
        t0=t0,
        data_source=data_source,
        batch={**layout, "trl_generation_batch_size": trainer.args.generation_batch_size, "reading": BATCH_READING},
        resumed_from=ckpt,
        live_logs=str(logs) if logs is not None else None,
    )
    if record_extras is not None:  # the caller's own fields (the toy: held-out curve, warm start, CPU time)
        record.update(record_extras(record))
    path = write_result(spec.group, spec.name, record, results_dir) if main_process else None
    if verbose and main_process:
        acc = final.get("accuracy")
        print(
            f"[trgrpo] {spec.name}: {len(history)} steps, final accuracy "
            f"{'n/a' if acc is None else f'{acc:.3f}'}, {record['wall_time_s']:.0f} s -> {path}"
        )
    if not keep_checkpoints:
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
    if task.evaluate_with_trainer:  # rollouts through the trainer's own generation (search: its tool loop)
        return task.evaluate(trainer, tokenizer, records, spec)
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
