"""Teaching material: the GRPO primer's helpers (notebook 00), the exercises' checks and the student copy
(``make student``), and the notebooks' laptop times (``python -m trgrpo.course times``)."""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import csv
import hashlib
import importlib.util
import inspect
import io
import json
import linecache
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import nbformat

from trgrpo import experiment, toy
from trgrpo.batch import OFFLINE_ENV, environment, run_notebook
from trgrpo.experiment import ROOT, git_commit, git_dirty, machine_info, write_json
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


# Notebook cells are tagged: the exercise statements (``### Exercise N.k · kind · title``), their solutions and
# checks (in notebooks/solutions/), the long explanations a student copy leaves out, and derivations to write.
NOTEBOOKS = ROOT / "notebooks"
TIMES_PATH = experiment.RESULTS_DIR / "course" / "notebook_times.json"
EXERCISE, SOLUTION, CHECK, EXPLANATION = "exercise", "solution", "check", "explanation"
DERIVATION = "derivation"
CONCLUSION = "conclusion"
ANSWER = "answer"  # a written answer's cell in a workbook, collected by `make grade`
ANSWER_TEXT = "**Your answer** (the written part of this exercise; collected with the grades):"
WRITTEN_RE = re.compile(r"\b(explain|why|in (one|two|a) sentences?|describe|what does .* show)\b", re.I)
KINDS = ("predict", "explore", "derive", "implement")  # graded from "change a parameter" to "write a variant"
HEADING_RE = re.compile(rf"^###\s+Exercise\s+(\d+)\.(\d+)\s*·\s*({'|'.join(KINDS)})\s*·\s*(.+?)\s*$", re.M)
EXPECTS_RE = re.compile(r"^#\s*expects:\s*(.+?)\s*$")
CONCLUSION_TEXT = (
    "**Your conclusion.** The explanation that stood here is left out of the student copy. Write, in two or three "
    "sentences, what the cells above show and what they do not; then compare with the full text in `notebooks/`."
)


def tags(cell: Any) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def read(path: Path | str) -> Any:
    return nbformat.read(str(path), as_version=4)


def main_notebooks() -> list[Path]:
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def solutions_path(main: Path | str) -> Path:
    """``notebooks/NN_stem.ipynb`` -> ``notebooks/solutions/NN_stem_solutions.ipynb``."""
    main = Path(main)
    return main.parent / "solutions" / f"{main.stem}_solutions.ipynb"


def solution_notebooks() -> list[Path]:
    return sorted((NOTEBOOKS / "solutions").glob("[0-9][0-9]_*_solutions.ipynb"))


def exercise_heading(cell: Any) -> dict | None:
    """An exercise statement's id ``"N.k"``, kind and title; None for any other cell."""
    if EXERCISE not in tags(cell) or cell.cell_type != "markdown":
        return None
    m = HEADING_RE.search(cell.source)
    return {"id": f"{m.group(1)}.{m.group(2)}", "kind": m.group(3), "title": m.group(4)} if m else None


def _by_exercise(cells: Sequence[Any]) -> Iterator[tuple[str | None, Any]]:
    """Each cell with the id of the exercise it belongs to: the last statement at or above it (None before any)."""
    current = None
    for c in cells:
        current = (exercise_heading(c) or {}).get("id", current)
        yield current, c


def exercises(nb: Any) -> list[dict]:
    """The exercise statements of a notebook, in order: id, kind, title and the cell's source."""
    return [{**h, "source": c.source} for c in nb.cells if (h := exercise_heading(c))]


def expected_names(check_source: str) -> list[str]:
    """The names a check cell's first line ``# expects: a, b`` declares ([] if none)."""
    m = EXPECTS_RE.match(check_source.strip().split("\n", 1)[0])
    return [n.strip() for n in m.group(1).split(",") if n.strip()] if m else []


