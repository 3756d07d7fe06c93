"""Grading submitted workbooks (``trgrpo course grade``), as nbgrader's autograde does it: only the workbooks of the
release are graded (no checkpoints, no ``.new`` copies); in each, every locked cell (set-up, statements, checks) is
put back from the release by its ``grade_id``, so that the checks are the instructor's and compare with the
instructor's answer keys, never with what the student's copy holds; then it runs headless and each exercise is
✓, ✗ or not attempted, with the first line of the message its check printed. Out: a table student x exercise with a
total per student, ``grades.csv`` (one row per student and exercise, with the message), a feedback file per student
and ``written.csv``, the written answers with a ``mark`` column the teacher fills."""

from __future__ import annotations

import copy
import csv
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import nbformat

from course.workbooks import (
    ANSWER,
    ANSWER_TEXT,
    CHECK,
    ROOT,
    _by_exercise,
    exercise_workbook,
    handout_path,
    read,
    relink,
    solution_notebooks,
    tags,
    with_answer_keys,
)
from trgrpo.exercises import load_answers

RIGHT, WRONG, NOT_ATTEMPTED, MISSING = "✓", "✗", "not attempted", "not handed in"
WORKBOOK_RE = re.compile(r"^(\d\d)_\w+_exercises$")  # a release workbook's name (its stem)
GRADE_ID_RE = re.compile(r"^(?:check|answer|written)-(\d+)\.\d+")


def _grade_id(cell: Any) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _locked(cell: Any) -> bool:
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("locked"))


class Release(Mapping):
    """The released workbooks by name (``NN_stem_exercises``), each built when first asked for: ``makers`` maps a
    name to a function that returns the workbook as ``make student`` releases it (answer keys in its checks)."""

    def __init__(self, makers: Mapping[str, Callable[[], Any]]) -> None:
        self._makers, self._built = dict(makers), {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            self._built[name] = self._makers[name]()
        return self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._makers)

    def __len__(self) -> int:
        return len(self._makers)


def repo_release() -> Release:
    """The release regenerated from the repository's solutions notebooks, as ``make student`` writes it, with the
    answer keys of the instructor's course/answers.py (computed here, on the instructor's side)."""
    makers = {}
    for path in solution_notebooks():
        repo_path = path.relative_to(ROOT).as_posix()

        def make(path: Path = path, repo_path: str = repo_path) -> Any:
            return relink(with_answer_keys(exercise_workbook(read(path)), load_answers()), repo_path)

        makers[Path(handout_path(repo_path)).stem] = make
    return Release(makers)


def folder_release(folder: Path | str) -> Release:
    """The release as a ``make student`` the instructor ran wrote it (``folder/exercises/*.ipynb``, or the workbooks
    anywhere under ``folder``)."""
    paths = [p for p in Path(folder).rglob("*_exercises.ipynb") if not _skipped(p)]
    return Release({p.stem: (lambda p=p: read(p)) for p in sorted(paths)})


def _skipped(path: Path) -> str:
    """Why a notebook is not a submission ('' when it is one): Jupyter's autosaves, make student's fresh copies."""
    if ".ipynb_checkpoints" in path.parts or path.stem.endswith("-checkpoint"):
        return "a Jupyter checkpoint (autosave)"
    if path.name.endswith(".new.ipynb"):
        return "a fresh copy make student wrote beside a changed workbook"
    return ""


def release_name(path: Path, release: Mapping[str, Any]) -> str | None:
    """The release workbook a submitted notebook is: by its name, else by the exercise numbers in its cells'
    ``grade_id`` (a workbook renamed, e.g. ``ada.ipynb``); None for any other notebook."""
    if path.stem in release:
        return path.stem
    try:
        numbers = {m.group(1) for c in read(path).cells if (m := GRADE_ID_RE.match(_grade_id(c) or ""))}
    except Exception:  # noqa: BLE001  (not a notebook nbformat can read: not a submission)
        return None
    names = [n for n in release if len(numbers) == 1 and int(n[:2]) == int(next(iter(numbers)))]
    return names[0] if len(names) == 1 else None


