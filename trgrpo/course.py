"""The GRPO primer (notebook 00): Eq. 1-6 on one group of answers of the toy addition task (:mod:`trgrpo.toy`).

The notebook writes each equation as a few lines of torch and checks them against :mod:`trgrpo.loss`; this module
holds what it needs around them: a policy whose samples for one prompt disagree (so a group has rewards of both
kinds), the group itself, and the per-token log-probabilities of a group's completions (teacher forcing, the same
quantity TRL computes).
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import re
import shutil
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from trgrpo import toy
from trgrpo.experiment import ROOT
from trgrpo.models import sft_step
from trgrpo.tasks import addition


def taught_policy(row: dict, *, steps: int = 40, seed: int = 0, lr: float = 3e-3, wrong_offset: int = 1) -> Any:
    """A fresh micro model (:func:`trgrpo.toy.build_model`) taught ONE prompt in seconds: half of each batch shows
    the right sum, half the sum + ``wrong_offset``, so the model ends up unsure between the two and a sampled group
    holds right and wrong answers (a stand-in for the warm start of notebook 03 when time is short)."""
    import torch

    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    tok = toy.build_tokenizer()
    model = toy.build_model(tok, seed=seed)
    wrong = {**row, "target": addition.spaced(int(row["answer"]) + wrong_offset)}
    batch = toy._sft_batch(tok, [row, wrong] * 8)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    for _ in range(steps):
        sft_step(model, opt, batch)
    model.eval()
    return model, tok


def first_mixed_group(
    model: Any, tok: Any, rows: Sequence[dict], group_size: int, *, seed: int = 0, tries: int = 50
) -> tuple[dict, list[str]]:
    """The first prompt of ``rows`` (shuffled by ``seed``) whose sampled group has both rewards 0 and 1.

    Raises ``RuntimeError`` when none of ``tries`` prompts does (every advantage of Eq. 4 would be 0)."""
    order = list(rows)
    random.Random(seed).shuffle(order)
    for row in order[:tries]:
        prompts = [row["prompt"]] * group_size
        completions = addition.generate(
            model, tok, prompts, max_new_tokens=addition.MAX_COMPLETION["addition"], do_sample=True, seed=seed
        )
        rewards = addition.correctness_reward(prompts, completions, [row["answer"]] * group_size)
        if 0 < sum(rewards) < group_size:
            return row, completions
    raise RuntimeError(f"no prompt among {min(tries, len(order))} gave a group with mixed rewards; raise tries")


def completion_logps(model: Any, tok: Any, prompt: str, completions: Sequence[str], *, temperature: float = 1.0):
    """Per-token log pi(o_t | q, o_<t) of each completion (+ its end-of-sequence token), by cross-entropy of the
    shifted logits: ``(logps (G, T), mask (G, T), token_ids (G, T))``, right-padded, mask 1 on completion tokens."""
    import torch

    ids, att, labels = toy._sft_batch(tok, [{"prompt": prompt, "target": c} for c in completions])
    n = len(tok(prompt)["input_ids"])
    logits = model(input_ids=ids, attention_mask=att).logits[:, n - 1 : -1] / temperature
    targets, mask = labels[:, n:], (labels[:, n:] != -100).float()
    logps = torch.log_softmax(logits.float(), -1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return logps * mask, mask, ids[:, n:]


# ---- course: Teaching material: the exercises of notebooks 01-04 and 07, their solutions, and the student copy.


NOTEBOOKS = ROOT / "notebooks"
SOLUTIONS = NOTEBOOKS / "solutions"
TIMES_PATH = ROOT / "results" / "course" / "notebook_times.json"

EXERCISE, SOLUTION, CHECK, EXPLANATION = "exercise", "solution", "check", "explanation"
DERIVATION = "derivation"
CONCLUSION = "conclusion"  # the "write your conclusion" cell a student copy puts where explanations were
KINDS = ("predict", "explore", "derive", "implement")  # graded from "change a parameter" to "write a variant"
HEADING_RE = re.compile(rf"^###\s+Exercise\s+(\d+)\.(\d+)\s*·\s*({'|'.join(KINDS)})\s*·\s*(.+?)\s*$", re.M)
EXPECTS_RE = re.compile(r"^#\s*expects:\s*(.+?)\s*$")


def tags(cell: Any) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def _nbformat():
    import nbformat

    return nbformat


def read(path: Path | str) -> Any:
    return _nbformat().read(str(path), as_version=4)


def main_notebooks(notebooks_dir: Path | str = NOTEBOOKS) -> list[Path]:
    return sorted(Path(notebooks_dir).glob("[0-9][0-9]_*.ipynb"))


def solutions_path(main: Path | str, solutions_dir: Path | str | None = None) -> Path:
    """``notebooks/NN_stem.ipynb`` -> ``notebooks/solutions/NN_stem_solutions.ipynb``."""
    main = Path(main)
    return Path(solutions_dir or main.parent / "solutions") / f"{main.stem}_solutions.ipynb"


def solution_notebooks(solutions_dir: Path | str = SOLUTIONS) -> list[Path]:
    return sorted(Path(solutions_dir).glob("[0-9][0-9]_*_solutions.ipynb"))


def exercise_heading(cell: Any) -> dict | None:
    """For an exercise statement (a cell tagged ``exercise`` with a ``### Exercise N.k · kind · title`` line):
    its id ``"N.k"``, kind and title; else None."""
    if EXERCISE not in tags(cell) or cell.cell_type != "markdown":
        return None
    m = HEADING_RE.search(cell.source)
    return {"id": f"{m.group(1)}.{m.group(2)}", "kind": m.group(3), "title": m.group(4)} if m else None


DIFFICULTIES = ("easy", "medium", "hard")


def exercise_meta(cell: Any) -> dict:
    """An exercise statement's ``metadata.course``: ``difficulty`` (easy / medium / hard) and ``minutes`` (the time a
    student needs, reading included; CPU time of a run is said in the statement). Raises ``ValueError`` naming the
    field when it is missing or malformed."""
    meta = cell.get("metadata", {}).get("course", {})
    if meta.get("difficulty") not in DIFFICULTIES:
        raise ValueError(f"metadata.course.difficulty must be one of {DIFFICULTIES}, got {meta.get('difficulty')!r}")
    if not isinstance(meta.get("minutes"), int) or meta["minutes"] <= 0:
        raise ValueError(f"metadata.course.minutes must be a positive int, got {meta.get('minutes')!r}")
    return {"difficulty": meta["difficulty"], "minutes": meta["minutes"]}


def exercises(nb: Any) -> list[dict]:
    """The exercise statements of a notebook, in order: id, kind, title, and the cell's source."""
    return [{**h, "source": c.source} for c in nb.cells if (h := exercise_heading(c))]


