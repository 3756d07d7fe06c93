"""Rewards that never break: arbitrary text, 1 MB inputs, tag soup, thousands of ``\\boxed{``, unicode and control
characters. A reward never raises, always returns a value of its allowed set (Table 5 sums for K&K, {0, 1} for
math, App. B.1.2), and a 1 MB completion costs less than 250 ms of CPU time (best of 5 runs; the worst CPU and
wall-clock figures, and the inputs that gave them, are printed at the end). The bound was 50 ms until the K&K
look-alike guard learned combining marks, variation selectors, tag characters and Unicode spaces (issue 16): a
1 MB answer of astral characters took about 100 ms for the two calls the K&K check makes (parts + total) on
the 2-core CI machine, idle. Since then the guard's astral scan runs only when the answer's UTF-8 bytes hold a
first and a second byte of an astral disguise (kk._disguise): astral characters such as U+1114B and
non-ASCII BMP text skip it. An answer of emoji (F0 9F ..., the second byte of the enclosed letters) still takes
the full scan and is the worst K&K shape here: about 125 ms on an idle clean-clone CI run (the UTF-8 text is 4 MB),
close to the old 150 ms bound, which is therefore 250 ms, so a busy CI machine does not fail a linear cost. A
regex gate on the exact three-byte prefixes was tried and was slower (an alternation scans every byte). The
bound still catches a super-linear scan, which costs seconds at this size. A 1 MB input is far beyond any
completion length.

The math reward's cost has two parts: the scan, which grows with the input and is what the 1 MB bound is about,
and sympy's parse + verify of the final boxed answer (at most 1000 characters), which does not grow with the input
and runs in a worker process, cut by ``timeout_s`` of its CPU time (tested in tests/tasks/test_math.py and below).
"""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trgrpo.tasks import kk, kk_puzzles
from trgrpo.tasks import math as mt
from trgrpo.tasks.search import search_reward

MB = 1 << 20
BOUND_S = 0.250  # the promised worst case for a 1 MB input (see the module docstring)
NAMES = ["Emma", "Liam", "Olivia"]
SOLUTION = [True, False, False]
GOLD = "(1) Emma is a knight\n(2) Liam is a knave\n(3) Olivia is a knave"
KK_GOLD = f"<think>reasoning</think><answer>{GOLD}</answer>"
KK_FORMAT = {1.0, -1.0}
KK_ANSWER = {2.0, -1.5, -2.0}
MATH_VALUES = {0.0, 1.0}
# reward -> (seconds, input) of the worst 1 MB input: CPU time and wall-clock time, best of 5 runs each
CPU: dict[str, tuple[float, str]] = {}
WALL: dict[str, tuple[float, str]] = {}

COMMON = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FAST = settings(max_examples=200, **{**COMMON, "deadline": 1000})
SLOW = settings(max_examples=100, **{**COMMON, "deadline": 3000})
BIG = settings(max_examples=20, **COMMON)

ODD_CHARS = ["\x00", "\x1b[31m", "\r\n", "\t", "\u202e", "\u200b", "\ufeff", "\ud800", "\udfff", "İ", "ß", "💥", "\\"]
TAG_PIECES = [
    *kk_puzzles.TAGS,
    "<think",
    "think>",
    "</answer",
    "<answer >",
    "<ANSWER>",
    "knight",
    "knave",
    "Knights",
    "Emma is a knight",
    "Liam is a knave",
    "Olivia is a knave",
    "(1) ",
    "\n",
    " is a ",
    "Emma",
    GOLD,
    *ODD_CHARS,
]
BOX_PIECES = [
    "\\boxed{",
    "{",
    "}",
    "42",
    "-7",
    "\\frac{1}{2}",
    "\\frac{",
    "^",
    "^{",
    "_",
    "!",
    "(",
    ")",
    "[",
    "]",
    "x",
    "\\sqrt{",
    "\\left(",
    "\\right)",
    "\\pi",
    "\\infty",
    ",",
    ".",
    "=",
    "\\\\",
    "$",
    "%",
    "</think>",
    "<think>",
    "9^{9^{9}}",
    "100000!",
    "\\text{",
    "\\begin{pmatrix}",
    "\\end{pmatrix}",
    "&",
    "e",
    "i",
    " ",
    *ODD_CHARS,
]

any_text = st.text(alphabet=st.characters(), max_size=400) | st.lists(st.sampled_from(ODD_CHARS), max_size=50).map(
    "".join
)
tag_soup = st.lists(st.one_of(st.sampled_from(TAG_PIECES), st.text(max_size=12)), max_size=60).map("".join)
box_soup = st.lists(st.one_of(st.sampled_from(BOX_PIECES), st.text(max_size=6)), max_size=60).map("".join)


