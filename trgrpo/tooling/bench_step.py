"""Part 1 of the cost benchmark: one training step of TRGRPOTrainer against TRL's GRPOTrainer, phase by phase,
each (variant, repeat) in a fresh ``python -m trgrpo.bench --child-step`` process."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .bench_common import (
    ROOT,
    SCHEMA_VERSION,
    STEP_METHOD,
    STEP_PHASES,
    STEP_VARIANTS,
    VARIANT_LABELS,
    _cuda_available,
    _now,
    _print,
    _say,
    _set_threads,
    machine_meta,
    paired_ratios,
    peak_rss_mb,
    reset_peak_rss,
    rss_mb,
    summarize,
)

# ----------------------------------------------------------------------------------------------------------------
# Part 1: the cost of a training step


@dataclass
class StepBenchConfig:
    """One step benchmark: model, rollout size, repeats. Defaults fit a 2-core CPU in a few minutes."""

    model: str = "embedded"
    variants: tuple[str, ...] = tuple(STEP_VARIANTS)
    repeats: int = 3
    warmup_steps: int = 1
    steps: int = 2
    prompts_per_step: int = 1
    num_generations: int = 4
    max_completion_length: int = 16
    temperature: float = 0.7
    beta: float = 0.001
    seed: int = 0
    threads: int | None = 1
    bf16: bool = True  # only on a GPU
    isolate: bool = True  # a fresh subprocess per run (own peak memory); False runs in-process (tests)
    timeout_s: int = 900

    def __post_init__(self) -> None:
        self.variants = tuple(self.variants)
        unknown = [v for v in self.variants if v not in STEP_VARIANTS]
        if unknown:
            raise ValueError(f"unknown step variant(s) {unknown}; known: {list(STEP_VARIANTS)}")
        if "grpo_trl" not in self.variants:
            raise ValueError("variants must include 'grpo_trl' (the baseline of every ratio)")
        for name in ("repeats", "steps", "prompts_per_step", "num_generations", "max_completion_length"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if self.num_generations < 2:
            raise ValueError("num_generations must be >= 2 (GRPO needs a group)")
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}")


BENCH_PROMPTS = [
    f"{a} says {b} is a knave. Who is a knight?"
    for a, b in [
        ("Zoey", "Oliver"),
        ("Mia", "Ethan"),
        ("Liam", "Ava"),
        ("Noah", "Emma"),
        ("Lucas", "Sofia"),
        ("Jack", "Chloe"),
        ("Henry", "Grace"),
        ("Owen", "Lily"),
    ]
]


def _bench_reward(completions, completion_ids, **kwargs) -> list[float]:
    """A deterministic reward with spread inside each group (benchmark only: cost, not learning)."""
    return [float(sum(ids) % 7) for ids in completion_ids]


def _step_trainer(cfg: StepBenchConfig, variant: str, output_dir: str):
    """Build the trainer of one variant (TRL's GRPOTrainer or TRGRPOTrainer) with the shared config."""
    from datasets import Dataset

    from ..pipeline.models import resolve_model

    cuda = _cuda_available()
    spec = STEP_VARIANTS[variant]
    n_prompts = cfg.prompts_per_step * (cfg.warmup_steps + cfg.steps)
    prompts = [BENCH_PROMPTS[i % len(BENCH_PROMPTS)] + f" (puzzle {i})" for i in range(n_prompts)]
    common = dict(
        output_dir=output_dir,
        per_device_train_batch_size=cfg.prompts_per_step * cfg.num_generations,
        num_generations=cfg.num_generations,
        max_completion_length=cfg.max_completion_length,
        max_steps=cfg.warmup_steps + cfg.steps,
        temperature=cfg.temperature,
        learning_rate=0.0,  # identical rollouts in every variant: we measure the loss, not the sampling
        lr_scheduler_type="constant",
        beta=cfg.beta,
        epsilon=0.2,
        epsilon_high=0.24,
        loss_type="dapo",
        use_bias_correction_kl=False,
        seed=cfg.seed,
        data_seed=cfg.seed,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=not cuda,
        bf16=bool(cfg.bf16 and cuda),
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    if spec["trainer"] == "trl":
        from trl import GRPOConfig, GRPOTrainer

        config, trainer_cls = GRPOConfig(**common), GRPOTrainer
    else:
        from ..core.trainer import TRGRPOConfig, TRGRPOTrainer

        extra = {k: v for k, v in spec.items() if k != "trainer"}
        config, trainer_cls = TRGRPOConfig(**common, **extra), TRGRPOTrainer
    return trainer_cls(
        model=resolve_model(cfg.model),
        reward_funcs=_bench_reward,
        args=config,
        train_dataset=Dataset.from_dict({"prompt": prompts}),
    )


def step_run(cfg: StepBenchConfig, variant: str, repeat: int = 0) -> dict[str, Any]:
    """Train one variant for warmup + measured steps, timing every phase; returns the raw record."""
    import torch
    from transformers import TrainerCallback

    _set_threads(cfg.threads)
    cuda = _cuda_available()
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="trgrpo-bench-") as out_dir:
        trainer = _step_trainer(cfg, variant, out_dir)
        init_s = time.perf_counter() - t_start
        steps: list[dict[str, Any]] = []
        state = {"in_loss": False}

        def current() -> dict[str, Any]:
            return steps[-1]

        def add(phase: str, t0: tuple[float, float]) -> None:
            t1 = _now(cuda)
            rec = current()[phase] = current().get(phase, {"wall": 0.0, "cpu": 0.0})
            rec["wall"] += t1[0] - t0[0]
            rec["cpu"] += t1[1] - t0[1]

        def wrap(obj: Any, name: str, fn: Callable[[Callable, tuple, dict], Any]) -> None:
            orig = getattr(obj, name)

            def wrapper(*a, **k):
                return fn(orig, a, k)

            setattr(obj, name, wrapper)

        def rollout(orig, a, k):
            t0 = _now(cuda)
            out = orig(*a, **k)
            add("rollout", t0)
            ids = out["completion_ids"].detach().cpu().numpy().tobytes()
            current()["rollout_hash"] = hashlib.sha1(ids).hexdigest()[:16]
            current()["completion_tokens"] = int(out["completion_mask"].sum())
            current()["completion_shape"] = list(out["completion_ids"].shape)
            return out

        def loss_forward(orig, a, k):
            t0 = _now(cuda)
            state["in_loss"] = True
            try:
                out = orig(*a, **k)
            finally:
                state["in_loss"] = False
            add("loss_forward", t0)
            return out

        def logps(orig, a, k):
            if not state["in_loss"]:  # reference / old log-probs inside the rollout
                return orig(*a, **k)
            t0 = _now(cuda)
            out = orig(*a, **k)
            add("policy_forward", t0)
            return out

        def backward(orig, a, k):
            t0 = _now(cuda)
            out = orig(*a, **k)
            add("backward", t0)
            return out

        wrap(trainer, "_generate_and_score_completions", rollout)
        wrap(trainer, "compute_loss", loss_forward)
        wrap(trainer, "_get_per_token_logps_and_entropies", logps)
        wrap(trainer.accelerator, "backward", backward)

        class StepTimer(TrainerCallback):
            def on_step_begin(self, args, st, control, **kwargs):
                steps.append({})
                self.t0 = _now(cuda)

            def on_step_end(self, args, st, control, **kwargs):
                add("step", self.t0)

        trainer.add_callback(StepTimer())
        rss_before = rss_mb()
        hwm_reset = reset_peak_rss()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        t_train = time.perf_counter()
        trainer.train()
        train_s = time.perf_counter() - t_train
        peak = peak_rss_mb()
        cuda_peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        del trainer
    for s in steps:
        for phase in ("step", "rollout", "loss_forward", "policy_forward", "backward"):
            s.setdefault(phase, {"wall": 0.0, "cpu": 0.0})
        s["loss_head"] = {m: s["loss_forward"][m] - s["policy_forward"][m] for m in ("wall", "cpu")}
        s["loss_backward"] = {m: s["loss_forward"][m] + s["backward"][m] for m in ("wall", "cpu")}
        s["other"] = {
            m: s["step"][m] - s["rollout"][m] - s["loss_forward"][m] - s["backward"][m] for m in ("wall", "cpu")
        }
    return {
        "variant": variant,
        "repeat": repeat,
        "steps": steps,
        "measured_from": cfg.warmup_steps,
        "losses": losses,
        "init_s": init_s,
        "train_s": train_s,
        "rss_before_train_mb": rss_before,
        "peak_rss_mb": peak,
        "peak_rss_method": "VmHWM after clear_refs" if hwm_reset else "ru_maxrss (whole process)",
        "cuda_peak_mb": cuda_peak,
        "device": "cuda" if cuda else "cpu",
        "pid": os.getpid(),
    }


def _step_run_isolated(cfg: StepBenchConfig, variant: str, repeat: int) -> dict[str, Any]:
    """:func:`step_run` in a fresh ``python -m trgrpo.bench --child-step`` subprocess."""
    with tempfile.TemporaryDirectory(prefix="trgrpo-bench-child-") as tmp:
        cfg_path, out_path = Path(tmp) / "cfg.json", Path(tmp) / "out.json"
        cfg_path.write_text(json.dumps(dataclasses.asdict(cfg)))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
        if cfg.threads:
            env["OMP_NUM_THREADS"] = str(cfg.threads)
            env["MKL_NUM_THREADS"] = str(cfg.threads)
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.setdefault("TRANSFORMERS_OFFLINE", "1")
        env.setdefault("HF_DATASETS_OFFLINE", "1")
        cmd = [sys.executable, "-m", "trgrpo.bench", "--child-step", str(cfg_path), variant, str(repeat), str(out_path)]
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=cfg.timeout_s)
        if proc.returncode != 0 or not out_path.exists():
            tail = "\n".join((proc.stderr or proc.stdout or "").strip().splitlines()[-25:])
            raise RuntimeError(f"step benchmark child ({variant}, repeat {repeat}) failed:\n{tail}")
        return json.loads(out_path.read_text())


