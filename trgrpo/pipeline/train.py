"""CLI: ``python -m trgrpo.train --config experiments/<name>.yaml [--set key=value ...]``.

The YAML holds one run spec (the fields of :class:`trgrpo.pipeline.experiment.RunSpec`) or ``base`` plus a
``grid`` of overrides, e.g.::

    base: {task: kk, model: Qwen/Qwen2.5-3B-Instruct, steps: 200, group: kk_qwen3b}
    grid:
      - {scheme: equal, seed: 0}
      - {scheme: tr, seed: 0}

Works in-process and under ``accelerate launch --config_file configs/zero2.yaml -m trgrpo.train ...``.
Runs whose results file already exists are skipped unless ``--force``, which re-runs them from scratch (their
checkpoints cleared); otherwise a run with a checkpoint resumes (one whose last step is saved only evaluates).
``--world-size N --print-config`` prints, without loading a model, one JSON object (a list for several specs)
with the batch layout TRL will get on N processes and the memory settings (:func:`train_config_summary`).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

import yaml

from .experiment import RESULTS_DIR, RunSpec, run, train_config_summary


def parse_value(text: str):
    return yaml.safe_load(text)


def load_specs(path: str | Path, overrides: dict | None = None) -> list[RunSpec]:
    data = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping (a run spec, or base + grid)")
    # modules that register the specs' tasks (trgrpo.pipeline.fullscale.write_specs)
    for module in data.get("imports", []):
        importlib.import_module(module)
    base = dict(data.get("base", {k: v for k, v in data.items() if k not in ("grid", "imports")}))
    grid = data.get("grid") or [{}]
    return [RunSpec.from_dict({**base, **g, **(overrides or {})}) for g in grid]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Train and evaluate TR-GRPO runs from a YAML spec")
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override spec fields")
    ap.add_argument(
        "--force", action="store_true", help="re-run from scratch (checkpoints cleared), even when results exist"
    )
    ap.add_argument("--results", default=str(RESULTS_DIR))
    ap.add_argument("--no-keep-checkpoints", action="store_true", help="delete a run's checkpoints once it is done")
    ap.add_argument("--print-config", action="store_true", help="print the batch layout as JSON and exit")
    ap.add_argument("--world-size", type=int, default=None, help="processes assumed by --print-config")
    args = ap.parse_args(argv)
    overrides = {}
    for item in args.set:
        if "=" not in item:
            ap.error(f"--set expects KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        overrides[k] = parse_value(v)
    specs = load_specs(args.config, overrides)
    if args.print_config:
        from .experiment import env_world_size

        world = args.world_size or env_world_size()
        rows = [train_config_summary(s, world) for s in specs]
        summary = {k: v for k, v in rows[0].items() if k != "name"}
        differs = sorted({k for r in rows for k, v in r.items() if k != "name" and v != summary.get(k)})
        summary = {k: v for k, v in summary.items() if k not in differs}
        summary["runs"] = [r["name"] for r in rows]
        if differs:  # fields that are not the same for every run: listed per run
            summary["per_run"] = [{k: r[k] for k in ["name", *differs]} for r in rows]
        print(json.dumps(summary, indent=1))
        return 0
    results = Path(args.results).resolve()  # absolute: launchers may run from another directory
    for k, spec in enumerate(specs, 1):
        target = results / spec.group / f"{spec.name}.json"
        if target.exists() and not args.force:
            print(f"[{k}/{len(specs)}] {spec.name}: results exist, skipped ({target})")
            continue
        print(f"[{k}/{len(specs)}] {spec.name}", flush=True)
        run(spec, results_dir=results, keep_checkpoints=not args.no_keep_checkpoints, resume=not args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
