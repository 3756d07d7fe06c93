"""Grading (issue "course"): ``python -m trgrpo.course grade FOLDER`` executes each submitted workbook headless
(papermill, a time limit per notebook) and writes a table student x exercise with ✓/✗ and points, and a CSV; the
written answers' cells are collected with it. Kept fast: two small workbooks of two exercises each."""

from __future__ import annotations

import copy
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from course import grading, workbooks
from trgrpo.exercises import answer_key, seal, unseal

ANSWERS = {"9.1": {"reference": lambda data: {"c": 1234}, "c": "count the rows again", "hint": "one per row"}}
RIGHT = {"9.1": "c = 1234", "9.2": "b = 'x'", "9.3": "d = [1, 2]"}


def _release() -> object:
    """A tiny workbook as `make student` releases it: nbgrader metadata, an answer key in 9.1's check, a written
    answer's cell for 9.1."""
    v4 = nbformat.v4
    solutions = v4.new_notebook()
    solutions.cells = [
        v4.new_markdown_cell("# Solutions: a tiny workbook"),
        v4.new_code_cell("from trgrpo import exercises"),
        v4.new_markdown_cell(
            "### Exercise 9.1 · predict · a count\n\nHow many? Explain in one sentence.",
            metadata={"tags": ["exercise"]},
        ),  # fmt: skip
        v4.new_code_cell("c = 1234", metadata={"tags": ["solution"]}),
        v4.new_code_cell("# expects: c\nexercises.check_answers('9.1', c=c)", metadata={"tags": ["check"]}),
        v4.new_markdown_cell("### Exercise 9.2 · implement · a word", metadata={"tags": ["exercise"]}),
        v4.new_code_cell("b = 'x'", metadata={"tags": ["solution"]}),
        v4.new_code_cell(
            "# expects: b\nwith exercises.check('9.2'):\n    assert b == 'x'", metadata={"tags": ["check"]}
        ),
        v4.new_markdown_cell("### Exercise 9.3 · implement · a list", metadata={"tags": ["exercise"]}),
        v4.new_code_cell("d = [1, 2]", metadata={"tags": ["solution"]}),
        v4.new_code_cell(
            "# expects: d\nwith exercises.check('9.3'):\n    assert d == [1, 2]", metadata={"tags": ["check"]}
        ),
    ]
    return workbooks.with_answer_keys(workbooks.exercise_workbook(solutions), ANSWERS)


def _cells(nb, prefix: str) -> dict[str, object]:
    """The cells whose grade_id starts with ``prefix`` (answer, check, written), by exercise id."""
    return {
        c.metadata["nbgrader"]["grade_id"].split("-")[1]: c
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade_id", "").startswith(prefix + "-")
    }


def _filled(release, answers: dict[str, str], written: str = "") -> object:
    """The release filled in by a student: ``answers`` maps an exercise id to the code of its solution cell."""
    nb = copy.deepcopy(release)
    for exercise, code in answers.items():
        _cells(nb, "answer")[exercise].source = code
    if written:
        _cells(nb, "written")["9.1"].source += written
    return nb


def _tampered(release) -> object:
    """The issue's full marks by tampering: each stub `pass`, each check cell `print('looks fine')`."""
    nb = _filled(release, dict.fromkeys(RIGHT, "pass"))
    for c in _cells(nb, "check").values():
        c.source = "print('looks fine')"
    return nb


