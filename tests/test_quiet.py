"""A newcomer's `make run` prints progress and results, not warnings: papermill parses every parameters cell, and
the kernels that trgrpo.runs.batch starts do not warn about TCP without encryption."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from course import workbooks
from trgrpo.runs import batch

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) + sorted(
    (ROOT / "notebooks" / "solutions").glob("*.ipynb")
)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_papermill_parses_every_parameters_cell(path, caplog):
    """papermill skips (and warns about) a parameters-cell line with more than one '=', comments included."""
    translators = pytest.importorskip("papermill.translators")
    cell = next(c for c in workbooks.read(path).cells if "parameters" in workbooks.tags(c))
    with caplog.at_level(logging.WARNING, logger="papermill"):
        params = translators.PythonTranslator.inspect(cell)
    assert not [r.getMessage() for r in caplog.records if "Unable to parse" in r.getMessage()]
    assert "SMOKE" in {p.name for p in params}, f"{path.name}: papermill does not see SMOKE as a parameter"


def test_a_line_papermill_cannot_parse_is_detected(caplog):
    """The check above can fail: the kind of line it guards against."""
    translators = pytest.importorskip("papermill.translators")
    with caplog.at_level(logging.WARNING, logger="papermill"):
        translators.PythonTranslator.inspect({"source": "THREADS = 0  # 0 = all cores"})
    assert any("Unable to parse" in r.getMessage() for r in caplog.records)


def test_kernels_use_ipc_sockets():
    transport = batch.kernel_config().KernelManager.transport
    assert transport == ("tcp" if os.name == "nt" else "ipc")


@pytest.mark.notebook
@pytest.mark.skipif(os.name == "nt", reason="no IPC transport on Windows")
def test_run_notebook_prints_no_encryption_warning(tmp_path, capfd):
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [
        nbformat.v4.new_code_cell(
            'import os\nSMOKE = os.environ.get("TRGRPO_SMOKE", "0") != "0"', metadata={"tags": ["parameters"]}
        ),
        nbformat.v4.new_code_cell("print('smoke' if SMOKE else 'full')"),
    ]
    nbformat.write(nb, str(tmp_path / "q.ipynb"))
    row = batch.run_notebook(tmp_path / "q.ipynb", tmp_path / "out", smoke=True, timeout=120)
    assert row["ok"], row
    err = capfd.readouterr().err
    assert "without encryption" not in err and "Unable to parse" not in err, err
