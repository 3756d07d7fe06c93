"""Knights & Knaves (K&K) logic puzzles (paper Section 4.1, App. B.1.1, Tables 1 and 5), the run task ``kk``.

* Data: the normalised record (``quiz``, ``names``, ``solution``, ``n_people``, ``solution_text``) from
  reasoning-gym's generator offline (:func:`generate_kk`, :func:`kk_splits`) or from Logic-RL / K-and-K files
  (:func:`load_kk_files`).
* Prompt: Logic-RL's instruct prompt as chat messages (:func:`kk_prompt`, :func:`kk_dataset`).
* Reward: Table 5's format score plus answer score (:func:`kk_reward`), with Logic-RL's answer parser and an added
  look-alike guard: a mention written with characters that imitate the ASCII letters ("ｋｎａｖｅ", "𝐤𝐧𝐚𝐯𝐞",
  Cyrillic "кnаvе") or with an invisible character inside the word escapes Logic-RL's count of "knight"/"knave"
  mentions ("Zoey is a ｋｎａｖｅ. Zoey is a knight." scored the full 3 while naming both roles);
  :func:`disguised_letters` finds such characters in linear time and the answer is then unparseable.
* Evaluation: greedy accuracy by number of people and their mean, Table 1's layout (:func:`evaluate_kk`).
"""

from __future__ import annotations

import functools
import os
import random
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from trgrpo.tasks import Task, register_task
from trgrpo.tasks.common import (
    as_list,
    completion_text,
    first_present,
    greedy_generate,
    read_table,
    render_prompt,
)

if TYPE_CHECKING:  # pragma: no cover
    from trgrpo.experiment import RunSpec

# Characters that read as a letter of "knight"/"knave" but are not that ASCII letter: compatibility forms (NFKC
# folds them: fullwidth, mathematical alphanumerics, circled, super-/subscript, the Kelvin sign; found by scanning
# the code points once) and look-alikes from other scripts that NFKC leaves alone; plus invisible characters
# (soft hyphen, zero-width and bidi marks, BOM) that can sit inside a word unseen.
_HOMOGLYPHS = "кКκΚĸᴋΝɴіІıιΙӏɪɡԍɢһҺΗНʜТΤᴛаАαΑɑѵѴνᴠеЕΕҽ"
_INVISIBLE = [0xAD, 0x34F, 0x61C, 0x115F, 0x1160, 0x17B4, 0x17B5, *range(0x180B, 0x1810), *range(0x200B, 0x2010)]
_INVISIBLE += [*range(0x202A, 0x202F), *range(0x2060, 0x2065), 0xFEFF]
# blank letters (Hangul fillers, the Braille blank): they print as nothing or a space, but are not white space
_INVISIBLE += [0x2800, 0x3164, 0xFFA0]
# Combining marks and format characters (variation selectors U+FE0F, tag characters U+E0020...U+E007F, combining
# accents): they attach to or hide inside a word, "kn\ufe0fave" is read as a knave by a reader, not by the count.
_HIDING_CATEGORIES = ("Mn", "Me", "Cf")


@functools.lru_cache(maxsize=1)
def _disguise_sets() -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
    """(BMP code points, astral ranges) of the disguising characters (one-off scan of code points, ~20 ms).

    The astral ones (mathematical alphanumerics, enclosed letters) go in two coarse ranges, which also take in
    those blocks' digits, and one range of tag characters and variation selectors."""
    letters = set("knightave")
    bmp = {ord(c) for c in _HOMOGLYPHS} | set(_INVISIBLE)
    astral: list[int] = []
    for cp in range(0x80, 0x20000):
        ch = chr(cp)
        hides = cp < 0x10000 and unicodedata.category(ch) in _HIDING_CATEGORIES  # astral ones: one range below
        if not hides and unicodedata.normalize("NFKC", ch).lower() not in letters:
            continue
        if cp < 0x10000:
            bmp.add(cp)
        else:
            astral.append(cp)
    ranges: list[list[int]] = []
    for cp in astral:  # a few coarse ranges (gaps up to 64 closed): a long class list would scan ~100x slower
        if ranges and cp <= ranges[-1][1] + 64:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    ranges.append([0xE0000, 0xE01EF])  # tag characters and variation selectors 17-256 (format / combining)
    return tuple(sorted(bmp)), tuple((a, b) for a, b in ranges)


