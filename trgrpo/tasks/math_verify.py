"""The verifier of the math reward (paper App. B.1.2): is a model's boxed answer equal to the reference?

* :func:`extract_boxed_answer`: the last ``\\boxed{...}`` after the last ``</think>``, brace-matched, by a bounded
  scan (a 1 MB completion costs about a millisecond).
* :func:`analyze_gold`: the reference parsed once and checked against a case- and variable-keeping reading.
* :func:`_equivalent`: math-verify's verdict with guards where its yes is wrong (negated tuples, equations compared
  by one side, tiny numbers rounded equal), after a blow-up guard judged on the unevaluated parse (huge powers,
  factorials, sums).
* :func:`verify`: :func:`_equivalent` in a pool of worker processes (pebble, fork), in parallel, each answer
  under a CPU-time budget of its worker: past it the parse is interrupted (SIGPROF), and a long C call that cannot be
  interrupted ends the worker (RLIMIT_CPU), which the pool replaces; either way the answer scores 0.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import os
import re
from collections.abc import Iterable, Sequence
from typing import Any

MAX_ANSWER_CHARS = 1000  # a longer boxed answer scores 0 (real answers are far shorter)
BOXED = "\\boxed{"
logger = logging.getLogger(f"{__package__}.math")  # the math task's logger, one name for its modules
THINK_END = "</think>"


def extract_boxed_answer(text: str, *, max_chars: int = MAX_ANSWER_CHARS) -> str | None:
    """Brace-matched content of the last ``\\boxed{...}`` after the last ``</think>``; None when there is none, it is
    unbalanced or longer than ``max_chars``. Scans at most ``max_chars + 1`` characters after two ``rfind``."""
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


_MAX_DIGITS = 100_000  # no (sub)expression may have a value of more decimal digits (10^{100000}, 2^{2^{16}})
_MAX_COUNT = 10_000  # factorial-like arguments, terms of a sum or product
_MAX_MATRIX_AMPERSANDS = 24  # a matrix larger than 5x5 (latex2sympy computes determinants while parsing)
_GAMMA_LIKE = {"gamma", "loggamma", "polygamma", "uppergamma", "lowergamma", "beta", "zeta"}
_MAX_NODES = 5_000
_LOG10_2 = math.log10(2)


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
    from the unevaluated tree; raises OverflowError when a part is out of bounds."""
    import sympy

    if depth > 200:
        raise OverflowError("too deep")
    if getattr(node, "is_Integer", False):
        return max(1.0, abs(int(node)).bit_length() * _LOG10_2)
    if getattr(node, "is_Rational", False):
        return max(1.0, max(abs(node.p).bit_length(), node.q.bit_length()) * _LOG10_2)
    if getattr(node, "is_Float", False):
        _sign, _man, exp, bc = node._mpf_
        return 1.0 + abs(exp + bc) * _LOG10_2
    if isinstance(node, sympy.MatrixBase):
        if node.rows * node.cols > (_MAX_MATRIX_AMPERSANDS + 6):
            raise OverflowError("matrix")
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
            raise OverflowError("factorial-like of a large number")
        for a in args:
            _digits(a, depth + 1)
        size = max(n, 2.0) * math.log10(max(n, 2.0)) + 1.0
    elif isinstance(node, (sympy.Sum, sympy.Product)):
        count = 1.0
        for lim in node.limits:
            if len(lim) == 3:
                count *= _magnitude(lim[1], depth) + _magnitude(lim[2], depth) + 1.0
        if count > _MAX_COUNT:
            raise OverflowError("sum or product of many terms")
        inner = _digits(node.function, depth + 1)
        size = inner * count if isinstance(node, sympy.Product) else inner + math.log10(count)
    elif isinstance(node, sympy.Mul):
        size = sum(_digits(a, depth + 1) for a in args)
    else:
        size = max(_digits(a, depth + 1) for a in args) + 1.0
    if size > _MAX_DIGITS:
        raise OverflowError("too many digits")
    return size


