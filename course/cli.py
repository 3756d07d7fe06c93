"""``trgrpo course``: the student copy, the instructor's copy, grading, and the notebooks' laptop times."""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from course.grading import grade_folder
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
    g = sub.add_parser("grade", help="grade a folder of submitted workbooks into a table and a CSV")
    g.add_argument("folder")
    g.add_argument("--timeout", type=int, default=600, help="seconds per notebook")
    g.add_argument("--csv", default=None, help="default: FOLDER/grades.csv")
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
        print(f"wrote {len(write_instructor_copy(args.out))} notebooks into {args.out}")
        return 0
    if args.cmd == "grade":
        from trgrpo.notebook import markdown_table

        if not Path(args.folder).is_dir():
            print(f"grade: {args.folder} is not a folder")
            return 2
        rows = grade_folder(args.folder, args.timeout)
        columns = list(dict.fromkeys(k for r in rows for k in r))
        out = Path(args.csv or Path(args.folder) / "grades.csv")
        with out.open("w", newline="") as f:
            writer = csv.DictWriter(f, columns)
            writer.writeheader()
            writer.writerows(rows)
        shown = [c for c in columns if not c.startswith("written ")]
        print(markdown_table(rows, shown) + f"\n\nwrote {out}")
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