def expected_names(check_source: str) -> list[str]:
    """The names a check cell's first line ``# expects: a, b`` declares ([] if it has none)."""
    first = check_source.strip().splitlines()[0] if check_source.strip() else ""
    m = EXPECTS_RE.match(first)
    return [n.strip() for n in m.group(1).split(",") if n.strip()] if m else []


CONCLUSION_TEXT = (
    "**Your conclusion.** The explanation that stood here is left out of the student copy. Write, in two or three "
    "sentences, what the cells above show and what they do not; then compare with the full text in `notebooks/`."
)


def student_notebook(nb: Any) -> Any:
    """A main notebook for students: the same code cells, without ``explanation`` and ``solution`` cells; each run of
    removed ``explanation`` cells becomes one "write your conclusion" markdown cell (tag ``conclusion``), and each
    ``derivation`` cell that defines a function is turned into an exercise (:func:`derivation_stub`; the check after
    it stays)."""
    out = copy.deepcopy(nb)
    cells: list[Any] = []
    for c in out.cells:
        t = set(tags(c))
        if EXPLANATION in t:
            if not (cells and CONCLUSION in tags(cells[-1])):
                cells.append(_nbformat().v4.new_markdown_cell(CONCLUSION_TEXT, metadata={"tags": [CONCLUSION]}))
            continue
        if SOLUTION in t:
            continue
        if DERIVATION in t and c.cell_type == "code" and _defines_function(c.source):
            c.source = derivation_stub(c.source)  # a walk-through derivation without a def (notebook 00) stays
        cells.append(c)
    out.cells = cells
    return out