def test_every_cell_the_student_does_not_write_is_locked():
    """nbgrader's model: the stubs and the written answers are the student's, every other cell is locked with a
    grade_id, so that grading can put it back."""
    wb = _release()
    assert all("nbgrader" in c.metadata for c in wb.cells)
    mine = [c for c in wb.cells if c.metadata["nbgrader"]["solution"]]
    assert sorted(c.metadata["nbgrader"]["grade_id"].split("-")[0] for c in mine) == ["answer"] * 3 + ["written"]
    assert all(c.metadata["nbgrader"]["locked"] for c in wb.cells if not c.metadata["nbgrader"]["solution"])
    checks = [c for c in wb.cells if "check" in workbooks.tags(c)]
    assert all(c.metadata["nbgrader"]["grade"] and c.metadata["nbgrader"]["points"] == 1 for c in checks)
    ids = [c.metadata["nbgrader"]["grade_id"] for c in wb.cells]
    assert len(ids) == len(set(ids)), "nbgrader's grade ids are unique"
    assert all(c.metadata["nbgrader"]["schema_version"] == 3 for c in wb.cells)


def test_restore_puts_back_the_released_checks_set_up_and_keys():
    """A tampered copy (checks replaced, the set-up changed, 9.1's answer key swapped for the student's own answer's
    hash, a cell added) is graded with the release's cells; the student's solutions, written answers and added cells
    stay, and an exercise whose code the student left alone is not attempted."""
    release = _release()
    nb = _tampered(release)
    nb.cells[1].source = "exercises = None"
    check_91 = _cells(nb, "check")["9.1"]
    check_91.source = check_91.source.replace(answer_key("9.1", "c", 1234, False), answer_key("9.1", "c", 1, False))
    for exercise in ("9.1", "9.3"):  # left as released (9.1's written answer given: its check is not attempted)
        _cells(nb, "answer")[exercise].source = _cells(release, "answer")[exercise].source
    _cells(nb, "written")["9.1"].source += "Three."
    added = nbformat.v4.new_code_cell("helper = 1")
    nb.cells.insert(nb.cells.index(_cells(nb, "answer")["9.2"]) + 1, added)
    graded, attempted, written = grading.restore(nb, release)
    released_locked = [c.source for c in release.cells if c.metadata["nbgrader"]["locked"]]
    assert [c.source for c in graded.cells if c.metadata.get("nbgrader", {}).get("locked")] == released_locked
    assert "print('looks fine')" not in str(graded) and answer_key("9.1", "c", 1, False) not in str(graded)
    assert _cells(graded, "answer")["9.2"].source == "pass"
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in graded.cells]
    stub_92 = ids.index(_cells(release, "answer")["9.2"].metadata.nbgrader.grade_id)
    assert graded.cells[stub_92 + 1].source == "helper = 1"
    assert attempted == {"9.1": False, "9.2": True, "9.3": False}
    assert written == {"9.1": "Three."}
    assert all("raises-exception" in c.metadata["tags"] for c in graded.cells if c.cell_type == "code")


def test_only_the_release_workbooks_are_graded(tmp_path):
    """Jupyter's checkpoints, make student's .new copies and notebooks outside the release are left out, with why;
    the student is the folder handed in (an exercises/ folder: the folder above it)."""
    release = {"09_tiny_exercises": _release()}
    sub = tmp_path / "submissions"
    checkpoint = "ada/exercises/.ipynb_checkpoints/09_tiny_exercises-checkpoint.ipynb"
    for rel in ("ada/exercises/09_tiny_exercises.ipynb", checkpoint, "bob/09_tiny_exercises.ipynb",
                "bob/09_tiny_exercises.new.ipynb", "bob/00_grpo_primer.ipynb", "cy.ipynb"):  # fmt: skip
        (sub / rel).parent.mkdir(parents=True, exist_ok=True)
        nb = release["09_tiny_exercises"] if "primer" not in rel else nbformat.v4.new_notebook()
        nbformat.write(nb, str(sub / rel))
    todo, ignored = grading.submissions(sub, release)
    assert sorted((s["student"], s["workbook"]) for s in todo) == [
        ("ada", "09_tiny_exercises"), ("bob", "09_tiny_exercises"), ("cy", "09_tiny_exercises")
    ]  # fmt: skip
    why = {Path(r["path"]).name: r["why"] for r in ignored}
    assert set(why) == {"09_tiny_exercises-checkpoint.ipynb", "09_tiny_exercises.new.ipynb", "00_grpo_primer.ipynb"}
    assert (
        "checkpoint" in why["09_tiny_exercises-checkpoint.ipynb"] and "fresh copy" in why["09_tiny_exercises.new.ipynb"]
    )
    todo, _ = grading.submissions(sub / "ada" / "exercises", release)  # one student's exercises/ folder
    assert [s["student"] for s in todo] == ["ada"]