@functools.lru_cache(maxsize=1)
def _disguise_re() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """(BMP, astral) character classes of the disguising characters.

    Two patterns: a BMP-only class compiles to a bitmap (C-speed scan); the astral one is a few ranges."""
    bmp, ranges = _disguise_sets()
    bmp_class = "".join(re.escape(chr(cp)) for cp in bmp)
    astral_class = "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges)
    return re.compile(f"[{bmp_class}]"), re.compile(f"[{astral_class}]")


@functools.lru_cache(maxsize=1)
def _astral_gate() -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
    """(first bytes, second bytes) of the UTF-8 encodings of the astral disguising characters: F0 or F3, then
    9D, 9F or A0. A text whose UTF-8 bytes lack every first byte or every second byte holds none of them."""
    leads: set[bytes] = set()
    seconds: set[bytes] = set()
    for a, b in _disguise_sets()[1]:
        for cp in range(a, b + 1):  # about 1,200 code points
            enc = chr(cp).encode("utf-8")
            leads.add(enc[:1])
            seconds.add(enc[1:2])
    return tuple(sorted(leads)), tuple(sorted(seconds))


def disguised_letters(answer_text: str, utf8: bytes | None = None) -> bool:
    """True if the text holds a character that reads as a letter of "knight"/"knave" without being it
    ("ｋ", "𝐤", Cyrillic "к"/"а"/"е", Greek "ν", ...) or an invisible one (zero-width space, soft hyphen, bidi
    marks) -- the means to write a knight/knave mention that Logic-RL's count does not see. Linear time.

    ``utf8``: the text's UTF-8 bytes (``surrogatepass``) where the caller has them, as the reward does. The scan for
    astral characters (~7 ms per MB of text) runs only when those bytes hold both a first and a second byte of one
    (:func:`_astral_gate`: a C-level ``memchr`` per byte value, ~0.1 ms per MB).
    """
    if answer_text.isascii():
        return False
    bmp, astral = _disguise_re()
    if bmp.search(answer_text) is not None:
        return True
    data = answer_text.encode("utf-8", "surrogatepass") if utf8 is None else utf8
    leads, seconds = _astral_gate()
    if not (any(b in data for b in leads) and any(b in data for b in seconds)):
        return False
    return astral.search(answer_text) is not None


DEFAULT_N_PEOPLE = (3, 4, 5, 6, 7)  # the difficulty levels of Table 1


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


def kk_source(paths: str | os.PathLike | Sequence[str | os.PathLike] | None, split: str, size: int) -> dict[str, Any]:
    """Where a run's K&K split came from, for the run record: the file(s) (split = their names) or reasoning-gym."""
    if not paths:
        return {
            "source": "reasoning-gym",
            "generator": "knights_knaves (knight/knave wording)",
            "split": split,
            "size": size,
        }
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    return {
        "source": "logic-rl-file",
        "path": [str(p) for p in items],
        "split": sorted({os.path.splitext(os.path.basename(str(p)))[0] for p in items}),
        "size": size,
    }


# The system prompt of Logic-RL's K&K data (Xie et al. 2025; the paper's App. B.1.1), character for character as its
# verl parquet rows carry it (examples/data_preprocess/kk.py, template "qwen-instruct"), "and<answer>" included. The
# rows render it in ChatML as "<|im_start|>system\n{this}\n<|im_end|>\n<|im_start|>user\n{quiz}\n<|im_end|>\n
# <|im_start|>assistant\n<think>": :func:`kk_prompt` gives both turns that trailing newline, so a ChatML chat template
# (Qwen2.5's) reproduces the rows' prompt exactly (tests/test_data_sources.py).
KK_SYSTEM_PROMPT = (
    "You are a helpful assistant. The assistant first thinks about the reasoning process in the mind and then "
    "provides the user with the answer. The reasoning process and answer are enclosed within <think> </think> "
    "and<answer> </answer> tags, respectively, i.e., <think> reasoning process here </think>"
    "<answer> answer here </answer>.  Now the user asks you to solve a logical reasoning problem. After thinking, "
    "when you finally reach a conclusion, clearly state the identity of each character within <answer> </answer> "
    "tags. i.e., <answer> (1) Zoey is a knight\n(2) ... </answer>."
)


def kk_prompt(record: dict[str, Any], prefill_think: bool = False) -> list[dict[str, str]]:
    """The Logic-RL instruct prompt as TRL conversational messages (App. B.1.1).

    With ``prefill_think`` the assistant turn is opened with ``<think>`` (Logic-RL's template); render it with
    ``continue_final_message=True`` and score with ``prefilled_think=True``.
    """
    messages = [  # each turn ends with a newline, as in Logic-RL's rendered rows
        {"role": "system", "content": f"{KK_SYSTEM_PROMPT}\n"},
        {"role": "user", "content": f"{str(record['quiz']).strip()}\n"},
    ]
    if prefill_think:
        messages.append({"role": "assistant", "content": "<think>"})
    return messages


