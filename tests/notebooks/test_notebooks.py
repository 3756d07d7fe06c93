"""Every notebook: holds no ``def``/``class``, has the conventions of docs/design.md (versions printed first, a
``parameters`` cell reading ``TRGRPO_SMOKE``), and is committed stripped except for the stored outputs of its
cells tagged ``nbval-check-output``.

The notebooks themselves are executed by nbval, as test items of their own (``pytest notebooks/``, in `make
test`; tests/nbval_harness.py): smoke mode, per-notebook time limits, checked outputs, no FutureWarning or
traceback. Notebooks write their headlines and figures into the git-ignored runs/ while they run (``make records``
promotes a full-mode run into results/notebooks/ and figures/).
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from course import workbooks
from tests.nbval_harness import CHECK_TAG, has_check_comment, is_checked

ROOT = Path(__file__).resolve().parents[2]
NB_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("[0-9][0-9]_*.ipynb")) + sorted((NB_DIR / "solutions").glob("*.ipynb"))
STRIP_KEYS = "metadata.papermill cell.metadata.papermill cell.metadata.execution"
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
    """All logic lives in trgrpo/: notebook code cells define no functions or classes. The exceptions: the
    solution cells of an exercise of kind ``implement`` (the exercise asks the student to write code), and cells
    tagged ``derivation`` (an equation written out, checked against the library by the next cell)."""
    nb = _read(path)
    bad = []
    kind = None
    for i, cell in enumerate(nb.cells):
        heading = workbooks.exercise_heading(cell)
        kind = heading["kind"] if heading else kind
        if cell.cell_type != "code" or (kind == "implement" and "solution" in workbooks.tags(cell)):
            continue
        if workbooks.DERIVATION in workbooks.tags(cell):
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
    """No execution counts or papermill metadata, and no outputs except those nbval compares: the cells marked
    tagged ``nbval-check-output`` keep theirs (``nbstripout --verify`` with the project's keys agrees)."""
    nb = _read(path)
    for i, cell in enumerate(_code_cells(nb)):
        if not is_checked(cell):
            assert not cell.get("outputs"), f"{path.name} code cell {i} has outputs: run `make strip`"
        assert cell.get("execution_count") is None, f"{path.name} code cell {i} has an execution_count"
        assert "papermill" not in cell.metadata and "execution" not in cell.metadata, f"{path.name} cell {i}"
    assert "papermill" not in nb.metadata and "widgets" not in nb.metadata, f"{path.name}: notebook metadata"


def test_nbstripout_finds_every_notebook_stripped():
    """``nbstripout --verify`` with the project's keys (what `make strip` runs) agrees with the checks above, for every
    notebook in one process (one start-up, not one per notebook)."""
    exe = shutil.which("nbstripout", path=str(Path(sys.executable).parent)) or shutil.which("nbstripout")
    assert exe, "nbstripout is not installed: make setup"
    r = subprocess.run(
        [exe, "--verify", "--extra-keys", STRIP_KEYS, *map(str, NOTEBOOKS)], capture_output=True, text=True
    )
    assert r.returncode == 0, f"not stripped (run `make strip`): {r.stdout}{r.stderr}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_checked_cells_store_a_clean_text_output(path):
    """A cell tagged ``nbval-check-output`` stores the output nbval compares, and nbstripout keeps it (cell metadata
    ``keep_output``); the output is text (no image, no error), and only checked cells are kept. The mark is the tag,
    never nbval's ``# NBVAL_CHECK_OUTPUT`` comment: the reader of a lesson sees no test machinery in its code."""
    for i, cell in enumerate(_code_cells(_read(path))):
        checked, kept = is_checked(cell), bool(cell.metadata.get("keep_output"))
        where = f"{path.name} code cell {i}"
        assert not has_check_comment(cell.source), f"{where}: replace `# NBVAL_CHECK_OUTPUT` by the tag {CHECK_TAG}"
        assert checked == kept, (
            f"{where}: the tag {CHECK_TAG} and metadata keep_output go together "
            f"(refresh with `python -m tests.nbexec refresh {path.relative_to(ROOT)}`)"
        )
        if not checked:
            continue
        outs = cell.get("outputs", [])
        assert outs, f"{where} is checked but stores no output: `python -m tests.nbexec refresh ...`"
        for o in outs:
            assert o.output_type in ("stream", "execute_result", "display_data"), f"{where}: {o.output_type}"
            assert o.output_type != "stream" or o.name == "stdout", f"{where}: a checked cell writes to stderr"
            images = [k for k in o.get("data", {}) if k.startswith("image/")]
            assert not images, f"{where}: checked cells store text, not {images} (show figures in another cell)"


def test_make_test_runs_every_notebook_with_nbval(pytestconfig):
    """`make test` is `pytest` with pyproject.toml's options: nbval in lax mode over notebooks/, sanitized."""
    assert pytestconfig.getoption("nbval_lax"), "pyproject.toml addopts must pass --nbval-lax"
    assert "notebooks" in pytestconfig.getini("testpaths")
    sanitize = pytestconfig.getoption("nbval_sanitize_with")
    assert sanitize and Path(sanitize).is_file(), sanitize
    # what nbval collects under notebooks/ (pytest skips dot folders such as .ipynb_checkpoints) is exactly the
    # numbered notebooks and the solutions, which the convention tests above cover
    collected = {p for p in NB_DIR.rglob("*.ipynb") if not any(part.startswith(".") for part in p.parts)}
    assert collected == set(NOTEBOOKS), sorted(str(p.relative_to(NB_DIR)) for p in collected ^ set(NOTEBOOKS))
