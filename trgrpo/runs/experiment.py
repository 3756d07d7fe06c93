"""One run, :func:`run`: make the config -> build the trainer (:class:`trgrpo.TRGRPOTrainer`) -> train (resuming
from the last complete checkpoint) -> evaluate -> record (``results/<group>/<name>.json``, :mod:`trgrpo.runs.records`).
A task adds fields through ``run(..., record_extras=...)``."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trgrpo.files import RESULTS_DIR, peak_memory, provenance, write_json
from trgrpo.runs.checkpoints import (
    _checkpoint_step,
    check_run_folders,
    check_writable,
    checkpoint_folder,
    disk_full,
    engine,
    last_checkpoint,
    live_log_dir,
    memory_changes,
    run_lock,
    writing,
)
from trgrpo.runs.records import RUN_KIND, record_path, write_result
from trgrpo.runs.spec import BATCH_READING, RunSpec, batch_layout, env_world_size, vllm_max_model_length
from trgrpo.tasks import Task, get_task
from trgrpo.weights import WeightParams

WEIGHT_FIELDS = (*WeightParams.model_fields, "placement")  # -> TRGRPOConfig.weight_<field>


def make_config(spec: RunSpec, output_dir: Path, world_size: int | None = None, **overrides):
    """The :class:`TRGRPOConfig` of a spec."""
    import torch

    from trgrpo.trainer import TRGRPOConfig

    cuda = torch.cuda.is_available()
    layout = batch_layout(spec, env_world_size() if world_size is None else world_size)
    # a RunSpec field named as a TRGRPOConfig field (RunSpec's docstring) passes as it is unless set here
    shared = {k: getattr(spec, k) for k in RunSpec.model_fields if k in TRGRPOConfig.__dataclass_fields__}
    kw = dict(
        shared,
        output_dir=str(output_dir),
        data_seed=spec.seed,
        max_steps=spec.steps,
        per_device_train_batch_size=layout["per_device_train_batch_size"],
        gradient_accumulation_steps=layout["gradient_accumulation_steps"],
        steps_per_generation=layout["steps_per_generation"],
        temperature=spec.sampling_temperature,
        **{f"weight_{k}": getattr(spec, k) for k in WEIGHT_FIELDS},
        logging_steps=1,
        save_strategy="steps",
        save_total_limit=1,  # resuming needs only the last checkpoint
        save_only_model=False,
        use_cpu=not cuda,
        bf16=spec.bf16 and cuda,
        disable_tqdm=False,
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
        )
    kw.update(overrides)
    return TRGRPOConfig(**kw)


class TrainClock:
    """Training seconds (from the start of the first step this process trains to the end of its last: not model
    loading, set-up or evaluation) and the training process's peak memory, carried over restarts: saved into each
    checkpoint, read back when one is resumed (Table 8 times training alone, resumed or not)."""

    FILE = "trgrpo_train_time.json"

    def __init__(self, ckpt: str | None) -> None:
        path = Path(ckpt) / self.FILE if ckpt else None
        saved = json.loads(path.read_text()) if path and path.exists() else {}
        self.before = saved.get("train_time_s", 0.0)
        self.peak = saved.get("peak_memory")  # of the process that trained up to the checkpoint
        self.t0: float | None = None
        self.t1: float | None = None

    def total(self) -> float:
        return self.before if self.t0 is None else self.before + (self.t1 or time.time()) - self.t0

    def callback(self):
        """The run's callback: the clock started when training starts and saved into each checkpoint;
        :class:`_Finished` once train() has loaded a checkpoint of the last step."""
        from transformers import TrainerCallback

        clock = self

        class RunClock(TrainerCallback):
            def on_train_begin(self, args, state, control, **kw):
                if state.global_step >= state.max_steps:  # train() has loaded the weights and optimizer (any engine)
                    raise _Finished
                clock.t0 = time.time()

            def on_train_end(self, args, state, control, **kw):
                clock.t1 = time.time()

            def on_save(self, args, state, control, **kw):
                if state.is_world_process_zero:
                    ckpt = Path(args.output_dir) / f"checkpoint-{state.global_step}"
                    write_json(ckpt / clock.FILE, {"train_time_s": clock.total(), "peak_memory": peak_memory()})

        return RunClock()


def history_from_log(log_history: list[dict]) -> list[dict]:
    """One dict per optimizer step (TRL logs every step with ``logging_steps=1``)."""
    return [
        {k: v for k, v in h.items() if isinstance(v, (int, float))} for h in log_history if "loss" in h and "step" in h
    ]


class _Finished(Exception):
    """Raised once train() has loaded a checkpoint of the run's last step: evaluate, no further step."""