def test_reports_total_per_student_feedback_and_written_marks_kept(tmp_path):
    """totals.csv has a total per student and one column per exercise; a feedback file per student; written.csv has
    a mark column, and a mark the teacher gave is kept when grading again (the answer unchanged)."""
    row = {"workbook": "09_tiny_exercises", "max": 1.0}
    result = {
        "grades": [
            {**row, "student": "ada", "exercise": "9.1", "result": "✓", "points": 1.0, "message": "Exercise 9.1 ✓"},
            {**row, "student": "ada", "exercise": "9.2", "result": "not attempted", "points": 0.0, "message": "x"},
            {**row, "student": "bob", "exercise": "9.1", "result": "✗", "points": 0.0, "message": "not right | yet"},
            {**row, "student": "bob", "exercise": "9.2", "result": "✓", "points": 1.0, "message": ""},
        ],
        "written": [
            {"student": "ada", "workbook": "09_tiny_exercises", "exercise": "9.1", "answer": "Three.", "mark": ""}
        ],  # fmt: skip
        "runs": [{"student": "bob", "workbook": "09_tiny_exercises", "path": "p", "error": "stopped after 5 s"}],
        "ignored": [],
    }
    grading.write_reports(result, tmp_path)
    totals = list(csv.DictReader((tmp_path / "totals.csv").open()))
    assert totals == [{"student": "ada", "total": "1/2", "9.1": "✓", "9.2": "not attempted"},
                      {"student": "bob", "total": "1/2", "9.1": "✗", "9.2": "✓"}]  # fmt: skip
    grades = list(csv.DictReader((tmp_path / "grades.csv").open()))
    assert grades[2]["message"] == "not right | yet" and len(grades) == 4
    assert [(g["points"], g["max"]) for g in grades] == [("1", "1"), ("0", "1"), ("0", "1"), ("1", "1")]
    bob = (tmp_path / "feedback" / "bob.md").read_text()
    assert "Total: 1 / 2" in bob and "not right \\| yet" in bob and "stopped after 5 s" in bob
    assert "Three." in (tmp_path / "feedback" / "ada.md").read_text()
    written = tmp_path / "written.csv"
    rows = list(csv.DictReader(written.open()))
    assert rows == [{"student": "ada", "workbook": "09_tiny_exercises", "exercise": "9.1", "answer": "Three.",
                     "mark": ""}]  # fmt: skip
    written.write_text(written.read_text().replace("Three.,", "Three.,0.5"))
    grading.write_reports(result, tmp_path)
    assert next(csv.DictReader(written.open()))["mark"] == "0.5"


def test_a_workbook_that_cannot_be_read_is_graded_as_nothing_handed_in(tmp_path):
    """A broken file (half-saved JSON) gets 'not attempted' for every exercise and says why, without stopping the
    grading of the others."""
    path = tmp_path / "09_tiny_exercises.ipynb"
    path.write_text('{"cells": [')
    graded = grading.grade_workbook(path, _release(), timeout=5)
    assert [(e["exercise"], e["result"], e["points"]) for e in graded["exercises"]] == [
        ("9.1", "not attempted", 0.0), ("9.2", "not attempted", 0.0), ("9.3", "not attempted", 0.0)
    ]  # fmt: skip
    assert graded["error"].startswith("could not be read") and "could not be read" in graded["exercises"][0]["message"]