def _is_blowup(expr: Any) -> bool:
    """True when evaluating the unevaluated parse ``expr`` could spend long, uninterruptible C time: a value of more
    than 10^5 digits (``10^{999999999-1}``, ``2^{2^{2^{2^{2}}}}``), a factorial-like of a number above 10^4, a sum or
    product of more than 10^4 terms, a matrix of more than 30 cells, a tree of more than 5000 nodes."""
    import sympy

    if not isinstance(expr, (sympy.Basic, sympy.MatrixBase)):
        return False
    try:
        if isinstance(expr, sympy.Basic):
            for count, _node in enumerate(sympy.preorder_traversal(expr)):
                if count > _MAX_NODES:
                    return True
        _digits(expr)
    except Exception:  # OverflowError, a comparison with nan/zoo, RecursionError, ...: refuse rather than risk it
        return True
    return False


@functools.lru_cache(maxsize=1)
def _math_verify() -> Any:
    """Import math-verify once and silence its "timeout disabled" warning (our own budget applies)."""
    import math_verify
    import math_verify.parser  # noqa: F401  (its parse cache is cleared after unevaluated parses)

    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).addFilter(lambda record: "Timeout is disabled" not in record.getMessage())
    return math_verify


_SCI_NUMBER = re.compile(r"\s*([-+]?(?:\d+\.?\d*|\.\d+))\s*[eE]\s*([-+]?\d+)\s*")
_TEXT_BLOCK = re.compile(r"\\(?:text|textrm|textbf|mathrm|mbox|operatorname)\s*\{[^{}]*\}")
_COMMAND = re.compile(r"\\[A-Za-z]+")


def _sci_to_latex(text: str) -> str:
    """``4.4e7`` -> ``4.4\\times 10^{7}`` for a whole answer in scientific notation (math-verify reads 4.4 * e * 7)."""
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
    """latex2sympy with the case of symbols kept (math-verify's ``N=n`` is the always-true ``n=n``); with ``units``
    math-verify's unit removal runs, without only ``\\text{}`` blocks are dropped. Raises when it does not parse."""
    from latex2sympy2_extended.latex2sympy2 import ConversionConfig, latex2sympy
    from latex2sympy2_extended.math_normalization import normalize_latex
    from math_verify import LatexExtractionConfig
    from math_verify.grader import should_treat_as_complex
    from sympy.core.parameters import evaluate as sympy_evaluate

    if not units:
        latex = _TEXT_BLOCK.sub(" ", latex)
    # math-verify's normalisation of LaTeX answers (LatexExtractionConfig's default), its unit removal as asked
    normalization = dataclasses.replace(LatexExtractionConfig().normalization_config, units=units)
    text = normalize_latex(latex, normalization)
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


@dataclasses.dataclass(frozen=True)
class GoldAnswer:
    """A reference answer read once; ``mode``: ``"mv"`` (math-verify's reading), ``"strict"`` (the case- and
    variable-keeping one, where math-verify's loses something) or ``"string"`` (neither parses); ``note`` says why."""

    mv: tuple[Any, ...]
    strict: Any
    units: bool
    mode: str
    note: str | None


@functools.lru_cache(maxsize=8192)
def analyze_gold(answer: str) -> GoldAnswer:
    """Parse a (trusted) reference answer and check math-verify's reading against the strict one; a suspicious
    reading is logged once."""
    mv = _math_verify()
    latex = str(answer).strip()
    if latex.startswith("$") and latex.endswith("$"):
        latex = latex.strip("$").strip()
    inner = _sci_to_latex(extract_boxed_answer(latex, max_chars=10_000) or latex)
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
    mv_expr = _first_expr(mv_forms)
    bare = _bare_letters(inner)
    strict, units = None, True
    with contextlib.suppress(Exception):
        strict = _strict_parse(inner, units=True)
    lost = bare - _letters(strict)  # all of them when it does not parse (None has no symbols)
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
    return GoldAnswer(mv_forms, strict, units, mode, note)


