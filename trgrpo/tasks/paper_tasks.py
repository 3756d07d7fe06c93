"""The paper's tasks registered for :func:`trgrpo.experiment.run`: Knights & Knaves (``kk``, App. B.1.1, Table
1),
math (``math``, App. B.1.2, Table 2) and two-number addition for a small chat model (``arith``, notebook 03 Part B).

Each registration maps a run spec (``n_train``, ``n_eval``, ``task_options``) onto the task module's own data,
reward and evaluation functions; the task modules load only when a run needs them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from trgrpo.tasks import Task, register_task

if TYPE_CHECKING:  # pragma: no cover
    from trgrpo.experiment import RunSpec


def _kk_files(opts: dict, key: str, n: int, n_people) -> list[dict]:
    from trgrpo.tasks import kk

    try:
        return kk.load_kk_files(opts[key], n=n, n_people=n_people)
    except (OSError, ValueError, TypeError) as e:
        raise type(e)(f"task_options.{key}: {e}") from e


def _kk_build(spec: RunSpec, tokenizer):
    """K&K data: the Logic-RL parquet files when ``train_path`` / ``eval_path`` are given (the paper's splits,
    ``test_new`` for evaluation), reasoning-gym's generator offline otherwise."""
    from trgrpo.tasks import kk

    opts = spec.task_options
    n_people = opts.get("n_people", (3, 4, 5, 6, 7))
    eval_people = opts.get("eval_n_people", n_people)
    if opts.get("train_path"):
        train = _kk_files(opts, "train_path", spec.n_train, n_people)
    else:
        train, _ = kk.kk_splits(spec.n_train, 0, n_people=n_people, seed=spec.seed if opts.get("seed_data") else 0)
    if opts.get("eval_path"):
        test = _kk_files(opts, "eval_path", spec.n_eval, eval_people)
    else:
        _, test = kk.kk_splits(spec.n_train, spec.n_eval, n_people=eval_people, seed=0)
    train_keys = {r["quiz"] for r in train}
    test = [r for r in test if r["quiz"] not in train_keys]
    prefill = bool(opts.get("prefill_think", False))
    # TRL always adds a generation prompt to chat prompts: a pre-filled <think> needs text prompts.
    ds = kk.kk_dataset(train, prefill_think=prefill, tokenizer=tokenizer if prefill else None)
    return ds, test


def _kk_data_source(spec: RunSpec, train_ds, records) -> dict:
    from trgrpo.tasks import kk

    opts = spec.task_options
    return {
        "train": kk.kk_source(opts.get("train_path"), "train", len(train_ds)),
        "eval": kk.kk_source(opts.get("eval_path"), "test", len(records)),
        "prefill_think": bool(opts.get("prefill_think", False)),
    }


def _kk_rewards(spec: RunSpec):
    from trgrpo.tasks import kk

    return kk.make_kk_reward_funcs(prefilled_think=bool(spec.task_options.get("prefill_think", False)))


def _kk_eval(model, tokenizer, records, spec: RunSpec) -> dict:
    from trgrpo.tasks import kk

    res = kk.evaluate_kk(
        model,
        tokenizer,
        records,
        batch_size=spec.task_options.get("eval_batch_size", 8),
        max_new_tokens=spec.max_eval_tokens or spec.max_completion_length,
        prefill_think=bool(spec.task_options.get("prefill_think", False)),
    )
    res["accuracy"] = res["avg"]
    return res


# Section 4.1: avg@16 (and pass@16 for AIME) instead of greedy, for the sets whose name (hub name or file stem, any
# case) starts so: "aime24", a local "aime.jsonl" or "AIME_2024.parquet", "amc".
SAMPLED_MATH_SETS = ("amc", "aime")


def _load_math_source(source: str, n: int, seed: int) -> list[dict]:
    from trgrpo.tasks import math as tm

    if source == "generated":
        return tm.generate_math(n, seed=seed)
    if source in tm.MATH_HUB:
        return tm.load_math_hub(source)[:n]
    return tm.load_math_file(source)[:n]


