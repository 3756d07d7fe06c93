"""How `make test` runs the notebooks: nbval (``--nbval-lax``, pyproject.toml) with the project's rules on top.

nbval executes every code cell of a collected notebook as one pytest item, in one kernel per notebook, and
compares the output of the cells tagged ``nbval-check-output`` (cell metadata, so the reader sees no test marker
in the code) with the output stored in the committed notebook (after the regexes of ``tests/nbval_sanitize.cfg``).
This plugin (loaded by the top-level ``conftest.py``, so it also applies to ``pytest notebooks/02_*.ipynb``) adds:

* the smoke environment: the kernel starts with ``TRGRPO_SMOKE=1``, headless (no live widgets) and offline, as
  ``trgrpo.batch`` runs notebooks (:func:`smoke_env`);
* a time limit per notebook (kernel start included, :data:`TIME_LIMITS`): each cell gets what is left of it as
  its timeout, and a notebook that finishes late fails;
* clean output: a cell whose stdout/stderr holds a ``FutureWarning`` or a Python traceback fails, except in the
  notebooks of :data:`NOISY_NOTEBOOKS`, where it is an expected failure (xfail) until the notebook is clean (a
  listed notebook that runs clean warns, so that the list is emptied);
* checked cells with a stored output are compared although nbstripout removed their execution count (nbval
  would otherwise treat them as never run and skip the comparison);
* every nbval item gets the ``notebooks`` marker (the test tiers, ``tests/conftest.py``).

Refresh a checked output on purpose: ``python -m tests.nbexec refresh notebooks/<name>.ipynb`` (README).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECK_TAG = "nbval-check-output"  # nbval's cell tag for "compare this output", also under --nbval-lax

# Smoke-mode time limits (seconds, on 2 shared cores, kernel start included) by file-name prefix; others: default.
TIME_LIMITS = {"01_": 300, "02_": 120}
DEFAULT_TIME_LIMIT = 900

# Noise that must not reach a reader: library FutureWarnings and tracebacks printed by caught exceptions.
NOISE_RE = re.compile(r"FutureWarning|Traceback \(most recent call last\)")

# Notebooks whose smoke run may still print such noise (reported as xfail; a listed notebook that runs clean raises
# a warning asking to remove it). Empty: every notebook fails on noise (05-07 were listed until their output was
# cleaned at the source, trgrpo/notebook.py).
NOISY_NOTEBOOKS: frozenset[str] = frozenset()


class StaleAllowListWarning(UserWarning):
    """A notebook of :data:`NOISY_NOTEBOOKS` ran without noise: remove it from the list."""


def smoke_env() -> dict[str, str]:
    """The environment of a smoke execution: ``TRGRPO_SMOKE=1``, headless and offline (as ``trgrpo.runs.batch``)."""
    from trgrpo.runs import batch

    return {"TRGRPO_SMOKE": "1", **batch.HEADLESS_ENV, **batch.OFFLINE_ENV}


def time_limit(name: str) -> float:
    """The smoke-mode time limit (seconds) of the notebook file ``name``."""
    return next((t for k, t in TIME_LIMITS.items() if name.startswith(k)), DEFAULT_TIME_LIMIT)


def is_checked(cell) -> bool:
    """Whether nbval compares a cell's output: the cell is tagged ``nbval-check-output``."""
    return CHECK_TAG in (cell.get("metadata", {}).get("tags") or [])


def has_check_comment(source: str) -> bool:
    """Whether a cell's source carries nbval's ``# NBVAL_CHECK_OUTPUT`` comment, which the notebooks do not use
    (nbval honours it too, but it shows a test marker to the reader: tag the cell instead)."""
    lines = (ln.strip() for ln in source.splitlines())
    return any(ln.startswith("#") and ln.lstrip("#").strip() == "NBVAL_CHECK_OUTPUT" for ln in lines)


def noise(outputs) -> list[str]:
    """The stream outputs (stdout or stderr) of a cell that hold a FutureWarning or a traceback, shortened."""
    found = []
    for out in outputs or []:
        if out.get("output_type") == "stream" and NOISE_RE.search(out.get("text", "")):
            lines = [ln for ln in out["text"].splitlines() if NOISE_RE.search(ln)]
            found.append(f"{out.get('name')}: {lines[0].strip()[:200]}")
    return found


