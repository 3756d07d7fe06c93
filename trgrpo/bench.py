"""What TR-GRPO costs against GRPO (paper App. C.2, Table 8): ``python -m trgrpo.bench``.

Part 1 times a training step of :class:`~trgrpo.trainer.TRGRPOTrainer` against TRL's ``GRPOTrainer`` phase by phase,
part 2 the loss alone on synthetic (B, T) log-probs (notebook times: ``python -m trgrpo.course times``). Records go to
``results/bench/*.json`` and a Markdown table beside them (``table.md``; the README's part: ``make docs``)."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trgrpo.batch import OFFLINE_ENV
from trgrpo.experiment import ROOT, write_json

if TYPE_CHECKING:  # pragma: no cover
    import torch

RESULTS_DIR = ROOT / "results" / "bench"
SCHEMA_VERSION = 1

# Paper, Appendix C.2, Table 8 (K&K): training time per sample (minutes) and peak GPU memory (GB).
PAPER_TABLE8 = {
    "Qwen2.5-3B-Instruct": {"time_min": (271.4, 286.0), "memory_gb": (459.7, 460.2)},
    "LLaMa3.1-8B-Instruct": {"time_min": (678.5, 722.2), "memory_gb": (581.2, 580.6)},
}

# Step benchmark variants: which trainer, which weight options.
STEP_VARIANTS: dict[str, dict[str, Any]] = {
    "grpo_trl": {"trainer": "trl"},
    "equal": {"trainer": "tr", "weight_scheme": "equal"},
    "tr_ratio": {"trainer": "tr", "weight_scheme": "tr", "weight_placement": "ratio"},
    "tr_surrogate": {"trainer": "tr", "weight_scheme": "tr", "weight_placement": "surrogate"},
}
# Loss benchmark variants.
LOSS_VARIANTS = ("grpo_trl", "grpo_trl_metrics", "equal", "tr_ratio", "tr_surrogate")
VARIANT_LABELS = {
    "grpo_trl": "GRPO (TRL GRPOTrainer)",
    "grpo_trl_metrics": "GRPO (TRL ops + its metrics)",
    "equal": "TR-GRPO code, w = 1",
    "tr_ratio": "TR-GRPO, placement=ratio",
    "tr_surrogate": "TR-GRPO, placement=surrogate",
}
STEP_PHASES = ("step", "rollout", "loss_forward", "policy_forward", "loss_head", "backward", "loss_backward", "other")
PHASE_LABELS = {
    "step": "training step",
    "rollout": "rollout (generate + reward + ref log-probs)",
    "loss_forward": "loss forward (policy forward + loss)",
    "policy_forward": "policy forward (log-probs)",
    "loss_head": "loss head (weights + loss + metrics)",
    "backward": "backward",
    "loss_backward": "loss forward + backward",
    "other": "optimizer + rest",
}

STEP_METHOD = (
    "Each (variant, repeat) is a fresh subprocess; order alternates A B C D, D C B A, ... Same seed and config, "
    "learning_rate=0 so every variant sees identical rollouts (checked: hash of completion ids). The first "
    "{warmup} step(s) of a run are dropped; a run's value is the mean over its {steps} measured steps; the table "
    "shows the median over {repeats} repeats with [min-max]; ratios are per-repeat pairs against GRPO (TRL). "
    "Phases are timed by wrapping trainer methods in the benchmark only (time.perf_counter = wall, "
    "time.process_time = process CPU, torch.cuda.synchronize first on a GPU). Peak memory: VmHWM of the "
    "process over the training steps, reset via /proc/self/clear_refs just before train() (CPU), "
    "torch.cuda.max_memory_allocated after reset_peak_memory_stats (GPU)."
)
LOSS_METHOD = (
    "Forward + backward of the loss on synthetic (B, T) log-probs (p = sigmoid(N(2.5, 2.5^2)), old = logp + "
    "N(0, 0.05^2), ref = logp + N(0, 0.1^2), lengths uniform in [T/4, T], A ~ N(0, 1), beta = 0.001, eps 0.2/0.24). "
    "TR-GRPO variants include computing the weights from the log-probs (exp, clamp, token_weights) and the "
    "metrics tr_grpo_loss returns; 'equal' is the same code with scheme='equal'. grpo_trl replicates the tensor "
    "ops of TRL 1.16 GRPOTrainer._compute_loss for loss_type='dapo' (coef_1 = exp(logp - old), coef_2 = clamp, "
    "-min, + beta * k3, masked sum / normalizer); grpo_trl_metrics adds its kl / clip-ratio metrics. Variants "
    "alternate block by block ({iters} calls per block, {repeats} blocks); a block's value is its mean time per "
    "call; the table shows the median over blocks [min-max] and per-block paired ratios. On CPU the process "
    "keeps freed heap memory (glibc mallopt, see trgrpo.bench.steady_allocator), as a GPU caching "
    "allocator would, "
    "so page faults of fresh allocations do not blur the comparison. saved_mb: bytes autograd saves for backward "
    "(saved_tensors_hooks, deduplicated by storage)."
)


# ----------------------------------------------------------------------------------------------------------------
# Small helpers: clocks, memory, statistics, provenance


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _now(cuda: bool = False) -> tuple[float, float]:
    """(wall, process CPU) seconds; synchronises the GPU first so wall time covers queued kernels."""
    if cuda:
        import torch

        torch.cuda.synchronize()
    return time.perf_counter(), time.process_time()


def reset_peak_rss() -> bool:
    """Reset this process's RSS high-water mark (Linux >= 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def rss_mb(key: str = "VmRSS") -> float:
    """This process's ``/proc/self/status`` memory field ``key`` in MiB: ``VmRSS`` (now) or ``VmHWM`` (the
    high-water mark); where /proc is missing, ru_maxrss for VmHWM and NaN otherwise."""
    try:
        with open("/proc/self/status") as f:
            return next(int(ln.split()[1]) / 1024 for ln in f if ln.startswith(f"{key}:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 if key == "VmHWM" else float("nan")


def steady_allocator() -> bool:
    """Keep freed heap memory in this process (glibc ``mallopt``), so repeated tensor ops do not page-fault.

    Without it, CPU timings of large elementwise ops swing with the page faults of fresh allocations (up to
    half the time at T = 4096, depending on the heap's state); a GPU's caching allocator has no such cost.
    Returns False where glibc is not there (the timings then include page faults).
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        ok = libc.mallopt(m_mmap_threshold, 32 * 2**20) == 1  # 32 MiB: the largest glibc accepts
        return bool(ok and libc.mallopt(m_trim_threshold, 2**30) == 1)
    except (OSError, AttributeError):
        return False


def summarize(values: Sequence[float]) -> dict[str, Any]:
    """Median, min, max and count of ``values`` (the raw values kept too)."""
    vals = [float(v) for v in values]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0, "values": []}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals), "values": vals}


def paired_ratios(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """Summary of the pairwise ratios a_i / b_i (pairs with b_i == 0 are skipped)."""
    return summarize([x / y for x, y in zip(a, b) if y])


def machine_meta() -> dict[str, Any]:
    """Machine, package versions, git commit, threads and load: what every result file carries.

    The common part comes from :mod:`trgrpo.experiment` (as in every run record); the benchmark adds the CPU
    model, memory, load average and thread settings, which decide how far its timings can be trusted.
    """
    from trgrpo.experiment import git_commit, machine_info, package_versions

    info: dict[str, Any] = machine_info()
    try:
        with open("/proc/cpuinfo") as f:
            models = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
        info["cpu_model"] = models[0] if models else platform.processor()
    except OSError:
        info["cpu_model"] = platform.processor()
    try:
        import psutil

        info["memory_gb"] = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:  # pragma: no cover - psutil is a dev dependency
        pass
    try:
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover
        pass
    info["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS")
    return {
        "machine": info,
        "versions": package_versions(),
        "git_commit": git_commit(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _set_threads(threads: int | None) -> None:
    import torch

    if threads:
        torch.set_num_threads(int(threads))


def _say(progress: Callable[[str], None] | None, msg: str) -> None:
    if progress is not None:
        progress(msg)


def _print(msg: str) -> None:
    print(msg, flush=True)


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

    from trgrpo.models import resolve_model

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
        from trgrpo.trainer import TRGRPOConfig, TRGRPOTrainer

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
        peak = rss_mb("VmHWM")
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
        env = {"TOKENIZERS_PARALLELISM": "false", **OFFLINE_ENV, **env}
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
    cfg = StepBenchConfig(**json.loads(Path(cfg_path).read_text()))
    rec = step_run(cfg, variant, int(repeat))
    write_json(out_path, rec)  # atomic: the parent never reads half a record
    return 0


# ----------------------------------------------------------------------------------------------------------------
# Part 2: the loss alone


@dataclass
class LossBenchConfig:
    """Loss-alone benchmark: shapes, dtypes, variants, blocks."""

    batch: int = 64
    lengths: tuple[int, ...] = (512, 1024, 2048, 4096)
    dtypes: tuple[str, ...] = ("float32", "bfloat16")
    variants: tuple[str, ...] = LOSS_VARIANTS
    repeats: int = 7  # blocks per variant
    iters: int = 10  # calls per block
    warmup: int = 2
    beta: float = 0.001
    eps_low: float = 0.2
    eps_high: float = 0.24
    seed: int = 0
    threads: int | None = 1
    device: str = "auto"
    profile: bool = True  # torch.profiler of 'grpo_trl', 'equal', 'tr_ratio' at the largest fp32 shape
    steady_allocator: bool = True  # glibc mallopt: no page faults from fresh allocations (see steady_allocator)

    def __post_init__(self) -> None:
        self.lengths = tuple(int(x) for x in self.lengths)
        self.dtypes = tuple(self.dtypes)
        self.variants = tuple(self.variants)
        unknown = [v for v in self.variants if v not in LOSS_VARIANTS]
        if unknown:
            raise ValueError(f"unknown loss variant(s) {unknown}; known: {list(LOSS_VARIANTS)}")
        if "equal" not in self.variants:
            raise ValueError("variants must include 'equal' (the baseline of the goal ratio)")
        for d in self.dtypes:
            if d not in ("float32", "bfloat16", "float16"):
                raise ValueError(f"dtype must be float32, bfloat16 or float16, got {d!r}")
        if self.batch < 1 or self.repeats < 1 or self.iters < 1 or not self.lengths or min(self.lengths) < 4:
            raise ValueError("batch, repeats, iters must be >= 1 and lengths >= 4")


def loss_inputs(batch: int, length: int, dtype: str = "float32", *, seed: int = 0, device: str = "cpu") -> dict:
    """Synthetic, realistic loss inputs: mostly confident tokens with a low-probability tail, padded rows."""
    import torch

    g = torch.Generator().manual_seed(seed)
    dt = getattr(torch, dtype)
    p = torch.sigmoid(torch.randn(batch, length, generator=g) * 2.5 + 2.5)
    logp = p.log()
    old = logp + 0.05 * torch.randn(batch, length, generator=g)
    ref = logp + 0.1 * torch.randn(batch, length, generator=g)
    lengths = torch.randint(max(1, length // 4), length + 1, (batch,), generator=g)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()  # TRL's completion_mask is integer
    adv = torch.randn(batch, generator=g)
    to = dict(device=device, dtype=dt)
    return {
        "logps": logp.to(**to).requires_grad_(True),
        "old": old.to(**to),
        "ref": ref.to(**to),
        "advantages": adv.to(**to),
        "mask": mask.to(device),
        "normalizer": mask.sum().to(device=device, dtype=torch.float32),
    }


def trl_dapo_loss(x: dict, *, beta: float, eps_low: float, eps_high: float, metrics: bool = False) -> torch.Tensor:
    """The tensor ops of TRL 1.16 ``GRPOTrainer._compute_loss`` for ``loss_type="dapo"``, token-level IS.

    With ``metrics=True`` also its kl / clip-ratio metrics (without the cross-process reduce).
    """
    import torch

    logps, old, ref, mask = x["logps"], x["old"], x["ref"], x["mask"]
    advantages = x["advantages"].unsqueeze(1)
    log_ratio = logps - old
    coef_1 = torch.exp(log_ratio)
    per_token_kl = torch.exp(ref - logps) - (ref - logps) - 1
    coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
    per_token_loss1 = coef_1 * advantages
    per_token_loss2 = coef_2 * advantages
    per_token_loss = -torch.min(per_token_loss1, per_token_loss2)
    per_token_loss = per_token_loss + beta * per_token_kl
    loss = (per_token_loss * mask).sum() / x["normalizer"]
    if metrics:

        def global_masked_mean(t):
            totals = torch.stack([(t * mask).sum(), mask.sum().float()])
            return (totals[0] / totals[1].clamp(min=1.0)).item()

        def masked_seq_mean(t):
            return (t * mask).sum(-1) / mask.sum(-1)

        global_masked_mean(per_token_kl)
        is_low = (coef_1 < 1 - eps_low) & (advantages < 0)
        is_high = (coef_1 > 1 + eps_high) & (advantages > 0)
        is_region = is_low | is_high
        for t in (is_low, is_high, is_region):
            global_masked_mean(t.float())
        masked_seq_mean(is_low.float()).min().item()
        masked_seq_mean(is_high.float()).max().item()
    return loss


def tr_loss_call(x: dict, *, scheme: str, placement: str, beta: float, eps_low: float, eps_high: float) -> torch.Tensor:
    """What :class:`TRGRPOTrainer` does per batch after the forward: weights from log-probs, then the loss."""
    from trgrpo.loss import tr_grpo_loss
    from trgrpo.weights import token_weights

    logps = x["logps"]
    probs = logps.detach().exp().clamp(0.0, 1.0)
    weights = token_weights(probs, scheme)
    out = tr_grpo_loss(
        logps,
        x["old"],
        x["advantages"],
        x["mask"],
        weights,
        ref_logps=x["ref"],
        beta=beta,
        eps_low=eps_low,
        eps_high=eps_high,
        placement=placement,
        kl_weighting="eq10",
        upper=1.4,
        normalizer=x["normalizer"],
    )
    return out.loss


def loss_fn(variant: str, cfg: LossBenchConfig) -> Callable[[dict], Any]:
    """The forward of one loss variant (returns the scalar loss)."""
    kw = dict(beta=cfg.beta, eps_low=cfg.eps_low, eps_high=cfg.eps_high)
    if variant == "grpo_trl":
        return lambda x: trl_dapo_loss(x, **kw)
    if variant == "grpo_trl_metrics":
        return lambda x: trl_dapo_loss(x, metrics=True, **kw)
    scheme, placement = {
        "equal": ("equal", "ratio"),
        "tr_ratio": ("tr", "ratio"),
        "tr_surrogate": ("tr", "surrogate"),
    }[variant]
    return lambda x: tr_loss_call(x, scheme=scheme, placement=placement, **kw)


def _fwd_bwd(fn: Callable[[dict], Any], x: dict) -> None:
    x["logps"].grad = None
    fn(x).backward()


def time_blocks(
    fns: dict[str, Callable[[dict], Any]], x: dict, *, repeats: int, iters: int, warmup: int = 2, cuda: bool = False
) -> dict[str, dict[str, list[float]]]:
    """ms per forward+backward call of each function, block by block, order alternating (A B C, C B A, ...)."""
    names = list(fns)
    for v in names:
        for _ in range(warmup):
            _fwd_bwd(fns[v], x)
    times: dict[str, dict[str, list[float]]] = {v: {"wall": [], "cpu": []} for v in names}
    for r in range(repeats):
        for v in names if r % 2 == 0 else names[::-1]:
            a = _now(cuda)
            for _ in range(iters):
                _fwd_bwd(fns[v], x)
            b = _now(cuda)
            times[v]["wall"].append((b[0] - a[0]) / iters * 1e3)
            times[v]["cpu"].append((b[1] - a[1]) / iters * 1e3)
    return times


def saved_tensor_mb(fn: Callable[[dict], Any], x: dict) -> float:
    """MiB of tensors autograd saves for backward during ``fn(x)`` (deduplicated by storage)."""
    import torch

    seen: dict[int, int] = {}

    def pack(t):
        try:
            st = t.untyped_storage()
            seen[st.data_ptr()] = max(seen.get(st.data_ptr(), 0), st.nbytes())
        except RuntimeError:  # pragma: no cover
            pass
        return t

    x["logps"].grad = None
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = fn(x)
    loss.backward()
    # the leaf (logps) itself is an input every variant holds anyway
    seen.pop(x["logps"].untyped_storage().data_ptr(), None)
    return sum(seen.values()) / 2**20


def profile_loss(
    fn: Callable[[dict], Any], x: dict, *, iters: int = 10, tries: int = 3, top: int = 12
) -> list[dict[str, Any]]:
    """torch.profiler of ``iters`` forward+backward calls, best of ``tries``: the ``top`` ops by self CPU time.

    The first row holds the total self CPU time per call (profiler overhead included: read shares, not ms).
    """
    from torch.profiler import ProfilerActivity, profile

    _fwd_bwd(fn, x)
    best: tuple[float, list[dict[str, Any]]] | None = None
    for _ in range(tries):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(iters):
                _fwd_bwd(fn, x)
        rows = [
            {"op": e.key, "calls": e.count / iters, "self_cpu_us": e.self_cpu_time_total / iters}
            for e in prof.key_averages()
        ]
        total = sum(r["self_cpu_us"] for r in rows)
        if best is None or total < best[0]:
            best = (total, rows)
    assert best is not None
    total, rows = best
    rows.sort(key=lambda r: -r["self_cpu_us"])
    for r in rows:
        r["share"] = r["self_cpu_us"] / total if total else 0.0
    return [{"total_self_cpu_us": total}, *rows[:top]]


def run_loss_bench(cfg: LossBenchConfig | None = None, progress: Callable[[str], None] | None = _print) -> dict:
    """Part 2: each (length, dtype), variants alternating block by block; returns the JSON-ready record."""
    import torch

    cfg = cfg or LossBenchConfig()
    _set_threads(cfg.threads)
    allocator = (
        "glibc mallopt (M_MMAP_THRESHOLD 32 MiB, M_TRIM_THRESHOLD 1 GiB)"
        if (cfg.steady_allocator and steady_allocator())
        else "default"
    )
    device = ("cuda" if torch.cuda.is_available() else "cpu") if cfg.device == "auto" else cfg.device
    cuda = device.startswith("cuda")
    t0 = time.perf_counter()
    variants = list(cfg.variants)
    fns = {v: loss_fn(v, cfg) for v in variants}
    cases = []
    for dtype in cfg.dtypes:
        for length in cfg.lengths:
            x = loss_inputs(cfg.batch, length, dtype, seed=cfg.seed, device=device)
            times = time_blocks(fns, x, repeats=cfg.repeats, iters=cfg.iters, warmup=cfg.warmup, cuda=cuda)
            case: dict[str, Any] = {"batch": cfg.batch, "length": length, "dtype": dtype, "variants": {}}
            for v in variants:
                rec: dict[str, Any] = {
                    "label": VARIANT_LABELS[v],
                    "ms": {m: summarize(times[v][m]) for m in ("wall", "cpu")},
                    "ratio_vs_equal": {m: paired_ratios(times[v][m], times["equal"][m]) for m in ("wall", "cpu")},
                    "saved_mb": saved_tensor_mb(fns[v], x),
                }
                if "grpo_trl" in times:
                    rec["ratio_vs_grpo_trl"] = {
                        m: paired_ratios(times[v][m], times["grpo_trl"][m]) for m in ("wall", "cpu")
                    }
                if cuda:
                    torch.cuda.synchronize()
                    base = torch.cuda.memory_allocated()
                    torch.cuda.reset_peak_memory_stats()
                    _fwd_bwd(fns[v], x)
                    rec["cuda_peak_extra_mb"] = (torch.cuda.max_memory_allocated() - base) / 2**20
                case["variants"][v] = rec
            cases.append(case)
            msg = ", ".join(f"{v} {case['variants'][v]['ms']['cpu']['median']:.2f}" for v in variants)
            tr = case["variants"].get("tr_ratio", {}).get("ratio_vs_equal", {}).get("cpu", {}).get("median")
            _say(
                progress,
                f"[bench loss] B={cfg.batch} T={length} {dtype}: ms CPU per fwd+bwd: {msg}"
                + (f"; tr_ratio/equal {tr:.3f}" if tr else ""),
            )
    profiles = {}
    if cfg.profile and "tr_ratio" in variants and "float32" in cfg.dtypes:
        x = loss_inputs(cfg.batch, max(cfg.lengths), "float32", seed=cfg.seed, device=device)
        for v in ("grpo_trl", "equal", "tr_ratio"):
            if v in fns:
                profiles[v] = profile_loss(fns[v], x)
    return {
        "benchmark": "loss",
        "schema": SCHEMA_VERSION,
        **machine_meta(),
        "method": LOSS_METHOD.format(iters=cfg.iters, repeats=cfg.repeats),
        "config": dataclasses.asdict(cfg),
        "device": device,
        "allocator": allocator,
        "baseline": "equal",
        "goal_ratio_vs_equal": 1.10,
        "cases": cases,
        "profile": {"shape": [cfg.batch, max(cfg.lengths)], "dtype": "float32", "ops": profiles},
        "runtime_s": time.perf_counter() - t0,
    }


# ----------------------------------------------------------------------------------------------------------------
# Results: JSON files and the Markdown table


def load_results(results_dir: Path | str = RESULTS_DIR) -> dict[str, dict]:
    """The benchmark records present in ``results_dir`` (keys: step, loss, pair)."""
    out = {}
    for name in ("step", "loss", "pair/step"):
        p = Path(results_dir) / f"{name}.json"
        if p.exists():
            out[name.replace("/step", "")] = json.loads(p.read_text())
    return out


def _pct(r: float | None) -> str:
    return "n/a" if r is None else f"{(r - 1) * 100:+.1f}%"


def _ratio_cell(s: dict | None) -> str:
    if not s or s.get("median") is None:
        return "n/a"
    return f"{_pct(s['median'])} [{_pct(s['min'])}, {_pct(s['max'])}]"


def _val_cell(s: dict | None, fmt: str = "{:.2f}") -> str:
    if not s or s.get("median") is None:
        return "n/a"
    if s["n"] == 1:
        return fmt.format(s["median"])
    return f"{fmt.format(s['median'])} [{fmt.format(s['min'])}–{fmt.format(s['max'])}]"


def _machine_line(rec: dict) -> str:
    m, v = rec.get("machine", {}), rec.get("versions", {})
    dev = m.get("gpu") or f"{m.get('cpu_model', '?')} ({m.get('cpu_count', '?')} cores)"
    return (
        f"{dev}, torch threads {m.get('torch_threads')}, load average at start {m.get('load_average')}; "
        f"torch {v.get('torch')}, transformers {v.get('transformers')}, trl {v.get('trl')}; "
        f"commit {str(rec.get('git_commit'))[:10]}, {rec.get('created')}"
    )


def _paper_table(step: dict | None) -> list[str]:
    q, ll = PAPER_TABLE8["Qwen2.5-3B-Instruct"], PAPER_TABLE8["LLaMa3.1-8B-Instruct"]
    ours_cols = ["tr_ratio", "tr_surrogate"]
    head = (
        "| Procedure | Qwen2.5-3B GRPO | Qwen2.5-3B TR-GRPO | LLaMa3.1-8B GRPO | LLaMa3.1-8B TR-GRPO "
        "| ours: GRPO (TRL) | ours: TR-GRPO ratio | ours: TR-GRPO surrogate |"
    )
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|"]
    lines.append(
        f"| Training time / sample (minutes), paper | {q['time_min'][0]} | {q['time_min'][1]} "
        f"({_pct(q['time_min'][1] / q['time_min'][0])}) | {ll['time_min'][0]} | {ll['time_min'][1]} "
        f"({_pct(ll['time_min'][1] / ll['time_min'][0])}) | | | |"
    )
    lines.append(
        f"| Peak GPU memory (GB), paper | {q['memory_gb'][0]} | {q['memory_gb'][1]} "
        f"({_pct(q['memory_gb'][1] / q['memory_gb'][0])}) | {ll['memory_gb'][0]} | {ll['memory_gb'][1]} "
        f"({_pct(ll['memory_gb'][1] / ll['memory_gb'][0])}) | | | |"
    )
    if step:
        vs = step["variants"]

        def scaled(summary: dict, factor: float) -> dict:
            return {
                k: (v * factor if k in ("median", "min", "max") and v is not None else v) for k, v in summary.items()
            }

        def row(name: str, get_val, get_ratio, fmt: str = "{:.2f}") -> str:
            cells = [_val_cell(get_val(vs["grpo_trl"]), fmt)]
            for c in ours_cols:
                cells.append(
                    f"{_val_cell(get_val(vs[c]), fmt)} ({_ratio_cell(get_ratio(vs[c]))})" if c in vs else "n/a"
                )
            return f"| {name} | | | | | " + " | ".join(cells) + " |"

        for metric, label in (("wall", "wall"), ("cpu", "process CPU")):
            lines.append(
                row(
                    f"Training step, {label} (s/step)",
                    lambda r, m=metric: r["phases"]["step"][m],
                    lambda r, m=metric: r["ratio_vs_grpo"]["step"][m],
                )
            )
        lines.append(
            row(
                "Loss forward + backward, process CPU (s/step)",
                lambda r: r["phases"]["loss_backward"]["cpu"],
                lambda r: r["ratio_vs_grpo"]["loss_backward"]["cpu"],
            )
        )
        lines.append(
            row(
                "Loss head: weights + loss + metrics, process CPU (ms/step)",
                lambda r: scaled(r["phases"]["loss_head"]["cpu"], 1e3),
                lambda r: r["ratio_vs_grpo"]["loss_head"]["cpu"],
            )
        )
        cells = ["0 (baseline)"]
        for c in ours_cols:
            sh = vs[c].get("loss_head_added_share", {}).get("cpu") if c in vs else None
            cells.append(
                "n/a"
                if not sh or sh.get("median") is None
                else f"{100 * sh['median']:+.3f}% [{100 * sh['min']:+.3f}%, {100 * sh['max']:+.3f}%]"
            )
        lines.append(
            "| TR-GRPO's own cost: loss head minus GRPO's, share of GRPO's step (process CPU) | | | | | "
            + " | ".join(cells)
            + " |"
        )
        if "cuda_peak_mb" in vs["grpo_trl"]:
            lines.append(
                row(
                    "Peak GPU memory (GB)",
                    lambda r: scaled(r["cuda_peak_mb"], 1 / 1024),
                    lambda r: r["ratio_vs_grpo"]["cuda_peak"],
                )
            )
        lines.append(
            row(
                "Peak RSS during training (MiB)",
                lambda r: r["peak_rss_mb"],
                lambda r: r["ratio_vs_grpo"]["peak_rss"],
                "{:.0f}",
            )
        )
    return lines


def table_markdown(results_dir: Path | str = RESULTS_DIR, results: dict[str, dict] | None = None) -> str:
    """Render the benchmark JSON files (or ``results``) as Markdown: Table 8 beside ours, then details."""
    res = results if results is not None else load_results(results_dir)
    step, loss = res.get("step"), res.get("loss")
    out = ["## Cost of TR-GRPO against GRPO (paper Table 8, App. C.2)", ""]
    if step:
        c = step["config"]
        out.append(
            f"Ours: `{Path(str(step['model'])).name}` on {step['device']}, {c['prompts_per_step']} prompt x "
            f"{c['num_generations']} completions of at most {c['max_completion_length']} tokens per step, "
            f"{c['steps']} measured steps after {c['warmup_steps']} warm-up, {c['repeats']} repeats per variant, "
            f"rollouts identical across variants: {step['rollouts_identical']}. Cells: median [min–max] over "
            "repeats; in brackets after ours: TR-GRPO vs GRPO (TRL), median [min, max] of the paired per-repeat "
            "ratios. The paper's unit is minutes per sample on 8 GPUs; ours is seconds per step on a CPU. "
            "'TR-GRPO code, w = 1' computes TRL's loss (equal to float precision, tests/test_trainer.py): its "
            "change against GRPO (TRL), and that of phases with identical work (rollout, policy forward), is the "
            "noise floor of the end-to-end comparison; the loss-head rows measure the loss directly."
        )
        out.append("")
    out += _paper_table(step)
    out.append("")
    pair = res.get("pair")
    if pair:
        c = pair["config"]
        names = ", ".join(VARIANT_LABELS[v] for v in pair["variants"])
        out += [
            f"### A longer run of fewer variants ({names}): {c['repeats']} repeats, same settings otherwise "
            "(`--variants ... --repeats ... --out results/bench/pair`)",
            "",
        ]
        rows = _paper_table(pair)
        out += [rows[0], rows[1], *rows[4:], ""]
    if step:
        vs = step["variants"]
        names = list(vs)
        out += ["### Training step by phase (s/step, median [min–max]; change vs GRPO (TRL))", ""]
        out.append("| phase | clock | " + " | ".join(VARIANT_LABELS[v] for v in names) + " |")
        out.append("|---|---|" + "---:|" * len(names))
        for phase in STEP_PHASES:
            for metric in ("cpu", "wall"):
                cells = []
                for v in names:
                    val = _val_cell(vs[v]["phases"][phase][metric], "{:.4g}")
                    if v != "grpo_trl":
                        val += f" ({_ratio_cell(vs[v]['ratio_vs_grpo'][phase][metric])})"
                    cells.append(val)
                clock = "process CPU" if metric == "cpu" else "wall"
                out.append(f"| {PHASE_LABELS[phase]} | {clock} | " + " | ".join(cells) + " |")
        cells = []
        for v in names:
            val = _val_cell(vs[v]["peak_rss_mb"], "{:.0f}")
            if v != "grpo_trl":
                val += f" ({_ratio_cell(vs[v]['ratio_vs_grpo']['peak_rss'])})"
            cells.append(val)
        out.append("| peak RSS (MiB) | | " + " | ".join(cells) + " |")
        out += [
            "",
            f"Method: {step['method']}",
            "",
            f"Machine: {_machine_line(step)}; runtime {step['runtime_s']:.0f} s.",
            "",
        ]
    if loss:
        vars_ = list(loss["cases"][0]["variants"]) if loss["cases"] else []
        goal = loss.get("goal_ratio_vs_equal", 1.10)
        out += [
            f"### The loss alone: forward + backward, ms per call (process CPU), on {loss['device']}",
            "",
            f"Goal: TR-GRPO at most {goal:.2f}x the same computation with w = 1 ('equal'). Ratio columns: median "
            "[min–max] of per-block paired ratios (process CPU); wall-clock ratio after the slash.",
            "",
        ]
        head = "| B x T | dtype | " + " | ".join(VARIANT_LABELS[v] for v in vars_)
        head += " | tr_ratio / equal | tr_surrogate / equal | tr_ratio / GRPO (TRL) | saved for backward (MiB) |"
        out += [head, "|---|---|" + "---:|" * (len(vars_) + 4)]
        for case in loss["cases"]:
            V = case["variants"]
            cells = [_val_cell(V[v]["ms"]["cpu"], "{:.2f}") for v in vars_]

            def rcell(v: str, key: str = "ratio_vs_equal", V=V) -> str:
                if v not in V or key not in V[v]:
                    return "n/a"
                c, w = V[v][key]["cpu"], V[v][key]["wall"]
                return f"{c['median']:.3f} [{c['min']:.3f}–{c['max']:.3f}] / {w['median']:.3f}"

            saved = ", ".join(f"{v} {V[v]['saved_mb']:.1f}" for v in vars_)
            out.append(
                f"| {case['batch']} x {case['length']} | {case['dtype']} | "
                + " | ".join(cells)
                + f" | {rcell('tr_ratio')} | {rcell('tr_surrogate')} | {rcell('tr_ratio', 'ratio_vs_grpo_trl')} "
                f"| {saved} |"
            )
        out += [
            "",
            f"Method: {loss['method']}",
            "",
            f"Machine: {_machine_line(loss)}; runtime {loss['runtime_s']:.0f} s.",
        ]
        prof = loss.get("profile", {}).get("ops", {})
        if prof:
            out += ["", f"Profile (torch.profiler, B x T = {loss['profile']['shape']}, fp32, self CPU per call):", ""]
            for v, rows in prof.items():
                total = rows[0]["total_self_cpu_us"]
                top = ", ".join(f"{r['op']} x{r['calls']:g} {100 * r['share']:.0f}%" for r in rows[1:9])
                out.append(f"- {v}: {total / 1e3:.1f} ms per call under the profiler; top ops by self CPU: {top}")
        out.append("")
    if not (step or loss):
        out.append("(no benchmark results yet: run `make bench`)")
    return "\n".join(out).rstrip() + "\n"


def write_table(results_dir: Path | str = RESULTS_DIR) -> Path:
    """Render :func:`table_markdown` into ``results_dir/table.md``."""
    path = Path(results_dir) / "table.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(table_markdown(results_dir))
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m trgrpo.bench``: parts 1 and 2 (notebook times: ``python -m trgrpo.course times``)."""
    ap = argparse.ArgumentParser(prog="python -m trgrpo.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", nargs="+", choices=("step", "loss"), default=["step", "loss"])
    ap.add_argument("--quick", action="store_true", help="1 repeat, small shapes: checks the machinery")
    ap.add_argument("--model", default="embedded", help="step benchmark model: 'embedded', a folder or a hub id")
    ap.add_argument("--repeats", type=int, default=None, help="step benchmark repeats per variant")
    ap.add_argument("--variants", nargs="+", choices=tuple(STEP_VARIANTS), default=None, help="step variants")
    ap.add_argument("--steps", type=int, default=None, help="measured steps per run")
    ap.add_argument("--max-completion-length", type=int, default=None)
    ap.add_argument("--num-generations", type=int, default=None)
    ap.add_argument("--loss-repeats", type=int, default=None, help="loss benchmark blocks per variant")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: 1; GPU runs ignore it)")
    ap.add_argument("--no-isolate", action="store_true", help="step runs in this process (no own peak memory)")
    ap.add_argument("--out", default=str(RESULTS_DIR))
    ap.add_argument("--table", action="store_true", help="only re-render table.md from the JSON files")
    ap.add_argument("--child-step", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child_step:
        return child_step(*args.child_step)
    out = Path(args.out)
    if args.table:
        print(f"wrote {write_table(out)}")
        return 0
    parts = args.parts
    threads = args.threads if args.threads is not None else 1
    t0 = time.perf_counter()
    print(f"trgrpo.bench: parts {parts}, results in {out}", flush=True)
    if "step" in parts:
        kw: dict[str, Any] = dict(model=args.model, threads=threads, isolate=not args.no_isolate)
        if args.quick:
            kw.update(repeats=1, steps=1, max_completion_length=8, num_generations=4)
        for name, val in (
            ("repeats", args.repeats),
            ("steps", args.steps),
            ("max_completion_length", args.max_completion_length),
            ("num_generations", args.num_generations),
            ("variants", tuple(args.variants) if args.variants else None),
        ):
            if val is not None:
                kw[name] = val
        rec = run_step_bench(StepBenchConfig(**kw))
        print(f"wrote {write_json(out / 'step.json', rec)} ({rec['runtime_s']:.0f} s)", flush=True)
    if "loss" in parts:
        kw = dict(threads=threads)
        if args.quick:
            kw.update(lengths=(512,), repeats=2, iters=3)
        if args.loss_repeats is not None:
            kw["repeats"] = args.loss_repeats
        rec = run_loss_bench(LossBenchConfig(**kw))
        print(f"wrote {write_json(out / 'loss.json', rec)} ({rec['runtime_s']:.0f} s)", flush=True)
    path = write_table(out)
    print(f"wrote {path}\n", flush=True)
    print(path.read_text(), flush=True)
    print(f"trgrpo.bench: done in {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
