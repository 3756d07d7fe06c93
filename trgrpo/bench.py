"""What TR-GRPO costs against GRPO (paper App. C.2, Table 8): ``python -m trgrpo.bench``.

Part 1 (``step``) times a training step of :class:`~trgrpo.trainer.TRGRPOTrainer` against TRL's ``GRPOTrainer``
phase by phase. Each (variant, repeat) is a fresh subprocess, the order alternating A B C D, D C B A, ...; same seed
and config with learning_rate=0, so every variant sees identical rollouts (checked by a hash of the completion ids).
The first warm-up step(s) of a run are dropped and a run's value is the mean over its measured steps. Phases are
timed by wrapping trainer methods (``time.perf_counter`` = wall, ``time.process_time`` = process CPU, the GPU
synchronised first). Peak memory: VmHWM after /proc/self/clear_refs (CPU), ``torch.cuda.max_memory_allocated`` (GPU).

Part 2 (``loss``) times forward + backward of the loss alone on synthetic (B, T) log-probs (:func:`loss_inputs`):
TR-GRPO variants include computing the weights and the metrics :func:`~trgrpo.loss.tr_grpo_loss` returns;
``grpo_trl`` replicates the tensor ops of TRL 1.16 ``GRPOTrainer._compute_loss`` for ``loss_type="dapo"``. Variants
alternate block by block; ``saved_mb`` is what autograd saves for backward.

Records go to ``results/bench/*.json`` (medians [min-max] over repeats or blocks, paired per-repeat ratios); their
tables are :func:`paper_table`, :func:`step_table`, :func:`loss_table` (``make docs`` renders ``table.md`` and the
README's part with :mod:`scripts.render_docs`).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
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

# variant -> (weight_scheme, weight_placement) of TR-GRPO; None: TRL's GRPO (its trainer, or its loss's tensor ops)
VARIANTS: dict[str, tuple[str, str] | None] = {
    "grpo_trl": None,
    "grpo_trl_metrics": None,
    "equal": ("equal", "ratio"),
    "tr_ratio": ("tr", "ratio"),
    "tr_surrogate": ("tr", "surrogate"),
}
STEP_VARIANTS = ("grpo_trl", "equal", "tr_ratio", "tr_surrogate")
LOSS_VARIANTS = tuple(VARIANTS)
VARIANT_LABELS = {
    "grpo_trl": "GRPO (TRL GRPOTrainer)",
    "grpo_trl_metrics": "GRPO (TRL ops + its metrics)",
    "equal": "TR-GRPO code, w = 1",
    "tr_ratio": "TR-GRPO, placement=ratio",
    "tr_surrogate": "TR-GRPO, placement=surrogate",
}
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
STEP_PHASES = tuple(PHASE_LABELS)
CLOCKS = {"cpu": "process CPU", "wall": "wall"}


def _now(cuda: bool = False) -> tuple[float, float]:
    """(wall, process CPU) seconds; synchronises the GPU first so wall time covers queued kernels."""
    if cuda:
        import torch

        torch.cuda.synchronize()
    return time.perf_counter(), time.process_time()


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
    half the time at T = 4096); a GPU's caching allocator has no such cost. False where glibc is not there.
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


def _record(benchmark: str, cfg: Any, t0: float) -> dict[str, Any]:
    """What every benchmark record carries: the machine as in every run record (:mod:`trgrpo.experiment`) with the
    load average at the end, package versions, commit, config and runtime."""
    from trgrpo.experiment import git_commit, machine_info, package_versions

    return {
        "benchmark": benchmark,
        "schema": SCHEMA_VERSION,
        "machine": {**machine_info(), "load_average": [round(x, 2) for x in os.getloadavg()]},
        "versions": package_versions(),
        "git_commit": git_commit(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": dataclasses.asdict(cfg),
        "runtime_s": time.perf_counter() - t0,
    }


def _validate(variants: Sequence[str], known: Sequence[str], baseline: str, dtypes: Sequence[str] = ()) -> None:
    """One check for both configs: known variants, the baseline of every ratio among them, float dtypes."""
    if not set(variants) <= set(known) or baseline not in variants:
        raise ValueError(f"variants must be among {list(known)} and include {baseline!r}, got {list(variants)}")
    if not set(dtypes) <= {"float32", "bfloat16", "float16"}:
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got {list(dtypes)}")


# ----------------------------------------------------------------------------------------------------------------
# Part 1: the cost of a training step


@dataclass
class StepBenchConfig:
    """One step benchmark: model, rollout size, repeats. Defaults fit a 2-core CPU in a few minutes."""

    model: str = "embedded"
    variants: tuple[str, ...] = STEP_VARIANTS
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
        _validate(self.variants, STEP_VARIANTS, "grpo_trl")


def spread_reward(completions, completion_ids, **kwargs) -> list[float]:
    """A deterministic reward with spread inside each group, in [0, 1) (cost and equivalence checks, not learning)."""
    return [float(sum(ids) % 7) / 7.0 for ids in completion_ids]


def grpo_trainer(variant: str, model: Any, prompts: Sequence[str], output_dir: str, **args: Any) -> Any:
    """TRL's ``GRPOTrainer`` (``variant`` ``"grpo_trl"``) or :class:`TRGRPOTrainer` with the variant's weights, on
    the GRPO config every comparison here shares (DAPO loss, eps 0.2 / 0.24, plain k3 KL, :func:`spread_reward`, one
    log line per step, no checkpoints); ``args`` set the rest of the config (batch, lengths, steps, seed, ...)."""
    import torch
    from datasets import Dataset

    config = {
        "output_dir": output_dir,
        "loss_type": "dapo",
        "epsilon": 0.2,
        "epsilon_high": 0.24,
        "use_bias_correction_kl": False,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": not torch.cuda.is_available(),
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        **args,
    }
    if VARIANTS[variant] is None:
        from trl import GRPOConfig as config_cls
        from trl import GRPOTrainer as trainer_cls
    else:
        from trgrpo.trainer import TRGRPOConfig as config_cls
        from trgrpo.trainer import TRGRPOTrainer as trainer_cls

        config["weight_scheme"], config["weight_placement"] = VARIANTS[variant]
    return trainer_cls(
        model=model,
        reward_funcs=spread_reward,
        args=config_cls(**config),
        train_dataset=Dataset.from_dict({"prompt": list(prompts)}),
    )


def step_run(cfg: StepBenchConfig, variant: str, repeat: int = 0) -> dict[str, Any]:
    """Train one variant for warmup + measured steps, timing every phase; returns the raw record."""
    import torch
    from transformers import TrainerCallback

    from trgrpo.models import resolve_model

    if cfg.threads:
        torch.set_num_threads(int(cfg.threads))
    cuda = torch.cuda.is_available()
    t_start = time.perf_counter()
    n_steps = cfg.warmup_steps + cfg.steps
    prompts = [
        f"Puzzle {i}: Zoey says Oliver is a knave. Who is a knight?" for i in range(n_steps * cfg.prompts_per_step)
    ]
    with tempfile.TemporaryDirectory(prefix="trgrpo-bench-") as out_dir:
        trainer = grpo_trainer(
            variant,
            resolve_model(cfg.model),
            prompts,
            out_dir,
            per_device_train_batch_size=cfg.prompts_per_step * cfg.num_generations,
            num_generations=cfg.num_generations,
            max_completion_length=cfg.max_completion_length,
            max_steps=n_steps,
            temperature=cfg.temperature,
            learning_rate=0.0,  # identical rollouts in every variant: we measure the loss, not the sampling
            lr_scheduler_type="constant",
            beta=cfg.beta,
            seed=cfg.seed,
            data_seed=cfg.seed,
            bf16=bool(cfg.bf16 and cuda),
        )
        init_s = time.perf_counter() - t_start
        steps: list[dict[str, Any]] = []
        in_loss = [False]

        def add(phase: str, t0: tuple[float, float]) -> None:
            t1 = _now(cuda)
            rec = steps[-1].setdefault(phase, {"wall": 0.0, "cpu": 0.0})
            rec["wall"] += t1[0] - t0[0]
            rec["cpu"] += t1[1] - t0[1]

        def timed(obj: Any, name: str, phase: str) -> None:
            orig = getattr(obj, name)

            def wrapper(*a, **k):
                if phase == "policy_forward" and not in_loss[0]:  # reference / old log-probs inside the rollout
                    return orig(*a, **k)
                t0 = _now(cuda)
                in_loss[0] = in_loss[0] or phase == "loss_forward"
                try:
                    out = orig(*a, **k)
                finally:
                    in_loss[0] = in_loss[0] and phase != "loss_forward"
                add(phase, t0)
                if phase == "rollout":
                    ids = out["completion_ids"].detach().cpu().numpy().tobytes()
                    steps[-1]["rollout_hash"] = hashlib.sha1(ids).hexdigest()[:16]
                return out

            setattr(obj, name, wrapper)

        timed(trainer, "_generate_and_score_completions", "rollout")
        timed(trainer, "compute_loss", "loss_forward")
        timed(trainer, "_get_per_token_logps_and_entropies", "policy_forward")
        timed(trainer.accelerator, "backward", "backward")

        class StepTimer(TrainerCallback):
            def on_step_begin(self, args, st, control, **kwargs):
                steps.append({})
                self.t0 = _now(cuda)

            def on_step_end(self, args, st, control, **kwargs):
                add("step", self.t0)

        trainer.add_callback(StepTimer())
        try:  # reset the RSS high-water mark (Linux >= 4.0)
            Path("/proc/self/clear_refs").write_text("5")
            hwm_reset = True
        except OSError:
            hwm_reset = False
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        trainer.train()
        peak = rss_mb("VmHWM")
        cuda_peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        del trainer
    for s in steps:
        for phase in ("step", "rollout", "loss_forward", "policy_forward", "backward"):
            s.setdefault(phase, {"wall": 0.0, "cpu": 0.0})
        s["loss_head"] = {m: s["loss_forward"][m] - s["policy_forward"][m] for m in CLOCKS}
        s["loss_backward"] = {m: s["loss_forward"][m] + s["backward"][m] for m in CLOCKS}
        s["other"] = {m: s["step"][m] - s["rollout"][m] - s["loss_forward"][m] - s["backward"][m] for m in CLOCKS}
    return {
        "variant": variant,
        "repeat": repeat,
        "steps": steps,
        "measured_from": cfg.warmup_steps,
        "losses": losses,
        "init_s": init_s,
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
        env = {"TOKENIZERS_PARALLELISM": "false", **OFFLINE_ENV, **os.environ}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
        if cfg.threads:
            env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(cfg.threads)
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
    by_variant = {v: sorted((r for r in runs if r["variant"] == v), key=lambda r: r["repeat"]) for v in variants}
    base_runs = by_variant[baseline]
    out: dict[str, Any] = {}
    for v, vruns in by_variant.items():
        rec: dict[str, Any] = {"label": VARIANT_LABELS[v], "phases": {}, "ratio_vs_grpo": {}}
        for phase in STEP_PHASES:
            vals = {m: [_run_mean(r, phase, m) for r in vruns] for m in CLOCKS}
            base = {m: [_run_mean(r, phase, m) for r in base_runs] for m in CLOCKS}
            rec["phases"][phase] = {m: summarize(vals[m]) for m in CLOCKS}
            rec["ratio_vs_grpo"][phase] = {m: paired_ratios(vals[m], base[m]) for m in CLOCKS}
        # TR-GRPO's own cost, measured directly: (loss head - GRPO's loss head) / GRPO's step, per repeat pair
        rec["loss_head_added_share"] = {
            m: summarize(
                [
                    (_run_mean(r, "loss_head", m) - _run_mean(b, "loss_head", m)) / _run_mean(b, "step", m)
                    for r, b in zip(vruns, base_runs)
                    if _run_mean(b, "step", m)
                ]
            )
            for m in CLOCKS
        }
        for key in ("peak_rss", "cuda_peak"):
            peaks = [r.get(f"{key}_mb") for r in vruns]
            if peaks and None not in peaks:
                rec[f"{key}_mb"] = summarize(peaks)
                rec["ratio_vs_grpo"][key] = paired_ratios(peaks, [r[f"{key}_mb"] for r in base_runs])
        out[v] = rec
    return out


def run_step_bench(cfg: StepBenchConfig | None = None, progress: Callable[[str], None] | None = print) -> dict:
    """Part 1: every variant ``repeats`` times, alternating; returns the JSON-ready record."""
    cfg = cfg or StepBenchConfig()
    t0 = time.perf_counter()
    variants = list(cfg.variants)
    runs: list[dict[str, Any]] = []
    for r in range(cfg.repeats):
        for v in variants if r % 2 == 0 else variants[::-1]:  # A B C D, D C B A, ...
            run = _step_run_isolated(cfg, v, r) if cfg.isolate else step_run(cfg, v, r)
            runs.append(run)
            if progress:
                progress(
                    f"[bench step {len(runs)}/{cfg.repeats * len(variants)}] {v:<13} repeat {r}: step "
                    f"{_run_mean(run, 'step', 'cpu'):.2f} s CPU / {_run_mean(run, 'step', 'wall'):.2f} s wall, "
                    f"peak RSS {run['peak_rss_mb']:.0f} MiB"
                )
    identical = len({tuple(s.get("rollout_hash") for s in run["steps"]) for run in runs}) == 1
    if progress and not identical:
        progress("[bench step] WARNING: rollouts differ between runs; the comparison is not paired")
    return {
        **_record("step", cfg, t0),
        "model": cfg.model,
        "device": runs[0]["device"] if runs else None,
        "baseline": "grpo_trl",
        "rollouts_identical": identical,
        "variants": aggregate_step_runs(runs, variants),
        "runs": runs,
    }


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
    steady_allocator: bool = True  # glibc mallopt: no page faults from fresh allocations (see steady_allocator)

    def __post_init__(self) -> None:
        self.lengths, self.dtypes, self.variants = tuple(self.lengths), tuple(self.dtypes), tuple(self.variants)
        _validate(self.variants, LOSS_VARIANTS, "equal", self.dtypes)


def loss_inputs(batch: int, length: int, dtype: str = "float32", *, seed: int = 0, device: str = "cpu") -> dict:
    """Synthetic, realistic loss inputs: p = sigmoid(N(2.5, 2.5^2)) (mostly confident tokens with a low-probability
    tail), old = logp + N(0, 0.05^2), ref = logp + N(0, 0.1^2), lengths uniform in [T/4, T], A ~ N(0, 1)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    p = torch.sigmoid(torch.randn(batch, length, generator=g) * 2.5 + 2.5)
    logp = p.log()
    old = logp + 0.05 * torch.randn(batch, length, generator=g)
    ref = logp + 0.1 * torch.randn(batch, length, generator=g)
    lengths = torch.randint(max(1, length // 4), length + 1, (batch,), generator=g)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()  # TRL's completion_mask is integer
    adv = torch.randn(batch, generator=g)
    to = dict(device=device, dtype=getattr(torch, dtype))
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
    coef_1 = torch.exp(logps - old)
    per_token_kl = torch.exp(ref - logps) - (ref - logps) - 1
    coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
    per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages) + beta * per_token_kl
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
        for t in (is_low, is_high, is_low | is_high):
            global_masked_mean(t.float())
        masked_seq_mean(is_low.float()).min().item()
        masked_seq_mean(is_high.float()).max().item()
    return loss


def loss_fn(variant: str, cfg: LossBenchConfig) -> Callable[[dict], Any]:
    """The forward of one loss variant (returns the scalar loss); a TR-GRPO variant does what
    :class:`TRGRPOTrainer` does per batch after the forward: weights from the log-probs, then the loss."""
    from trgrpo.loss import tr_grpo_loss
    from trgrpo.weights import token_weights

    kw = dict(beta=cfg.beta, eps_low=cfg.eps_low, eps_high=cfg.eps_high)
    if VARIANTS[variant] is None:
        return lambda x: trl_dapo_loss(x, metrics=variant == "grpo_trl_metrics", **kw)
    scheme, placement = VARIANTS[variant]

    def tr(x: dict) -> torch.Tensor:
        weights = token_weights(x["logps"].detach().exp().clamp(0.0, 1.0), scheme)
        return tr_grpo_loss(
            x["logps"],
            x["old"],
            x["advantages"],
            x["mask"],
            weights,
            ref_logps=x["ref"],
            placement=placement,
            kl_weighting="eq10",
            upper=1.4,
            normalizer=x["normalizer"],
            **kw,
        ).loss

    return tr


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
    """MiB of tensors autograd saves for backward during ``fn(x)`` (deduplicated by storage; the input ``logps``,
    which every variant holds anyway, left out)."""
    import torch

    seen: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        seen[st.data_ptr()] = max(seen.get(st.data_ptr(), 0), st.nbytes())
        return t

    x["logps"].grad = None
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = fn(x)
    loss.backward()
    seen.pop(x["logps"].untyped_storage().data_ptr(), None)
    return sum(seen.values()) / 2**20


def run_loss_bench(cfg: LossBenchConfig | None = None, progress: Callable[[str], None] | None = print) -> dict:
    """Part 2: each (length, dtype), variants alternating block by block; returns the JSON-ready record."""
    import torch

    cfg = cfg or LossBenchConfig()
    if cfg.threads:
        torch.set_num_threads(int(cfg.threads))
    steady = cfg.steady_allocator and steady_allocator()
    cuda = torch.cuda.is_available()
    t0 = time.perf_counter()
    fns = {v: loss_fn(v, cfg) for v in cfg.variants}
    cases = []
    for dtype in cfg.dtypes:
        for length in cfg.lengths:
            x = loss_inputs(cfg.batch, length, dtype, seed=cfg.seed, device="cuda" if cuda else "cpu")
            times = time_blocks(fns, x, repeats=cfg.repeats, iters=cfg.iters, warmup=cfg.warmup, cuda=cuda)
            case: dict[str, Any] = {"batch": cfg.batch, "length": length, "dtype": dtype, "variants": {}}
            for v in fns:
                case["variants"][v] = {
                    "label": VARIANT_LABELS[v],
                    "ms": {m: summarize(times[v][m]) for m in CLOCKS},
                    **{
                        f"ratio_vs_{b}": {m: paired_ratios(times[v][m], times[b][m]) for m in CLOCKS}
                        for b in ("equal", "grpo_trl")
                        if b in times
                    },
                    "saved_mb": saved_tensor_mb(fns[v], x),
                }
            cases.append(case)
            if progress:
                msg = ", ".join(f"{v} {case['variants'][v]['ms']['cpu']['median']:.2f}" for v in fns)
                progress(f"[bench loss] B={cfg.batch} T={length} {dtype}: ms CPU per fwd+bwd: {msg}")
    return {
        **_record("loss", cfg, t0),
        "device": "cuda" if cuda else "cpu",
        "allocator": "glibc mallopt (M_MMAP_THRESHOLD 32 MiB, M_TRIM_THRESHOLD 1 GiB)" if steady else "default",
        "baseline": "equal",
        "goal_ratio_vs_equal": 1.10,
        "cases": cases,
    }


# ----------------------------------------------------------------------------------------------------------------
# Results: the JSON files and their tables


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


def _cell(s: dict | None, fmt: str = "{:.2f}", scale: float = 1.0, ratio: dict | None = None) -> str:
    """``median [min–max]`` of a summary (times ``scale``), then ``(ratio median [min, max])`` when given."""
    if not s or s.get("median") is None:
        return "n/a"
    m, lo, hi = (fmt.format(s[k] * scale) for k in ("median", "min", "max"))
    out = m if s["n"] == 1 else f"{m} [{lo}–{hi}]"
    if ratio and ratio.get("median") is not None:
        out += f" ({_pct(ratio['median'])} [{_pct(ratio['min'])}, {_pct(ratio['max'])}])"
    return out


def paper_table() -> str:
    """Paper Table 8 (training time per sample, peak GPU memory; TR-GRPO's change against GRPO in brackets)."""
    from trgrpo.paper import TABLE8

    models = {"Qwen2.5-3B": "Qwen2.5-3B-Instruct", "LLaMa3.1-8B": "LLaMa3.1-8B-Instruct"}
    lines = ["| Procedure | " + " | ".join(f"{m} {x}" for m in models for x in ("GRPO", "TR-GRPO")) + " |"]
    lines.append("|---|" + "---:|" * 2 * len(models))
    for col, label in (
        ("train_time_per_sample_min", "Training time / sample (minutes)"),
        ("peak_gpu_memory_gb", "Peak GPU memory (GB)"),
    ):
        cells = []
        for model in models.values():
            grpo, tr = (TABLE8.value(col, model=model, method=m) for m in ("GRPO", "TR-GRPO"))
            cells += [f"{grpo}", f"{tr} ({_pct(tr / grpo)})"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def step_table(step: dict, phases: Sequence[str] = STEP_PHASES) -> str:
    """A step record's table: per phase and clock, each variant's s/step (median [min–max] over repeats) and its
    change against GRPO (TRL) (median [min, max] of the per-repeat ratios); then peak memory and TR-GRPO's own
    cost (its loss head minus GRPO's, as a share of GRPO's step)."""
    vs = step["variants"]
    lines = ["| phase | " + " | ".join(VARIANT_LABELS[v] for v in vs) + " |", "|---|" + "---:|" * len(vs)]

    def row(label: str, get, ratio, fmt: str = "{:.4g}", scale: float = 1.0) -> None:
        cells = [_cell(get(r), fmt, scale, None if v == "grpo_trl" else ratio(r)) for v, r in vs.items()]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    for phase in phases:
        for m, clock in CLOCKS.items():
            get, ratio = (lambda r, p=phase, m=m: r["phases"][p][m]), (lambda r, p=phase, m=m: r["ratio_vs_grpo"][p][m])
            row(f"{PHASE_LABELS[phase]}, {clock} (s)", get, ratio)
    for key, label, fmt, scale in (
        ("peak_rss", "peak RSS during training (MiB)", "{:.0f}", 1),
        ("cuda_peak", "peak GPU memory (GB)", "{:.2f}", 1 / 1024),
    ):
        if f"{key}_mb" in vs["grpo_trl"]:
            row(label, lambda r, k=key: r.get(f"{k}_mb"), lambda r, k=key: r["ratio_vs_grpo"].get(k), fmt, scale)
    share = [
        _cell(r.get("loss_head_added_share", {}).get("cpu"), "{:+.3f}%", 100) if v != "grpo_trl" else "0 (baseline)"
        for v, r in vs.items()
    ]
    lines.append(
        "| TR-GRPO's own cost: loss head minus GRPO's, share of GRPO's step (process CPU) | " + " | ".join(share) + " |"
    )
    return "\n".join(lines)


def loss_table(loss: dict) -> str:
    """A loss record's table: ms per forward + backward (process CPU) per variant, the TR-GRPO / equal and
    TR-GRPO / GRPO (TRL) ratios (median [min–max] of per-block pairs, process CPU; wall after the slash), and the
    MiB autograd saves for backward."""
    vars_ = list(loss["cases"][0]["variants"]) if loss["cases"] else []
    ratios = [("tr_ratio", "equal"), ("tr_surrogate", "equal"), ("tr_ratio", "grpo_trl")]
    head = ["B x T", "dtype", *(VARIANT_LABELS[v] for v in vars_), *(f"{a} / {b}" for a, b in ratios)]
    lines = ["| " + " | ".join(head) + " | saved for backward (MiB) |", "|---|---|" + "---:|" * (len(head) - 1)]
    for case in loss["cases"]:
        V = case["variants"]
        cells = [_cell(V[v]["ms"]["cpu"]) for v in vars_]
        for a, b in ratios:
            r = V.get(a, {}).get(f"ratio_vs_{b}")
            c, w = (r or {}).get("cpu"), (r or {}).get("wall")
            cells.append(f"{c['median']:.3f} [{c['min']:.3f}–{c['max']:.3f}] / {w['median']:.3f}" if c else "n/a")
        saved = ", ".join(f"{v} {V[v]['saved_mb']:.1f}" for v in vars_)
        lines.append(f"| {case['batch']} x {case['length']} | {case['dtype']} | " + " | ".join(cells) + f" | {saved} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m trgrpo.bench``: parts 1 and 2, the records to ``--out`` (``make docs`` renders their tables)."""
    ap = argparse.ArgumentParser(prog="python -m trgrpo.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", nargs="+", choices=("step", "loss"), default=["step", "loss"])
    ap.add_argument("--quick", action="store_true", help="1 repeat, small shapes: checks the machinery")
    ap.add_argument("--model", default="embedded", help="step benchmark model: 'embedded', a folder or a hub id")
    ap.add_argument("--repeats", type=int, help="step benchmark repeats per variant")
    ap.add_argument("--variants", nargs="+", choices=STEP_VARIANTS, help="step variants")
    ap.add_argument("--steps", type=int, help="measured steps per run")
    ap.add_argument("--loss-repeats", type=int, help="loss benchmark blocks per variant")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (GPU runs ignore it)")
    ap.add_argument("--out", default=str(RESULTS_DIR))
    ap.add_argument("--child-step", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child_step:  # one step_run of _step_run_isolated, its record written atomically
        cfg_path, variant, repeat, out_path = args.child_step
        cfg = StepBenchConfig(**json.loads(Path(cfg_path).read_text()))
        write_json(out_path, step_run(cfg, variant, int(repeat)))
        return 0
    out = Path(args.out)
    if "step" in args.parts:
        kw: dict[str, Any] = dict(model=args.model, threads=args.threads)
        if args.quick:
            kw.update(repeats=1, steps=1, max_completion_length=8)
        given = dict(repeats=args.repeats, steps=args.steps, variants=args.variants)
        rec = run_step_bench(StepBenchConfig(**kw, **{k: v for k, v in given.items() if v is not None}))
        print(f"wrote {write_json(out / 'step.json', rec)} ({rec['runtime_s']:.0f} s)\n\n{step_table(rec)}\n")
    if "loss" in args.parts:
        kw = dict(threads=args.threads)
        if args.quick:
            kw.update(lengths=(512,), repeats=2, iters=3)
        if args.loss_repeats is not None:
            kw["repeats"] = args.loss_repeats
        rec = run_loss_bench(LossBenchConfig(**kw))
        print(f"wrote {write_json(out / 'loss.json', rec)} ({rec['runtime_s']:.0f} s)\n\n{loss_table(rec)}\n")
    print("`make docs` renders results/bench/table.md and the README's cost table from the records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
