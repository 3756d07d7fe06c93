"""What TR-GRPO costs against GRPO (paper App. C.2, Table 8): ``trgrpo bench``.

Part 1 (``step``) times a training step of TRGRPOTrainer against TRL's GRPOTrainer phase by phase, each (variant,
repeat) a fresh subprocess in alternating order, learning_rate=0 so every variant sees the same rollouts. Part 2
(``loss``) times forward + backward of the loss alone on synthetic log-probs (:func:`loss_inputs`). Records go to
``results/bench/*.json`` (medians [min-max], paired ratios); ``make docs`` renders their tables.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import resource
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from trgrpo import files, paper
from trgrpo.config import Checked
from trgrpo.files import write_json

RESULTS_DIR = files.RESULTS_DIR / "bench"  # TRGRPO_RESULTS moves it with the rest
SCHEMA_VERSION = 1

# variant -> (its label, TR-GRPO's (weight_scheme, weight_placement)); None: TRL's GRPO (its trainer, or its loss's
# tensor ops)
VARIANTS: dict[str, tuple[str, tuple[str, str] | None]] = {
    "grpo_trl": ("GRPO (TRL GRPOTrainer)", None),
    "equal": ("TR-GRPO code, w = 1", ("equal", "ratio")),
    "tr_ratio": ("TR-GRPO, placement=ratio", ("tr", "ratio")),
    "tr_surrogate": ("TR-GRPO, placement=surrogate", ("tr", "surrogate")),
}
# loss_head = loss_forward - policy_forward (weights + loss + metrics); other = optimizer and the rest
STEP_PHASES = ("step", "rollout", "loss_forward", "policy_forward", "loss_head", "backward", "loss_backward", "other")
CLOCKS = {"cpu": "process CPU", "wall": "wall"}


def _now(cuda: bool = False) -> tuple[float, float]:
    """(wall, process CPU) seconds, the GPU synchronised first."""
    if cuda:
        import torch

        torch.cuda.synchronize()
    return time.perf_counter(), time.process_time()


def _peak_rss_mb() -> float:
    """This process's peak RSS in MiB: VmHWM of /proc/self/status, else ru_maxrss."""
    try:
        with open("/proc/self/status") as f:
            return next(int(ln.split()[1]) / 1024 for ln in f if ln.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def steady_allocator() -> bool:
    """Keep freed heap memory (glibc ``mallopt``), as a GPU caching allocator does: without it, page faults of
    fresh allocations take up to half the CPU time of large elementwise ops. False without glibc."""
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
    """What every benchmark record carries: machine (with load average), versions, commit, config, runtime."""
    return {
        "benchmark": benchmark,
        "schema": SCHEMA_VERSION,
        "machine": {**files.machine_info(), "load_average": [round(x, 2) for x in os.getloadavg()]},
        "versions": files.package_versions(),
        "git_commit": files.git_commit(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": cfg.model_dump(),
        "runtime_s": time.perf_counter() - t0,
    }


class StepBenchConfig(Checked):
    """One step benchmark; the defaults fit a 2-core CPU in a few minutes (checked as a run's spec is)."""

    model: str = "embedded"
    variants: tuple[str, ...] = Field(tuple(VARIANTS), strict=False)  # a list too (the command line's)
    repeats: int = 3
    warmup_steps: int = 1
    steps: int = 2
    prompts_per_step: int = 1
    num_generations: int = 4
    max_completion_length: int = 16
    temperature: float = paper.TEMPERATURES["kk"]
    beta: float = paper.BETA
    seed: int = 0
    threads: int | None = 1
    bf16: bool = True  # only on a GPU
    isolate: bool = True  # a fresh process per run (its own peak memory)
    timeout_s: int = 900

    @field_validator("variants")
    @classmethod
    def _known(cls, variants: tuple[str, ...]) -> tuple[str, ...]:
        if not set(variants) <= set(VARIANTS) or "grpo_trl" not in variants:
            raise ValueError(f"variants must be among {tuple(VARIANTS)} and include 'grpo_trl', got {variants}")
        return variants


def spread_reward(completions, completion_ids, **kwargs) -> list[float]:
    """A deterministic reward in [0, 1) with spread inside each group (cost and equivalence checks)."""
    return [float(sum(ids) % 7) / 7.0 for ids in completion_ids]


def grpo_trainer(variant: str, model: Any, prompts: Sequence[str], output_dir: str, **args: Any) -> Any:
    """TRL's GRPOTrainer (``"grpo_trl"``) or TRGRPOTrainer with the variant's weights, on the shared config (DAPO
    loss, Table 6's eps_l / eps_h, plain k3 KL, :func:`spread_reward`, no checkpoints); ``args`` set the rest."""
    import torch
    from datasets import Dataset

    config = {
        "output_dir": output_dir,
        "loss_type": "dapo",
        "epsilon": paper.EPS_LOW,
        "epsilon_high": paper.EPS_HIGH,
        "use_bias_correction_kl": False,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": not torch.cuda.is_available(),
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        **args,
    }
    if (weights := VARIANTS[variant][1]) is None:
        from trl import GRPOConfig as config_cls
        from trl import GRPOTrainer as trainer_cls
    else:
        from trgrpo.trainer import TRGRPOConfig as config_cls
        from trgrpo.trainer import TRGRPOTrainer as trainer_cls

        config["weight_scheme"], config["weight_placement"] = weights
    return trainer_cls(
        model=model,
        reward_funcs=spread_reward,
        args=config_cls(**config),
        train_dataset=Dataset.from_dict({"prompt": list(prompts)}),
    )


def step_run(cfg: StepBenchConfig, variant: str, repeat: int = 0) -> dict[str, Any]:
    """Train one variant for warmup + measured steps, timing every phase; the raw record."""
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
        peak = _peak_rss_mb()
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
    """:func:`step_run` in a fresh (spawned) process, its own imports and peak memory; killed after ``timeout_s``."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:  # an error or the timeout: leaving kills it
        run = pool.apply_async(step_run, (cfg, variant, repeat)).get(cfg.timeout_s)
        pool.close()  # done: let it exit on its own (a killed process leaves its semaphores behind)
        pool.join()
    return run


def _run_mean(run: dict[str, Any], phase: str, metric: str) -> float:
    measured = run["steps"][run["measured_from"] :]
    return sum(s[phase][metric] for s in measured) / max(1, len(measured))


def aggregate_step_runs(runs: list[dict[str, Any]], variants: Sequence[str]) -> dict:
    """Per variant and phase: median [min-max] over repeats of the per-run mean step time, and ratios paired with
    TRL's GRPO (``grpo_trl``) repeat by repeat."""
    by_variant = {v: sorted((r for r in runs if r["variant"] == v), key=lambda r: r["repeat"]) for v in variants}
    means = {
        v: {p: {m: [_run_mean(r, p, m) for r in rs] for m in CLOCKS} for p in STEP_PHASES}
        for v, rs in by_variant.items()
    }
    base_runs, base = by_variant["grpo_trl"], means["grpo_trl"]
    out: dict[str, Any] = {}
    for v, vruns in by_variant.items():
        vals = means[v]
        rec: dict[str, Any] = {
            "label": VARIANTS[v][0],
            "phases": {p: {m: summarize(vals[p][m]) for m in CLOCKS} for p in STEP_PHASES},
            "ratio_vs_grpo": {p: {m: paired_ratios(vals[p][m], base[p][m]) for m in CLOCKS} for p in STEP_PHASES},
            # TR-GRPO's own cost: (loss head - GRPO's loss head) / GRPO's step, per repeat pair
            "loss_head_added_share": {
                m: summarize(
                    [
                        (h - bh) / bs
                        for h, bh, bs in zip(vals["loss_head"][m], base["loss_head"][m], base["step"][m])
                        if bs
                    ]
                )
                for m in CLOCKS
            },
        }
        for key in ("peak_rss", "cuda_peak"):
            peaks = [r.get(f"{key}_mb") for r in vruns]
            if peaks and None not in peaks:
                rec[f"{key}_mb"] = summarize(peaks)
                rec["ratio_vs_grpo"][key] = paired_ratios(peaks, [r[f"{key}_mb"] for r in base_runs])
        out[v] = rec
    return out


def run_step_bench(cfg: StepBenchConfig) -> dict:
    """Part 1: every variant ``repeats`` times, alternating; the JSON-ready record."""
    t0 = time.perf_counter()
    variants = list(cfg.variants)
    runs: list[dict[str, Any]] = []
    for r in range(cfg.repeats):
        for v in variants if r % 2 == 0 else variants[::-1]:  # A B C D, D C B A, ...
            run = _step_run_isolated(cfg, v, r) if cfg.isolate else step_run(cfg, v, r)
            runs.append(run)
            print(
                f"[bench step {len(runs)}/{cfg.repeats * len(variants)}] {v:<13} repeat {r}: step "
                f"{_run_mean(run, 'step', 'cpu'):.2f} s CPU / {_run_mean(run, 'step', 'wall'):.2f} s wall, "
                f"peak RSS {run['peak_rss_mb']:.0f} MiB"
            )
    identical = len({tuple(s.get("rollout_hash") for s in run["steps"]) for run in runs}) == 1
    if not identical:
        print("[bench step] WARNING: rollouts differ between runs; the comparison is not paired")
    return {
        **_record("step", cfg, t0),
        "model": cfg.model,
        "device": runs[0]["device"] if runs else None,
        "baseline": "grpo_trl",
        "rollouts_identical": identical,
        "variants": aggregate_step_runs(runs, variants),
        "runs": runs,
    }


class LossBenchConfig(Checked):
    """Loss-alone benchmark: shapes, dtypes, blocks (checked as a run's spec is)."""

    batch: int = 64
    lengths: tuple[int, ...] = (512, 1024, 2048, 4096)
    dtypes: tuple[Literal["float32", "bfloat16", "float16"], ...] = ("float32", "bfloat16")
    repeats: int = 7  # blocks per variant
    iters: int = 10  # calls per block
    warmup: int = 2
    beta: float = paper.BETA
    eps_low: float = paper.EPS_LOW
    eps_high: float = paper.EPS_HIGH
    seed: int = 0
    threads: int | None = 1


def loss_inputs(batch: int, length: int, dtype: str = "float32", *, seed: int = 0, device: str = "cpu") -> dict:
    """Synthetic loss inputs: p = sigmoid(N(2.5, 2.5^2)), old = logp + N(0, 0.05^2), ref = logp + N(0, 0.1^2),
    lengths uniform in [T/4, T], A ~ N(0, 1)."""
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


def trl_dapo_loss(x: dict, *, beta: float, eps_low: float, eps_high: float) -> Any:
    """The tensor ops of TRL 1.16 ``GRPOTrainer._compute_loss`` (``loss_type="dapo"``, token-level IS)."""
    import torch

    logps, old, ref = x["logps"], x["old"], x["ref"]
    advantages = x["advantages"].unsqueeze(1)
    coef_1 = torch.exp(logps - old)
    per_token_kl = torch.exp(ref - logps) - (ref - logps) - 1
    coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
    per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages) + beta * per_token_kl
    return (per_token_loss * x["mask"]).sum() / x["normalizer"]


def loss_fn(variant: str, cfg: LossBenchConfig) -> Callable[[dict], Any]:
    """The forward of one loss variant (the scalar loss); TR-GRPO's computes the weights, then the loss."""
    from trgrpo.loss import tr_grpo_loss
    from trgrpo.weights import DEFAULTS, token_weights

    kw = dict(beta=cfg.beta, eps_low=cfg.eps_low, eps_high=cfg.eps_high)
    if VARIANTS[variant][1] is None:
        return lambda x: trl_dapo_loss(x, **kw)
    scheme, placement = VARIANTS[variant][1]

    def tr(x: dict) -> Any:
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
            upper=DEFAULTS.upper,
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
    """ms per forward+backward of each function, block by block in alternating order (A B C, C B A, ...)."""
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
    """MiB autograd saves for backward during ``fn(x)`` (by storage; the input ``logps`` left out)."""
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


def run_loss_bench(cfg: LossBenchConfig) -> dict:
    """Part 2: each (length, dtype), variants alternating block by block; the JSON-ready record."""
    import torch

    if cfg.threads:
        torch.set_num_threads(int(cfg.threads))
    steady = steady_allocator()
    cuda = torch.cuda.is_available()
    t0 = time.perf_counter()
    fns = {v: loss_fn(v, cfg) for v in VARIANTS}
    cases = []
    for dtype in cfg.dtypes:
        for length in cfg.lengths:
            x = loss_inputs(cfg.batch, length, dtype, seed=cfg.seed, device="cuda" if cuda else "cpu")
            times = time_blocks(fns, x, repeats=cfg.repeats, iters=cfg.iters, warmup=cfg.warmup, cuda=cuda)
            case: dict[str, Any] = {"batch": cfg.batch, "length": length, "dtype": dtype, "variants": {}}
            for v in fns:
                case["variants"][v] = {
                    "label": VARIANTS[v][0],
                    "ms": {m: summarize(times[v][m]) for m in CLOCKS},
                    **{
                        f"ratio_vs_{b}": {m: paired_ratios(times[v][m], times[b][m]) for m in CLOCKS}
                        for b in ("equal", "grpo_trl")
                    },
                    "saved_mb": saved_tensor_mb(fns[v], x),
                }
            cases.append(case)
            msg = ", ".join(f"{v} {case['variants'][v]['ms']['cpu']['median']:.2f}" for v in fns)
            print(f"[bench loss] B={cfg.batch} T={length} {dtype}: ms CPU per fwd+bwd: {msg}")
    return {
        **_record("loss", cfg, t0),
        "device": "cuda" if cuda else "cpu",
        "allocator": "glibc mallopt (M_MMAP_THRESHOLD 32 MiB, M_TRIM_THRESHOLD 1 GiB)" if steady else "default",
        "baseline": "equal",
        "goal_ratio_vs_equal": 1.10,
        "cases": cases,
    }


def main(argv: list[str] | None = None) -> int:
    """``trgrpo bench``: parts 1 and 2, the records to ``--out``."""
    ap = argparse.ArgumentParser(prog="trgrpo bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", nargs="+", choices=("step", "loss"), default=["step", "loss"])
    ap.add_argument("--repeats", type=int, help="step benchmark repeats per variant")
    ap.add_argument("--variants", nargs="+", choices=tuple(VARIANTS), help="step variants")
    ap.add_argument("--out", default=str(RESULTS_DIR))
    args = ap.parse_args(argv)
    out = Path(args.out)
    if "step" in args.parts:
        given = dict(repeats=args.repeats, variants=args.variants)
        rec = run_step_bench(StepBenchConfig(**{k: v for k, v in given.items() if v is not None}))
        print(f"wrote {write_json(out / 'step.json', rec)} ({rec['runtime_s']:.0f} s)")
    if "loss" in args.parts:
        rec = run_loss_bench(LossBenchConfig())
        print(f"wrote {write_json(out / 'loss.json', rec)} ({rec['runtime_s']:.0f} s)")
    print("`make docs` renders results/bench/table.md and the README's cost table from the records")
    return 0
