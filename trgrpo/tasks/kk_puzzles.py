"""Knights & Knaves puzzles (App. B.1.1): made by reasoning-gym's generator (:func:`generate_kk`), shown with
Logic-RL's prompt (:func:`kk_prompt`) and graded by Table 5's reward (:func:`kk_reward`: format and answer scores,
with a guard against look-alike letters). The run task ``kk`` (data files, hub, evaluation) is
:mod:`trgrpo.tasks.kk`."""

from __future__ import annotations

import functools
import random
import re
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

from trgrpo.paper import KK_PEOPLE
from trgrpo.tasks.rows import as_list

# Look-alikes of the letters of "knight"/"knave" that NFKC leaves alone, and invisible characters.
_HOMOGLYPHS = "кКκΚĸᴋΝɴіІıιΙӏɪɡԍɢһҺΗНʜТΤᴛаАαΑɑѵѴνᴠеЕΕҽ"
_INVISIBLE = [0xAD, 0x34F, 0x61C, 0x115F, 0x1160, 0x17B4, 0x17B5, *range(0x180B, 0x1810), *range(0x200B, 0x2010)]
_INVISIBLE += [*range(0x202A, 0x202F), *range(0x2060, 0x2065), 0xFEFF, 0x2800, 0x3164, 0xFFA0]
_HIDING_CATEGORIES = ("Mn", "Me", "Cf")  # combining marks and format characters ("kn\ufe0fave")


@functools.lru_cache(maxsize=1)
def _disguise_sets() -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
    """(BMP code points, astral ranges) of the disguising characters, from a one-off scan of the code points."""
    letters = set("knightave")
    bmp = {ord(c) for c in _HOMOGLYPHS} | set(_INVISIBLE)
    astral: list[int] = []
    for cp in range(0x80, 0x20000):
        ch = chr(cp)
        hides = cp < 0x10000 and unicodedata.category(ch) in _HIDING_CATEGORIES
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
    ranges.append([0xE0000, 0xE01EF])  # tag characters and variation selectors 17-256
    return tuple(sorted(bmp)), tuple((a, b) for a, b in ranges)


@functools.lru_cache(maxsize=1)
def _disguise() -> tuple[re.Pattern[str], re.Pattern[str], tuple[bytes, ...], tuple[bytes, ...]]:
    """(BMP, astral) character classes of the disguising characters (a BMP-only class scans at C speed), and the
    (first bytes, second bytes) of the UTF-8 encodings of the astral ones."""
    bmp, ranges = _disguise_sets()
    bmp_class = "".join(re.escape(chr(cp)) for cp in bmp)
    astral_class = "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges)
    encoded = [chr(cp).encode("utf-8") for a, b in ranges for cp in range(a, b + 1)]
    leads, seconds = sorted({e[:1] for e in encoded}), sorted({e[1:2] for e in encoded})
    return re.compile(f"[{bmp_class}]"), re.compile(f"[{astral_class}]"), tuple(leads), tuple(seconds)


def disguised_letters(answer_text: str, utf8: bytes | None = None) -> bool:
    """True if the text holds a look-alike of a letter of "knight"/"knave" ("ｋ", "𝐤", Cyrillic "к") or an
    invisible character (a role Logic-RL's count does not see). Linear time; ``utf8``: the text's bytes, if known."""
    if answer_text.isascii():
        return False
    bmp, astral, leads, seconds = _disguise()
    if bmp.search(answer_text) is not None:
        return True
    data = answer_text.encode("utf-8", "surrogatepass") if utf8 is None else utf8
    if not (any(b in data for b in leads) and any(b in data for b in seconds)):
        return False
    return astral.search(answer_text) is not None


def solution_text(names: Sequence[str], solution: Sequence[bool]) -> str:
    """The gold answer in Logic-RL's ``solution_text_format``: "(1) Name is a knight\\n(2) Name is a knave..."."""
    return "\n".join(
        f"({i}) {name} is a {'knight' if knight else 'knave'}"
        for i, (name, knight) in enumerate(zip(names, solution), 1)
    )


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        value = {"knight": True, "true": True, "1": True, "knave": False, "false": False, "0": False}.get(
            value.strip().lower(), value
        )
    if hasattr(value, "item"):  # numpy bool_ / int
        value = value.item()
    if isinstance(value, (bool, int)) and value in (0, 1):
        return bool(value)
    raise ValueError(f"cannot read {value!r} as knight (True) / knave (False)")


