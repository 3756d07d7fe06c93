"""Tests that execute or inspect the notebooks: every test under tests/notebooks/ is in the notebooks tier
(tests/conftest.py), the browser test in the browser tier."""
