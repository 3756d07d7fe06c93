"""The course material (issue 9): exercises at the end of notebooks 00-04 and 07, a solutions notebook for each
(executed in smoke mode by tests/notebooks/test_notebooks.py), the student copy of ``make student``, and the
syllabus."""

from __future__ import annotations

import ast
import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from course import workbooks
from scripts import render_docs
from tests.nbexec import execute_smoke
from tests.nbval_harness import noise
from trgrpo import exercises
from trgrpo.runs import records

nbformat = pytest.importorskip("nbformat")

ROOT = Path(__file__).resolve().parents[2]
WITH_EXERCISES = ("00_", "01_", "02_", "03_", "04_", "07_")
MAINS = [p for p in workbooks.main_notebooks() if p.name.startswith(WITH_EXERCISES)]


def _nb(cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    return nb


def _md(src, *tags):
    return nbformat.v4.new_markdown_cell(src, metadata={"tags": list(tags)})


def _code(src, *tags):
    return nbformat.v4.new_code_cell(src, metadata={"tags": list(tags)})


# ---------------------------------------------------------------- the tools, on small synthetic notebooks


def test_expected_names():
    assert exercises.expected_names("# expects: a, b_2\nassert a") == ["a", "b_2"]
    assert exercises.expected_names("assert a") == []
    assert exercises.expected_names("") == []


def test_workbook_replaces_each_solution_run_by_one_stub_and_keeps_checks():
    nb = _nb(
        [
            _md("# Solutions · 09 — x"),
            _code("print('version')"),
            _md("### Exercise 9.1 · predict · one\nDo it.", "exercise"),
            _code("a = 1", "solution"),
            _md("Because.", "solution"),
            _code("# expects: a\nassert a == 1", "check"),
            _md("### Exercise 9.2 · implement · two", "exercise"),
            _code("def f(): return 2\nb = f()", "solution"),
            _code("# expects: b\nassert b == 2", "check"),
        ]
    )
    wb = workbooks.exercise_workbook(nb)
    sources = [c.source for c in wb.cells]
    assert not any("solution" in workbooks.tags(c) for c in wb.cells)
    stubs = [c for c in wb.cells if "stub" in workbooks.tags(c)]
    assert len(stubs) == 2
    assert "expects: a." in stubs[0].source and 'NotImplementedError("Exercise 9.1' in stubs[0].source
    assert "expects: b." in stubs[1].source and "Exercise 9.2" in stubs[1].source
    guarded = [
        workbooks.guarded_check("# expects: a\nassert a == 1", "9.1"),
        workbooks.guarded_check("# expects: b\nassert b == 2", "9.2"),
    ]
    assert [sources.count(g) for g in guarded] == [1, 1] and guarded[0].endswith(
        "with exercises.check('9.1'):\n    assert a == 1"
    )
    assert wb.cells[0].source.startswith("# Exercises · 09")
    assert len(nb.cells) == 9, "the input notebook is left as it was"


def test_workbook_refuses_a_solution_without_check_or_exercise():
    with pytest.raises(ValueError, match="not followed by a check"):
        workbooks.exercise_workbook(
            _nb([_md("### Exercise 9.1 · predict · one", "exercise"), _code("a = 1", "solution")])
        )
    with pytest.raises(ValueError, match="before any exercise"):
        workbooks.exercise_workbook(_nb([_code("a = 1", "solution"), _code("# expects: a", "check")]))


def test_student_notebook_drops_explanations_and_solutions_only():
    nb = _nb(
        [
            _md("intro"),
            _md("long", "explanation"),
            _md("longer", "explanation"),
            _code("x = 1"),
            _code("y = 2", "solution"),
            _md("end"),
        ]
    )
    st = workbooks.student_notebook(nb)
    assert [c.source for c in st.cells] == ["intro", workbooks.CONCLUSION_TEXT, "x = 1", "end"]
    assert workbooks.tags(st.cells[1]) == ["conclusion"], "one 'write your conclusion' cell per run of explanations"


def test_write_student_copy_refuses_to_overwrite_the_notebooks(tmp_path):
    with pytest.raises(ValueError, match="folder of its own"):
        workbooks.write_student_copy(workbooks.NOTEBOOKS)


# ---------------------------------------------------------------- the committed exercises and solutions


def test_notebooks_with_exercises_exist():
    assert [p.name[:3] for p in MAINS] == list(WITH_EXERCISES)


@pytest.mark.parametrize("path", MAINS, ids=[p.stem for p in MAINS])
def test_exercises_numbered_and_graded(path):
    ex = workbooks.exercises(workbooks.read(path))
    n = str(int(path.name[:2]))
    assert 3 <= len(ex) <= 5, f"{path.name}: {len(ex)} exercises (want 3-5 with headings '### Exercise {n}.k · ...')"
    assert [e["id"] for e in ex] == [f"{n}.{k}" for k in range(1, len(ex) + 1)]
    kinds = [workbooks.KINDS.index(e["kind"]) for e in ex]
    assert kinds[0] == min(kinds), f"{path.name}: start with the easiest kind"
    assert max(kinds) >= 2, f"{path.name}: at least one exercise should ask to derive or implement"
    nb = workbooks.read(path)
    first_ex = next(i for i, c in enumerate(nb.cells) if "exercise" in workbooks.tags(c))
    assert all(c.cell_type == "markdown" for c in nb.cells[first_ex:]), f"{path.name}: exercises are markdown only"
    assert all(c.cell_type == "markdown" for c in nb.cells if "explanation" in workbooks.tags(c))


@pytest.mark.parametrize("path", MAINS, ids=[p.stem for p in MAINS])
def test_solutions_match_statements_and_are_checked(path):
    sol_path = workbooks.solutions_path(path)
    assert sol_path.exists(), f"missing {sol_path.relative_to(ROOT)}"
    main_ex = workbooks.exercises(workbooks.read(path))
    sol = workbooks.read(sol_path)
    sol_ex = workbooks.exercises(sol)
    assert [e["source"] for e in sol_ex] == [e["source"] for e in main_ex], (
        f"{sol_path.name}: the exercise statements must be byte-identical to those of {path.name}"
    )
    # after each statement: at least one solution cell, then exactly one check cell declaring what it expects
    cells = sol.cells
    starts = [
        i for i, c in enumerate(cells) if "exercise" in workbooks.tags(c) and workbooks.HEADING_RE.search(c.source)
    ]
    for k, i in enumerate(starts):
        block = cells[i + 1 : starts[k + 1] if k + 1 < len(starts) else len(cells)]
        kinds = [
            ("solution" if "solution" in workbooks.tags(c) else "check" if "check" in workbooks.tags(c) else "-")
            for c in block
        ]
        ex_id = main_ex[k]["id"]
        assert kinds and kinds[0] == "solution", f"{sol_path.name} Exercise {ex_id}: the solution follows the statement"
        assert kinds.count("check") == 1, f"{sol_path.name} Exercise {ex_id}: exactly one check cell"
        check = block[kinds.index("check")]
        assert check.cell_type == "code" and exercises.expected_names(check.source), (
            f"{sol_path.name} Exercise {ex_id}: the check cell's first line is '# expects: name, ...'"
        )
        assert re.search(r"assert|exercises\.expect|exercises\.check_answers\(", check.source), (
            f"{sol_path.name} Exercise {ex_id}: the check asserts"
        )
        solution_code = "\n".join(c.source for c in block[: kinds.index("check")] if c.cell_type == "code")
        for name in exercises.expected_names(check.source):
            assert re.search(rf"\b{re.escape(name)}\b", solution_code), (
                f"{sol_path.name} Exercise {ex_id}: the solution never defines {name!r}"
            )
    workbooks.exercise_workbook(sol)  # builds without error


# ---------------------------------------------------------------- the student copy


@pytest.fixture(scope="module")
def student_copy(tmp_path_factory):
    out = tmp_path_factory.mktemp("course") / "student"
    written, _ = workbooks.write_student_copy(out)
    return out, written


def test_student_copy_layout(student_copy):
    out, written = student_copy
    mains = sorted(p.name for p in out.glob("[0-9][0-9]_*.ipynb"))
    assert mains == [p.name for p in workbooks.main_notebooks()]
    books = sorted(p.name for p in (out / "exercises").glob("*.ipynb"))
    assert books == [p.name.replace("_solutions", "_exercises") for p in workbooks.solution_notebooks()]
    assert (out / "README.md").exists()
    for path in written:
        nb = workbooks.read(path)
        assert not any({"solution", "explanation"} & set(workbooks.tags(c)) for c in nb.cells), path.name
    for orig in workbooks.main_notebooks():  # a conclusion cell wherever explanations were removed
        n_expl = sum("explanation" in workbooks.tags(c) for c in workbooks.read(orig).cells)
        n_concl = sum("conclusion" in workbooks.tags(c) for c in workbooks.read(out / orig.name).cells)
        assert (n_concl > 0) == (n_expl > 0) and n_concl <= n_expl, orig.name


def test_student_copy_keeps_every_code_cell(student_copy):
    """Only markdown is removed from the main notebooks and only ``derivation`` cells change (to stubs), so the rest
    executes exactly as the originals (tested in tests/notebooks/test_notebooks.py); their exercise statements are all
    there."""
    out, _ = student_copy
    for orig in workbooks.main_notebooks():
        nb, st = workbooks.read(orig), workbooks.read(out / orig.name)
        assert [
            _unwrap(c.source)
            for c in st.cells
            if c.cell_type == "code" and workbooks.DERIVATION not in workbooks.tags(c)
        ] == [c.source for c in nb.cells if c.cell_type == "code" and workbooks.DERIVATION not in workbooks.tags(c)], (
            orig.name
        )
        assert workbooks.exercises(st) == workbooks.exercises(nb)


def _unwrap(source: str) -> str:
    """A derivation's check as the notebook has it: without the student copy's ``with exercises.derivation(...):``."""
    m = re.match(r"(from trgrpo import exercises\n\n)?with exercises\.derivation\([^)]*\):\n", source)
    return "\n".join(ln[4:] for ln in source[m.end() :].split("\n")) if m else source


def _execute(path: Path, out: Path, monkeypatch):
    return execute_smoke(path, out, monkeypatch, timeout=120)  # every cell takes seconds; a stuck reply costs 2 min


@pytest.mark.notebook
def test_student_copy_of_02_executes(student_copy, tmp_path, monkeypatch):
    """Every cell runs up to the check of the first ``derivation`` stub, which stops with one CheckFailed line."""
    pm = pytest.importorskip("papermill")
    out, _ = student_copy
    with pytest.raises(pm.PapermillExecutionError) as info:
        _execute(out / "02_token_weight_function.ipynb", tmp_path / "02.ipynb", monkeypatch)
    assert info.value.ename == "CheckFailed" and "not written yet" in info.value.evalue, info.value
    code = [c for c in workbooks.read(tmp_path / "02.ipynb").cells if c.cell_type == "code"]
    first_check = next(i for i, c in enumerate(code) if workbooks.DERIVATION in workbooks.tags(c)) + 1
    assert all(c.execution_count is not None for c in code[:first_check]), "a cell above the first check did not run"
    assert [i for i, c in enumerate(code) if any(o.output_type == "error" for o in c.outputs)] == [first_check]


# every workbook in the slow tier (6-13 s each; the same mechanism, make student); 02's student copy runs whole in the
# default tier (above)
WORKBOOKS = [
    pytest.param(name, marks=[pytest.mark.slow])
    for name in (p.name.replace("_solutions", "_exercises") for p in workbooks.solution_notebooks())
]


@pytest.mark.notebook
@pytest.mark.parametrize("name", WORKBOOKS)
def test_workbook_run_untouched_fails_at_stubs_and_checks_only(student_copy, name, tmp_path, monkeypatch):
    """A student runs the whole workbook before writing anything (Run All, every cell run on past an error): every
    cell above the first stub runs; the only errors are the stubs' own NotImplementedError and the checks' one
    CheckFailed sentence "run the cells above (kernel restarted?)" (they raised NameError with the answer keys' JSON
    and hints); no cell waits for every exercise (02's bookkeeping cell raised until the end); nothing says
    "solutions" (the set-up printed `00_grpo_primer_solutions: full mode`)."""
    pm = pytest.importorskip("papermill")
    out, _ = student_copy
    nb = workbooks.read(out / "exercises" / name)
    for c in nb.cells:
        c.metadata.setdefault("tags", []).append("raises-exception")  # as the grader runs it: on past each error
    given = tmp_path / "given.ipynb"
    nbformat.write(nb, str(given))
    with pytest.raises(pm.PapermillExecutionError):
        _execute(given, tmp_path / name, monkeypatch)
    code = [c for c in workbooks.read(tmp_path / name).cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), "a cell did not run"
    errors = {i: o for i, c in enumerate(code) for o in c.outputs if o.output_type == "error"}
    first, first_id = errors[min(errors)], workbooks.exercises(nb)[0]["id"]
    assert first.ename == "NotImplementedError" and f"Exercise {first_id}" in first.evalue, first
    kinds = {i: workbooks.tags(c) for i, c in enumerate(code)}
    assert errors and all({"stub", "check"} & set(kinds[i]) for i in errors), [code[i].source[:80] for i in errors]
    for i, o in errors.items():
        if "check" in kinds[i]:
            assert o.ename == "CheckFailed" and "run the cells above (kernel restarted?)" in o.evalue, o.evalue
            assert "Hint" not in o.evalue and "use_keys" not in "".join(o.traceback), o
    shown = json.dumps([c.outputs for c in code])
    assert "solutions" not in shown and f"{name[:-6]}: smoke mode" in shown


def test_a_check_run_after_a_kernel_restart_says_run_the_cells_above(student_copy):
    """Every check of the release, run in a fresh kernel (nothing defined, not even ``exercises``): one CheckFailed
    sentence, no NameError with the ``use_keys`` JSON of hints (each check used to raise it)."""
    import linecache

    out, _ = student_copy
    for path in sorted((out / "exercises").glob("*.ipynb")):
        for i, c in enumerate(workbooks.read(path).cells):
            if workbooks.CHECK not in workbooks.tags(c):
                continue
            name = f"<{path.stem} {i}>"
            linecache.cache[name] = (len(c.source), None, c.source.splitlines(True), name)
            try:
                with pytest.raises(exercises.CheckFailed) as info:
                    exec(compile(c.source, name, "exec"), {})
            finally:
                exercises._KEYS.clear()
            msg = str(info.value)
            assert "is not defined: run the cells above (kernel restarted?)" in msg and "Hint" not in msg, msg
            assert info.value.__suppress_context__, "IPython shows the one line, no frames"


def _check_hints() -> list[str]:
    """Every hint of the solutions' check cells: the keyword texts of their ``exercises.check(...)`` and
    ``exercises.expect(..., hint=...)`` calls."""
    hints = []
    for path in workbooks.solution_notebooks():
        for c in workbooks.read(path).cells:
            if workbooks.CHECK in workbooks.tags(c):
                for n in ast.walk(ast.parse(c.source)):
                    if isinstance(n, ast.Call) and getattr(n.func, "attr", "") in ("check", "expect"):
                        hints += [k.value.value for k in n.keywords]
    return hints


def test_no_hint_shows_before_a_wrong_answer(student_copy):
    """The hints of course/answers.py, of the checks' ``hint=`` and of ``exercises.expect(..., hint=)`` are sealed in
    the student copy (the expect hints of 7.2 and 7.5 stood in plain text in their check cells)."""
    out, _ = student_copy
    sources = "\n".join(c.source for p in out.rglob("*.ipynb") for c in workbooks.read(p).cells)  # all of the copy
    answers = [h for spec in workbooks.load_answers().values() for h in spec.values() if isinstance(h, str)]
    checks = _check_hints()
    assert len(checks) > 20
    shown = [h for h in answers + checks if h[:30] in sources]  # 30 characters: within a hint's first literal piece
    assert answers and shown == []


def test_seal_hints_keeps_the_code_and_refuses_what_it_cannot_seal():
    """Each call sealed in place (two alike, non-ASCII before them: ast's columns count bytes); a hint by position
    or not a literal text stops ``make student`` with a sentence naming the exercise."""
    src = (
        'with exercises.check("9.1", hint="h0 — sigma"):\n'
        '    exercises.expect(a == 1, "`a` ≠ 1", hint="h1")\n'
        '    exercises.expect(a == 1, "`a` ≠ 1", hint="h1")\n'
        '    exercises.expect(b, "no hint")'
    )
    out = workbooks.seal_hints(src, "9.1")
    assert "h0" not in out and "h1" not in out and out.count('"`a` ≠ 1", **exercises.unseal(') == 2, out
    assert out.endswith('exercises.expect(b, "no hint")') and ast.parse(out)
    sealed = re.findall(r"exercises\.unseal\('([^']+)'\)", out)
    assert [exercises.unseal(x) for x in sealed] == [{"hint": "h0 — sigma"}, {"hint": "h1"}, {"hint": "h1"}]
    with pytest.raises(ValueError, match=r"Exercise 9\.1, exercises\.expect\(\.\.\.\): pass its hint as hint="):
        workbooks.seal_hints('exercises.expect(a, "what", "the hint")', "9.1")
    with pytest.raises(ValueError, match="each hint must be a literal text"):
        workbooks.seal_hints('exercises.expect(a, "what", hint=f"{a}")', "9.1")


def test_a_wrong_answer_shows_the_sealed_hint_of_an_expect(student_copy):
    """Sealed is not lost: a wrong ``n_calls`` in the student copy's check of 7.2 names the answer with the hint its
    ``exercises.expect(..., hint=...)`` gives."""
    import linecache

    out, _ = student_copy
    nb = workbooks.read(out / "exercises" / "07_agentic_search_exercises.ipynb")
    src = next(c.source for c in nb.cells if "check" in workbooks.tags(c) and "exercises.check('7.2'" in c.source)
    assert "parse every turn" not in src
    linecache.cache["<7.2>"] = (len(src), None, src.splitlines(True), "<7.2>")
    with pytest.raises(exercises.CheckFailed) as info:
        exec(compile(src, "<7.2>", "exec"), {"CALLS": [{}] * 8, "n_calls": [0] * 8, "replies": [None] * 8})
    msg = str(info.value)
    assert msg.startswith("Exercise 7.2: `n_calls` is not the number of calls"), msg
    assert "Hint: parse every turn with parse_response as the statement says" in msg, msg
    assert "Hint: count the calls in parse_response" in msg, msg  # the check's own hint, sealed too


@pytest.mark.parametrize(
    ("old", "new", "case"),
    [
        (
            'if tau_mode == "scale" else p / tau',
            'if tau_mode == "scale" else tau * p',
            "mode='divide'",
        ),  # ignores divide
        ("torch.clamp(w * r, 1 - eps_low", "torch.clamp(r, 1 - eps_low", "placement='ratio'"),  # w outside the clip
    ],
)
def test_a_derivation_slip_in_the_student_copy_names_the_case_with_a_hint(old, new, case):
    """The student copy of 02 wraps each derivation's check: a typical slip gives one CheckFailed naming the case
    (which tau reading, which placement) and a hint, not torch's "Tensor-likes are not close!" traceback."""
    nb = workbooks.read(ROOT / "notebooks" / "02_token_weight_function.ipynb")
    st = workbooks.student_notebook(nb)
    pairs = [(i, c) for i, c in enumerate(nb.cells) if workbooks.DERIVATION in workbooks.tags(c) and old in c.source]
    ((i, derivation_cell),) = pairs
    k = next(j for j, c in enumerate(st.cells) if c.source == workbooks.derivation_stub(derivation_cell.source))
    check = st.cells[k + 1].source
    assert "with exercises.derivation(" in check
    import torch

    from trgrpo.weights import token_weights

    W = {"alpha": 2.0, "mu": 0.25, "tau": 9.0, "lower": 1.0, "upper": 1.4, "tau_mode": "scale"}
    ns = {"torch": torch, "token_weights": token_weights, "W": W, "EPS_LOW": 0.2, "EPS_HIGH": 0.24}
    exec(compile(derivation_cell.source.replace(old, new), "<derivation>", "exec"), ns)
    import linecache

    linecache.cache["<check>"] = (len(check), None, check.splitlines(True), "<check>")
    with pytest.raises(exercises.CheckFailed) as info:
        exec(compile(check, "<check>", "exec"), ns)
    msg = str(info.value)
    assert f"for {case}" in msg and "\nHint: " in msg, msg
    assert info.value.__suppress_context__ and info.value._render_traceback_() == [f"CheckFailed: {msg}"]


# ---------------------------------------------------------------- the handout holds no solution, no answer


def _texts(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in folder.rglob("*") if p.suffix in (".ipynb", ".md")}


def test_the_library_holds_no_reference_answer():
    """The recipes of the reference answers are course data (course/answers.py), not in trgrpo/."""
    recipes = re.findall(r"^def (\w+)\(", (ROOT / "course" / "answers.py").read_text(), re.M)
    assert recipes and not hasattr(exercises, "ANSWERS")
    library = "\n".join(p.read_text() for p in (ROOT / "trgrpo").rglob("*.py"))
    assert [r for r in recipes if re.search(rf"\b{r}\b", library)] == []


def test_the_handout_holds_no_solution_and_no_answer_value(student_copy):
    out, _ = student_copy
    texts = _texts(out / "exercises") | {k: v for k, v in _texts(out).items() if k.endswith(".ipynb")}
    blob = "\n".join(texts.values())
    assert "Solutions (executed" not in blob and "_solutions" not in blob and "solutions/" not in blob
    solved = {
        ln.strip()
        for p in workbooks.solution_notebooks()
        for c in workbooks.read(p).cells
        if "solution" in workbooks.tags(c)
        for ln in c.source.splitlines()
        if len(ln.strip()) > 30 and not ln.strip().startswith("#")
    }
    shown = "\n".join(
        c.source for p in workbooks.main_notebooks() for c in workbooks.read(p).cells
    )  # lines the notebooks show
    assert solved and [ln for ln in solved if ln in blob and ln not in shown] == []
    for exercise, spec in workbooks.load_answers().items():
        try:
            want = spec["reference"]({})
        except KeyError:  # needs the notebook's data
            continue
        for name, v in want.items():
            if isinstance(v, float) and v != round(v, 2):
                for text in (repr(v), f"{v:.4f}", f"{v:.5f}"):
                    assert json.dumps(text)[1:-1] not in blob, f"Exercise {exercise}: {name}'s value is in the handout"
    imported = set()
    for text in texts.values():
        for c in json.loads(text).get("cells", []) if text.lstrip().startswith("{") else []:
            if c["cell_type"] == "code":
                src = "".join(c["source"])
                imported |= set(re.findall(r"^\s*(?:from|import)\s+([\w.]+)", src, re.M))
    assert not [m for m in imported if m.split(".")[0] == "course" or "answers" in m or "solution" in m], imported


def test_a_keyed_check_of_the_handout_accepts_the_answer_and_names_a_slip(student_copy, capsys):
    """The student copy's check of 2.2 registers salted hashes and judges as the instructor's recipes do."""
    out, _ = student_copy
    nb = workbooks.read(out / "exercises" / "02_token_weight_function_exercises.ipynb")
    src = next(c.source for c in nb.cells if "exercises.use_keys('2.2'" in c.source)
    register = next(ln for ln in src.splitlines() if ln.startswith("exercises.use_keys("))
    assert "0.0176" not in register and "0.0177" not in register and "0.0231" not in register
    try:
        exec(register, {"exercises": exercises})
        exercises.check_answers("2.2", **KL)
        assert "Exercise 2.2 ✓" in capsys.readouterr().out
        exercises.check_answers("2.2", **{**KL, "kl_offset_12": 0.017685})  # within 0.1 %
        with pytest.raises(exercises.CheckFailed) as info:
            exercises.check_answers("2.2", **{**KL, "kl_offset_08": 0.0232})
        assert str(info.value).startswith("Exercise 2.2: `kl_offset_08` is not right yet") and "Hint:" in str(
            info.value
        )
        with pytest.raises(exercises.CheckFailed, match="`kl_offset_12`"):
            exercises.check_answers("2.2", **{**KL, "kl_offset_12": 0.0180})  # 1.8 % off
    finally:
        exercises._KEYS.clear()


def _md_links(nb) -> list[str]:
    return [
        m.group(2)
        for c in nb.cells
        if c.cell_type == "markdown"
        for m in workbooks.LINK_RE.finditer(c.source)
        if "://" not in m.group(2) and not m.group(2).startswith("mailto:")
    ]


def test_every_link_resolves_from_the_folder_jupyterlab_serves(student_copy):
    """`make lab` serves the repository root: each relative link of a notebook's markdown names a file under it; the
    student copy's links, of its notebooks and of its Markdown (its README, docs), name files of the copy itself:
    notebook 00's "Previous: README" opens the copy's own README (it opened the project's, copied into docs/ with
    4 broken figures and ~18 dead links), the glossary's notebook links the copy's notebooks."""
    out, _ = student_copy
    for served, folder in ((ROOT, ROOT / "notebooks"), (out, out)):
        for path in sorted(folder.rglob("*.ipynb")):
            for link in _md_links(workbooks.read(path)):
                target = (path.parent / link).resolve()
                assert target.is_file() and target.is_relative_to(served.resolve()), f"{path}: {link}"
    for path in sorted(out.rglob("*.md")):
        links = [m.group(2) for m in workbooks.LINK_RE.finditer(path.read_text()) if "://" not in m.group(2)]
        for link in links:
            target = (path.parent / link).resolve()
            assert target.is_file() and target.is_relative_to(out.resolve()), f"{path}: {link}"
    assert (out / "README.md").read_text() == workbooks.STUDENT_README.read_text() and not (
        out / "docs/README.md"
    ).exists()
    primer = " ".join(c.source for c in workbooks.read(out / "00_grpo_primer.ipynb").cells if c.cell_type == "markdown")
    assert "[README](README.md)" in primer
    glossary = (out / "docs" / "glossary.md").read_text()
    assert "](../00_grpo_primer.ipynb)" in glossary and "](../02_token_weight_function.ipynb)" in glossary
    lab = subprocess.run(["make", "-n", "-W", "pyproject.toml", "lab"], cwd=ROOT, capture_output=True, text=True)
    assert f"--ServerApp.root_dir={ROOT}" in lab.stdout and "--LabApp.default_url=/lab/tree/notebooks" in lab.stdout


# ---------------------------------------------------------------- the syllabus


def test_every_notebook_is_timed():
    """The syllabus' time table (rendered by `make docs`, tests/integration/test_quoted_numbers.py) covers every
    notebook."""

    record = json.loads(workbooks.TIMES_PATH.read_text())
    timed = {Path(r["notebook"]).name for r in record["rows"]}
    wanted = {p.name for p in workbooks.main_notebooks()} | {p.name for p in workbooks.solution_notebooks()}
    assert wanted <= timed, f"not timed: {sorted(wanted - timed)}"
    assert all(r["ok"] for r in record["rows"]), [r["notebook"] for r in record["rows"] if not r["ok"]]


def test_each_time_was_measured_with_the_notebooks_parameters_on_a_clean_tree():
    """A time holds for the parameters cell it was measured with: change a notebook's defaults, and its time must be
    measured again (`trgrpo course times`, then `make docs`)."""
    record = json.loads(workbooks.TIMES_PATH.read_text())
    assert record["dirty"] is False, "the times were measured on an uncommitted tree"
    stale = [
        r["notebook"]
        for r in record["rows"]
        if r.get("parameters") != exercises.fingerprint(workbooks.parameters_source(ROOT / r["notebook"]))
    ]
    assert not stale, f"parameters changed since their time was measured: {stale}"


def test_the_parameters_fingerprint_sees_a_changed_default(tmp_path):
    nb = json.loads((ROOT / "notebooks" / "04_token_probabilities.ipynb").read_text())
    before = exercises.fingerprint(workbooks.parameters_source(ROOT / "notebooks" / "04_token_probabilities.ipynb"))
    cell = next(c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", []))
    cell["source"] = "".join(cell["source"]).replace("=", "= 1 +", 1)
    (tmp_path / "nb.ipynb").write_text(json.dumps(nb))
    assert exercises.fingerprint(workbooks.parameters_source(tmp_path / "nb.ipynb")) != before


def _clone(tmp_path: Path) -> Path:
    """A clone of this checkout's commit, whose own package the command below imports (PYTHONPATH)."""
    import subprocess

    dst = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(dst)], check=True)
    return dst


