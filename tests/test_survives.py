"""Work that survives (issue "course"): a notebook at its defaults rewrites no tracked file (its headline and
figures go to the git-ignored runs/, with the commit and a clean-tree flag), the committed records change only
through ``trgrpo records``, and ``make student`` keeps a workbook the student changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from course import workbooks
from trgrpo.runs import records

ROOT = Path(__file__).resolve().parents[1]


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


def _fake_checkout(root: Path, dirty: bool) -> None:
    (root / "notebooks").mkdir(parents=True)
    (root / "notebooks" / "01_a.ipynb").write_text("{}")
    (root / "runs" / "notebooks").mkdir(parents=True)
    (root / "runs" / "figures").mkdir(parents=True)
    head = {"x": 1, "provenance": {"git_commit": "c" * 40, "git_dirty": dirty}}
    (root / "runs" / "notebooks" / "01_a.json").write_text(json.dumps(head))
    (root / "runs" / "notebooks" / "01_a_smoke.json").write_text("{}")
    (root / "runs" / "notebooks" / "01_a_solutions.json").write_text("{}")
    (root / "runs" / "figures" / "01_f.png").write_bytes(b"png")
    (root / "runs" / "figures" / "01_f_smoke.png").write_bytes(b"png")


def test_records_promotes_full_mode_headlines_and_figures_only(tmp_path):
    _fake_checkout(tmp_path, dirty=False)
    copied = records.promote_records(tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in copied) == [
        "figures/01_f.png",
        "results/notebooks/01_a.json",
    ]
    assert json.loads((tmp_path / "results" / "notebooks" / "01_a.json").read_text())["x"] == 1


def test_records_refuses_a_headline_of_an_uncommitted_tree(tmp_path):
    _fake_checkout(tmp_path, dirty=True)
    with pytest.raises(ValueError, match="01_a.json"):
        records.promote_records(tmp_path)
    assert not (tmp_path / "results").exists() and not (tmp_path / "figures").exists(), "nothing copied"
    assert len(records.promote_records(tmp_path, allow_dirty=True)) == 2


@pytest.mark.slow  # 16 s on 2 busy cores: the command as typed, in a subprocess
def test_make_student_keeps_a_changed_workbook_and_says_so(tmp_path):
    out = tmp_path / "student"
    assert workbooks.write_student_copy(out)[1] == [], "a fresh folder: nothing kept"
    mine = out / "exercises" / "02_token_weight_function_exercises.ipynb"
    nb = json.loads(mine.read_text())
    nb["cells"][1]["source"] = "my answer"
    mine.write_text(json.dumps(nb))
    untouched = out / "01_gradient_norm_theorem.ipynb"
    untouched.write_text(untouched.read_text())  # rewritten byte for byte: not a change
    second = _run(["-m", "trgrpo", "course", "student", "--out", str(out)])
    assert second.returncode == 0, second.stderr[-2000:]
    assert f"kept your changed {mine}" in second.stdout and second.stdout.count("kept") == 1, second.stdout
    assert json.loads(mine.read_text())["cells"][1]["source"] == "my answer"
    assert mine.with_suffix(".new.ipynb").is_file()
