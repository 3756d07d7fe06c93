"""trgrpo.notebook: the one helper that replaced each notebook's ROOT / sys.path / SMOKE / TAG / headline lines
(issue 13, deliverable 4), and a check that no notebook went back to them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from course import workbooks
from trgrpo import notebook
from trgrpo.notebook import Notebook, find_root, setup, versions

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = workbooks.main_notebooks() + workbooks.solution_notebooks()


@pytest.mark.parametrize(
    ("value", "smoke"),
    [
        (None, False),
        ("", False),
        ("0", False),
        ("false", False),
        ("False", False),
        ("1", True),
        ("true", True),
        ("yes", True),
    ],
)
def test_smoke_from_env(monkeypatch, tmp_path, value, smoke):
    if value is None:
        monkeypatch.delenv("TRGRPO_SMOKE", raising=False)
    else:
        monkeypatch.setenv("TRGRPO_SMOKE", value)
    assert setup("01_x", root=tmp_path).smoke is smoke


def test_setup_reads_the_environment_unless_told(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("TRGRPO_SMOKE", "1")
    assert setup("01_x", root=tmp_path).smoke is True
    assert setup("01_x", False, root=tmp_path).smoke is False  # a papermill parameter wins over the environment
    monkeypatch.setenv("TRGRPO_SMOKE", "0")
    assert setup("01_x", root=tmp_path).smoke is False
    assert setup("01_x", True, root=tmp_path).smoke is True
    assert "01_x: smoke mode" in capsys.readouterr().out


def test_tag_and_paths(tmp_path, monkeypatch):
    monkeypatch.delenv("TRGRPO_FIGURES", raising=False)
    full, smoke = Notebook("02_w", False, tmp_path), Notebook("02_w", True, tmp_path)
    assert (full.tag, smoke.tag) == ("", "_smoke")
    assert full.results == ROOT / "results", "no results/ here: the committed records of the package's checkout"
    (tmp_path / "results").mkdir()
    assert full.results == smoke.results == tmp_path / "results"
    assert full.runs == tmp_path / "results" and smoke.runs == tmp_path / "runs" / "smoke-results"
    assert full.figures == tmp_path / "runs" / "figures", "git-ignored: a run rewrites no tracked figure"
    assert full.figures.is_dir(), "created: a notebook writes into it before any plot (07's rollout page)"
    assert full.headline_path == tmp_path / "runs" / "notebooks" / "02_w.json", "git-ignored: `make records` promotes"
    assert smoke.headline_path == tmp_path / "runs" / "notebooks" / "02_w_smoke.json"
    monkeypatch.setenv("TRGRPO_FIGURES", str(tmp_path / "elsewhere"))
    assert full.figures == tmp_path / "elsewhere"


def test_root_is_the_checkout_from_any_notebook_folder(tmp_path, monkeypatch):
    (tmp_path / "trgrpo").mkdir()
    (tmp_path / "trgrpo" / "__init__.py").write_text("")
    for sub in ("notebooks", "notebooks/solutions", "student", "student/exercises"):
        (tmp_path / sub).mkdir(parents=True, exist_ok=True)
        assert find_root(tmp_path / sub) == tmp_path.resolve(), sub
        monkeypatch.chdir(tmp_path / sub)
        assert setup("03_x").root == tmp_path.resolve()
    outside = tmp_path.parent / f"{tmp_path.name}-copy"
    outside.mkdir()
    assert find_root(outside) == outside.resolve(), "outside a checkout a notebook writes beside itself"
    assert find_root(ROOT / "notebooks" / "solutions") == ROOT


def test_save_headline_writes_the_tagged_file_and_prints_a_short_summary(tmp_path, capsys):
    nb = Notebook("05_k", True, tmp_path)
    headline = {"smoke": True, "model": "m", **{f"k{i}": i for i in range(30)}, "nested": {"a": [1, 2]}}
    path = nb.save_headline(headline, keys=["smoke", "model"])
    assert path == tmp_path / "runs" / "notebooks" / "05_k_smoke.json"
    saved = json.loads(path.read_text())
    assert saved.pop("provenance").keys() >= {"git_commit", "git_dirty", "machine"}, "the commit and a clean flag"
    assert saved == headline
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == f"saved to {path}" and len(out) <= 10, out
    assert "k29" not in "\n".join(out)
    path.unlink()
    assert nb.save_headline(headline, quiet=True) == path and json.loads(path.read_text())["k29"] == 29
    assert capsys.readouterr().out == "", "quiet: a hidden bookkeeping cell prints nothing"


def test_setup_names_a_bad_name():
    for bad in ("", "notebooks/01_x", "01_x.ipynb", None):
        with pytest.raises(ValueError, match="name"):
            setup(bad)


def test_elapsed_counts_from_setup():
    nb = Notebook("00_p", False, ROOT, started=0.0)
    assert nb.elapsed() > 1e9


def test_versions_names_python_each_package_and_trgrpo():
    line = versions("torch", "numpy")
    import numpy
    import torch

    assert line.startswith("python ") and f"numpy {numpy.__version__}" in line and line.endswith("trgrpo 0.1.0")
    assert re.search(rf"torch {re.escape(torch.__version__)} \((CPU|\d+ CUDA devices?)\)", line), line
    with pytest.raises(ModuleNotFoundError):
        versions("no_such_package_xyz")


def test_cpu_threads_sets_torch(monkeypatch):
    import torch

    before = torch.get_num_threads()
    try:
        assert notebook.cpu_threads(1) == 1 and torch.get_num_threads() == 1
        assert notebook.cpu_threads(0) in (1, 2)
    finally:
        torch.set_num_threads(before)


# ---------------------------------------------------------------- the notebooks use it

OLD_BOILERPLATE = {
    "sys.path.insert": re.compile(r"sys\.path\.insert"),
    "ROOT from the working folder": re.compile(r"Path\.cwd\(\)\.parents?\b"),
    "a hand-made TAG": re.compile(r"^TAG\s*=", re.M),
    "a start time by hand": re.compile(r"^T0\s*=\s*time\.time\(\)", re.M),
    "a JSON dump of the headline": re.compile(r"json\.dumps\(headline|print\(headline\)"),
    "a headline path by hand": re.compile(r"((?<!nb\.)save_headline\(|write_text\(json\.dumps)"),
    "smoke results by a relative path": re.compile(r"\.\./runs/smoke-results|\.\./results"),
    "__import__": re.compile(r"__import__\("),
    "a one- or two-letter alias of a trgrpo module": re.compile(
        r"^(from trgrpo\S* import \w+|import trgrpo\S*) as [A-Za-z]{1,2}$", re.M
    ),
    "several modules on one import line": re.compile(r"^import \w+(\.\w+)*, ", re.M),
}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_no_notebook_keeps_the_old_boilerplate(path):
    cells = [c for c in workbooks.read(path).cells if c.cell_type == "code"]
    probes = [c.get("metadata", {}).get("wrong_answer") or "" for c in cells]  # the checks' wrong answers too
    code = "\n".join([c.source for c in cells] + probes)
    found = [what for what, pattern in OLD_BOILERPLATE.items() if pattern.search(code)]
    assert not found, f"{path.name}: {found} (use trgrpo.notebook: setup, versions, nb.save_headline)"
    assert re.search(rf"""\bsetup\(\s*["']{re.escape(path.stem)}["']""", code), (
        f"{path.name}: call setup({path.stem!r}, SMOKE) after the parameters cell"
    )


def test_the_boilerplate_check_can_fail():
    old = "ROOT = Path.cwd().parent\nsys.path.insert(0, str(ROOT))\n"
    old += "from trgrpo.tasks import search as S\nimport numpy as np\n"
    found = [what for what, pattern in OLD_BOILERPLATE.items() if pattern.search(old)]
    assert found == ["sys.path.insert", "ROOT from the working folder", "a one- or two-letter alias of a trgrpo module"]
    assert not [what for what, pattern in OLD_BOILERPLATE.items() if pattern.search("_ = nb.save_headline(headline)")]


def test_show_table_displays_a_rendered_table_checked_as_its_markdown_text(monkeypatch):
    """Floats rounded to ``digits`` (-0.0 as 0.0), None '-', booleans yes / no; text/plain is the Markdown source."""
    import IPython.display

    from trgrpo.notebook import markdown_table

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, raw=False: shown.append((obj, raw)))
    rows = [{"a": 1.0, "b": None, "c": True}, {"a": -0.00001, "b": "x", "c": False}]
    assert notebook.show_table(rows, title="T") is None  # nothing echoed as the cell's value
    ((obj, raw),) = shown
    assert raw and obj["text/markdown"] == obj["text/plain"]
    assert obj["text/plain"].splitlines() == [
        "**T**",
        "",
        "| a | b | c |",
        "|---|---|---|",
        "| 1.000 | - | yes |",
        "| 0.000 | x | no |",
    ]
    assert markdown_table(rows, ["a"], digits=1).splitlines()[2:] == ["| 1.0 |", "| 0.0 |"]
    assert markdown_table(rows).splitlines()[2:] == ["| 1.0 | None | True |", "| -1e-05 | x | False |"]  # as before


