"""Notebooks 00, 02 and 03 as a student runs them: what their outputs show and what a run leaves behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from course import workbooks

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # notebook 03 in smoke mode under nbval: 100 s on 2 busy cores
@pytest.mark.notebook
def test_the_smoke_run_of_03_leaves_nothing_in_the_temporary_folder(tmp_path):
    """Issue 38: each smoke run of 03 left 14 MB in /tmp/trgrpo-03-smoke-*. Run as `make test` runs it (nbval, which
    kills its kernel: a folder removed at the kernel's exit would stay too): nothing new in the temporary folder."""
    import os
    import subprocess
    import sys

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "TRGRPO_SMOKE": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax", "notebooks/03_toy_runs.ipynb"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:]
    assert sorted(p.name for p in tmp.iterdir() if p.name.startswith("trgrpo-")) == []


def _shown(cell) -> str:
    """The text a stored output of a cell shows (streams, plain text, markdown)."""
    parts = []
    for o in cell.get("outputs", []):
        parts.append(o.get("text", ""))
        parts += [o.get("data", {}).get(k, "") for k in ("text/plain", "text/markdown")]
    return "\n".join(p if isinstance(p, str) else "".join(p) for p in parts)


def test_no_checked_output_of_a_notebook_shows_an_exercise_answer():
    """What a student sees running a notebook (its nbval-checked outputs) holds none of its exercises' reference
    values: 02's KL table used to print Exercise 2.2's answer (0.0635)."""
    for exercise, spec in workbooks.load_answers().items():
        try:
            want = spec["reference"]({})
        except KeyError:  # computed from the notebook's data: those are not printed by the notebook's own cells
            continue
        path = next(p for p in workbooks.main_notebooks() if p.name.startswith(f"{int(exercise.split('.')[0]):02d}_"))
        shown = "\n".join(_shown(c) for c in workbooks.read(path).cells if c.cell_type == "code")
        for name, v in want.items():
            if isinstance(v, float) and v != round(v, 2):
                assert f"{v:.4f}" not in shown, f"{path.name} prints Exercise {exercise}'s {name} ({v:.4f})"


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