def kk_check(text, prefilled: bool = False) -> float:
    fmt, ans = kk_puzzles.kk_reward_parts(text, NAMES, SOLUTION, prefilled_think=prefilled)
    total = kk_puzzles.kk_reward(text, NAMES, SOLUTION, prefilled_think=prefilled)
    assert fmt in KK_FORMAT and ans in KK_ANSWER and total == fmt + ans and total in kk_puzzles.KK_REWARD_VALUES
    return total


def math_check(text, gold: str = "42", **kw) -> float:
    value = mt.math_reward(text, gold, **kw)
    assert value in MATH_VALUES and type(value) is float
    return value


def timed(name: str, case: str, fn, *args, **kwargs):
    """Run fn five times; assert that the best CPU time is under the bound; record CPU and wall-clock times.

    CPU time of this thread is the cost of the reward itself. Wall-clock time also counts whoever else uses the
    CPU: on a shared 2-core machine with 8 runnable processes a 10 ms computation takes ~40 ms of wall-clock time.
    The best of several runs drops one-off hiccups (page faults of a fresh 1 MB string, a descheduling)."""
    cpu, wall, values = [], [], set()
    for _ in range(5):
        w0, c0 = time.perf_counter(), time.thread_time()
        values.add(fn(*args, **kwargs))
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - w0)
    assert len(values) == 1, "a reward must be deterministic"
    for table, times in ((CPU, cpu), (WALL, wall)):
        if min(times) > table.get(name, (0.0, ""))[0]:
            table[name] = (min(times), case)
    assert min(cpu) < BOUND_S, f"{name} used {min(cpu) * 1e3:.1f} ms of CPU on {case!r} ({len(args[0]) / MB:.2f} MB)"
    return values.pop()


@pytest.fixture(scope="module", autouse=True)
def warm_up():
    """Import sympy/math-verify and compile the regexes before anything is timed."""
    mt.math_reward("\\boxed{41}", "42")
    kk_puzzles.kk_reward(KK_GOLD, NAMES, SOLUTION)


# --------------------------------------------------------------------------------------------------
# Arbitrary text: never raises, always an allowed value
# --------------------------------------------------------------------------------------------------


@FAST
@given(text=any_text, prefilled=st.booleans())
def test_kk_reward_on_arbitrary_text(text, prefilled):
    kk_check(text, prefilled)


@FAST
@given(text=tag_soup, prefilled=st.booleans())
def test_kk_reward_on_tag_soup(text, prefilled):
    kk_check(text, prefilled)


@FAST
@given(think=any_text, answer=tag_soup, prefilled=st.booleans())
def test_kk_reward_on_well_formed_shells(think, answer, prefilled):
    """Valid tag structure around arbitrary content: format may pass, the answer parser meets arbitrary text."""
    body = f"{think}</think><answer>{answer}</answer>"
    kk_check(body if prefilled else "<think>" + body, prefilled)


@FAST
@given(text=any_text)
def test_math_reward_on_arbitrary_text(text):
    math_check(text)
    math_check(f"\\boxed{{{text}}}", gold="42", timeout_s=0.2)


@SLOW
@given(text=box_soup, gold=st.sampled_from(["42", "\\frac{1}{2}", "-7", "x", "(1,2)"]))
def test_math_reward_on_boxed_soup(text, gold):
    math_check(text, gold, timeout_s=0.1)


@FAST
@given(depth=st.integers(0, 5000), closes=st.integers(0, 5000), openings=st.integers(0, 3000))
def test_math_reward_on_nested_and_unbalanced_braces(depth, closes, openings):
    text = "\\boxed{" * openings + "{" * depth + "42" + "}" * closes
    math_check(text, timeout_s=0.1)


@FAST
@given(
    completions=st.lists(
        st.one_of(
            st.none(),
            st.integers(),
            st.floats(),
            any_text,
            st.binary(max_size=20),
            st.lists(st.fixed_dictionaries({"role": st.just("assistant"), "content": any_text | st.none()})),
            st.lists(st.dictionaries(st.text(max_size=5), st.text(max_size=5)), max_size=2),
        ),
        min_size=1,
        max_size=5,
    ),
    prefilled=st.booleans(),
)
def test_trl_adapters_never_raise_on_odd_completions(completions, prefilled):
    n = len(completions)
    fmt_fn, ans_fn = kk.make_kk_reward_funcs(prefilled_think=prefilled)
    kwargs = dict(names=[NAMES] * n, solution=[SOLUTION] * n, trainer_state=None)
    assert set(fmt_fn(None, completions, None, **kwargs)) <= KK_FORMAT
    assert set(ans_fn(None, completions, None, **kwargs)) <= KK_ANSWER
    math_fn = mt.make_math_reward_func(timeout_s=0.1)
    assert set(math_fn(None, completions, None, answer=["42"] * n)) <= MATH_VALUES


