"""Top-level pytest configuration: loads the notebook harness (tests/nbval_harness.py) for every invocation,
also `pytest notebooks/02_*.ipynb`, which does not read tests/conftest.py."""

pytest_plugins = ["tests.nbval_harness"]
