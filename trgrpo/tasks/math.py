"""Math: binary boxed-answer reward, data, simple prompt, evaluation (paper Section 4.1, App. B.1.2, Table 2).

* Reward (App. B.1.2). 1.0 if the last ``\\boxed{...}`` of the completion (brace-matched; only the text after
  the last ``</think>`` when there is one) is equivalent to the reference under math-verify, else 0.0. No format
  term. The model's answer is parsed with math-verify's LaTeX extractor only (latex2sympy, an ANTLR grammar):
  its plain-expression extractor, which hands text to sympy's ``parse_expr`` (``eval``), is kept for the trusted
  reference. The one ``eval`` the answer still reaches is ``sympy.Number`` on a lexer NUMBER token (digits,
  ``.``, ``,``), e.g. ``Integer (123 )`` (tested).
  Bounded cost: the scan is a couple of C-level ``rfind`` plus at most ``MAX_ANSWER_CHARS`` characters of brace
  matching, so a 1 MB completion costs about a millisecond. Answers longer than ``MAX_ANSWER_CHARS`` or nested
  deeper than ``MAX_NESTING`` score 0 (unless equal to the reference as strings). Numbers that would blow up in
  C-level arithmetic (``9^{9^{9}}``, ``100000!``) are refused after parsing, before sympy compares them. Sympy's
  parse + verify get a wall-clock budget (``timeout_s``, default 1 s) through ``SIGALRM`` with sub-second
  resolution. Signals only work in the main thread: elsewhere the budget is off and only the caps bound the cost
  (math-verify's own integer-second alarms are disabled, they would clash with ours).
* Data. Offline arithmetic from reasoning-gym (``basic_arithmetic``, ``chain_sum``) with exact integer answers
  (:func:`generate_math`); local files (:func:`load_math_file`) and the paper's hub datasets
  (:data:`MATH_HUB`, :func:`load_math_hub`: DeepScaleR, Open-Reasoner-Zero, MATH-500, Minerva,
  OlympiadBench, AMC 2022-23, AIME 2024).
* Prompt. A simple prompt with no chat template (App. B.1.2: base model, no instruction template).
* Evaluation. Greedy accuracy (MATH-500, Minerva, OlympiadBench) and avg@k / pass@k with k = 16 (AMC, AIME).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import logging
import math
import operator
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .common import (
    as_list,
    completion_text,
    first_present,
    generate_completions,
    greedy_generate,
    load_from_hub,
    mean_avg_at_k,
    mean_pass_at_k,
    read_table,
)

MAX_ANSWER_CHARS = 1000  # a longer boxed answer scores 0 (real answers are far shorter)
MAX_NESTING = 10  # deeper {[( nesting scores 0: latex2sympy's ANTLR parser is exponential in brace depth
DEFAULT_TIMEOUT_S = 1.0  # wall-clock budget of sympy's parse + verify per completion (main thread)
MATH_REWARD_VALUES = frozenset({0.0, 1.0})
BOXED = "\\boxed{"
THINK_END = "</think>"
MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------------
# Answer extraction (bounded scan)
# --------------------------------------------------------------------------------------------------


def extract_boxed_answer(text: str, *, max_chars: int = MAX_ANSWER_CHARS) -> str | None:
    """Content of the last ``\\boxed{...}`` after the last ``</think>`` (or anywhere without one).

    Brace-matched (``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``). None when there is no ``\\boxed{``, when the
    last one is unbalanced, or when its content is longer than ``max_chars``. Cost: two ``rfind`` over the text
    and at most ``max_chars + 1`` characters scanned, whatever the text's length.
    """
    cut = text.rfind(THINK_END)
    lo = cut + len(THINK_END) if cut >= 0 else 0
    start = text.rfind(BOXED, lo)
    if start < 0:
        return None
    begin = start + len(BOXED)
    depth = 1
    for j in range(begin, min(len(text), begin + max_chars + 1)):
        ch = text[j]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[begin:j]
    return None


# \left \right \displaystyle (not \leftarrow ...), thin spaces \! \, \; \: \<space>, dollar signs
_STRIP = re.compile(r"\\(?:left|right|displaystyle)(?![A-Za-z])|\\[!,;: ]|\$")


def nesting_depth(text: str) -> int:
    """Deepest nesting of ``{``, ``[`` and ``(`` (unmatched closers ignored); a loop over at most 1000 chars."""
    depth = deepest = 0
    for ch in text:
        if ch in "{[(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "}])" and depth > 0:
            depth -= 1
    return deepest


def _normalize(s: str) -> str:
    """Light string normalisation for the exact-match fast path (never used to say "wrong")."""
    s = _STRIP.sub("", s.strip())
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = "".join(s.split())
    return s.rstrip(".")


# --------------------------------------------------------------------------------------------------
# Time budget (SIGALRM in the main thread, a watchdog thread elsewhere)
# --------------------------------------------------------------------------------------------------


class BudgetExceeded(BaseException):
    """Raised inside sympy when the wall-clock budget is spent. A BaseException, so that the ``except
    Exception`` blocks inside math-verify and sympy do not swallow it."""


def _can_use_alarm() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


_REFIRE_S = 0.01  # after the budget, raise again every 10 ms: C code that swallows exceptions (dict lookups
# calling a Python __eq__, as antlr4's prediction contexts do) must not absorb the only one
_PATIENCE = 20  # alarms (200 ms) to wait for a frame of _INTERRUPTIBLE before raising wherever the code is
_INTERRUPTIBLE = ("sympy", "mpmath", "antlr4", "latex2sympy2_extended", "math_verify", __name__)


def _in_import(frame: Any) -> bool:
    """True when an import is running somewhere in the stack of ``frame``."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


class _Watchdog:
    """One daemon thread that raises :class:`BudgetExceeded` in other threads once their budget is spent.

    The exception is delivered with ``PyThreadState_SetAsyncExc`` (at the target's next bytecode, like a signal
    handler's), again every 10 ms until the budget is disarmed, never inside an import, and preferably in a frame
    of the parser/verifier (as :func:`time_budget` does with SIGALRM in the main thread). Disarming under the lock
    also cancels a delivery that is still pending, so nothing fires after the block is left.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._jobs: dict[int, list[Any]] = {}  # token -> [thread id, next deadline, fires]
        self._next = 0
        self._thread: threading.Thread | None = None

    def arm(self, seconds: float) -> int:
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="trgrpo-math-budget", daemon=True)
                self._thread.start()
            self._next += 1
            self._jobs[self._next] = [threading.get_ident(), time.monotonic() + seconds, 0]
            self._cond.notify()
            return self._next

    def disarm(self, token: int) -> None:
        with self._cond:
            job = self._jobs.pop(token, None)
            if job is not None and job[2]:
                _set_async_exc(job[0], None)  # cancel a delivery still pending

    def _run(self) -> None:
        import sys

        with self._cond:
            while True:
                now = time.monotonic()
                due = [(tok, job) for tok, job in self._jobs.items() if job[1] <= now]
                for _tok, job in due:
                    job[1] = now + _REFIRE_S
                    job[2] += 1
                    frame = sys._current_frames().get(job[0])
                    if frame is None or _in_import(frame):
                        continue
                    module = frame.f_globals.get("__name__", "")
                    if module.startswith(_INTERRUPTIBLE) or job[2] > _PATIENCE:
                        _set_async_exc(job[0], BudgetExceeded)
                wait = min((job[1] for job in self._jobs.values()), default=now + 60) - time.monotonic()
                self._cond.wait(timeout=max(wait, 1e-3))


def _set_async_exc(thread_id: int, exc: type[BaseException] | None) -> None:
    import ctypes

    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc else None)


_WATCHDOG = _Watchdog()
if hasattr(os, "register_at_fork"):  # a forked child has no watchdog thread, and maybe a lock held at the fork
    os.register_at_fork(after_in_child=_WATCHDOG.__init__)


@contextlib.contextmanager
def time_budget(seconds: float | None) -> Iterator[None]:
    """Raise :class:`BudgetExceeded` in the block after ``seconds`` of wall-clock time, in any thread.

    A no-op for ``None``/``<= 0``. In the main thread: SIGALRM; elsewhere: the :class:`_Watchdog` thread. Once
    the budget is spent the exception is raised again every 10 ms until the block is left. Only a single long C
    call (one huge integer power) cannot be interrupted: :func:`_is_blowup` refuses those before they run. In the
    main thread the previous SIGALRM handler is restored and a timer that was already running is re-armed, minus
    the time spent here.
    """
    if not seconds or seconds <= 0:
        yield
        return
    if not _can_use_alarm():
        token = _WATCHDOG.arm(seconds)
        try:
            yield
        finally:
            while True:  # a late delivery may land in here: retry until the disarm has run whole
                try:
                    _WATCHDOG.disarm(token)
                    break
                except BudgetExceeded:
                    continue
        return
    state = {"armed": True, "fires": 0}

    def _handler(signum: int, frame: Any) -> None:
        if not state["armed"]:
            return
        state["fires"] += 1
        if _in_import(frame):
            return  # never break an import: it would leave a half-initialised module behind (sympy.printing)
        module = frame.f_globals.get("__name__", "") if frame is not None else ""
        # Raise where the exception propagates cleanly: in the parser/verifier. An exception raised in a gc callback
        # or a __del__ is only printed ("Exception ignored in ..."); there, wait for the next alarm (or give up
        # waiting after _PATIENCE alarms).
        if module.startswith(_INTERRUPTIBLE) or state["fires"] > _PATIENCE:
            raise BudgetExceeded()

    t0 = time.monotonic()
    old_handler = signal.signal(signal.SIGALRM, _handler)
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, seconds, _REFIRE_S)
    try:
        yield
    finally:
        # A late alarm may land in here before "armed" is cleared: retry until the clean-up has run whole.
        while True:
            try:
                state["armed"] = False
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, old_handler if old_handler is not None else signal.SIG_DFL)
                if old_delay > 0:  # someone else's timer was running: give it back what is left
                    left = max(old_delay - (time.monotonic() - t0), 1e-3)
                    signal.setitimer(signal.ITIMER_REAL, left, old_interval)
                break
            except BudgetExceeded:
                continue


# --------------------------------------------------------------------------------------------------
# math-verify, guarded
# --------------------------------------------------------------------------------------------------


class _DropTimeoutDisabled(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


# Scored once, without a budget, before any budget starts (make_math_reward_func, math_reward): these load what
# sympy and math-verify import lazily (antlr4's LL1Analyzer, sympy.combinatorics for factoring, assumption
# wrappers, set expressions, the case-keeping reading), so that no alarm has to wait for an import (the alarm
# handler never interrupts one, see time_budget) and the first answer of a fresh process is not cut short.
_WARM_UP = (
    ("\\frac{1}{2}", "0.5"),
    ("x^2+7x+10", "(x+2)(x+5)"),
    ("\\left(3, \\frac{\\pi}{2}\\right)", "[1, 2)"),
    ("10\\%", "1.5e3"),
    ("N=n+1", "N=n"),
    ("9.224 \\times 10^{-19}", "8.224 \\times 10^{-19}"),
)
_WARM_LOCK = threading.Lock()
_warmed = False


@functools.lru_cache(maxsize=1)
def _math_verify() -> Any:
    """Import math-verify once (sympy takes ~1 s) and silence its "timeout disabled" warning (we pass ``None`` on
    purpose and apply our own budget)."""
    import math_verify
    import math_verify.parser  # noqa: F401  (its parse cache is cleared after unevaluated parses)

    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).addFilter(_DropTimeoutDisabled())
    return math_verify


def warm_up() -> None:
    """Import math-verify and run the whole scoring path on a few answers, without a budget (idempotent, thread
    safe). Called by :func:`make_math_reward_func` and before the budget of every :func:`math_reward`."""
    global _warmed
    if _warmed:
        return
    with _WARM_LOCK:
        if _warmed:
            return
        _math_verify()
        for pred, gold in _WARM_UP:
            with contextlib.suppress(Exception):
                _equivalent(pred, gold)
        _warmed = True


# --------------------------------------------------------------------------------------------------
# The reference answer: parsed once per item, checked, case and variables kept where they matter
# --------------------------------------------------------------------------------------------------

_SCI_NUMBER = re.compile(r"\s*([-+]?(?:\d+\.?\d*|\.\d+))\s*[eE]\s*([-+]?\d+)\s*")
_TEXT_BLOCK = re.compile(r"\\(?:text|textrm|textbf|mathrm|mbox|operatorname)\s*\{[^{}]*\}")
_COMMAND = re.compile(r"\\[A-Za-z]+")
# math-verify's normalisation of LaTeX answers (LatexExtractionConfig's default)
_MV_NORMALIZATION = dict(
    basic_latex=True, units=True, malformed_operators=True, nits=True, boxed="all", equations=False
)


def _sci_to_latex(text: str) -> str:
    """``4.4e7`` -> ``4.4\\times 10^{7}`` when the whole answer is a number in scientific notation (math-verify reads
    ``4.4e7`` as 4.4 * e * 7)."""
    m = _SCI_NUMBER.fullmatch(text)
    return f"{m.group(1)}\\times 10^{{{int(m.group(2))}}}" if m else text


def _bare_letters(latex: str) -> set[str]:
    """Letters outside commands and ``\\text{}``/``\\mathrm{}`` blocks: the variables an answer names."""
    return set(re.findall(r"[A-Za-z]", _COMMAND.sub(" ", _TEXT_BLOCK.sub(" ", latex))))


def _letters(expr: Any) -> set[str]:
    return {ch for name in _symbol_names(expr) for ch in name if ch.isalpha()}


def _symbol_names(expr: Any) -> set[str]:
    return {str(getattr(s, "name", s)) for s in getattr(expr, "free_symbols", ())}


def _strict_parse(latex: str, *, units: bool = True, evaluate: bool = True) -> Any:
    """latex2sympy on the whole answer with the case of symbols kept (math-verify lower-cases them: ``N=n`` becomes
    the always-true ``n=n``). With ``units`` math-verify's unit removal runs (it also drops a trailing ``c`` or
    ``m``); without, only ``\\text{}``/``\\mathrm{}`` blocks are dropped. Raises when it does not parse."""
    from latex2sympy2_extended.latex2sympy2 import ConversionConfig, latex2sympy
    from latex2sympy2_extended.math_normalization import NormalizationConfig, normalize_latex
    from math_verify.grader import should_treat_as_complex
    from sympy.core.parameters import evaluate as sympy_evaluate

    if not units:
        latex = _TEXT_BLOCK.sub(" ", latex)
    text = normalize_latex(latex, NormalizationConfig(**{**_MV_NORMALIZATION, "units": units}))
    if not text.strip():
        raise ValueError("empty answer")
    with sympy_evaluate(evaluate):
        return latex2sympy(
            text,
            is_real=not should_treat_as_complex(text),
            convert_degrees=False,
            normalization_config=None,
            conversion_config=ConversionConfig(lowercase_symbols=False),
        )


@dataclass(frozen=True)
class GoldAnswer:
    """A reference answer read once (:func:`analyze_gold`).

    ``mode`` says how answers are compared with it: ``"mv"`` math-verify's reading; ``"strict"`` the case- and
    variable-keeping reading (math-verify's reading loses a variable, folds case that matters, or fails); ``"string"``
    neither parses (only an equal string scores). ``note`` says why it is not ``"mv"``.
    """

    text: str
    latex: str
    mv: tuple[Any, ...]
    strict: Any
    units: bool
    mode: str
    note: str | None


@functools.lru_cache(maxsize=8192)
def analyze_gold(answer: str) -> GoldAnswer:
    """Parse one reference answer (trusted: math-verify's plain-expression reader runs on it too) and check the
    reading against a case- and variable-keeping one. A gold whose reading is suspicious is logged (once)."""
    import sympy

    mv = _math_verify()
    latex = str(answer).strip()
    if latex.startswith("$") and latex.endswith("$"):
        latex = latex.strip("$").strip()
    inner = (extract_boxed_answer(latex, max_chars=10_000) or latex) if BOXED in latex else latex
    inner = _sci_to_latex(inner)
    try:
        mv_forms = tuple(
            mv.parse(
                BOXED + inner + "}",
                extraction_config=[mv.LatexExtractionConfig(), mv.ExprExtractionConfig()],
                parsing_timeout=None,
            )
        )
    except Exception:
        mv_forms = ()
    mv_expr = next((x for x in mv_forms if isinstance(x, (sympy.Basic, sympy.MatrixBase))), None)
    bare = _bare_letters(inner)
    strict, units = None, True
    with contextlib.suppress(Exception):
        strict = _strict_parse(inner, units=True)
    lost = bare - _letters(strict) if strict is not None else bare
    if lost:  # the unit removal may have taken a variable (``\frac{1}{\sqrt{2}}c``): read it without
        with contextlib.suppress(Exception):
            keep = _strict_parse(inner, units=False)
            if len(bare - _letters(keep)) < len(lost):
                strict, units = keep, False
    mode, note = "mv", None
    if mv_expr is None and strict is None:
        mode, note = "string", "neither math-verify nor latex2sympy parses it: only an identical answer scores"
    elif strict is None:
        pass
    elif mv_expr is None:
        mode, note = "strict", f"math-verify cannot read it; compared as {strict}"
    elif {n.lower() for n in _symbol_names(mv_expr)} != {n.lower() for n in _symbol_names(strict)}:
        mode, note = "strict", f"math-verify reads it as {mv_expr}; compared as {strict}"
    elif any(n != n.lower() for n in _symbol_names(strict)):
        mode = "strict"  # case kept: N and n, T and t are different symbols
    if note is not None:
        logger.warning("math reference answer %r: %s", str(answer)[:200], note)
    return GoldAnswer(str(answer), inner, mv_forms, strict, units, mode, note)


def gold_forms(answer: Any) -> tuple[str, ...]:
    """The accepted forms of a reference answer: a string, a number or a list of them (Minerva rows with two)."""
    if isinstance(answer, (list, tuple)) or (hasattr(answer, "tolist") and not isinstance(answer, (str, bytes))):
        items = answer.tolist() if hasattr(answer, "tolist") else list(answer)
        items = items if isinstance(items, list) else [items]
    else:
        items = [answer]
    forms = []
    for item in items:
        text = _answer_text(item) if not isinstance(item, str) else item.strip()
        if text and text not in forms:
            forms.append(text)
    return tuple(forms)


# --------------------------------------------------------------------------------------------------
# Blow-up guard: sizes judged from the unevaluated parse, before sympy computes anything
# --------------------------------------------------------------------------------------------------

_MAX_DIGITS = 100_000  # no (sub)expression may have a value of more decimal digits (10^{100000}, 2^{2^{16}})
_MAX_COUNT = 10_000  # factorial-like arguments, terms of a sum or product
_MAX_MATRIX_AMPERSANDS = 24  # a matrix larger than 5x5 (latex2sympy computes determinants while parsing)
_GAMMA_LIKE = {"gamma", "loggamma", "polygamma", "uppergamma", "lowergamma", "beta", "zeta"}
_MAX_NODES = 5_000
_LOG10_2 = math.log10(2)


class _Blowup(Exception):
    pass


def _is_combinatorial(node: Any) -> bool:
    """factorial, binomial, subfactorial, catalan, fibonacci, gamma, ...: huge values from moderate inputs."""
    if not getattr(node, "is_Function", False):
        return False
    cls = type(node)
    return cls.__module__.startswith("sympy.functions.combinatorial") or cls.__name__ in _GAMMA_LIKE


def _magnitude(node: Any, depth: int) -> float:
    """Upper bound of ``|node|`` (a symbol counts as 10)."""
    if getattr(node, "is_Number", False):
        try:
            return abs(float(node))
        except (OverflowError, TypeError, ValueError):
            return math.inf
    d = _digits(node, depth + 1)
    return math.inf if d > 300 else 10.0**d


def _digits(node: Any, depth: int = 0) -> float:
    """Upper bound of the number of decimal digits of ``node``'s value (and of its exact numerator/denominator),
    from the unevaluated tree; raises :class:`_Blowup` when a part is out of bounds."""
    import sympy

    if depth > 200:
        raise _Blowup("too deep")
    if getattr(node, "is_Integer", False):
        return max(1.0, abs(int(node)).bit_length() * _LOG10_2)
    if getattr(node, "is_Rational", False):
        return max(1.0, max(abs(node.p).bit_length(), node.q.bit_length()) * _LOG10_2)
    if getattr(node, "is_Float", False):
        _sign, _man, exp, bc = node._mpf_
        return 1.0 + abs(exp + bc) * _LOG10_2
    if isinstance(node, sympy.MatrixBase):
        if node.rows * node.cols > (_MAX_MATRIX_AMPERSANDS + 6):
            raise _Blowup("matrix")
        return max((_digits(x, depth + 1) for x in node), default=1.0)
    args = getattr(node, "args", ())
    if not args:
        return 1.0
    if isinstance(node, sympy.Pow):
        base, exp = args
        if getattr(base, "is_Number", False) and base in (0, 1, -1):
            return 1.0
        size = max(_digits(base, depth + 1), 1.0) * max(_magnitude(exp, depth), 1.0)
    elif _is_combinatorial(node):
        n = max((_magnitude(a, depth) for a in args if not getattr(a, "free_symbols", None)), default=1.0)
        if n > _MAX_COUNT:
            raise _Blowup("factorial-like of a large number")
        for a in args:
            _digits(a, depth + 1)
        size = max(n, 2.0) * math.log10(max(n, 2.0)) + 1.0
    elif isinstance(node, (sympy.Sum, sympy.Product)):
        count = 1.0
        for lim in node.limits:
            if len(lim) == 3:
                count *= _magnitude(lim[1], depth) + _magnitude(lim[2], depth) + 1.0
        if count > _MAX_COUNT:
            raise _Blowup("sum or product of many terms")
        inner = _digits(node.function, depth + 1)
        size = inner * count if isinstance(node, sympy.Product) else inner + math.log10(count)
    elif isinstance(node, sympy.Mul):
        size = sum(_digits(a, depth + 1) for a in args)
    else:
        size = max(_digits(a, depth + 1) for a in args) + 1.0
    if size > _MAX_DIGITS:
        raise _Blowup("too many digits")
    return size


def _is_blowup(expr: Any) -> bool:
    """True when evaluating ``expr`` could spend long, uninterruptible C time, or the tree is implausibly large.

    Judged on the unevaluated parse (``sympy.evaluate(False)``): refused are values of more than 10^5 digits by
    an upper bound that follows exponents written as sums or products and towers in the base (``10^{100000}``,
    ``(10^{9999})^{9999}``, ``10^{999999999-1}``, ``2^{2^{2^{2^{2}}}}``), factorial-like functions of numbers above
    10^4 (``(9999 \\cdot 9999)!``, ``\\binom{10^{9}}{5}``), sums and products of more than 10^4 terms, matrices of
    more than 30 cells, and trees of more than 5000 nodes.
    """
    import sympy

    if not isinstance(expr, (sympy.Basic, sympy.MatrixBase)):
        return False
    try:
        if isinstance(expr, sympy.Basic):
            for count, _node in enumerate(sympy.preorder_traversal(expr)):
                if count > _MAX_NODES:
                    return True
        _digits(expr)
    except _Blowup:
        return True
    except Exception:  # a comparison with nan/zoo, RecursionError, ...: refuse rather than risk it
        return True
    return False


def _too_large_matrix(latex: str) -> bool:
    """latex2sympy builds matrices (and their determinants) while parsing: refuse large ones before."""
    return "matrix" in latex and latex.count("&") > _MAX_MATRIX_AMPERSANDS


# --------------------------------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------------------------------

REL_TOL = 1e-5  # numbers below 0.1 in magnitude must agree to this relative tolerance (see _close_enough)


def _close_enough(gold: Any, pred: Any) -> bool:
    """math-verify rounds floats to 6 decimal places, so every pair of magnitudes below 1e-6 compares equal
    (9.224e-19 == 8.224e-19). When both sides are numbers below 0.1 in magnitude, also require a relative
    agreement of :data:`REL_TOL` (only ever turns a yes into a no)."""
    import sympy

    try:
        if not (getattr(gold, "is_number", False) and getattr(pred, "is_number", False)):
            return True
        g, p = complex(sympy.N(gold, 30)), complex(sympy.N(pred, 30))
    except Exception:
        return True
    big = max(abs(g), abs(p))
    if not math.isfinite(big) or big >= 0.1:
        return True
    return abs(g - p) <= REL_TOL * big


def _first_expr(forms: Iterable[Any]) -> Any:
    import sympy

    return next((x for x in forms if isinstance(x, (sympy.Basic, sympy.MatrixBase))), None)


def _parse_guarded_mv(pred: str) -> list[Any]:
    """math-verify's LaTeX reading of a model answer, refused (empty) when the unevaluated parse is a blow-up."""
    from sympy.core.parameters import evaluate as sympy_evaluate

    mv = _math_verify()
    cfg = [mv.LatexExtractionConfig()]
    try:
        with sympy_evaluate(False):
            raw = mv.parse(BOXED + pred + "}", extraction_config=cfg, parsing_timeout=None)
    finally:  # its cache is keyed by the text only: drop the unevaluated results
        mv.parser.parse_latex_cached.cache_clear()
    if not raw or any(_is_blowup(p) for p in raw):
        return []
    return mv.parse(BOXED + pred + "}", extraction_config=cfg, parsing_timeout=None)


@functools.lru_cache(maxsize=4096)
def _equivalent(pred: str, gold: str) -> bool:
    """Equivalence of a boxed prediction and one reference form (cached: rollouts repeat answers).

    May raise BudgetExceeded (not cached then)."""
    mv = _math_verify()
    ref = analyze_gold(gold)
    if ref.mode == "string":
        return False
    pred = _sci_to_latex(pred)
    if _too_large_matrix(pred):
        return False
    if ref.mode == "mv":
        parsed = _parse_guarded_mv(pred)
        if not parsed or not mv.verify(list(ref.mv), parsed, timeout_seconds=None):
            return False
        return _close_enough(_first_expr(ref.mv), _first_expr(parsed))
    try:  # "strict": the same case- and variable-keeping reading on both sides
        if _is_blowup(_strict_parse(pred, units=ref.units, evaluate=False)):
            return False
        parsed_pred = _strict_parse(pred, units=ref.units)
    except BudgetExceeded:
        raise
    except Exception:
        return False
    if _symbol_names(parsed_pred) != _symbol_names(ref.strict):  # T is not t, c/sqrt(2) is not 1/sqrt(2)
        return False
    if not mv.verify([ref.strict], [parsed_pred], timeout_seconds=None):
        return False
    return _close_enough(ref.strict, parsed_pred)


def math_reward(completion: Any, answer: Any, *, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> float:
    """Binary math reward of App. B.1.2: 1.0 if the last boxed answer equals ``answer`` under math-verify.

    ``answer`` is a string, a number, or a list of accepted forms (any one scores). Never raises and always
    returns 0.0 or 1.0: non-strings, missing/unbalanced/over-long boxes, parse errors, blow-ups and running out
    of the ``timeout_s`` budget (any thread) all give 0.0. math-verify is loaded and the reference parsed before
    the budget starts.
    """
    try:
        if not isinstance(completion, str):
            return 0.0
        golds = gold_forms(answer)
        pred = extract_boxed_answer(completion)
        if pred is None or not pred.strip() or not golds:
            return 0.0
        norm_pred = _normalize(pred)
        if norm_pred and any(norm_pred == _normalize(g) for g in golds):
            return 1.0
        if nesting_depth(pred) > MAX_NESTING:
            return 0.0
        warm_up()
        for gold in golds:  # trusted and cached: outside the budget
            analyze_gold(gold)
        with time_budget(timeout_s):
            return 1.0 if any(_equivalent(pred, gold) for gold in golds) else 0.0
    except BudgetExceeded:
        return 0.0
    except Exception:  # parse/verify failures of any kind (RecursionError and MemoryError included)
        logger.debug("math_reward failed", exc_info=True)
        return 0.0


def make_math_reward_func(*, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> Callable[..., list[float]]:
    """TRL reward function ``math_accuracy_reward(prompts, completions, completion_ids=None, answer=..., **kw)``.

    ``completions`` are strings or message lists; the dataset column ``answers`` (every accepted form, see
    :func:`math_dataset`) or ``answer`` arrives as a kwargs list. math-verify is loaded and warmed here, before
    any budget.
    """
    warm_up()

    def math_accuracy_reward(
        prompts: Any = None, completions: Sequence[Any] = (), completion_ids: Any = None, **kwargs: Any
    ) -> list[float]:
        """App. B.1.2: 1 if the last boxed answer matches the reference, else 0."""
        answers = kwargs.get("answers")
        if answers is None:
            answers = kwargs.get("answer")
        if answers is None:
            raise KeyError("the math reward needs the dataset column 'answer' (see math_dataset)")
        if len(answers) != len(completions):
            raise ValueError("completions and answer must have the same length")
        return [math_reward(completion_text(c), a, timeout_s=timeout_s) for c, a in zip(completions, answers)]

    return math_accuracy_reward


# --------------------------------------------------------------------------------------------------
# Data: offline arithmetic, local files, hub
# --------------------------------------------------------------------------------------------------

_TASK_DEFAULTS: dict[str, dict[str, Any]] = {
    # Small numbers, so that a CPU-sized model can learn something. allow_parentheses=True selects reasoning-gym's
    # expression builder that respects operator precedence (its "simple" builder folds left to right, so
    # "6 + 10 * 0" comes with the answer 0); answers are recomputed exactly anyway (exact_arithmetic).
    "basic_arithmetic": dict(
        min_terms=2,
        max_terms=3,
        min_digits=1,
        max_digits=2,
        operators=("+", "-", "*"),
        allow_parentheses=True,
        allow_negation=False,
    ),
    "chain_sum": dict(min_terms=2, max_terms=4, min_digits=1, max_digits=2, allow_negation=False),
}

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def exact_arithmetic(expression: str) -> Fraction:
    """Exact value of an expression of integer literals, + - * /, unary minus and parentheses.

    An AST walk over Fractions (never ``eval``); anything else raises ValueError, x/0 raises ZeroDivisionError.
    """

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = walk(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return Fraction(node.value)
        raise ValueError(f"not plain integer arithmetic: {ast.dump(node)[:80]}")

    if len(expression) > 10_000:
        raise ValueError("expression too long")
    return walk(ast.parse(expression.strip(), mode="eval"))


def generate_math(n: int, seed: int = 0, task: str = "basic_arithmetic", **config: Any) -> list[dict[str, str]]:
    """``n`` distinct arithmetic problems from reasoning-gym with exact answers: [{"problem", "answer"}, ...].

    ``task`` is ``"basic_arithmetic"`` or ``"chain_sum"``; ``config`` overrides the generator's options
    (defaults: 2-3 or 2-4 terms of 1-2 digits). The answer is recomputed exactly from the expression
    (:func:`exact_arithmetic`); problems whose exact value is not an integer are skipped (reasoning-gym divides
    with floor division). Deterministic by ``seed``.
    """
    import reasoning_gym

    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    if task not in _TASK_DEFAULTS:
        raise ValueError(f"task must be one of {sorted(_TASK_DEFAULTS)}, got {task!r}")
    options = {**_TASK_DEFAULTS[task], **config}
    size = 4 * n + 16
    ds = reasoning_gym.create_dataset(task, size=size, seed=seed, **options)
    seen: set[str] = set()
    out: list[dict[str, str]] = []
    for item in ds:
        problem = str(item["question"]).strip()
        try:
            value = exact_arithmetic(str(item["metadata"]["expression"]))
        except (ValueError, ZeroDivisionError, KeyError, SyntaxError):
            continue
        if problem in seen or value.denominator != 1:
            continue
        seen.add(problem)
        out.append({"problem": problem, "answer": str(value.numerator)})
        if len(out) == n:
            return out
    raise ValueError(f"only {len(out)} distinct {task} problems for these options; widen them or lower n")


def math_prompt(record: dict[str, Any]) -> str:
    """The simple prompt of App. B.1.2 (no chat template): the problem, then ask for a boxed final answer."""
    return f"{str(record['problem']).strip()}\n{MATH_INSTRUCTION}"


def math_dataset(records: Sequence[dict[str, Any]]) -> Any:
    """A ``datasets.Dataset`` with ``prompt`` (plain text) and ``answer`` for TRL's ``GRPOTrainer``; plus
    ``answers`` (every accepted form, the reward reads it) when a record has more than one."""
    import datasets

    columns: dict[str, list[Any]] = {
        "prompt": [math_prompt(r) for r in records],
        "answer": [str(r["answer"]) for r in records],
    }
    forms = [list(gold_forms(r.get("answers") or r["answer"])) for r in records]
    if any(len(f) > 1 for f in forms):
        columns["answers"] = forms
    return datasets.Dataset.from_dict(columns)


def _answer_text(value: Any) -> str | None:
    """A reference answer as text: numbers without a trailing ``.0``, first of a list, ``{"value": ...}``."""
    if value is None:
        return None
    if isinstance(value, dict):
        return _answer_text(first_present(value, ("value", "answer", "ground_truth")))
    if not isinstance(value, (str, bytes, int, float)) and hasattr(value, "__len__"):
        items = as_list(value)
        return _answer_text(items[0]) if items else None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float):
        if value != value:  # NaN: an empty cell of a table
            return None
        if value.is_integer():
            value = int(value)
        else:
            return _float_text(value)
    text = str(value).strip()
    return text or None


def _float_text(value: float) -> str:
    """The number a float answer stands for: a float32 cell (parquet) as float32's shortest text (0.3, not
    0.30000001192092896), binary noise of a float64 dropped at 15 significant digits (0.3, not 0.30000000000000004)."""
    import numpy as np

    if math.isfinite(value) and float(np.float32(value)) == value:
        return str(np.float32(value))
    return format(value, ".15g")


def _problem_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip() or None
    try:  # a conversational prompt: the last user message
        messages = [m for m in as_list(value) if isinstance(m, dict)]
    except TypeError:
        return None
    users = [m for m in messages if m.get("role") == "user" or m.get("from") == "human"]
    if not users:
        return None
    return str(users[-1].get("content", users[-1].get("value", ""))).strip() or None


def normalize_math_row(row: Any) -> dict[str, str]:
    """One row of a math file as {"problem", "answer"}.

    Reads ``problem``/``question``/``prompt`` (text or messages) and ``answer``/``final_answer``/
    ``reward_model.ground_truth``; a ``solution`` with a ``\\boxed{}`` gives its last boxed answer. Also reads
    Open-Reasoner-Zero's pairs ``[{"from": "human", "value": q}, {"from": "assistant", "ground_truth": {...}}]``.
    """
    if isinstance(row, (list, tuple)) and len(row) == 2 and all(isinstance(m, dict) for m in row):  # ORZ
        row = {"problem": row[0].get("value"), "answer": row[1].get("ground_truth")}
    if not isinstance(row, dict):
        raise TypeError(f"a math row is a dict, got {type(row).__name__}")
    problem = _problem_text(first_present(row, ("problem", "question", "prompt")))
    raw_answer = first_present(row, ("answer", "final_answer", "gold", "target"))
    answer = _answer_text(raw_answer)
    if answer is None and isinstance(row.get("reward_model"), dict):
        answer = _answer_text(row["reward_model"].get("ground_truth"))
    if answer is None and isinstance(row.get("solution"), str):
        answer = extract_boxed_answer(row["solution"], max_chars=10_000) or None
    if problem is None or answer is None:
        raise ValueError(f"a math row needs a problem (problem/question/prompt) and an answer; got keys {sorted(row)}")
    record = {"problem": problem, "answer": answer}
    forms = gold_forms(raw_answer) if raw_answer is not None and not isinstance(raw_answer, (str, dict)) else ()
    if len(forms) > 1:  # several accepted forms (Minerva): keep them all, the reward accepts any
        record["answers"] = list(forms)
    return record


def load_math_file(path: str | os.PathLike, *, allow_empty: bool = False) -> list[dict[str, str]]:
    """Read math problems from a local ``.parquet``/``.jsonl``/``.json`` file as [{"problem", "answer"}, ...].

    Errors name the file and the row; a file without rows is an error unless ``allow_empty``."""
    records = []
    for i, row in enumerate(read_table(path, allow_empty=allow_empty)):
        try:
            records.append(normalize_math_row(row))
        except (ValueError, TypeError) as e:
            raise ValueError(f"{path}: row {i}: {e}") from e
    return records


# name -> (hub repo, config or None, split). Training sets (App. B.1.2) and the benchmarks of Table 2.
MATH_HUB: dict[str, tuple[str, str | None, str]] = {
    "deepscaler": ("agentica-org/DeepScaleR-Preview-Dataset", None, "train"),
    "orz": ("Tonic/OpenReasonerZero", None, "train"),  # a hub copy of ORZ's orz_math_57k_collected.json
    "math500": ("HuggingFaceH4/MATH-500", None, "test"),
    "minerva": ("math-ai/minervamath", None, "test"),
    "olympiadbench": ("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", "train"),
    "amc": ("AI-MO/aimo-validation-amc", None, "train"),  # AMC 12 2022-2023, 83 problems
    "aime24": ("HuggingFaceH4/aime_2024", None, "train"),
}


# The names Table 2 and Section 4.1 give the sets (DSR / ORZ for the training sets).
MATH_PAPER_NAMES: dict[str, str] = {
    "deepscaler": "DeepScaleR (DSR)",
    "orz": "Open-Reasoner-Zero (ORZ)",
    "math500": "MATH 500",
    "minerva": "Minerva",
    "olympiadbench": "Olympiad Bench",
    "amc": "AMC",
    "aime24": "AIME",
}


def math_source(name: str, size: int) -> dict[str, Any]:
    """Where a math set came from, for the run record: the paper's name and the hub repository, a local file, or
    generated arithmetic, which is stated as an offline substitute for the paper's sets."""
    if name == "generated":
        return {"name": "generated arithmetic", "source": "generated", "substitute": True,
                "note": "offline substitute for the paper's sets (no hub access)", "size": size}
    if name in MATH_HUB:
        repo, config, split = MATH_HUB[name]
        return {"name": MATH_PAPER_NAMES[name], "source": repo, "config": config, "split": split,
                "substitute": False, "size": size}
    return {"name": os.path.splitext(os.path.basename(str(name)))[0], "source": str(name), "substitute": False,
            "size": size}


def load_math_hub(name: str, *, split: str | None = None) -> list[dict[str, str]]:
    """A dataset of :data:`MATH_HUB` from the hub as [{"problem", "answer"}, ...] (needs a network).

    Offline, raises a RuntimeError that says so and points to :func:`load_math_file`.
    """
    if name not in MATH_HUB:
        raise ValueError(f"unknown math dataset {name!r}; choose one of {sorted(MATH_HUB)} or use load_math_file")
    repo, config, default_split = MATH_HUB[name]
    args = (config,) if config else ()
    ds = load_from_hub(repo, *args, split=split or default_split)
    return [normalize_math_row(dict(row)) for row in ds]


# --------------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------------


def evaluate_math(
    model: Any,
    tokenizer: Any,
    records: Sequence[dict[str, Any]],
    *,
    batch_size: int = 8,
    max_new_tokens: int = 1024,
    return_completions: bool = False,
) -> dict[str, Any]:
    """Greedy accuracy (Section 4.1: MATH-500, Minerva, OlympiadBench): {"accuracy", "n"}."""
    if not records:
        raise ValueError("evaluate at least one record")
    prompts = [math_prompt(r) for r in records]
    completions = greedy_generate(model, tokenizer, prompts, batch_size=batch_size, max_new_tokens=max_new_tokens)
    scores = [math_reward(c, r.get("answers") or r["answer"]) for c, r in zip(completions, records)]
    result: dict[str, Any] = {"accuracy": sum(scores) / len(scores), "n": len(scores)}
    if return_completions:
        result["completions"] = completions
    return result


def evaluate_math_sampled(
    model: Any,
    tokenizer: Any,
    records: Sequence[dict[str, Any]],
    *,
    k: int = 16,
    pass_ks: Iterable[int] | None = None,
    batch_size: int = 2,
    max_new_tokens: int = 1024,
    temperature: float = 0.6,
    top_p: float = 0.95,
    seed: int = 0,
    return_completions: bool = False,
) -> dict[str, Any]:
    """avg@k and pass@k from k samples per problem (Section 4.1: AMC and AIME, k = 16).

    Returns {"avg@k": ..., "pass@k": ..., "n": ..., "k": ...} plus pass@j for each j in ``pass_ks``.
    Sampling temperature/top-p are not given in the paper; 0.6/0.95 are the usual choice for avg@k.
    """
    if not records:
        raise ValueError("evaluate at least one record")
    prompts = [math_prompt(r) for r in records]
    samples = generate_completions(
        model,
        tokenizer,
        prompts,
        batch_size=batch_size,
        max_new_tokens=max_new_tokens,
        num_return_sequences=k,
        do_sample=True,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
    )
    correct = [
        [math_reward(c, r.get("answers") or r["answer"]) == 1.0 for c in row] for row, r in zip(samples, records)
    ]
    result: dict[str, Any] = {f"avg@{k}": mean_avg_at_k(correct), f"pass@{k}": mean_pass_at_k(correct, k)}
    for j in pass_ks or ():
        result[f"pass@{j}"] = mean_pass_at_k(correct, j)
    result.update(n=len(records), k=k)
    if return_completions:
        result["completions"] = samples
    return result