def _math_build(spec: RunSpec, tokenizer):
    """Train on generated arithmetic offline, or a file / hub set (``train``: deepscaler, orz, a path)."""
    from trgrpo.tasks import math as tm

    opts = spec.task_options
    train = _load_math_source(opts.get("train", "generated"), spec.n_train, spec.seed + 1000)
    seen = {r["problem"] for r in train}
    evals = {}
    for name in opts.get("eval_sets", ["generated"]):
        records = _load_math_source(name, spec.n_eval, 99_999)
        evals[Path(name).stem] = [r for r in records if r["problem"] not in seen]
    return tm.math_dataset(train), evals


def _math_data_source(spec: RunSpec, train_ds, evals) -> dict:
    """Each set under the name Table 2 gives it, with its source; generated arithmetic is marked a substitute."""
    from trgrpo.tasks import math as tm

    opts = spec.task_options
    names = opts.get("eval_sets", ["generated"])
    return {
        "train": tm.math_source(opts.get("train", "generated"), len(train_ds)),
        "eval": {Path(n).stem: tm.math_source(n, len(evals.get(Path(n).stem, []))) for n in names},
    }


def _math_rewards(spec: RunSpec):
    from trgrpo.tasks import math as tm

    return [tm.make_math_reward_func()]


def _math_eval(model, tokenizer, evals, spec: RunSpec) -> dict:
    """Table 2 layout: greedy accuracy per set; avg@k / pass@k for AMC and AIME; ``accuracy`` = mean of sets."""
    from trgrpo.tasks import math as tm

    opts = spec.task_options
    max_new = spec.max_eval_tokens or spec.max_completion_length
    out: dict[str, Any] = {"by_set": {}}
    for name, records in evals.items():
        if not records:
            continue
        if name.lower().startswith(SAMPLED_MATH_SETS):
            k = int(opts.get("sampled_k", 16))
            res = tm.evaluate_math_sampled(
                model,
                tokenizer,
                records,
                k=k,
                max_new_tokens=max_new,
                seed=spec.seed,
                batch_size=opts.get("eval_batch_size", 2),
            )
            out["by_set"][name] = {key: v for key, v in res.items() if key.startswith(("avg@", "pass@"))}
        else:
            res = tm.evaluate_math(
                model, tokenizer, records, batch_size=opts.get("eval_batch_size", 8), max_new_tokens=max_new
            )
            out["by_set"][name] = {"accuracy": res["accuracy"]}
    scores = [next(iter(v.values())) for v in out["by_set"].values()]
    out["accuracy"] = sum(scores) / len(scores) if scores else None
    return out


def _arith_build(spec: RunSpec, tokenizer):
    """Small arithmetic for a small chat model (notebook 03, Part B): train and held-out problems are disjoint."""
    from trgrpo.tasks import arith

    low, high = spec.task_options.get("range", arith.DEFAULT_RANGE)
    kind = spec.task_options.get("kind", "add")
    train, test = arith.split_problems(spec.n_train, spec.n_eval, seed=0, low=int(low), high=int(high), kind=kind)
    return arith.arith_dataset(train, tokenizer), test


def _arith_rewards(spec: RunSpec):
    from trgrpo.tasks import arith

    return arith.make_arith_reward_funcs(spec.task_options.get("reward", "answer+format"))


def _arith_eval(model, tokenizer, records, spec: RunSpec) -> dict:
    from trgrpo.tasks import arith

    return arith.evaluate_arith(
        model,
        tokenizer,
        records,
        batch_size=spec.task_options.get("eval_batch_size", 32),
        max_new_tokens=spec.max_eval_tokens or spec.max_completion_length,
    )


register_task("kk", Task(_kk_build, _kk_rewards, _kk_eval, _kk_data_source))
register_task("math", Task(_math_build, _math_rewards, _math_eval, _math_data_source))
register_task("arith", Task(_arith_build, _arith_rewards, _arith_eval))
