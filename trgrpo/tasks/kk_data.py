"""K&K puzzles as data: the normalised record and the offline generator (paper Section 4.1, App. B.1.1).

Every loader and generator of :mod:`trgrpo.tasks.kk` returns the same record: ``quiz``, ``names``, ``solution``
(True = knight), ``n_people``, ``solution_text`` (:func:`make_record`). Offline, puzzles with 2..7 people come from
reasoning-gym's ``knights_knaves`` generator (a port of Xie et al.'s mem-kk-logic generator), always worded with
knights and knaves, deterministic by seed (:func:`generate_kk`, :func:`kk_splits`); reasoning-gym solves each
puzzle and keeps only uniquely solvable ones.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterable, Sequence
from typing import Any

from .common import as_list

DEFAULT_N_PEOPLE = (3, 4, 5, 6, 7)  # the difficulty levels of Table 1

# --------------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------------


def solution_text(names: Sequence[str], solution: Sequence[bool]) -> str:
    """The gold answer in Logic-RL's ``solution_text_format``: "(1) Name is a knight\\n(2) Name is a knave..."."""
    return "\n".join(
        f"({i}) {name} is a {'knight' if knight else 'knave'}"
        for i, (name, knight) in enumerate(zip(names, solution), 1)
    )


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        low = value.strip().lower()
        if low in ("knight", "true", "1"):
            return True
        if low in ("knave", "false", "0"):
            return False
        raise ValueError(f"cannot read {value!r} as knight (True) / knave (False)")
    if hasattr(value, "item"):  # numpy bool_ / int
        value = value.item()
    if isinstance(value, (bool, int)) and value in (0, 1):
        return bool(value)
    raise ValueError(f"cannot read {value!r} as knight (True) / knave (False)")


def _gold(names: Any, solution: Any) -> tuple[list[str], list[bool]]:
    """Validated gold names and roles (clear errors: a bad gold is a data bug, not a model output)."""
    names_l = [str(n) for n in as_list(names)]
    sol_l = [_as_bool(s) for s in as_list(solution)]
    if not names_l:
        raise ValueError("a K&K puzzle needs at least one person")
    if len(names_l) != len(sol_l):
        raise ValueError(f"names ({len(names_l)}) and solution ({len(sol_l)}) differ in length")
    if len(set(names_l)) != len(names_l) or any(not n.strip() for n in names_l):
        raise ValueError(f"names must be distinct and non-empty: {names_l}")
    return names_l, sol_l


def make_record(quiz: str, names: Any, solution: Any) -> dict[str, Any]:
    """The normalised K&K record every loader and generator returns."""
    if not isinstance(quiz, str) or not quiz.strip():
        raise ValueError("a K&K record needs a non-empty quiz text")
    names_l, sol_l = _gold(names, solution)
    return {
        "quiz": quiz,
        "names": names_l,
        "solution": sol_l,
        "n_people": len(names_l),
        "solution_text": solution_text(names_l, sol_l),
    }


# --------------------------------------------------------------------------------------------------
# Offline generation with reasoning-gym (knight/knave wording)
# --------------------------------------------------------------------------------------------------


def _format_quiz(problem: dict[str, Any], rand_seed: int) -> tuple[str, list[str]]:
    """Word a sampled problem with knights and knaves (reasoning-gym picks one of seven word pairs at random).

    Mirrors ``KKProblemFormatter.format_problem`` (same random stream, so names and statement templates are
    reasoning-gym's) but fixes the pair and, like the K&K data of Xie et al., leaves out the
    "(Format your answer like: ...)" hint: the system prompt states the answer format.
    """
    from reasoning_gym.logic.knights_knaves import (
        KNIGHT_KNAVE_PAIRS,
        POSTFIX,
        PREFIX,
        TEMPLATES,
        KKProblemFormatter,
    )

    formatter = KKProblemFormatter(rand_seed=rand_seed, problem=problem)
    rng = formatter.rng
    n_people = len(problem["statements"])
    names = [str(n) for n in rng.choice(_names_pool(), size=n_people, replace=False)]
    rng.choice(KNIGHT_KNAVE_PAIRS)  # consume the pair draw to keep reasoning-gym's stream; the wording is fixed
    words = {"knight": "knight", "knave": "knave", "a_knight": "a knight", "a_knave": "a knave"}
    words["Knight"], words["Knave"] = "Knight", "Knave"
    text = PREFIX.format(**words)
    text += f"You meet {n_people} inhabitants: "
    text += (", ".join(names[:-1]) + ", and " + names[-1] + ".") if n_people > 1 else names[0] + "."
    for i, stmt in enumerate(problem["statements"]):
        tmpl = rng.choice(TEMPLATES)
        content = formatter._format_statement(names, words, stmt)
        text += " " + tmpl.format(name=names[i], content=content)
    text += " " + POSTFIX.format(**words)
    return text, names


