"""Reading configurations (trgrpo/config.py: read_config, parse_overrides; today in trgrpo/experiment.py)."""

from __future__ import annotations

import pytest

from trgrpo import config
from trgrpo.runs import spec


def test_a_key_twice_in_a_set_override_or_an_alias_inside_bounds_is_read():
    assert spec.parse_overrides(["task_options={a: &x [1, 2], b: *x}"]) == {"task_options": {"a": [1, 2], "b": [1, 2]}}
    with pytest.raises(config.ConfigError, match="--set steps"):
        spec.parse_overrides(["steps={a: 1, a: 2}"])
