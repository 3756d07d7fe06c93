"""Authoring the course: the exercises of a notebook, the student copy (``trgrpo course student``: notebooks
without solutions, workbooks with answer keys, handouts with their links retargeted) and the instructor's copy."""

from __future__ import annotations

import ast
import contextlib
import copy
import hashlib
import io
import json
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import nbformat

from trgrpo import files
from trgrpo.exercises import EXPECTS_RE, expected_names, keys_for, load_answers, seal
from trgrpo.files import ROOT
from trgrpo.runs.batch import environment

# Notebook cells are tagged: the exercise statements (``### Exercise N.k · kind · title``), their solutions and
# checks (in notebooks/solutions/), the long explanations a student copy leaves out, and derivations to write.
NOTEBOOKS = ROOT / "notebooks"
TIMES_PATH = files.RESULTS_DIR / "course" / "notebook_times.json"
EXERCISE, SOLUTION, CHECK, EXPLANATION = "exercise", "solution", "check", "explanation"
DERIVATION = "derivation"
BOOKKEEPING = "bookkeeping"  # saves a run's headline for the docs: not in a workbook (it needs every answer)
CONCLUSION = "conclusion"
ANSWER = "answer"  # a written answer's cell in a workbook, collected by `make grade`
ANSWER_TEXT = "**Your answer** (the written part of this exercise; collected with the grades):"
WRITTEN_RE = re.compile(r"\b(explain|why|in (one|two|a) sentences?|describe|what does .* show)\b", re.I)
KINDS = ("predict", "explore", "derive", "implement")  # graded from "change a parameter" to "write a variant"
HEADING_RE = re.compile(rf"^###\s+Exercise\s+(\d+)\.(\d+)\s*·\s*({'|'.join(KINDS)})\s*·\s*(.+?)\s*$", re.M)
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


def student_notebook(nb: Any) -> Any:
    """A main notebook for students: without ``solution`` cells, each run of ``explanation`` cells replaced by one
    "write your conclusion" cell, each ``derivation`` cell that defines a function by :func:`derivation_stub`, and
    the check under it wrapped in :class:`trgrpo.exercises.derivation` (a failure names the case, no library
    traceback)."""
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
                head = "from trgrpo import exercises\n\n" if "from trgrpo import exercises" not in c.source else ""
                body = "\n".join(("    " + ln) if ln.strip() else ln for ln in c.source.splitlines())
                c.source = f"{head}with exercises.derivation({', '.join(map(repr, derived))}):\n{body}"
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
    student replaces it. ``ValueError`` when a solution precedes every statement or is not followed by a check.
    Every cell carries nbgrader's metadata: the stubs and written answers are the student's (``solution``), every
    other cell is ``locked`` (grading puts it back from the release by its ``grade_id``), the checks ``grade``, each
    guarded (:func:`guarded_check`). No ``bookkeeping`` cell; the notebook's name in its code is the workbook's."""
    out = copy.deepcopy(nb)
    cells, src = [], list(_by_exercise(out.cells))
    solution = [SOLUTION in tags(c) for _, c in src]
    for i, (current, c) in enumerate(src):
        if BOOKKEEPING in tags(c):
            continue
        if not solution[i]:
            cells.append(c)
            if c.cell_type == "code":
                c.source = re.sub(r"\b(\d\d_\w+?)_solutions\b", r"\1_exercises", c.source)
            if CHECK in tags(c) and current is not None:
                c.source = guarded_check(c.source, current)
                nbgrader = _nbgrader(f"check-{current}-{i}", grade=True, solution=False, locked=True, points=1)
                c.metadata["nbgrader"] = nbgrader
            else:  # set-up, statements, the rest: read-only, put back from the release when graded
                c.metadata["nbgrader"] = _nbgrader(f"cell-{i}", grade=False, solution=False, locked=True)
            if exercise_heading(c) and WRITTEN_RE.search(c.source):
                nbgrader = _nbgrader(f"written-{current}", grade=True, solution=True, locked=False, points=0)
                meta = {"tags": [ANSWER], "nbgrader": nbgrader}
                cells.append(nbformat.v4.new_markdown_cell(ANSWER_TEXT + "\n\n", metadata=meta))
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


GUARD_IMPORT = "from trgrpo import exercises  # run again after a kernel restart"


def guarded_check(source: str, exercise: str) -> str:
    """A check cell for the student copy: all of it inside ``with exercises.check(exercise):`` (a name not defined
    says "run the cells above (kernel restarted?)", any failure is one sentence, no traceback) after its own import
    of :mod:`trgrpo.exercises`, and the hints of its ``exercises.check(...)`` and ``exercises.expect(...)`` sealed
    (:func:`seal_hints`), so that a hint shows only after a wrong answer."""
    head, _, body = source.partition("\n") if EXPECTS_RE.match(source.split("\n", 1)[0]) else ("", "", source)
    body = seal_hints(body, exercise)
    first, lines = ast.parse(body).body[0], body.split("\n")
    if isinstance(first, ast.With) and "exercises.check(" in ast.unparse(first.items[0].context_expr):
        wrapped, lines = lines[: first.end_lineno], lines[first.end_lineno :]  # what follows goes into its block
    else:
        wrapped = [f"with exercises.check({exercise!r}):"]
    if any('"""' in ln or "'''" in ln for ln in lines):
        raise ValueError(f"the check of Exercise {exercise} has a triple-quoted text: it cannot be indented")
    body = "\n".join(wrapped + [f"    {ln}" if ln.strip() else ln for ln in lines])
    return "\n".join(x for x in (head, GUARD_IMPORT, body) if x)


