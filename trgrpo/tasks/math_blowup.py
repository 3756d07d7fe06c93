"""The blow-up guard of the math reward (paper App. B.1.2): sizes judged from the unevaluated parse.

Numbers that would blow up in C-level arithmetic (``9^{9^{9}}``, ``100000!``) cannot be interrupted by the time
budget (:mod:`trgrpo.tasks.math_budget`): :func:`_is_blowup` refuses them after parsing with
``sympy.evaluate(False)``, before sympy computes anything, and :func:`_too_large_matrix` refuses large matrices
before latex2sympy builds them.
"""

from __future__ import annotations

import math
from typing import Any

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