PAST = {  # what a rule says a parameter must be -> a value just past its bound (of the right type)
    "an integer >= 1": 0,
    "an integer >= 0 (below 2**32)": 2**32,
    "a non-empty list of integers >= 0 (below 2**32)": [0, -1],
    "a non-empty list of names": ["tr", ""],
    "an integer >= 0 or a list of them (phases)": [1, -1],
    "a number > 0 or a list of them (phases)": [1e-3, 0.0],
    "a number in (0, 1]": 1.5,
    "a finite number > 0": 0.0,
    "a finite number >= 0": -0.5,
    '"hub:<dataset>", "reasoning-gym", a Logic-RL file or a list of them': ["a.parquet", ""],
    "a list of numbers > 0": [1.0, 0.0],
    "a list of [L, U] pairs, 0 < L <= U": [[1.0, 1.4], [1.4, 1.0]],
    "one of ['ratio', 'surrogate']": "middle",
    "one of ['scale', 'divide']": "times",
}


@pytest.mark.parametrize("name", sorted(notebook.PARAMETER_RULES))
def test_every_parameter_rule_refuses_the_value_past_its_bound(name):
    """Each rule is a pydantic type with its bounds and its words (the description): the value just past a bound,
    inside a list too, is refused in one line with those words; a bound pydantic did not read would pass it."""
    from trgrpo.config import ConfigError

    what = notebook.parameters_model({name: None}).model_fields[name].description
    with pytest.raises(ConfigError) as err:
        notebook.check_values({name: PAST[what]}, {name: 1}, "nb")
    assert str(err.value) == f"nb: parameter {name} must be {what}, got {PAST[what]!r}"


