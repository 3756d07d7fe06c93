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
import operator
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
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
# Time budget (SIGALRM with sub-second resolution, main thread only)
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


@contextlib.contextmanager
def time_budget(seconds: float | None) -> Iterator[None]:
    """Raise :class:`BudgetExceeded` in the block after ``seconds`` of wall-clock time (main thread only).

    A no-op for ``None``/``<= 0`` or outside the main thread. Once the budget is spent the exception is raised
    again every 10 ms until the block is left. Restores the previous SIGALRM handler and re-arms a timer that was
    already running, minus the time spent here.
    """
    if not seconds or seconds <= 0 or not _can_use_alarm():
        yield
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


# Parsed and compared once, without a budget, on first use: these load what sympy and math-verify import lazily
# (antlr4's LL1Analyzer, sympy.combinatorics for factoring, assumption wrappers, set expressions), so that no
# alarm has to wait for an import (the alarm handler never interrupts one, see time_budget).
_WARM_UP = (
    ("\\frac{1}{2}", "0.5"),
    ("x^2+7x+10", "(x+2)(x+5)"),
    ("\\left(3, \\frac{\\pi}{2}\\right)", "[1, 2)"),
    ("10\\%", "1.5e3"),
)


@functools.lru_cache(maxsize=1)
def _math_verify() -> Any:
    """Import math-verify once (sympy takes ~1 s), silence its "timeout disabled" warning (we pass ``None`` on
    purpose and apply our own budget), and run it on a few answers to load what it imports lazily."""
    import math_verify

    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).addFilter(_DropTimeoutDisabled())
    cfg = [math_verify.LatexExtractionConfig()]
    for pred, gold in _WARM_UP:
        with contextlib.suppress(Exception):
            parsed = [
                math_verify.parse(BOXED + x + "}", extraction_config=cfg, parsing_timeout=None) for x in (pred, gold)
            ]
            math_verify.verify(parsed[1], parsed[0], timeout_seconds=None)
    return math_verify


@functools.lru_cache(maxsize=4096)
def _parse_gold(answer: str) -> tuple[Any, ...]:
    """Parse the (trusted) reference: LaTeX and plain expressions, wrapped in \\boxed{} unless already boxed."""
    mv = _math_verify()
    text = answer if BOXED in answer else BOXED + answer + "}"
    cfg = [mv.LatexExtractionConfig(), mv.ExprExtractionConfig()]
    return tuple(mv.parse(text, extraction_config=cfg, parsing_timeout=None))


_SAFE_EXP = 10_000  # |exponent| allowed in a numeric power before it counts as a blow-up
_SAFE_DIGITS_TIMES_EXP = 100_000  # digits(base) * exponent bound for integer powers (result size in digits)
_SAFE_FUNC_ARG = 10_000  # numeric argument allowed in factorial-like functions
_GAMMA_LIKE = {"gamma", "loggamma", "polygamma", "uppergamma", "lowergamma", "beta", "zeta"}
_MAX_NODES = 5_000


def _is_combinatorial(node: Any) -> bool:
    """factorial, binomial, subfactorial, catalan, fibonacci, gamma, ...: huge values from moderate inputs."""
    if not getattr(node, "is_Function", False):
        return False
    cls = type(node)
    return cls.__module__.startswith("sympy.functions.combinatorial") or cls.__name__ in _GAMMA_LIKE


def _unit_base(base: Any) -> bool:
    return bool(base.is_Number and base in (0, 1, -1))


def _may_be_huge(expr: Any) -> bool:
    """A symbol-free expression whose value may be astronomically large: it holds a power with a numeric
    exponent of at least 2 (``9^{9}``, ``10^{8}``) or a factorial-like function."""
    import sympy

    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Pow) and node.exp.is_Number and abs(node.exp) >= 2 and not _unit_base(node.base):
            return True
        if _is_combinatorial(node):
            return True
    return False


def _is_blowup(expr: Any) -> bool:
    """True when sympy could spend long, uninterruptible C time on ``expr`` or the tree is implausibly large.

    Refused: numeric powers with |exponent| > 10^4 or an integer result of more than 10^5 digits
    (``10^{100000}``), numeric towers (``9^{9^{9}}``; also refuses the harmless ``2^{2^{3}}``), factorial-like
    functions of numbers above 10^4 or of towers (``100000!``, ``(10^{6})!``), more than 5000 nodes.
    """
    import sympy

    if not isinstance(expr, sympy.Basic):
        return False
    try:
        for count, node in enumerate(sympy.preorder_traversal(expr)):
            if count > _MAX_NODES:
                return True
            if isinstance(node, sympy.Pow):
                base, exp = node.args
                if _unit_base(base):
                    continue
                if exp.is_Number:
                    if abs(exp) > _SAFE_EXP:
                        return True
                    if base.is_Integer and exp.is_Integer:
                        if len(str(abs(base))) * abs(int(exp)) > _SAFE_DIGITS_TIMES_EXP:
                            return True
                elif not exp.free_symbols and _may_be_huge(exp):
                    return True
            elif _is_combinatorial(node):
                for arg in node.args:
                    if arg.free_symbols:
                        continue
                    if _may_be_huge(arg) or (arg.is_Number and abs(arg) > _SAFE_FUNC_ARG):
                        return True
    except Exception:  # a comparison with nan/zoo, ...: refuse rather than risk it
        return True
    return False


