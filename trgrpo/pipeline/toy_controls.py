"""The controls experiments of notebook 03 (Part A): what TR-GRPO's effect at toy scale is made of.

Three grids on the ``addition`` task (the toy task whose sampled tokens most often fall strictly between the
weight bounds L and U, :func:`token_histogram`), each a list of :func:`trgrpo.pipeline.toy.toy_spec` dicts:

* :func:`controls_grid` -- GRPO (``equal``), TR with the weight outside the clip (``surrogate``) and inside it
  (``ratio``, Eq. 9 as printed), ``const`` (TR's batch-mean scale, no regulation), ``tr_norm`` (TR's regulation,
  no scale) and ``reverse`` (2 - w), paired by seed: the same seed gives the same warm start and data order;
* :func:`kl_grid` -- Reading 3: ``kl_weighting`` eq10 / outside / plain under TR (surrogate) at two betas;
* :func:`tau_grid` -- Table 7's tau sweep; its GRPO baseline and tau = 9 are the controls grid's runs of the
  same seeds.

The primary metric and the evaluation steps are fixed here (:data:`PLAN`) before any run; the summary of a grid
(:func:`controls_summary`) is computed from the records it names. Command line::

    python -m trgrpo.toy_controls run controls      # resumable; refuses a tree with uncommitted changes
    python -m trgrpo.toy_controls summary            # writes results/toy/controls/summary.json (and kl/, tau/)

Layout: :mod:`~trgrpo.pipeline.toy_controls_grids` (plan, grids, task choice),
:mod:`~trgrpo.results.toy_controls_summary`
(metrics, summaries), :mod:`~trgrpo.results.toy_controls_readme` (the README block and notebook 03's verdict),
:mod:`~trgrpo.pipeline.toy_controls_cli` (the command line). This module re-exports their public names.
"""

from __future__ import annotations

from ..results.toy_controls_readme import (
    ARM_TEXT,
    README_END,
    README_START,
    arm_text,
    classify,
    clip_of,
    config_max_grad_norm,
    controls_table,
    delta_text,
    fmt_delta,
    kl_grip,
    kl_sentence,
    num,
    row_mde,
    strength,
    tau_sentence,
    update_readme,
    verdict_markdown,
    versus,
    weight_range_divide,
)
from ..results.toy_controls_summary import (
    SUMMARIES,
    arm_rows,
    controls_summary,
    eval_at,
    kl_arms,
    kl_label,
    kl_summary,
    kl_window,
    load_group,
    primary_metric,
    short_metric,
    tau_summary,
)
from .toy_controls_cli import main, run
from .toy_controls_grids import (
    ARMS,
    BASELINE,
    CONTROL_SEEDS,
    CONTROLS_GROUP,
    EVAL_EVERY,
    EVAL_STEPS,
    GRIDS,
    GRIDS_GROUP,
    KL_BETAS,
    KL_GROUP,
    KL_SEEDS,
    KL_WEIGHTINGS,
    N_EVAL,
    PLAN,
    PRIMARY_METRIC,
    PROB_BINS,
    SHORT_EVAL_STEPS,
    SHORT_METRIC,
    SHORT_STEPS,
    STEPS,
    TASK,
    TAU_GROUP,
    TAU_SEEDS,
    TAUS,
    WEIGHT_BINS,
    controls_grid,
    kl_grid,
    kl_name,
    task_choice,
    tau_grid,
    token_histogram,
    weight_shares,
)

__all__ = [
    # plan and grids
    "TASK",
    "CONTROLS_GROUP",
    "KL_GROUP",
    "TAU_GROUP",
    "EVAL_EVERY",
    "STEPS",
    "EVAL_STEPS",
    "N_EVAL",
    "PRIMARY_METRIC",
    "ARMS",
    "BASELINE",
    "CONTROL_SEEDS",
    "KL_WEIGHTINGS",
    "KL_BETAS",
    "KL_SEEDS",
    "TAUS",
    "TAU_SEEDS",
    "SHORT_STEPS",
    "SHORT_EVAL_STEPS",
    "SHORT_METRIC",
    "PLAN",
    "controls_grid",
    "kl_name",
    "kl_grid",
    "tau_grid",
    "GRIDS",
    "GRIDS_GROUP",
    # task choice
    "PROB_BINS",
    "WEIGHT_BINS",
    "weight_shares",
    "token_histogram",
    "task_choice",
    # metrics and summaries
    "eval_at",
    "primary_metric",
    "load_group",
    "arm_rows",
    "controls_summary",
    "kl_label",
    "kl_window",
    "short_metric",
    "kl_arms",
    "kl_summary",
    "tau_summary",
    "SUMMARIES",
    # command line
    "run",
    "main",
    # README block and verdict
    "README_START",
    "README_END",
    "ARM_TEXT",
    "num",
    "delta_text",
    "classify",
    "versus",
    "strength",
    "fmt_delta",
    "arm_text",
    "controls_table",
    "verdict_markdown",
    "weight_range_divide",
    "kl_sentence",
    "tau_sentence",
    "update_readme",
    "clip_of",
    "config_max_grad_norm",
    "kl_grip",
    "row_mde",
]

if __name__ == "__main__":
    main()