def test_a_parameter_without_a_rule_has_its_defaults_type():
    from trgrpo.config import ConfigError

    defaults = {"MODEL": "x", "BF16": True, "MU": 0.25, "SAVE_STEPS": 20, "ZIPF_S": (0.5, 1.0), "DATA_DIR": None}
    good = {"MODEL": "y", "BF16": False, "MU": 1, "SAVE_STEPS": 3, "ZIPF_S": [2.0], "DATA_DIR": "anything"}
    notebook.check_values(good, defaults, "nb")
    for name, bad in {"MODEL": "", "BF16": "no", "MU": True, "SAVE_STEPS": 2.5, "ZIPF_S": "0.5"}.items():
        with pytest.raises(ConfigError, match=rf"^nb: parameter {name} must be a \w+ \(as its default "):
            notebook.check_values({name: bad}, defaults, "nb")


# From test_output.py: Readable notebook output at the source (trgrpo/notebook.py, issue 17).


def _run(code: str, **env: str) -> subprocess.CompletedProcess:

    e = {k: v for k, v in {**os.environ, "PYTHONPATH": str(ROOT), **env}.items() if v != "<unset>"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=120)


def test_dependency_future_warnings_are_filtered_ours_are_not():
    code = (
        "import warnings, types, sys\n"
        "from trgrpo.notebook import setup; setup('x', root='.')\n"
        "m = types.ModuleType('transformers.fake'); sys.modules['transformers.fake'] = m\n"
        "exec(\"import warnings\\ndef f(): warnings.warn('old api', FutureWarning)\", m.__dict__)\n"
        "m.f()\n"
        "warnings.warn('ours', FutureWarning)\n"
    )
    r = _run(code)
    assert "old api" not in r.stderr and "ours" in r.stderr, r.stderr


