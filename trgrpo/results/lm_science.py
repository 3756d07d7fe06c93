"""The real-LM experiment's numbers (SmolLM2-135M-Instruct on small arithmetic; runs by
:mod:`trgrpo.pipeline.lm_science`): the stage-0 calibration table and the stress arm's collapse counts, each judged
by the rule its committed plan states."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

ANSWER_REWARD = "rewards/arith_answer_reward/mean"


def stage0_rows(decision: dict) -> list[dict[str, Any]]:
    """One row per stage-0 candidate: sampled accuracy and the share of tokens strictly between L and U before and
    after the GRPO probe, greedy held-out accuracy before and after, and whether the plan's rule accepts it."""
    return [
        {
            "candidate": c["id"],
            "sampled accuracy before → after": (c["before"]["sampled_accuracy"], c["after"]["sampled_accuracy"]),
            "L < w < U before → after": (c["before"]["share_between"], c["after"]["share_between"]),
            "w = U before → after": (c["before"]["share_at_upper"], c["after"]["share_at_upper"]),
            "greedy accuracy before → after": tuple(c["greedy_accuracy"]),
            "s / step": c["seconds_per_step"],
            "accepted": c["accepted"],
        }
        for c in decision["candidates"]
    ]


def collapse_step(record: dict, rule: dict) -> int | None:
    """The step at which a run has collapsed by the plan's ``rule``, None if it has not: the first step of
    ``rule["floor_steps"]`` consecutive steps with answer reward <= ``rule["reward_floor"]``, else (with
    ``final_below_start``) the last step when the final held-out accuracy is below the one before the first step."""
    run = 0
    for h in record["history"]:
        run = run + 1 if h[ANSWER_REWARD] <= rule["reward_floor"] else 0
        if run == rule["floor_steps"]:
            return h["step"] - rule["floor_steps"] + 1
    evals = record["eval_history"]
    if rule.get("final_below_start") and evals[-1]["accuracy"] < evals[0]["accuracy"]:
        return evals[-1]["step"]
    return None


def _by_arm_seed(records: Sequence[dict]) -> dict[tuple[str, int], dict]:
    """The runs of a grid keyed by (arm id, seed): a run is named ``<arm>-seed<k>``."""
    return {(r["name"].rsplit("-seed", 1)[0], r["seed"]): r for r in records}


def stress_summary(records: Sequence[dict], plan: dict, *, treatment: str = "tr", control: str = "grpo") -> dict:
    """Collapses k of n per arm over the seed pairs both arms have, pairs where both or neither collapsed (ties)
    apart, and Fisher's exact test (two-sided) on the 2x2 table of arm x collapsed."""
    from scipy.stats import fisher_exact

    by = _by_arm_seed(records)
    seeds = sorted(s for a, s in by if a == treatment and (control, s) in by)
    steps = {key: collapse_step(rec, plan["collapse"]) for key, rec in sorted(by.items())}
    col = {arm: [steps[(arm, s)] is not None for s in seeds] for arm in (treatment, control)}
    k_t, k_c, n = sum(col[treatment]), sum(col[control]), len(seeds)
    pairs = list(zip(col[treatment], col[control]))
    p = fisher_exact([[k_t, n - k_t], [k_c, n - k_c]])[1] if n else float("nan")
    return {
        "seeds": seeds,
        "collapsed": {treatment: k_t, control: k_c},
        "n": n,
        "both": sum(t and c for t, c in pairs),
        "neither": sum(not t and not c for t, c in pairs),
        f"only {treatment}": sum(t and not c for t, c in pairs),
        f"only {control}": sum(c and not t for t, c in pairs),
        "collapse_steps": {f"{a}-seed{s}": step for (a, s), step in steps.items()},
        "fisher_p": float(p),
        # what the design can detect: a total contrast (n of n against 0) and one a single collapse short of it
        "p_total": float(fisher_exact([[n, 0], [0, n]])[1]) if n else float("nan"),
        "p_one_short": float(fisher_exact([[n, 0], [1, n - 1]])[1]) if n else float("nan"),
    }


