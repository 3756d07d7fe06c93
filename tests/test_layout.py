"""The layout: tasks never import the trainer; split modules stay readable in one sitting; old import paths and
command lines keep working after a module moved."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "trgrpo"
TASK_MODULES = sorted((PKG / "tasks").glob("*.py"))
ALL_MODULES = sorted(PKG.rglob("*.py"))
SUBPACKAGES = ("core", "tasks", "pipeline", "results", "teach", "tooling")
# The command lines the README gives (python -m trgrpo.<name>): each a forwarder to the module that moved.
COMMANDS = ("batch", "bench", "course", "gpu_check", "models", "plan", "run_all", "toy_controls", "train")


def _package(path: Path) -> str:
    return ".".join(("trgrpo", *path.relative_to(PKG).parts[:-1]))


def _imported_modules(source: str, package: str) -> set[str]:
    """Every module an import statement names (function-level imports included), made absolute for ``package``."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - (node.level - 1)]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module
            out.add(mod)
            out |= {f"{mod}.{a.name}" for a in node.names}
    return out


def _imports_trainer(source: str, package: str) -> set[str]:
    """Imports of trgrpo's trainer or TRL's trainers (TRL's chat-template helpers are fine for a task)."""
    trainers = ("trgrpo.trainer", "trl.trainer", "trl.GRPOTrainer", "trl.GRPOConfig")
    return {m for m in _imported_modules(source, package) if m.startswith(trainers)}


@pytest.mark.parametrize("path", TASK_MODULES, ids=[p.name for p in TASK_MODULES])
def test_no_task_module_imports_the_trainer(path):
    bad = _imports_trainer(path.read_text(), _package(path))
    hint = "build trainers in a run module (e.g. trgrpo/search_run.py)"
    assert not bad, f"{path.name} imports {sorted(bad)}: {hint}"


@pytest.mark.parametrize(
    "source",
    [
        "def f():\n    from ..core.trainer import TRGRPOTrainer\n",
        "from trgrpo.core import trainer\n",
        "import trgrpo.trainer\n",
        "from trl import GRPOTrainer\n",
    ],
)
def test_the_import_check_sees_relative_nested_and_absolute_imports(source):
    assert _imports_trainer(source, "trgrpo.tasks")
    assert not _imports_trainer("from ..core.weights import token_weights\n", "trgrpo.tasks")