@functools.lru_cache(maxsize=4096)
def _equivalent(pred: str, gold: str) -> bool:
    """math-verify equivalence of a boxed prediction and the reference (cached: rollouts repeat answers).

    May raise BudgetExceeded (not cached then)."""
    mv = _math_verify()
    gold_parsed = list(_parse_gold(gold))
    if not gold_parsed:
        return False
    pred_parsed = mv.parse(BOXED + pred + "}", extraction_config=[mv.LatexExtractionConfig()], parsing_timeout=None)
    if not pred_parsed or any(_is_blowup(p) for p in pred_parsed):
        return False
    return bool(mv.verify(gold_parsed, pred_parsed, timeout_seconds=None))


def math_reward(completion: Any, answer: Any, *, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> float:
    """Binary math reward of App. B.1.2: 1.0 if the last boxed answer equals ``answer`` under math-verify.

    Never raises and always returns 0.0 or 1.0: non-strings, missing/unbalanced/over-long boxes, parse errors,
    blow-ups and running out of the ``timeout_s`` budget (main thread) all give 0.0.
    """
    try:
        if not isinstance(completion, str):
            return 0.0
        gold = str(answer).strip()
        pred = extract_boxed_answer(completion)
        if pred is None or not pred.strip() or not gold:
            return 0.0
        norm_pred = _normalize(pred)
        if norm_pred and norm_pred == _normalize(gold):
            return 1.0
        if nesting_depth(pred) > MAX_NESTING:
            return 0.0
        with time_budget(timeout_s):
            return 1.0 if _equivalent(pred, gold) else 0.0
    except BudgetExceeded:
        return 0.0
    except Exception:  # parse/verify failures of any kind (RecursionError and MemoryError included)
        logger.debug("math_reward failed", exc_info=True)
        return 0.0


def make_math_reward_func(*, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> Callable[..., list[float]]:
    """TRL reward function ``math_accuracy_reward(prompts, completions, completion_ids=None, answer=..., **kw)``.

    ``completions`` are strings or message lists; the dataset column ``answer`` arrives as a kwargs list.
    """

    def math_accuracy_reward(
        prompts: Any = None, completions: Sequence[Any] = (), completion_ids: Any = None, **kwargs: Any
    ) -> list[float]:
        """App. B.1.2: 1 if the last boxed answer matches the reference, else 0."""
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
    """A ``datasets.Dataset`` with ``prompt`` (plain text) and ``answer`` for TRL's ``GRPOTrainer``."""
    import datasets

    return datasets.Dataset.from_dict(
        {"prompt": [math_prompt(r) for r in records], "answer": [str(r["answer"]) for r in records]}
    )


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
    text = str(value).strip()
    return text or None


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
    answer = _answer_text(first_present(row, ("answer", "final_answer", "gold", "target")))
    if answer is None and isinstance(row.get("reward_model"), dict):
        answer = _answer_text(row["reward_model"].get("ground_truth"))
    if answer is None and isinstance(row.get("solution"), str):
        answer = extract_boxed_answer(row["solution"], max_chars=10_000) or None
    if problem is None or answer is None:
        raise ValueError(f"a math row needs a problem (problem/question/prompt) and an answer; got keys {sorted(row)}")
    return {"problem": problem, "answer": answer}


def load_math_file(path: str | os.PathLike) -> list[dict[str, str]]:
    """Read math problems from a local ``.parquet``/``.jsonl``/``.json`` file as [{"problem", "answer"}, ...]."""
    records = []
    for i, row in enumerate(read_table(path)):
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
    scores = [math_reward(c, r["answer"]) for c, r in zip(completions, records)]
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
    correct = [[math_reward(c, r["answer"]) == 1.0 for c in row] for row, r in zip(samples, records)]
    result: dict[str, Any] = {f"avg@{k}": mean_avg_at_k(correct), f"pass@{k}": mean_pass_at_k(correct, k)}
    for j in pass_ks or ():
        result[f"pass@{j}"] = mean_pass_at_k(correct, j)
    result.update(n=len(records), k=k)
    if return_completions:
        result["completions"] = samples
    return result
