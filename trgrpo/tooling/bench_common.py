"""Shared parts of the cost benchmark (``python -m trgrpo.bench``): the variants and phases, the paper's Table 8,
the method texts, and small helpers: clocks, peak memory from ``/proc``, summaries, machine metadata."""

from __future__ import annotations

import os
import platform
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
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
    "keeps freed heap memory (glibc mallopt, see trgrpo.tooling.bench.steady_allocator), as a GPU caching "
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


def peak_rss_mb() -> float:
    """This process's RSS high-water mark in MiB (VmHWM; ru_maxrss where /proc is missing)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mb() -> float:
    """Current RSS in MiB."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


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

    The common part comes from :mod:`trgrpo.pipeline.experiment` (as in every run record); the benchmark adds the CPU
    model, memory, load average and thread settings, which decide how far its timings can be trusted.
    """
    from ..pipeline.experiment import git_commit, machine_info, package_versions

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