def kk_dataset(records: Sequence[dict[str, Any]], prefill_think: bool = False, *, tokenizer: Any = None) -> Any:
    """A ``datasets.Dataset`` for TRL's ``GRPOTrainer``: ``prompt``, ``names``, ``solution``, ``n_people``.

    TRL passes the extra columns to the reward functions as keyword lists. With ``tokenizer`` the prompts are
    rendered to text with the chat template (needed for ``prefill_think`` under TRL 1.16, whose trainer always
    adds a generation prompt to conversational prompts and so cannot continue a pre-filled assistant turn).
    """
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


FORMAT_OK = 1.0
FORMAT_BAD = -1.0
ANSWER_CORRECT = 2.0
ANSWER_WRONG = -1.5
ANSWER_UNPARSEABLE = -2.0
KK_REWARD_VALUES = frozenset(
    {
        FORMAT_OK + ANSWER_CORRECT,
        FORMAT_OK + ANSWER_WRONG,
        FORMAT_OK + ANSWER_UNPARSEABLE,
        FORMAT_BAD + ANSWER_UNPARSEABLE,
    }
)  # {3.0, -0.5, -1.0, -3.0}
KK_MIN_REWARD = FORMAT_BAD + ANSWER_UNPARSEABLE
TAGS = ("<think>", "</think>", "<answer>", "</answer>")


# Cost. Tags are found with str.find on the completion (C speed for every string kind). The answer is parsed on its
# UTF-8 bytes: "knight"/"knave" and the names are ASCII, and in UTF-8 an ASCII byte only ever encodes that ASCII
# character, so bytes give the same matches; and on a 1 MB answer str.lower() of some letters ("İ") alone costs
# ~60 ms and a regex that starts with \b or IGNORECASE ~60 ms per name, while bytes.lower() and a pattern that
# starts with the name's literal stay at C-scan speed.


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")  # lone surrogates are valid in a str: keep them, never fail


def format_ok(completion: str, *, prefilled_think: bool = False) -> bool:
    """Table 5 format rule: each tag exactly once, in the order <think> </think> <answer> </answer>.

    With ``prefilled_think`` the prompt already opened ``<think>``: the completion must not contain it and must
    contain the other three tags exactly once, in order.
    """
    tags = TAGS
    if prefilled_think:
        if TAGS[0] in completion:
            return False
        tags = TAGS[1:]
    positions = []
    for tag in tags:  # exactly once: a first occurrence and none after it (one pass over the text per tag)
        first = completion.find(tag)
        if first < 0 or completion.find(tag, first + 1) >= 0:
            return False
        positions.append(first)
    return positions == sorted(positions)


@functools.lru_cache(maxsize=512)
def _name_pattern(name_lower: bytes) -> re.Pattern[bytes]:
    # Logic-RL's pattern \bName\b\s+is\s+a\s+\b(knight|knave)\b, applied to lower-cased text. The leading \b is
    # checked by hand (_role_of): a pattern that starts with a literal lets the regex engine scan for it at C speed.
    return re.compile(rb"%s\b%s+is%s+a%s+\b(knight|knave)\b" % (re.escape(name_lower), _SPACE, _SPACE, _SPACE))


# Logic-RL's \s runs on a str: every Unicode white space (str.isspace), e.g. the no-break space of "is\u00a0a". Here the
# text is UTF-8 bytes, where \s is ASCII only: the other white spaces are turned into ASCII spaces first
# (_ascii_spaces), and \x1c-\x1f (white space for str.isspace) join the class.
_SPACE = rb"[\s\x1c-\x1f]"
_UNICODE_SPACE = re.compile(rb"\xc2[\x85\xa0]|\xe1\x9a\x80|\xe2\x80[\x80-\x8a\xa8\xa9\xaf]|\xe2\x81\x9f|\xe3\x80\x80")


_UNICODE_SPACE_LEADS = (b"\xc2", b"\xe1\x9a\x80", b"\xe2\x80", b"\xe2\x81\x9f", b"\xe3\x80\x80")


def _ascii_spaces(low: bytes) -> bytes:
    """Non-ASCII white space (its UTF-8 bytes) as ASCII spaces: one C-level pass, only for non-ASCII text."""
    if low.isascii() or not any(lead in low for lead in _UNICODE_SPACE_LEADS):  # fast C scans first
        return low
    return _UNICODE_SPACE.sub(b" ", low)