def student_notebook(nb: Any) -> Any:
    """A main notebook for students: without ``solution`` cells, each run of ``explanation`` cells replaced by one
    "write your conclusion" cell, each ``derivation`` cell that defines a function by :func:`derivation_stub`, and
    the check under it wrapped in :class:`derivation` (a failure names the case, no library traceback)."""
    out = copy.deepcopy(nb)
    cells: list[Any] = []
    derived: list[str] = []
    for c in out.cells:
        t = set(tags(c))
        if EXPLANATION in t:
            if not (cells and CONCLUSION in tags(cells[-1])):
                cells.append(nbformat.v4.new_markdown_cell(CONCLUSION_TEXT, metadata={"tags": [CONCLUSION]}))
        elif SOLUTION not in t:
            if derived and c.cell_type == "code" and '"""' not in c.source and "'''" not in c.source:
                head = "from trgrpo import course\n\n" if "from trgrpo import course" not in c.source else ""
                body = "\n".join(("    " + ln) if ln.strip() else ln for ln in c.source.splitlines())
                c.source = f"{head}with course.derivation({', '.join(map(repr, derived))}):\n{body}"
            derived = []
            if DERIVATION in t and c.cell_type == "code" and _functions(c.source):
                derived = [f.name for f in _functions(c.source)]
                c.source = derivation_stub(c.source)
            cells.append(c)
    out.cells = cells
    return out


def _functions(source: str) -> list[ast.FunctionDef]:
    return [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)]


def derivation_stub(source: str) -> str:
    """A ``derivation`` cell for students: its leading comments, then each top-level function's signature with a
    body that raises ``NotImplementedError`` (the check below fails until the student writes it)."""
    lines, funcs = source.splitlines(), _functions(source)
    if not funcs:
        raise ValueError("a derivation cell must define at least one top-level function (what the student writes)")
    out = [ln for ln in lines[: funcs[0].lineno - 1 - len(funcs[0].decorator_list)] if ln.startswith("#")]
    for f in funcs:
        header = lines[f.lineno - 1 - len(f.decorator_list) : f.body[0].lineno - 1]
        todo = f"write {f.name} (the equation above), then run the check below"
        out += [*header, f"    raise NotImplementedError({todo!r})"]
    return "\n".join(out)


def exercise_workbook(nb: Any) -> Any:
    """A solutions notebook as a workbook: each run of ``solution`` cells becomes one cell that raises until the
    student replaces it. ``ValueError`` when a solution precedes every statement or is not followed by a check."""
    out = copy.deepcopy(nb)
    cells, src = [], list(_by_exercise(out.cells))
    solution = [SOLUTION in tags(c) for _, c in src]
    for i, (current, c) in enumerate(src):
        if not solution[i]:
            cells.append(c)
            if exercise_heading(c) and WRITTEN_RE.search(c.source):
                nbgrader = _nbgrader(f"written-{current}", grade=True, solution=True, locked=False, points=0)
                meta = {"tags": [ANSWER], "nbgrader": nbgrader}
                cells.append(nbformat.v4.new_markdown_cell(ANSWER_TEXT + "\n\n", metadata=meta))
            elif CHECK in tags(c) and current is not None:
                nbgrader = _nbgrader(f"check-{current}-{i}", grade=True, solution=False, locked=True, points=1)
                c.metadata["nbgrader"] = nbgrader
            continue
        if i and solution[i - 1]:
            continue  # one stub for each run of solution cells
        j = next((k for k in range(i, len(src)) if not solution[k]), len(src))
        if current is None:
            raise ValueError(f"solution cell {i} comes before any exercise statement")
        if j >= len(src) or CHECK not in tags(src[j][1]):
            raise ValueError(f"the solution of Exercise {current} (cells {i}-{j - 1}) is not followed by a check cell")
        names = expected_names(src[j][1].source)
        expects = f" The check below expects: {', '.join(names)}." if names else ""
        stub = (
            f"# Exercise {current}: your solution here.{expects}\n"
            f'raise NotImplementedError("Exercise {current}: replace this cell with your solution, '
            f'then run the check below")'
        )
        nbgrader = _nbgrader(f"answer-{current}-{i}", grade=False, solution=True, locked=False)
        cells.append(nbformat.v4.new_code_cell(stub, metadata={"tags": ["stub"], "nbgrader": nbgrader}))
    out.cells = cells
    if cells and cells[0].cell_type == "markdown":
        title = cells[0].source.splitlines()[0].replace("Solutions", "Exercises", 1)
        cells[0].source = (
            f"{title}\n\nYour workbook. Replace each cell that raises `NotImplementedError` with your code, then run "
            "the check under it: it says what is wrong, with a hint, until your answer is right. "
            "Terms: [glossary](../../docs/glossary.md)."
        )
    return out


def _nbgrader(grade_id: str, **flags: bool | int) -> dict:
    """nbgrader's metadata of a workbook cell (its schema version 3)."""
    return {**flags, "grade_id": grade_id, "schema_version": 3}