def _defines_function(source: str) -> bool:
    import ast

    return any(isinstance(n, ast.FunctionDef) for n in ast.parse(source).body)


def derivation_stub(source: str) -> str:
    """A ``derivation`` cell for students: its leading comment lines, then each top-level function's signature
    with a body that raises ``NotImplementedError`` (so the check cell below fails until the student writes it)."""
    import ast

    tree = ast.parse(source)
    lines = source.splitlines()
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if not funcs:
        raise ValueError("a derivation cell must define at least one top-level function (what the student writes)")
    out = [ln for ln in lines[: funcs[0].lineno - 1 - len(funcs[0].decorator_list)] if ln.startswith("#")]
    for f in funcs:
        header = lines[f.lineno - 1 - len(f.decorator_list) : f.body[0].lineno - 1]
        todo = f"write {f.name} (the equation above), then run the check below"
        out += [*header, f"    raise NotImplementedError({todo!r})"]
    return "\n".join(out)


def stub_cell(exercise_id: str, names: Sequence[str]) -> Any:
    """The cell a student replaces: it names what the check below expects and raises until it is replaced."""
    expects = f" The check below expects: {', '.join(names)}." if names else ""
    source = (
        f"# Exercise {exercise_id}: your solution here.{expects}\n"
        f'raise NotImplementedError("Exercise {exercise_id}: replace this cell with your solution, '
        f'then run the check below")'
    )
    return _nbformat().v4.new_code_cell(source, metadata={"tags": ["stub"]})


def exercise_workbook(nb: Any) -> Any:
    """A solutions notebook turned into a workbook: each run of ``solution`` cells becomes one stub cell.

    Raises ``ValueError`` if a run of solution cells does not follow an exercise statement or is not followed by a
    ``check`` cell (the student would get no feedback)."""
    out = copy.deepcopy(nb)
    cells, current, i = [], None, 0
    src = out.cells
    while i < len(src):
        cell = src[i]
        heading = exercise_heading(cell)
        current = heading["id"] if heading else current
        if SOLUTION not in tags(cell):
            cells.append(cell)
            i += 1
            continue
        j = i
        while j < len(src) and SOLUTION in tags(src[j]):
            j += 1
        if current is None:
            raise ValueError(f"solution cell {i} comes before any exercise statement")
        if j >= len(src) or CHECK not in tags(src[j]):
            raise ValueError(f"the solution of Exercise {current} (cells {i}-{j - 1}) is not followed by a check cell")
        cells.append(stub_cell(current, expected_names(src[j].source)))
        i = j
    out.cells = cells
    if out.cells and out.cells[0].cell_type == "markdown":
        title = out.cells[0].source.splitlines()[0].replace("Solutions", "Exercises", 1)
        out.cells[0].source = (
            f"{title}\n\nYour workbook. After each exercise, replace the cell that raises `NotImplementedError` with "
            "your own code, then run the check cell under it: it stays silent or prints ✓ when your answer is right, "
            "and fails with a message saying what is wrong, with a hint (never the answer) when it is not. The "
            "notebook above the first exercise runs as it is. Terms: [glossary](../../docs/glossary.md)."
        )
    return out


