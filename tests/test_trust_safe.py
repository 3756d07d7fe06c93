"""Issue 24 ("safe"): nothing escapes the results and checkpoints folders, and bad input is refused in one line.

The command lines (train, batch, plan) are called in-process through their ``cli`` entry points; each bad input gives
one line on stderr naming the file and the field, exit code 2, and writes nothing."""

from __future__ import annotations

import pytest

from trgrpo.pipeline import experiment
from trgrpo.pipeline.records import write_result
from trgrpo.pipeline.spec import RunSpec


@pytest.mark.parametrize(
    "kw,field",
    [
        (dict(group="/tmp/elsewhere"), "group"),
        (dict(group="../up"), "group"),
        (dict(group="kk/../../up"), "group"),
        (dict(group="kk//main"), "group"),
        (dict(group="kk/"), "group"),
        (dict(group="~/x"), "group"),
        (dict(group="a\\..\\..\\b"), "group"),
        (dict(name="a/b"), "name"),
        (dict(name=".."), "name"),
        (dict(name="/abs"), "name"),
        (dict(name="x\x00y"), "name"),
    ],
)
def test_group_and_name_stay_under_the_results_root(kw, field):
    with pytest.raises(ValueError, match=f"^{field} must be"):
        RunSpec(**kw)


def test_good_groups_and_names_are_kept():
    s = RunSpec(group="kk/Qwen2.5-3B/main", name="kk-tr-seed0_v1.5")
    assert (s.group, s.name) == ("kk/Qwen2.5-3B/main", "kk-tr-seed0_v1.5")


def test_no_rmtree_outside_the_checkpoints_root_even_for_a_reassigned_spec(tmp_path):
    outside = tmp_path / "precious"
    outside.mkdir()
    spec = RunSpec(group="g", name="n")
    spec.group = str(outside)  # a dataclass field reassigned after the spec was checked
    with pytest.raises(ValueError, match="group"):
        experiment.checkpoint_folder(spec, tmp_path / "ckpt")
    with pytest.raises(ValueError, match="group"):
        write_result(spec.group, spec.name, {"kind": "note"}, tmp_path / "res")
    assert outside.exists() and not (tmp_path / "res").exists()
