"""The answer page (notebook 08): one verdict per claim of the paper, computed from records
(trgrpo/results/answers.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from trgrpo.results import answers

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
NINE = ["Theorem 3.1", "Theorem 3.2", "Table 1", "Table 2", "Table 3", "Table 4", "Table 7", "Table 8", "Figure 1"]


def test_nine_claims_each_with_a_command():
    assert [c.name for c in answers.CLAIMS] == NINE
    assert all(c.command and c.says for c in answers.CLAIMS)


def test_without_records_every_claim_says_not_run_yet(tmp_path):
    rows = answers.verdicts(tmp_path)
    assert [r["claim"] for r in rows] == NINE
    assert {r["verdict"] for r in rows} == {answers.NOT_RUN}
    assert all(r["scale"] == "—" for r in rows)
    assert [r["result"] for r in answers.toy_extras(tmp_path)] == [answers.NOT_RUN] * 3
    assert answers.summary_line(rows) == "9 not run yet"


def test_committed_records_give_a_verdict_with_scale():
    rows = answers.verdicts(RESULTS)
    assert [r["claim"] for r in rows] == NINE
    for r in rows:
        assert r["verdict"] in answers.VERDICTS
        if r["verdict"] != answers.NOT_RUN:
            assert r["scale"] != "—" and r["our evidence"], r
    by = {r["claim"]: r for r in rows}
    assert by["Theorem 3.1"]["verdict"] == "reproduced"  # results/notebooks/01_*.json: no violation of the bounds


def _copy(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dest)


def test_theorem31_verdict_follows_the_record(tmp_path):
    rec = json.loads((RESULTS / "notebooks" / "01_gradient_norm_theorem.json").read_text())
    rec["bounds_violations"] = 3
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "01_gradient_norm_theorem.json").write_text(json.dumps(rec))
    row = answers.verdicts(tmp_path)[0]
    assert row["verdict"] == "not reproduced" and "3 violations" in row["our evidence"]


@pytest.mark.parametrize("lo,hi,verdict", [(0.01, 0.05, "reproduced"), (-0.05, 0.01, "not reproduced")])
def test_table4_reads_the_controls_summary_when_present(tmp_path, lo, hi, verdict):
    summary = {"primary_metric": "greedy_accuracy", "eval_steps": [100], "rows": [
        {"arm": "equal", "runs": 5, "n": 5, "mean": 0.76, "delta_vs_equal": None, "ci_low": None, "ci_high": None,
         "p": None},
        {"arm": "tr-surrogate", "runs": 5, "n": 5, "mean": 0.79, "delta_vs_equal": (lo + hi) / 2, "ci_low": lo,
         "ci_high": hi, "p": 0.04},
    ]}
    (tmp_path / "toy" / "controls").mkdir(parents=True)
    (tmp_path / "toy" / "controls" / "summary.json").write_text(json.dumps(summary))
    row = {r["claim"]: r for r in answers.verdicts(tmp_path)}["Table 4"]
    assert row["verdict"] == verdict and "tr-surrogate" in row["our evidence"] and "n = 5" in row["our evidence"]
    assert row["strength"].startswith("strong" if lo > 0 else "moderate")


def test_toy_extras_read_kl_tau_lm_records_when_present(tmp_path):
    grpo = sorted((RESULTS / "toy" / "controls").glob("addition-micro-equal-seed*.json"))[:2]
    for p in grpo:
        _copy(p, tmp_path / "toy" / "kl" / p.name)
    _copy(next((RESULTS / "toy" / "lm").glob("arith-*.json")), tmp_path / "toy" / "lm" / "run.json")
    rows = {r["folder"]: r for r in answers.toy_extras(tmp_path)}
    assert rows["results/toy/kl/"]["result"].startswith("equal ") and "(n=2)" in rows["results/toy/kl/"]["result"]
    assert rows["results/toy/tau/"]["result"] == answers.NOT_RUN
    assert rows["results/toy/lm/"]["result"] != answers.NOT_RUN and "CPU" in rows["results/toy/lm/"]["scale"]


def test_table7_reads_the_tau_summary(tmp_path):
    _copy(RESULTS / "toy" / "tau" / "summary.json", tmp_path / "toy" / "tau" / "summary.json")
    row = {r["claim"]: r for r in answers.verdicts(tmp_path)}["Table 7"]
    summary = json.loads((RESULTS / "toy" / "tau" / "summary.json").read_text())
    taus = [r for r in summary["rows"] if r["arm"] != "equal"]
    assert row["verdict"] == ("partly reproduced" if any(r["ci_low"] > 0 for r in taus) else "not reproduced")
    for r in taus:
        assert f"{r['delta_vs_equal']:+.3f}" in row["our evidence"]
    assert "results/toy/tau" in row["scale"]


@pytest.mark.parametrize(("table", "task"), [(1, "kk"), (2, "math"), (3, "search"), (4, "kk"), (7, "kk"), (9, "kk")])
def test_paper_vs_ours_has_one_row_per_printed_row(table, task):
    """Notebook 08's tables (moved here from an assert of the notebook): every printed row of the paper's table,
    with the committed records or none, each cell 'paper / ours'."""
    from trgrpo.pipeline.experiment import load_results
    from trgrpo.results import paper, report

    for records in (load_results(task, str(RESULTS)), []):
        rows = report.paper_vs_ours(table, records)
        assert len(rows) == len(paper.table(table).rows), (table, len(records))
        assert all(" / " in str(row[c]) for row in rows for c in paper.table(table).columns)
        if not records:
            assert all(row["ours"] == report.NO_RUN for row in rows)
