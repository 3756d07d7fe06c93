"""What TR-GRPO costs against GRPO (paper App. C.2, Table 8), and what each notebook costs.

``python -m trgrpo.bench`` (``make bench`` runs it with ``OMP_NUM_THREADS=1``) measures

1. **step**: one training step of :class:`trgrpo.TRGRPOTrainer` with Eq. 11 weights (placement ``ratio``
   and ``surrogate``) against ``weight_scheme="equal"`` and TRL's own ``GRPOTrainer``: same seed and
   config, ``learning_rate=0`` so every variant trains on the same rollouts (checked by a hash of the
   completion ids). Each run is a fresh subprocess (so its peak memory is its own); runs alternate
   A B C D, D C B A, ... Phases are timed by wrapping the trainer's methods in the benchmark only:
   rollout (generation, rewards, reference log-probs), loss forward (policy forward + loss), the loss head
   (loss forward minus the policy forward: weights, loss, metrics), backward, optimizer and the rest.
   Wall time and process CPU time; peak RSS of the training steps (``VmHWM`` after resetting it through
   ``/proc/self/clear_refs``) on CPU, ``torch.cuda.max_memory_allocated`` on a GPU.
2. **loss**: :func:`trgrpo.tr_grpo_loss` forward + backward on (64, T) tensors, T = 512 ... 4096, fp32 and
   bf16, with Eq. 11 weights computed from the log-probs, against the same computation with equal weights
   and against the tensor ops of TRL's ``GRPOTrainer._compute_loss`` (``loss_type="dapo"``) replicated.
3. **notebooks** (``--notebooks``, slow): wall time of every notebook in ``notebooks/`` in smoke mode and
   at its CPU default, executed by papermill.

Results go to ``results/bench/{step,loss,notebooks}.json`` (machine, versions, method, repeats) and
:func:`table_markdown` renders them beside the paper's Table 8 into ``results/bench/table.md``.

The code lives in :mod:`trgrpo.tooling` (``bench_common``, ``bench_step``, ``bench_loss``, ``bench_notebooks``,
``bench_table``); this module keeps the command line and every public name where it was.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from .bench_common import (  # noqa: F401 - re-exported: trgrpo.tooling.bench keeps every public name
    LOSS_METHOD,
    LOSS_VARIANTS,
    PAPER_TABLE8,
    PHASE_LABELS,
    RESULTS_DIR,
    ROOT,
    SCHEMA_VERSION,
    STEP_METHOD,
    STEP_PHASES,
    STEP_VARIANTS,
    VARIANT_LABELS,
    machine_meta,
    paired_ratios,
    peak_rss_mb,
    reset_peak_rss,
    rss_mb,
    steady_allocator,
    summarize,
)
from .bench_loss import (  # noqa: F401 - re-exported: trgrpo.tooling.bench keeps every public name
    LossBenchConfig,
    loss_fn,
    loss_inputs,
    profile_loss,
    run_loss_bench,
    saved_tensor_mb,
    time_blocks,
    tr_loss_call,
    trl_dapo_loss,
)
from .bench_notebooks import (  # noqa: F401 - re-exported: trgrpo.tooling.bench keeps every public name
    notebook_plan,
    run_notebook_bench,
)
from .bench_step import (  # noqa: F401 - re-exported: trgrpo.tooling.bench keeps every public name
    BENCH_PROMPTS,
    StepBenchConfig,
    aggregate_step_runs,
    child_step,
    run_step_bench,
    step_run,
)
from .bench_table import (  # noqa: F401 - re-exported: trgrpo.tooling.bench keeps every public name
    README,
    README_END,
    README_START,
    load_results,
    readme_table,
    table_markdown,
    update_readme,
    write_json,
    write_table,
)


def main(argv: list[str] | None = None) -> int:
    """``python -m trgrpo.bench``: parts 1 and 2 by default; ``--notebooks`` adds part 3."""
    ap = argparse.ArgumentParser(prog="python -m trgrpo.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", nargs="+", choices=("step", "loss", "notebooks"), default=None)
    ap.add_argument("--notebooks", action="store_true", help="also time every notebook (slow)")
    ap.add_argument("--quick", action="store_true", help="1 repeat, small shapes: checks the machinery")
    ap.add_argument("--model", default="embedded", help="step benchmark model: 'embedded', a folder or a hub id")
    ap.add_argument("--repeats", type=int, default=None, help="step benchmark repeats per variant")
    ap.add_argument("--variants", nargs="+", choices=tuple(STEP_VARIANTS), default=None, help="step variants")
    ap.add_argument("--steps", type=int, default=None, help="measured steps per run")
    ap.add_argument("--max-completion-length", type=int, default=None)
    ap.add_argument("--num-generations", type=int, default=None)
    ap.add_argument("--loss-repeats", type=int, default=None, help="loss benchmark blocks per variant")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: 1; GPU runs ignore it)")
    ap.add_argument("--no-isolate", action="store_true", help="step runs in this process (no own peak memory)")
    ap.add_argument("--only-notebooks", nargs="*", default=None, help="notebook prefixes, e.g. 01 02")
    ap.add_argument("--out", default=str(RESULTS_DIR))
    ap.add_argument("--table", action="store_true", help="only re-render table.md from the JSON files")
    ap.add_argument("--child-step", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child_step:
        return child_step(*args.child_step)
    out = Path(args.out)
    if args.table:
        print(f"wrote {write_table(out)}")
        if out.resolve() == RESULTS_DIR.resolve() and update_readme(out):
            print(f"updated the cost table in {README}")
        return 0
    parts = args.parts or ["step", "loss"]
    if args.notebooks and "notebooks" not in parts:
        parts.append("notebooks")
    threads = args.threads if args.threads is not None else 1
    t0 = time.perf_counter()
    print(f"trgrpo.tooling.bench: parts {parts}, results in {out}", flush=True)
    if "step" in parts:
        kw: dict[str, Any] = dict(model=args.model, threads=threads, isolate=not args.no_isolate)
        if args.quick:
            kw.update(repeats=1, steps=1, max_completion_length=8, num_generations=4)
        for name, val in (
            ("repeats", args.repeats),
            ("steps", args.steps),
            ("max_completion_length", args.max_completion_length),
            ("num_generations", args.num_generations),
            ("variants", tuple(args.variants) if args.variants else None),
        ):
            if val is not None:
                kw[name] = val
        rec = run_step_bench(StepBenchConfig(**kw))
        print(f"wrote {write_json(rec, out / 'step.json')} ({rec['runtime_s']:.0f} s)", flush=True)
    if "loss" in parts:
        kw = dict(threads=threads)
        if args.quick:
            kw.update(lengths=(512,), repeats=2, iters=3)
        if args.loss_repeats is not None:
            kw["repeats"] = args.loss_repeats
        rec = run_loss_bench(LossBenchConfig(**kw))
        print(f"wrote {write_json(rec, out / 'loss.json')} ({rec['runtime_s']:.0f} s)", flush=True)
    if "notebooks" in parts:
        rec = run_notebook_bench(only=args.only_notebooks)
        print(f"wrote {write_json(rec, out / 'notebooks.json')} ({rec['runtime_s']:.0f} s)", flush=True)
    path = write_table(out)
    if out.resolve() == RESULTS_DIR.resolve():
        update_readme(out)
    print(f"wrote {path}\n", flush=True)
    print(path.read_text(), flush=True)
    print(f"trgrpo.tooling.bench: done in {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