@pytest.mark.slow  # three kernels: about 60 s on 2 busy cores (make test-slow)
def test_grade_right_wrong_and_tampered_submissions(tmp_path):
    """The issue's 'done when': three submissions graded with `trgrpo course grade` as typed: right (full marks),
    wrong (9.1 wrong with its answer key swapped for the student's own answer's hash, 9.2 right, 9.3 left alone:
    partial marks and 'not attempted' apart from ✗) and tampered (checks replaced, stubs `pass`: 0, full marks before);
    checkpoints and .new copies left out."""
    release = _release()
    (tmp_path / "release" / "exercises").mkdir(parents=True)
    nbformat.write(release, str(tmp_path / "release" / "exercises" / "09_tiny_exercises.ipynb"))
    wrong = _filled(release, {"9.1": "c = 1200", "9.2": "b = 'x'"}, "No idea.")
    check = _cells(wrong, "check")["9.1"]
    sealed = check.source.split("exercises.use_keys('9.1', ")[1].split(")")[0]  # the keys, sealed: swap bob's in
    right, wrong_key = answer_key("9.1", "c", 1234, False), answer_key("9.1", "c", 1200, False)
    swapped = seal(json.loads(json.dumps(unseal(sealed.strip("'"))).replace(right, wrong_key)))
    assert swapped != sealed.strip("'")
    check.source = check.source.replace(sealed, repr(swapped))
    folder = tmp_path / "submissions"
    files = {
        "ada/exercises/09_tiny_exercises.ipynb": _filled(release, RIGHT, "Because three."),
        "ada/exercises/.ipynb_checkpoints/09_tiny_exercises-checkpoint.ipynb": _filled(release, RIGHT),
        "bob/exercises/09_tiny_exercises.ipynb": wrong,
        "bob/exercises/09_tiny_exercises.new.ipynb": release,
        "eve/exercises/09_tiny_exercises.ipynb": _tampered(release),
    }
    for rel, nb in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, str(folder / rel))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRGRPO_HEADLESS": "1"}
    cmd = [sys.executable, "-m", "trgrpo", "course", "grade", str(folder), "--timeout", "120", "--release",
           str(tmp_path / "release")]  # fmt: skip
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    totals = {row["student"]: row for row in csv.DictReader((folder / "totals.csv").open())}
    assert {s: (t["total"], t["9.1"], t["9.2"], t["9.3"]) for s, t in totals.items()} == {
        "ada": ("3/3", "✓", "✓", "✓"),
        "bob": ("1/3", "✗", "✓", "not attempted"),
        "eve": ("0/3", "✗", "✗", "✗"),
    }, r.stdout
    grades = list(csv.DictReader((folder / "grades.csv").open()))
    assert len(grades) == 9, "one row per student and exercise: no checkpoint, no .new copy"
    message = {(g["student"], g["exercise"]): g["message"] for g in grades}
    assert message["ada", "9.1"] == "Exercise 9.1 ✓"
    assert message["bob", "9.1"] == "Exercise 9.1: `c` is not right yet"
    assert message["eve", "9.2"].startswith("Exercise 9.2: `b` is not defined: run the cells above (kernel restarted?)")
    written = {w["student"]: w for w in csv.DictReader((folder / "written.csv").open())}
    assert written["ada"]["answer"] == "Because three." and written["bob"]["answer"] == "No idea."
    assert written["ada"]["mark"] == "" and written["eve"]["answer"] == ""
    assert "Total: 3 / 3" in (folder / "feedback" / "ada.md").read_text()
    assert "| ada | 3/3 | ✓ | ✓ | ✓ |" in r.stdout and "| eve | 0/3 | ✗ | ✗ | ✗ |" in r.stdout, r.stdout
    assert "left out" in r.stdout and "checkpoint" in r.stdout and ".new.ipynb" in r.stdout


nbformat = pytest.importorskip("nbformat")
ROOT = Path(__file__).resolve().parents[2]


