"""Readable notebook output at the source (trgrpo/notebook.py, issue 17)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    import os

    e = {k: v for k, v in {**os.environ, "PYTHONPATH": str(ROOT), **env}.items() if v != "<unset>"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=120)


def test_dependency_future_warnings_are_filtered_ours_are_not():
    code = (
        "import warnings, types, sys\n"
        "from trgrpo.notebook import setup; setup('x', root='.')\n"
        "m = types.ModuleType('transformers.fake'); sys.modules['transformers.fake'] = m\n"
        "exec(\"import warnings\\ndef f(): warnings.warn('old api', FutureWarning)\", m.__dict__)\n"
        "m.f()\n"
        "warnings.warn('ours', FutureWarning)\n"
    )
    r = _run(code)
    assert "old api" not in r.stderr and "ours" in r.stderr, r.stderr


def test_headless_turns_progress_bars_off_and_interactive_keeps_them():
    code = (
        "import os; from trgrpo.notebook import setup; setup('x', root='.')\n"
        "print(os.environ.get('TQDM_DISABLE'), os.environ.get('HF_HUB_DISABLE_PROGRESS_BARS'))"
    )
    assert _run(code, TRGRPO_HEADLESS="1").stdout.split()[-2:] == ["1", "1"]
    r = _run(code, TRGRPO_HEADLESS="0", TQDM_DISABLE="<unset>", HF_HUB_DISABLE_PROGRESS_BARS="<unset>")
    assert r.stdout.split()[-2:] == ["None", "None"], r.stdout  # JupyterLab: the bars stay on


def _status_prints(tree) -> list:
    """``print`` calls whose text starts with a ``[tag]`` (``[trgrpo] ...``, ``[toy] ...``): status lines."""
    import ast

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print" and node.args:
            first = node.args[0]
            part = first.values[0] if isinstance(first, ast.JoinedStr) and first.values else first
            if isinstance(part, ast.Constant) and isinstance(part.value, str) and part.value.startswith("["):
                out.append(node)
    return out


def test_status_lines_go_to_stdout():
    """Status lines print to stdout (a notebook shows stderr in red, as if it were an error); error messages of
    command lines may still go to stderr."""
    import ast

    found, on_stderr = 0, []
    for path in sorted((ROOT / "trgrpo").rglob("*.py")):
        for call in _status_prints(ast.parse(path.read_text())):
            found += 1
            if any(k.arg == "file" and "stderr" in ast.unparse(k.value) for k in call.keywords):
                on_stderr.append(f"{path.relative_to(ROOT)}:{call.lineno}")
    assert found >= 5, "no status line found: has the [tag] convention changed?"
    assert not on_stderr, f"status lines printed to stderr: {on_stderr}"


def test_save_headline_writes_everything_and_prints_at_most_ten_lines(tmp_path, capsys):
    import json
    import math

    import pytest

    from trgrpo.notebook import Notebook

    nb = Notebook("03_x", False, tmp_path)
    headline = {f"s{i}": i + 0.123456 for i in range(12)}
    headline["nested"] = {"a": [1, 2, 3], "b": {"c": 1}}
    headline["nan"] = math.nan
    path = nb.save_headline(headline)
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) <= 10
    assert printed[0] == f"saved to {path}"
    assert "  s0: 0.1235" in printed and not any("nested" in line for line in printed)
    assert printed[-1] == "  (+7 more entries in the file)"  # 15: the 14 given and the provenance
    rec = json.loads(path.read_text())
    assert rec["nested"] == headline["nested"] and rec["nan"] is None and len(rec) == 15
    nb.save_headline(headline, keys=["s3", "nested", "s1"])
    shown = capsys.readouterr().out.splitlines()[1:]
    assert shown == ["  s3: 3.123", "  s1: 1.123", "  (+13 more entries in the file)"]
    path.unlink()
    with pytest.raises(KeyError, match="missing"):
        nb.save_headline(headline, keys=["missing"])
    with pytest.raises(TypeError, match="headline"):
        nb.save_headline([1])
    assert not path.exists(), "a bad headline or key writes nothing"
