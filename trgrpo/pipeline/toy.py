"""Toy runs that finish on a laptop CPU: a 1M-parameter Qwen2 learning 2-digit addition (notebook 03, Part A).

This module gathers the toy's public names; the pieces live in modules named after what they do, smallest first:

* :mod:`trgrpo.pipeline.toy_model` - the word-level tokenizer (one token per digit) and the ~1M-parameter Qwen2
  (4 layers x 128 hidden), the toy's RL hyperparameters :data:`TOY_DEFAULTS`;
* :mod:`trgrpo.tasks.addition` - the tasks ``addition`` (prompt ``"1 2 + 3 4 ="``, completion ``"4 6"``) and
  ``addition_trace`` (a worked column sum), their splits, rewards with TRL's signature, generation and held-out
  accuracy, registered as run tasks so a run goes through :func:`trgrpo.pipeline.experiment.run`;
* :mod:`trgrpo.pipeline.warm_start` - the supervised warm start, stopped at the first held-out check above a threshold
and
  cached by seed, so the RL phase starts from a policy with reward variance inside each group (Eq. 4);
* :mod:`trgrpo.pipeline.toy_run` - run specs, one run (:func:`run_toy`), the resumable scheme x seed grid of Table 4 and
  the tau sweep of Table 7 at toy scale (:func:`run_grid`);
* :mod:`trgrpo.results.toy_analysis` - per-token ||grad log pi(o_t)|| against pi(o_t) (Theorem 3.1 / Eq. 8, Theorem 3.2
/
  Eq. 13) and the tables of the grid for notebook 03.
"""

from __future__ import annotations

from ..results.toy_analysis import (  # noqa: F401
    MAIN_LABELS,
    TAUS,
    final_table,
    grad_per_weight,
    grad_per_weight_cv,
    grad_table,
    grid_cost,
    group_runs,
    tau_table,
    token_grad_analysis,
    token_grad_norms,
    zero_grad_table,
)
from ..tasks.addition import (  # noqa: F401
    MAX_COMPLETION,
    TASK_NAMES,
    correctness_reward,
    evaluate_accuracy,
    format_prompt,
    generate,
    make_random_reward,
    parse_answer,
    records,
    spaced,
    splits,
    target_completion,
    trace_completion,
)
from .records import RESULTS_DIR  # noqa: F401
from .toy_model import (  # noqa: F401
    EOS,
    MICRO_CONFIG,
    PAD,
    SYMBOLS,
    TOY_DEFAULTS,
    UNK,
    VOCAB,
    build_model,
    build_tokenizer,
    n_parameters,
)
from .toy_run import (  # noqa: F401
    GROUP,
    UNWEIGHTED,
    heldout_callback,
    load_runs,
    micro_grid,
    quiet,
    result_path,
    run_grid,
    run_label,
    run_toy,
    toy_spec,
    trace_grid,
)
from .warm_start import WarmStartError, _sft_batch, warm_start, warm_start_info, warm_start_key  # noqa: F401
