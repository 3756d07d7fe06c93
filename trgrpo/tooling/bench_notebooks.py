"""Part 3 of the cost benchmark (``--notebooks``): wall time of every notebook, executed by papermill."""

from __future__ import annotations

import os
import resource
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .bench_common import ROOT, SCHEMA_VERSION, _print, _say, machine_meta

# ----------------------------------------------------------------------------------------------------------------
# Part 3: notebooks


def notebook_plan(root: Path = ROOT) -> list[tuple[Path, str]]:
    """Every numbered notebook with its CPU default mode ('smoke' for the GPU notebooks 05-07, as `make run`)."""
    from .run_all import GPU_NOTEBOOKS, notebooks

    return [(nb, "smoke" if nb.name.startswith(GPU_NOTEBOOKS) else "default") for nb in notebooks(root)]


def run_notebook_bench(
    out_dir: Path | None = None,
    *,
    modes: Sequence[str] = ("smoke", "default"),
    only: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = _print,
    root: Path = ROOT,
    in_copy: bool = True,
) -> dict:
    """Part 3: wall time (and the kernel's CPU time) of each notebook, smoke mode and CPU default.

    ``in_copy``: execute in a temporary copy of the project (without .venv, .git, runs), so that what the
    notebooks write (figures/, results/) leaves the working tree as it was.
    """
    from .batch import run_notebook

    t0 = time.perf_counter()
    out_dir = Path(out_dir or root / "runs" / "bench-notebooks")
    tmp = None
    if in_copy and (root / "notebooks").is_dir():
        import shutil

        tmp = tempfile.TemporaryDirectory(prefix="trgrpo-bench-nb-")
        ignore = shutil.ignore_patterns(".venv", ".git", "runs", "checkpoints", "__pycache__", ".*_cache", "student")
        shutil.copytree(root, Path(tmp.name) / root.name, ignore=ignore, symlinks=True)
        run_root = Path(tmp.name) / root.name
    else:
        run_root = root
    plan = notebook_plan(run_root)
    if only:
        plan = [(nb, m) for nb, m in plan if any(nb.name.startswith(k) for k in only)]
    rows = []
    for nb, cpu_default in plan:
        done: dict[str, dict] = {}
        for mode in modes:
            smoke = mode == "smoke" or cpu_default == "smoke"
            key = "smoke" if smoke else "default"
            if key in done:  # a GPU notebook's CPU default is its smoke run: no second execution
                rows.append({**done[key], "mode": mode, "runs_as": key, "reused": True})
                continue
            _say(progress, f"[bench notebooks] {nb.name} ({mode}{', as smoke' if smoke and mode != 'smoke' else ''})")
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            row = run_notebook(nb, out_dir / key, smoke=smoke)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            row = {
                "notebook": nb.name,
                "mode": mode,
                "runs_as": key,
                "ok": row["ok"],
                "wall_s": row["seconds"],
                "children_cpu_s": round((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), 1),
                "error": row["error"],
                "reused": False,
            }
            done[key] = row
            rows.append(row)
            _say(progress, f"      {'ok' if row['ok'] else 'FAILED'} in {row['wall_s']:.0f} s wall {row['error']}")
    if tmp is not None:
        tmp.cleanup()
    return {
        "benchmark": "notebooks",
        "schema": SCHEMA_VERSION,
        **machine_meta(),
        "method": "papermill (trgrpo.tooling.batch.run_notebook), kernel python3 of the project's venv; wall time of "
        "the "
        "whole execution incl. kernel start; children_cpu_s = CPU time of reaped child processes (the kernel) "
        "during it. Notebooks 05-07 run in smoke mode at their CPU default (as `make run`), so that row is reused. "
        + (
            "Executed in a temporary copy of the project (the working tree's figures/ and results/ untouched)."
            if tmp is not None
            else "Executed in the project itself."
        ),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "rows": rows,
        "notebooks_found": len(plan),
        "runtime_s": time.perf_counter() - t0,
    }