def submissions(folder: Path | str, release: Mapping[str, Any]) -> tuple[list[dict], list[dict]]:
    """The workbooks under ``folder`` to grade, ``{student, workbook, path}`` each, and the notebooks left out
    ``{path, why}``. The student: the first folder under ``folder``; a notebook directly in it is a student's own
    file (its stem), unless it bears a release workbook's name: then ``folder`` is one student's ``exercises/``
    folder, named by ``folder`` (or the folder above it when it is called ``exercises``). One workbook per student
    and release workbook: the one with the release's name first."""
    folder = Path(folder)
    found, ignored = {}, []
    for path in sorted(folder.rglob("*.ipynb"), key=lambda p: (p.stem not in release, str(p))):
        rel = path.relative_to(folder)
        if why := _skipped(rel):
            ignored.append({"path": str(rel), "why": why})
            continue
        name = release_name(path, release)
        if name is None:
            ignored.append({"path": str(rel), "why": "not a workbook of the release"})
            continue
        if len(rel.parts) > 1:
            student = rel.parts[0]
        elif path.stem in release:
            here = folder.resolve()
            student = here.parent.name if here.name == "exercises" else here.name
        else:
            student = path.stem
        if (student, name) in found:
            ignored.append({"path": str(rel), "why": f"{student} has another {name}: {found[student, name]['path']}"})
            continue
        found[student, name] = {"student": student, "workbook": name, "path": path}
    return list(found.values()), ignored


def restore(submitted: Any, released: Any) -> tuple[Any, dict[str, bool], dict[str, str]]:
    """The notebook to grade: the release's cells in the release's order, each locked one (set-up, statements,
    checks) as released, each of the student's (solutions, written answers) as the student's copy has it by
    ``grade_id`` (as released if missing), and the cells the student added after the same cell as in the student's
    copy. Outputs and counts cleared. Also: per exercise whether the student changed anything in it (attempted),
    and the written answers."""
    known = {_grade_id(c): c for c in released.cells if _grade_id(c)}
    released_sources = {c.source.strip() for c in released.cells}
    theirs: dict[str, Any] = {}
    added: dict[str | None, list[Any]] = {}
    last = None
    for c in submitted.cells:
        gid = _grade_id(c)
        if gid in known and gid not in theirs:
            theirs[gid], last = c, gid
        elif gid in known or (gid is None and c.source.strip() in released_sources):
            continue  # a copy of a released cell (e.g. a duplicated check): the released one runs
        elif c.cell_type == "code" or c.source.strip():
            added.setdefault(last, []).append(c)
    out = copy.deepcopy(released)
    cells = [copy.deepcopy(c) for c in added.get(None, [])]
    attempted: dict[str, bool] = {}
    written: dict[str, str] = {}
    for exercise, c in _by_exercise(released.cells):
        gid = _grade_id(c)
        mine = not _locked(c) and gid in theirs
        cell = copy.deepcopy(c)
        if mine:
            cell.source = theirs[gid].source
        extra = [copy.deepcopy(x) for x in added.get(gid, [])] if gid else []
        if exercise is not None:
            changed = (mine and c.cell_type == "code" and theirs[gid].source.strip() != c.source.strip()) or any(
                x.cell_type == "code" for x in extra
            )  # code: a written answer alone does not attempt the exercise's check
            attempted[exercise] = attempted.get(exercise, False) or changed
            if ANSWER in tags(c):
                written[exercise] = cell.source.replace(ANSWER_TEXT, "").strip()
        cells += [cell, *extra]
    for c in cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
            c.metadata.setdefault("tags", [])
            if "raises-exception" not in c.metadata["tags"]:
                c.metadata["tags"].append("raises-exception")  # nbclient runs on past a failing check
    out.cells = cells
    return out, attempted, written


