"""The K&K reward of the paper's Table 5 (App. B.1.1): a format score plus an answer score.

Format: +1 if ``<think>``, ``</think>``, ``<answer>``, ``</answer>`` each appear exactly once and in this order,
else -1 (:func:`format_ok`). Answer: +2 all identities right, -1.5 parsed but wrong, -2 unparseable or format
failed. Totals lie in {3, -0.5, -1, -3} (:func:`kk_reward`, :func:`kk_reward_parts`; TRL's two reward functions:
:func:`make_kk_reward_funcs`). The parser is Logic-RL's (:func:`parse_kk_answer`): the number of "knight"/"knave"
mentions must equal the number of people, and every name must appear as "Name is a knight|knave"; an answer with
look-alike or invisible characters is unparseable (:func:`trgrpo.tasks.kk_guard.disguised_letters`). Linear time,
never raises on a completion.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Any

from .common import completion_text
from .kk_data import _gold
from .kk_guard import disguised_letters

# --------------------------------------------------------------------------------------------------
# Table 5 reward values
# --------------------------------------------------------------------------------------------------

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

# --------------------------------------------------------------------------------------------------
# Reward (Table 5)
# --------------------------------------------------------------------------------------------------


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

