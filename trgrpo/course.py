"""Teaching material: the exercises of notebooks 01-04 and 07, their solutions, and the student copy.

The notebooks carry cell tags (``cell.metadata.tags``) that this module reads:

* ``exercise``    an exercise statement (markdown), at the end of a main notebook and, byte-identical, in its
                  solutions notebook ``notebooks/solutions/<stem>_solutions.ipynb``;
* ``solution``    a cell of a solution (code or markdown), only in solutions notebooks;
* ``check``       the code cell after each solution that verifies it; its first line is ``# expects: a, b``,
                  the names the student has to define;
* ``explanation`` a long explanation in a main notebook (markdown only) that a student copy leaves out;
* ``derivation``  a main-notebook code cell that writes an equation out as a function (the only cells allowed a
                  ``def``), followed by a cell that checks it against the library; the student copy keeps each
                  function's signature and first comment line and replaces its body by ``NotImplementedError``.

``python -m trgrpo.course student --out student`` (``make student``) writes the student copy:
``<out>/NN_*.ipynb`` (every main notebook without its ``explanation`` cells) and
``<out>/exercises/NN_*_exercises.ipynb`` (each solutions notebook with every run of ``solution`` cells replaced
by one stub cell that raises ``NotImplementedError``; the ``check`` cells stay, so a student's answer is checked).
Put ``<out>`` beside ``notebooks/`` (the default) so the notebooks' relative paths (``../results``) still resolve.

``python -m trgrpo.course times`` executes every notebook as a laptop would (``make run``'s scale) and writes
``results/course/notebook_times.json``; ``--table`` rewrites the time table of ``docs/syllabus.md`` from it.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import shutil
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
SOLUTIONS = NOTEBOOKS / "solutions"
SYLLABUS = ROOT / "docs" / "syllabus.md"
TIMES_PATH = ROOT / "results" / "course" / "notebook_times.json"

EXERCISE, SOLUTION, CHECK, EXPLANATION = "exercise", "solution", "check", "explanation"
DERIVATION = "derivation"
KINDS = ("predict", "explore", "derive", "implement")  # graded from "change a parameter" to "write a variant"
HEADING_RE = re.compile(rf"^###\s+Exercise\s+(\d+)\.(\d+)\s*·\s*({'|'.join(KINDS)})\s*·\s*(.+?)\s*$", re.M)
EXPECTS_RE = re.compile(r"^#\s*expects:\s*(.+?)\s*$")
TABLE_START, TABLE_END = "<!-- times:start", "<!-- times:end -->"
EX_START, EX_END = "<!-- exercises:start", "<!-- exercises:end -->"


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


def exercises(nb: Any) -> list[dict]:
    """The exercise statements of a notebook, in order: id, kind, title, and the cell's source."""
    return [{**h, "source": c.source} for c in nb.cells if (h := exercise_heading(c))]


def expected_names(check_source: str) -> list[str]:
    """The names a check cell's first line ``# expects: a, b`` declares ([] if it has none)."""
    first = check_source.strip().splitlines()[0] if check_source.strip() else ""
    m = EXPECTS_RE.match(first)
    return [n.strip() for n in m.group(1).split(",") if n.strip()] if m else []


def student_notebook(nb: Any) -> Any:
    """A main notebook for students: the same code cells, without ``explanation`` and ``solution`` cells, and each
    ``derivation`` cell turned into an exercise (:func:`derivation_stub`; the check after it stays)."""
    out = copy.deepcopy(nb)
    out.cells = [c for c in out.cells if not ({EXPLANATION, SOLUTION} & set(tags(c)))]
    for c in out.cells:
        if DERIVATION in tags(c) and c.cell_type == "code":
            c.source = derivation_stub(c.source)
    return out


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
            "and fails with a message when it is not. The notebook above the first exercise runs as it is."
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


# ---------------------------------------------------------------- laptop times for the syllabus