def execute(nb: Any, cwd: Path, timeout: int) -> tuple[Any, str]:
    """Run ``nb`` headless in a kernel of its own (papermill, in a process group ended after ``timeout`` seconds):
    the executed notebook (as far as it got) and what stopped it ('' when it ran to the end)."""
    cmd = [sys.executable, "-m", "papermill", "--no-progress-bar", "-k", "python3", "--cwd", str(cwd)]
    error = ""
    with tempfile.TemporaryDirectory(prefix="trgrpo-grade-", ignore_cleanup_errors=True) as work:
        given, out = Path(work) / "in.ipynb", Path(work) / "out.ipynb"
        nbformat.write(nb, str(given))
        proc = subprocess.Popen([*cmd, str(given), str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)  # fmt: skip
        try:
            _, stderr = proc.communicate(timeout=timeout)
            if not out.is_file():
                error = "did not run: " + (stderr.strip().splitlines() or ["?"])[-1]
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # papermill and the kernel it started
            proc.communicate()
            error = f"stopped after {timeout} s"
        ran = read(out) if out.is_file() else nb
    return ran, error


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def _message(cell: Any, error: str) -> tuple[bool, str]:
    """Whether a check cell passed, and the first line of what it showed the student."""
    if cell.get("execution_count") is None:
        return False, f"not run ({error})" if error else "not run"
    outputs = cell.get("outputs", [])
    for o in outputs:
        if o.output_type == "error":
            first = _first_line(o.get("evalue", ""))
            return False, first if o.ename == "CheckFailed" else f"{o.ename}: {first}".rstrip(": ")
    shown = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    return True, _first_line(shown) or RIGHT


def grade_workbook(path: Path | str, released: Any, timeout: int = 600) -> dict:
    """A submitted workbook graded against its ``released`` workbook (:func:`restore`, :func:`execute`):
    ``{"exercises": [{exercise, result, points, max, message}], "written": {exercise: text}, "error": str}``; an
    exercise is ✓ when each of its checks ran without error (its points, nbgrader's ``points`` of the release's
    cell), else 'not attempted' when the student changed none of its cells, else ✗ (the points of its passing
    checks)."""
    path, unreadable = Path(path), ""
    try:
        submitted = read(path)
    except Exception as e:  # noqa: BLE001  (a broken file is graded as nothing handed in, and said so)
        submitted, unreadable = nbformat.v4.new_notebook(), f"could not be read ({type(e).__name__})"
    nb, attempted, written = restore(submitted, released)
    ran, error = (nb, unreadable) if unreadable else execute(nb, path.parent, timeout)
    by_id = {_grade_id(c): c for c in ran.cells if _grade_id(c)}
    checks: dict[str, list[tuple[float, bool, str]]] = {}
    for exercise, c in _by_exercise(released.cells):
        if exercise is not None and CHECK in tags(c) and c.cell_type == "code":
            points = float(c.metadata.get("nbgrader", {}).get("points", 1))
            checks.setdefault(exercise, []).append((points, *_message(by_id.get(_grade_id(c), {}), error)))
    rows = []
    for exercise, done in checks.items():
        ok = all(passed for _, passed, _ in done)
        result = RIGHT if ok else (WRONG if attempted.get(exercise) else NOT_ATTEMPTED)
        message = next((m for _, passed, m in done if not passed), done[0][2])  # the first failing check's
        got, most = sum(p for p, passed, _ in done if passed), sum(p for p, _, _ in done)
        rows.append({"exercise": exercise, "result": result, "points": got, "max": most, "message": message})
    return {"exercises": rows, "written": written, "error": error}


def exercise_order(exercise: str) -> tuple[int, ...]:
    return tuple(int(x) for x in exercise.split("."))


def grade_folder(
    folder: Path | str, timeout: int = 600, release: Mapping[str, Any] | None = None
) -> dict[str, list[dict]]:
    """``make grade SUBMISSIONS=folder``: each workbook of the release under ``folder`` (:func:`submissions`),
    graded against ``release`` (default: regenerated from the repository, :func:`repo_release`):
    ``{"grades": one row per student and exercise, "written": one row per written answer, "runs": one row per
    workbook run (its path, what stopped it), "ignored": the notebooks left out, with why}``. A workbook some
    student handed in and another did not counts for the other as 'not handed in', 0 points."""
    release = repo_release() if release is None else release
    todo, ignored = submissions(folder, release)
    grades, written, runs, handed = [], [], [], {}
    for s in todo:
        graded = grade_workbook(s["path"], release[s["workbook"]], timeout)
        base = {"student": s["student"], "workbook": s["workbook"]}
        runs.append({**base, "path": str(s["path"]), "error": graded["error"]})
        grades += [{**base, **row} for row in graded["exercises"]]
        written += [{**base, "exercise": e, "answer": text, "mark": ""} for e, text in graded["written"].items()]
        handed.setdefault(s["workbook"], {r["exercise"]: r["max"] for r in graded["exercises"]})
    students = sorted({s["student"] for s in todo})
    for name, exercises in handed.items():
        for student in students:
            if not any(s["student"] == student and s["workbook"] == name for s in todo):
                grades += [{"student": student, "workbook": name, "exercise": e, "result": MISSING, "points": 0.0,
                            "max": m, "message": ""} for e, m in exercises.items()]  # fmt: skip
    grades.sort(key=lambda r: (r["student"], exercise_order(r["exercise"])))
    written.sort(key=lambda r: (r["student"], exercise_order(r["exercise"])))
    return {"grades": grades, "written": written, "runs": runs, "ignored": ignored}


def totals(grades: list[dict]) -> list[dict]:
    """One row per student: ``student``, ``total`` ("got/max") and per exercise its result (✓, ✗, not attempted,
    not handed in)."""
    rows: dict[str, dict] = {}
    for g in grades:
        r = rows.setdefault(g["student"], {"student": g["student"], "got": 0.0, "max": 0.0})
        r["got"], r["max"] = r["got"] + g["points"], r["max"] + g["max"]
        r[g["exercise"]] = g["result"]
    return [{"student": r.pop("student"), "total": f"{r.pop('got'):g}/{r.pop('max'):g}", **r} for r in rows.values()]


def feedback(student: str, grades: list[dict], written: list[dict], errors: dict[str, str]) -> str:
    """A student's feedback (Markdown): the total, then per workbook each exercise's result, points and the first
    line of its check's message, any note on the run, and the written answers (marked by the teacher)."""
    mine = [g for g in grades if g["student"] == student]
    got, most = sum(g["points"] for g in mine), sum(g["max"] for g in mine)
    lines = [f"# Feedback: {student}", "", f"**Total: {got:g} / {most:g}**", ""]
    for name in dict.fromkeys(g["workbook"] for g in mine):
        lines += [f"## {name}", "", "| exercise | result | points | what the check said |", "|---|---|---|---|"]
        for g in (g for g in mine if g["workbook"] == name):
            message = g["message"].replace("|", "\\|")
            lines.append(f"| {g['exercise']} | {g['result']} | {g['points']:g}/{g['max']:g} | {message} |")
        if errors.get(name):
            lines += ["", f"Note: your workbook {errors[name]}."]
        answers = [w for w in written if w["student"] == student and w["workbook"] == name]
        for w in answers:
            lines += ["", f"**Written answer {w['exercise']}** (marked by your teacher):", "", w["answer"] or "(empty)"]
        lines.append("")
    return "\n".join(lines)


def write_reports(result: dict, out: Path | str) -> list[Path]:
    """``grades.csv``, ``totals.csv``, ``written.csv`` (the teacher's marks of an earlier one kept where the answer
    is unchanged) and ``feedback/STUDENT.md`` in ``out``: the files written."""
    out = Path(out)
    (out / "feedback").mkdir(parents=True, exist_ok=True)
    grades, written = result["grades"], result["written"]
    paths = [out / "grades.csv", out / "totals.csv", out / "written.csv"]
    shown = [{**g, "points": f"{g['points']:g}", "max": f"{g['max']:g}"} for g in grades]
    _write_csv(paths[0], shown, ["student", "workbook", "exercise", "result", "points", "max", "message"])
    table = totals(grades)
    _write_csv(paths[1], table, list(dict.fromkeys(k for r in table for k in r)))
    marks = {}
    if paths[2].is_file():
        with paths[2].open(newline="") as f:
            marks = {(r["student"], r["exercise"], r["answer"]): r.get("mark", "") for r in csv.DictReader(f)}
    for w in written:
        w["mark"] = marks.get((w["student"], w["exercise"], w["answer"]), "")
    _write_csv(paths[2], written, ["student", "workbook", "exercise", "answer", "mark"])
    for student in sorted({g["student"] for g in grades}):
        mine = {r["workbook"]: r["error"] for r in result["runs"] if r["student"] == student and r["error"]}
        paths.append(out / "feedback" / f"{student}.md")
        paths[-1].write_text(feedback(student, grades, written, mine))
    return paths


def _write_csv(path: Path, rows: list[dict], columns: list[str]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows(rows)
