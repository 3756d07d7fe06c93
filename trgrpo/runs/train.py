"""``trgrpo train --config experiments/<name>.yaml [--set key=value ...]``: train and evaluate the runs of a
YAML file, one run spec (:class:`trgrpo.runs.spec.RunSpec` fields) or ``base`` + a ``grid`` of overrides.

One spec trains in this process; several specs, or ``--gpus N``, start one process per spec
(:func:`trgrpo.runs.fullscale.launch`). Existing results are skipped unless ``--force`` (re-run from scratch); a run
with a checkpoint resumes. ``--print-config`` prints the batch layout without loading a model."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

from trgrpo.config import ConfigError
from trgrpo.files import RESULTS_DIR
from trgrpo.runs import fullscale
from trgrpo.runs.checkpoints import DiskFull
from trgrpo.runs.plan import MAX_RUN_HOURS, never_ends
from trgrpo.runs.records import RecordError
from trgrpo.runs.spec import RunSpec, env_world_size, load_specs, parse_overrides, train_config_summary
from trgrpo.tasks import get_task


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="trgrpo train", description="Train and evaluate TR-GRPO runs from a YAML spec")
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override spec fields")
    ap.add_argument(
        "--force", action="store_true", help="re-run from scratch (checkpoints cleared), even when results exist"
    )
    ap.add_argument("--results", default=str(RESULTS_DIR))
    ap.add_argument("--no-keep-checkpoints", action="store_true", help="delete a run's checkpoints once it is done")
    ap.add_argument("--print-config", action="store_true", help="print the batch layout as JSON and exit")
    ap.add_argument("--world-size", type=int, default=None, help="processes assumed by --print-config")
    ap.add_argument("--gpus", type=int, default=None, help="GPUs per run (> 1: each run under accelerate launch)")
    ap.add_argument("--accelerate-config", default="configs/zero2.yaml", help="with --gpus > 1 (7B-8B: zero3.yaml)")
    ap.add_argument(
        "--allow-long",
        action="store_true",
        help=f"train runs estimated over {MAX_RUN_HOURS:g} h each, or of a model the planner cannot size",
    )
    args = ap.parse_args(argv)
    world = args.world_size or env_world_size()
    try:
        specs = load_specs(args.config, parse_overrides(args.set))
        rows = []
        for i, spec in enumerate(specs):
            try:
                rows.append({**train_config_summary(spec, world), "data": data_options(spec)})
            except ValueError as e:  # the batch does not split over `world` processes
                raise ConfigError(f"{args.config}: run {i} ({spec.name}): {e}") from None
        # a run that would never end, or one the planner cannot size: on --gpus H100s (a CPU is slower)
        if not args.allow_long and (problem := never_ends(specs, gpus=args.gpus or 1)):
            raise ConfigError(f"{args.config}: {problem}")
    except ConfigError as e:
        print(f"{ap.prog}: error: {e}", file=sys.stderr)
        return 2
    if args.print_config:
        summary = {k: v for k, v in rows[0].items() if k != "name"}
        differs = sorted({k for r in rows for k, v in r.items() if k != "name" and v != summary.get(k)})
        summary = {k: v for k, v in summary.items() if k not in differs}
        summary["runs"] = [r["name"] for r in rows]
        if differs:  # fields that are not the same for every run: listed per run
            summary["per_run"] = [{k: r[k] for k in ["name", *differs]} for r in rows]
        print(json.dumps(summary, indent=1))
        return 0
    cpu, problem = cpu_processes()
    zero, problem = (None, problem) if problem else cpu_zero(cpu)
    gpus, problem = (0, problem) if cpu > 1 or problem else processes(specs, args.gpus)
    for i, spec in enumerate(specs):  # the data offline, after the machine's checks, before any model loads
        hub = get_task(spec.task).hub_data
        for option, repo, config in hub(spec) if hub else ():
            if not problem and (offline := hub_offline_problem(repo, config)):
                problem = f"{args.config}: run {i} ({spec.name}): {option}: hub dataset {repo!r} {offline}"
    if problem:
        print(f"{ap.prog}: error: {problem}", file=sys.stderr)
        return 2
    try:  # one process per spec with `gpus` (or CPU processes), else every spec in this process
        fullscale.launch(
            specs,
            gpus=gpus,
            accelerate_config=args.accelerate_config,
            results_dir=Path(args.results).resolve(),  # absolute: launchers may run from another directory
            force=args.force,
            keep_checkpoints=not args.no_keep_checkpoints,
            cpu_processes=cpu,
            isolate=gpus is not None,
            cpu_zero=zero,
        )
    except (ConfigError, RecordError, ConnectionError) as e:  # another run's record or checkpoints, a broken record,
        print(f"{ap.prog}: error: {e}", file=sys.stderr)  # a folder not writable, a run already running, a service a
        return 2  # run needs (search: its retrieval server) that does not answer
    except (RuntimeError, DiskFull) as e:  # a run's process failed (its log says why), or its disk is full
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def cpu_processes() -> tuple[int, str | None]:
    """``TRGRPO_CPU_PROCESSES=N`` (N >= 2): each run under ``torchrun --nproc_per_node N`` on CPU (gloo), the
    processes of the GPU path without a GPU (tests, docs/gpu.md); (1, None) when unset or inside a launcher."""
    value = os.environ.get("TRGRPO_CPU_PROCESSES", "")
    if not value or "WORLD_SIZE" in os.environ:
        return 1, None
    if not value.isdigit() or int(value) < 2:
        return 1, f"TRGRPO_CPU_PROCESSES={value!r}: a number of processes >= 2, or unset"
    return int(value), None


def cpu_zero(processes: int) -> tuple[int | None, str | None]:
    """``TRGRPO_CPU_ZERO=2`` or ``3`` beside ``TRGRPO_CPU_PROCESSES``: the runs under ``accelerate launch`` with
    DeepSpeed ZeRO-2 / ZeRO-3 on CPU (its CPU accelerator, gloo): the engine of Tables 1 and 2 on 7B, tested here."""
    value = os.environ.get("TRGRPO_CPU_ZERO", "")
    if not value or "WORLD_SIZE" in os.environ:
        return None, None
    if value not in ("2", "3") or processes < 2:
        return None, f"TRGRPO_CPU_ZERO={value!r}: 2 or 3, with TRGRPO_CPU_PROCESSES >= 2"
    if importlib.util.find_spec("deepspeed") is None or shutil.which(os.environ.get("CXX", "c++")) is None:
        return None, (
            "TRGRPO_CPU_ZERO needs deepspeed (pip install -e '.[dev]') and a C++ compiler for its CPU communication "
            "op (apt-get install -y g++)"
        )
    return int(value), None


def data_options(spec: RunSpec) -> dict:
    """What ``--print-config`` says a run trains and evaluates on: K&K's ``train_path`` / ``eval_path`` (none:
    reasoning-gym's generated puzzles, the stated fallback), math's ``train`` / ``eval_sets`` (none: generated)."""
    if spec.task not in ("kk", "math"):
        return {}
    opts = get_task(spec.task).options(**spec.task_options)
    if spec.task == "kk":
        from trgrpo.tasks.kk import KK_GENERATED

        return {k: getattr(opts, k) or KK_GENERATED for k in ("train_path", "eval_path")}
    return {"train": opts.train, "eval_sets": list(opts.eval_sets)}


def processes(specs: list[RunSpec], gpus: int | None) -> tuple[int | None, str | None]:
    """(GPUs per run when each spec gets its own process, None to train here; the one-line reason to refuse)."""
    if problem := fullscale.refuse_without_cuda(specs):
        return None, problem
    visible = fullscale.n_devices()
    if "WORLD_SIZE" in os.environ:  # a process of accelerate launch / torchrun: the launcher chose the GPUs
        if len(specs) > 1:
            return None, (
                f"{len(specs)} specs under a launcher (WORLD_SIZE={os.environ['WORLD_SIZE']}), one per launch: "
                "`trgrpo train --config FILE --gpus N` launches each spec on N GPUs"
            )
        return None, None
    if gpus is not None and not 1 <= gpus <= visible:
        return None, f"--gpus {gpus}: {visible} GPU(s) visible"
    if gpus is None and visible > 1:
        return None, (
            f"{visible} GPUs visible and no launcher (WORLD_SIZE unset): TRL would spread one model over them and run "
            f"them one after another; --gpus {visible} (each run under accelerate launch), or one GPU: "
            "CUDA_VISIBLE_DEVICES=0"
        )
    if len(specs) == 1 and (gpus or visible) == visible and visible <= 1:
        return None, None
    return (visible if gpus is None else gpus), None


def hub_offline_problem(repo: str, config: str | None) -> str | None:
    """Offline (``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` set): why a hub dataset cannot be read (not in the
    local datasets cache); None when it can, or when the hub is not offline (its load then says what fails)."""
    import datasets

    if not datasets.config.HF_HUB_OFFLINE:  # either variable, as datasets reads them
        return None
    try:
        datasets.load_dataset_builder(repo, config)
    except Exception as e:  # ConnectionError (OfflineModeIsEnabled), DatasetNotFoundError, ...
        return f"not in the local datasets cache and the hub is offline ({type(e).__name__})"
    return None