def write_student_copy(
    out: Path | str = ROOT / "student",
    notebooks_dir: Path | str = NOTEBOOKS,
    solutions_dir: Path | str | None = None,
) -> list[Path]:
    """Write the student copy into ``out`` (replaced if it exists); returns the notebooks written."""
    nbf = _nbformat()
    out = Path(out)
    solutions_dir = Path(solutions_dir or Path(notebooks_dir) / "solutions")
    if out.resolve() in (Path(notebooks_dir).resolve(), solutions_dir.resolve(), ROOT.resolve()):
        raise ValueError(f"out must be a folder of its own, not {out}")
    if out.exists():
        shutil.rmtree(out)
    (out / "exercises").mkdir(parents=True)
    written = []
    for path in main_notebooks(notebooks_dir):
        dest = out / path.name
        nbf.write(student_notebook(read(path)), str(dest))
        written.append(dest)
    for path in solution_notebooks(solutions_dir):
        dest = out / "exercises" / path.name.replace("_solutions.ipynb", "_exercises.ipynb")
        nbf.write(exercise_workbook(read(path)), str(dest))
        written.append(dest)
    (out / "README.md").write_text(
        "# Student copy of the trgrpo notebooks\n\n"
        "Written by `make student` from `notebooks/`; not committed, rewritten each time (your edits here are "
        "lost when you run it again: copy your work elsewhere first).\n\n"
        "* `NN_*.ipynb`: the notebooks, without the long explanations; the exercises are at the end of 01-04 and 07.\n"
        "* `exercises/NN_*_exercises.ipynb`: one workbook per notebook; replace each cell that raises "
        "`NotImplementedError` with your solution and run the check under it.\n\n"
        "Reading order, times and goals: `docs/syllabus.md`.\n"
    )
    return written


# ---------------------------------------------------------------- checks that teach


class CheckFailed(AssertionError):
    """A check's verdict on a wrong answer: what is wrong and a hint, never the answer itself."""


def expect(ok: Any, what: str, hint: str = "") -> None:
    """Raise :class:`CheckFailed` with ``what`` (what is wrong) and ``hint`` unless ``ok``."""
    if not ok:
        raise CheckFailed(what + (f"\nHint: {hint}" if hint else ""))


def expect_close(name: str, got: Any, want: float, tol: float = 1e-9, hint: str = "") -> None:
    """``got`` within ``tol`` of a value the check recomputed; the message shows ``got``, never ``want``."""
    try:
        value = float(got)
    except (TypeError, ValueError):
        raise CheckFailed(f"`{name}` should be a number, got {type(got).__name__}") from None
    expect(abs(value - float(want)) <= tol, f"`{name}` = {value:.6g} is not the value the check recomputes", hint)


def fingerprint(value: Any, digits: int = 6) -> str:
    """A short hash of ``value`` (floats rounded to ``digits``; lists, tuples, dicts, str, int, bool, None), so a
    check can compare an answer it must not print."""
    import hashlib

    def canon(v: Any) -> Any:
        if isinstance(v, bool) or v is None or isinstance(v, str):
            return v
        if isinstance(v, (int, float)) or hasattr(v, "item"):
            return round(float(v), digits)
        if isinstance(v, dict):
            return sorted((str(k), canon(x)) for k, x in v.items())
        if isinstance(v, (list, tuple)):
            return [canon(x) for x in v]
        raise TypeError(f"fingerprint cannot hash a {type(v).__name__}")

    return hashlib.sha256(json.dumps(canon(value)).encode()).hexdigest()[:12]


def _cell_names(frame: Any) -> list[str]:
    """The ``# expects:`` names of the cell that runs ``frame`` (IPython keeps each cell's source in linecache)."""
    import linecache

    lines = linecache.getlines(frame.f_code.co_filename)
    return expected_names("".join(lines)) if lines else []


