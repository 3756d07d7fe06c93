"""Notebooks 00, 02 and 03 as a student runs them: what their outputs show and what a run leaves behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from trgrpo import course

from .nbexec import execute_smoke

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # notebook 03 in smoke mode: 3.5 min on 2 busy cores
@pytest.mark.notebook
def test_the_smoke_run_of_03_leaves_nothing_in_the_temporary_folder(tmp_path, monkeypatch):
    """Issue 38: each smoke run of 03 left 14 MB in /tmp/trgrpo-03-smoke-*; its folder goes when the kernel exits."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))  # the kernel's tempfile writes here
    execute_smoke(ROOT / "notebooks" / "03_toy_runs.ipynb", tmp_path / "03.ipynb", monkeypatch, timeout=600)
    assert (tmp_path / "03.ipynb").is_file()
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
    for exercise, spec in course.load_answers().items():
        try:
            want = spec["reference"]({})
        except KeyError:  # computed from the notebook's data: those are not printed by the notebook's own cells
            continue
        path = next(p for p in course.main_notebooks() if p.name.startswith(f"{int(exercise.split('.')[0]):02d}_"))
        shown = "\n".join(_shown(c) for c in course.read(path).cells if c.cell_type == "code")
        for name, v in want.items():
            if isinstance(v, float) and v != round(v, 2):
                assert f"{v:.4f}" not in shown, f"{path.name} prints Exercise {exercise}'s {name} ({v:.4f})"