@functools.lru_cache(maxsize=1)
def _names_pool() -> tuple[str, ...]:
    from reasoning_gym.logic.knights_knaves import COMMON_NAMES

    return tuple(COMMON_NAMES)


def _sample_puzzle(n_people: int, rng: random.Random, depth: int, width: int) -> dict[str, Any]:
    from reasoning_gym.logic.knights_knaves import KKProblemSampler

    sampler = KKProblemSampler(
        rand_seed=rng.randint(0, 2**32), n_people=n_people, depth_constraint=depth, width_constraint=width
    )
    problems = sampler.sample_valid_problems(1, skip_no_solution=True, skip_multiple_solutions=True)
    if not problems:
        raise RuntimeError(f"reasoning-gym found no uniquely solvable {n_people}-person puzzle")
    problem = problems[0]
    quiz, names = _format_quiz(problem, rng.randint(0, 2**32))
    return make_record(quiz, names, [bool(x) for x in problem["solution"]])


def _n_people_tuple(n_people: int | Iterable[int], lo: int = 2, hi: int = 7) -> tuple[int, ...]:
    """Puzzle sizes as a tuple of ints in lo..hi (the generator covers 2..7 people; the hub data 2..8)."""
    sizes = (n_people,) if isinstance(n_people, int) else tuple(n_people)
    if not sizes or any(isinstance(k, bool) or not isinstance(k, int) or not lo <= k <= hi for k in sizes):
        raise ValueError(f"n_people must be an int or a non-empty list of ints in {lo}..{hi}, got {n_people!r}")
    return sizes


def _generate(
    n: int,
    n_people: int | Iterable[int],
    seed: int,
    stream: str,
    exclude: set[str],
    depth: int,
    width: int,
) -> list[dict[str, Any]]:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    sizes = _n_people_tuple(n_people)
    seen = set(exclude)
    out: list[dict[str, Any]] = []
    counters = dict.fromkeys(sizes, 0)
    for i in range(n):
        k = sizes[i % len(sizes)]  # round robin: equal counts per size (up to one)
        for _ in range(1000):
            # str seeds hash with SHA-512: deterministic across runs and PYTHONHASHSEED
            rng = random.Random(f"trgrpo-kk/{stream}/{seed}/{k}/{counters[k]}")
            counters[k] += 1
            record = _sample_puzzle(k, rng, depth, width)
            if record["quiz"] not in seen:
                break
        else:  # pragma: no cover - 2 people with depth 1 would exhaust the puzzle space
            raise RuntimeError(f"could not find {n} distinct {k}-person puzzles; lower n or raise depth")
        seen.add(record["quiz"])
        out.append(record)
    return out


def generate_kk(
    n: int,
    n_people: int | Iterable[int] = DEFAULT_N_PEOPLE,
    seed: int = 0,
    *,
    depth_constraint: int = 2,
    width_constraint: int = 2,
    exclude: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """``n`` distinct K&K puzzles, sizes cycling through ``n_people`` (2..7), deterministic by ``seed``.

    Puzzles come from reasoning-gym's ``knights_knaves`` sampler (unique solution guaranteed) with the
    knight/knave wording; quizzes in ``exclude`` are skipped. Returns normalised records.
    """
    return _generate(n, n_people, seed, "gen", set(exclude), depth_constraint, width_constraint)


def kk_splits(
    n_train: int,
    n_test: int,
    n_people: int | Iterable[int] = DEFAULT_N_PEOPLE,
    seed: int = 0,
    *,
    depth_constraint: int = 2,
    width_constraint: int = 2,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Train and test records that share no puzzle (deduplicated by quiz text), deterministic by ``seed``.

    The test split is drawn first from its own random stream, so it does not change with ``n_train``;
    the train split skips every test quiz.
    """
    test = _generate(n_test, n_people, seed, "test", set(), depth_constraint, width_constraint)
    train = _generate(n_train, n_people, seed, "train", {r["quiz"] for r in test}, depth_constraint, width_constraint)
    return train, test