_WORD_CHAR = re.compile(rb"\w")
_MAX_CANDIDATES = 64  # every candidate holds one of the few knight/knave mentions (their number is checked first)


def _role_of(low: bytes, name: str) -> bool | None:
    """First "name is a knight|knave" in the lower-cased answer with a word boundary before the name."""
    name_lower = _utf8(name).lower()
    pattern = _name_pattern(name_lower)
    starts_with_word = _WORD_CHAR.match(name_lower) is not None
    pos = 0
    for _ in range(_MAX_CANDIDATES):
        m = pattern.search(low, pos)
        if m is None:
            return None
        start = m.start()
        prev_is_word = start > 0 and _WORD_CHAR.match(low, start - 1) is not None
        if prev_is_word != starts_with_word:  # \b before the name
            return m.group(1) == b"knight"
        pos = start + 1
    return None


def _parse_answer_bytes(answer: bytes, names: Sequence[str]) -> dict[str, bool] | None:
    low = answer.lower()  # ASCII letters only
    if low.count(b"knight") + low.count(b"knave") != len(names):
        return None
    parsed = _roles(low, names)
    if parsed is None and not low.isascii():  # Unicode white space ("is\u00a0a"), read as Logic-RL's str regex does
        spaced = _ascii_spaces(low)
        if spaced is not low:
            parsed = _roles(spaced, names)
    return parsed


def _roles(low: bytes, names: Sequence[str]) -> dict[str, bool] | None:
    parsed = {}
    for name in names:
        role = _role_of(low, name)
        if role is None:
            return None
        parsed[name] = role
    return parsed


def _kelvin_as_k(text: str) -> str:
    # Logic-RL lower()s the text: the Kelvin sign (U+212A) is the one non-ASCII character whose lower case is an
    # ASCII letter ("k"; "İ" gives "i" + a combining dot, which never completes a word). Do the same.
    return text.replace("\u212a", "k") if "\u212a" in text else text


def _parse_answer(answer: str, names: Sequence[str]) -> dict[str, bool] | None:
    answer = _kelvin_as_k(answer)
    data = _utf8(answer)
    parsed = _parse_answer_bytes(data, names)
    if parsed is not None and disguised_letters(answer, data):
        return None  # a role the count may miss, e.g. "Zoey is a ｋｎａｖｅ. Zoey is a knight."
    return parsed


def parse_kk_answer(answer_text: str, names: Sequence[str]) -> dict[str, bool] | None:
    """Logic-RL's answer parser: None unless there are exactly len(names) knight/knave mentions and every name
    appears as "Name is a knight|knave"; else {name: is_knight}.

    Case-insensitive like Logic-RL's ``lower()`` and ``re.IGNORECASE`` (the Kelvin sign reads as "k", as under
    ``str.lower()``). Added guard: None as well when the answer holds a look-alike or invisible character
    (:func:`disguised_letters`): with those an answer could state a second role that the count does not see.
    Linear time.
    """
    return _parse_answer(answer_text, names)


def _reward_parts(
    completion: str, names: list[str], solution: list[bool], prefilled_think: bool
) -> tuple[float, float]:
    if not format_ok(completion, prefilled_think=prefilled_think):
        return FORMAT_BAD, ANSWER_UNPARSEABLE
    answer = completion[completion.find("<answer>") + len("<answer>") : completion.find("</answer>")]
    if not answer.strip():
        return FORMAT_OK, ANSWER_UNPARSEABLE
    parsed = _parse_answer(answer, names)
    if parsed is None:
        return FORMAT_OK, ANSWER_UNPARSEABLE
    correct = all(parsed[n] == s for n, s in zip(names, solution))
    return FORMAT_OK, ANSWER_CORRECT if correct else ANSWER_WRONG


def kk_reward_parts(
    completion: Any, names: Sequence[str], solution: Sequence[bool], *, prefilled_think: bool = False
) -> tuple[float, float]:
    """(format score, answer score) of Table 5: format in {1, -1}, answer in {2, -1.5, -2}.

    Never raises on the completion: anything that is not a string, or any failure while scoring it, gives the
    minimum (-1, -2). A malformed gold (``names``/``solution``) raises ValueError: that is a data bug.
    """
    names_l, sol_l = _gold(names, solution)
    if not isinstance(completion, str):
        return FORMAT_BAD, ANSWER_UNPARSEABLE
    try:
        return _reward_parts(completion, names_l, sol_l, prefilled_think)
    except Exception:  # pragma: no cover - defensive: the scorer uses only str methods and re
        return FORMAT_BAD, ANSWER_UNPARSEABLE


