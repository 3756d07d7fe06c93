"""``make run``: the CPU-scale reproduction, every notebook executed headless by papermill into ``runs/``.

Notebooks 01-04 and 08 run at their CPU defaults, 05-07 (written for GPUs) in smoke mode. A notebook
that fails does not stop the others; a summary table is printed at the end.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from trgrpo.experiment import ROOT

GPU_NOTEBOOKS = ("05_", "06_", "07_")  # smoke mode on a CPU machine


def notebooks(root: Path = ROOT) -> list[Path]:
    return sorted(p for p in (root / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="run every notebook in smoke mode")
    ap.add_argument("--only", nargs="*", default=None, help="notebook number prefixes to run, e.g. 01 02")
    ap.add_argument("--out", default=str(ROOT / "runs" / "make-run"))
    args = ap.parse_args(argv)
    nbs = notebooks()
    if args.only:
        nbs = [p for p in nbs if any(p.name.startswith(k) for k in args.only)]
    if not nbs:
        print(f"no notebook matches {args.only or 'notebooks/[0-9][0-9]_*.ipynb'}", file=sys.stderr)
        return 1
    from trgrpo.batch import run_notebooks

    plan = [(nb, args.smoke or nb.name.startswith(GPU_NOTEBOOKS), {}) for nb in nbs]
    t0 = time.time()
    rows = run_notebooks(plan, Path(args.out))
    print(
        f"\nmake run: {sum(r['ok'] for r in rows)}/{len(rows)} notebooks ok in {time.time() - t0:.0f} s; "
        f"executed copies in {args.out}, figures in figures/"
    )
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
