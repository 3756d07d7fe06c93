"""Part 2 of the cost benchmark: :func:`trgrpo.tr_grpo_loss` forward + backward on synthetic (B, T) tensors
against the tensor ops of TRL's GRPO loss, blocks alternating; saved-tensor memory and a profile."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import torch

from .bench_common import (
    LOSS_METHOD,
    LOSS_VARIANTS,
    SCHEMA_VERSION,
    VARIANT_LABELS,
    _now,
    _print,
    _say,
    _set_threads,
    machine_meta,
    paired_ratios,
    steady_allocator,
    summarize,
)

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


def tr_loss_call(
    x: dict, *, scheme: str, placement: str, beta: float, eps_low: float, eps_high: float, lib: Any = None
) -> torch.Tensor:
    """What :class:`TRGRPOTrainer` does per batch after the forward: weights from log-probs, then the loss.

    ``lib``: a module with ``tr_grpo_loss`` and ``token_weights`` (default: :mod:`trgrpo`), e.g. a patched copy.
    """
    if lib is None:
        from ..core import loss as _loss
        from ..core import weights as _weights

        tr_grpo_loss, token_weights = _loss.tr_grpo_loss, _weights.token_weights
    else:
        tr_grpo_loss, token_weights = lib.tr_grpo_loss, lib.token_weights
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


def loss_fn(variant: str, cfg: LossBenchConfig, lib: Any = None) -> Callable[[dict], Any]:
    """The forward of one loss variant (returns the scalar loss); ``lib`` as in :func:`tr_loss_call`."""
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
    return lambda x: tr_loss_call(x, scheme=scheme, placement=placement, lib=lib, **kw)


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