def build_trainer(
    spec: RunSpec,
    task: Task,
    output_dir: Path,
    *,
    callbacks: list | None = None,
    config_overrides: dict | None = None,
    world_size: int | None = None,
    verbose: bool = True,
):
    """(trainer, tokenizer, eval records, data source) of a spec on its task's data, rewards and tokenizer."""
    from transformers import AutoTokenizer

    from trgrpo.models import resolve_model
    from trgrpo.trainer import TRGRPOTrainer

    model_path = resolve_model(spec.model)
    tokenizer = task.tokenizer(model_path, spec) if task.tokenizer else AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    train_ds, eval_records = task.build(spec, tokenizer)
    data_source = task.data_source(spec, train_ds, eval_records) if task.data_source else None
    overrides = {**(task.config(spec) if task.config else {}), **(config_overrides or {})}
    config = make_config(spec, output_dir, world_size, **overrides)
    trainer = TRGRPOTrainer(
        model=model_path,
        reward_funcs=task.reward_funcs(spec),
        args=config,
        train_dataset=train_ds,
        processing_class=tokenizer,
        callbacks=callbacks,
        **(task.trainer_kwargs(spec) if task.trainer_kwargs else {}),
    )
    if not verbose:  # transformers prints every step's log dict otherwise
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        trainer.remove_callback(PrinterCallback)
        trainer.remove_callback(ProgressCallback)
    return trainer, tokenizer, eval_records, data_source


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
    trainer_ready: Callable[[Any, list], None] | None = None,
) -> dict:
    """Train (resuming from the last checkpoint) and evaluate one spec; write its record once and return it.
    Hooks: ``trainer_ready(trainer, eval_records)``, ``record_extras(record) -> fields``."""
    import torch

    spec = RunSpec.from_dict(spec) if isinstance(spec, dict) else spec
    task = get_task(spec.task)
    out_dir = checkpoint_folder(spec, checkpoint_dir)
    run_engine = engine()
    if resume:  # checkpoints of another spec or engine are never resumed
        check_run_folders(spec, run_engine, checkpoint_dir)
    changed = memory_changes(spec, checkpoint_dir) if resume else {}
    logs = live_log_dir(spec, results_dir)
    check_writable(Path(results_dir or RESULTS_DIR), out_dir, *([logs] if logs else []))
    with run_lock(out_dir):
        if not resume:  # from scratch: no checkpoint of an earlier run may be resumed or outlive this one's rotation
            shutil.rmtree(out_dir, ignore_errors=True)
        ckpt = last_checkpoint(out_dir, verbose) if resume else None
        start_step = _checkpoint_step(ckpt)
        finished = start_step >= spec.steps  # killed during the final evaluation: evaluate only
        t0 = time.time()
        if logs is not None:  # transformers' TensorBoard callback reads it when the trainer is built
            os.environ["TENSORBOARD_LOGGING_DIR"] = str(logs)
            if verbose:
                print(f"[trgrpo] live logs ({spec.report_to}): {logs}")
        clock = TrainClock(ckpt)
        trainer, tokenizer, eval_records, data_source = build_trainer(
            spec,
            task,
            out_dir,
            callbacks=[*(callbacks or []), clock.callback()],
            config_overrides=config_overrides,
            verbose=verbose,
        )
        out_dir.mkdir(parents=True, exist_ok=True)  # once the data is built: a run that cannot start leaves nothing
        if not (out_dir / "spec.json").exists():  # the spec a checkpoint was trained with is never overwritten
            with writing(out_dir / "spec.json"):
                write_json(out_dir / "spec.json", {"spec": spec.model_dump(), "engine": run_engine})
        if task.trainer_ready is not None:
            task.trainer_ready(trainer, spec)
        if trainer_ready is not None:
            trainer_ready(trainer, eval_records)
        initial = None
        if spec.eval_before and spec.n_eval > 0:  # as the final one: the main process, through vLLM when there
            initial = _evaluate_main(trainer, tokenizer, task, eval_records, spec)
        if ckpt and verbose:
            print(f"[trgrpo] {'evaluating' if finished else 'resuming'} {spec.name} from {ckpt}")
        try:
            trainer.train(resume_from_checkpoint=ckpt)
        except _Finished:  # the checkpoint of the last step is loaded: evaluate only
            pass
        except (OSError, RuntimeError) as e:
            if (full := disk_full(e, trainer, out_dir)) is None:
                raise
            raise full from None
        main_process = trainer.accelerator.is_main_process
        final = _evaluate_main(trainer, tokenizer, task, eval_records, spec) if spec.n_eval > 0 else {}
        history = history_from_log(trainer.state.log_history)
        steps_run = sum(1 for h in history if h["step"] > start_step)  # this process's steps only
        train_time = clock.total()  # a finished run's loading and evaluation are no training
        layout = batch_layout(spec, trainer.accelerator.num_processes)
        record = {
            "kind": RUN_KIND,
            **{k: getattr(spec, k) for k in ("name", "group", "task", "scheme", "seed", "model", "steps")},
            "spec": spec.model_dump(),
            "engine": run_engine,
            "history": history,
            "initial": initial,
            "final": final,
            "data_source": data_source,
            "batch": {
                **layout,
                "trl_generation_batch_size": trainer.args.generation_batch_size,
                "reading": BATCH_READING,
            },
            "resumed_from": ckpt,
            "changed_on_resume": changed,
            "live_logs": str(logs) if logs is not None else None,
            "train_time_s": train_time,
            "seconds_per_step": train_time / max(1, len(history)),
            "steps_run": steps_run,
            "wall_time_s": time.time() - t0,
            **provenance(),
        }
        if not steps_run and clock.peak:  # a finished restart only evaluated: training's peak is the checkpoint's
            record["peak_memory"] = clock.peak
        if task.record_extras is not None:
            record.update(task.record_extras(trainer, record, spec))
        if record_extras is not None:  # the caller's own fields (the toy: held-out curve, warm start, CPU time)
            record.update(record_extras(record))
        with writing(record_path(spec.group, spec.name, results_dir)):
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