def test_importing_every_task_module_loads_no_trainer():
    names = [f"trgrpo.tasks.{p.stem}" for p in TASK_MODULES if p.stem != "__init__"]
    code = (
        "import importlib, sys\n"
        f"for n in {names!r}: importlib.import_module(n)\n"
        "from trgrpo.tasks.search import run_search, SearchSpec, make_search_trainer\n"
        "print(sorted(m for m in sys.modules if m in ('trgrpo.trainer', 'trl')))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stdout


@pytest.mark.parametrize("path", ALL_MODULES, ids=[str(p.relative_to(PKG)) for p in ALL_MODULES])
def test_every_module_is_readable_in_one_sitting(path):
    n = len(path.read_text().splitlines())
    assert n <= 600, f"{path.relative_to(ROOT)} has {n} lines (split it by concern)"


def test_the_package_top_level_holds_only_the_command_lines():
    """The code lives in the sub-packages; the top level keeps ``__init__`` and the README's command lines."""
    top = {p.stem for p in PKG.glob("*.py")} - {"__init__"}
    assert top == set(COMMANDS)
    subs = {p.name for p in PKG.iterdir() if (p / "__init__.py").exists()}
    assert subs == set(SUBPACKAGES)
    for name in COMMANDS:
        source = (PKG / f"{name}.py").read_text()
        assert "runpy.run_module" in source and len(source.splitlines()) <= 8, name


def test_a_moved_command_line_still_runs():
    """``python -m trgrpo.plan --help`` reaches trgrpo.plan's parser through the forwarder."""
    r = subprocess.run(
        [sys.executable, "-m", "trgrpo.plan", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0 and "usage" in r.stdout.lower(), r.stderr[-2000:]


def test_the_design_doc_names_every_module():
    """docs/design.md's layout lists each module of the package, so the map cannot fall behind the tree."""
    design = (ROOT / "docs" / "design.md").read_text()
    named = [str(p.relative_to(PKG)) for p in ALL_MODULES if p.name != "__init__.py"]
    missing = [n for n in named if n not in design]
    assert not missing, f"docs/design.md does not name {missing}"


def test_old_search_path_keeps_every_public_name():
    from trgrpo import search_run
    from trgrpo.tasks import search as S

    missing = [n for n in S.__all__ if not hasattr(S, n)]
    assert not missing, missing
    assert S.run_search is search_run.run_search and S.SearchSpec is search_run.SearchSpec
    with pytest.raises(AttributeError):
        _ = S.no_such_name


def test_old_bench_path_keeps_every_public_name():
    from trgrpo import bench
    from trgrpo import bench as bench_common
    from trgrpo import bench as bench_loss
    from trgrpo import bench as bench_notebooks
    from trgrpo import bench as bench_step
    from trgrpo import bench as bench_table

    for mod in (bench_common, bench_loss, bench_notebooks, bench_step, bench_table):
        public = [
            n for n, v in vars(mod).items() if not n.startswith("_") and getattr(v, "__module__", None) == mod.__name__
        ]
        missing = [n for n in public if getattr(bench, n, None) is not getattr(mod, n)]
        assert not missing, f"trgrpo.bench lacks {missing} of {mod.__name__}"
    assert bench.ROOT == ROOT and bench.RESULTS_DIR == ROOT / "results" / "bench"


def test_the_generic_runner_holds_no_task_specific_code():
    """K&K, math and the toy register themselves (tasks/paper_tasks.py, tasks/addition.py); experiment.py imports
    none of their modules and names none of their functions."""
    source = (PKG / "pipeline" / "experiment.py").read_text()
    imported = _imported_modules(source, "trgrpo.pipeline")
    task_modules = ("trgrpo.tasks.kk", "trgrpo.tasks.math", "trgrpo.tasks.arith", "trgrpo.tasks.addition")
    assert not {m for m in imported if m.startswith(task_modules)}
    for word in ("kk_", "math_", "arith_", "evaluate_kk", "evaluate_math"):
        assert word not in source.replace("SAMPLED_MATH_SETS", ""), word
    from trgrpo.tasks import TASKS

    assert {"kk", "math", "arith", "addition", "addition_trace"} <= set(TASKS)


def test_old_toy_and_experiment_paths_keep_every_public_name():
    from trgrpo import experiment, toy
    from trgrpo import experiment as records
    from trgrpo import experiment as spec
    from trgrpo import tables as toy_analysis
    from trgrpo import tasks as registry
    from trgrpo import toy as toy_model
    from trgrpo import toy as toy_run
    from trgrpo import toy as warm_start
    from trgrpo.tasks import addition

    for old, mods in ((toy, (toy_model, toy_run, toy_analysis, warm_start, addition)),):
        for mod in mods:
            public = [
                n
                for n, v in vars(mod).items()
                if not n.startswith("_") and callable(v) and getattr(v, "__module__", None) == mod.__name__
            ]
            missing = [n for n in public if getattr(old, n, None) is not getattr(mod, n)]
            assert not missing, f"{old.__name__} lacks {missing} of {mod.__name__}"
    moved = ("RESULTS_DIR", "ROOT", "file_lock", "git_commit", "git_dirty", "jsonable", "load_results", "machine_info")
    moved += ("package_versions", "peak_memory_mb", "update_json", "update_marked_block", "write_json", "write_result")
    assert [n for n in moved if getattr(experiment, n) is not getattr(records, n)] == []
    assert experiment.RunSpec is spec.RunSpec and experiment.TASKS is registry.TASKS
    assert experiment.Task is registry.Task and tasks.register_task is registry.register_task


def test_notebooks_never_import_the_tooling():
    import json

    notebooks = sorted((ROOT / "notebooks").rglob("*.ipynb"))
    assert notebooks
    for nb in notebooks:
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] == "code":
                source = "".join(cell["source"])
                lines = [ln for ln in source.splitlines() if "import" in ln and "trgrpo.tooling" in ln]
                assert not lines, f"{nb.name} imports the tooling: {lines}"
