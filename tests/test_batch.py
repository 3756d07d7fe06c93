"""trgrpo.runs.batch: notebooks run with papermill into runs/<name>/, a failure does not stop the batch."""

import json

import nbformat
import pytest

from trgrpo.files import ROOT
from trgrpo.runs.batch import load_plan, main


def _nb(path, code):
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("SMOKE = False\nX = 1")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(code)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


@pytest.mark.notebook
def test_batch_runs_notebooks_goes_on_past_failure_and_summarises(tmp_path, capsys):
    ok = _nb(tmp_path / "a_ok.ipynb", "assert SMOKE is True and X == 2\nprint('fine')")
    bad = _nb(tmp_path / "b_bad.ipynb", "raise ValueError('broken on purpose')")
    ok2 = _nb(tmp_path / "c_ok.ipynb", "import os\nassert os.environ['TRGRPO_SMOKE'] == '1'")
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(
        f"name: demo\nsmoke: true\nnotebooks:\n  - notebook: {ok}\n    parameters: {{X: 2}}\n"
        f"  - notebook: {bad}\n  - notebook: {ok2}\n"
    )
    rc = main([str(cfg), "--runs", str(tmp_path / "runs")])
    assert rc == 1  # one notebook failed
    rows = json.loads((tmp_path / "runs" / "demo" / "summary.json").read_text())
    assert [r["ok"] for r in rows] == [True, False, True]
    assert "broken on purpose" in rows[1]["error"]
    assert (tmp_path / "runs" / "demo" / "a_ok.ipynb").exists()
    out = capsys.readouterr().out
    assert "FAILED" in out and "a_ok.ipynb" in out


def test_plan_errors_name_the_field(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("notebooks:\n  - parameters: {}\n")
    with pytest.raises(ValueError, match="notebook"):
        load_plan(cfg)
    cfg.write_text("notebooks:\n  - notebook: nowhere.ipynb\n")
    with pytest.raises(ValueError, match="nowhere"):
        load_plan(cfg)


def test_shipped_experiment_files_parse():
    from pathlib import Path

    from trgrpo.runs.spec import load_specs

    root = Path(__file__).resolve().parents[1] / "experiments"
    for path in root.glob("*.yaml"):
        if path.name.startswith("train_"):
            specs = load_specs(path)
            assert specs and all(s.task for s in specs)
        else:
            name, plan = load_plan(path)
            assert plan, path


def test_set_overrides_parse_as_yaml_and_name_bad_items():
    from trgrpo.runs.spec import parse_overrides

    assert parse_overrides(["STEPS=10", "SEEDS=[0, 1]", "MODEL=Qwen/Qwen2.5-3B-Instruct"]) == {
        "STEPS": 10,
        "SEEDS": [0, 1],
        "MODEL": "Qwen/Qwen2.5-3B-Instruct",
    }
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_overrides(["STEPS"])


@pytest.mark.notebook
def test_batch_set_reaches_every_notebook(tmp_path):
    nb = _nb(tmp_path / "a.ipynb", "assert X == 7, X")
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(f"name: demo\nnotebooks:\n  - notebook: {nb}\n    parameters: {{X: 2}}\n")
    assert main([str(cfg), "--runs", str(tmp_path / "runs"), "--smoke", "--set", "X=7"]) == 0
    assert main([str(cfg), "--runs", str(tmp_path / "runs"), "--smoke"]) == 1  # without the override X is 2


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("**/*.ipynb")), ids=lambda p: p.name)
def test_papermill_reads_every_parameter_a_notebooks_cell_assigns(path):
    """The parameters papermill sees (batch.parameter_defaults) are the names the cell assigns, with the values the
    cell gives them (executed at full scale; None for an expression's default), comments as papermill's help."""
    import papermill as pm

    from trgrpo.notebook import parameter_defaults
    from trgrpo.runs.batch import environment

    cell = next(c.source for c in nbformat.read(path, as_version=4).cells if "parameters" in c.metadata.get("tags", []))
    env: dict = {"os": __import__("os")}
    with environment(TRGRPO_SMOKE="0"):
        exec(cell, env)  # noqa: S102 - the project's own parameters cell
    assigned = {k: v for k, v in env.items() if k.isupper()}
    defaults = parameter_defaults(path)
    assert set(defaults) == set(assigned)
    assert {k: v for k, v in defaults.items() if v is not None} == {
        k: assigned[k] for k, v in defaults.items() if v is not None
    }
    assert all(isinstance(p["help"], str) for p in pm.inspect_notebook(str(path)).values())
