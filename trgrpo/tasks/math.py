"""Math (Section 4.1, App. B.1.2, Table 2), the run task ``math``.

Data: generated arithmetic (:func:`generate_math`), a local file (:func:`load_math_file`) or a hub set of
:data:`MATH_HUB`. Reward (:func:`math_reward`): 1.0 if the last boxed answer equals the reference, else 0.0; it never
raises, and math-verify runs in worker processes, in parallel, each answer under a CPU-time budget
(:func:`trgrpo.tasks.math_verify.verify`).
Evaluation: greedy accuracy, or avg@k and pass@k from k samples (AMC, AIME).
"""

from __future__ import annotations

import ast
import math
import operator
import os
import re
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from trgrpo.tasks import Task, TaskOptions, register_task
from trgrpo.tasks.generation import generate_completions, greedy_generate, mean_avg_at_k, mean_pass_at_k
from trgrpo.tasks.math_verify import extract_boxed_answer, logger, start, verify
from trgrpo.tasks.rows import as_list, completion_text, first_present, load_from_hub, read_table

DEFAULT_TIMEOUT_S = 1.0  # CPU seconds of sympy's parse + verify per completion (its worker's own clock)
MAX_NESTING = 10  # deeper {[( nesting scores 0: latex2sympy's ANTLR parser is exponential in brace depth


# \left \right \displaystyle (not \leftarrow ...), thin spaces \! \, \; \: \<space>, dollar signs
_STRIP = re.compile(r"\\(?:left|right|displaystyle)(?![A-Za-z])|\\[!,;: ]|\$")


def nesting_depth(text: str) -> int:
    """Deepest nesting of ``{``, ``[`` and ``(`` (unmatched closers ignored)."""
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


def gold_forms(answer: Any) -> tuple[str, ...]:
    """The accepted forms of a reference answer: a string, a number or a list of them (Minerva)."""
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
        if not value.is_integer():  # a float32 cell as float32's shortest text, a float64 at 15 digits
            import numpy as np

            if math.isfinite(value) and float(np.float32(value)) == value:
                return str(np.float32(value))
            return format(value, ".15g")
        value = int(value)
    text = str(value).strip()
    return text or None


def _screen(completion: Any, answer: Any) -> float | tuple[str, tuple[str, ...]]:
    """1.0 or 0.0 where the text decides (no box, the same normalised text, too deep a nesting), else the boxed
    prediction and the reference forms for the verifier."""
    if not isinstance(completion, str):
        return 0.0
    golds = gold_forms(answer)
    pred = extract_boxed_answer(completion)
    if pred is None or not pred.strip() or not golds:
        return 0.0
    norm_pred = _normalize(pred)
    if norm_pred and any(norm_pred == _normalize(g) for g in golds):
        return 1.0
    return 0.0 if nesting_depth(pred) > MAX_NESTING else (pred, golds)


def math_rewards(
    completions: Sequence[Any], answers: Sequence[Any], *, timeout_s: float | None = DEFAULT_TIMEOUT_S
) -> list[float]:
    """App. B.1.2: per completion, 1.0 if its last boxed answer equals its ``answer`` (a string, number or list of
    accepted forms) under math-verify, else 0.0; the answers are verified in parallel. Never raises: bad input, parse
    errors, blow-ups and a spent ``timeout_s`` CPU budget all give 0.0."""
    screened: list[float | tuple[str, tuple[str, ...]]] = []
    for completion, answer in zip(completions, answers, strict=True):
        try:
            screened.append(_screen(completion, answer))
        except Exception:  # an answer cell of an odd type, ...
            logger.debug("math_reward failed", exc_info=True)
            screened.append(0.0)
    verdicts = iter(verify([s for s in screened if isinstance(s, tuple)], timeout_s))
    return [s if isinstance(s, float) else float(next(verdicts)) for s in screened]