def plot_stage0(decision: dict, plan: dict, path: Any = None):
    """Per candidate, the share of sampled tokens strictly between L and U before and after the GRPO probe, with
    the plan's two thresholds: where Eq. 11 can regulate on the real model."""
    import matplotlib.pyplot as plt
    import numpy as np

    rows = decision["candidates"]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(7, 3.8), layout="constrained")
    for dx, when, color in ((-0.2, "before", "C0"), (0.2, "after", "C1")):
        label = "before RL" if when == "before" else f"after {plan['probe']['steps']} GRPO steps"
        ax.bar(x + dx, [r[when]["share_between"] for r in rows], width=0.4, color=color, label=label)
    for key, style in (("share_between_before_min", "--"), ("share_between_after_min", ":")):
        ax.axhline(plan["accept"][key], color="k", ls=style, lw=1, label=f"plan: {key.replace('_', ' ')}")
    for i, r in enumerate(rows):  # the other half of the rule: room to learn
        acc = f"sampled accuracy\n{r['before']['sampled_accuracy']:.2f} → {r['after']['sampled_accuracy']:.2f}"
        ax.annotate(acc, (i, 0.005), ha="center", va="bottom", fontsize=8, color="white", fontweight="bold")
    ax.set_xticks(x, [f"{r['id']} ({r['kind']}, {r['range'][0]}–{r['range'][1]})" for r in rows])
    ax.set_ylim(0, 0.32)
    ax.set_ylabel("share of sampled tokens with L < w < U")
    ax.legend(fontsize=8, loc="upper right", ncols=2)
    m = plan["measure"]
    ax.set_title(f"SmolLM2-135M-Instruct, stage 0: {m['n_prompts']} prompts × {m['samples_per_prompt']} samples "
                 f"at T = {m['temperature']}, seed {plan['probe']['seed']}", fontsize=9)
    if path is not None:
        fig.savefig(path, dpi=100, bbox_inches="tight")
    return fig


def stress_rows(records: Sequence[dict], plan: dict) -> list[dict[str, Any]]:
    """One row per seed: each arm's held-out greedy accuracy before and after, and the step it collapsed at."""
    by = _by_arm_seed(records)
    arms = [a["id"] for a in plan["arms"]]
    rows = []
    for seed in sorted({s for _, s in by}):
        row: dict[str, Any] = {"seed": seed}
        for arm in arms:
            rec = by.get((arm, seed))
            if rec is not None:
                ev = rec["eval_history"]
                row[f"{arm}: accuracy before → after"] = (ev[0]["accuracy"], ev[-1]["accuracy"])
                row[f"{arm}: collapsed at step"] = collapse_step(rec, plan["collapse"])
        rows.append(row)
    return rows


def plot_stress(records: Sequence[dict], plan: dict, path: Any = None):
    """Held-out greedy accuracy along each run, one panel per seed, the arms side by side (paired by seed)."""
    import matplotlib.pyplot as plt

    by = _by_arm_seed(records)
    seeds = sorted({s for _, s in by})
    fig, axes = plt.subplots(1, len(seeds), figsize=(3.2 * len(seeds), 3.2), sharey=True, layout="constrained",
                             squeeze=False)
    for ax, seed in zip(axes[0], seeds):
        for k, arm in enumerate(a["id"] for a in plan["arms"]):
            rec = by.get((arm, seed))
            if rec is not None:
                ev = rec["eval_history"]
                ax.plot([e["step"] for e in ev], [e["accuracy"] for e in ev], "o-", color=f"C{k}", label=arm)
        ax.set_title(f"seed {seed}", fontsize=9)
        ax.set_xlabel("step")
    axes[0, 0].set_ylabel("held-out greedy accuracy")
    axes[0, 0].legend(fontsize=8)
    b = plan["base"]
    fig.suptitle(f"SmolLM2-135M-Instruct, stress arm: lr {b['learning_rate']:g}, {b['steps']} steps, "
                 f"{b['n_eval']} held-out problems, {len(seeds)} paired seeds", fontsize=10)
    if path is not None:
        fig.savefig(path, dpi=100, bbox_inches="tight")
    return fig