def time_notebooks(
    paths: Iterable[Path | str],
    smoke_for: Iterable[str] = ("05_", "06_", "07_"),
    out_dir: Path | str | None = None,
    timeout: int = 3600,
) -> list[dict]:
    """Execute each notebook once, headless (:func:`trgrpo.batch.run_notebook`; smoke mode for main notebooks whose
    names start with ``smoke_for``, as ``make run`` does) and return one row per notebook: name, mode, wall
    seconds, ok. Executed copies go to ``out_dir``."""
    import tempfile

    from .batch import OFFLINE_ENV, environment, run_notebook

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
    lines = [
        "| notebook | mode | notebook time | solutions time |",
        "|---|---|---|---|",
    ]
    for name, row in by_name.items():
        if "_solutions" in name:
            continue
        sol = by_name.get(name.replace(".ipynb", "_solutions.ipynb"))
        lines.append(f"| {Path(name).stem} | {row['mode']} | {_minutes(row)} | {_minutes(sol)} |")
    m = record["machine"]
    lines.append("")
    lines.append(
        f"Measured {record['measured_at']} by `python -m trgrpo.course times`, one notebook at a time, on the "
        f"project's CPU machine ({m.get('cpu_count', '?')} cores, {m.get('processor') or m.get('platform', '?')}; "
        f"no GPU), commit {str(record.get('git_commit'))[:10]}"
        f"{' with uncommitted changes' if record.get('dirty') else ''}."
    )
    return "\n".join(lines)


def exercises_table(notebooks_dir: Path | str = NOTEBOOKS) -> str:
    """The syllabus' list of exercises (markdown), read from the notebooks' ``exercise`` cells."""
    lines = ["| exercise | kind | title | notebook |", "|---|---|---|---|"]
    for path in main_notebooks(notebooks_dir):
        for ex in exercises(read(path)):
            lines.append(f"| {ex['id']} | {ex['kind']} | {ex['title']} | {path.stem} |")
    return "\n".join(lines)


def _replace_block(text: str, start_marker: str, end_marker: str, body: str) -> str:
    start, end = text.find(start_marker), text.find(end_marker)
    if start < 0 or end < 0:
        raise ValueError(f"no {start_marker} ... {end_marker} markers")
    head_end = text.index("-->", start) + 3
    return text[:head_end] + "\n" + body + "\n" + text[end:]


def syllabus_text(record: dict | None, path: Path | str = SYLLABUS) -> str:
    """The syllabus with its generated blocks (time table from ``record`` if given, exercise list) rewritten."""
    text = Path(path).read_text()
    if record is not None:
        text = _replace_block(text, TABLE_START, TABLE_END, times_table(record))
    return _replace_block(text, EX_START, EX_END, exercises_table())


def update_syllabus(record: dict | None, path: Path | str = SYLLABUS) -> bool:
    """Rewrite the generated blocks of the syllabus; returns True if the file changed."""
    path = Path(path)
    old, new = path.read_text(), syllabus_text(record, path)
    if new != old:
        path.write_text(new)
    return new != old


def _cli(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trgrpo.course", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("student", help="write the student copy")
    st.add_argument("--out", default=str(ROOT / "student"))
    tm = sub.add_parser("times", help="time every notebook and its solutions as a laptop runs them")
    tm.add_argument("--only", nargs="*", help="notebook names (or prefixes) to time; default all")
    tm.add_argument("--table", action="store_true", help="only rewrite docs/syllabus.md from the saved times")
    args = ap.parse_args(argv)
    if args.cmd == "student":
        written = write_student_copy(args.out)
        print(f"wrote {len(written)} notebooks into {args.out}")
        return 0
    if not args.table:
        from .experiment import git_commit, git_dirty, machine_info, write_json

        paths = [p for m in main_notebooks() for p in (m, solutions_path(m)) if p.exists()]
        if args.only:
            paths = [p for p in paths if p.name.startswith(tuple(args.only))]
        dirty = git_dirty()  # before the notebooks run: they rewrite results/notebooks/*.json and figures/
        rows = time_notebooks(paths)
        prev = json.loads(TIMES_PATH.read_text())["rows"] if TIMES_PATH.exists() and args.only else []
        keep = {r["notebook"]: r for r in prev}
        keep.update({r["notebook"]: r for r in rows})
        record = {
            "measured_at": time.strftime("%Y-%m-%d", time.gmtime()),
            "machine": machine_info(),
            "git_commit": git_commit(),
            "dirty": dirty,
            "rows": sorted(keep.values(), key=lambda r: r["notebook"]),
        }
        write_json(TIMES_PATH, record)
    record = json.loads(TIMES_PATH.read_text()) if TIMES_PATH.exists() else None
    print("updated" if update_syllabus(record) else "unchanged", SYLLABUS)
    return 0 if record is None or all(r["ok"] for r in record["rows"]) else 1


if __name__ == "__main__":
    sys.exit(_cli())
