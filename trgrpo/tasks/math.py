"""Math (paper Section 4.1, App. B.1.2, Table 2), the run task ``math``: data, the simple prompt, the binary
boxed-answer reward and the evaluation.

* Data: generated arithmetic offline (:func:`generate_math`), a local file (:func:`load_math_file`) or a hub set of
  :data:`MATH_HUB` (the training sets DeepScaleR and ORZ, the benchmarks of Table 2).
* Reward (:func:`math_reward`): 1.0 if the last boxed answer equals the reference, else 0.0; no format term. It never
  raises: the answer is found by a bounded scan, an exact string match scores at once, and otherwise math-verify
  compares under a CPU-time budget of the calling thread (:mod:`trgrpo.tasks.math_verify`), so the verdict does not
  depend on the machine's load.
* Evaluation: greedy accuracy (MATH-500, Minerva, OlympiadBench), avg@k and pass@k from k samples (AMC, AIME).
"""

from __future__ import annotations

import ast
import operator
import os
from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trgrpo.tasks import Task, register_task
from trgrpo.tasks.common import (
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
from trgrpo.tasks.math_verify import (
    MAX_NESTING,
    BudgetExceeded,
    _answer_text,
    _equivalent,
    _normalize,
    analyze_gold,
    extract_boxed_answer,
    gold_forms,
    logger,
    nesting_depth,
    time_budget,
    warm_up,
)

if TYPE_CHECKING:  # pragma: no cover
    from trgrpo.experiment import RunSpec

DEFAULT_TIMEOUT_S = 1.0  # CPU seconds of sympy's parse + verify per completion (the calling thread's own clock)


def math_reward(completion: Any, answer: Any, *, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> float:
    """Binary math reward of App. B.1.2: 1.0 if the last boxed answer equals ``answer`` under math-verify.

    ``answer`` is a string, a number, or a list of accepted forms (any one scores). Never raises and always
    returns 0.0 or 1.0: non-strings, missing/unbalanced/over-long boxes, parse errors, blow-ups and running out
    of the ``timeout_s`` CPU budget (any thread) all give 0.0. math-verify is loaded and the reference parsed before
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


MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


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
        return {
            "name": "generated arithmetic",
            "source": "generated",
            "substitute": True,
            "note": "offline substitute for the paper's sets (no hub access)",
            "size": size,
        }
    if name in MATH_HUB:
        repo, config, split = MATH_HUB[name]
        return {
            "name": MATH_PAPER_NAMES[name],
            "source": repo,
            "config": config,
            "split": split,
            "substitute": False,
            "size": size,
        }
    return {
        "name": os.path.splitext(os.path.basename(str(name)))[0],
        "source": str(name),
        "substitute": False,
        "size": size,
    }


def load_math_hub(name: str, *, split: str | None = None) -> list[dict[str, str]]:
    """A dataset of :data:`MATH_HUB` from the hub as [{"problem", "answer"}, ...] (needs a network).

    Offline, raises a RuntimeError that says so and points to :func:`load_math_file`.
    """
    if name not in MATH_HUB:
        raise ValueError(f"unknown math dataset {name!r}; choose one of {sorted(MATH_HUB)} or use load_math_file")
    repo, config, default_split = MATH_HUB[name]
    hint = "Download it where the hub is reachable and read the file with load_math_file, or use generate_math."
    return [normalize_math_row(row) for row in load_from_hub(repo, config, split or default_split, hint)]


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


# Section 4.1: avg@16 (and pass@16 for AIME) instead of greedy, for the sets whose name (hub name or file stem, any
# case) starts so: "aime24", a local "aime.jsonl" or "AIME_2024.parquet", "amc".
SAMPLED_MATH_SETS = ("amc", "aime")


def _load_source(source: str, n: int, seed: int) -> list[dict]:
    if source == "generated":
        return generate_math(n, seed=seed)
    if source in MATH_HUB:
        return load_math_hub(source)[:n]
    return load_math_file(source)[:n]


def _build(spec: RunSpec, tokenizer):
    """Train on generated arithmetic offline, or a file / hub set (``train``: deepscaler, orz, a path)."""
    opts = spec.task_options
    train = _load_source(opts.get("train", "generated"), spec.n_train, spec.seed + 1000)
    seen = {r["problem"] for r in train}
    evals = {}
    for name in opts.get("eval_sets", ["generated"]):
        evals[Path(name).stem] = [r for r in _load_source(name, spec.n_eval, 99_999) if r["problem"] not in seen]
    return math_dataset(train), evals


def _data_source(spec: RunSpec, train_ds, evals) -> dict:
    """Each set under the name Table 2 gives it, with its source; generated arithmetic is marked a substitute."""
    opts = spec.task_options
    names = opts.get("eval_sets", ["generated"])
    return {
        "train": math_source(opts.get("train", "generated"), len(train_ds)),
        "eval": {Path(n).stem: math_source(n, len(evals.get(Path(n).stem, []))) for n in names},
    }


def _evaluate(model, tokenizer, evals, spec: RunSpec) -> dict:
    """Table 2 layout: greedy accuracy per set; avg@k / pass@k for AMC and AIME; ``accuracy`` = mean of sets."""
    opts = spec.task_options
    max_new = spec.max_eval_tokens or spec.max_completion_length
    out: dict[str, Any] = {"by_set": {}}
    for name, records in evals.items():
        if not records:
            continue
        if name.lower().startswith(SAMPLED_MATH_SETS):
            res = evaluate_math_sampled(
                model,
                tokenizer,
                records,
                k=int(opts.get("sampled_k", 16)),
                max_new_tokens=max_new,
                seed=spec.seed,
                batch_size=opts.get("eval_batch_size", 2),
            )
            out["by_set"][name] = {key: v for key, v in res.items() if key.startswith(("avg@", "pass@"))}
        else:
            res = evaluate_math(
                model, tokenizer, records, batch_size=opts.get("eval_batch_size", 8), max_new_tokens=max_new
            )
            out["by_set"][name] = {"accuracy": res["accuracy"]}
    scores = [next(iter(v.values())) for v in out["by_set"].values()]
    out["accuracy"] = sum(scores) / len(scores) if scores else None
    return out


register_task("math", Task(_build, lambda spec: [make_math_reward_func()], _evaluate, _data_source))