# --------------------------------------------------------------------------------------------------
# 1 MB inputs: bounded time
# --------------------------------------------------------------------------------------------------

KK_TAILS = [KK_GOLD, KK_GOLD.replace("Liam is a knave", "Liam is a knight"), "</answer>", ""]
MATH_TAILS = ["\\boxed{42}", "\\boxed{41}", "</think> so \\boxed{42}", "\\boxed{\\frac{1}{2}}", "\\boxed{", ""]


@BIG
@given(piece=st.one_of(any_text, tag_soup, box_soup).filter(bool), kk_tail=st.sampled_from(KK_TAILS))
def test_one_megabyte_of_generated_text_is_fast(piece, kk_tail):
    filler = (piece * (MB // len(piece) + 1))[:MB]
    for prefilled in (False, True):
        timed("kk_reward", f"generated: {piece[:20]!r} x {MB // len(piece)}", kk_check, filler + kk_tail, prefilled)
    for tail in MATH_TAILS:
        timed("math_reward", f"generated: {piece[:20]!r} x {MB // len(piece)}", math_check, filler + tail)


def _big_cases() -> dict[str, str]:
    n_box = MB // len("\\boxed{")
    return {
        "thousands of \\boxed{ openings": "\\boxed{" * n_box,
        "\\boxed{ openings, then an answer": "\\boxed{" * n_box + "\\boxed{42}",
        "one \\boxed{ then 1M opening braces": "\\boxed{" + "{" * MB,
        "1M closing braces": "}" * MB,
        "nested braces, balanced": "\\boxed{" + "{" * (MB // 2) + "42" + "}" * (MB // 2) + "}",
        "over-long boxed answer": "\\boxed{" + "1" * MB + "}",
        "gold after 1 MB of text": "x" * MB + "\\boxed{42}",
        "many </think>": "</think>" * (MB // 8) + "\\boxed{42}",
        "many <think>": "<think>" * (MB // 7),
        "every tag many times": "".join(kk_puzzles.TAGS) * (MB // 32),
        "well-formed, 1 MB thinking": "<think>"
        + "knight knave " * (MB // 13)
        + "</think><answer>"
        + GOLD
        + "</answer>",
        "well-formed, 1 MB answer of spaces": f"<think>t</think><answer>(1) Emma is a knight{' ' * MB}"
        "(2) Liam is a knave (3) Olivia is a knave</answer>",
        "well-formed, name then 1 MB of spaces": f"<think>t</think><answer>Emma{' ' * MB}is a knight, "
        "Liam is a knave, Olivia is a knave</answer>",
        "well-formed, names repeated": "<think>t</think><answer>" + "Emma Liam " * (MB // 10) + GOLD + "</answer>",
        "well-formed, names glued": "<think>t</think><answer>" + "Emma" * (MB // 4) + "</answer>",
        "well-formed, 1 MB answer of astral chars": "<think>t</think><answer>" + "\U0001114b" * MB + GOLD + "</answer>",
        "well-formed, 1 MB answer of emoji": "<think>t</think><answer>" + "\U0001f4a5" * MB + GOLD + "</answer>",
        "well-formed, 1 MB answer of dotted capital I": "<think>t</think><answer>" + "İ" * MB + GOLD + "</answer>",
        "1M knights": "<think>t</think><answer>" + "knight" * (MB // 6) + "</answer>",
        "NUL bytes": "\x00" * MB,
        "RTL override and zero-width": "\u202e\u200b" * (MB // 2),
        "lone surrogates": "\ud800" * MB,
        "dotted capital I (lower() grows)": "İ" * MB,
        "emoji": "💥" * MB + "\\boxed{42}",
        "deep \\frac": "\\boxed{" + "\\frac{" * (MB // 6),
        "blow-up answer after 1 MB": "y" * MB + "\\boxed{9^{9^{9}}}",
    }


@pytest.mark.parametrize("name", list(_big_cases()))
def test_one_megabyte_worst_shapes_are_fast(name):
    text = _big_cases()[name]
    assert len(text) >= MB - 16
    for prefilled in (False, True):
        timed("kk_reward", name, kk_check, text, prefilled)
    timed("math_reward", name, math_check, text)


def test_expected_scores_survive_megabyte_padding():
    cases = _big_cases()
    assert kk_check(cases["well-formed, 1 MB thinking"]) == 3.0
    assert kk_check(cases["well-formed, 1 MB answer of spaces"]) == 3.0
    assert kk_check(cases["well-formed, name then 1 MB of spaces"]) == 3.0
    assert kk_check(cases["1M knights"]) == -1.0
    assert kk_check(cases["well-formed, 1 MB answer of astral chars"]) == 3.0
    assert kk_check(cases["well-formed, 1 MB answer of emoji"]) == 3.0
    assert kk_check(cases["well-formed, 1 MB answer of dotted capital I"]) == 3.0
    assert math_check(cases["gold after 1 MB of text"]) == 1.0
    assert math_check(cases["\\boxed{ openings, then an answer"]) == 1.0
    assert math_check(cases["emoji"]) == 1.0
    assert math_check(cases["thousands of \\boxed{ openings"]) == 0.0


def test_one_megabyte_outside_the_main_thread():
    """Without SIGALRM (worker threads) the caps alone keep a 1 MB input cheap."""
    cases = _big_cases()
    out: list[tuple[float, float]] = []

    def work():
        for text in cases.values():
            t0 = time.perf_counter()
            value = mt.math_reward(text, "42")
            out.append((value, time.perf_counter() - t0))

    worker = threading.Thread(target=work)
    worker.start()
    worker.join(60)
    assert len(out) == len(cases)
    assert all(v in MATH_VALUES for v, _ in out)
    assert min(t for _, t in out) < BOUND_S


def test_adversarial_final_answer_is_cut_by_the_budget():
    """A short answer that is slow for sympy's parser costs at most about ``timeout_s``, whatever the input size."""
    text = "z" * MB + "\\boxed{" + "(" * 30 + "1" + ")" * 30 + "}"
    t0 = time.perf_counter()
    assert math_check(text, "1", timeout_s=0.05) in MATH_VALUES
    assert time.perf_counter() - t0 < 0.05 + 1.0  # budget + scan + room for a loaded machine


def search_check(text, gold: str = "Paris") -> float:
    (value,) = search_reward([text], [[gold]])
    assert value in (1.0, -1.0) and type(value) is float
    return value


SEARCH_CASES = {
    "1 MB of unclosed <answer>": "<answer>" * (MB // 8),
    "unclosed <answer>, then an answer": "<answer>x" * (MB // 9) + "<answer>Paris</answer>",
    "1 MB of punctuation in the answer": "<answer>" + "!?." * (MB // 3) + "Paris</answer>",
    "1 MB of articles": "<answer>" + "the a an " * (MB // 9) + "</answer>",
    "dotted capital I (lower() grows)": "<ANSWER>" + "İ" * MB + "</ANSWER>",
}


SEARCH_PIECES = ["<answer>", "</answer>", "<ANSWER>", "</Answer>", "<anſwer>", "<answer", "Paris", " "]


@pytest.mark.parametrize("name", list(SEARCH_CASES))
def test_search_reward_on_a_megabyte_is_linear(name):
    """Issue 24, item 11: the regex retried at every unclosed ``<answer>`` (480 KB: 270 s)."""
    timed("search_reward", name, search_check, SEARCH_CASES[name])


@FAST
@given(text=st.lists(st.sampled_from(SEARCH_PIECES)).map("".join) | tag_soup | any_text)
def test_search_answer_is_search_r1s_last_match(text):
    """The linear scan returns what Search-R1's ``re.findall(r"<answer>(.*?)</answer>")[-1]`` returns."""
    import re

    from trgrpo.tasks.search import extract_answer

    found = re.findall(r"<answer>(.*?)</answer>", text, re.DOTALL | re.IGNORECASE)
    assert extract_answer(text) == (found[-1].strip() if found else None)
    search_check(text)


def test_zz_report_timings(capsys):
    """Print the worst measured cost of each reward on a 1 MB input (runs last in this file)."""
    assert CPU, "the timing tests did not run"
    with capsys.disabled():
        for name in sorted(CPU):
            (cpu, cpu_case), (wall, wall_case) = CPU[name], WALL[name]
            print(
                f"\n[1 MB input, best of 5 runs] {name}: worst CPU {cpu * 1e3:.1f} ms ({cpu_case}), "
                f"worst wall-clock {wall * 1e3:.1f} ms ({wall_case}); bound {BOUND_S * 1e3:.0f} ms",
                end="",
            )
        print()
    assert max(cpu for cpu, _ in CPU.values()) < BOUND_S