def _gold(names: Any, solution: Any) -> tuple[list[str], list[bool]]:
    """Validated gold names and roles (a bad gold is a data bug: it raises)."""
    names_l = [str(n) for n in as_list(names)]
    sol_l = [_as_bool(s) for s in as_list(solution)]
    if not names_l or len(names_l) != len(sol_l):
        raise ValueError(f"names ({len(names_l)}) and solution ({len(sol_l)}) must be non-empty and of equal length")
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
    """reasoning-gym's ``format_problem`` (same random stream), knight/knave wording, no format hint (Xie et al.)."""
    from reasoning_gym.logic.knights_knaves import (
        COMMON_NAMES,
        KNIGHT_KNAVE_PAIRS,
        POSTFIX,
        PREFIX,
        TEMPLATES,
        KKProblemFormatter,
    )

    formatter = KKProblemFormatter(rand_seed=rand_seed, problem=problem)
    rng = formatter.rng
    n_people = len(problem["statements"])
    names = [str(n) for n in rng.choice(COMMON_NAMES, size=n_people, replace=False)]
    rng.choice(KNIGHT_KNAVE_PAIRS)  # keeps reasoning-gym's stream; the wording is fixed
    words = {"knight": "knight", "knave": "knave", "a_knight": "a knight", "a_knave": "a knave"}
    words |= {"Knight": "Knight", "Knave": "Knave"}
    text = PREFIX.format(**words)
    text += f"You meet {n_people} inhabitants: "
    text += (", ".join(names[:-1]) + ", and " + names[-1] + ".") if n_people > 1 else names[0] + "."
    for i, stmt in enumerate(problem["statements"]):
        tmpl = rng.choice(TEMPLATES)
        content = formatter._format_statement(names, words, stmt)
        text += " " + tmpl.format(name=names[i], content=content)
    text += " " + POSTFIX.format(**words)
    return text, names


def _sample_puzzle(n_people: int, rng: random.Random) -> dict[str, Any]:
    from reasoning_gym.logic.knights_knaves import KKProblemSampler

    sampler = KKProblemSampler(
        rand_seed=rng.randint(0, 2**32), n_people=n_people, depth_constraint=2, width_constraint=2
    )
    problems = sampler.sample_valid_problems(1, skip_no_solution=True, skip_multiple_solutions=True)
    if not problems:
        raise RuntimeError(f"reasoning-gym found no uniquely solvable {n_people}-person puzzle")
    quiz, names = _format_quiz(problems[0], rng.randint(0, 2**32))
    return make_record(quiz, names, [bool(x) for x in problems[0]["solution"]])


def _n_people_tuple(n_people: int | Iterable[int], lo: int = 2, hi: int = 7) -> tuple[int, ...]:
    sizes = (n_people,) if isinstance(n_people, int) else tuple(n_people)
    if not sizes or any(isinstance(k, bool) or not isinstance(k, int) or not lo <= k <= hi for k in sizes):
        raise ValueError(f"n_people must be an int or a non-empty list of ints in {lo}..{hi}, got {n_people!r}")
    return sizes


