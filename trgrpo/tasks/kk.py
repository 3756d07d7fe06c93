"""The run task ``kk`` (App. B.1.1, Table 1): Knights & Knaves puzzles (:mod:`trgrpo.tasks.kk_puzzles`) from
reasoning-gym's generator, Logic-RL's files or the hub, with Table 5's reward and Table 1's greedy accuracy."""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pydantic import model_validator

from trgrpo.paper import KK_PEOPLE
from trgrpo.tasks import Task, TaskOptions, register_task
from trgrpo.tasks.generation import greedy_generate, render_prompt
from trgrpo.tasks.kk_puzzles import (
    ANSWER_CORRECT,
    FORMAT_OK,
    _n_people_tuple,
    generate_kk,
    kk_prompt,
    kk_reward_parts,
    make_record,
)
from trgrpo.tasks.rows import as_list, completion_text, load_from_hub, read_table

_USER_TURN = (
    re.compile(r"<\|im_start\|>user\n(.*?)\n?<\|im_end\|>", re.DOTALL),  # Logic-RL qwen-instruct template
    re.compile(r"\nUser:(.*?)\nAssistant:", re.DOTALL),  # Logic-RL base template
)
_SOLUTION_ITEM = re.compile(r"\((\d+)\)\s*(\S.*?)\s+is\s+a\s+(knight|knave)\.?", re.IGNORECASE)


def _parse_solution_text_format(text: str) -> tuple[list[str], list[bool]]:
    """Names and roles from "(1) Zoey is a knight\\n(2) Oliver is a knave"; any other non-empty line raises."""
    names, roles = [], []
    for line in str(text).split("\n"):
        if not line.strip():
            continue
        m = _SOLUTION_ITEM.fullmatch(line.strip())
        if m is None or int(m.group(1)) != len(names) + 1:
            expected = f"({len(names) + 1}) <name> is a knight|knave"
            raise ValueError(f"solution_text_format line {line.strip()!r} is not {expected!r}")
        names.append(m.group(2))
        roles.append(m.group(3).lower() == "knight")
    if not names:
        raise ValueError(f"solution_text_format names nobody: {text!r}")
    return names, roles


def _quiz_from_prompt(prompt: Any) -> str | None:
    """The quiz inside a verl-preprocessed Logic-RL prompt (a rendered template in one user message)."""
    try:
        text = prompt if isinstance(prompt, str) else str(as_list(prompt)[-1]["content"])
    except (TypeError, KeyError, IndexError):
        return None
    for pattern in _USER_TURN:
        m = pattern.search(text)
        if m:
            return m.group(1).strip()
    return None


def normalize_kk_row(row: dict[str, Any]) -> dict[str, Any]:
    """One row of the Logic-RL / K-and-K schema (or of Logic-RL's verl parquet) as a normalised record."""
    if not isinstance(row, dict):
        raise TypeError(f"a K&K row is a dict, got {type(row).__name__}")
    reward_model = row.get("reward_model")
    ground_truth = reward_model.get("ground_truth") if isinstance(reward_model, dict) else None
    sol_format = row.get("solution_text_format")
    if sol_format is None and isinstance(ground_truth, dict):
        sol_format = ground_truth.get("solution_text_format")
    from_format = None if sol_format is None else _parse_solution_text_format(sol_format)
    quiz = row.get("quiz") or _quiz_from_prompt(row.get("prompt"))
    names, solution = row.get("names"), row.get("solution")
    if names is None or solution is None:
        if from_format is None:
            raise ValueError(f"a K&K row needs names and solution, or solution_text_format; got keys {sorted(row)}")
        names, solution = from_format
    if quiz is None:
        raise ValueError(f"a K&K row needs a quiz (or a Logic-RL prompt to take it from); got keys {sorted(row)}")
    record = make_record(str(quiz), names, solution)
    if from_format is not None and from_format != (record["names"], record["solution"]):
        raise ValueError(f"solution_text_format disagrees with names/solution in row: {sol_format!r}")
    return record


