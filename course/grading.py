"""Grading submitted workbooks (``trgrpo course grade``): each executed headless, one row per student and
workbook."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

from course.workbooks import ANSWER, ANSWER_TEXT, CHECK, _by_exercise, read, tags


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
