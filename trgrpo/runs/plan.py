"""``trgrpo plan PLAN --gpus N --gpu-mem-gb M``: per run of a batch plan or spec file, peak memory per
GPU by component, hours and checkpoint size, from the model's shape and the stated :class:`Assumptions`
(estimates; ``make gpu-check`` measures them). Exit 0 when every run fits, else 1 with the settings to change."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from trgrpo.config import ConfigError
from trgrpo.files import ROOT
from trgrpo.notebook import parameter_defaults
from trgrpo.runs.fullscale import NOTEBOOK_SPECS, ModelShape, model_shape, specs_from_parameters
from trgrpo.runs.spec import (
    RunSpec,
    batch_layout,
    load_plan,
    load_specs,
    parse_overrides,
    read_config,
    vllm_max_model_length,
)
from trgrpo.tasks import get_task

GB = 1e9


@dataclass(frozen=True)
class GPU:
    name: str
    tflops_bf16: float  # dense peak
    bandwidth_tbs: float  # HBM
    memory_gb: float  # the card's total bytes / 1e9 as CUDA reports them (nvidia-smi's MiB; docs/gpu.md the sources)


GPUS = {
    "H100": GPU("H100 SXM", 989.0, 3.35, 81559 * 2**20 / GB),
    "H200": GPU("H200 SXM", 989.0, 4.8, 143771 * 2**20 / GB),
    "A100": GPU("A100 80GB", 312.0, 2.0, 81920 * 2**20 / GB),
    "L4": GPU("L4", 121.0, 0.3, 23034 * 2**20 / GB),
}


@dataclass(frozen=True)
class Assumptions:
    """Stated assumptions of the estimate."""

    mean_prompt_tokens: int = 400  # K&K / math prompts with the chat template
    mean_completion_tokens: int = 1024  # mean generated length (the maximum is the spec's max_completion_length)
    mfu: float = 0.35  # achieved / peak bf16 FLOP/s in training and in compute-bound decoding
    decode_bw_efficiency: float = 0.5  # achieved / peak HBM bandwidth in vLLM decoding
    hf_generate_slowdown: float = 10.0  # HF generate vs vLLM tokens/s (evaluation without vLLM)
    overhead_gb: float = 4.0  # CUDA context, NCCL buffers, fragmentation
    vllm_runtime_gb: float = 1.0  # vLLM's own activations / CUDA graphs inside its share
    activation_bytes: float = 34.0  # per token, layer and hidden unit without checkpointing


A = Assumptions()
PARTS = (  # GB per GPU in the training phase (the peak); docs/gpu.md derives each from the pinned libraries' source
    "weights",
    "master",
    "gradients",
    "optimizer",
    "reference",
    "autocast",
    "buffers",
    "activations",
    "logits",
    "vllm",
    "overhead",
)
DS_REDUCE_BUCKET = 5e8  # elements: DeepSpeed 0.19.8 zero/config.py:113 (accelerate's config sets none)
DS_MAX_LIVE = 1e9  # elements gathered at once under ZeRO-3: zero/config.py:245 stage3_max_live_parameters
FUSED_HEAD_TILE = 4096 * 32768  # TRL 1.16 kernels/chunked_logprob.py:31 x trainer/utils.py:1506 (tokens x vocab)
MAX_RUN_HOURS = 720.0  # a run estimated longer (30 days) is refused unless --allow-long: far beyond any plan here


def engine(gpus: int, zero: int) -> str:
    """How ``gpus`` processes train: one GPU runs plain PyTorch (``fullscale.run_command``: no accelerate launch),
    several run DeepSpeed ZeRO-``zero`` (configs/zero2.yaml, zero3.yaml)."""
    return "one process, no DeepSpeed" if gpus == 1 else f"DeepSpeed ZeRO-{zero}"


def memory_gb(
    spec: RunSpec,
    shape: ModelShape,
    *,
    gpus: int,
    gpu_mem_gb: float,
    zero: int = 2,
) -> dict:
    """Peak memory per GPU in GB, by component (:data:`PARTS`), for the training phase (the peak) and the rollout
    phase. TRL loads the policy in fp32; DeepSpeed (``gpus > 1``) casts it to bf16 and keeps an fp32 master copy,
    bf16 gradients and fp32 Adam moments partitioned over the ranks; one GPU keeps fp32 weights, gradients, moments
    and an fp32 reference, and its forward runs under bf16 autocast, which keeps a bf16 copy of every weight it
    casts (the decoder layers') until the forward ends, beside an fp32 residual stream. vLLM takes its share of
    ``gpu_mem_gb``, the card's total. docs/gpu.md gives each term's source line."""
    n, g = shape.params, gpus
    m = batch_layout(spec, gpus)["per_device_train_batch_size"]
    ckpt, util = spec.gradient_checkpointing, spec.vllm_gpu_memory_utilization
    seq = vllm_max_model_length(spec)
    tokens = m * seq
    layer_act = A.activation_bytes * tokens * shape.hidden
    residual = 2 if g > 1 else 4  # bytes per element of the stream between layers: bf16 under DeepSpeed, else fp32
    act = (shape.layers * tokens * shape.hidden * residual + layer_act) if ckpt else shape.layers * layer_act
    if g > 1:  # DeepSpeed: bf16 parameters (ZeRO-3: partitioned), fp32 master + moments and bf16 gradients partitioned
        full = g if zero == 3 else 1
        states = {"weights": 2 * n / full, "master": 4 * n / g, "gradients": 2 * n / g, "optimizer": 8 * n / g}
        states["reference"] = 2 * n / full  # TRL's prepare_deepspeed: bf16, stage 0 (ZeRO-2) or sharded (ZeRO-3)
        states["buffers"] = 2 * DS_REDUCE_BUCKET + (2 * DS_MAX_LIVE if zero == 3 else 0)
        states["autocast"] = 0.0  # the parameters are bf16 already: autocast casts nothing
    else:  # plain PyTorch: TRL's fp32 policy and reference, fp32 gradients, AdamW's two fp32 moments
        states = {"weights": 4 * n, "master": 0.0, "gradients": 4 * n, "optimizer": 8 * n, "reference": 4 * n}
        states["buffers"] = 0.0
        states["autocast"] = 2 * (n - shape.embedding_params)  # the embeddings and TRL's fused head are not cached
    if spec.beta <= 0:
        states["reference"] = 0.0
    parts = {
        **states,
        "activations": act,
        "logits": 2 * 4 * FUSED_HEAD_TILE,  # TRL's fused LM head: one fp32 tile forward, one backward, never B x T x V
        "vllm": util * gpu_mem_gb * GB if spec.use_vllm else 0.0,  # of the card's total: vllm/v1/worker/utils.py:543
        "overhead": A.overhead_gb * GB,
    }
    out = {k: parts[k] / GB for k in PARTS}
    out["train_peak"] = sum(out.values())
    out["rollout_peak"] = out["train_peak"] - out["activations"] - out["logits"]
    out["vllm_kv_cache"] = (util * gpu_mem_gb - 2 * n / GB - A.vllm_runtime_gb) if spec.use_vllm else 0.0
    out["vllm_kv_needed_one_sequence"] = seq * shape.kv_bytes_per_token / GB if spec.use_vllm else 0.0
    return out


def _decode_step_s(n: float, batch: int, ctx: float, kv_tok: int, gpu: GPU) -> float:
    memory_s = (2 * n + batch * ctx * kv_tok) / (gpu.bandwidth_tbs * 1e12 * A.decode_bw_efficiency)
    compute_s = 2 * n * batch / (gpu.tflops_bf16 * 1e12 * A.mfu)
    return max(memory_s, compute_s)


def generation_seconds(
    sequences: int, shape: ModelShape, spec: RunSpec, gpu: GPU, kv_cache_gb: float
) -> tuple[float, float]:
    """(seconds, tokens/s) for one GPU to generate ``sequences`` completions of the mean length (HF generate without
    vLLM: :attr:`Assumptions.hf_generate_slowdown` times slower)."""
    ctx = A.mean_prompt_tokens + A.mean_completion_tokens / 2
    kv_tok = shape.kv_bytes_per_token
    fit = int(kv_cache_gb * GB // (ctx * kv_tok)) if kv_cache_gb > 0 else sequences
    batch = max(1, min(sequences, fit))
    tok_s = batch / _decode_step_s(shape.params, batch, ctx, kv_tok, gpu)
    bulk = sequences * A.mean_completion_tokens / tok_s
    tail = spec.max_completion_length * _decode_step_s(shape.params, 1, ctx, kv_tok, gpu)
    slowdown = 1.0 if spec.use_vllm else A.hf_generate_slowdown
    return max(bulk, tail) * slowdown, tok_s / slowdown


def estimate(
    spec: RunSpec,
    *,
    gpus: int,
    gpu_mem_gb: float,
    gpu: GPU,
    zero: int = 2,
) -> dict:
    """Memory, time and whether it fits, for one run."""
    shape = model_shape(spec.model)
    mem = memory_gb(spec, shape, gpus=gpus, gpu_mem_gb=gpu_mem_gb, zero=zero)
    lay = batch_layout(spec, gpus)
    completions = lay["global_completions_per_step"]
    kv_gb = mem["vllm_kv_cache"] if spec.use_vllm else gpu_mem_gb - mem["rollout_peak"]
    rollout_s, tok_s = generation_seconds(completions // gpus, shape, spec, gpu, kv_gb)
    tokens = completions * (A.mean_prompt_tokens + A.mean_completion_tokens)
    flop_per_token = (6 + (2 if spec.gradient_checkpointing else 0) + (2 if spec.beta > 0 else 0)) * shape.params
    train_s = tokens * flop_per_token / (gpus * gpu.tflops_bf16 * 1e12 * A.mfu)
    eval_sequences = spec.n_eval * _eval_multiplier(spec)
    search = search_terms(spec, gpus) if spec.task == "search" else None
    if search:  # the questions split over the ranks; the server's retrieval on top
        eval_sequences = math.ceil(eval_sequences / gpus)
        rollout_s += search["retrieval_s_per_step"]
    longest = {"max_completion_length": spec.max_eval_tokens or spec.max_completion_length}  # evaluation's length
    eval_s = (
        generation_seconds(eval_sequences, shape, spec.model_copy(update=longest), gpu, kv_gb)[0]
        if eval_sequences
        else 0.0
    )
    eval_s += search["eval_retrieval_s"] if search else 0.0
    hours = (spec.steps * (rollout_s + train_s) + eval_s * (2 if spec.eval_before else 1)) / 3600
    problems = []
    if 3 * eval_s > spec.ddp_timeout_s:
        problems.append(
            f"evaluation ~{eval_s / 3600:.1f} h on the main process > a third of ddp_timeout_s {spec.ddp_timeout_s} "
            f"(the other processes' wait): ddp_timeout_s >= {3600 * math.ceil(3 * eval_s / 3600):.0f}"
        )
    if mem["train_peak"] > gpu_mem_gb:
        problems.append(f"peak {mem['train_peak']:.1f} GB > {gpu_mem_gb:g} GB per GPU")
    if spec.use_vllm and mem["vllm_kv_cache"] < mem["vllm_kv_needed_one_sequence"]:
        problems.append(
            f"vLLM's share ({spec.vllm_gpu_memory_utilization:g} x {gpu_mem_gb:g} GB) leaves "
            f"{mem['vllm_kv_cache']:.1f} GB of KV cache < {mem['vllm_kv_needed_one_sequence']:.2f} GB for one sequence"
        )
    return {
        "name": spec.name,
        "model": spec.model,
        "gpu": gpu.name,
        "memory_gb": mem,
        "batch": lay,
        "rollout_s_per_step": rollout_s,
        "rollout_tokens_per_s_per_gpu": tok_s,
        "train_s_per_step": train_s,
        "eval_s": eval_s,
        "checkpoint_gb": checkpoint_gb(shape, gpus=gpus, zero=zero),
        "search": search,
        "hours": hours,
        "fits": not problems,
        "problems": problems,
    }


def too_long(rows: list[dict], machine: str) -> str | None:
    """Why a run would never end: the longest of ``rows`` (:func:`estimate`'s, on ``machine``) over
    :data:`MAX_RUN_HOURS`; None when every one is within it."""
    long = max(rows, key=lambda r: r["hours"], default=None)
    if long is None or long["hours"] <= MAX_RUN_HOURS:
        return None
    return (
        f"{long['name']}: estimated {long['hours']:,.0f} h on {machine} (trgrpo plan), far beyond any plan "
        f"(> {MAX_RUN_HOURS:g} h): check steps / n_train / n_eval / max_completion_length / max_eval_tokens, or pass "
        "--allow-long"
    )


def never_ends(specs: list[RunSpec], *, gpus: int, zero: int = 2) -> str | None:
    """Why ``specs`` must not start without ``--allow-long``: a run whose model the planner cannot size (its shape
    unknown), or one it estimates over :data:`MAX_RUN_HOURS` on ``gpus`` H100s (:func:`too_long`); None when neither."""
    rows, h100 = [], GPUS["H100"]
    for spec in specs:
        try:
            model_shape(spec.model)
        except ValueError as e:
            return f"{spec.name}: {e}; the planner cannot size it, nor tell that it ends: pass --allow-long to run it"
        with contextlib.suppress(ValueError):  # a batch that does not split over `gpus`: its launch says so
            rows.append(estimate(spec, gpus=gpus, gpu_mem_gb=h100.memory_gb, gpu=h100, zero=zero))
    return too_long(rows, f"{gpus} x H100")


def checkpoint_gb(shape: ModelShape, *, gpus: int, zero: int) -> float:
    """GB of one checkpoint (model and optimizer state, every rank's shard together): one GPU saves fp32 weights 4N
    and AdamW's moments 8N; DeepSpeed saves the bf16 model 2N, fp32 master 4N and moments 8N, and under ZeRO-2 also
    its bf16 module states 2N (ZeRO-3's hold only partitions' metadata)."""
    n = shape.params
    if gpus == 1:
        return 12 * n / GB
    return (14 * n + (2 * n if zero == 2 else 0)) / GB


def plan_disk_gb(rows: list[dict]) -> float:
    """GB of disk for a whole plan: every run's final checkpoint is kept (notebooks 05 / 06 keep them), and while a
    run saves, its newest checkpoint and the one it replaces are both there (``save_total_limit=1``)."""
    return sum(r["checkpoint_gb"] for r in rows) + max((r["checkpoint_gb"] for r in rows), default=0.0)


def _eval_multiplier(spec: RunSpec) -> int:
    """Completions per evaluation problem: math's sampled sets (AMC, AIME) take ``sampled_k`` each."""
    if spec.task != "math":
        return 1
    from trgrpo.tasks.math import SAMPLED_MATH_SETS, MathOptions

    opts = MathOptions(**spec.task_options)
    return sum(opts.sampled_k if Path(s).stem.lower().startswith(SAMPLED_MATH_SETS) else 1 for s in opts.eval_sets)


@dataclass(frozen=True)
class SearchServer:
    """The retrieval server's terms (docs/gpu.md, 'Search at scale'): wiki-18 is DPR's 21,015,324 passages of 100
    words, Search-R1's index ``e5_Flat.index`` a FAISS IndexFlatIP of e5-base-v2's 768 fp32 values a passage, the corpus
    file memory-mapped with two int64 offsets a passage (``search_data.CorpusFile``). Estimates,
    not measurements: the searches a rollout makes, the server CPU's FLOP/s on FAISS's batched inner products and the
    memory bandwidth of one scan of the index per batch."""

    passages: int = 21_015_324
    dim: int = 768
    bytes_per_value: int = 4  # IndexFlatIP (an IndexScalarQuantizer QT_fp16 copy: 2)
    offset_bytes: int = 16
    searches_per_rollout: float = 2.0  # estimate (at most max_tool_calls)
    cpu_tflops: float = 2.0  # estimate
    host_bandwidth_gbs: float = 100.0  # estimate


SEARCH = SearchServer()


def search_terms(spec: RunSpec, gpus: int) -> dict:
    """The retrieval server of a search run: its host memory (index + corpus offsets, GB) and the retrieval seconds
    of one step and of one evaluation. A round of the tool loop is one request a rank (``make_search_tool``), each
    batch one scan of the index (counted as one batch a rank, though the server merges those that wait together);
    each query ``2 x passages x dim`` FLOP."""
    from trgrpo.tasks.search import SearchOptions

    s, rounds = SEARCH, SearchOptions(**spec.task_options).max_tool_calls
    index = s.passages * s.dim * s.bytes_per_value
    per_rollout = min(s.searches_per_rollout, rounds)

    def seconds(rollouts: int, batches: int) -> float:
        flop = rollouts * per_rollout * 2 * s.passages * s.dim
        return flop / (s.cpu_tflops * 1e12) + batches * index / (s.host_bandwidth_gbs * GB)

    completions = batch_layout(spec, gpus)["global_completions_per_step"]
    eval_calls = math.ceil(spec.n_eval / gpus / 32)  # trl_rollouts: 32 prompts a call, the questions split over ranks
    return {
        "host_gb": (index + s.passages * s.offset_bytes) / GB,
        "retrieval_s_per_step": seconds(completions, gpus * rounds),
        "eval_retrieval_s": seconds(spec.n_eval, gpus * eval_calls * rounds),
    }


def suggestions(spec: RunSpec, *, gpus: int, gpu_mem_gb: float, zero: int) -> list:
    """``"setting: old -> new"`` changes that make a run fit, the cheapest first (micro-batch, checkpointing, vLLM's
    share, ZeRO-3, then more GPUs)."""
    shape = model_shape(spec.model)
    completions = spec.prompts_per_step * spec.num_generations
    now = batch_layout(spec, gpus)["per_device_train_batch_size"] if completions % gpus == 0 else None
    need_util = 2 * shape.params / GB + A.vllm_runtime_gb + vllm_max_model_length(spec) * shape.kv_bytes_per_token / GB
    utils = [spec.vllm_gpu_memory_utilization] + ([round(need_util / gpu_mem_gb + 0.005, 2)] if spec.use_vllm else [])
    for w in [gpus] + [w for w in (2, 4, 8, 16, 32, 64) if w > gpus]:
        if completions % w:
            continue
        per_gpu = completions // w
        zeros = [zero, 3] if zero == 2 and w > 1 else [zero if w == gpus else 3]
        micro = [m for m in range(per_gpu, 0, -1) if per_gpu % m == 0 and not (w == gpus and now and m > now)]
        checkpointing = dict.fromkeys([spec.gradient_checkpointing, True])
        for z, util, m, ckpt in itertools.product(
            zeros, dict.fromkeys(u for u in utils if u < 0.95), micro, checkpointing
        ):
            s = spec.replace(micro_batch_size=m, gradient_checkpointing=ckpt, vllm_gpu_memory_utilization=util)
            mem = memory_gb(s, shape, gpus=w, gpu_mem_gb=gpu_mem_gb, zero=z)
            if mem["train_peak"] > gpu_mem_gb or (
                s.use_vllm and mem["vllm_kv_cache"] < mem["vllm_kv_needed_one_sequence"]
            ):
                continue
            changes = [  # (setting, old, new), in the order they are printed
                ("--gpus", gpus, w),
                ("accelerate_config", f"configs/zero{zero}.yaml", f"configs/zero{z}.yaml"),
                ("gradient_checkpointing", str(spec.gradient_checkpointing).lower(), str(ckpt).lower()),
                ("vllm_gpu_memory_utilization", f"{spec.vllm_gpu_memory_utilization:g}", f"{util:g}"),
                ("micro_batch_size", now, m),
            ]
            return [f"{k}: {old} -> {new}" for k, old, new in changes if old != new]
    return [
        "model: a smaller one, or --gpu-mem-gb: GPUs with more memory (no setting of this plan fits "
        f"{Path(str(spec.model)).name} on up to 64 GPUs of {gpu_mem_gb:g} GB)"
    ]


# ---------------------------------------------------------------------------------------------------------------
# Plans


def plan_specs(path: str | Path, overrides: dict | None = None) -> tuple[list[RunSpec], int]:
    """The runs a batch plan (:func:`plan_runs`) or spec file would start, and the ZeRO stage of its accelerate
    config. Bad input: a :class:`ConfigError`."""
    path = Path(path)
    data = read_config(path)
    if "notebooks" not in data and "smoke" not in data:
        return load_specs(path, overrides), 2
    return plan_runs(path, load_plan(path, overrides)[1])


def plan_runs(path: Path, entries: list[tuple[Path, bool, dict]], *, smoke: bool = True) -> tuple[list[RunSpec], int]:
    """The runs the entries of a batch plan (:func:`~trgrpo.runs.spec.load_plan`) start, only the project's notebooks
    05 / 06 / 07 read (without ``smoke``: not those in smoke mode, which train their own small runs), and the ZeRO
    stage of their accelerate config; every local data file they name is read as a spec file's are
    (``Task.check_data``, from the notebook's folder). Bad input: a :class:`ConfigError` naming the plan file."""
    specs: list[RunSpec] = []
    accel = "configs/zero2.yaml"
    for i, (nb, smoke_mode, params) in enumerate(entries):
        task = NOTEBOOK_SPECS.get(nb.name[:3])
        if task is None or (smoke_mode and not smoke):
            continue  # notebooks that train nothing (08: tables)
        where = f"{path}: notebooks[{i}]"
        if nb.resolve().parent != (ROOT / "notebooks").resolve():
            raise ConfigError(f"{where}.notebook: {nb} is not one of the project's notebooks/ (its cell would run)")
        params = {**parameter_defaults(nb), **params}
        accel = params.get("ACCELERATE_CONFIG") or accel
        use_vllm = params.get("USE_VLLM")
        try:
            built = specs_from_parameters(task, params, use_vllm=True if use_vllm is None else bool(use_vllm))
            with contextlib.chdir(nb.parent):  # the notebook reads its files from its folder
                for spec in built:
                    if (check := get_task(spec.task).check_data) is not None:
                        check(spec)
        except (ValueError, TypeError, KeyError) as e:
            raise ConfigError(f"{where}.parameters: {e}") from None
        specs += built
    return specs, 3 if "zero3" in accel else 2


def check_batch(path: Path, entries: list[tuple[Path, bool, dict]], *, allow_long: bool = False) -> None:
    """What ``trgrpo batch`` checks before any notebook, as the planner does: the runs of its notebooks not in smoke
    mode (:func:`plan_runs`), and none estimated over :data:`MAX_RUN_HOURS` even on 8 H100s, the shipped plans'
    machine, nor one the planner cannot size (:func:`never_ends`)."""
    specs, zero = plan_runs(path, entries, smoke=False)
    if not allow_long and (problem := never_ends(specs, gpus=8, zero=zero)):
        raise ConfigError(f"{path}: {problem}")


def plan_report(
    specs: list[RunSpec],
    *,
    gpus: int,
    gpu_mem_gb: float,
    gpu: GPU | None = None,
    zero: int = 2,
    title: str = "plan",
) -> tuple[str, list[dict], list[str]]:
    """(text table, per-run estimates, problems with the settings to change) of one or more specs; no problems:
    every run fits."""
    gpu = gpu or GPUS["H200" if gpu_mem_gb > 100 else "H100"]
    rows = [estimate(s, gpus=gpus, gpu_mem_gb=gpu_mem_gb, gpu=gpu, zero=zero) for s in specs]
    stated = ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(A).items())
    lines = [
        f"{title}: {len(specs)} run(s) on {gpus} x {gpu.name} ({gpu_mem_gb:g} GB), {engine(gpus, zero)}",
        f"planner estimates from stated assumptions, not measurements: {stated}",
        f"{'run':<58} {'GB/GPU':>7} {'rollout s':>9} {'train s':>8} {'h/run':>6}  fits",
    ]
    for r in rows:
        m = r["memory_gb"]
        lines.append(
            f"{r['name'][:58]:<58} {m['train_peak']:>7.1f} {r['rollout_s_per_step']:>9.1f} "
            f"{r['train_s_per_step']:>8.1f} {r['hours']:>6.2f}  {'yes' if r['fits'] else 'NO'}"
        )
    first, ckpt = rows[0]["memory_gb"], max(r["checkpoint_gb"] for r in rows)
    lines += [
        "first run, GB per GPU: " + ", ".join(f"{k} {first[k]:.1f}" for k in PARTS),
        f"total: {sum(r['hours'] for r in rows):.1f} h (runs one after another)",
        f"disk: a checkpoint every {specs[0].save_steps} steps, {ckpt:.0f} GB (model + optimizer state); every run's "
        f"final checkpoint is kept: {len(rows)} run(s) + one while the newest replaces the previous = "
        f"{plan_disk_gb(rows):.0f} GB for the whole plan",
    ]
    if search := rows[0].get("search"):
        lines.append(
            f"retrieval server (host, not GPU): {search['host_gb']:.1f} GB (index + corpus offsets), "
            f"{search['retrieval_s_per_step']:.1f} s a step, {search['eval_retrieval_s']:.0f} s an evaluation"
        )
    problems, seen_models = [], set()
    for s, r in zip(specs, rows):
        if r["fits"] or s.model in seen_models:
            continue
        seen_models.add(s.model)
        memory = [p for p in r["problems"] if not p.startswith("evaluation")]
        fix = suggestions(s, gpus=gpus, gpu_mem_gb=gpu_mem_gb, zero=zero) if memory else []
        fix += [p.split(": ", 1)[1] for p in r["problems"] if p.startswith("evaluation")]
        problems.append(f"DOES NOT FIT: {r['name']}: {'; '.join(r['problems'])}. Change: {'; '.join(fix)}")
    return "\n".join(lines), rows, problems


# The shipped plans the README's table shows: (plan file, GPUs, GPU type); each GPU's memory is its card's total.
README_ROWS = (
    ("kk_qwen3b.yaml", 8, "H100"),
    ("kk_qwen3b.yaml", 1, "H200"),
    ("kk_qwen3b_1gpu_reduced.yaml", 1, "H200"),
    ("kk_qwen3b_table4.yaml", 8, "H100"),
    ("kk_qwen3b_table7.yaml", 8, "H100"),
    ("kk_qwen7b.yaml", 8, "H100"),
    ("math_qwen7b.yaml", 8, "H100"),
    ("search_qwen3b.yaml", 8, "H100"),  # hours with the retrieval server's (search_terms)
    ("search_qwen3b_1gpu.yaml", 1, "H200"),
    ("kk_qwen3b.yaml", 1, "L4"),
)


def readme_rows() -> list[dict]:
    """The planner's numbers for each of :data:`README_ROWS` (the README's table)."""
    out = []
    for name, gpus, kind in README_ROWS:
        specs, zero, mem = *plan_specs(ROOT / "experiments" / name), GPUS[kind].memory_gb
        _, rows, problems = plan_report(specs, gpus=gpus, gpu_mem_gb=mem, gpu=GPUS[kind], zero=zero)
        hours = [r["hours"] for r in rows]
        out.append(
            {
                "plan": name,
                "gpus": gpus,
                "gpu": GPUS[kind].name,
                "gpu_mem_gb": mem,
                "engine": engine(gpus, zero),
                "disk_gb": plan_disk_gb(rows),
                "runs": len(specs),
                "peak_gb": max(r["memory_gb"]["train_peak"] for r in rows),
                "hours_per_run": (min(hours), max(hours)),
                "hours": sum(hours),
                "change": problems[0].split("Change: ", 1)[-1] if problems else None,
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="trgrpo plan", description="Estimate peak GPU memory and hours of a plan's runs")
    ap.add_argument("plan", help="experiments/<name>.yaml (batch plan or training spec file)")
    ap.add_argument("--gpus", type=int, required=True)
    ap.add_argument(
        "--gpu-mem-gb",
        type=float,
        default=None,
        help="the card's total memory in GB (1e9 B, nvidia-smi's MiB x 1.048576e-3; vLLM's share is of it); "
        "default: --gpu-type's",
    )
    ap.add_argument("--gpu-type", default=None, choices=sorted(GPUS), help="default: H200 above 100 GB, else H100")
    ap.add_argument("--zero", type=int, choices=(2, 3), default=None, help="ZeRO stage (default: the plan's)")
    ap.add_argument("--json", action="store_true", help="print the estimates as JSON")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="as trgrpo.runs.batch --set")
    ap.add_argument("--allow-long", action="store_true", help=f"plan runs estimated over {MAX_RUN_HOURS:g} h each")
    args = ap.parse_args(argv)
    try:
        if args.gpus < 1:
            raise ConfigError(f"--gpus {args.gpus}: must be >= 1")
        if args.gpu_mem_gb is None:
            args.gpu_mem_gb = GPUS[args.gpu_type or "H100"].memory_gb
        if not (math.isfinite(args.gpu_mem_gb) and args.gpu_mem_gb > 0):
            raise ConfigError(f"--gpu-mem-gb {args.gpu_mem_gb}: must be a finite number of GB > 0")
        specs, plan_zero = plan_specs(args.plan, parse_overrides(args.set))
        if not specs:
            raise ConfigError(f"{args.plan}: the plan has no runs (SCHEMES, SEEDS, TAUS and RANGES give none)")
        zero = args.zero or plan_zero
        gpu = GPUS[args.gpu_type] if args.gpu_type else None
        text, rows, problems = plan_report(
            specs, gpus=args.gpus, gpu_mem_gb=args.gpu_mem_gb, gpu=gpu, zero=zero, title=str(args.plan)
        )
        if not args.allow_long and (problem := too_long(rows, f"{args.gpus} x {rows[0]['gpu']}")):
            raise ConfigError(f"{args.plan}: {problem}")
    except ValueError as e:  # ConfigError, or a model whose shape is unknown: one line, no traceback
        print(f"{ap.prog}: error: {e if isinstance(e, ConfigError) else f'{args.plan}: {e}'}", file=sys.stderr)
        return 2
    if args.json:
        out = {"runs": rows, "total_hours": sum(r["hours"] for r in rows), "assumptions": dataclasses.asdict(A)}
        out.update(engine=engine(args.gpus, zero), disk_gb=plan_disk_gb(rows))
        print(json.dumps({**out, "problems": problems}, indent=1))
    else:
        print(text)
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0