def run_pending(specs: Sequence[RunSpec], run_one: Callable, *, results_dir=None, force=False, **bar) -> list[RunSpec]:
    """``run_one(spec)`` for each spec without a record (:func:`~trgrpo.runs.records.record_path`; all with ``force``),
    in order, a tqdm bar counting them (``bar``: its ``desc``, ``disable``); returns the specs it ran."""
    from tqdm.auto import tqdm

    todo = [s for s in specs if force or not record_path(s.group, s.name, results_dir).exists()]
    with tqdm(todo, **bar) as progress:
        for spec in progress:
            progress.set_postfix_str(spec.name)
            run_one(spec)
    return todo


def _evaluate_main(trainer, tokenizer, task: Task, records: list, spec: RunSpec) -> dict:
    """Evaluate on the main process (others wait), through the colocated vLLM engine when there is one."""
    acc = trainer.accelerator
    engine = getattr(getattr(trainer, "vllm_generation", None), "llm", None)
    if engine is not None:
        trainer.vllm_generation.sync_weights()  # collective under ZeRO-3: every rank
        if hasattr(engine, "wake_up") and getattr(trainer.args, "vllm_enable_sleep_mode", False):
            engine.wake_up()
    zero3 = getattr(getattr(acc.state, "deepspeed_plugin", None), "zero_stage", 0) == 3
    # every rank when the evaluation collects across ranks (ZeRO-3's HF generate, TRL's rollouts of a tool task)
    run_here = acc.is_main_process or (zero3 and engine is None) or task.evaluate_with_trainer
    result = _evaluate(trainer, tokenizer, task, records, spec, engine=engine) if run_here else {}
    acc.wait_for_everyone()
    return result


class VLLMGenerate:
    """HF's ``model.generate`` on a vLLM engine: left-padded prompts in, prompt + completion ids out."""

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
        spec = spec.replace(task_options={"eval_batch_size": 1024, **spec.task_options})
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