def _answer_checks(source: str) -> list[tuple[str, str | None]]:
    """The ``course.check_answers('N.k', data=EXPR, ...)`` calls of a cell: each exercise id and EXPR's source."""
    calls = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "check_answers" and node.args:
            data = next((k.value for k in node.keywords if k.arg == "data"), None)
            calls.append((node.args[0].value, ast.get_source_segment(source, data) if data is not None else None))
    return calls


def _setup_namespaces(nb: Any) -> list[dict]:
    """The namespaces of a notebook's code cells before its first exercise statement, run in full and in smoke
    mode (the data a check of it is given)."""
    setup_cells = [c.source for exercise, c in _by_exercise(nb.cells) if exercise is None and c.cell_type == "code"]
    spaces = []
    for smoke in ("0", "1"):
        ns: dict = {}
        with environment(TRGRPO_SMOKE=smoke, TRGRPO_HEADLESS="1"), contextlib.redirect_stdout(io.StringIO()):
            for src in setup_cells:
                exec(compile(src, "<setup>", "exec"), ns)
        spaces.append(ns)
    return spaces


def with_answer_keys(workbook: Any, answers: dict[str, dict] | None = None) -> Any:
    """A workbook whose ``check_answers`` cells first register their exercise's answer keys (salted hashes of the
    reference values, for the data of the notebook's full and smoke modes: :func:`keys_for`), so that the student's
    copy checks without the instructor's course/answers.py."""
    out, answers, spaces = copy.deepcopy(workbook), answers or load_answers(), None
    for c in out.cells:
        if CHECK not in tags(c) or c.cell_type != "code" or "check_answers" not in c.source:
            continue
        lines = []
        for exercise, data_src in _answer_checks(c.source):
            if data_src is not None and spaces is None:
                spaces = _setup_namespaces(workbook)
            datasets = [eval(data_src, ns) for ns in spaces] if data_src is not None else [{}]  # noqa: S307
            keys = json.dumps(keys_for(exercise, datasets, answers), sort_keys=True)
            lines.append(f"course.use_keys({exercise!r}, {keys})  # the answers as salted hashes (make student)")
        first, rest = c.source.split("\n", 1) if EXPECTS_RE.match(c.source.split("\n", 1)[0]) else ("", c.source)
        c.source = "\n".join([x for x in (first, *lines) if x] + [rest])
    return out


LINK_RE = re.compile(r"(\]\()([^)\s#]+)(#[^)\s]*)?\)")
SOLUTIONS_LINE_RE = re.compile(r"^Solutions \(executed in `make test`\):.*\n?", re.M)
HANDOUT_DOCS = ("README.md", "docs/glossary.md", "docs/syllabus.md", "docs/design.md")  # copied into student/docs/


def handout_path(repo_path: str, solutions: bool = False) -> str | None:
    """Where a file of the repository sits in the student copy (None: not in it): notebooks/NN_x.ipynb -> NN_x.ipynb,
    notebooks/solutions/NN_x_solutions.ipynb -> exercises/NN_x_exercises.ipynb (the instructor's copy, ``solutions``:
    solutions/NN_x_solutions.ipynb), README.md and docs/*.md -> docs/."""
    parts = Path(repo_path).parts
    if repo_path in HANDOUT_DOCS:
        return f"docs/{parts[-1]}"
    if parts[:2] == ("notebooks", "solutions") and len(parts) == 3:
        workbook = parts[2].replace("_solutions.ipynb", "_exercises.ipynb")
        return f"solutions/{parts[2]}" if solutions else f"exercises/{workbook}"
    return parts[1] if parts[0] == "notebooks" and len(parts) == 2 else None


def relink(nb: Any, repo_path: str, solutions: bool = False) -> Any:
    """``nb``, the notebook at ``repo_path`` of the repository, with its markdown links retargeted for its place in the
    student copy (:func:`handout_path`), and without the lines that link the solutions."""
    source_dir, dest_dir = os.path.dirname(repo_path), os.path.dirname(handout_path(repo_path, solutions))

    def target(m: re.Match) -> str:
        link = m.group(2)
        if "://" in link or link.startswith("mailto:"):
            return m.group(0)
        new = handout_path(os.path.normpath(os.path.join(source_dir, link)), solutions)
        if new is None:
            return m.group(0)
        return f"{m.group(1)}{os.path.relpath(new, dest_dir or '.')}{m.group(3) or ''})"

    for c in nb.cells:
        if c.cell_type == "markdown":
            c.source = LINK_RE.sub(target, SOLUTIONS_LINE_RE.sub("", c.source))
        elif c.cell_type == "code":
            # no stored output (the checked cells' outputs show values an exercise asks for): the student runs it
            c.outputs, c.execution_count = [], None
    return nb


