"""One run-record schema (trgrpo.experiment): checked when a record is written and when it is read, with errors
that
name the file and the field; every committed run record follows it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trgrpo import files
from trgrpo.runs import records

ROOT = Path(__file__).resolve().parents[2]


def _record(**over) -> dict:
    rec = {
        "kind": "run",
        "name": "r",
        "group": "g",
        "task": "addition",
        "scheme": "tr",
        "seed": 0,
        "model": "m",
        "steps": 2,
        "spec": {"scheme": "tr"},
        "history": [{"step": 1, "reward": 0.5}, {"step": 2, "reward": 1.0}],
        "initial": None,
        "final": {"accuracy": 0.5},
        "train_time_s": 1.0,
        "seconds_per_step": 0.5,
        "wall_time_s": 2,
        "peak_memory": {},
        "machine": {},
        "versions": {},
        "git_commit": "abc",
        "finished_at": "2026-01-01T00:00:00Z",
    }
    rec.update(over)
    return rec


def test_a_complete_record_passes():
    assert records.validate_record(_record()) == _record()


@pytest.mark.parametrize("field", sorted(records.RUN_FIELDS))
def test_a_missing_required_field_is_named(field):
    rec = _record()
    del rec[field]
    with pytest.raises(records.RecordError, match=f"where: missing required field '{field}'"):
        records.validate_record(rec, "where")


@pytest.mark.parametrize(
    "field,value",
    [
        ("seed", "0"),
        ("seed", True),
        ("steps", 2.0),
        ("history", {}),
        ("final", None),
        ("wall_time_s", "1"),
        ("git_dirty", "no"),
        ("eval_history", {"step": 0}),
    ],
)
def test_a_wrong_type_is_named(field, value):
    with pytest.raises(records.RecordError, match=f"field '{field}' must be"):
        records.validate_record(_record(**{field: value}), "where")


@pytest.mark.parametrize("key", ["history", "eval_history", "eval_curve"])
def test_step_rows_need_an_integer_step(key):
    with pytest.raises(records.RecordError, match=rf"field '{key}\[1\]'"):
        records.validate_record(_record(**{key: [{"step": 1}, {"reward": 1.0}]}))


def test_unmarked_records_need_the_core_fields_only_and_other_kinds_are_not_runs():
    core = {k: v for k, v in _record().items() if k in records.CORE_FIELDS}
    assert records.validate_record(core) == core
    with pytest.raises(records.RecordError, match="missing required field 'history'"):
        records.validate_record({k: v for k, v in core.items() if k != "history"})
    assert records.is_run_record(core) and records.is_run_record(_record())
    assert not records.is_run_record({"kind": "grid_summary", "history": []}) and not records.is_run_record(
        {"rows": []}
    )
    with pytest.raises(records.RecordError, match="field 'kind' is 'plan'"):
        records.validate_record({"kind": "plan"})


def test_write_result_validates_and_writes_nothing_when_the_record_is_bad(tmp_path):
    with pytest.raises(records.RecordError, match=r"g/bad.json \(not written\): missing required field 'final'"):
        records.write_result("g", "bad", {k: v for k, v in _record().items() if k != "final"}, tmp_path)
    assert not (tmp_path / "g" / "bad.json").exists()
    records.write_result("g", "summary", {"kind": "summary", "anything": 1}, tmp_path)  # other kinds: as they are
    path = records.write_result("g", "ok", _record(), tmp_path)
    assert records.read_record(path) == _record()


def test_readers_name_the_file_and_the_field(tmp_path):
    records.write_result("g", "ok", _record(), tmp_path)
    files.write_json(tmp_path / "g" / "summary.json", {"kind": "grid_summary", "invocations": []})
    assert [r["name"] for r in records.load_results("g", tmp_path)] == ["r"]
    broken = _record(name="broken")
    broken["history"] = "not a list"
    files.write_json(tmp_path / "g" / "broken.json", broken)  # a writer that bypassed the schema
    with pytest.raises(records.RecordError, match=r"g/broken.json: field 'history' must be list"):
        records.load_results("g", tmp_path)
    (tmp_path / "g" / "broken.json").write_text('{"name": "cut off')
    with pytest.raises(records.RecordError, match=r"g/broken.json: not valid JSON"):
        records.load_results("g", tmp_path)
    with pytest.raises(records.RecordError, match=r"broken.json: not valid JSON"):
        records.read_record(tmp_path / "g" / "broken.json")


def test_provenance_makes_a_record_the_writer_accepts(tmp_path):
    rec = {**_record(), "task": "addition", "model": "m", "initial": None, "final": {}, "method": "TR-GRPO"}
    rec.update(train_time_s=1.0, seconds_per_step=0.5, wall_time_s=2.0, **files.provenance())
    assert rec["machine"]["cpu_count"] >= 1 and rec["finished_at"]
    assert records.read_record(records.write_result("g", "built", rec, tmp_path))["method"] == "TR-GRPO"


def _committed_run_records() -> list[Path]:
    paths = sorted((ROOT / "results").rglob("*.json"))
    return [p for p in paths if records.is_run_record(json.loads(p.read_text()))]


def test_every_committed_run_record_follows_the_schema():
    paths = _committed_run_records()
    assert len(paths) >= 100  # the toy grids (controls, kl, tau), the SmolLM2 addition runs, the search toy
    for p in paths:
        rec = records.read_record(p)
        assert rec["kind"] == "run", f"{p}: not marked kind: run"
    groups = {str(p.parent.relative_to(ROOT / "results")) for p in paths}
    loaded = sum(len(records.load_results(g, ROOT / "results")) for g in groups)
    assert loaded == len(paths)


@pytest.mark.parametrize("drop", ["scheme", "history"])
@pytest.mark.parametrize("marked", [True, False])
def test_a_run_record_without_scheme_or_history_is_an_error_not_skipped(tmp_path, drop, marked):
    """Issue 24, item 3: a controls arm went from n = 12 to 11 when one record lost its ``scheme``."""
    records.write_result("g", "ok", _record(), tmp_path)
    rec = {k: v for k, v in _record(name="lost").items() if k != drop and (marked or k != "kind")}
    files.write_json(tmp_path / "g" / "lost.json", rec)
    with pytest.raises(records.RecordError, match=rf"g/lost.json: missing required field '{drop}'"):
        records.load_results("g", tmp_path)


def test_a_string_inside_a_step_list_names_the_file_and_the_field(tmp_path):
    from trgrpo.runs.toy_grid import load_runs

    spec = {"beta": 0.0, "kl_weighting": "plain", "tau": 9.0, "lower": 0.75, "upper": 1.0, "placement": "ratio"}
    spec |= {"tau_mode": "scale", "task_options": {}, "prompts_per_step": 4, "num_generations": 4}  # the toy's fields
    rec = _record(spec=spec, eval_history=[{"step": 0, "greedy_accuracy": 0.5}, {"step": 2, "greedy_accuracy": "x"}])
    files.write_json(tmp_path / "g" / "r.json", rec)
    with pytest.raises(
        records.RecordError, match=r"g/r.json: field 'eval_history\[1\].greedy_accuracy' must be a number"
    ):
        load_runs(tmp_path, group="g")
    files.write_json(tmp_path / "g" / "r.json", _record(spec=spec, eval_history=[{"step": 0, "greedy_accuracy": None}]))
    assert len(load_runs(tmp_path, group="g")) == 1
    del spec["kl_weighting"]  # a field the toy's tables read (issue 48: was a KeyError in make docs)
    files.write_json(tmp_path / "g" / "r.json", _record(spec=spec))
    with pytest.raises(records.RecordError, match=r"g/r.json: field 'spec' lacks required field 'kl_weighting'"):
        load_runs(tmp_path, group="g")


def test_a_killed_writes_temporary_file_is_removed_by_the_next_write(tmp_path):
    """Issue 24, minor: a write killed before its rename leaves ``.<name>.<pid>.*.tmp``; the next write removes it
    (its process is gone) and leaves a live writer's alone."""

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stray = tmp_path / f".r.json.{int(dead.stdout)}.abc123.tmp"
    live = tmp_path / f".r.json.{os.getppid()}.def456.tmp"
    stray.write_text('{"half": ')
    live.write_text("{}")
    files.write_json(tmp_path / "r.json", {"kind": "note"})
    assert not stray.exists() and live.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [live.name, "r.json"]


@pytest.mark.parametrize(
    "final, message",
    [
        ({"greedy_accuracy": "high"}, r"field 'final.greedy_accuracy' must be a number or null, got str"),
        ({"greedy_accuracy": 7.5}, r"field 'final.greedy_accuracy': 7.5 is greater than the maximum of 1"),
        ({"accuracy": -0.1}, r"field 'final.accuracy': -0.1 is less than the minimum of 0"),
    ],
)
def test_an_accuracy_outside_zero_one_is_named_with_the_file(tmp_path, final, message):
    """Accuracies are shares (record.schema.json): a string or 7.5 no longer passes."""
    files.write_json(tmp_path / "g" / "r.json", _record(final=final))
    with pytest.raises(records.RecordError, match=rf"g/r.json: {message}"):
        records.read_record(tmp_path / "g" / "r.json")
    with pytest.raises(records.RecordError, match=r"\(not written\): field 'final"):
        records.write_result("g", "w", _record(final=final), tmp_path)