class check:  # noqa: N801  (used as ``with course.check("2.1", hint=...):``, like a statement)
    """Wrap a check cell: a failing ``assert`` or an error while checking becomes a :class:`CheckFailed` that names
    the exercise, the answer(s) the failing line tests and a hint, without echoing the line's expected values.

    ``hint`` is the general hint; ``hints`` maps an expected name to a hint shown when a line that tests that
    name fails."""

    def __init__(self, exercise: str, hint: str = "", **hints: str) -> None:
        self.exercise, self.hint, self.hints = exercise, hint, hints
        self.names: list[str] = []
        self.filename = ""

    def __enter__(self) -> check:
        import inspect

        frame = inspect.currentframe()
        caller = frame.f_back if frame is not None else None
        if caller is not None:
            self.names = _cell_names(caller)
            self.filename = caller.f_code.co_filename
        return self

    def _failing_line(self, tb: Any) -> str:
        import linecache

        line = ""
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self.filename:
                line = linecache.getline(self.filename, tb.tb_lineno)
            tb = tb.tb_next
        return line

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if exc_type is None:
            return False
        if not issubclass(exc_type, Exception):
            return False
        line = self._failing_line(tb)
        code = line.split("#")[0]
        named = [n for n in self.names if re.search(rf"\b{re.escape(n)}\b", code)]
        if isinstance(exc, CheckFailed):
            what = str(exc)
        elif isinstance(exc, NameError):
            what = f"{exc}: run your solution cell above first (it defines {', '.join(self.names) or 'the answer'})"
        elif isinstance(exc, AssertionError):
            detail = str(exc).strip()
            subject = ", ".join(f"`{n}`" for n in named) or ", ".join(f"`{n}`" for n in self.names) or "your answer"
            what = f"{subject} {'is' if len(named) == 1 else 'are'} not right yet" + (f" ({detail})" if detail else "")
        else:
            subject = ", ".join(f"`{n}`" for n in named or self.names) or "your answer"
            what = (
                f"checking {subject} raised {exc_type.__name__}: {exc}. Is it of the type and shape the "
                "statement asks for?"
            )
        hints = [self.hints[n] for n in named if n in self.hints and self.hints[n] not in what]
        if self.hint and self.hint not in what:
            hints.append(self.hint)
        msg = f"Exercise {self.exercise}: {what}" + "".join(f"\nHint: {h}" for h in hints)
        raise CheckFailed(msg) from None


def wrong_answer(cell: Any) -> str | None:
    """The wrong answer a check cell is tested with (``cell.metadata.wrong_answer``: code that rebinds names)."""
    return cell.get("metadata", {}).get("wrong_answer")


def wrong_answer_notebook(nb: Any, record: Path | str) -> Any:
    """A copy of a solutions notebook that, after each check cell, rebinds the expected names to the cell's
    ``wrong_answer``, runs the check again, records the exception (type and message) into ``record`` (JSON), and
    restores the right answers: what tests/test_course.py uses to show every check fails with a message."""
    nbf = _nbformat()
    out = copy.deepcopy(nb)
    cells: list[Any] = []
    current = None
    for cell in out.cells:
        cells.append(cell)
        heading = exercise_heading(cell)
        current = heading["id"] if heading else current
        if CHECK not in tags(cell):
            continue
        wrong = wrong_answer(cell)
        names = expected_names(cell.source)
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


# ---------------------------------------------------------------- laptop times for the syllabus


def time_notebooks(
    paths: Iterable[Path | str],
    smoke_for: Iterable[str] = ("05_", "06_", "07_"),
    out_dir: Path | str | None = None,
    timeout: int = 3600,
) -> list[dict]:
    """Execute each notebook once, headless (:func:`trgrpo.batch.run_notebook`; smoke mode for main notebooks
    whose names start with ``smoke_for``, as ``make run`` does) and return one row per notebook: name, mode, wall
    seconds, ok. Executed copies go to ``out_dir``."""
    import tempfile

    from trgrpo.batch import OFFLINE_ENV, environment, run_notebook

    out_dir = Path(out_dir or tempfile.mkdtemp(prefix="trgrpo-times-"))
    rows = []
    for path in map(Path, paths):
        smoke = path.name.startswith(tuple(smoke_for)) and "_solutions" not in path.name  # solutions: their default
        with environment(**OFFLINE_ENV):  # a laptop's course runs on the embedded model
            done = run_notebook(path, out_dir, smoke=smoke, timeout=timeout)
        rows.append(
            {
                "notebook": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path),
                "mode": "smoke" if smoke else "laptop default",
                "wall_s": done["seconds"],
                "ok": done["ok"],
                "error": done["error"] or None,
            }
        )
        status = "" if done["ok"] else f" FAILED {done['error']}"
        print(f"{path.name}: {done['seconds']:.0f} s ({rows[-1]['mode']}){status}")
    return rows