def _run_mean(run: dict[str, Any], phase: str, metric: str) -> float:
    measured = run["steps"][run["measured_from"] :]
    return sum(s[phase][metric] for s in measured) / max(1, len(measured))


def aggregate_step_runs(runs: list[dict[str, Any]], variants: Sequence[str], baseline: str = "grpo_trl") -> dict:
    """Per variant and phase: median [min-max] over repeats of the per-run mean step time, and paired ratios."""
    by_variant: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    for r in runs:
        by_variant[r["variant"]].append(r)
    for v in by_variant:
        by_variant[v].sort(key=lambda r: r["repeat"])
    out: dict[str, Any] = {}
    base_runs = by_variant[baseline]
    for v, vruns in by_variant.items():
        rec: dict[str, Any] = {"label": VARIANT_LABELS[v], "phases": {}, "ratio_vs_grpo": {}}
        for phase in STEP_PHASES:
            rec["phases"][phase] = {}
            rec["ratio_vs_grpo"][phase] = {}
            for metric in ("wall", "cpu"):
                vals = [_run_mean(r, phase, metric) for r in vruns]
                base = [_run_mean(r, phase, metric) for r in base_runs]
                rec["phases"][phase][metric] = summarize(vals)
                rec["ratio_vs_grpo"][phase][metric] = paired_ratios(vals, base)
        # TR-GRPO's own cost, measured directly: (loss head - GRPO's loss head) / GRPO's step, per repeat pair
        rec["loss_head_added_share"] = {
            m: summarize(
                [
                    (_run_mean(r, "loss_head", m) - _run_mean(b, "loss_head", m)) / _run_mean(b, "step", m)
                    for r, b in zip(vruns, base_runs)
                    if _run_mean(b, "step", m)
                ]
            )
            for m in ("wall", "cpu")
        }
        peaks = [r["peak_rss_mb"] for r in vruns]
        rec["peak_rss_mb"] = summarize(peaks)
        rec["ratio_vs_grpo"]["peak_rss"] = paired_ratios(peaks, [r["peak_rss_mb"] for r in base_runs])
        if all(r.get("cuda_peak_mb") is not None for r in vruns) and vruns:
            cpeaks = [r["cuda_peak_mb"] for r in vruns]
            rec["cuda_peak_mb"] = summarize(cpeaks)
            rec["ratio_vs_grpo"]["cuda_peak"] = paired_ratios(cpeaks, [r["cuda_peak_mb"] for r in base_runs])
        rec["init_s"] = summarize([r["init_s"] for r in vruns])
        out[v] = rec
    return out


