"""Reading configurations (trgrpo/config.py: read_config, parse_overrides; today in trgrpo/experiment.py)."""

from __future__ import annotations

import pytest

from trgrpo import config
from trgrpo.runs import spec


def test_a_key_twice_in_a_set_override_or_an_alias_inside_bounds_is_read():
    assert spec.parse_overrides(["task_options={a: &x [1, 2], b: *x}"]) == {"task_options": {"a": [1, 2], "b": [1, 2]}}
    with pytest.raises(config.ConfigError, match="--set steps"):
        spec.parse_overrides(["steps={a: 1, a: 2}"])


def test_a_config_error_shows_one_line_in_a_notebook():
    """Issue 48, item 4: IPython shows an exception's ``_render_traceback_()`` in place of its traceback
    (IPython/core/interactiveshell.py, showtraceback); a ConfigError (bad input) and the notebooks' ParameterError show
    their one line, not frames through the library."""
    from trgrpo.notebook import ParameterError

    assert config.ConfigError("plan.yaml: steps must be >= 1")._render_traceback_() == [
        "ConfigError: plan.yaml: steps must be >= 1"
    ]
    assert ParameterError("05: parameter STEPS")._render_traceback_() == ["ParameterError: 05: parameter STEPS"]
