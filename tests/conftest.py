"""Shared fixtures (a tiny random model in a temporary folder: TRL reloads it for the reference model) and the
test tiers of the README: ``pytest -m unit|notebooks|browser|slow|gpu``.

Tiers are given by folder here (nbval's notebook cells get ``notebooks`` in tests/nbval_harness.py): a test is in
``notebooks`` if it is under tests/notebooks/ (but for the browser test's file) or it is marked ``notebook``, in
``browser`` if it is in tests/notebooks/test_lab_browser.py or marked so, and in ``unit`` otherwise; ``slow`` and
``gpu`` are marked on the test itself and keep a test out of ``unit`` (and out of `make test`: pyproject.toml's
addopts deselect them).
"""

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

NOTEBOOK_FILES = {"test_notebooks.py", "test_nbval_drift.py"}  # whole files in the notebooks tier

TESTS = Path(__file__).resolve().parent
NOTEBOOK_TESTS = TESTS / "notebooks"  # every test under it is in the notebooks tier
INTEGRATION_TESTS = TESTS / "integration"  # tests that cross modules, most of them starting processes
BROWSER_FILES = {NOTEBOOK_TESTS / "test_lab_browser.py"}  # in the browser tier instead
TIERS = ("notebooks", "browser", "slow", "gpu")  # a test with none of these is a unit test


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = item.path.resolve()
        in_folder = NOTEBOOK_TESTS in path.parents and path not in BROWSER_FILES
        if in_folder or path.suffix == ".ipynb" or item.get_closest_marker("notebook"):
            item.add_marker(pytest.mark.notebooks)
        if path in BROWSER_FILES:
            item.add_marker(pytest.mark.browser)
        if not any(item.get_closest_marker(t) for t in TIERS):
            item.add_marker(pytest.mark.unit)
    items.sort(key=_start_order)


def _start_order(item) -> int:
    """The order files start in (make test runs ``pytest-xdist --dist loadfile --no-loadscope-reorder``): the longest
    first, so that two workers end together. A notebook executes whole in one kernel and a test of tests/integration/
    starts processes (the ZeRO-3 run alone is ~1.5 min): these go first, then the browser and notebook checks, then the
    unit tests, most of them under a second, which fill the end. (xdist's own reorder puts files with many tests first,
    which left the ZeRO-3 run and the notebooks to the end, one worker idle.)"""
    path = item.path.resolve()
    if path.suffix == ".ipynb" or INTEGRATION_TESTS in path.parents:
        return 0
    return 1 if NOTEBOOK_TESTS in path.parents else 2


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    import torch

    from trgrpo.models import tiny_model

    torch.set_num_threads(2)
    return tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def search_micro_model(tmp_path_factory):
    """The search task's micro model (word-level tokenizer over the generated corpus, 1 layer x 32), built once."""
    from unittest import mock

    from trgrpo.tasks import search, search_data

    corpus = search_data.make_corpus(0)
    tool = search.make_search_tool(search_data.make_retriever("bm25", corpus.passages), top_k=1)
    with mock.patch.dict(os.environ, {"TRGRPO_CACHE": str(tmp_path_factory.mktemp("search-cache"))}):
        return search.micro_model(corpus, tool, hidden=32, layers=1)
