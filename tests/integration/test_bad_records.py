"""Issue 38, records: every unreadable or inconsistent file under results/ stops the answer page (notebook 08,
``trgrpo.answers``) and ``make docs`` (scripts/render_docs.py) with one line naming the file and the field; none
drops out of a count, a missing file stays "not run yet". Each case corrupts one file of a copy of results/."""

from __future__ import annotations

import json
import os
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from course import workbooks
from trgrpo.reports import answers
from trgrpo.runs.records import RecordError

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
CONTROLS = "toy/controls"
RUN = f"{CONTROLS}/addition-micro-equal-seed0.json"  # a run record the readers need


def _copy(dest: Path, *files: str) -> Path:
    for f in files:
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(RESULTS / f, dest / f)
    return dest


def _controls(dest: Path, seeds=(0, 1, 2)) -> list[str]:
    """Two arms of the controls grid on a few seeds (and its summary): enough for Table 4 and the README block."""
    files = [f"{CONTROLS}/addition-micro-{a}-seed{s}.json" for a in ("equal", "tr-surrogate") for s in seeds]
    _copy(dest, *files, f"{CONTROLS}/summary.json")
    return files


def _edit(path: Path, change) -> None:
    rec = json.loads(path.read_text())
    path.write_text(json.dumps(change(rec)))