def test_headless_turns_progress_bars_off_and_interactive_keeps_them():
    code = (
        "import os; from trgrpo.notebook import setup; setup('x', root='.')\n"
        "print(os.environ.get('TQDM_DISABLE'), os.environ.get('HF_HUB_DISABLE_PROGRESS_BARS'))"
    )
    assert _run(code, TRGRPO_HEADLESS="1").stdout.split()[-2:] == ["1", "1"]
    r = _run(code, TRGRPO_HEADLESS="0", TQDM_DISABLE="<unset>", HF_HUB_DISABLE_PROGRESS_BARS="<unset>")
    assert r.stdout.split()[-2:] == ["None", "None"], r.stdout  # JupyterLab: the bars stay on


def test_save_headline_writes_everything_and_prints_at_most_ten_lines(tmp_path, capsys):
    import json
    import math

    import pytest

    from trgrpo.notebook import Notebook

    nb = Notebook("03_x", False, tmp_path)
    headline = {f"s{i}": i + 0.123456 for i in range(12)}
    headline["nested"] = {"a": [1, 2, 3], "b": {"c": 1}}
    headline["nan"] = math.nan
    path = nb.save_headline(headline)
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) <= 10
    assert printed[0] == f"saved to {path}"
    assert "  s0: 0.1235" in printed and not any("nested" in line for line in printed)
    assert printed[-1] == "  (+7 more entries in the file)"  # 15: the 14 given and the provenance
    rec = json.loads(path.read_text())
    assert rec["nested"] == headline["nested"] and rec["nan"] is None and len(rec) == 15
    nb.save_headline(headline, keys=["s3", "nested", "s1"])
    shown = capsys.readouterr().out.splitlines()[1:]
    assert shown == ["  s3: 3.123", "  s1: 1.123", "  (+13 more entries in the file)"]
    path.unlink()
    with pytest.raises(KeyError, match="missing"):
        nb.save_headline(headline, keys=["missing"])
    with pytest.raises(TypeError, match="headline"):
        nb.save_headline([1])
    assert not path.exists(), "a bad headline or key writes nothing"


def _notebook(path, params="SMOKE = False\nSTEPS = 1\nMODEL = 'x'"):
    import nbformat

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(params)
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell, nbformat.v4.new_code_cell("print(STEPS)")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


@pytest.mark.slow  # three papermill executions, ~20 s on 2 busy cores; check_values is tested in process below
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