HANDOUT_MANIFEST = ".handout.json"  # what make student wrote last: file -> sha256 (a changed file is the student's)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_student_copy(out: Path | str = ROOT / "student") -> tuple[list[Path], list[Path]]:
    """``make student``: write the student copy into ``out``: ``(written, kept)``. A file the student changed since
    the last ``make student`` (its hash differs from the manifest's, or no manifest names it) is kept: the fresh copy
    goes beside it as ``NAME.new.ipynb``, listed in ``kept``."""
    out = Path(out)
    if out.resolve() in (NOTEBOOKS.resolve(), (NOTEBOOKS / "solutions").resolve(), ROOT.resolve()):
        raise ValueError(f"out must be a folder of its own, not {out}")
    manifest_path = out / HANDOUT_MANIFEST
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    answers = load_answers()
    books = [(p, student_notebook(read(p))) for p in main_notebooks()]
    books += [(p, with_answer_keys(exercise_workbook(read(p)), answers)) for p in solution_notebooks()]
    written, kept = [], []
    for path, nb in books:
        repo_path = path.relative_to(ROOT).as_posix()
        rel = handout_path(repo_path)
        dest = out / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        changed = dest.exists() and manifest.get(rel) != _sha(dest)
        if changed:
            kept.append(dest)
            dest = dest.with_suffix(".new.ipynb")
        nbformat.write(relink(nb, repo_path), str(dest))
        written.append(dest)
        if not changed:
            manifest[rel] = _sha(dest)
    (out / "README.md").write_text((ROOT / "course" / "student_README.md").read_text())
    (out / "docs").mkdir(exist_ok=True)
    for doc in HANDOUT_DOCS:
        shutil.copy2(ROOT / doc, out / handout_path(doc))
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return written, kept


def write_instructor_copy(out: Path | str = ROOT / "instructor") -> list[Path]:
    """``make instructor``: the student copy and, in ``solutions/``, the solutions notebooks (their checks compare
    with course/answers.py, so run them in this checkout); the notebooks written."""
    out = Path(out)
    written = write_student_copy(out)[0]
    (out / "solutions").mkdir(exist_ok=True)
    for path in solution_notebooks():
        repo_path = path.relative_to(ROOT).as_posix()
        written.append(out / handout_path(repo_path, solutions=True))
        nbformat.write(relink(read(path), repo_path, solutions=True), str(written[-1]))
    return written


def promote_records(root: Path = ROOT, allow_dirty: bool = False) -> list[Path]:
    """``make records``: copy each main notebook's full-mode headline of ``runs/notebooks/`` (where a notebook writes
    it: :attr:`trgrpo.notebook.Notebook.headline_path`) into the committed ``results/notebooks/``, and the full-mode
    figures of ``runs/figures/`` into ``figures/``; the files copied. ``ValueError`` (nothing copied) when a headline
    was made on an uncommitted tree or has no provenance, unless ``allow_dirty``."""
    runs = root / "runs"
    stems = [p.stem for p in (root / "notebooks").glob("[0-9][0-9]_*.ipynb")]
    heads = sorted(runs / "notebooks" / f"{s}.json" for s in stems if (runs / "notebooks" / f"{s}.json").is_file())
    dirty = [h.name for h in heads if json.loads(h.read_text()).get("provenance", {}).get("git_dirty") is not False]
    if dirty and not allow_dirty:
        raise ValueError(f"made on an uncommitted tree (or without provenance): {', '.join(dirty)}; commit and rerun")
    figs = sorted(f for f in (runs / "figures").glob("*") if f.is_file() and "smoke" not in f.name)
    pairs = [(h, root / "results" / "notebooks") for h in heads] + [(f, root / "figures") for f in figs]
    for _, dest in pairs:
        dest.mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copy2(src, dest / src.name)) for src, dest in pairs]


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

ANSWERS_PATH = ROOT / "course" / "answers.py"  # the instructor's reference recipes: course data, not library code
_KEYS: dict[str, dict] = {}  # the answer keys a student copy's check cell registers (use_keys)


