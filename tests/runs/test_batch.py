"""trgrpo.batch: notebooks run with papermill into runs/<name>/, a failure does not stop the batch."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course import workbooks
from tests.runs import refused
from trgrpo.files import ROOT
from trgrpo.runs import batch
from trgrpo.runs.batch import main
from trgrpo.runs.spec import load_plan


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

    root = Path(__file__).resolve().parents[2] / "experiments"
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


# From test_quiet.py: A newcomer's `make run` prints progress and results, not warnings: papermill parses every
# parameters cell, and the kernels that trgrpo.batch starts do not warn about TCP without encryption.


NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) + sorted(
    (ROOT / "notebooks" / "solutions").glob("*.ipynb")
)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_papermill_parses_every_parameters_cell(path, caplog):
    """papermill skips (and warns about) a parameters-cell line with more than one '=', comments included."""
    translators = pytest.importorskip("papermill.translators")
    cell = next(c for c in workbooks.read(path).cells if "parameters" in workbooks.tags(c))
    with caplog.at_level(logging.WARNING, logger="papermill"):
        params = translators.PythonTranslator.inspect(cell)
    assert not [r.getMessage() for r in caplog.records if "Unable to parse" in r.getMessage()]
    assert "SMOKE" in {p.name for p in params}, f"{path.name}: papermill does not see SMOKE as a parameter"


def test_a_line_papermill_cannot_parse_is_detected(caplog):
    """The check above can fail: the kind of line it guards against."""
    translators = pytest.importorskip("papermill.translators")
    with caplog.at_level(logging.WARNING, logger="papermill"):
        translators.PythonTranslator.inspect({"source": "THREADS = 0  # 0 = all cores"})
    assert any("Unable to parse" in r.getMessage() for r in caplog.records)


def test_kernels_use_ipc_sockets():
    transport = batch.kernel_config().KernelManager.transport
    assert transport == ("tcp" if os.name == "nt" else "ipc")


@pytest.mark.notebook
@pytest.mark.skipif(os.name == "nt", reason="no IPC transport on Windows")
def test_run_notebook_prints_no_encryption_warning(tmp_path, capfd):
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [
        nbformat.v4.new_code_cell(
            'import os\nSMOKE = os.environ.get("TRGRPO_SMOKE", "0") != "0"', metadata={"tags": ["parameters"]}
        ),
        nbformat.v4.new_code_cell("print('smoke' if SMOKE else 'full')"),
    ]
    nbformat.write(nb, str(tmp_path / "q.ipynb"))
    row = batch.run_notebook(tmp_path / "q.ipynb", tmp_path / "out", smoke=True, timeout=120)
    assert row["ok"], row
    err = capfd.readouterr().err
    assert "without encryption" not in err and "Unable to parse" not in err, err


def test_a_failing_notebook_is_one_line_in_the_batch(tmp_path, monkeypatch):
    """Issue 48, item 4: the batch's line for a failing notebook is the failing cell's error (ConfigError: ...), not
    papermill's report (PapermillExecutionError, the cell's traceback, cut at 200 characters)."""
    import papermill as pm

    why = "DOES NOT FIT: kk-Qwen2.5-3B-Instruct-equal-seed0: peak 99.1 GB > 80 GB per GPU. " + "Change: x; " * 30

    def fails(*args, **kwargs):
        tb = ["\x1b[31m---\x1b[39m", "Cell \x1b[32mIn[6]\x1b[39m", f"\x1b[31mConfigError\x1b[39m: {why}"]
        raise pm.PapermillExecutionError(3, 6, "raise ConfigError(...)", "ConfigError", f"{why}\nsecond run", tb)

    monkeypatch.setattr(pm, "execute_notebook", fails)
    row = batch.run_notebook(Path("05_kk_logic_full_scale.ipynb"), tmp_path, smoke=False)
    assert row["error"] == f"ConfigError: {why.strip()} second run"


# From test_trust_safe.py: Issue 24 ("safe"): nothing escapes the results and checkpoints folders, and bad input is
# refused in one line.
#
# The command lines (train, batch, plan) are called in-process through their ``cli`` entry points; each bad input
# gives one line on stderr naming the file and the field, exit code 2, and writes nothing.


def _notebook(path, params="SMOKE = False\nSTEPS = 1\nMODEL = 'x'"):
    import nbformat

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(params)
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell, nbformat.v4.new_code_cell("print(STEPS)")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


@pytest.mark.parametrize(
    "text,args,field",
    [
        ("", [], "empty"),
        ("name: demo\n", [], "notebooks"),
        ("name: demo\nnotebooks: []\n", [], "notebooks"),
        ("notebooks:\n  - notebook: {nb}\n    parameters: {{STEPZ: 3}}\n", [], "STEPZ"),
        ("notebooks:\n  - notebook: {nb}\n", ["--set", "STEPZ=3"], "STEPZ"),
        ("notebooks:\n  - notebook: {dir}/missing.ipynb\n", [], "missing.ipynb"),
        ("notebooks:\n  - notebook: {nb}\n    colour: blue\n", [], "colour"),
        ("name: ../up\nnotebooks:\n  - notebook: {nb}\n", [], "name"),
        ("notebooks:\n  - notebook: {nb}\n  smoke: true\n", [], "line"),
        ("smoke: yes please\nnotebooks:\n  - notebook: {nb}\n", [], "smoke must be a valid boolean"),
        ("1: 2\nnotebooks:\n  - notebook: {nb}\n", [], "1 is not a known field"),
        ("notebooks: [{nb}]\n", [], "notebooks must be a valid dictionary"),
        ("notebooks:\n  - parameters: {{}}\n", [], "notebooks[0]: field 'notebook' is missing"),
        ("notebooks:\n  - notebook: {nb}\n    parameters: [1]\n", [], "parameters must be a valid dictionary"),
        ("notebooks:\n  - notebook: {nb}\n    smoke: 1\n", [], "notebooks[0]: smoke must be a valid boolean"),
    ],
)
def test_batch_refuses_bad_plans_in_one_line(tmp_path, capsys, text, args, field):
    from trgrpo.runs.batch import main

    nb = _notebook(tmp_path / "a.ipynb")
    cfg = tmp_path / "plan.yaml"
    cfg.write_text(text.format(nb=nb, dir=tmp_path))
    refused(capsys, main([str(cfg), "--runs", str(tmp_path / "runs"), *args]), field)
    assert not (tmp_path / "runs").exists()


def test_batch_accepts_the_parameters_a_notebook_declares(tmp_path):
    from trgrpo.notebook import parameter_defaults
    from trgrpo.runs.spec import load_plan

    nb = _notebook(tmp_path / "a.ipynb", "SMOKE = False\nA = 1\nB = [2,\n     3]  # a list\nC: int = 3\nD = os.sep")
    assert parameter_defaults(nb) == {"SMOKE": False, "A": 1, "B": [2, 3], "C": 3, "D": None}
    cfg = tmp_path / "plan.yaml"
    cfg.write_text(f"notebooks:\n  - notebook: {nb}\n    parameters: {{A: 5}}\n")
    assert load_plan(cfg, {"C": 4}) == ("plan", [(nb, False, {"A": 5, "C": 4})])


BAD_VALUES = [  # (notebook, parameters, the parameter the one line names)
    ("05_kk_logic_full_scale", "{STEPS: -5}", "STEPS"),
    ("05_kk_logic_full_scale", "{SEEDS: zero}", "SEEDS"),
    ("05_kk_logic_full_scale", "{SEEDS: []}", "SEEDS"),
    ("05_kk_logic_full_scale", "{SEEDS: [4294967296]}", "SEEDS"),
    ("05_kk_logic_full_scale", "{SCHEMES: []}", "SCHEMES"),
    ("05_kk_logic_full_scale", "{PREFILL_THINK: 'no'}", "PREFILL_THINK"),
    ("05_kk_logic_full_scale", "{VLLM_GPU_MEMORY: 5}", "VLLM_GPU_MEMORY"),
    ("05_kk_logic_full_scale", "{VLLM_GPU_MEMORY: .nan}", "VLLM_GPU_MEMORY"),
    ("05_kk_logic_full_scale", "{GPU_MEM_GB: -5}", "GPU_MEM_GB"),
    ("05_kk_logic_full_scale", "{RANGES: [[1.0]]}", "RANGES"),
    ("05_kk_logic_full_scale", "{STEPS: 1.5}", "STEPS"),
    ("05_kk_logic_full_scale", "{MODEL: ''}", "MODEL"),
    ("05_kk_logic_full_scale", "{PLACEMENT: middle}", "PLACEMENT"),  # issue 48 item 4: was the spec's 'placement'
    ("05_kk_logic_full_scale", "{TAU_MODE: times}", "TAU_MODE"),
    ("06_math_full_scale", "{TRAIN: 5}", "TRAIN"),
    ("06_math_full_scale", "{GROUP_SIZE: true}", "GROUP_SIZE"),
    ("07_agentic_search", "{TEMPERATURE: 0}", "TEMPERATURE"),
    ("07_agentic_search", "{WARM_START_LR: [1e-3, -1]}", "WARM_START_LR"),
]


@pytest.mark.parametrize("notebook,params,field", BAD_VALUES)
def test_batch_refuses_bad_parameter_values_at_load(tmp_path, capsys, notebook, params, field):
    from trgrpo.runs.batch import main

    cfg = tmp_path / "plan.yaml"
    cfg.write_text(f"notebooks:\n  - notebook: notebooks/{notebook}.ipynb\n    parameters: {params}\n")
    line = refused(capsys, main([str(cfg), "--runs", str(tmp_path / "runs")]), field, "plan.yaml")
    assert "parameter" in line
    assert not (tmp_path / "runs").exists()


def test_batch_refuses_a_bad_set_value_as_typed(tmp_path):
    cfg = tmp_path / "plan.yaml"
    cfg.write_text("notebooks:\n  - notebook: notebooks/05_kk_logic_full_scale.ipynb\n")
    cmd = [sys.executable, "-m", "trgrpo", "batch", str(cfg), "--runs", str(tmp_path / "runs"), "--set", "STEPS=-5"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "STEPS" in p.stderr and "--set" in p.stderr
    assert not (tmp_path / "runs").exists()


def test_every_notebook_default_meets_the_parameter_rules():
    from trgrpo.notebook import check_values as check_parameters
    from trgrpo.notebook import parameter_defaults

    for nb in sorted((ROOT / "notebooks").glob("**/*.ipynb")):
        defaults = parameter_defaults(nb)
        check_parameters(defaults, defaults, nb.name)  # raises on a default its own rules refuse


def _python_m(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    folders = {"TRGRPO_RESULTS": "results", "TRGRPO_CHECKPOINTS": "checkpoints", "TRGRPO_RUNS": "runs"}
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
        **{k: str(tmp_path / v) for k, v in folders.items()},
        **env,
    }
    cmd = [sys.executable, "-m", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


# notebooks 05 and 06 in smoke mode under papermill: ~2 minutes on 2 cores, and `make test` executes both notebooks
# already (nbval); the command itself is checked here, in the slow tier
@pytest.mark.slow
def test_batch_smoke_plan(tmp_path):
    """`trgrpo batch experiments/smoke.yaml` as typed: both notebooks run, the summary says so."""
    r = _python_m(["trgrpo", "batch", "experiments/smoke.yaml"], tmp_path, TRGRPO_FIGURES=str(tmp_path / "figures"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = json.loads((tmp_path / "runs" / "smoke" / "summary.json").read_text())
    assert [row["notebook"] for row in rows] == ["05_kk_logic_full_scale.ipynb", "06_math_full_scale.ipynb"]
    assert all(row["ok"] and row["smoke"] for row in rows)


# Issue 48, item 3: a plan the planner refuses is refused by the batch at load, before any notebook (was: notebook 05
# started, PapermillExecutionError after seconds to minutes, exit 1, runs/<plan>/ written)
PLANNER_REFUSES = [  # (notebook, parameters, what the one line says)
    ("05_kk_logic_full_scale", "{GROUP_SIZE: 1}", "num_generations"),
    ("05_kk_logic_full_scale", "{SCHEMES: [nope]}", "scheme"),
    ("06_math_full_scale", "{TRAIN: nope/dsr.parquet}", "nope/dsr.parquet"),
    ("05_kk_logic_full_scale", "{KK_TRAIN_PATH: /nope/train.parquet}", "train_path"),
    ("05_kk_logic_full_scale", "{STEPS: 1000000000}", "--allow-long"),
    ("06_math_full_scale", "{MAX_COMPLETION_LENGTH: 1000000000}", "--allow-long"),
    ("05_kk_logic_full_scale", "{MODEL: nobody/unknown-model}", "model 'nobody/unknown-model': unknown shape"),
]


@pytest.mark.parametrize("notebook,params,says", PLANNER_REFUSES)
def test_batch_refuses_at_load_what_the_planner_refuses(tmp_path, capsys, notebook, params, says):
    cfg = tmp_path / "plan.yaml"
    cfg.write_text(f"notebooks:\n  - notebook: notebooks/{notebook}.ipynb\n    parameters: {params}\n")
    refused(capsys, main([str(cfg), "--runs", str(tmp_path / "runs")]), cfg, says)
    assert not (tmp_path / "runs").exists()


def test_the_shipped_plans_pass_the_batchs_load_checks():
    from trgrpo.runs.plan import check_batch
    from trgrpo.runs.spec import read_config

    for path in sorted((ROOT / "experiments").glob("*.yaml")):
        if "notebooks" in read_config(path):
            check_batch(path, load_plan(path)[1])  # raises on a plan the batch would refuse


def test_a_restarted_batch_skips_the_notebooks_that_finished(tmp_path, monkeypatch, capsys):
    """Was: an interrupted batch wrote no summary, and a restart ran every notebook again."""
    ran = []

    def fake(nb, out_dir, *, smoke, parameters=None, timeout=None):
        ran.append(nb.name)
        if nb.name == "c.ipynb" and len(ran) == 3:
            raise KeyboardInterrupt  # Ctrl-C in the third notebook
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / nb.name).write_text("{}")
        params = {"SMOKE": smoke, **(parameters or {})}
        ok = nb.name != "b.ipynb" or len(ran) > 3  # b fails in the first batch
        row = {"notebook": nb.name, "smoke": smoke, "parameters": params, "ok": ok, "seconds": 1.0, "error": ""}
        return {**row, "output": str(out_dir / nb.name)}

    monkeypatch.setattr(batch, "run_notebook", fake)
    plan = [(tmp_path / f"{n}.ipynb", True, {"X": 1}) for n in "abc"]
    with pytest.raises(KeyboardInterrupt):
        batch.run_notebooks(plan, tmp_path / "out")
    assert ran == ["a.ipynb", "b.ipynb", "c.ipynb"]
    rows = batch.run_notebooks(plan, tmp_path / "out")  # the restart: a finished, b failed, c never did
    assert ran[3:] == ["b.ipynb", "c.ipynb"] and [r["ok"] for r in rows] == [True, True, True]
    assert "a.ipynb: finished in an earlier batch" in capsys.readouterr().out
    plan[0] = (plan[0][0], True, {"X": 2})  # other parameters: run again
    batch.run_notebooks(plan, tmp_path / "out")
    assert ran[5:] == ["a.ipynb"]
    batch.run_notebooks(plan, tmp_path / "out", rerun=True)
    assert ran[6:] == ["a.ipynb", "b.ipynb", "c.ipynb"]