def _filled_workbook(wrong: dict[str, str]):
    """Notebook 00's workbook as ``make student`` writes it (answer keys, no course/answers.py needed), each stub
    filled with the solution's code; ``wrong`` maps an exercise id to code run after it (a student's slip)."""
    sol = workbooks.read(workbooks.solutions_path(ROOT / "notebooks" / "00_grpo_primer.ipynb"))
    runs, current = {}, None
    for c in sol.cells:
        current = (workbooks.exercise_heading(c) or {}).get("id", current)
        if "solution" in workbooks.tags(c) and c.cell_type == "code":
            runs.setdefault(current, []).append(c.source)
    wb = workbooks.with_answer_keys(workbooks.exercise_workbook(sol))
    stubs = [c for c in wb.cells if "stub" in workbooks.tags(c)]
    assert len(stubs) == len(runs) == 3
    for stub, (exercise, code) in zip(stubs, runs.items()):
        stub.source = "\n".join(code + [wrong.get(exercise, "")])
    for c in wb.cells:
        if workbooks.ANSWER in workbooks.tags(c):
            c.source += "A rare success is a surprise."
    return wb


@pytest.mark.slow  # three kernels: about 70 s on 2 busy cores
def test_grading_notebook_00_right_wrong_and_tampered_workbooks(tmp_path):
    """`trgrpo course grade` as typed, against the release regenerated from this checkout, on three filled-in copies
    of 00's workbook: right, with Exercise 0.1's typical slip (the population std) and 0.3 left alone, and tampered
    (every check cell `print('looks fine')`, every stub `pass`): full, partial and zero marks."""
    import csv
    import os
    import subprocess
    import sys

    import nbformat

    tampered = _filled_workbook({})
    for c in tampered.cells:
        if "stub" in workbooks.tags(c):
            c.source = "pass"
        elif "check" in workbooks.tags(c):
            c.source = "print('looks fine')"
    wrong = _filled_workbook({"0.1": "adv_right_hard = 7**0.5"})
    released = workbooks.with_answer_keys(
        workbooks.exercise_workbook(
            workbooks.read(workbooks.solutions_path(ROOT / "notebooks" / "00_grpo_primer.ipynb"))
        )
    )
    stub_03 = [c for c in released.cells if "stub" in workbooks.tags(c)][2]
    next(c for c in wrong.cells if c.metadata.get("nbgrader") == stub_03.metadata.nbgrader).source = stub_03.source
    folder = tmp_path / "submissions"
    for student, nb in {"ada": _filled_workbook({}), "bob": wrong, "eve": tampered}.items():
        (folder / student / "exercises").mkdir(parents=True)
        nbformat.write(nb, str(folder / student / "exercises" / "00_grpo_primer_exercises.ipynb"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRGRPO_HEADLESS": "1", "TRGRPO_SMOKE": "1"}
    r = subprocess.run([sys.executable, "-m", "trgrpo", "course", "grade", str(folder), "--timeout", "120"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=400)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    rows = {row["student"]: row for row in csv.DictReader((folder / "totals.csv").open())}
    got = {s: [row["total"]] + [row[e] for e in ("0.1", "0.2", "0.3")] for s, row in rows.items()}
    assert got == {
        "ada": ["3/3", "✓", "✓", "✓"],
        "bob": ["1/3", "✗", "✓", "not attempted"],
        "eve": ["0/3", "✗", "✗", "✗"],
    }, r.stdout
    messages = {(g["student"], g["exercise"]): g["message"] for g in csv.DictReader((folder / "grades.csv").open())}
    assert messages["bob", "0.1"].startswith("Exercise 0.1: `adv_right_hard` is not right yet"), messages
    written = list(csv.DictReader((folder / "written.csv").open()))
    assert {w["answer"] for w in written if w["student"] == "ada"} == {"A rare success is a surprise."}
    assert all(w["mark"] == "" for w in written) and (folder / "feedback" / "eve.md").is_file()
