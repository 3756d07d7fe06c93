"""Notebook executions outside nbval: the student copy's smoke runs (tests/course/test_workbooks.py, papermill, as
``trgrpo.batch`` runs notebooks) and refreshing the stored outputs of checked cells on purpose.

Refresh: ``python -m tests.nbexec refresh notebooks/02_token_weight_function.ipynb [...]`` (or ``make
refresh-checked NB=...``) executes the notebook in smoke mode, as `make test` does, stores the new output of
every cell tagged ``nbval-check-output``, and strips everything else as ``make strip`` does. Review the diff: it is
exactly what a reader of the notebook will see change.
"""

from __future__ import annotations

import argparse
import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.nbval_harness import is_checked, smoke_env, time_limit
from trgrpo.runs import batch
from trgrpo.runs.batch import environment

ROOT = Path(__file__).resolve().parents[1]
STRIP_KEYS = "metadata.papermill cell.metadata.papermill cell.metadata.execution"  # as `make strip`


def execute_smoke(path: Path, out: Path, monkeypatch: pytest.MonkeyPatch, timeout: int):
    """Run ``path`` into ``out`` with the kernel's cwd at the notebook's folder; papermill's errors propagate."""
    pm = pytest.importorskip("papermill")
    monkeypatch.setenv("TRGRPO_SMOKE", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    for k, v in {**batch.HEADLESS_ENV, **batch.OFFLINE_ENV}.items():  # offline, and no live widgets (as `make run`)
        monkeypatch.setenv(k, v)
    return pm.execute_notebook(
        str(path),
        str(out),
        parameters={"SMOKE": True},
        cwd=str(path.parent),
        kernel_name="python3",
        progress_bar=False,
        execution_timeout=timeout,
    )


def strip(path: Path) -> None:
    """``make strip`` for one notebook: nbstripout keeps the outputs of cells with metadata ``keep_output``."""
    subprocess.run([sys.executable, "-m", "nbstripout", "--extra-keys", STRIP_KEYS, str(path)], check=True)


def refresh_checked_outputs(path: Path) -> list[int]:
    """Execute ``path`` in smoke mode and store the outputs of its checked cells in the file; return their
    indices among the code cells. A cell error aborts without writing."""
    import nbformat
    from nbclient import NotebookClient
    from nbval.plugin import coalesce_streams

    path = Path(path).resolve()
    nb = nbformat.read(str(path), as_version=4)
    run = copy.deepcopy(nb)
    env = {**smoke_env(), "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with environment(**env):
        where = {"metadata": {"path": str(path.parent)}}  # the kernel's cwd, as nbval and papermill set it
        NotebookClient(run, timeout=int(time_limit(path.name)), kernel_name="python3", resources=where).execute()
    checked = []
    code = [(c, r) for c, r in zip(nb.cells, run.cells) if c.cell_type == "code"]
    for i, (cell, done) in enumerate(code):
        if is_checked(cell):
            cell.outputs = coalesce_streams(done.outputs)
            cell.metadata["keep_output"] = True
            checked.append(i)
        else:
            cell.outputs = []
            cell.metadata.pop("keep_output", None)
    nbformat.write(nb, str(path))
    strip(path)
    return checked


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.nbexec", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ref = sub.add_parser("refresh", help="store the new outputs of the nbval-check-output cells of notebooks")
    ref.add_argument("notebooks", nargs="+", type=Path)
    args = ap.parse_args(argv)
    for nb in args.notebooks:
        cells = refresh_checked_outputs(nb)
        print(f"{nb}: stored the outputs of checked code cells {cells}; review with `git diff {nb}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