def _cut(path: Path) -> None:  # a write killed half way
    text = path.read_text()
    path.write_text(text[: len(text) // 2])


def _set(rec: dict, **kw) -> dict:
    return {**rec, **kw}


def _strip(rec: dict) -> dict:  # lacks kind, history and scheme
    return {k: v for k, v in rec.items() if k not in ("kind", "history", "scheme")}


def _null_step(rec: dict) -> dict:
    rec["eval_history"][-1]["greedy_accuracy"] = None
    return rec


def _drop_step(rec: dict) -> dict:
    rec["eval_history"] = rec["eval_history"][:-1]
    return rec


# (name, corruption of RUN, the message's tail after the file name)
RUN_FAULTS = [
    ("list", lambda r: [r], "must be a JSON object|a run record is a JSON object, got list"),
    ("kind summary", lambda r: _set(r, kind="summary"), "field 'kind' is 'summary'"),
    ("no kind, history, scheme", _strip, "missing required field"),
    ("accuracy a word", lambda r: _set(r, final={**r["final"], "greedy_accuracy": "high"}), "final.greedy_accuracy"),
    ("accuracy 7.5", lambda r: _set(r, final={**r["final"], "greedy_accuracy": 7.5}), "final.greedy_accuracy"),
]


def _verdicts_raise(root: Path, file: str, field: str) -> None:
    with pytest.raises(RecordError, match=rf"{file}: .*({field})") as info:
        answers.verdicts(root)
    assert "\n" not in str(info.value) and info.value._render_traceback_() == [f"RecordError: {info.value}"]


@pytest.mark.parametrize(("name", "change", "field"), RUN_FAULTS, ids=[f[0] for f in RUN_FAULTS])
def test_a_bad_run_record_stops_the_answer_page(tmp_path, name, change, field):
    _controls(tmp_path)
    _edit(tmp_path / RUN, change)
    _verdicts_raise(tmp_path, RUN, field)


@pytest.mark.parametrize(
    ("change", "field"), [(_null_step, "eval_history"), (_drop_step, "eval_history")], ids=["null", "missing"]
)
def test_a_null_or_missing_eval_step_is_named(tmp_path, change, field):
    """Was "records present but unreadable (TypeError: float() ...)" / "judge needs a finite interval"."""
    _controls(tmp_path)
    _edit(tmp_path / RUN, change)
    _verdicts_raise(tmp_path, RUN, field)


@pytest.mark.parametrize(
    "file",
    [
        RUN,
        "toy/lm/arith-embedded-equal-seed0.json",
        "notebooks/01_gradient_norm_theorem.json",
        "notebooks/04_token_probabilities.json",
        "notebooks/07_agentic_search.json",
        "bench/step.json",
    ],
)
def test_a_truncated_file_is_named_not_counted_as_not_run(tmp_path, file):
    """A half-written file was "not run yet: no record" (notebooks, bench) or dropped out (toy/lm)."""
    if file == RUN:
        _controls(tmp_path)
    _copy(tmp_path, file)
    _cut(tmp_path / file)
    _verdicts_raise(tmp_path, file, "not valid JSON")


@pytest.mark.parametrize(
    ("file", "change", "field"),
    [
        ("notebooks/01_gradient_norm_theorem.json", lambda r: _set(r, bounds_violations="none"), "bounds_violations"),
        ("notebooks/07_agentic_search.json", lambda r: _set(r, em_start="low"), "em_start"),
        ("bench/step.json", lambda r: _set(r, variants={"tr": {}}), "variants.tr"),
    ],
)
def test_a_field_the_answer_page_needs_is_checked(tmp_path, file, change, field):
    _copy(tmp_path, file)
    _edit(tmp_path / file, change)
    _verdicts_raise(tmp_path, file, field)


def test_the_same_run_twice_is_refused_naming_both_files(tmp_path):
    """A copied record added a seed to a mean (lists); a second record of one arm and seed overwrote the first
    (toy_metrics)."""
    _controls(tmp_path)
    shutil.copy(tmp_path / RUN, tmp_path / CONTROLS / "copy.json")
    with pytest.raises(RecordError, match=rf"{CONTROLS}/copy.json: the same run as .*{RUN} "):
        answers.verdicts(tmp_path)
    (tmp_path / CONTROLS / "copy.json").unlink()
    other = f"{CONTROLS}/addition-micro-equal-seed1.json"  # a second seed 0
    _edit(tmp_path / other, lambda r: _set(r, seed=0, spec={**r["spec"], "seed": 0}))
    with pytest.raises(RecordError, match=rf"{other}: field 'seed' 0 of arm equal again, also in .*{RUN}"):
        answers.verdicts(tmp_path)


def test_missing_files_stay_not_run_and_side_files_are_not_runs(tmp_path):
    rows = answers.verdicts(_copy(tmp_path, "toy/lm/token_hist.json", f"{CONTROLS}/plan.json"))
    assert {r["verdict"] for r in rows} == {answers.NOT_RUN}


@pytest.fixture(scope="module")
def render():
    return runpy.run_path(str(ROOT / "scripts" / "render_docs.py"))


@pytest.mark.parametrize(
    ("file", "change", "field"),
    [
        (f"{CONTROLS}/summary.json", lambda s: _set(s, rows=[{"arm": "equal", "n": 12}]), "rows.0.|'mean'"),
        (f"{CONTROLS}/summary.json", lambda s: _set(s, cost={**s["cost"], "runs_cpu_s": "1 h"}), "cost.runs_cpu_s"),
        (f"{CONTROLS}/summary.json", lambda s: [s], "JSON object"),
        (RUN, lambda r: [r], "JSON object"),
        (RUN, lambda r: _set(r, kind="summary"), "kind"),
    ],
)
def test_make_docs_readers_name_the_file_and_field(tmp_path, render, file, change, field):
    _controls(tmp_path)
    _edit(tmp_path / file, change)
    with pytest.raises(RecordError, match=rf"{file}: .*({field.replace('.', '.?')})"):
        render["toy_verdict"](tmp_path)


def _slow_step(rec: dict) -> dict:  # was "Unknown format code"
    rec["variants"]["grpo_trl"]["phases"]["step"]["cpu"]["median"] = "fast"
    return rec


def _no_max(rec: dict) -> dict:  # was KeyError: 'max'
    del rec["variants"]["grpo_trl"]["ratio_vs_grpo"]["peak_rss"]["max"]
    return rec


@pytest.mark.parametrize(
    ("file", "change", "field"),
    [
        ("bench/step.json", _slow_step, r"variants.grpo_trl.phases.step.cpu.median' must be a number"),
        ("bench/pair/step.json", _no_max, r"variants.grpo_trl.ratio_vs_grpo.peak_rss"),
        ("bench/loss.json", lambda r: _set(r, cases="none"), r"field 'cases' must be list"),
    ],
)
def test_make_docs_bench_readers_name_the_file_and_field(tmp_path, render, file, change, field):
    _copy(tmp_path, file)
    _edit(tmp_path / file, change)
    with pytest.raises(RecordError, match=rf"{file}: .*{field}"):
        render["bench_records"](tmp_path / "bench")


def test_make_docs_course_times_reader_names_the_file_and_field(tmp_path, render, monkeypatch):
    times = tmp_path / "notebook_times.json"
    monkeypatch.setattr(workbooks, "TIMES_PATH", times)
    shutil.copy(RESULTS / "course" / "notebook_times.json", times)
    _edit(times, lambda r: _set(r, rows=[{**r["rows"][0], "wall_s": None}]))
    with pytest.raises(RecordError, match=r"notebook_times.json: field 'rows\[0\].wall_s'"):
        render["readme_times"]()


def _make_docs(results: Path) -> subprocess.CompletedProcess:
    """``make docs`` as the Makefile runs it (--check: writes nothing), on the records of ``results``."""
    env = {**os.environ, "TRGRPO_RESULTS": str(results)}
    cmd = [sys.executable, "scripts/render_docs.py", "--check"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    ("file", "change"),
    [
        pytest.param(f"{CONTROLS}/summary.json", _cut, id="summary-truncated"),
        pytest.param(RUN, _cut, marks=pytest.mark.slow, id="run-truncated"),
        pytest.param("bench/step.json", _cut, marks=pytest.mark.slow, id="bench-truncated"),
        pytest.param("course/notebook_times.json", _cut, marks=pytest.mark.slow, id="times-truncated"),
    ],
)
def test_make_docs_stops_with_one_line_naming_the_file(tmp_path, file, change):
    _controls(tmp_path)
    _copy(tmp_path, "course/notebook_times.json", "bench/step.json", "bench/table.md")
    change(tmp_path / file)
    out = _make_docs(tmp_path)
    assert out.returncode == 2 and out.stdout == "", out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {tmp_path / file}: not valid JSON"), out.stderr


# Issue 48, item 7: a field a page indexes is in the schema (was KeyError / "not run yet"); a summary names the
# records it was built from (was "up to date" while six verdicts changed under it)
KL_RUN = "toy/kl/addition-micro-tr-surrogate-kleq10-beta0.04-seed0.json"


def _del(rec: dict, *path: str) -> dict:
    *parents, last = path
    inner = rec
    for key in parents:
        inner = inner[key]
    del inner[last]
    return rec


def test_a_kl_record_without_its_weighting_is_named(tmp_path, render):
    """Was ``KeyError: 'kl_weighting'`` from answers.toy_extras and from make docs' KL sentence."""
    _controls(tmp_path)
    _copy(tmp_path, KL_RUN, "toy/kl/summary.json")
    _edit(tmp_path / KL_RUN, lambda r: _del(r, "spec", "kl_weighting"))
    field = rf"{KL_RUN}: field 'spec' lacks required field 'kl_weighting'"
    with pytest.raises(RecordError, match=field):
        answers.toy_extras(tmp_path)
    with pytest.raises(RecordError, match=field):
        render["toy_verdict"](tmp_path)


@pytest.mark.parametrize("field", ["bounds_violations", "spread"])
def test_notebook01_without_a_field_its_verdicts_read_is_named(tmp_path, field):
    """Was Theorem 3.1 / 3.2 "not run yet", silently, beside a headline that is there."""
    file = "notebooks/01_gradient_norm_theorem.json"
    _copy(tmp_path, file)
    _edit(tmp_path / file, lambda r: _del(r, field))
    _verdicts_raise(tmp_path, file, f"required field '{field}'")


def test_a_summary_names_the_record_changed_since_it_was_built(tmp_path):
    from trgrpo.reports import tables
    from trgrpo.runs.records import changed_since

    _controls(tmp_path)
    tables.controls_summary(tmp_path)
    summary = tmp_path / CONTROLS / "summary.json"
    assert changed_since(summary, "controls_summary", tmp_path) == []
    _edit(tmp_path / RUN, lambda r: _set(r, final={**r["final"], "greedy_accuracy": 0.99}))
    shutil.copy(tmp_path / RUN, tmp_path / CONTROLS / "extra.json")
    _edit(tmp_path / CONTROLS / "extra.json", lambda r: _set(r, name="extra"))
    (tmp_path / CONTROLS / "addition-micro-equal-seed1.json").unlink()
    assert changed_since(summary, "controls_summary", tmp_path) == [
        f"{CONTROLS}/addition-micro-equal-seed0 changed",
        f"{CONTROLS}/addition-micro-equal-seed1 gone",
        f"{CONTROLS}/extra added",
    ]


@pytest.mark.slow
def test_make_docs_says_which_record_changed_under_its_summary(tmp_path):
    """An accuracy edited by hand in one record: make docs said "up to date" (the README quotes the summary)."""
    shutil.copytree(RESULTS, tmp_path, dirs_exist_ok=True)
    _edit(tmp_path / RUN, lambda r: _set(r, final={**r["final"], "greedy_accuracy": 0.99}))
    out = _make_docs(tmp_path)
    assert out.returncode == 1 and out.stdout == "", out
    assert (
        out.stderr.splitlines()
        == [  # the tau summary compares with the same GRPO runs
            f"stale: {tmp_path / group / 'summary.json'} was built from other records ({RUN[:-5]} changed); "
            "rerun notebook 03"
            for group in (CONTROLS, "toy/tau")
        ]
    ), out.stderr
    _edit(tmp_path / KL_RUN, lambda r: _del(r, "spec", "kl_weighting"))
    out = _make_docs(tmp_path)
    assert out.returncode == 2 and out.stdout == "", out
    assert out.stderr.splitlines() == [
        f"error: {tmp_path / KL_RUN}: field 'spec' lacks required field 'kl_weighting'"
    ], out.stderr
