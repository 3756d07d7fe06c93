"""Notebooks as a student runs them: what a run at its defaults or in smoke mode leaves behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


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


def _run(args, cwd=ROOT, **env):
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=full, capture_output=True, text=True, timeout=300)


def _status():
    out = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout


@pytest.mark.slow  # about 30 s on 2 busy cores
@pytest.mark.notebook
def test_a_notebook_at_its_defaults_rewrites_no_tracked_file(tmp_path):
    """Notebook 02 at its defaults (full mode, about 6 s), executed as `make run` does: ``git status`` is what it was;
    its headline lands in runs/notebooks/ and names the commit and whether the tree was clean."""
    before = _status()
    head = ROOT / "runs" / "notebooks" / "02_token_weight_function.json"
    head.unlink(missing_ok=True)
    r = _run(["-m", "papermill", "--no-progress-bar", "notebooks/02_token_weight_function.ipynb",
              str(tmp_path / "02.ipynb"), "-k", "python3"], TRGRPO_SMOKE="0", TRGRPO_HEADLESS="1")  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert _status() == before, "the run rewrote a tracked file"
    prov = json.loads(head.read_text())["provenance"]
    assert len(prov["git_commit"]) == 40 and isinstance(prov["git_dirty"], bool)
    assert (ROOT / "runs" / "figures" / "02_weight_function.png").is_file()
