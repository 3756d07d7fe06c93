"""``trgrpo course``: the student copy, the instructor's copy, grading, and the notebooks' laptop times."""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from course.grading import folder_release, grade_folder, totals, write_reports
from course.workbooks import (
    TIMES_PATH,
    main_notebooks,
    parameters_source,
    solutions_path,
    write_instructor_copy,
    write_student_copy,
)
from trgrpo.exercises import fingerprint
from trgrpo.files import ROOT, git_commit, git_dirty, machine_info, write_json
from trgrpo.runs.batch import OFFLINE_ENV, environment, run_notebook


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="trgrpo course", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, what in (("student", "write the student copy"), ("instructor", "the student copy and the solutions")):
        sub.add_parser(name, help=what).add_argument("--out", default=str(ROOT / name))
    b = sub.add_parser("book", help="the book: Sphinx pages of make run's executed notebooks (no re-execution)")
    b.add_argument("--executed", default=str(ROOT / "runs" / "make-run"), help="make run's executed notebooks")
    b.add_argument("--out", default=str(ROOT / "build" / "book"))
    b.add_argument("names", nargs="*", help="notebook file names (default: every main notebook)")
    g = sub.add_parser("grade", help="grade a folder of submitted workbooks against the release (nbgrader's model)")
    g.add_argument("folder")
    g.add_argument("--timeout", type=int, default=600, help="seconds per notebook")
    g.add_argument("--out", default=None, help="where the grades, feedback and written answers go; default: FOLDER")
    g.add_argument(
        "--release", default=None, help="a student copy make student wrote; default: regenerated from this checkout"
    )
    t = sub.add_parser(
        "times", help="time every notebook and its solutions as a laptop runs them (offline, 05-07 smoke)"
    )
    t.add_argument("--allow-dirty", action="store_true", help="time an uncommitted tree (the record says so)")
    args = ap.parse_args(argv)
    if args.cmd == "student":
        written, kept = write_student_copy(args.out)
        print(f"wrote {len(written)} notebooks into {args.out}")
        for k in kept:
            print(f"kept your changed {k}; the fresh copy is {k.with_suffix('.new.ipynb')}")
        return 0
    if args.cmd == "instructor":
        written, failed = write_instructor_copy(args.out)
        print(f"wrote {len(written)} notebooks into {args.out}, the solutions executed; its README.md says how to "
              "release, collect, grade and hand back")  # fmt: skip
        for row in failed:
            print(f"solutions/{row['notebook']} stopped: {row['error']}")
        return 1 if failed else 0
    if args.cmd == "book":
        from course.book import build

        try:
            status = build(Path(args.executed), Path(args.out), args.names or [p.name for p in main_notebooks()])
        except FileNotFoundError as e:
            print(f"book: {e}")
            return 2
        print(f"wrote the book into {args.out}; open {Path(args.out) / 'index.html'}" if status == 0 else "")
        return status
    if args.cmd == "grade":
        from trgrpo.notebook import markdown_table

        if not Path(args.folder).is_dir():
            print(f"grade: {args.folder} is not a folder")
            return 2
        release = folder_release(args.release) if args.release else None
        result = grade_folder(args.folder, args.timeout, release)
        for r in result["ignored"]:
            print(f"left out {r['path']}: {r['why']}")
        for r in result["runs"]:
            if r["error"]:
                print(f"{r['student']}, {r['workbook']}: {r['error']}")
        table = totals(result["grades"])
        written = write_reports(result, args.out or args.folder)
        print(markdown_table(table, list(dict.fromkeys(k for r in table for k in r))))
        print(f"\nwrote {', '.join(str(p) for p in written[:3])} and {len(written) - 3} feedback files in "
              f"{written[0].parent / 'feedback'}; mark the written answers in {written[2].name}")  # fmt: skip
        return 0
    dirty = git_dirty()  # before the notebooks run
    if dirty and not args.allow_dirty:
        print("the tree has uncommitted changes: commit first, so the times name the code they measured")
        return 2
    out_dir, rows = Path(tempfile.mkdtemp(prefix="trgrpo-times-")), []
    for path in [p for m in main_notebooks() for p in (m, solutions_path(m)) if p.exists()]:
        smoke = path.name.startswith(("05_", "06_", "07_")) and "_solutions" not in path.name
        with environment(**OFFLINE_ENV):
            done = run_notebook(path, out_dir, smoke=smoke, timeout=3600)
        mode = "smoke" if smoke else "laptop default"
        rows.append(dict(notebook=str(path.relative_to(ROOT)), mode=mode, wall_s=done["seconds"], ok=done["ok"]))
        rows[-1]["parameters"] = fingerprint(parameters_source(path))
        rows[-1]["error"] = done["error"] or None
        print(f"{path.name}: {done['seconds']:.0f} s ({mode}){'' if done['ok'] else ' FAILED ' + done['error']}")
    record = {
        "measured_at": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": machine_info(),
        "git_commit": git_commit(),
        "dirty": dirty,
        "rows": sorted(rows, key=lambda r: r["notebook"]),
    }
    write_json(TIMES_PATH, record)
    print(f"wrote {TIMES_PATH}; `make docs` renders it into README.md and docs/syllabus.md")
    return 0 if all(r["ok"] for r in rows) else 1