@pytest.mark.slow  # notebook 05 under papermill up to its plan cell: ~40 s on 2 busy cores
def test_a_failing_notebook_shows_one_line_in_its_cell_and_in_the_batch(tmp_path, capsys):
    """Issue 48, item 4: notebook 05 with a micro-batch no GPU holds stops at its plan cell. Its error output is the one
    line (was a SystemExit: IPython's "An exception has occurred" and an exit warning), and `trgrpo batch` prints
    that line (was "PapermillExecutionError: ...", cut at 200 characters)."""
    import nbformat

    from trgrpo.runs.batch import main

    cfg = tmp_path / "plan.yaml"
    params = "{MICRO_BATCH_SIZE: 64, GPUS: 1, GPU_MEM_GB: 80}"
    entry = f"  - notebook: notebooks/05_kk_logic_full_scale.ipynb\n    parameters: {params}\n"
    cfg.write_text(f"name: p\nnotebooks:\n{entry}")
    assert main([str(cfg), "--runs", str(tmp_path / "runs")]) == 1
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if "FAILED in" in ln]
    assert re.search(r"FAILED in \d+ s ConfigError: DOES NOT FIT: kk-Qwen2\.5-3B-Instruct-\S+: peak [\d.]+ GB", line)
    assert "Papermill" not in out and "Traceback" not in out
    cells = nbformat.read(tmp_path / "runs" / "p" / "05_kk_logic_full_scale.ipynb", as_version=4).cells
    (shown,) = [o for c in cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert len(shown["traceback"]) == 1 and shown["traceback"][0].startswith("ConfigError: DOES NOT FIT: kk-Qwen2.5")
    stderr = [o for c in cells for o in c.get("outputs", []) if o.get("name") == "stderr"]
    assert not any("To exit" in o["text"] for o in stderr)


@pytest.mark.slow  # notebook 05's first cells under papermill: ~20 s on 2 busy cores
def test_smoke_mode_says_which_passed_parameters_it_replaces(tmp_path):
    """Issue 48, item 4: papermill -p KK_TRAIN_PATH ... in smoke mode trained on reasoning-gym's puzzles without a
    word; notebook 05's smoke branch now names it in one line (its cells up to that branch, as the file has them)."""
    import nbformat
    import papermill as pm

    doc = nbformat.read(ROOT / "notebooks" / "05_kk_logic_full_scale.ipynb", as_version=4)
    end = next(i for i, c in enumerate(doc.cells) if "if SMOKE:" in c.source)
    doc.cells = doc.cells[: end + 1]
    nb = tmp_path / "05_kk_logic_full_scale.ipynb"
    nbformat.write(doc, nb)
    params = {"SMOKE": True, "KK_TRAIN_PATH": "data/kk/train.parquet", "STEPS": 5, "RESULTS": str(tmp_path / "r")}
    out = tmp_path / "out.ipynb"
    pm.execute_notebook(str(nb), str(out), parameters=params, progress_bar=False, cwd=str(ROOT / "notebooks"))
    text = "".join(o.get("text", "") for c in nbformat.read(out, as_version=4).cells for o in c.get("outputs", []))
    (line,) = [ln for ln in text.splitlines() if ln.startswith("smoke mode replaces")]
    assert "KK_TRAIN_PATH='data/kk/train.parquet', STEPS=5 (" in line and "RESULTS" not in line


def test_placement_and_tau_mode_are_named_as_the_parameter_typed(tmp_path):
    """Issue 48, item 4: -p PLACEMENT middle / -p TAU_MODE times passed the parameter check and failed later naming
    the spec's field (placement, tau_mode), not the parameter a user typed."""
    from trgrpo.config import ConfigError

    defaults = notebook.parameter_defaults(ROOT / "notebooks" / "05_kk_logic_full_scale.ipynb")
    for name, bad in (("PLACEMENT", "middle"), ("TAU_MODE", "times")):
        with pytest.raises(ConfigError, match=rf"^05: parameter {name} must be one of \[.*\], got '{bad}'$"):
            notebook.check_values({name: bad}, defaults, "05")
    notebook.check_values({"PLACEMENT": "surrogate", "TAU_MODE": "divide"}, defaults, "05")


def test_threads_zero_is_the_machines_default_in_every_notebook(monkeypatch):
    """Issue 48, item 4: -p THREADS 0 (the rule allows >= 0) reached torch.set_num_threads(0) in notebook 03
    (RuntimeError); every notebook hands THREADS to cpu_threads, where 0 means the default."""
    import torch

    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        code = "".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
        assert not re.search(r"set_num_threads\(THREADS\)", code), path.name
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    assert notebook.cpu_threads(0) in (1, 2)