def _minutes(row: dict | None) -> str:
    if row is None:
        return "—"
    if not row["ok"]:
        return "failed"
    return f"{row['wall_s']:.0f} s" if row["wall_s"] < 120 else f"{row['wall_s'] / 60:.1f} min"


def times_table(record: dict) -> str:
    """The syllabus' time table (markdown) from a ``notebook_times.json`` record."""
    by_name = {Path(r["notebook"]).name: r for r in record["rows"]}
    lines = ["| notebook | mode | notebook time | solutions time |", "|---|---|---|---|"]
    for name, row in by_name.items():
        if "_solutions" not in name:
            sol = by_name.get(name.replace(".ipynb", "_solutions.ipynb"))
            lines.append(f"| {Path(name).stem} | {row['mode']} | {_minutes(row)} | {_minutes(sol)} |")
    return "\n".join(lines)


def readme_times_table(record: dict) -> str:
    """The README's first-screen table: each notebook, its first heading, and its measured time (from a
    ``notebook_times.json`` record)."""
    by_name = {Path(r["notebook"]).name: r for r in record["rows"]}
    lines = ["| notebook | what | time on a 2-core CPU |", "|---|---|---|"]
    for path in main_notebooks():
        title = read(path).cells[0].source.splitlines()[0].lstrip("# ").split(" — ", 1)[-1].strip()
        row = by_name.get(path.name)
        when = "—" if row is None else f"{_minutes(row)} ({row['mode']})"
        lines.append(f"| [{path.stem[:2]}](notebooks/{path.name}) | {title} | {when} |")
    return "\n".join(lines)


def exercises_table(notebooks_dir: Path | str = NOTEBOOKS) -> str:
    """The syllabus' list of exercises (markdown), read from the notebooks' ``exercise`` cells."""
    lines = ["| exercise | kind | difficulty | time | title | notebook |", "|---|---|---|---|---|---|"]
    for path in main_notebooks(notebooks_dir):
        for cell in read(path).cells:
            if (ex := exercise_heading(cell)) is None:
                continue
            meta = exercise_meta(cell)
            lines.append(
                f"| {ex['id']} | {ex['kind']} | {meta['difficulty']} | {meta['minutes']} min | "
                f"{ex['title']} | {path.stem} |"
            )
    return "\n".join(lines)


def _cli(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trgrpo.course", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("student", help="write the student copy")
    st.add_argument("--out", default=str(ROOT / "student"))
    tm = sub.add_parser("times", help="time every notebook and its solutions as a laptop runs them")
    tm.add_argument("--only", nargs="*", help="notebook names (or prefixes) to time; default all")
    args = ap.parse_args(argv)
    if args.cmd == "student":
        written = write_student_copy(args.out)
        print(f"wrote {len(written)} notebooks into {args.out}")
        return 0
    from trgrpo.experiment import git_commit, git_dirty, machine_info, write_json

    paths = [p for m in main_notebooks() for p in (m, solutions_path(m)) if p.exists()]
    if args.only:
        paths = [p for p in paths if p.name.startswith(tuple(args.only))]
    dirty = git_dirty()  # before the notebooks run: they rewrite results/notebooks/*.json and figures/
    rows = time_notebooks(paths)
    prev = json.loads(TIMES_PATH.read_text())["rows"] if TIMES_PATH.exists() and args.only else []
    keep = {r["notebook"]: r for r in prev} | {r["notebook"]: r for r in rows}
    record = {
        "measured_at": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": machine_info(),
        "git_commit": git_commit(),
        "dirty": dirty,
        "rows": sorted(keep.values(), key=lambda r: r["notebook"]),
    }
    write_json(TIMES_PATH, record)
    print(f"wrote {TIMES_PATH}; `make docs` renders it into README.md and docs/syllabus.md")
    return 0 if all(r["ok"] for r in record["rows"]) else 1


if __name__ == "__main__":
    sys.exit(_cli())