def _times(clone: Path, timeout: int):
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(clone)}
    return subprocess.run(
        [sys.executable, "-m", "trgrpo", "course", "times"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_times_as_typed_refuses_an_uncommitted_tree_and_writes_nothing(tmp_path):
    clone = _clone(tmp_path)
    times = clone / workbooks.TIMES_PATH.relative_to(ROOT)
    before = times.read_bytes()
    (clone / "notebooks" / "00_grpo_primer.ipynb").write_text("{}")  # an edit not committed
    done = _times(clone, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        done.stdout.strip()
        == "the tree has uncommitted changes: commit first, so the times name the code they measured"
    )
    assert "Traceback" not in done.stderr
    assert times.read_bytes() == before


@pytest.mark.slow
def test_times_as_typed_on_a_clean_clone_measures_every_notebook(tmp_path):
    """The README's `trgrpo course times`, in a fresh clone (about 10 minutes on 2 cores)."""
    clone = _clone(tmp_path)
    done = _times(clone, timeout=3600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    record = json.loads((clone / workbooks.TIMES_PATH.relative_to(ROOT)).read_text())
    assert record["dirty"] is False and record["git_commit"] == _head(clone)
    assert {r["notebook"] for r in record["rows"]} == {
        r["notebook"] for r in json.loads(workbooks.TIMES_PATH.read_text())["rows"]
    }
    assert all(r["ok"] and r["wall_s"] > 0 for r in record["rows"])
    for r in record["rows"]:
        assert r["parameters"] == exercises.fingerprint(workbooks.parameters_source(clone / r["notebook"]))


def _head(clone: Path) -> str:
    import subprocess

    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True).stdout.strip()


# ---------------------------------------------------------------- checks that teach (issue 17)


KL = dict(kl_offset_12=0.01768, kl_offset_08=0.02314, kl_slope_12=-0.2, kl_push_12=+1)  # 2.2 by hand, 4 digits


def test_every_hand_answer_exercise_states_its_tolerance():
    for ex_id in [e for e, spec in workbooks.load_answers().items() if spec.get("hand")]:
        path = next(p for p in MAINS if p.name.startswith(f"0{ex_id.split('.')[0]}_"))
        statement = next(e["source"] for e in workbooks.exercises(workbooks.read(path)) if e["id"] == ex_id)
        assert "within 0.1 % (relative)" in statement, f"Exercise {ex_id} does not state the tolerance"


def test_fingerprint_is_stable_and_discriminates():
    assert exercises.fingerprint([0.5, 1]) == exercises.fingerprint((0.5000000001, 1.0))
    assert exercises.fingerprint({"a": 1}) != exercises.fingerprint({"a": 2})


SOLUTIONS = workbooks.solution_notebooks()


@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_every_check_declares_a_wrong_answer_and_hides_known_answers(path):
    nb = workbooks.read(path)
    checks = [c for c in nb.cells if "check" in workbooks.tags(c)]
    assert checks and all(_wrong_answer(c) for c in checks), f"{path.name}: a check cell has no wrong_answer"
    assert all(re.search(r"exercises\.check(_answers)?\(", c.source) for c in checks), (
        f"{path.name}: use exercises.check"
    )
    if path.name.startswith("02_"):  # exercise 2.1 used to print ln 3 and 1/ln 3 in its check
        src = next(c.source for c in checks if "'2.1'" in c.source)
        assert "log(3)" not in src and "[0.5]" not in src
        for ex_id in ("2.2", "2.3"):  # 2.2 computed the KL offsets in plain sight, 2.3/2.4's hints the inversion
            src = next(c.source for c in checks if f"'{ex_id}'" in c.source)
            assert len(src.splitlines()) <= 5 and "exercises.check_answers(" in src and "log" not in src
        src = next(c.source for c in checks if "'2.4'" in c.source)
        assert "logit" not in src and "sigmoid(z) =" not in src
    if path.name.startswith("03_"):  # exercise 3.2 used to echo the library's summary and answer its own question
        src = next(c.source for c in checks if "'3.2'" in c.source)
        assert "loses on every seed" not in src and "(label, summary)" not in src and "v < 0" not in src
    if path.name.startswith("07_"):  # 7.2 listed the tool's replies, 7.5 a hand-computed F1 list: now hashes
        src = next(c.source for c in checks if "'7.2'" in c.source)
        assert "Error:" not in src and "[1, 1, 1" not in src and "exercises.fingerprint(" in src
        src = next(c.source for c in checks if "'7.5'" in c.source)
        assert "2 / 3" not in src and "0.8" not in src and "1 / 3" not in src and "exercises.fingerprint(" in src


def _wrong_answer(cell) -> str | None:
    """The wrong answer a check cell is tested with (``cell.metadata.wrong_answer``: code that rebinds names)."""
    return cell.get("metadata", {}).get("wrong_answer")


def wrong_answer_notebook(nb, record: Path | str):
    """A copy of a solutions notebook that, after each check cell, rebinds the expected names to the cell's
    ``wrong_answer``, runs the check again, records the exception (type and message) into ``record`` (JSON), and
    restores the right answers."""
    nbf = nbformat
    out = copy.deepcopy(nb)
    cells: list = []
    current = None
    for cell in out.cells:
        cells.append(cell)
        heading = workbooks.exercise_heading(cell)
        current = heading["id"] if heading else current
        if "check" not in workbooks.tags(cell):
            continue
        wrong = _wrong_answer(cell)
        names = exercises.expected_names(cell.source)
        probe = (
            "import linecache as _lc\n"
            f"_saved = {{_n: globals().get(_n) for _n in {names!r}}}\n"
            f"_fname = '<check {current}>'\n"
            f"_src = {cell.source!r}\n"
            "_lc.cache[_fname] = (len(_src), None, _src.splitlines(True), _fname)\n"
            "try:\n"
            f"    exec({(wrong or '')!r}, globals())\n"
            "    exec(compile(_src, _fname, 'exec'), globals())\n"
            f"    _res = {{'exercise': {current!r}, 'raised': None, 'message': ''}}\n"
            "except Exception as _e:\n"
            f"    _res = {{'exercise': {current!r}, 'raised': type(_e).__name__, 'message': str(_e)}}\n"
            "finally:\n"
            "    globals().update(_saved)\n"
            f"_res['wrong_answer'] = {wrong!r}\n"
            "_WRONG_RESULTS = globals().get('_WRONG_RESULTS', []) + [_res]\n"
        )
        cells.append(nbf.v4.new_code_cell(probe))
    cells.append(
        nbf.v4.new_code_cell(
            f"import json as _json\nopen({str(record)!r}, 'w').write(_json.dumps(globals().get('_WRONG_RESULTS', [])))"
        )
    )
    out.cells = cells
    return out


@pytest.mark.notebook
@pytest.mark.parametrize(
    "path",
    # 02's in the default tier; the others (10-17 s each on 2 busy cores; 03's and 07's run toy trainings, 40 s and
    # 23 s) in the slow tier, for make test's budget: the same check on every workbook
    [p if p.stem.startswith("02_") else pytest.param(p, marks=pytest.mark.slow) for p in SOLUTIONS],
    ids=[p.stem for p in SOLUTIONS],
)
def test_every_check_fails_a_wrong_answer_with_a_message(path, tmp_path, monkeypatch):
    """The solutions notebook runs in smoke mode, every cell and every check with its right answer, its output clean
    (the rules of tests/nbval_harness.py: this is the solutions' one execution in ``make test``); then each check
    cell runs again with its wrong answer (``metadata.wrong_answer``): it must raise CheckFailed with the exercise,
    what is wrong and a hint, never a bare AssertionError."""
    record = tmp_path / "wrong.json"
    probe = tmp_path / path.name
    nbformat.write(wrong_answer_notebook(workbooks.read(path), record), str(probe))
    out = tmp_path / "out.ipynb"
    execute_smoke(probe, out, monkeypatch, timeout=300)
    done = [c for c in workbooks.read(out).cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in done), "a cell of the solutions did not run"
    noisy = [f"cell {i}: {n}" for i, c in enumerate(done) for n in noise(c.outputs)]
    assert not noisy, f"{path.name} prints {noisy}"

    rows = json.loads(record.read_text())
    ids = [e["id"] for e in workbooks.exercises(workbooks.read(path))]
    assert [r["exercise"] for r in rows] == ids
    for r in rows:
        assert r["raised"] == "CheckFailed", f"Exercise {r['exercise']}: {r['wrong_answer']!r} raised {r['raised']}"
        assert r["message"].startswith(f"Exercise {r['exercise']}: ") and "\nHint: " in r["message"], r


# ---------------------------------------------------------------- the primer, the glossary and the links (issue 17)

LINK_RE = re.compile(r"\]\(([^)#]+)(?:#[^)]*)?\)")


def test_primer_derives_eq_1_to_6_each_checked_against_the_library():
    nb = workbooks.read(workbooks.NOTEBOOKS / "00_grpo_primer.ipynb")
    cells = nb.cells
    derivations = [i for i, c in enumerate(cells) if "derivation" in workbooks.tags(c)]
    assert len(derivations) >= 5, "one derivation cell per step: rewards, advantages, log-probs, ratio/clip, k3"
    for i in derivations:
        assert len(cells[i].source.strip().splitlines()) <= 12, f"derivation cell {i} is not 'a few lines'"
        nxt = cells[i + 1]
        assert "derivation-check" in workbooks.tags(nxt) and "exercises.check(" in nxt.source, (
            f"cell {i + 1} checks {i}"
        )
        assert re.search(r"\b(loss|addition|exercises)\.\w+\(", nxt.source), f"cell {i + 1} compares with the library"
    text = "\n".join(c.source for c in cells)
    for eq in ("Eq. 1", "Eq. 4", "Eq. 3", "Eq. 5", "Eq. 6", "k3", "clip-higher"):
        assert eq in text, eq


def test_glossary_defines_the_course_terms():
    text = (ROOT / "docs" / "glossary.md").read_text()
    for term in ("RLVR", "advantage", "k3", "clip-higher", "ε_h", "Placement", "sg[·]", "K&K", "EM", "avg@k"):
        assert term in text, term


def _links(source: str, base: Path) -> list[Path]:
    return [(base / m).resolve() for m in LINK_RE.findall(source) if not m.startswith("http")]


@pytest.mark.parametrize("path", workbooks.main_notebooks(), ids=[p.stem for p in workbooks.main_notebooks()])
def test_notebook_links_glossary_previous_and_next(path):
    mains = workbooks.main_notebooks()
    nb = workbooks.read(path)
    mds = [c for c in nb.cells if c.cell_type == "markdown"]
    first, last = mds[0].source, mds[-1].source
    k = mains.index(path)
    for where, src in (("first", first), ("last", last)):
        assert "../docs/glossary.md" in src, f"{path.name}: the {where} markdown cell links the glossary"
        assert "Previous:" in src and "Next:" in src, f"{path.name}: the {where} markdown cell has previous / next"
        if k > 0:
            assert f"({mains[k - 1].name})" in src, f"{path.name}: previous is {mains[k - 1].name}"
        if k + 1 < len(mains):
            assert f"({mains[k + 1].name})" in src, f"{path.name}: next is {mains[k + 1].name}"
        missing = [p for p in _links(src, path.parent) if not p.exists()]
        assert not missing, f"{path.name}: broken links {missing}"


@pytest.mark.parametrize("path", workbooks.solution_notebooks(), ids=[p.stem for p in workbooks.solution_notebooks()])
def test_solutions_link_the_glossary(path):
    src = workbooks.read(path).cells[0].source
    assert "../../docs/glossary.md" in src and not [p for p in _links(src, path.parent) if not p.exists()]
    assert "Previous: [" in src and "Next: [" in src, f"{path.name}: previous / next links in the first cell"
    assert f"(../{path.name.replace('_solutions', '')})" in src, f"{path.name}: links the notebook it solves"


@pytest.mark.parametrize("path", MAINS, ids=[p.stem for p in MAINS])
def test_every_exercise_has_difficulty_and_time_in_both_copies(path):
    for nb in (workbooks.read(path), workbooks.read(workbooks.solutions_path(path))):
        metas = [render_docs.exercise_meta(c) for c in nb.cells if workbooks.exercise_heading(c)]
        assert metas and all(m["difficulty"] in render_docs.DIFFICULTIES and 5 <= m["minutes"] <= 120 for m in metas)
    main = [render_docs.exercise_meta(c) for c in workbooks.read(path).cells if workbooks.exercise_heading(c)]
    sol_nb = workbooks.read(workbooks.solutions_path(path))
    sol = [render_docs.exercise_meta(c) for c in sol_nb.cells if workbooks.exercise_heading(c)]
    assert main == sol, f"{path.name}: difficulty/time differ between the notebook and its solutions"


def test_exercise_meta_names_the_bad_field():
    cell = nbformat.v4.new_markdown_cell("x", metadata={"course": {"difficulty": "tricky", "minutes": 5}})
    with pytest.raises(ValueError, match="difficulty"):
        render_docs.exercise_meta(cell)
    cell.metadata["course"] = {"difficulty": "easy", "minutes": "ten"}
    with pytest.raises(ValueError, match="minutes"):
        render_docs.exercise_meta(cell)


# ---------------------------------------------------------------- the README's first screen (issue 17)


def test_readme_first_screen_starts_the_course():
    text = (ROOT / "README.md").read_text()
    first = "\n".join(text.splitlines()[:30])
    assert "Who it is for" in first and "notebooks/00_grpo_primer.ipynb" in first and "docs/syllabus.md" in first


def test_readme_library_snippet_runs():
    text = (ROOT / "README.md").read_text()
    snippet = text[text.index("## Using the library") :].split("```python\n", 1)[1].split("```", 1)[0]
    ns: dict = {}
    exec(compile(snippet, "README.md", "exec"), ns)  # every variable it uses is defined in it
    assert ns["logps"].grad is not None and "weight_mean" in ns["out"].metrics


# From test_course_notebooks.py: Notebooks 00, 02 and 03 as a student runs them: what their outputs show and what a
# run leaves behind.


def _shown(cell) -> str:
    """The text a stored output of a cell shows (streams, plain text, markdown)."""
    parts = []
    for o in cell.get("outputs", []):
        parts.append(o.get("text", ""))
        parts += [o.get("data", {}).get(k, "") for k in ("text/plain", "text/markdown")]
    return "\n".join(p if isinstance(p, str) else "".join(p) for p in parts)


def test_no_checked_output_of_a_notebook_shows_an_exercise_answer():
    """What a student sees running a notebook (its nbval-checked outputs) holds none of its exercises' reference
    values: 02's KL table used to print Exercise 2.2's answer (0.0635)."""
    for exercise, spec in workbooks.load_answers().items():
        try:
            want = spec["reference"]({})
        except KeyError:  # computed from the notebook's data: those are not printed by the notebook's own cells
            continue
        path = next(p for p in workbooks.main_notebooks() if p.name.startswith(f"{int(exercise.split('.')[0]):02d}_"))
        shown = "\n".join(_shown(c) for c in workbooks.read(path).cells if c.cell_type == "code")
        for name, v in want.items():
            if isinstance(v, float) and v != round(v, 2):
                assert f"{v:.4f}" not in shown, f"{path.name} prints Exercise {exercise}'s {name} ({v:.4f})"


# From test_survives.py: Work that survives (issue "course"): a notebook at its defaults rewrites no tracked file (its
# headline and figures go to the git-ignored runs/, with the commit and a clean-tree flag), the committed records
# change only through ``python -m trgrpo.course records``, and ``make student`` keeps a workbook the student changed.


def _run(args, cwd=ROOT, **env):
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=full, capture_output=True, text=True, timeout=300)


def _fake_checkout(root: Path, dirty: bool) -> None:
    (root / "notebooks").mkdir(parents=True)
    (root / "notebooks" / "01_a.ipynb").write_text("{}")
    (root / "runs" / "notebooks").mkdir(parents=True)
    (root / "runs" / "figures").mkdir(parents=True)
    head = {"x": 1, "provenance": {"git_commit": "c" * 40, "git_dirty": dirty}}
    (root / "runs" / "notebooks" / "01_a.json").write_text(json.dumps(head))
    (root / "runs" / "notebooks" / "01_a_smoke.json").write_text("{}")
    (root / "runs" / "notebooks" / "01_a_solutions.json").write_text("{}")
    (root / "runs" / "figures" / "01_f.png").write_bytes(b"png")
    (root / "runs" / "figures" / "01_f_smoke.png").write_bytes(b"png")


def test_records_promotes_full_mode_headlines_and_figures_only(tmp_path):
    _fake_checkout(tmp_path, dirty=False)
    copied = records.promote_records(tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in copied) == [
        "figures/01_f.png",
        "results/notebooks/01_a.json",
    ]
    assert json.loads((tmp_path / "results" / "notebooks" / "01_a.json").read_text())["x"] == 1


def test_records_refuses_a_headline_of_an_uncommitted_tree(tmp_path):
    _fake_checkout(tmp_path, dirty=True)
    with pytest.raises(ValueError, match="01_a.json"):
        records.promote_records(tmp_path)
    assert not (tmp_path / "results").exists() and not (tmp_path / "figures").exists(), "nothing copied"
    assert len(records.promote_records(tmp_path, allow_dirty=True)) == 2


@pytest.mark.slow  # 16 s on 2 busy cores: the command as typed, in a subprocess
def test_make_student_keeps_a_changed_workbook_and_says_so(tmp_path):
    out = tmp_path / "student"
    assert workbooks.write_student_copy(out)[1] == [], "a fresh folder: nothing kept"
    mine = out / "exercises" / "02_token_weight_function_exercises.ipynb"
    nb = json.loads(mine.read_text())
    nb["cells"][1]["source"] = "my answer"
    mine.write_text(json.dumps(nb))
    untouched = out / "01_gradient_norm_theorem.ipynb"
    untouched.write_text(untouched.read_text())  # rewritten byte for byte: not a change
    second = _run(["-m", "trgrpo", "course", "student", "--out", str(out)])
    assert second.returncode == 0, second.stderr[-2000:]
    assert f"kept your changed {mine}" in second.stdout and second.stdout.count("kept") == 1, second.stdout
    assert json.loads(mine.read_text())["cells"][1]["source"] == "my answer"
    assert mine.with_suffix(".new.ipynb").is_file()


@pytest.mark.slow  # the six solutions notebooks at their laptop defaults: ~80 s on 2 idle cores, 9.4 min at load 9
def test_make_instructor_writes_executed_solutions_and_its_readme(tmp_path):
    """``trgrpo course instructor`` as typed: every solutions notebook executed (each code cell ran, each check
    printed its ✓; they had no outputs), the instructor's README (release, collect, grade, hand back; it was the
    student's), every link of the copy resolving inside it."""
    out = tmp_path / "instructor"
    r = subprocess.run([sys.executable, "-m", "trgrpo", "course", "instructor", "--out", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=1500)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert (out / "README.md").read_text() == workbooks.INSTRUCTOR_README.read_text()
    readme = (out / "README.md").read_text()
    assert all(f"## {k}. {step}" in readme for k, step in enumerate(("Release", "Collect", "Grade", "Hand back"), 1))
    solved = sorted((out / "solutions").glob("*.ipynb"))
    assert [p.name for p in solved] == [p.name for p in workbooks.solution_notebooks()]
    for path in solved:
        code = [c for c in workbooks.read(path).cells if c.cell_type == "code"]
        assert all(c.execution_count is not None for c in code), f"{path.name}: a cell did not run"
        assert not [o for c in code for o in c.outputs if o.output_type == "error"], path.name
        for exercise in workbooks.exercises(workbooks.read(path)):
            assert f"Exercise {exercise['id']} ✓" in "\n".join(map(_shown, code)), (path.name, exercise["id"])
        for link in _md_links(workbooks.read(path)):
            assert (path.parent / link).resolve().is_file(), f"{path.name}: {link}"
