"""Every notebook: executes headless in smoke mode (papermill), holds no ``def``/``class``, has the conventions
of DESIGN.md (versions printed first, a ``parameters`` cell reading ``TRGRPO_SMOKE``), and is committed stripped.

The smoke executions are marked ``notebook``; each writes its executed copy into a pytest tmp dir. Notebooks
write figures/ and results/notebooks/ in the repository while they run: that is expected (``make run``
regenerates them).
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trgrpo import course

from .nbexec import execute_smoke

ROOT = Path(__file__).resolve().parents[1]
NB_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("[0-9][0-9]_*.ipynb")) + sorted((NB_DIR / "solutions").glob("*.ipynb"))
STRIP_KEYS = "metadata.papermill cell.metadata.papermill cell.metadata.execution"
# Smoke-mode time limits (seconds, on 2 shared cores, kernel start included); the default for others.
TIMEOUTS = {"01_": 300, "02_": 120}
DEFAULT_TIMEOUT = 900
SMOKE_RE = re.compile(r"""SMOKE\s*=\s*os\.environ\.get\(\s*["']TRGRPO_SMOKE["']""")

nbformat = pytest.importorskip("nbformat")


def _ids(paths):
    return [str(p.relative_to(NB_DIR)) for p in paths]


def _read(path: Path):
    return nbformat.read(str(path), as_version=4)


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def _python_source(src: str) -> str:
    """Cell source with IPython cell magics dropped and line magics / shell escapes blanked out."""
    if src.lstrip().startswith("%%"):
        return ""
    return "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in src.splitlines())


def test_there_are_notebooks():
    assert NOTEBOOKS, "no notebooks/[0-9][0-9]_*.ipynb found"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_no_def_or_class_in_notebook_cells(path):
    """All logic lives in trgrpo/: notebook code cells define no functions or classes. The one exception: the
    solution cells of an exercise of kind ``implement`` (the exercise asks the student to write code)."""
    nb = _read(path)
    bad = []
    kind = None
    for i, cell in enumerate(nb.cells):
        heading = course.exercise_heading(cell)
        kind = heading["kind"] if heading else kind
        if cell.cell_type != "code" or (kind == "implement" and "solution" in course.tags(cell)):
            continue
        try:
            tree = ast.parse(_python_source(cell.source))
        except SyntaxError as exc:
            pytest.fail(f"{path.name} cell {i}: not valid Python ({exc})")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bad.append(f"cell {i} line {node.lineno}: {type(node).__name__} {node.name}")
    assert not bad, f"{path.name} defines functions/classes (move them into trgrpo/): {bad}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_conventions_versions_first_and_parameters_cell(path):
    nb = _read(path)
    cells = _code_cells(nb)
    assert len(cells) >= 2, f"{path.name}: needs at least the versions cell and the parameters cell"
    first = cells[0].source
    assert "print(" in first and ("version" in first.lower()), f"{path.name}: first code cell must print versions"
    tagged = [c for c in cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: expected exactly one code cell tagged 'parameters', got {len(tagged)}"
    assert cells[1] is tagged[0], f"{path.name}: the parameters cell must be the second code cell"
    assert SMOKE_RE.search(tagged[0].source), f"{path.name}: the parameters cell must set SMOKE from TRGRPO_SMOKE"
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3", f"{path.name}: kernelspec must be python3"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_committed_stripped(path):
    """No outputs, execution counts or papermill metadata (``nbstripout --verify`` with the project's keys)."""
    nb = _read(path)
    kept = [c for c in _code_cells(nb) if c.source.startswith("# NBVAL_CHECK_OUTPUT")]  # nbval compares their output
    for i, cell in enumerate(_code_cells(nb)):
        if cell in kept:
            continue
        assert not cell.get("outputs"), f"{path.name} code cell {i} has outputs: run `make strip`"
        assert cell.get("execution_count") is None, f"{path.name} code cell {i} has an execution_count"
        assert "papermill" not in cell.metadata and "execution" not in cell.metadata, f"{path.name} cell {i}"
    assert "papermill" not in nb.metadata and "widgets" not in nb.metadata, f"{path.name}: notebook metadata"
    exe = shutil.which("nbstripout", path=str(Path(sys.executable).parent)) or shutil.which("nbstripout")
    if exe and not kept:
        r = subprocess.run([exe, "--verify", "--extra-keys", STRIP_KEYS, str(path)], capture_output=True, text=True)
        assert r.returncode == 0, f"{path.name} is not stripped (run `make strip`): {r.stdout}{r.stderr}"


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_executes_in_smoke_mode(path, tmp_path, monkeypatch):
    timeout = next((t for k, t in TIMEOUTS.items() if path.name.startswith(k)), DEFAULT_TIMEOUT)
    out = tmp_path / path.name
    t0 = time.time()
    execute_smoke(path, out, monkeypatch, timeout)
    seconds = time.time() - t0
    assert seconds < timeout, f"{path.name} took {seconds:.0f} s in smoke mode (limit {timeout} s)"
    executed = _read(out)
    errors = [o for c in _code_cells(executed) for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, f"{path.name}: {errors[0].get('ename')}: {errors[0].get('evalue')}"
    print(f"{path.name}: smoke run {seconds:.1f} s")