HINTED = {"check": 1, "expect": 2}  # the calls of trgrpo.exercises that take hints: their positional arguments


def seal_hints(source: str, exercise: str) -> str:
    """``source`` with the hints (keyword texts) of each ``exercises.check(...)`` and ``exercises.expect(...)``
    call sealed (``**exercises.unseal(...)``, :func:`trgrpo.exercises.seal`). ``ValueError`` for a hint that is not
    a literal text or is passed by position (it could not be sealed)."""
    start = [0]
    for line in source.encode().split(b"\n"):
        start.append(start[-1] + len(line) + 1)  # ast's columns count UTF-8 bytes
    calls = [
        n
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Call) and getattr(n.func, "attr", "") in HINTED
        if getattr(n.func.value, "id", "") == "exercises"
    ]
    out = source.encode()
    for node in sorted(calls, key=lambda n: (n.lineno, n.col_offset), reverse=True):
        name, where = node.func.attr, f"the check of Exercise {exercise}, exercises.{node.func.attr}(...)"
        if len(node.args) > HINTED[name]:
            raise ValueError(f"{where}: pass its hint as hint=... (make student seals keyword texts only)")
        if not node.keywords:
            continue
        if not all(k.arg and isinstance(getattr(k.value, "value", None), str) for k in node.keywords):
            raise ValueError(f"{where}: each hint must be a literal text (make student seals it)")
        args = [ast.get_source_segment(source, a) for a in node.args]
        hints = seal({k.arg: k.value.value for k in node.keywords})
        sealed = f"exercises.{name}({', '.join([*args, f'**exercises.unseal({hints!r})'])})".encode()
        a, b = start[node.lineno - 1] + node.col_offset, start[node.end_lineno - 1] + node.end_col_offset
        out = out[:a] + sealed + out[b:]
    return out.decode()


def _nbgrader(grade_id: str, **flags: bool | int) -> dict:
    """nbgrader's metadata of a workbook cell (its schema version 3)."""
    return {**flags, "grade_id": grade_id, "schema_version": 3}


def _answer_checks(source: str) -> list[tuple[str, str | None]]:
    """The ``exercises.check_answers('N.k', data=EXPR, ...)`` calls of a cell: each exercise id and EXPR's source."""
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
            keys = seal(keys_for(exercise, datasets, answers))
            lines.append(f"exercises.use_keys({exercise!r}, {keys!r})  # answers as salted hashes, hints (sealed)")
        head = c.source.split("\n")
        n = sum(1 for ln in head[:2] if EXPECTS_RE.match(ln) or ln == GUARD_IMPORT)  # the use_keys lines after them
        c.source = "\n".join(head[:n] + lines + head[n:])
    return out


LINK_RE = re.compile(r"(\]\()([^)\s#]+)(#[^)\s]*)?\)")
SOLUTIONS_LINE_RE = re.compile(r"^Solutions \(executed in `make test`\):.*\n?", re.M)
HANDOUT_DOCS = ("docs/glossary.md", "docs/syllabus.md", "docs/design.md")  # copied into student/docs/, relinked
STUDENT_README = ROOT / "course" / "student_README.md"  # the copy's README.md (the project's README is not in it)
INSTRUCTOR_README = ROOT / "course" / "instructor_README.md"  # the instructor's copy's README.md


