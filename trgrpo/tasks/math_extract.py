"""The model's answer: the last ``\\boxed{...}`` of a completion, found by a bounded scan (paper App. B.1.2).

Only the text after the last ``</think>`` counts when there is one; braces are matched. The scan is a couple of
C-level ``rfind`` plus at most :data:`MAX_ANSWER_CHARS` characters, so a 1 MB completion costs about a
millisecond (:func:`extract_boxed_answer`). :func:`nesting_depth` measures the bracket depth that latex2sympy's
parser would pay for exponentially; :func:`_normalize` is the light normalisation of the exact-match fast path.
"""

from __future__ import annotations

import re

MAX_ANSWER_CHARS = 1000  # a longer boxed answer scores 0 (real answers are far shorter)
MAX_NESTING = 10  # deeper {[( nesting scores 0: latex2sympy's ANTLR parser is exponential in brace depth
BOXED = "\\boxed{"
THINK_END = "</think>"

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

