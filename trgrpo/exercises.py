"""The exercises' side of the notebooks: the GRPO primer's helpers (notebook 00), the checks a check cell calls
(:class:`check`, :class:`derivation`, :func:`check_answers`, :func:`expect`) and the answer keys they compare with
(salted hashes: a wrong answer is named with a hint, never with the reference value)."""

from __future__ import annotations

import ast
import base64
import contextlib
import hashlib
import importlib
import inspect
import json
import linecache
import math
import random
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trgrpo import toy
from trgrpo.files import ROOT
from trgrpo.models import sft_step
from trgrpo.tasks import addition


def taught_policy(row: dict, *, seed: int = 0, offsets: Sequence[int] = (1,)) -> Any:
    """A fresh micro model taught ONE prompt in seconds, half of each batch the right sum and half the sums + each
    of ``offsets`` (split evenly), so that a sampled group holds right and wrong answers; ``(model, tokenizer)``."""
    import torch

    tok = toy.build_tokenizer()
    model = toy.build_model(tok, seed=seed)
    wrongs = [{**row, "target": addition.spaced(int(row["answer"]) + d)} for d in offsets]
    batch = toy._sft_batch(tok, [x for w in wrongs for x in (row, w)] * (8 // len(wrongs)))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    model.train()
    for _ in range(40):
        sft_step(model, opt, batch)
    model.eval()
    return model, tok


def first_mixed_group(model: Any, tok: Any, rows: Sequence[dict], group_size: int, *, seed: int = 0):
    """The first prompt of ``rows`` (shuffled by ``seed``) whose sampled group has both rewards 0 and 1, with the
    group; ``RuntimeError`` when none of the first 50 has (every advantage of Eq. 4 would be 0)."""
    order = list(rows)
    random.Random(seed).shuffle(order)
    for row in order[:50]:
        prompts = [row["prompt"]] * group_size
        completions = addition.generate(
            model, tok, prompts, max_new_tokens=addition.MAX_COMPLETION["addition"], do_sample=True, seed=seed
        )
        rewards = addition.correctness_reward(prompts, completions, [row["answer"]] * group_size)
        if 0 < sum(rewards) < group_size:
            return row, completions
    raise RuntimeError("no prompt among the first 50 gave a group with mixed rewards")


def completion_logps(model: Any, tok: Any, prompt: str, completions: Sequence[str]):
    """Per-token log pi(o_t | q, o_<t) of each completion and its end token, by teacher forcing:
    ``(logps, mask, token_ids)``, each (G, T), right-padded."""
    import torch

    ids, att, labels = toy._sft_batch(tok, [{"prompt": prompt, "target": c} for c in completions])
    n = len(tok(prompt)["input_ids"])
    logits = model(input_ids=ids, attention_mask=att).logits[:, n - 1 : -1]
    targets, mask = labels[:, n:], (labels[:, n:] != -100).float()
    logps = torch.log_softmax(logits.float(), -1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return logps * mask, mask, ids[:, n:]


EXPECTS_RE = re.compile(r"^#\s*expects:\s*(.+?)\s*$")


def expected_names(check_source: str) -> list[str]:
    """The names a check cell's first line ``# expects: a, b`` declares ([] if none)."""
    m = EXPECTS_RE.match(check_source.strip().split("\n", 1)[0])
    return [n.strip() for n in m.group(1).split(",") if n.strip()] if m else []


class CheckFailed(AssertionError):
    """A check's verdict on a wrong answer: what is wrong and its hints (a line each), never the answer itself."""

    def __init__(self, what: str, *hints: str) -> None:
        super().__init__(what + "".join(f"\nHint: {h}" for h in hints if h))

    def _render_traceback_(self) -> list[str]:  # IPython shows this instead of a traceback through the library
        return [f"CheckFailed: {self}"]


def expect(ok: Any, what: str, hint: str = "") -> None:
    """Raise :class:`CheckFailed` with ``what`` (what is wrong) and ``hint`` unless ``ok``."""
    if not ok:
        raise CheckFailed(what, hint)


HAND_RTOL = 1e-3  # a hand answer counts as right within 0.1 % (relative), as the exercises' statements say
_KEYS: dict[str, dict] = {}  # the answer keys a student copy's check cell registers (use_keys)


def _salted(exercise: str, name: str, text: str) -> str:
    return hashlib.sha256(f"trgrpo/{exercise}/{name}/{text}".encode()).hexdigest()[:16]


def _sig(value: float, digits: int) -> str:
    return f"{0.0 if abs(value) < 1e-12 else value:.{digits - 1}e}"


def _number(value: Any) -> float | None:
    if isinstance(value, (bool, str, bytes, dict, list, tuple)) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def answer_key(exercise: str, name: str, value: Any, hand: bool) -> str:
    """An answer as a salted hash the student copy can hold without showing it: a number rounded to 4 significant
    digits (a hand answer) or 7, a list in any order, anything else by :func:`fingerprint`."""
    number = _number(value)
    if number is None and isinstance(value, (list, tuple)):
        value = sorted(value)
    text = _sig(number, 4 if hand else 7) if number is not None else fingerprint(value)
    return _salted(exercise, name, text)


def _matches(exercise: str, name: str, got: Any, key: str, want_number: bool, hand: bool) -> bool:
    """``got`` hashes to ``key``: a number within HAND_RTOL (hand) or about 1e-7 of the reference (the probes, spaced
    one rounding step apart, meet every rounding cell the tolerance interval touches)."""
    if not want_number:
        try:
            return answer_key(exercise, name, got, hand) == key
        except TypeError:
            return False
    number = _number(got)
    if number is None or math.isnan(number):
        return False
    digits, probes = (4, 10) if hand else (7, 1)
    step = 10.0**-digits
    return any(
        _salted(exercise, name, _sig(number * (1 + k * step), digits)) == key for k in range(-probes, probes + 1)
    )


def seal(value: Any) -> str:
    """``value`` (JSON) as a base64 text: a student copy's check cell holds its hints and answer keys so, so that a
    hint shows only after a wrong answer (hidden from the eye, not secret: grading checks on the instructor's side)."""
    return base64.b64encode(json.dumps(value, sort_keys=True).encode()).decode()


def unseal(text: str) -> Any:
    """The value :func:`seal` wrote."""
    return json.loads(base64.b64decode(text))


def use_keys(exercise: str, keys: dict | str) -> None:
    """Register the answer keys of ``exercise`` (a student copy's check cell, written by ``make student``; sealed)."""
    _KEYS[exercise] = unseal(keys) if isinstance(keys, str) else keys


def check_answers(exercise: str, *, data: dict | None = None, **answers: Any) -> None:
    """Compare the named ``answers`` of ``exercise`` with its reference values by their keys (:func:`answer_key`): those
    a student copy registered (:func:`use_keys`), else those of the instructor's recipes (course/answers.py, computed
    by the library from ``data``); hand answers within :data:`HAND_RTOL`. Print a tick, or raise one
    :class:`CheckFailed` that names every wrong answer (only those) with its hint, never a reference value."""
    keys = _KEYS.get(exercise)
    if keys is None:
        try:
            spec = load_answers()[exercise]
        except (FileNotFoundError, KeyError):
            raise CheckFailed(
                f"Exercise {exercise}: no answer key here (make student writes the workbook with one)"
            ) from None
        keys = keys_for(exercise, [data or {}], {exercise: spec})
    hand, hint_of = set(keys["hand"]), keys["hints"]
    fp = fingerprint(data) if data else ""
    if fp not in keys["data"]:
        raise CheckFailed(
            f"Exercise {exercise}: your data is not the workbook's; restore the parameters cell's values (and "
            "SMOKE) to check this exercise"
        )
    want = keys["data"][fp]
    missing = sorted(set(want) - set(answers))
    if missing:
        raise CheckFailed(f"Exercise {exercise}: pass {', '.join(missing)} to the check as well")
    not_numbers = [n for n in want if n in keys["numbers"] and _number(answers[n]) is None]
    if not_numbers:
        got = "; ".join(f"`{n}` is {_described(answers[n])}" for n in not_numbers)
        raise CheckFailed(f"Exercise {exercise}: expected a number (one value) for each of these: {got}")
    wrong = [n for n, k in want.items() if not _matches(exercise, n, answers[n], k, n in keys["numbers"], n in hand)]
    if not wrong:
        print(f"Exercise {exercise} ✓")
        return
    names = ", ".join(f"`{n}`" for n in wrong)
    what = f"{names} {'is' if len(wrong) == 1 else 'are'} not right yet"
    if hand & set(wrong):
        what += f" (a hand answer counts within {HAND_RTOL:.1%} of the reference, e.g. 4 significant digits)"
    hints = [f"{n}: {hint_of[n]}" for n in wrong if n in hint_of] + [hint_of["hint"]]
    raise CheckFailed(f"Exercise {exercise}: {what}", *hints)


def _described(value: Any) -> str:
    """What a value is, in words: 'a tensor of 7 values', 'a list of 3 values', 'a str'."""
    size = getattr(value, "numel", None) or getattr(value, "size", None)
    if callable(size):
        size = size()
    if size is None and isinstance(value, (list, tuple, dict)):
        size = len(value)
    kind = {"Tensor": "tensor", "ndarray": "array"}.get(type(value).__name__, type(value).__name__)
    return f"a {kind} of {size} values" if isinstance(size, int) else f"a {kind}"


class _CellGuard:
    """A ``with`` block in a notebook cell (:class:`check`, :class:`derivation`) that knows the cell: its file name,
    source and globals."""

    def __enter__(self) -> _CellGuard:
        caller = inspect.currentframe().f_back
        # IPython keeps each cell's source in linecache under the cell's file name
        self.filename, self.frame_globals = caller.f_code.co_filename, caller.f_globals
        self.source = "".join(linecache.getlines(self.filename))
        return self


class check(_CellGuard):  # noqa: N801  (used as ``with exercises.check("2.1", hint=...):``, like a statement)
    """Wrap a check cell: a failing ``assert`` or an error while checking becomes a :class:`CheckFailed` naming the
    exercise, the answers the failing line tests (the cell's ``# expects:`` names) and the hints, never the expected
    values. ``hints`` maps an expected name to a hint shown when a line testing that name fails."""

    def __init__(self, exercise: str, hint: str = "", **hints: str) -> None:
        self.exercise, self.hint, self.hints = exercise, hint, hints

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if exc_type is None or not issubclass(exc_type, Exception):
            return False
        line, expected = "", expected_names(self.source)
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self.filename:
                line = linecache.getline(self.filename, tb.tb_lineno)
            tb = tb.tb_next
        named = [n for n in expected if re.search(rf"\b{re.escape(n)}\b", line.split("#")[0])]
        subject = ", ".join(f"`{n}`" for n in named or expected) or "your answer"
        if isinstance(exc, CheckFailed) and str(exc).startswith(f"Exercise {self.exercise}:"):
            return False  # a check inside (check_answers, a nested check) already said it all
        if isinstance(exc, CheckFailed):
            what = str(exc)
        elif isinstance(exc, NameError):
            what = (
                f"`{exc.name}` is not defined: run the cells above (kernel restarted?), your solution's cell last"
                f"{' (it defines ' + ', '.join(expected) + ')' if expected else ''}"
            )
        elif isinstance(exc, AssertionError):
            detail = _sentence(exc.args[0]) if exc.args else ""
            if named or not detail:
                what = f"{subject} {'is' if len(named) == 1 else 'are'} not right yet{': ' + detail if detail else ''}"
            else:  # the line tests something derived from the answers: its message says what, without blaming all
                what = f"not right yet: {detail}"
        else:
            what = (
                f"checking {subject} raised {exc_type.__name__} ({exc}): is it of the type and shape the "
                "statement asks for?"
            )
        hints = [h for h in [*(self.hints.get(n) for n in named), self.hint] if h and h not in what]
        if isinstance(exc, NameError):
            hints = []  # nothing was answered yet: no hint before a wrong answer
        raise CheckFailed(f"Exercise {self.exercise}: {what}", *hints) from None


def _sentence(payload: Any) -> str:
    """An ``assert``'s message as words: a text as it is, any other payload (a tuple of the failing case's values)
    as 'it fails for a, b, c'."""
    if isinstance(payload, str):
        return payload.strip()
    values = payload if isinstance(payload, tuple) else (payload,)
    return "it fails for " + ", ".join(f"{v:.6g}" if isinstance(v, float) else repr(v) for v in values)


class derivation(_CellGuard):  # noqa: N801  (a student copy's check of a derivation: ``with exercises.derivation("eq11_weight"):``)
    """Wrap the check of a derivation the student writes: a failure becomes one :class:`CheckFailed` that names the
    function, the case that failed (the values of the cell's loop variables then, e.g. ``mode='divide'``), the
    library's one-line verdict and a hint, without a traceback through the library."""

    def __init__(self, *names: str) -> None:
        self.names = names

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if exc_type is None or not issubclass(exc_type, Exception) or isinstance(exc, CheckFailed):
            return False
        names = " / ".join(f"`{n}`" for n in self.names)
        if isinstance(exc, NotImplementedError):
            raise CheckFailed(f"{names}: not written yet; write it in the cell above, run it, then this check")
        loops = []
        with contextlib.suppress(SyntaxError):
            loops = [
                t.id
                for n in ast.walk(ast.parse(self.source))
                if isinstance(n, ast.For)
                for t in ast.walk(n.target)
                if isinstance(t, ast.Name)
            ]
        case = ", ".join(f"{v}={self.frame_globals[v]!r}" for v in dict.fromkeys(loops) if v in self.frame_globals)
        lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
        detail = "; ".join(lines[:2]) or exc_type.__name__
        hint = (
            f"run the case {case} by hand and compare with the library's function the check names; the equation "
            "above says which reading or placement this case is"
            if case
            else "compare yours with the equation above, term by term"
        )
        raise CheckFailed(f"{names} is not right yet{' for ' + case if case else ''} ({detail})", hint) from None


ANSWERS_PATH = ROOT / "course" / "answers.py"  # the instructor's reference recipes: course data, not library code


def load_answers(path: Path | str = ANSWERS_PATH) -> dict[str, dict]:
    """The instructor's ``ANSWERS`` (course/answers.py): per exercise the library computation of the reference values
    from the notebook's data, the hand answers' names, a hint per answer and one for the exercise."""
    spec = importlib.util.spec_from_file_location("trgrpo_course_answers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ANSWERS


def keys_for(exercise: str, datasets: Sequence[dict], answers: dict[str, dict] | None = None) -> dict:
    """The answer keys of ``exercise`` for each of ``datasets`` (the notebook's data in its modes): what a student
    copy's check cell registers with :func:`use_keys`."""
    spec = (answers or load_answers())[exercise]
    hand = set(spec.get("hand", ()))
    out: dict = {"hand": sorted(hand), "hints": {k: v for k, v in spec.items() if isinstance(v, str)}, "data": {}}
    for data in datasets:
        want = spec["reference"](data)
        out["numbers"] = sorted(n for n, v in want.items() if _number(v) is not None)
        out["data"][fingerprint(data) if data else ""] = {
            n: answer_key(exercise, n, v, n in hand) for n, v in want.items()
        }
    return out


def fingerprint(value: Any) -> str:
    """A short hash of ``value`` (floats to 6 digits; lists, tuples, dicts, str, int, bool, None), so that a check
    can compare an answer it must not print."""

    def canon(v: Any) -> Any:
        if isinstance(v, bool) or v is None or isinstance(v, str):
            return v
        if hasattr(v, "tolist"):  # a tensor or an array
            return canon(v.tolist())
        if isinstance(v, (int, float)):
            return round(float(v), 6)
        if isinstance(v, dict):
            return sorted((str(k), canon(x)) for k, x in v.items())
        if isinstance(v, (list, tuple)):
            return [canon(x) for x in v]
        raise TypeError(f"fingerprint cannot hash a {type(v).__name__}")

    return hashlib.sha256(json.dumps(canon(value)).encode()).hexdigest()[:12]