def load_answers(path: Path | str = ANSWERS_PATH) -> dict[str, dict]:
    """The instructor's ``ANSWERS`` (course/answers.py): per exercise the library computation of the reference values
    from the notebook's data, the hand answers' names, a hint per answer and one for the exercise."""
    spec = importlib.util.spec_from_file_location("trgrpo_course_answers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ANSWERS


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


def use_keys(exercise: str, keys: dict) -> None:
    """Register the answer keys of ``exercise`` (a student copy's check cell, written by ``make student``)."""
    _KEYS[exercise] = keys


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


def parameters_source(path: Path | str) -> dict[str, str]:
    """The defaults (source text) of a notebook's papermill parameters: the settings a time of it was measured with."""
    import papermill as pm

    return {name: p["default"] for name, p in pm.inspect_notebook(str(path)).items()}


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


class _CellGuard:
    """A ``with`` block in a notebook cell (:class:`check`, :class:`derivation`) that knows the cell: its file name,
    source and globals."""

    def __enter__(self) -> _CellGuard:
        caller = inspect.currentframe().f_back
        # IPython keeps each cell's source in linecache under the cell's file name
        self.filename, self.frame_globals = caller.f_code.co_filename, caller.f_globals
        self.source = "".join(linecache.getlines(self.filename))
        return self


class check(_CellGuard):  # noqa: N801  (used as ``with course.check("2.1", hint=...):``, like a statement)
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
        if isinstance(exc, CheckFailed):
            what = str(exc)
        elif isinstance(exc, NameError):
            what = f"{exc}: run your solution cell above first (it defines {', '.join(expected) or 'the answer'})"
        elif isinstance(exc, AssertionError):
            detail = f" ({str(exc).strip()})" if str(exc).strip() else ""
            what = f"{subject} {'is' if len(named) == 1 else 'are'} not right yet{detail}"
        else:
            what = (
                f"checking {subject} raised {exc_type.__name__}: {exc}. Is it of the type and shape the "
                "statement asks for?"
            )
        hints = [h for h in [*(self.hints.get(n) for n in named), self.hint] if h and h not in what]
        raise CheckFailed(f"Exercise {self.exercise}: {what}", *hints) from None


class derivation(_CellGuard):  # noqa: N801  (a student copy's check of a derivation: ``with course.derivation("eq11_weight"):``)
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


def grade_workbook(path: Path, timeout: int = 600) -> dict:
    """Execute a submitted workbook headless (every cell, an error does not stop the run; at most ``timeout``
    seconds) and judge each exercise: its grades ``{id: "✓ got/max" or "✗ got/max", "points", "max",
    "written ID": text, "error"}``; a check cell is worth its ``nbgrader.points`` (1 if not given) when it runs
    without error."""
    nb = read(path)
    for c in nb.cells:
        if c.cell_type == "code":
            c.metadata.setdefault("tags", []).append("raises-exception")  # nbclient runs on past a failing check
    cmd = [sys.executable, "-m", "papermill", "--no-progress-bar", "-k", "python3", "--cwd", str(Path(path).parent)]
    error = ""
    with tempfile.TemporaryDirectory(prefix="trgrpo-grade-", ignore_cleanup_errors=True) as work:
        given, out = Path(work) / "in.ipynb", Path(work) / "out.ipynb"
        nbformat.write(nb, str(given))
        try:
            done = subprocess.run([*cmd, str(given), str(out)], capture_output=True, text=True, timeout=timeout)
            if not out.is_file():
                error = "did not run: " + (done.stderr.strip().splitlines() or ["?"])[-1]
        except subprocess.TimeoutExpired:
            error = f"stopped after {timeout} s"
        ran = read(out) if out.is_file() else nb
    scores: dict[str, list[float]] = {}
    written = {}
    for exercise, c in _by_exercise(ran.cells):
        if exercise is not None and CHECK in tags(c):
            points = float(c.metadata.get("nbgrader", {}).get("points", 1))
            ok = c.get("execution_count") is not None and not any(
                o.output_type == "error" for o in c.get("outputs", [])
            )
            got, total = scores.get(exercise, [0.0, 0.0])
            scores[exercise] = [got + points * ok, total + points]
        elif exercise is not None and ANSWER in tags(c):
            written[f"written {exercise}"] = c.source.replace(ANSWER_TEXT, "").strip()
    grades = {k: f"{'✓' if got == total else '✗'} {got:g}/{total:g}" for k, (got, total) in scores.items()}
    total_got, total_max = sum(g for g, _ in scores.values()), sum(t for _, t in scores.values())
    return {**grades, "points": total_got, "max": total_max, **written, "error": error}


def grade_folder(folder: Path | str, timeout: int = 600) -> list[dict]:
    """``make grade SUBMISSIONS=folder``: each ``*.ipynb`` under ``folder`` (the student: its file stem, or its
    first folder under ``folder``), graded by :func:`grade_workbook`: one row per student and workbook."""
    folder, rows = Path(folder), []
    for path in sorted(folder.rglob("*.ipynb")):
        rel = path.relative_to(folder)
        student = rel.parts[0] if len(rel.parts) > 1 else path.stem
        rows.append({"student": student, "workbook": path.stem, **grade_workbook(path, timeout)})
    return rows


def _cli(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trgrpo.course", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, what in (("student", "write the student copy"), ("instructor", "the student copy and the solutions")):
        sub.add_parser(name, help=what).add_argument("--out", default=str(ROOT / name))
    g = sub.add_parser("grade", help="grade a folder of submitted workbooks into a table and a CSV")
    g.add_argument("folder")
    g.add_argument("--timeout", type=int, default=600, help="seconds per notebook")
    g.add_argument("--csv", default=None, help="default: FOLDER/grades.csv")
    r = sub.add_parser("records", help="promote the notebooks' last full-mode headlines and figures from runs/")
    r.add_argument("--allow-dirty", action="store_true", help="also headlines made on an uncommitted tree")
    t = sub.add_parser(
        "times", help="time every notebook and its solutions as a laptop runs them (offline, 05-07 smoke)"
    )
    t.add_argument("--allow-dirty", action="store_true", help="time an uncommitted tree (the record says so)")
    args = ap.parse_args(argv)
    if args.cmd == "student":
        written, kept = write_student_copy(args.out)
        print(f"wrote {len(written)} notebooks into {args.out}")
        for k in kept:
            print(f"kept your changed {k}; the fresh copy is {k.with_suffix('.new.ipynb')}")
        return 0
    if args.cmd == "instructor":
        print(f"wrote {len(write_instructor_copy(args.out))} notebooks into {args.out}")
        return 0
    if args.cmd == "grade":
        from trgrpo.tables import markdown_table

        if not Path(args.folder).is_dir():
            print(f"grade: {args.folder} is not a folder")
            return 2
        rows = grade_folder(args.folder, args.timeout)
        columns = list(dict.fromkeys(k for r in rows for k in r))
        out = Path(args.csv or Path(args.folder) / "grades.csv")
        with out.open("w", newline="") as f:
            writer = csv.DictWriter(f, columns)
            writer.writeheader()
            writer.writerows(rows)
        shown = [c for c in columns if not c.startswith("written ")]
        print(markdown_table(rows, shown) + f"\n\nwrote {out}")
        return 0
    if args.cmd == "records":
        try:
            copied = promote_records(allow_dirty=args.allow_dirty)
        except ValueError as e:
            print(f"records: {e}")
            return 2
        print("\n".join(f"updated {p.relative_to(ROOT)}" for p in copied) or "records: nothing in runs/ to promote")
        return 0
    dirty = git_dirty()  # before the notebooks run
    if dirty and not args.allow_dirty:
        print("the tree has uncommitted changes: commit first, so the times name the code they measured")
        return 2
    out_dir, rows = Path(tempfile.mkdtemp(prefix="trgrpo-times-")), []
    for path in [p for m in main_notebooks() for p in (m, solutions_path(m)) if p.exists()]:
        smoke = path.name.startswith(("05_", "06_", "07_")) and "_solutions" not in path.name
        with environment(**OFFLINE_ENV):
            done = run_notebook(path, out_dir, smoke=smoke, timeout=3600)
        mode = "smoke" if smoke else "laptop default"
        rows.append(dict(notebook=str(path.relative_to(ROOT)), mode=mode, wall_s=done["seconds"], ok=done["ok"]))
        rows[-1]["parameters"] = fingerprint(parameters_source(path))
        rows[-1]["error"] = done["error"] or None
        print(f"{path.name}: {done['seconds']:.0f} s ({mode}){'' if done['ok'] else ' FAILED ' + done['error']}")
    record = {
        "measured_at": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": machine_info(),
        "git_commit": git_commit(),
        "dirty": dirty,
        "rows": sorted(rows, key=lambda r: r["notebook"]),
    }
    write_json(TIMES_PATH, record)
    print(f"wrote {TIMES_PATH}; `make docs` renders it into README.md and docs/syllabus.md")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(_cli())
