"""One agentic-search run (paper Table 3): a :class:`trgrpo.TRGRPOTrainer` with the search tool, TR-GRPO or GRPO
from a (warm-started) model, greedy EM before and after, ``results/<group>/<name>.json``.

The task itself (retrievers, tool, prompts, reward, evaluation) lives in :mod:`trgrpo.tasks.search`; this
run loop sits outside ``tasks/`` because it builds the trainer (a task never imports it)."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .tasks.search_eval import evaluate_search, trl_rollouts
from .tasks.search_micro import load_tokenizer
from .tasks.search_prompts import search_dataset
from .tasks.search_render import rollout_text
from .tasks.search_reward import search_reward

# ---------------------------------------------------------------------------------------------------------------
# TRL's tool loop for training and evaluation


def make_search_trainer(
    model: str,
    train_records: Sequence[dict[str, Any]],
    tool: Callable[..., str],
    *,
    output_dir: str | os.PathLike,
    scheme: str = "tr",
    steps: int = 10,
    prompts_per_step: int = 2,
    num_generations: int = 8,
    temperature: float = 0.8,
    learning_rate: float = 1e-6,
    max_completion_length: int = 4096,
    max_tool_calls: int = 4,
    seed: int = 0,
    template: str = "auto",
    callbacks: list | None = None,
    quiet: bool = True,
    **config: Any,
):
    """A :class:`trgrpo.TRGRPOTrainer` with the search tool (Eq. 14 reward, Table 6 search settings by default:
    G = 8, temperature 0.8, lr 1e-6, beta 0.001, clip 0.20/0.24, max response 4096)."""
    import torch

    from .models import resolve_model
    from .trainer import TRGRPOConfig, TRGRPOTrainer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    path = resolve_model(model)
    tokenizer = load_tokenizer(path, template)
    cuda = torch.cuda.is_available()
    kw = dict(
        output_dir=str(output_dir),
        seed=seed,
        data_seed=seed,
        max_steps=steps,
        per_device_train_batch_size=prompts_per_step * num_generations,
        num_generations=num_generations,
        max_completion_length=max_completion_length,
        max_tool_calling_iterations=max_tool_calls,
        temperature=temperature,
        learning_rate=learning_rate,
        weight_scheme=scheme,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=not cuda,
        disable_tqdm=True,
        dataloader_num_workers=0,
        lr_scheduler_type="constant",
    )
    kw.update(config)
    trainer = TRGRPOTrainer(
        model=path,
        reward_funcs=[search_reward],
        args=TRGRPOConfig(**kw),
        train_dataset=search_dataset(train_records),
        processing_class=tokenizer,
        tools=[tool],
        callbacks=callbacks,
    )
    if quiet:  # the per-step log dicts stay in trainer.state.log_history (and the results file)
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)
    return trainer


# ---------------------------------------------------------------------------------------------------------------
# One run: TR-GRPO or GRPO from a (warm-started) model, results/<group>/<name>.json


@dataclass
class SearchSpec:
    """One search run. Defaults follow Table 6's search column (G = 8, temperature 0.8, lr 1e-6, response
    4096) on the paper's model; a CPU toy shrinks them explicitly."""

    scheme: str = "tr"
    seed: int = 0
    model: str = "Qwen/Qwen2.5-3B"
    init_model: str | None = None  # the warm-started checkpoint, if any (else ``model``)
    steps: int = 200
    prompts_per_step: int = 4
    num_generations: int = 8
    temperature: float = 0.8
    learning_rate: float = 1e-6
    max_completion_length: int = 4096
    max_tool_calls: int = 4
    retriever: str = "bm25"
    top_k: int = 3
    template: str = "auto"  # chat template: "auto" (the model's own if it renders tools, else Qwen2.5), "compact"
    corpus: str = "synthetic"
    corpus_seed: int = 0
    scale: str = "full"
    group: str = "search"
    name: str | None = None
    config: dict = field(default_factory=dict)  # extra TRGRPOConfig fields (weight_placement, beta, use_vllm, ...)

    def __post_init__(self) -> None:
        from .weights import validate_weight_params

        validate_weight_params(scheme=self.scheme)  # built-in or registered (weights.register_scheme)
        for name in ("steps", "prompts_per_step", "num_generations", "max_completion_length", "max_tool_calls"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.num_generations < 2:
            raise ValueError("num_generations must be >= 2 (Eq. 4 needs a group)")
        if self.name is None:
            self.name = f"search-{Path(str(self.model)).name}-{self.scheme}-seed{self.seed}"


SCHEME_LABELS = {"equal": "GRPO", "tr": "TR-GRPO", "reverse": "Reverse", "random": "Random"}


def _eval_callback(records: list[dict[str, Any]], every: int):
    """A callback that evaluates greedy EM every ``every`` steps (the EM curve); its ``trainer`` is set later."""
    from transformers import TrainerCallback

    class EvalCallback(TrainerCallback):
        def __init__(self) -> None:
            self.trainer, self.points = None, []

        def on_step_end(self, args, state, control, **kwargs):
            if self.trainer is not None and state.global_step % every == 0:
                self.points.append({"step": state.global_step, "em": evaluate_search(self.trainer, records)["em"]})

    return EvalCallback()


def run_search(
    spec: SearchSpec,
    *,
    train_records: Sequence[dict[str, Any]],
    eval_records: Sequence[dict[str, Any]],
    tool: Callable[..., str],
    initial: dict[str, Any] | None = None,
    baseline: dict[str, Any] | None = None,
    warm_start_info: dict[str, Any] | None = None,
    eval_every: int = 0,
    results_dir: str | os.PathLike | None = None,
    checkpoint_dir: str | os.PathLike | None = None,
    verbose: bool = True,
) -> dict[str, Any]:
    """Train one scheme with TRL's tool loop, evaluate greedy EM before/after, write
    ``results/<group>/<name>.json`` (scheme, seed, model, steps, history with reward/grad_norm/em, final
    with em/accuracy per type, wall time, machine). ``initial`` skips the evaluation before training when
    it is already known (the same start for every scheme)."""
    import shutil

    import torch

    from .experiment import CHECKPOINT_DIR, history_from_log
    from .records import build_record, write_result

    t0 = time.time()
    out_dir = Path(checkpoint_dir or CHECKPOINT_DIR) / spec.group / spec.name
    out_dir.mkdir(parents=True, exist_ok=True)
    callback = _eval_callback(list(eval_records), eval_every) if eval_every else None
    torch.manual_seed(spec.seed)
    trainer = make_search_trainer(
        spec.init_model or spec.model,
        train_records,
        tool,
        output_dir=out_dir,
        scheme=spec.scheme,
        steps=spec.steps,
        prompts_per_step=spec.prompts_per_step,
        num_generations=spec.num_generations,
        temperature=spec.temperature,
        learning_rate=spec.learning_rate,
        max_completion_length=spec.max_completion_length,
        max_tool_calls=spec.max_tool_calls,
        seed=spec.seed,
        template=spec.template,
        callbacks=[callback] if callback else None,
        **spec.config,
    )
    if callback is not None:
        callback.trainer = trainer
    if initial is None:
        initial = evaluate_search(trainer, eval_records)
    train_t0 = time.time()
    trainer.train()
    train_s = time.time() - train_t0
    final = evaluate_search(trainer, eval_records)
    history = history_from_log(trainer.state.log_history)
    for h in history:
        if "reward" in h:
            h["em"] = (h["reward"] + 1.0) / 2.0  # Eq. 14 rewards are +-1: the training EM of the step's rollouts
    eval_curve = [{"step": 0, "em": initial["em"]}]
    eval_curve += callback.points if callback else []
    if not eval_curve or eval_curve[-1]["step"] != spec.steps:
        eval_curve.append({"step": spec.steps, "em": final["em"]})
    example = trl_rollouts(trainer, list(eval_records[:1]), greedy=True)[0] if eval_records else None
    record = build_record(
        name=spec.name,
        group=spec.group,
        task="search",
        scheme=spec.scheme,
        seed=spec.seed,
        model=spec.model,
        steps=spec.steps,
        spec=dataclasses.asdict(spec),
        history=history,
        initial=initial,
        final=final,
        train_time_s=train_s,
        steps_run=len(history),
        t0=t0,
        method=SCHEME_LABELS.get(spec.scheme, spec.scheme),
        init_model=spec.init_model,
        scale=spec.scale,
        eval_curve=eval_curve,
        baseline_no_search=baseline,
        warm_start={k: v for k, v in (warm_start_info or {}).items() if k != "losses"} or None,
        example_rollout=None
        if example is None
        else {
            "question": example["record"]["question"],
            "answers": example["record"]["answers"],
            "completion_ids": example["completion_ids"],
            "tool_mask": example["tool_mask"],
            "text": rollout_text(trainer.processing_class, example),
            "em": example["em"],
        },
        n_train=len(train_records),
        n_eval=len(eval_records),
    )
    path = write_result(spec.group, spec.name, record, results_dir)
    if verbose:
        print(
            f"[search] {spec.name}: EM {initial['em']:.3f} -> {final['em']:.3f} in {len(history)} steps, "
            f"{record['wall_time_s']:.0f} s -> {path}"
        )
    del trainer
    shutil.rmtree(out_dir, ignore_errors=True)
    return record