def generate_kk(
    n: int, n_people: int | Iterable[int] = KK_PEOPLE, seed: int = 0, *, stream: str = "gen"
) -> list[dict[str, Any]]:
    """``n`` distinct uniquely solvable puzzles from reasoning-gym, sizes cycling through ``n_people`` (2..7),
    deterministic by ``seed`` and ``stream``."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    sizes = _n_people_tuple(n_people)
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    counters = dict.fromkeys(sizes, 0)
    for i in range(n):
        k = sizes[i % len(sizes)]
        for _ in range(1000):
            rng = random.Random(f"trgrpo-kk/{stream}/{seed}/{k}/{counters[k]}")
            counters[k] += 1
            record = _sample_puzzle(k, rng)
            if record["quiz"] not in seen:
                break
        else:  # pragma: no cover
            raise RuntimeError(f"could not find {n} distinct {k}-person puzzles")
        seen.add(record["quiz"])
        out.append(record)
    return out


# Logic-RL's K&K system prompt (App. B.1.1), verbatim as its verl rows carry it ("and<answer>" included).
KK_SYSTEM_PROMPT = (
    "You are a helpful assistant. The assistant first thinks about the reasoning process in the mind and then "
    "provides the user with the answer. The reasoning process and answer are enclosed within <think> </think> "
    "and<answer> </answer> tags, respectively, i.e., <think> reasoning process here </think>"
    "<answer> answer here </answer>.  Now the user asks you to solve a logical reasoning problem. After thinking, "
    "when you finally reach a conclusion, clearly state the identity of each character within <answer> </answer> "
    "tags. i.e., <answer> (1) Zoey is a knight\n(2) ... </answer>."
)


def kk_prompt(record: dict[str, Any], prefill_think: bool = False) -> list[dict[str, str]]:
    """The Logic-RL instruct prompt as chat messages; ``prefill_think`` opens an assistant turn with ``<think>``."""
    messages = [
        {"role": "system", "content": f"{KK_SYSTEM_PROMPT}\n"},
        {"role": "user", "content": f"{str(record['quiz']).strip()}\n"},
    ]
    if prefill_think:
        messages.append({"role": "assistant", "content": "<think>"})
    return messages


FORMAT_OK = 1.0
FORMAT_BAD = -1.0
ANSWER_CORRECT = 2.0
ANSWER_WRONG = -1.5
ANSWER_UNPARSEABLE = -2.0
KK_REWARD_VALUES = frozenset({3.0, -0.5, -1.0, -3.0})  # the sums of Table 5's format and answer scores
TAGS = ("<think>", "</think>", "<answer>", "</answer>")

# The answer is parsed on its UTF-8 bytes: the same matches as on str (the keywords are ASCII), at C-scan speed.


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")  # lone surrogates are valid in a str: keep them, never fail


def format_ok(completion: str, *, prefilled_think: bool = False) -> bool:
    """Table 5 format rule: each tag once, in order (``prefilled_think``: no ``<think>``, the other three)."""
    tags = TAGS
    if prefilled_think:
        if TAGS[0] in completion:
            return False
        tags = TAGS[1:]
    positions = []
    for tag in tags:
        first = completion.find(tag)
        if first < 0 or completion.find(tag, first + 1) >= 0:
            return False
        positions.append(first)
    return positions == sorted(positions)


@functools.lru_cache(maxsize=512)
def _name_pattern(name_lower: bytes) -> re.Pattern[bytes]:
    # Logic-RL's \bName\b\s+is\s+a\s+\b(knight|knave)\b; the leading \b is checked in _role_of
    return re.compile(rb"%s\b%s+is%s+a%s+\b(knight|knave)\b" % (re.escape(name_lower), _SPACE, _SPACE, _SPACE))


# Logic-RL's \s is Unicode white space: on bytes the others become ASCII spaces first, and \x1c-\x1f join the class.
_SPACE = rb"[\s\x1c-\x1f]"
_UNICODE_SPACE = re.compile(rb"\xc2[\x85\xa0]|\xe1\x9a\x80|\xe2\x80[\x80-\x8a\xa8\xa9\xaf]|\xe2\x81\x9f|\xe3\x80\x80")
_UNICODE_SPACE_LEADS = (b"\xc2", b"\xe1\x9a\x80", b"\xe2\x80", b"\xe2\x81\x9f", b"\xe3\x80\x80")


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


def _roles(low: bytes, names: Sequence[str]) -> dict[str, bool] | None:
    parsed = {}
    for name in names:
        role = _role_of(low, name)
        if role is None:
            return None
        parsed[name] = role
    return parsed


def _parse_answer_bytes(answer: bytes, names: Sequence[str]) -> dict[str, bool] | None:
    """The count and role reading of :func:`parse_kk_answer` on UTF-8 bytes, without its look-alike guard (notebook
    04's exercise calls it "the old parser")."""
    low = answer.lower()  # ASCII letters only
    if low.count(b"knight") + low.count(b"knave") != len(names):
        return None
    parsed = _roles(low, names)
    if parsed is None and not low.isascii() and any(lead in low for lead in _UNICODE_SPACE_LEADS):
        # Unicode white space ("is\u00a0a") as ASCII spaces, read as Logic-RL's str regex does
        parsed = _roles(_UNICODE_SPACE.sub(b" ", low), names)
    return parsed


def parse_kk_answer(answer_text: str, names: Sequence[str]) -> dict[str, bool] | None:
    """Logic-RL's parser: {name: is_knight} when there are exactly len(names) role mentions and each name appears as
    "Name is a knight|knave", else None; also None on a look-alike or invisible character. Linear time."""
    # the Kelvin sign is the one non-ASCII character that lower-cases to an ASCII letter
    answer = answer_text.replace("\u212a", "k") if "\u212a" in answer_text else answer_text
    data = _utf8(answer)
    parsed = _parse_answer_bytes(data, names)
    if parsed is not None and disguised_letters(answer, data):
        return None  # a role the count may miss, e.g. "Zoey is a ｋｎａｖｅ. Zoey is a knight."
    return parsed


def kk_reward_parts(
    completion: Any, names: Sequence[str], solution: Sequence[bool], *, prefilled_think: bool = False
) -> tuple[float, float]:
    """(format, answer) scores of Table 5: format in {1, -1}, answer in {2, -1.5, -2}. Never raises on the
    completion; a malformed gold raises ValueError."""
    names_l, sol_l = _gold(names, solution)
    if not isinstance(completion, str):
        return FORMAT_BAD, ANSWER_UNPARSEABLE
    if not format_ok(completion, prefilled_think=prefilled_think):
        return FORMAT_BAD, ANSWER_UNPARSEABLE
    answer = completion[completion.find("<answer>") + len("<answer>") : completion.find("</answer>")]
    parsed = parse_kk_answer(answer, names_l) if answer.strip() else None
    if parsed is None:
        return FORMAT_OK, ANSWER_UNPARSEABLE
    correct = all(parsed[n] == s for n, s in zip(names_l, sol_l))
    return FORMAT_OK, ANSWER_CORRECT if correct else ANSWER_WRONG


def kk_reward(
    completion: Any, names: Sequence[str], solution: Sequence[bool], *, prefilled_think: bool = False
) -> float:
    """Total K&K reward, format + answer (Table 5): one of {3.0, -0.5, -1.0, -3.0}."""
    fmt, ans = kk_reward_parts(completion, names, solution, prefilled_think=prefilled_think)
    return fmt + ans