def math_reward(completion: Any, answer: Any, *, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> float:
    """:func:`math_rewards` of one completion."""
    return math_rewards([completion], [answer], timeout_s=timeout_s)[0]


def make_math_reward_func(*, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> Callable[..., list[float]]:
    """TRL reward function ``math_accuracy_reward``; reads the dataset column ``answers`` (every accepted form) or
    ``answer``. The verifier's worker pool is started and warmed here."""
    start()

    def math_accuracy_reward(
        prompts: Any = None, completions: Sequence[Any] = (), completion_ids: Any = None, **kwargs: Any
    ) -> list[float]:
        """App. B.1.2: 1 if the last boxed answer matches the reference, else 0."""
        answers = first_present(kwargs, ("answers", "answer"))
        if answers is None:
            raise KeyError("the math reward needs the dataset column 'answer' (see math_dataset)")
        if len(answers) != len(completions):
            raise ValueError("completions and answer must have the same length")
        return math_rewards([completion_text(c) for c in completions], answers, timeout_s=timeout_s)

    return math_accuracy_reward


MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


# Small numbers (a CPU-sized model learns something); allow_parentheses selects reasoning-gym's builder that respects
# operator precedence. Answers are recomputed exactly anyway (exact_arithmetic).
_ARITHMETIC = dict(
    min_terms=2,
    max_terms=3,
    min_digits=1,
    max_digits=2,
    operators=("+", "-", "*"),
    allow_parentheses=True,
    allow_negation=False,
)
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def exact_arithmetic(expression: str) -> Fraction:
    """Exact value of integer literals with + - * /, unary minus and parentheses, by an AST walk over Fractions
    (never ``eval``); anything else raises ValueError."""

    def walk(node: ast.AST) -> Fraction:
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
    return walk(ast.parse(expression.strip(), mode="eval").body)


def generate_math(n: int, seed: int = 0, **config: Any) -> list[dict[str, str]]:
    """``n`` distinct problems of reasoning-gym's ``basic_arithmetic`` (``config`` overrides its options) with exact
    integer answers (:func:`exact_arithmetic`; non-integer values skipped), deterministic by ``seed``."""
    import reasoning_gym

    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    ds = reasoning_gym.create_dataset("basic_arithmetic", size=4 * n + 16, seed=seed, **{**_ARITHMETIC, **config})
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
    raise ValueError(f"only {len(out)} distinct problems for these options; widen them or lower n")


def math_prompt(record: dict[str, Any]) -> str:
    """The prompt its data row carried (DeepScaleR's), as is; otherwise App. B.1.2's simple prompt: the problem, then
    :data:`MATH_INSTRUCTION` (no chat template)."""
    if record.get("prompt"):
        return str(record["prompt"])
    return f"{str(record['problem']).strip()}\n{MATH_INSTRUCTION}"


def math_dataset(records: Sequence[dict[str, Any]]) -> Any:
    """A ``datasets.Dataset`` with ``prompt`` and ``answer``, plus ``answers`` (every accepted form) when a record has
    more than one."""
    import datasets

    columns: dict[str, list[Any]] = {
        "prompt": [math_prompt(r) for r in records],
        "answer": [str(r["answer"]) for r in records],
    }
    forms = [list(gold_forms(r.get("answers") or r["answer"])) for r in records]
    if any(len(f) > 1 for f in forms):
        columns["answers"] = forms
    return datasets.Dataset.from_dict(columns)


def _user_text(value: Any) -> str | None:
    """A prompt's text: a string, or the content of its last user message (``role: user`` or ``from: human``)."""
    if isinstance(value, str):
        return value or None
    try:
        users = [
            m for m in as_list(value) if isinstance(m, dict) and (m.get("role") == "user" or m.get("from") == "human")
        ]
    except TypeError:
        return None
    if not users:
        return None
    return str(users[-1].get("content", users[-1].get("value")) or "") or None


def normalize_math_row(row: Any) -> dict[str, str]:
    """One row of a math file as {"problem", "answer"} (plus ``prompt`` when the row carries its own, ``answers``
    when it accepts several forms): the schemas of MATH, DeepScaleR (verl), OlympiadBench, Minerva and ORZ pairs."""
    if isinstance(row, (list, tuple)) and len(row) == 2 and all(isinstance(m, dict) for m in row):  # ORZ
        row = {"problem": row[0].get("value"), "answer": row[1].get("ground_truth")}
    if not isinstance(row, dict):
        raise TypeError(f"a math row is a dict, got {type(row).__name__}")
    problem = (_user_text(first_present(row, ("problem", "question"))) or "").strip() or None
    prompt = None
    if problem is None:  # a row that carries its prompt (DeepScaleR's verl rows): the prompt as the row has it
        prompt = _user_text(row.get("prompt"))
        problem = (prompt or "").strip() or None
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
    """Math problems of a local ``.parquet``/``.jsonl``/``.json`` file (:func:`normalize_math_row`); errors name the
    file and the row."""
    records = []
    for i, row in enumerate(read_table(path, allow_empty=allow_empty)):
        try:
            records.append(normalize_math_row(row))
        except (ValueError, TypeError) as e:
            raise ValueError(f"{path}: row {i}: {e}") from e
    return records


# name -> (hub repo, config or None, split, the paper's name): the training sets (App. B.1.2) and Table 2's benchmarks.
MATH_HUB: dict[str, tuple[str, str | None, str, str]] = {
    "deepscaler": ("agentica-org/DeepScaleR-Preview-Dataset", None, "train", "DeepScaleR (DSR)"),
    "orz": ("Tonic/OpenReasonerZero", None, "train", "Open-Reasoner-Zero (ORZ)"),  # orz_math_57k_collected.json
    "math500": ("HuggingFaceH4/MATH-500", None, "test", "MATH 500"),
    "minerva": ("math-ai/minervamath", None, "test", "Minerva"),
    "olympiadbench": ("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", "train", "Olympiad Bench"),
    "amc": ("AI-MO/aimo-validation-amc", None, "train", "AMC"),  # AMC 12 2022-2023, 83 problems
    "aime24": ("HuggingFaceH4/aime_2024", None, "train", "AIME"),
}


def math_source(name: str, size: int) -> dict[str, Any]:
    """Where a math set came from, for the run record: the paper's name and hub repository, a local file, or generated
    arithmetic (marked an offline substitute)."""
    if name == "generated":
        return {
            "name": "generated arithmetic",
            "source": "generated",
            "substitute": True,
            "note": "offline substitute for the paper's sets (no hub access)",
            "size": size,
        }
    if name in MATH_HUB:
        repo, config, split, paper_name = MATH_HUB[name]
        return {
            "name": paper_name,
            "source": repo,
            "config": config,
            "split": split,
            "substitute": False,
            "size": size,
        }
    return {
        "name": Path(name).stem,
        "source": str(name),
        "substitute": False,
        "size": size,
    }


def load_math_hub(name: str) -> list[dict[str, str]]:
    """A set of :data:`MATH_HUB` from the hub (needs a network; offline a RuntimeError says so)."""
    if name not in MATH_HUB:
        raise ValueError(f"unknown math dataset {name!r}; choose one of {sorted(MATH_HUB)} or use load_math_file")
    repo, config, split, _ = MATH_HUB[name]
    hint = "Download it where the hub is reachable and read the file with load_math_file, or use generate_math."
    return [normalize_math_row(row) for row in load_from_hub(repo, config, split, hint)]


def evaluate_math(
    model: Any,
    tokenizer: Any,
    records: Sequence[dict[str, Any]],
    *,
    batch_size: int = 8,
    max_new_tokens: int = 1024,
) -> dict[str, Any]:
    """Greedy accuracy (Section 4.1: MATH-500, Minerva, OlympiadBench): {"accuracy", "n"}."""
    if not records:
        raise ValueError("evaluate at least one record")
    prompts = [math_prompt(r) for r in records]
    completions = greedy_generate(model, tokenizer, prompts, batch_size=batch_size, max_new_tokens=max_new_tokens)
    scores = math_rewards(completions, [r.get("answers") or r["answer"] for r in records])
    return {"accuracy": sum(scores) / len(scores), "n": len(scores)}


def evaluate_math_sampled(
    model: Any,
    tokenizer: Any,
    records: Sequence[dict[str, Any]],
    *,
    k: int = 16,
    batch_size: int = 2,
    max_new_tokens: int = 1024,
    temperature: float = 0.6,
    top_p: float = 0.95,
    seed: int = 0,
) -> dict[str, Any]:
    """{"avg@k", "pass@k", "n", "k"} from k samples per problem (Section 4.1: AMC and AIME, k = 16). The paper gives
    no temperature/top-p; 0.6/0.95 are the usual choice."""
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
    answers = [r.get("answers") or r["answer"] for row, r in zip(samples, records) for _ in row]
    scores = iter(math_rewards([c for row in samples for c in row], answers))
    correct = [[next(scores) == 1.0 for _ in row] for row in samples]
    return {f"avg@{k}": mean_avg_at_k(correct), f"pass@{k}": mean_pass_at_k(correct, k), "n": len(records), "k": k}


# Section 4.1: sampled, not greedy, for the sets whose name (hub name or file stem, any case) starts so
SAMPLED_MATH_SETS = ("amc", "aime")


def _load_source(source: str, n: int, seed: int) -> list[dict]:
    if source == "generated":
        return generate_math(n, seed=seed)
    if source in MATH_HUB:
        return load_math_hub(source)[:n]
    return load_math_file(source)[:n]


def _build(spec: Any, tokenizer):
    """Train on generated arithmetic offline, or a file / hub set (``train``: deepscaler, orz, a path)."""
    o = MathOptions(**spec.task_options)
    train = _load_source(o.train, spec.n_train, spec.seed + 1000)
    seen = {r["problem"] for r in train}
    evals = {}
    for name in o.eval_sets:
        evals[Path(name).stem] = [r for r in _load_source(name, spec.n_eval, 99_999) if r["problem"] not in seen]
    return math_dataset(train), evals


def _data_source(spec: Any, train_ds, evals) -> dict:
    """Each set under the name Table 2 gives it, with its source; generated arithmetic is marked a substitute."""
    o = MathOptions(**spec.task_options)
    return {
        "train": math_source(o.train, len(train_ds)),
        "eval": {Path(n).stem: math_source(n, len(evals.get(Path(n).stem, []))) for n in o.eval_sets},
    }


def _evaluate(model, tokenizer, evals, spec: Any) -> dict:
    """Table 2 layout: greedy accuracy per set; avg@k / pass@k for AMC and AIME; ``accuracy`` = mean of sets."""
    o = MathOptions(**spec.task_options)
    kw = {"max_new_tokens": spec.max_eval_tokens or spec.max_completion_length, **o.eval_batch()}
    out: dict[str, Any] = {"by_set": {}}
    for name, records in evals.items():
        if not records:
            continue
        if name.lower().startswith(SAMPLED_MATH_SETS):
            res = evaluate_math_sampled(model, tokenizer, records, k=o.sampled_k, seed=spec.seed, **kw)
            out["by_set"][name] = {key: v for key, v in res.items() if key.startswith(("avg@", "pass@"))}
        else:
            res = evaluate_math(model, tokenizer, records, **kw)
            out["by_set"][name] = {"accuracy": res["accuracy"]}
    scores = [next(iter(v.values())) for v in out["by_set"].values()]
    out["accuracy"] = sum(scores) / len(scores) if scores else None
    return out


class MathOptions(TaskOptions):
    """The math task's options: ``train`` and ``eval_sets`` name ``generated``, a hub set or a file."""

    train: str = "generated"
    eval_sets: list[str] | tuple[str, ...] = ("generated",)
    sampled_k: int = 16


def _check_data(spec: Any) -> None:
    """Read the spec's local math files as :func:`_build` will (generated and hub sets are not read here)."""
    opts = MathOptions(**spec.task_options)
    for key, names in (("train", [opts.train]), ("eval_sets", opts.eval_sets)):
        for name in names:
            if name != "generated" and name not in MATH_HUB:
                try:
                    load_math_file(name)
                except (OSError, ValueError, TypeError) as e:
                    raise ValueError(f"task_options.{key}: {e}") from None


def _hub_data(spec: Any) -> list[tuple[str, str, str | None]]:
    """The :data:`MATH_HUB` sets a spec trains or evaluates on: (option, repo, config)."""
    opts = MathOptions(**spec.task_options)
    named = [("task_options.train", opts.train)] + [("task_options.eval_sets", name) for name in opts.eval_sets]
    return [(key, *MATH_HUB[name][:2]) for key, name in named if name in MATH_HUB]


register_task(
    "math",
    Task(
        _build,
        lambda spec: [make_math_reward_func()],
        _evaluate,
        _data_source,
        options=MathOptions,
        check_data=_check_data,
        hub_data=_hub_data,
    ),
)