def run_step_bench(cfg: StepBenchConfig | None = None, progress: Callable[[str], None] | None = _print) -> dict:
    """Part 1: every variant ``repeats`` times, alternating; returns the JSON-ready record."""
    cfg = cfg or StepBenchConfig()
    t0 = time.perf_counter()
    variants = list(cfg.variants)
    total = cfg.repeats * len(variants)
    runs: list[dict[str, Any]] = []
    k = 0
    for r in range(cfg.repeats):
        order = variants if r % 2 == 0 else variants[::-1]  # A B C D, D C B A, ...
        for v in order:
            k += 1
            tr0 = time.perf_counter()
            run = _step_run_isolated(cfg, v, r) if cfg.isolate else step_run(cfg, v, r)
            runs.append(run)
            _say(
                progress,
                f"[bench step {k}/{total}] {v:<13} repeat {r}: step {_run_mean(run, 'step', 'cpu'):.2f} s CPU / "
                f"{_run_mean(run, 'step', 'wall'):.2f} s wall, loss+backward "
                f"{_run_mean(run, 'loss_backward', 'cpu'):.2f} s CPU, peak RSS {run['peak_rss_mb']:.0f} MiB "
                f"(run {time.perf_counter() - tr0:.0f} s wall)",
            )
    hashes = {tuple(s.get("rollout_hash") for s in run["steps"]) for run in runs}
    record = {
        "benchmark": "step",
        "schema": SCHEMA_VERSION,
        **machine_meta(),
        "method": STEP_METHOD.format(warmup=cfg.warmup_steps, steps=cfg.steps, repeats=cfg.repeats),
        "config": dataclasses.asdict(cfg),
        "model": cfg.model,
        "device": runs[0]["device"] if runs else None,
        "baseline": "grpo_trl",
        "rollouts_identical": len(hashes) == 1,
        "completion_tokens_per_step": [s.get("completion_tokens") for s in runs[0]["steps"]] if runs else [],
        "variants": aggregate_step_runs(runs, variants),
        "runs": runs,
        "runtime_s": time.perf_counter() - t0,
    }
    if not record["rollouts_identical"]:
        _say(progress, "[bench step] WARNING: rollouts differ between runs; the comparison is not paired")
    return record


def child_step(cfg_path: str, variant: str, repeat: str, out_path: str) -> int:
    """The ``--child-step`` entry point: one :func:`step_run`, its record written to ``out_path``."""
    from ..pipeline.experiment import write_json

    cfg = StepBenchConfig(**json.loads(Path(cfg_path).read_text()))
    rec = step_run(cfg, variant, int(repeat))
    write_json(out_path, rec)  # atomic: the parent never reads half a record
    return 0
