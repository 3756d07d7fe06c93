"""The command line of the toy controls (notebook 03, Part A): run a grid, write its summary, the README block.

::

    python -m trgrpo.toy_controls run controls|kl_high|tau|kl_low   # resumable; refuses a tree with uncommitted changes
    python -m trgrpo.toy_controls summary                           # writes results/toy/{controls,kl,tau}/summary.json
    python -m trgrpo.toy_controls readme                            # rewrites the README's toy-findings block
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from ..results.toy_controls_readme import update_readme
from ..results.toy_controls_summary import SUMMARIES
from .experiment import RESULTS_DIR, write_result
from .toy_controls_grids import CONTROLS_GROUP, EVAL_EVERY, GRIDS, GRIDS_GROUP, PLAN, TASK, task_choice

# the first line of trgrpo.pipeline.toy_controls' docstring, as the command's description
DESCRIPTION = "The controls experiments of notebook 03 (Part A): what TR-GRPO's effect at toy scale is made of."


def run(grid: str, *, results_dir: Path | str | None = None, allow_dirty: bool = False, limit: int | None = None):
    """Run a grid (resumable) on a clean tree; every record carries the commit and ``git_dirty``."""
    from . import toy
    from .experiment import git_dirty

    if git_dirty() and not allow_dirty:
        raise SystemExit("the tree has uncommitted changes: commit first (or pass --allow-dirty; records say so)")
    specs = GRIDS[grid]()
    if limit is not None:
        specs = specs[:limit]
    # one seed at a time (its warm start, then its runs): a grid stopped early leaves complete, paired seeds
    summaries = []
    for seed in dict.fromkeys(s["seed"] for s in specs):
        part = [s for s in specs if s["seed"] == seed]
        summaries.append(
            toy.run_grid(
                part, results_dir=results_dir, eval_every=EVAL_EVERY, threads=1, progress=False, eval_sampled=False
            )
        )
    return {k: sum(x[k] for x in summaries) for k in ("n_specs", "n_run", "n_skipped", "wall_time_s", "cpu_time_s")}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m trgrpo.toy_controls", description=DESCRIPTION)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a grid (resumable)")
    r.add_argument("grid", choices=sorted(GRIDS))
    r.add_argument("--results-dir", default=None)
    r.add_argument("--allow-dirty", action="store_true")
    r.add_argument("--limit", type=int, default=None)
    s = sub.add_parser("summary", help="write the summary.json of each grid from its records")
    s.add_argument("grids", nargs="*", default=sorted(SUMMARIES))
    s.add_argument("--results-dir", default=None)
    sub.add_parser("readme", help="rewrite the README's toy-findings block from the summaries")
    h = sub.add_parser("hist", help="write results/toy/controls/token_hist.json (task choice)")
    h.add_argument("--allow-dirty", action="store_true")
    p = sub.add_parser("plan", help="write results/toy/controls/plan.json")
    p.add_argument("--results-dir", default=None)
    a = ap.parse_args(argv)
    if a.cmd == "run":
        print(json.dumps(run(a.grid, results_dir=a.results_dir, allow_dirty=a.allow_dirty, limit=a.limit)))
    elif a.cmd == "summary":
        for g in a.grids:
            SUMMARIES[g](a.results_dir)
            print(f"wrote {Path(a.results_dir or RESULTS_DIR) / GRIDS_GROUP[g] / 'summary.json'}")
    elif a.cmd == "readme":
        print("README changed" if update_readme() else "README unchanged")
    elif a.cmd == "hist":
        from .experiment import git_dirty

        if git_dirty() and not a.allow_dirty:
            raise SystemExit("the tree has uncommitted changes: commit first (or pass --allow-dirty)")
        from . import toy

        toy.quiet()
        toy.token_grad_analysis(TASK, 0, n_prompts=128, group=CONTROLS_GROUP)  # Theorem 3.1 on the warm start
        out = task_choice()
        for t, hst in out["candidates"].items():
            print(
                f"{t}: {hst['n_tokens']} tokens, at L {hst['share_at_lower']:.3f}, between "
                f"{hst['share_between']:.3f}, at U {hst['share_at_upper']:.3f}"
            )
    else:
        write_result(CONTROLS_GROUP, "plan", {"kind": "plan", **PLAN}, a.results_dir)

