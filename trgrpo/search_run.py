"""One agentic-search run (paper Table 3): a :class:`SearchSpec` mapped onto a run spec of the ``search`` task
(:mod:`trgrpo.tasks.search`) and trained through :func:`trgrpo.experiment.run`."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trgrpo.experiment import RESULTS_DIR, RunSpec, run, run_name
from trgrpo.tasks.search import evaluate_search, rollout_text, trl_rollouts


@dataclass
class SearchSpec:
    """One search run (Table 6's search column by default); checked as the :class:`RunSpec` it maps to."""

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
        if self.name is None:
            self.name = run_name("search", self.model, self.scheme, self.seed)


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


def _align_special_tokens(model, tokenizer) -> None:
    """The tokenizer's PAD / BOS / EOS ids into the model's config and generation config (EOS joins the stop tokens),
    as ``Trainer.train`` would (warning): the micro model's and Qwen2.5's configs name a BOS their tokenizer lacks."""
    gen = model.generation_config
    for key in ("bos_token_id", "pad_token_id"):
        setattr(model.config, key, getattr(tokenizer, key))
        setattr(gen, key, getattr(tokenizer, key))
    model.config.eos_token_id, stops = tokenizer.eos_token_id, gen.eos_token_id
    stops = [] if stops is None else [stops] if isinstance(stops, int) else list(stops)
    gen.eos_token_id = stops if tokenizer.eos_token_id in stops else [tokenizer.eos_token_id, *stops]


def search_run_spec(spec: SearchSpec, n_train: int, n_eval: int, *, eval_before: bool = True):
    """The :class:`trgrpo.experiment.RunSpec` of a search run (task ``search``, its retriever / corpus / template in
    ``task_options``), trained from ``init_model`` when there is one."""
    options = {k: getattr(spec, k) for k in ("retriever", "top_k", "template", "corpus", "corpus_seed", "scale")}
    return RunSpec(
        task="search",
        model=str(spec.init_model or spec.model),
        scheme=spec.scheme,
        seed=spec.seed,
        steps=spec.steps,
        prompts_per_step=spec.prompts_per_step,
        num_generations=spec.num_generations,
        max_completion_length=spec.max_completion_length,
        temperature=spec.temperature,
        learning_rate=spec.learning_rate,
        n_train=n_train,
        n_eval=n_eval,
        eval_before=eval_before,
        task_options={**options, "max_tool_calls": spec.max_tool_calls},
        group=spec.group,
        name=spec.name,
    )


def search_config_overrides(spec: SearchSpec) -> dict[str, Any]:
    """A search run's config beyond :func:`trgrpo.experiment.make_config`: the tool-call budget, no checkpoints,
    TRL's defaults for gradient checkpointing and bf16 (as the committed records were trained), ``spec.config``."""
    return dict(
        max_tool_calling_iterations=spec.max_tool_calls,
        save_strategy="no",
        disable_tqdm=True,
        gradient_checkpointing=True,
        bf16=None,
        **spec.config,
    )


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
    """Train one scheme with TRL's tool loop through :func:`trgrpo.experiment.run` and write its record (greedy EM
    before / after, the EM curve, one example rollout); a known ``initial`` skips the evaluation before training."""
    import torch

    from trgrpo.tasks.search import search_task

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    callback = _eval_callback(list(eval_records), eval_every) if eval_every else None
    held: dict[str, Any] = {}

    def ready(trainer, eval_records) -> None:
        held["trainer"] = trainer
        _align_special_tokens(trainer.model, trainer.processing_class)
        if callback is not None:
            callback.trainer = trainer

    def extras(record: dict[str, Any]) -> dict[str, Any]:
        """Search's fields: training EM per step, the EM curve, one greedy rollout, the start it came from."""
        trainer, final = held.pop("trainer"), record["final"]
        start = initial if initial is not None else record["initial"]
        for h in record["history"]:
            if "reward" in h:
                h["em"] = (h["reward"] + 1.0) / 2.0  # Eq. 14 rewards are +-1: the training EM of the step's rollouts
        eval_curve = [{"step": 0, "em": start["em"]}, *(callback.points if callback else [])]
        if eval_curve[-1]["step"] != spec.steps:
            eval_curve.append({"step": spec.steps, "em": final["em"]})
        example = trl_rollouts(trainer, list(eval_records[:1]), greedy=True)[0] if eval_records else None
        return dict(
            model=spec.model,
            spec=dataclasses.asdict(spec),
            initial=start,
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

    torch.manual_seed(spec.seed)
    record = run(
        search_run_spec(spec, len(train_records), len(eval_records), eval_before=initial is None),
        task=search_task(train_records, eval_records, tool, template=spec.template),
        results_dir=results_dir,
        checkpoint_dir=checkpoint_dir,
        resume=False,
        callbacks=[callback] if callback else None,
        config_overrides=search_config_overrides(spec),
        keep_checkpoints=False,
        verbose=False,
        record_extras=extras,
        trainer_ready=ready,
    )
    if verbose:
        print(
            f"[search] {spec.name}: EM {record['initial']['em']:.3f} -> {record['final']['em']:.3f} in "
            f"{len(record['history'])} steps, {record['wall_time_s']:.0f} s -> "
            f"{Path(results_dir or RESULTS_DIR) / spec.group / spec.name}.json"
        )
    return record