# Scored once before the workers are forked: they load what sympy and math-verify import lazily, so that no budget
# is spent on an import (nor one interrupted) and the first answer a worker scores is not cut short.
_WARM_UP = (
    ("\\frac{1}{2}", "0.5"),
    ("x^2+7x+10", "(x+2)(x+5)"),
    ("\\left(3, \\frac{\\pi}{2}\\right)", "[1, 2)"),
    ("10\\%", "1.5e3"),
    ("N=n+1", "N=n"),
    ("9.224 \\times 10^{-19}", "8.224 \\times 10^{-19}"),
)


def warm_up() -> None:
    """Run the whole scoring path on a few answers without a budget."""
    _math_verify()
    for pred, gold in _WARM_UP:
        with contextlib.suppress(Exception):
            _equivalent(pred, gold)


REL_TOL = 1e-5  # numbers below 0.1 in magnitude must agree to this relative tolerance (see _close_enough)


def _close_enough(gold: Any, pred: Any) -> bool:
    """Numbers below 0.1 in magnitude must also agree to :data:`REL_TOL` (math-verify rounds to 6 decimals, so
    9.224e-19 == 8.224e-19 to it); only ever turns a yes into a no."""
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


_NEGATED_GROUP = re.compile(r"\s*-\s*(?:\\left\s*)?(?:\(|\[|\\\{|\\lbrace)")


def _guards_hold(pred: str, gold: Any, parsed: Any) -> bool:
    """False where math-verify's yes is wrong: a negated tuple / set / interval (``-(a, b)``), or equations that differ
    beyond swapping sides (it compares right-hand sides only)."""
    import sympy

    if _NEGATED_GROUP.match(pred) and isinstance(parsed, (sympy.Tuple, sympy.Set, sympy.MatrixBase)):
        return False
    if isinstance(gold, sympy.Equality) and isinstance(parsed, sympy.Equality):
        g, p = gold.lhs - gold.rhs, parsed.lhs - parsed.rhs
        # a derivative of a plain symbol (dv/dt, v not a function of t) is 0 to sympy: keep each one as a symbol
        held = {d: sympy.Dummy() for d in g.atoms(sympy.Derivative) | p.atoms(sympy.Derivative)}
        g, p = g.xreplace(held), p.xreplace(held)
        return any(sympy.simplify(g - sign * p) == 0 for sign in (1, -1))
    return True


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
    """Equivalence of a boxed prediction and one reference form (cached in the worker)."""
    mv = _math_verify()
    ref = analyze_gold(gold)
    if ref.mode == "string":
        return False
    pred = _sci_to_latex(pred)
    if "matrix" in pred and pred.count("&") > _MAX_MATRIX_AMPERSANDS:
        return False  # latex2sympy builds matrices (and their determinants) while parsing: refuse large ones before
    if ref.mode == "mv":
        parsed = _parse_guarded_mv(pred)
        if parsed and mv.verify(list(ref.mv), parsed, timeout_seconds=None):
            gold, expr = _first_expr(ref.mv), _first_expr(parsed)
            return _guards_hold(pred, gold, expr) and _close_enough(gold, expr)
        expr = _first_expr(parsed)
        if ref.strict is None or not _bare_letters(pred) - _letters(expr):
            return False
        # the unit removal took a variable of the answer (``\frac{1}{m}t``): read it with its letters kept
    try:  # "strict": the same case- and variable-keeping reading on both sides
        units = ref.units if ref.mode == "strict" else False
        if _is_blowup(_strict_parse(pred, units=units, evaluate=False)):
            return False
        parsed_pred = _strict_parse(pred, units=units)
    except Exception:
        return False
    names, gold_names = _symbol_names(parsed_pred), _symbol_names(ref.strict)
    if ref.mode == "mv":  # math-verify's reading folds case: so does this comparison
        names, gold_names = {n.lower() for n in names}, {n.lower() for n in gold_names}
    if names != gold_names:  # T is not t (strict), c/sqrt(2) is not 1/sqrt(2)
        return False
    if not mv.verify([ref.strict], [parsed_pred], timeout_seconds=None):
        return False
    return _guards_hold(pred, ref.strict, parsed_pred) and _close_enough(ref.strict, parsed_pred)


# The worker pool