def handout_path(repo_path: str, solutions: bool = False) -> str | None:
    """Where a file of the repository sits in the student copy (None: not in it): notebooks/NN_x.ipynb -> NN_x.ipynb,
    notebooks/solutions/NN_x_solutions.ipynb -> exercises/NN_x_exercises.ipynb (the instructor's copy, ``solutions``:
    solutions/NN_x_solutions.ipynb), docs/*.md -> docs/, README.md -> the copy's own README.md."""
    parts = Path(repo_path).parts
    if repo_path in (*HANDOUT_DOCS, "README.md"):
        return repo_path
    if parts[:2] == ("notebooks", "solutions") and len(parts) == 3:
        workbook = parts[2].replace("_solutions.ipynb", "_exercises.ipynb")
        return f"solutions/{parts[2]}" if solutions else f"exercises/{workbook}"
    return parts[1] if parts[0] == "notebooks" and len(parts) == 2 else None


def relink_text(text: str, repo_path: str, solutions: bool = False) -> str:
    """Markdown ``text`` of the file at ``repo_path`` of the repository with its links retargeted for its place in the
    student copy (:func:`handout_path`), without the lines that link the solutions."""
    source_dir, dest_dir = os.path.dirname(repo_path), os.path.dirname(handout_path(repo_path, solutions))

    def target(m: re.Match) -> str:
        link = m.group(2)
        if "://" in link or link.startswith("mailto:"):
            return m.group(0)
        new = handout_path(os.path.normpath(os.path.join(source_dir, link)), solutions)
        if new is None:
            return m.group(0)
        return f"{m.group(1)}{os.path.relpath(new, dest_dir or '.')}{m.group(3) or ''})"

    return LINK_RE.sub(target, SOLUTIONS_LINE_RE.sub("", text))


def relink(nb: Any, repo_path: str, solutions: bool = False) -> Any:
    """``nb``, the notebook at ``repo_path`` of the repository, with its markdown relinked (:func:`relink_text`) and
    no stored outputs."""
    for c in nb.cells:
        if c.cell_type == "markdown":
            c.source = relink_text(c.source, repo_path, solutions)
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
    (out / "README.md").write_text(STUDENT_README.read_text())
    (out / "docs").mkdir(exist_ok=True)
    for doc in HANDOUT_DOCS:
        (out / handout_path(doc)).write_text(relink_text((ROOT / doc).read_text(), doc))
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return written, kept


def write_instructor_copy(out: Path | str = ROOT / "instructor", timeout: int = 3600) -> tuple[list[Path], list[dict]]:
    """``make instructor``: the student copy with the instructor's README (course/instructor_README.md: release,
    collect, grade, hand back) and, in ``solutions/``, the solutions notebooks executed in this checkout (their
    checks compare with course/answers.py; laptop defaults, at most ``timeout`` seconds each), relinked for their
    place: ``(written, failed)``, ``failed`` the run rows (:func:`trgrpo.runs.batch.run_notebook`) of those that
    stopped (written as far as they ran)."""
    from trgrpo.runs.batch import OFFLINE_ENV, environment, run_notebook

    out = Path(out)
    written, failed = write_student_copy(out)[0], []
    (out / "README.md").write_text(INSTRUCTOR_README.read_text())
    (out / "solutions").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="trgrpo-instructor-") as work:
        for path in solution_notebooks():
            with environment(**OFFLINE_ENV):
                row = run_notebook(path, Path(work), smoke=False, timeout=timeout)
            failed += [] if row["ok"] else [row]
            repo_path = path.relative_to(ROOT).as_posix()
            nb = read(row["output"] if Path(row["output"]).is_file() else path)  # as far as it ran
            for c in nb.cells:
                if c.cell_type == "markdown":
                    c.source = relink_text(c.source, repo_path, solutions=True)
            written.append(out / handout_path(repo_path, solutions=True))
            nbformat.write(nb, str(written[-1]))
    return written, failed


def parameters_source(path: Path | str) -> dict[str, str]:
    """The defaults (source text) of a notebook's papermill parameters: the settings a time of it was measured with."""
    import papermill as pm

    return {name: p["default"] for name, p in pm.inspect_notebook(str(path)).items()}
