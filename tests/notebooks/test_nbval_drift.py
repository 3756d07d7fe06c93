"""The notebook harness can fail: nbval catches a library change that alters a number a notebook teaches, and the
harness catches noisy output, a late notebook and a stale allow-list (tests/nbval_harness.py).

Each test runs pytest with nbval in a subprocess, as `make test` runs it, and reads its report.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.nbval_harness import CHECK_TAG

ROOT = Path(__file__).resolve().parents[2]
NB02 = ROOT / "notebooks" / "02_token_weight_function.ipynb"
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbval")


def _pytest(args: list[str], env: dict[str, str] | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    """``python -m pytest`` with the project's configuration, from the repository root (the harness is loaded
    explicitly, as notebooks outside the repository do not see its top-level conftest.py)."""
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-c",
        str(ROOT / "pyproject.toml"),
        "--rootdir",
        str(ROOT),
        "-p",
        "tests.nbval_harness",
        "-q",
        "-rA",
        "--color=no",
        "--nbval-lax",
        *args,
    ]
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        cmd, cwd=ROOT, env={**full_env, **(env or {})}, capture_output=True, text=True, timeout=timeout
    )


def _notebook(path: Path, cells: list[str], outputs: dict[int, str] | None = None) -> Path:
    """A notebook of code cells; ``outputs`` maps a cell to the stdout it stores, checked by nbval (tag
    ``nbval-check-output``) and kept as nbstripout keeps it (metadata ``keep_output``)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for i, src in enumerate(cells):
        cell = nbformat.v4.new_code_cell(src)
        if outputs and i in outputs:
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=outputs[i])]
            cell.metadata["keep_output"] = True
            cell.metadata["tags"] = [CHECK_TAG]
        nb.cells.append(cell)
    nbformat.write(nb, str(path))
    return path


@pytest.mark.slow  # 12 s: the harness's own test
def test_nbval_fails_on_notebook_02_when_a_library_default_changes(tmp_path):
    """Change one library value in the kernel of a subprocess, Eq. 11's default mu (0.25 -> 0.3, in WeightParams), and
    run notebook
    02 under nbval: the checked cell that prints the README's `token_weights([0.05, 0.2, 0.6])` fails, and the
    report shows the stored and the new value side by side."""
    from trgrpo import WeightParams

    assert WeightParams.model_fields["mu"].default == 0.25, (
        "this test changes WeightParams' default mu (Eq. 11's defaults); update it to the class"
    )
    # an IPython startup file runs in the notebook's kernel before its first cell
    startup = tmp_path / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-drift.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nfrom trgrpo import WeightParams\n"
        "WeightParams.model_fields['mu'].default = 0.3  # drift: one library value changes\n"
        "WeightParams.model_rebuild(force=True)\n"
    )
    r = _pytest(["-x", str(NB02)], env={"IPYTHONDIR": str(tmp_path / "ipython")})
    report = r.stdout + r.stderr
    assert r.returncode == 1, report[-3000:]
    assert "1 failed" in report and "Cell outputs differ" in report, report[-3000:]
    failed = [ln for ln in report.splitlines() if ln.startswith("FAILED")]
    assert len(failed) == 1 and "02_token_weight_function.ipynb::Cell" in failed[0], failed
    # readable: the stored value and the drifted one, w(0.2) = 2 (sigmoid(1.8) - mu) = 1.2163 -> 1.1163
    assert "+ = [1.0, 1.2163, 1.4]" in report and "- = [1.0, 1.1163, 1.391]" in report, report[-3000:]
    assert "'+' lines are the output stored in 02_token_weight_function.ipynb" in report
    assert "python -m tests.nbexec refresh notebooks/02_token_weight_function.ipynb" in report


@pytest.mark.slow  # 12 s: the harness's own test
def test_harness_smoke_env_clean_output_allow_list_and_time_limit(tmp_path):
    """One nbval run over six small notebooks: the kernel sees the smoke environment and a checked cell (tag
    ``nbval-check-output``) with a stripped execution count is compared, and fails when its output changed; a
    FutureWarning or a printed traceback fails its cell; in a notebook of the allow-list it is an xfail, and a
    listed notebook that runs clean warns (the list must shrink); a notebook over its time limit fails with its
    time."""
    (tmp_path / "harness_setup.py").write_text(  # the allow-list and a time limit of this test
        "import tests.nbval_harness as h\n"
        "h.NOISY_NOTEBOOKS = frozenset({'listed_noisy.ipynb', 'listed_clean.ipynb'})\n"
        "h.TIME_LIMITS = {'slow': 2}\n"
    )
    env_nb = _notebook(
        tmp_path / "env.ipynb",
        ["import os\nprint(os.environ['TRGRPO_SMOKE'], os.environ['TRGRPO_HEADLESS'], os.environ['HF_HUB_OFFLINE'])"],
        outputs={0: "1 1 1\n"},
    )
    warn = "import warnings\nwarnings.warn('an old argument', FutureWarning)"
    noisy = _notebook(
        tmp_path / "noisy.ipynb",
        [warn, "import traceback\ntry:\n    1 / 0\nexcept ZeroDivisionError:\n    traceback.print_exc()", "x = 1"],
    )
    listed_noisy = _notebook(tmp_path / "listed_noisy.ipynb", [warn, "x = 1"])
    listed_clean = _notebook(tmp_path / "listed_clean.ipynb", ["x = 1", "y = 2"])
    slow = _notebook(tmp_path / "slow.ipynb", ["import time\ntime.sleep(3)"])
    drift = _notebook(tmp_path / "drift.ipynb", ["print(2)"], outputs={0: "1\n"})  # tagged: its output must match
    paths = [str(p) for p in (env_nb, noisy, listed_noisy, listed_clean, slow, drift)]
    path = os.pathsep.join(filter(None, [str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH")]))
    r = _pytest(["-p", "harness_setup", *paths], env={"PYTHONPATH": path, "TRGRPO_SMOKE": "0", "TRGRPO_HEADLESS": "0"})
    report = r.stdout + r.stderr
    assert "4 failed, 5 passed, 1 xfailed, 1 warning" in report, report[-3000:]
    assert "Cell outputs differ" in report and "stored in drift.ipynb" in report, report[-3000:]
    assert "noisy.ipynb cell 0 prints stderr:" in report and "FutureWarning: an old argument" in report
    assert "noisy.ipynb cell 1 prints stderr: Traceback (most recent call last)" in report
    assert "listed_noisy.ipynb cell 0 prints stderr:" in report and "(listed in NOISY_NOTEBOOKS" in report
    assert "StaleAllowListWarning: listed_clean.ipynb ran without FutureWarning or traceback: remove it" in report
    assert "slow.ipynb took" in report and "(limit 2 s)" in report