WORKERS = min(4, len(os.sched_getaffinity(0)))  # worker processes per process that scores (each torchrun rank its own)
HANG_S = 60.0  # wall-clock seconds after which a worker is ended whatever it does (the CPU budgets end it far sooner)
_pool: Any = None


class _Spent(BaseException):
    """The worker's CPU budget is spent (a BaseException: math-verify's and sympy's ``except Exception`` do not
    swallow it)."""


_armed = False  # a SIGPROF that arrives after the answer's verdict (the timer re-fires) raises nothing


def _spent(signum: int, frame: Any) -> None:
    if _armed:
        raise _Spent


def _worker_start() -> None:
    """A worker: the collector leaves alone what it inherited (a full collection would walk, and copy, the parent's
    heap inside some answer's budget), SIGPROF interrupts its parse, and no core file is written when RLIMIT_CPU
    ends it."""
    import gc
    import resource
    import signal

    gc.freeze()
    signal.signal(signal.SIGPROF, _spent)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _verify_in_worker(pred: str, golds: tuple[str, ...], cpu_seconds: float | None) -> bool:
    """In a worker: any reference form equivalent to ``pred`` within ``cpu_seconds`` of this process's CPU time
    (the references, trusted and cached, are read first, outside the budget). SIGPROF fires at the budget and again
    every 10 ms (C code that swallows an exception, antlr4's ``__eq__``, must not absorb it); a C call that never
    returns to Python meets RLIMIT_CPU one to two seconds later and SIGXCPU ends the worker."""
    global _armed
    import resource
    import signal
    import time

    for gold in golds:
        analyze_gold(gold)
    if not cpu_seconds or cpu_seconds <= 0:
        return any(_equivalent(pred, gold) for gold in golds)
    limits = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (math.ceil(time.process_time() + cpu_seconds) + 1, limits[1]))
    _armed = True
    signal.setitimer(signal.ITIMER_PROF, cpu_seconds, 0.01)
    try:
        return any(_equivalent(pred, gold) for gold in golds)
    except _Spent:
        return False
    finally:
        while _armed:  # a _Spent raised while disarming: disarm again
            with contextlib.suppress(_Spent):
                _armed = False
                signal.setitimer(signal.ITIMER_PROF, 0)
        resource.setrlimit(resource.RLIMIT_CPU, limits)


def _workers() -> Any:
    """The process's pool, started on first use and stopped at exit. Its workers are forked from this process after
    :func:`warm_up` ran here, so that a worker, also one that replaces an ended one, starts warm in milliseconds
    (forkserver or spawn would import the main module, a training script, in each); they touch no CUDA."""
    global _pool
    if _pool is None:
        import atexit
        import multiprocessing

        import pebble

        warm_up()
        context = multiprocessing.get_context("fork")
        _pool = pebble.ProcessPool(max_workers=WORKERS, initializer=_worker_start, context=context)
        atexit.register(_stop, _pool)
    return _pool


def _stop(pool: Any) -> None:
    pool.stop()
    pool.join()


def _forget_pool() -> None:  # a forked child has the parent's pool object, not its threads: it starts its own
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget_pool)


def start() -> None:
    """Warm up and start the worker pool (so that the first batch of a run does not wait for it)."""
    verify([("1", ("1",))] * WORKERS, None)


def verify(items: Sequence[tuple[str, tuple[str, ...]]], cpu_seconds: float | None) -> list[bool]:
    """For each (boxed prediction, reference forms): is the prediction equivalent to one of them? Verified in the
    worker pool, in parallel, each under ``cpu_seconds`` of its worker's CPU time (None: no budget; the blow-up
    guard still applies); an answer past its budget, whose worker was ended or that raised is not equivalent."""
    if not items:
        return []
    pool = _workers()
    futures = [pool.schedule(_verify_in_worker, args=(p, tuple(g), cpu_seconds), timeout=HANG_S) for p, g in items]
    out = []
    for future in futures:
        try:
            out.append(bool(future.result()))
        except Exception:  # _Spent, TimeoutError (HANG_S), pebble's ProcessExpired (RLIMIT_CPU, memory), ...
            logger.debug("math verification failed", exc_info=True)
            out.append(False)
    return out
