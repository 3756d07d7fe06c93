"""Execute a notebook headless in smoke mode, as `make test` does for every notebook (tests/test_notebooks.py) and
for the student copy (tests/test_course.py): papermill, ``TRGRPO_SMOKE=1``, offline, no live widgets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trgrpo import batch

ROOT = Path(__file__).resolve().parents[1]


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
