"""The reference answer of a math item, parsed once and checked (paper App. B.1.2, Table 2's benchmarks).

:func:`analyze_gold` reads a trusted reference with math-verify (its plain-expression reader included) and
checks that reading against a case- and variable-keeping one (:func:`_strict_parse`): when math-verify loses a
variable, folds case that matters (``N=n``) or fails, answers are compared in the strict reading instead
(:class:`GoldAnswer`, ``mode``). :func:`gold_forms` lists every accepted form of a reference (Minerva rows have
two). Also here: the math-verify import (:func:`_math_verify`), shared with :mod:`trgrpo.tasks.math_verifier`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import re
from dataclasses import dataclass
from typing import Any

from .common import as_list, first_present
from .math_extract import BOXED, extract_boxed_answer

logger = logging.getLogger(f"{__package__}.math")  # the math task's logger, one name for its modules

# --------------------------------------------------------------------------------------------------
# math-verify, imported once
# --------------------------------------------------------------------------------------------------


class _DropTimeoutDisabled(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


@functools.lru_cache(maxsize=1)
def _math_verify() -> Any:
    """Import math-verify once (sympy takes ~1 s) and silence its "timeout disabled" warning (we pass ``None`` on
    purpose and apply our own budget)."""
    import math_verify
    import math_verify.parser  # noqa: F401  (its parse cache is cleared after unevaluated parses)

    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).addFilter(_DropTimeoutDisabled())
    return math_verify


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

