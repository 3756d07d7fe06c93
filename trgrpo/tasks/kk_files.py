"""K&K files and hub data in the Logic-RL / ``K-and-K/knights-and-knaves`` schema (paper App. B.1.1, Table 1).

The paper's own splits load from a local file (:func:`load_kk_file`, :func:`load_kk_files`: raw K&K rows with
``quiz``, ``names``, ``solution``, ``solution_text_format``, ... or Logic-RL's verl parquet) or from the hub where
one is reachable (:func:`load_kk_hub`). Rows become the record of :func:`trgrpo.tasks.kk_data.make_record`;
errors name the file, the row and the field. :func:`kk_source` describes a split for the run record.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from typing import Any

from .common import as_list, first_present, load_from_hub, read_table
from .kk_data import DEFAULT_N_PEOPLE, _n_people_tuple, make_record

HUB_REPO = "K-and-K/knights-and-knaves"  # Xie et al.'s K&K data, configs "train"/"test", splits "2ppl".."8ppl"

# --------------------------------------------------------------------------------------------------
# Loaders: the paper's splits (Logic-RL / K-and-K schema)
# --------------------------------------------------------------------------------------------------

_USER_TURN = (
    re.compile(r"<\|im_start\|>user\n(.*?)\n?<\|im_end\|>", re.DOTALL),  # Logic-RL qwen-instruct template
    re.compile(r"\nUser:(.*?)\nAssistant:", re.DOTALL),  # Logic-RL base template
)


_SOLUTION_ITEM = re.compile(r"\((\d+)\)\s*(\S.*?)\s+is\s+a\s+(knight|knave)\.?", re.IGNORECASE)


def _parse_solution_text_format(text: str) -> tuple[list[str], list[bool]]:
    """Names and roles from "(1) Zoey is a knight\\n(2) Oliver is a knave", the K&K data's form.

    Strict, unlike Logic-RL's loose gold parser (first word of a line, then the first role word: "The knight is Bob"
    would give the name "The", "Mary Ann is a knave" the name "Mary"): every non-empty line must be
    "(k) <name> is a knight|knave", numbered 1, 2, ...; anything else raises ValueError quoting the line.
    """
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
    if isinstance(prompt, str):
        text = prompt
    else:
        try:
            text = str(as_list(prompt)[-1]["content"])
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
    sol_format = first_present(row, ("solution_text_format",))
    if sol_format is None and isinstance(ground_truth, dict):
        sol_format = ground_truth.get("solution_text_format")
    quiz = first_present(row, ("quiz",))
    if quiz is None:
        quiz = _quiz_from_prompt(row.get("prompt"))
    names, solution = row.get("names"), row.get("solution")
    if names is None or solution is None:
        if sol_format is None:
            raise ValueError(f"a K&K row needs names and solution, or solution_text_format; got keys {sorted(row)}")
        names, solution = _parse_solution_text_format(sol_format)
    if quiz is None:
        raise ValueError(f"a K&K row needs a quiz (or a Logic-RL prompt to take it from); got keys {sorted(row)}")
    record = make_record(str(quiz), names, solution)
    if sol_format is not None:
        fmt_names, fmt_roles = _parse_solution_text_format(sol_format)
        if (fmt_names, fmt_roles) != (record["names"], record["solution"]):
            raise ValueError(f"solution_text_format disagrees with names/solution in row: {sol_format!r}")
    return record


def load_kk_file(
    path: str | os.PathLike, *, n_people: int | Iterable[int] | None = None, allow_empty: bool = False
) -> list[dict[str, Any]]:
    """Read K&K puzzles in the Logic-RL schema from a local ``.parquet``/``.jsonl``/``.json`` file.

    Accepts the raw K&K rows (``quiz``, ``names``, ``solution``, ``solution_text_format``, ...) and Logic-RL's
    verl parquet (``prompt`` + ``reward_model.ground_truth.solution_text_format``). ``n_people`` filters sizes.
    Errors name the file and the row; no puzzle (an empty file, or none of the sizes asked for) is an error
    unless ``allow_empty``.
    """
    records = []
    for i, row in enumerate(read_table(path, allow_empty=allow_empty)):
        try:
            records.append(normalize_kk_row(row))
        except (ValueError, TypeError) as e:
            raise ValueError(f"{path}: row {i}: {e}") from e
    if n_people is not None:
        keep = set(_n_people_tuple(n_people, lo=1, hi=10_000))
        records = [r for r in records if r["n_people"] in keep]
        if not records and not allow_empty:
            raise ValueError(f"{path}: no puzzle with n_people in {sorted(keep)[:20]}")
    return records


def _balanced(records: Sequence[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The first ``n`` records taken round robin over the puzzle sizes (file order kept within a size)."""
    by_size: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        by_size.setdefault(int(r["n_people"]), []).append(r)
    queues = [list(reversed(v)) for _, v in sorted(by_size.items())]
    out: list[dict[str, Any]] = []
    while len(out) < n and any(queues):
        for q in queues:
            if q and len(out) < n:
                out.append(q.pop())
    return out


def load_kk_files(
    paths: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    n: int | None = None,
    n_people: int | Iterable[int] | None = None,
) -> list[dict[str, Any]]:
    """K&K records from one or several Logic-RL files (e.g. one ``test_new.parquet`` per puzzle size).

    ``n_people`` filters the sizes; ``n`` keeps at most ``n`` records, taken round robin over the sizes so that a
    cut keeps every size (Table 1 reports each). Errors name the file and the row or field (:func:`load_kk_file`).
    """
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not items:
        raise ValueError("load_kk_files needs at least one path")
    records: list[dict[str, Any]] = []
    for path in items:
        records.extend(load_kk_file(path, allow_empty=True))
    if n_people is not None:
        keep = set(_n_people_tuple(n_people, lo=1, hi=10_000))
        records = [r for r in records if r["n_people"] in keep]
    if not records:
        sizes = f" with n_people in {n_people}" if n_people is not None else ""
        raise ValueError(f"{', '.join(map(str, items))}: no K&K puzzle{sizes}")
    return records if n is None else _balanced(records, n)


def kk_source(
    paths: str | os.PathLike | Sequence[str | os.PathLike] | None, split: str, size: int
) -> dict[str, Any]:
    """Where a run's K&K split came from, for the run record: the file(s) (split = their names) or reasoning-gym."""
    if not paths:
        return {"source": "reasoning-gym", "generator": "knights_knaves (knight/knave wording)", "split": split,
                "size": size}
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    return {
        "source": "logic-rl-file",
        "path": [str(p) for p in items],
        "split": sorted({os.path.splitext(os.path.basename(str(p)))[0] for p in items}),
        "size": size,
    }


def load_kk_hub(
    n_people: int | Iterable[int] = DEFAULT_N_PEOPLE, split: str = "test", *, repo: str = HUB_REPO
) -> list[dict[str, Any]]:
    """The paper's K&K splits from the hub (``K-and-K/knights-and-knaves``, config ``split``, splits ``{k}ppl``).

    Needs a network; raises a RuntimeError that says so (and what to do) when the hub cannot be reached.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    records: list[dict[str, Any]] = []
    for k in _n_people_tuple(n_people, lo=2, hi=8):
        ds = load_from_hub(repo, split, split=f"{k}ppl")
        records.extend(normalize_kk_row(dict(row)) for row in ds)
    return records