def kk_reward(
    completion: Any, names: Sequence[str], solution: Sequence[bool], *, prefilled_think: bool = False
) -> float:
    """Total K&K reward, format + answer (Table 5): one of {3.0, -0.5, -1.0, -3.0}."""
    fmt, ans = kk_reward_parts(completion, names, solution, prefilled_think=prefilled_think)
    return fmt + ans


def make_kk_reward_funcs(prefilled_think: bool = False) -> list[Callable[..., list[float]]]:
    """Two TRL reward functions, ``kk_format_reward`` and ``kk_answer_reward`` (Table 5's two columns).

    TRL sums them (total = format + answer) and logs each. Signature ``f(prompts, completions,
    completion_ids=None, **kwargs)``; the dataset columns ``names`` and ``solution`` arrive as kwargs lists.
    """

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
    """Accuracy by number of people and their mean (Table 1's "Avg."); correct = answer score +2.

    Also the overall fraction correct (``overall``), the fraction with a valid format, and the counts.
    """
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
    return_completions: bool = False,
) -> dict[str, Any]:
    """Greedy K&K evaluation in Table 1's layout: {"by_n_people": {3: acc, ...}, "avg": ..., "n": ...}.

    Batched greedy generation with left padding and the tokenizer's chat template (``continue_final_message``
    when ``prefill_think``). ``avg`` is the mean of the per-size accuracies, as in Table 1.
    """
    prompts = [kk_prompt(r, prefill_think) for r in records]
    completions = greedy_generate(model, tokenizer, prompts, batch_size=batch_size, max_new_tokens=max_new_tokens)
    result = kk_accuracy(completions, records, prefilled_think=prefill_think)
    if return_completions:
        result["completions"] = completions
    return result


def _kk_files(opts: dict, key: str, n: int, n_people) -> list[dict]:
    try:
        return load_kk_files(opts[key], n=n, n_people=n_people)
    except (OSError, ValueError, TypeError) as e:
        raise type(e)(f"task_options.{key}: {e}") from e


def _build(spec: RunSpec, tokenizer):
    """The Logic-RL files when ``train_path`` / ``eval_path`` are given (the paper's splits, ``test_new`` for
    evaluation), reasoning-gym's generator offline otherwise; eval puzzles seen in training are dropped."""
    opts = spec.task_options
    n_people = opts.get("n_people", DEFAULT_N_PEOPLE)
    eval_people = opts.get("eval_n_people", n_people)
    if opts.get("train_path"):
        train = _kk_files(opts, "train_path", spec.n_train, n_people)
    else:
        train, _ = kk_splits(spec.n_train, 0, n_people=n_people, seed=spec.seed if opts.get("seed_data") else 0)
    if opts.get("eval_path"):
        test = _kk_files(opts, "eval_path", spec.n_eval, eval_people)
    else:
        _, test = kk_splits(spec.n_train, spec.n_eval, n_people=eval_people, seed=0)
    train_keys = {r["quiz"] for r in train}
    test = [r for r in test if r["quiz"] not in train_keys]
    prefill = bool(opts.get("prefill_think", False))
    # TRL always adds a generation prompt to chat prompts: a pre-filled <think> needs text prompts.
    return kk_dataset(train, prefill_think=prefill, tokenizer=tokenizer if prefill else None), test


def _data_source(spec: RunSpec, train_ds, records) -> dict:
    opts = spec.task_options
    return {
        "train": kk_source(opts.get("train_path"), "train", len(train_ds)),
        "eval": kk_source(opts.get("eval_path"), "test", len(records)),
        "prefill_think": bool(opts.get("prefill_think", False)),
    }


def _rewards(spec: RunSpec):
    return make_kk_reward_funcs(prefilled_think=bool(spec.task_options.get("prefill_think", False)))


def _evaluate(model, tokenizer, records, spec: RunSpec) -> dict:
    res = evaluate_kk(
        model,
        tokenizer,
        records,
        batch_size=spec.task_options.get("eval_batch_size", 8),
        max_new_tokens=spec.max_eval_tokens or spec.max_completion_length,
        prefill_think=bool(spec.task_options.get("prefill_think", False)),
    )
    res["accuracy"] = res["avg"]
    return res


register_task("kk", Task(_build, _rewards, _evaluate, _data_source))
