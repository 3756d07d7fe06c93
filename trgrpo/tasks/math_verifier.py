"""Equivalence of a model's boxed answer and a reference under math-verify, guarded (paper App. B.1.2).

:func:`_equivalent` compares in the reading :func:`trgrpo.tasks.math_gold.analyze_gold` chose for the reference:
math-verify's (its LaTeX extractor only on the model's text, never the plain-expression one that hands text to
sympy's ``eval``), or the case- and variable-keeping one. Blow-ups are refused before sympy evaluates
(:mod:`trgrpo.tasks.math_blowup`); numbers below 0.1 must also agree to a relative tolerance (:data:`REL_TOL`).
Three readings of math-verify's are guarded here: it compares only the right-hand sides of two equations (so
``-\\frac{dv}{dt}=f`` passed for ``\\frac{dv}{dt}=f``), it drops the sign of a negated tuple (``-(\\frac14,
\\frac1{27})``), and its unit removal reads a trailing variable as a unit (``\\frac{1}{m}t``: ``t`` for tonnes).
:func:`warm_up` runs the whole path once without a budget, so that no budget waits for a lazy import.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
import threading
from collections.abc import Iterable
from typing import Any

from .math_blowup import _is_blowup, _too_large_matrix
from .math_budget import BudgetExceeded
from .math_extract import BOXED
from .math_gold import (
    _bare_letters,
    _letters,
    _math_verify,
    _sci_to_latex,
    _strict_parse,
    _symbol_names,
    analyze_gold,
)

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


_NEGATED_GROUP = re.compile(r"\s*-\s*(?:\\left\s*)?(?:\(|\[|\\\{|\\lbrace)")


def _guards_hold(pred: str, gold: Any, parsed: Any) -> bool:
    """False where math-verify's yes is wrong: a negated tuple / set / interval (it reads ``-(a, b)`` as ``{a, b}``),
    or two equations that are not the same up to swapping sides (it compares their right-hand sides only)."""
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
        if parsed and mv.verify(list(ref.mv), parsed, timeout_seconds=None):
            gold, expr = _first_expr(ref.mv), _first_expr(parsed)
            return _guards_hold(pred, gold, expr) and _close_enough(gold, expr)
        expr = _first_expr(parsed)
        if ref.strict is None or not _bare_letters(pred) - (_letters(expr) if expr is not None else set()):
            return False
        # the unit removal took a variable of the answer (``\frac{1}{m}t``): read it with its letters kept
    try:  # "strict": the same case- and variable-keeping reading on both sides
        units = ref.units if ref.mode == "strict" else False
        if _is_blowup(_strict_parse(pred, units=units, evaluate=False)):
            return False
        parsed_pred = _strict_parse(pred, units=units)
    except BudgetExceeded:
        raise
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

