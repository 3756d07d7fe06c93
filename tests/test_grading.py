"""Grading (issue "course"): ``trgrpo course grade FOLDER`` executes each submitted workbook headless
(papermill, a time limit per notebook) and writes a table student x exercise with ✓/✗ and points, and a CSV; the
written answers' cells are collected with it. Kept fast: two small workbooks of two exercises each."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from course import workbooks

nbformat = pytest.importorskip("nbformat")
ROOT = Path(__file__).resolve().parents[1]


def _workbook(answer_a: int, answer_b: str) -> object:
    """A workbook as `make student` writes it (nbgrader metadata on its checks, an answer cell for the written
    part), filled in by a student."""
    v4 = nbformat.v4
    solutions = v4.new_notebook()
    solutions.cells = [
        v4.new_markdown_cell("# Solutions: a tiny workbook"),
        v4.new_code_cell("from trgrpo import course"),
        v4.new_markdown_cell(
            "### Exercise 9.1 · predict · a count\n\nHow many? Explain in one sentence.",
            metadata={"tags": ["exercise"]},
        ),  # fmt: skip
        v4.new_code_cell("a = 3", metadata={"tags": ["solution"]}),
        v4.new_code_cell(
            "# expects: a\nwith exercises.check('9.1', a='a counts'):\n    assert a == 3", metadata={"tags": ["check"]}
        ),  # fmt: skip
        v4.new_markdown_cell("### Exercise 9.2 · implement · a word", metadata={"tags": ["exercise"]}),
        v4.new_code_cell("b = 'x'", metadata={"tags": ["solution"]}),
        v4.new_code_cell(
            "# expects: b\nwith exercises.check('9.2'):\n    assert b == 'x'", metadata={"tags": ["check"]}
        ),
    ]
    wb = workbooks.exercise_workbook(solutions)
    stubs = [c for c in wb.cells if "stub" in workbooks.tags(c)]
    stubs[0].source, stubs[1].source = f"a = {answer_a}", f"b = {answer_b!r}"
    (answer,) = [c for c in wb.cells if workbooks.ANSWER in workbooks.tags(c)]
    answer.source += "Because three." if answer_a == 3 else "No idea."
    return wb


@pytest.mark.slow  # 48 s on 2 busy cores: two kernels start (make test-slow)
def test_grade_a_folder_with_one_right_and_one_wrong_workbook(tmp_path):
    folder = tmp_path / "submissions"
    for student, (a, b) in {"ada": (3, "x"), "bob": (4, "x")}.items():
        (folder / student).mkdir(parents=True)
        nbformat.write(_workbook(a, b), str(folder / student / "99_tiny_exercises.ipynb"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRGRPO_HEADLESS": "1"}
    r = subprocess.run([sys.executable, "-m", "trgrpo", "course", "grade", str(folder), "--timeout", "120"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    rows = {row["student"]: row for row in csv.DictReader((folder / "grades.csv").open())}
    assert rows["ada"]["9.1"] == "✓ 1/1" and rows["ada"]["9.2"] == "✓ 1/1" and float(rows["ada"]["points"]) == 2
    assert rows["bob"]["9.1"] == "✗ 0/1" and rows["bob"]["9.2"] == "✓ 1/1" and float(rows["bob"]["points"]) == 1
    assert rows["ada"]["written 9.1"] == "Because three." and rows["bob"]["written 9.1"] == "No idea."
    assert rows["ada"]["error"] == rows["bob"]["error"] == ""
    assert "| ada " in r.stdout and "✗ 0/1" in r.stdout, r.stdout


def test_workbook_cells_carry_nbgrader_metadata():
    wb = _workbook(3, "x")
    checks = [c for c in wb.cells if "check" in workbooks.tags(c)]
    assert all(c.metadata["nbgrader"]["grade"] and c.metadata["nbgrader"]["points"] == 1 for c in checks)
    stubs = [c for c in wb.cells if "stub" in workbooks.tags(c)]
    assert all(c.metadata["nbgrader"]["solution"] for c in stubs)
    ids = [c.metadata["nbgrader"]["grade_id"] for c in wb.cells if "nbgrader" in c.metadata]
    assert len(ids) == len(set(ids)), "nbgrader's grade ids are unique"
    assert all(c.metadata["nbgrader"]["schema_version"] == 3 for c in wb.cells if "nbgrader" in c.metadata)