def _is_nbval_cell(item: pytest.Item) -> bool:
    try:
        from nbval.plugin import IPyNbCell
    except ImportError:  # nbval not installed: nothing of this plugin applies
        return False
    return isinstance(item, IPyNbCell)


def _key(item: pytest.Item) -> str:
    return str(item.parent.path)  # not the node id: notebooks outside the rootdir all get an empty one


class _Run:
    """Per-notebook state (by path): start time, whether noise was seen, the name of its last collected cell."""

    def __init__(self) -> None:
        self.start: dict[str, float] = {}
        self.noisy: dict[str, bool] = {}
        self.last_cell: dict[str, str] = {}


_RUN = _Run()


def pytest_configure(config: pytest.Config) -> None:
    # the sanitize file is named relative to the repository root in pyproject.toml; make it work from anywhere
    opt = config.option
    sanitize = getattr(opt, "nbval_sanitize_with", None)
    if sanitize and not Path(sanitize).is_file() and (config.rootpath / sanitize).is_file():
        opt.nbval_sanitize_with = str(config.rootpath / sanitize)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _is_nbval_cell(item):
            item.add_marker(pytest.mark.notebooks)
            if item.cell.get("outputs") and item.cell.get("execution_count") is None and is_checked(item.cell):
                # nbstripout keeps the outputs of `keep_output` cells but drops their execution count; nbval
                # compares only cells that were run, so give the in-memory copy a count (the file is unchanged)
                item.cell["execution_count"] = 1


def pytest_collection_finish(session: pytest.Session) -> None:
    for item in session.items:
        if _is_nbval_cell(item):
            _RUN.last_cell[_key(item)] = item.name


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    if not _is_nbval_cell(item) or _key(item) in _RUN.start:
        return (yield)
    # the first cell of a notebook: nbval starts the kernel in this setup, with our environment
    _RUN.start[_key(item)] = time.monotonic()
    _RUN.noisy[_key(item)] = False
    from trgrpo.runs import batch

    with batch.environment(**smoke_env()):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    if not _is_nbval_cell(item):
        return (yield)
    nb = Path(str(item.parent.path)).name
    key = _key(item)
    limit = time_limit(nb)
    left = limit - (time.monotonic() - _RUN.start.get(key, time.monotonic()))
    item.config.option.nbval_cell_timeout = max(left, 1.0)  # nbval reads it when the cell starts
    try:
        result = yield  # a cell error or an output mismatch propagates unchanged, unless the time is up
    finally:
        elapsed = time.monotonic() - _RUN.start.get(key, time.monotonic())
        if elapsed > limit:  # nbval's own message would name the cell's share of the time only
            pytest.fail(f"{nb} took {elapsed:.0f} s in smoke mode by cell {item.cell_num} (limit {limit} s)")
    found = noise(item.test_outputs)
    if found:
        _RUN.noisy[key] = True
        msg = f"{nb} cell {item.cell_num} prints {'; '.join(found)}"
        if nb in NOISY_NOTEBOOKS:
            pytest.xfail(f"{msg} (listed in NOISY_NOTEBOOKS, tests/nbval_harness.py)")
        pytest.fail(f"{msg}: clean it at its source (fix or filter the warning; say a caught error in one line)")
    if nb in NOISY_NOTEBOOKS and _RUN.last_cell.get(key) == item.name and not _RUN.noisy[key]:
        msg = f"{nb} ran without FutureWarning or traceback: remove it from NOISY_NOTEBOOKS (tests/nbval_harness.py)"
        item.warn(StaleAllowListWarning(msg))
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if (
        _is_nbval_cell(item)
        and report.failed
        and isinstance(report.longrepr, str)
        and "Cell outputs differ" in (report.longrepr)
    ):
        nb = Path(str(item.parent.path))
        shown = nb.relative_to(ROOT) if nb.is_relative_to(ROOT) else nb
        report.longrepr += (
            f"\nIn the diff above, '+' lines are the output stored in {nb.name}, '-' lines the new one.\n"
            f"If the change is intended, store the new output: python -m tests.nbexec refresh {shown}\n"
            "(or `make refresh-checked NB=...`), then review `git diff`.\n"
        )
    return report
