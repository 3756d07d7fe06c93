"""Issue 24 ("safe"): nothing escapes the results and checkpoints folders, and bad input is refused in one line.

The command lines (train, batch, plan) are called in-process through their ``cli`` entry points; each bad input gives
one line on stderr naming the file and the field, exit code 2, and writes nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trgrpo.files import ROOT
from trgrpo.runs import checkpoints
from trgrpo.runs.records import write_result
from trgrpo.runs.spec import RunSpec


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
        checkpoints.checkpoint_folder(spec, tmp_path / "ckpt")
    with pytest.raises(ValueError, match="group"):
        write_result(spec.group, spec.name, {"kind": "note"}, tmp_path / "res")
    assert outside.exists() and not (tmp_path / "res").exists()


# ---------------------------------------------------------------------------------------------------------------
# Command lines: one line naming the file and the field, exit code 2, nothing written


def refused(capsys, rc, *needles):
    out, err = capsys.readouterr()
    assert rc == 2, (rc, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert str(needle) in lines[0], (needle, lines[0])
    return lines[0]


KK = "task: kk\nmodel: embedded\n"


@pytest.mark.parametrize(
    "text,field",
    [
        ("", "empty"),
        ("{}\n", "empty"),
        ("# only a comment\n", "empty"),
        ("task: kk\nsteps: [1,\n", "YAML at line"),
        ("- task: kk\n", "mapping"),
        ("base: {task: kk}\ngrid: notalist\n", "grid"),
        ("base: {task: kk}\ngrid: []\n", "grid"),
        ("base: {task: kk}\nsteps: 3\ngrid: [{seed: 0}]\n", "steps"),
        ("base: notamapping\n", "base"),
        ("model: embedded\n", "task"),
        (KK + "colour: blue\n", "colour"),
        (KK + "steps: -1\n", "steps"),
        (KK + "group: /tmp/elsewhere\n", "group"),
        (KK + "name: ../up\n", "name"),
        ("base: {task: kk, name: same}\ngrid: [{seed: 0}, {seed: 1}]\n", "name"),
        (KK + "imports: [this]\n", "imports"),
        (KK + "imports: trgrpo.tasks\n", "imports"),
        (KK + "imports: [../evil.py]\n", "imports"),
        (KK + "prompts_per_step: 3\nnum_generations: 3\ngradient_accumulation_steps: 2\n", "gradient_accumulation"),
    ],
)
def test_train_refuses_bad_configs_in_one_line(tmp_path, capsys, text, field):
    import sys

    from trgrpo.runs.train import main

    cfg = tmp_path / "run.yaml"
    cfg.write_text(text)
    rc = main(["--config", str(cfg), "--results", str(tmp_path / "res")])
    refused(capsys, rc, cfg, field)
    assert "this" not in sys.modules  # `imports: [this]` ran nothing
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.yaml"]  # nothing written


def test_train_refuses_a_missing_file_and_a_bad_set(tmp_path, capsys):
    from trgrpo.runs.train import main

    refused(capsys, main(["--config", str(tmp_path / "nope.yaml")]), "nope.yaml", "no such")
    cfg = tmp_path / "run.yaml"
    cfg.write_text(KK)
    refused(capsys, main(["--config", str(cfg), "--set", "group=/abs/path", "name=x"]), cfg, "group", "--set")
    refused(capsys, main(["--config", str(cfg), "--set", "STEPZ=3"]), cfg, "STEPZ")
    refused(capsys, main(["--config", str(cfg), "--set", "steps"]), "KEY=VALUE")


def test_train_imports_a_module_next_to_the_config(tmp_path, capsys):
    from trgrpo.runs.train import main

    (tmp_path / "my_task.py").write_text(
        "from trgrpo.tasks import Task, register_task\n"
        "register_task('my-task', Task(lambda s, t: None, lambda s: [], lambda *a: {}))\n"
    )
    cfg = tmp_path / "run.yaml"
    cfg.write_text("imports: [my_task.py]\ntask: my-task\nprompts_per_step: 2\n")
    assert main(["--config", str(cfg), "--print-config"]) == 0
    assert '"runs"' in capsys.readouterr().out


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
    from trgrpo.runs.batch import load_plan

    nb = _notebook(tmp_path / "a.ipynb", "SMOKE = False\nA = 1\nB = [2,\n     3]  # a list\nC: int = 3\nD = os.sep")
    assert parameter_defaults(nb) == {"SMOKE": False, "A": 1, "B": [2, 3], "C": 3, "D": None}
    cfg = tmp_path / "plan.yaml"
    cfg.write_text(f"notebooks:\n  - notebook: {nb}\n    parameters: {{A: 5}}\n")
    assert load_plan(cfg, {"C": 4}) == ("plan", [(nb, False, {"A": 5, "C": 4})])


@pytest.mark.parametrize(
    "entry,field",
    [
        ("notebooks/05_kk_logic_full_scale.ipynb\n    parameters: {STEPZ: 3}", "STEPZ"),
        ("notebooks/05_kk_logic_full_scale.ipynb\n    parameters: {KK_TRAIN_PATH: /nope/train.parquet}", "train_path"),
        ("notebooks/06_math_full_scale.ipynb\n    parameters: {TRAIN: nope/dsr.parquet}", "nope/dsr.parquet"),
        ("notebooks/06_math_full_scale.ipynb\n    parameters: {EVAL_SETS: [math500, aime.jsonl]}", "aime.jsonl"),
        ("notebooks/07_agentic_search.ipynb\n    parameters: {TRAIN_FILE: nope/train.parquet}", "train_file"),
        ("notebooks/05_kk_missing.ipynb", "05_kk_missing"),
        ("{outside}", "project"),
    ],
)
def test_the_planner_refuses_unknown_parameters_missing_files_and_foreign_notebooks(tmp_path, capsys, entry, field):
    from trgrpo.runs import plan

    outside = _notebook(tmp_path / "05_evil.ipynb", "SMOKE = False\nMODEL = 'x'")
    cfg = tmp_path / "plan.yaml"
    cfg.write_text("notebooks:\n  - notebook: " + entry.replace("{outside}", str(outside)) + "\n")
    rc = plan.main([str(cfg), "--gpus", "8", "--gpu-mem-gb", "80"])
    refused(capsys, rc, cfg, field)


@pytest.mark.parametrize("text,field", [("", "empty"), ("name: kk_qwen3b\n", "task"), ("a: [\n", "YAML at line")])
def test_the_planner_refuses_empty_files_and_plans_without_notebooks(tmp_path, capsys, text, field):
    from trgrpo.runs import plan

    cfg = tmp_path / "plan.yaml"
    cfg.write_text(text)
    refused(capsys, plan.main([str(cfg), "--gpus", "1", "--gpu-mem-gb", "80"]), cfg, field)


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


def test_a_notebook_stops_on_a_bad_papermill_parameter_in_one_line(tmp_path):
    """papermill -p STEPS -5 or a misspelt -p STEPZ 2: the cell after the parameters (notebook.setup) stops the run,
    naming the parameter in one line (no traceback through the library), also in smoke mode; a good value runs."""
    import nbformat
    import papermill as pm

    (tmp_path / "notebooks").mkdir()
    nb = tmp_path / "notebooks" / "t.ipynb"
    _notebook(nb, "SMOKE = True\nSTEPS = 3")
    doc = nbformat.read(nb, as_version=4)
    doc.cells[1] = nbformat.v4.new_code_cell(
        f"from trgrpo.notebook import setup\nnb = setup('t', SMOKE, root={str(tmp_path)!r})"
    )
    doc.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "Python 3"}
    nbformat.write(doc, nb)
    out = tmp_path / "out.ipynb"
    with pytest.raises(pm.PapermillExecutionError) as e:
        pm.execute_notebook(str(nb), str(out), parameters={"STEPS": -5}, progress_bar=False, cwd=str(ROOT))
    assert e.value.ename == "ParameterError" and "STEPS" in e.value.evalue
    shown = [
        o for c in nbformat.read(out, as_version=4).cells for o in c.get("outputs", []) if o.output_type == "error"
    ]
    assert shown and len(shown[0]["traceback"]) == 1 and "STEPS must be an integer >= 1" in shown[0]["traceback"][0]
    with pytest.raises(pm.PapermillExecutionError) as e:  # papermill itself only warns about a misspelt name
        pm.execute_notebook(str(nb), str(out), parameters={"STEPZ": 2}, progress_bar=False, cwd=str(ROOT))
    assert e.value.ename == "ParameterError" and "unknown parameter STEPZ" in e.value.evalue
    pm.execute_notebook(str(nb), str(out), parameters={"STEPS": 2}, progress_bar=False, cwd=str(ROOT))
