"""Math data and prompt (paper Section 4.1, App. B.1.2): generated arithmetic, local files, the paper's hub sets.

Offline, :func:`generate_math` draws arithmetic from reasoning-gym (``basic_arithmetic``, ``chain_sum``) with
answers recomputed exactly (:func:`exact_arithmetic`, an AST walk over Fractions, never ``eval``). Files load with
:func:`load_math_file`, the training sets and Table 2's benchmarks with :func:`load_math_hub` (:data:`MATH_HUB`);
every loader returns ``{"problem", "answer"}`` (plus ``answers`` when several forms are accepted).
:func:`math_prompt` is the simple prompt without a chat template; :func:`math_dataset` the TRL dataset.
"""

from __future__ import annotations

import ast
import operator
import os
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from .common import as_list, first_present, load_from_hub, read_table
from .math_extract import extract_boxed_answer
from .math_gold import _answer_text, gold_forms

MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."

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
    """The prompt of a record: the one its data row carried (DeepScaleR's rows end with their own instruction, "Let's
    think step by step and output the final answer within \\boxed{}."), used as is; otherwise the simple prompt of
    App. B.1.2 (no chat template): the problem, then :data:`MATH_INSTRUCTION`."""
    if record.get("prompt"):
        return str(record["prompt"])
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


def _prompt_as_is(value: Any) -> str | None:
    """The text of a row's own prompt, unchanged: a string, or the content of its last user message."""
    if isinstance(value, str):
        return value or None
    try:
        users = [m for m in as_list(value) if isinstance(m, dict) and m.get("role") == "user"]
    except TypeError:
        return None
    if not users:
        return None
    return str(users[-1].get("content") or "") or None


def normalize_math_row(row: Any) -> dict[str, str]:
    """One row of a math file as {"problem", "answer"}.

    Reads ``problem``/``question``, else ``prompt`` (text or messages: kept as ``prompt``, used as is), and
    ``answer``/``final_answer``/``reward_model.ground_truth`` (a list: every form accepted, Minerva's rows); a
    ``solution`` with a ``\\boxed{}`` gives its last boxed answer. Also reads
    Open-Reasoner-Zero's pairs ``[{"from": "human", "value": q}, {"from": "assistant", "ground_truth": {...}}]``.
    """
    if isinstance(row, (list, tuple)) and len(row) == 2 and all(isinstance(m, dict) for m in row):  # ORZ
        row = {"problem": row[0].get("value"), "answer": row[1].get("ground_truth")}
    if not isinstance(row, dict):
        raise TypeError(f"a math row is a dict, got {type(row).__name__}")
    problem = _problem_text(first_present(row, ("problem", "question")))
    prompt = None
    if problem is None:  # a row that carries its prompt (DeepScaleR's verl rows): the prompt as the row has it
        problem = _problem_text(row.get("prompt"))
        prompt = _prompt_as_is(row.get("prompt"))
    raw_answer = first_present(row, ("answer", "final_answer", "gold", "target"))
    if raw_answer is None and isinstance(row.get("reward_model"), dict):
        raw_answer = row["reward_model"].get("ground_truth")
    answer = _answer_text(raw_answer)
    if answer is None and isinstance(row.get("solution"), str):
        answer = extract_boxed_answer(row["solution"], max_chars=10_000) or None
    if problem is None or answer is None:
        raise ValueError(f"a math row needs a problem (problem/question/prompt) and an answer; got keys {sorted(row)}")
    record = {"problem": problem, "answer": answer, **({"prompt": prompt} if prompt else {})}
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