def _normalized(rows: Iterable[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """:func:`normalize_kk_row` of each row; an error names ``where`` and the row."""
    records = []
    for i, row in enumerate(rows):
        try:
            records.append(normalize_kk_row(row))
        except (ValueError, TypeError) as e:
            raise ValueError(f"{where}: row {i}: {e}") from e
    return records


def load_kk_files(
    paths: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    n: int | None = None,
    n_people: int | Iterable[int] | None = None,
    allow_empty: bool = False,
) -> list[dict[str, Any]]:
    """K&K records from Logic-RL ``.parquet``/``.jsonl``/``.json`` files (raw or verl rows), filtered by ``n_people``;
    ``n`` keeps at most ``n``, round robin over the sizes. Errors name the file and the row."""
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    records = [r for path in items for r in _normalized(read_table(path, allow_empty=allow_empty), str(path))]
    return _select(records, ", ".join(map(str, items)), n=n, n_people=n_people, allow_empty=allow_empty)


def _select(
    records: list[dict[str, Any]],
    where: str,
    *,
    n: int | None,
    n_people: int | Iterable[int] | None,
    allow_empty: bool = False,
) -> list[dict[str, Any]]:
    """The records of ``n_people``; ``n`` keeps at most ``n``, round robin over the sizes."""
    if n_people is not None:
        keep = set(_n_people_tuple(n_people, lo=1, hi=10_000))
        records = [r for r in records if r["n_people"] in keep]
    if not records and not allow_empty:
        sizes = f" with n_people in {n_people}" if n_people is not None else ""
        raise ValueError(f"{where}: no puzzle{sizes}")
    if n is None:
        return records
    by_size: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        by_size.setdefault(r["n_people"], []).append(r)
    rounds = itertools.zip_longest(*(v for _, v in sorted(by_size.items())))  # one record of each size per round
    return [r for round_ in rounds for r in round_ if r is not None][:n]


# The paper's K&K data (App. B.1.1, Logic-RL's splits): the hub dataset Logic-RL prepares its parquet files from,
# config "train" (1000 puzzles per size) / "test" (100 per size, the splits Logic-RL evaluates on), split "<n>ppl",
# rows in the K-and-K schema (quiz, names, solution, solution_text_format). A plan names it as "hub:<repo>".
KK_PAPER_DATA = "hub:K-and-K/knights-and-knaves"
# The stated offline fallback (smoke runs, CI): reasoning-gym's generated puzzles, not the paper's; a spec without a
# train_path / eval_path uses it too, and the record says so (``substitute``).
KK_GENERATED = "reasoning-gym"


def load_kk_hub(
    source: str, split: str, *, n: int | None = None, n_people: int | Iterable[int] = KK_PEOPLE
) -> list[dict[str, Any]]:
    """K&K records of ``source`` ("hub:<repo>", e.g. :data:`KK_PAPER_DATA`), config ``split`` ("train" / "test"),
    one hub split per size ("<n>ppl"); ``n`` at most, round robin over the sizes. Offline: a RuntimeError naming
    what to do instead."""
    repo = source.removeprefix("hub:")
    hint = (
        f"Download it where the hub is reachable (the datasets cache), give local Logic-RL files (train_path / "
        f"eval_path, KK_TRAIN_PATH / KK_EVAL_PATH), or {KK_GENERATED!r} for generated puzzles (not the paper's)."
    )
    records = [
        r
        for p in _n_people_tuple(n_people, lo=1, hi=10_000)
        for r in _normalized(load_from_hub(repo, split, f"{p}ppl", hint), f"{source} ({split}, {p}ppl)")
    ]
    return _select(records, f"{source} ({split})", n=n, n_people=n_people)


def kk_split(source: Any, split: str, *, n: int, n_people: int | Iterable[int], stream: str) -> list[dict[str, Any]]:
    """One split of a run's K&K data: reasoning-gym (None or :data:`KK_GENERATED`), the hub ("hub:<repo>"), or
    Logic-RL files (a path or a list of paths)."""
    if not source or source == KK_GENERATED:
        return generate_kk(n, n_people, stream=stream)
    if isinstance(source, str) and source.startswith("hub:"):
        return load_kk_hub(source, split, n=n, n_people=n_people)
    return load_kk_files(source, n=n, n_people=n_people)


def kk_source(paths: str | os.PathLike | Sequence[str | os.PathLike] | None, split: str, size: int) -> dict[str, Any]:
    """Where a run's K&K split came from, for the run record: the hub, the file(s) (split = their names) or
    reasoning-gym (marked a substitute for the paper's data)."""
    if not paths or paths == KK_GENERATED:
        return {
            "source": KK_GENERATED,
            "generator": "knights_knaves (knight/knave wording)",
            "split": split,
            "size": size,
            "substitute": True,
            "note": "offline fallback: generated puzzles, not the paper's (Logic-RL's K&K)",
        }
    if isinstance(paths, str) and paths.startswith("hub:"):
        repo = paths.removeprefix("hub:")
        return {"source": "hub", "repo": repo, "config": split, "split": split, "size": size, "substitute": False}
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    return {
        "source": "logic-rl-file",
        "path": [str(p) for p in items],
        "split": sorted({os.path.splitext(os.path.basename(str(p)))[0] for p in items}),
        "size": size,
    }


def kk_dataset(records: Sequence[dict[str, Any]], prefill_think: bool = False, *, tokenizer: Any = None) -> Any:
    """A ``datasets.Dataset`` for TRL: ``prompt``, ``names``, ``solution``, ``n_people``; with ``tokenizer`` the prompts
    are rendered to text (a pre-filled ``<think>`` needs text)."""
    import datasets

    prompts: list[Any] = [kk_prompt(r, prefill_think) for r in records]
    if tokenizer is not None:
        prompts = [render_prompt(tokenizer, p)[0] for p in prompts]
    return datasets.Dataset.from_dict(
        {
            "prompt": prompts,
            "names": [list(r["names"]) for r in records],
            "solution": [list(r["solution"]) for r in records],
            "n_people": [int(r["n_people"]) for r in records],
        }
    )


def make_kk_reward_funcs(prefilled_think: bool = False) -> list[Callable[..., list[float]]]:
    """TRL reward functions ``kk_format_reward`` and ``kk_answer_reward`` (Table 5's columns, summed by TRL)."""

    def _parts(completions: Sequence[Any], kwargs: dict[str, Any]) -> list[tuple[float, float]]:
        names, solution = kwargs.get("names"), kwargs.get("solution")
        if names is None or solution is None:
            raise KeyError("the K&K reward needs the dataset columns 'names' and 'solution' (see kk_dataset)")
        if not (len(names) == len(solution) == len(completions)):
            raise ValueError("completions, names and solution must have the same length")
        return [
            kk_reward_parts(completion_text(c), n, s, prefilled_think=prefilled_think)
            for c, n, s in zip(completions, names, solution)
        ]

    def kk_format_reward(
        prompts: Any = None, completions: Sequence[Any] = (), completion_ids: Any = None, **kwargs: Any
    ) -> list[float]:
        """Table 5 format reward: +1 / -1."""
        return [f for f, _ in _parts(completions, kwargs)]

    def kk_answer_reward(
        prompts: Any = None, completions: Sequence[Any] = (), completion_ids: Any = None, **kwargs: Any
    ) -> list[float]:
        """Table 5 answer reward: +2 / -1.5 / -2."""
        return [a for _, a in _parts(completions, kwargs)]

    return [kk_format_reward, kk_answer_reward]


def kk_accuracy(
    completions: Sequence[Any], records: Sequence[dict[str, Any]], *, prefilled_think: bool = False
) -> dict[str, Any]:
    """Accuracy by number of people, their mean ``avg`` (Table 1), ``overall``, ``format_rate`` and the counts."""
    if len(completions) != len(records):
        raise ValueError(f"{len(completions)} completions for {len(records)} records")
    if not records:
        raise ValueError("evaluate at least one record")
    hits: dict[int, list[bool]] = {}
    fmt_ok = 0
    for c, r in zip(completions, records):
        fmt, ans = kk_reward_parts(c, r["names"], r["solution"], prefilled_think=prefilled_think)
        hits.setdefault(int(r["n_people"]), []).append(ans == ANSWER_CORRECT)
        fmt_ok += fmt == FORMAT_OK
    by_n = {k: sum(v) / len(v) for k, v in sorted(hits.items())}
    total = sum(sum(v) for v in hits.values())
    return {
        "by_n_people": by_n,
        "avg": sum(by_n.values()) / len(by_n),
        "overall": total / len(records),
        "format_rate": fmt_ok / len(records),
        "n": len(records),
        "n_by_n_people": {k: len(v) for k, v in sorted(hits.items())},
    }


def evaluate_kk(
    model: Any,
    tokenizer: Any,
    records: Sequence[dict[str, Any]],
    *,
    batch_size: int = 8,
    max_new_tokens: int = 1024,
    prefill_think: bool = False,
) -> dict[str, Any]:
    """Greedy K&K evaluation in Table 1's layout (:func:`kk_accuracy`), ``accuracy`` = ``avg``."""
    prompts = [kk_prompt(r, prefill_think) for r in records]
    completions = greedy_generate(model, tokenizer, prompts, batch_size=batch_size, max_new_tokens=max_new_tokens)
    result = kk_accuracy(completions, records, prefilled_think=prefill_think)
    result["accuracy"] = result["avg"]
    return result


def _build(spec: Any, tokenizer):
    """The paper's data from the hub, Logic-RL files (``train_path`` / ``eval_path``) or reasoning-gym's generator
    (streams ``train`` / ``test``; :func:`kk_split`); eval puzzles seen in training are dropped."""
    o = KKOptions(**spec.task_options)
    train = kk_split(o.train_path, "train", n=spec.n_train, n_people=o.n_people, stream="train")
    test = kk_split(o.eval_path, "test", n=spec.n_eval, n_people=o.eval_n_people, stream="test")
    train_keys = {r["quiz"] for r in train}
    test = [r for r in test if r["quiz"] not in train_keys]
    return kk_dataset(train, prefill_think=o.prefill_think, tokenizer=tokenizer if o.prefill_think else None), test


def _data_source(spec: Any, train_ds, records) -> dict:
    o = KKOptions(**spec.task_options)
    return {
        "train": kk_source(o.train_path, "train", len(train_ds)),
        "eval": kk_source(o.eval_path, "test", len(records)),
        "prefill_think": o.prefill_think,
    }


def _rewards(spec: Any):
    return make_kk_reward_funcs(prefilled_think=KKOptions(**spec.task_options).prefill_think)


def _evaluate(model, tokenizer, records, spec: Any) -> dict:
    o = KKOptions(**spec.task_options)
    return evaluate_kk(
        model,
        tokenizer,
        records,
        max_new_tokens=spec.max_eval_tokens or spec.max_completion_length,
        prefill_think=o.prefill_think,
        **o.eval_batch(),
    )


class KKOptions(TaskOptions):
    """The K&K task's options: Logic-RL files or reasoning-gym's generator (2..7 people)."""

    n_people: int | list[int] | tuple[int, ...] = KK_PEOPLE
    eval_n_people: int | list[int] | tuple[int, ...] | None = None  # None: n_people
    train_path: str | list[str] = ""  # none: reasoning-gym's generator
    eval_path: str | list[str] = ""
    prefill_think: bool = False

    @model_validator(mode="after")
    def _sizes(self) -> KKOptions:
        if self.eval_n_people is None:
            self.eval_n_people = self.n_people
        for field, path in (("n_people", self.train_path), ("eval_n_people", self.eval_path)):
            try:  # a file may hold any size, the generator 2..7
                _n_people_tuple(getattr(self, field), *((1, 10_000) if path else (2, 7)))
            except ValueError as e:
                raise ValueError(f"{field}{str(e).removeprefix('n_people')}") from None
        return self


def _check_data(spec: Any) -> None:
    """Read the spec's Logic-RL files as :func:`_build` will (every row normalised, the sizes present)."""
    o = KKOptions(**spec.task_options)
    for key, paths, sizes in (("train_path", o.train_path, o.n_people), ("eval_path", o.eval_path, o.eval_n_people)):
        if paths and paths != KK_GENERATED and not str(paths).startswith("hub:"):  # local files
            try:
                load_kk_files(paths, n_people=sizes)
            except (OSError, ValueError, TypeError) as e:
                raise ValueError(f"task_options.{key}: {e}") from None


def _hub_data(spec: Any) -> list[tuple[str, str, str | None]]:
    """The hub sets ("hub:<repo>") a spec's ``train_path`` / ``eval_path`` name: (option, repo, config), a config per
    number of people."""
    o = KKOptions(**spec.task_options)
    return [
        (f"task_options.{key}", str(paths).removeprefix("hub:"), f"{p}ppl")
        for key, paths, sizes in (("train_path", o.train_path, o.n_people), ("eval_path", o.eval_path, o.eval_n_people))
        if isinstance(paths, str) and paths.startswith("hub:")
        for p in _n_people_tuple(sizes, lo=1, hi=10_000)
    ]


register_task(
    "kk",
    Task(_build, _rewards, _evaluate, _data_source, options=KKOptions, check_data=_check_data, hub_data=_hub_data),
)
