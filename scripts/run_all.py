"""``make run``: every notebook executed headless into ``runs/make-run/``, 05-07 (written for GPUs) in smoke mode;
a notebook that fails does not stop the others."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trgrpo.files import ROOT  # noqa: E402


def main() -> int:
    from trgrpo.runs.batch import run_notebooks

    out = ROOT / "runs" / "make-run"
    nbs = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    t0 = time.time()
    rows = run_notebooks([(nb, nb.name.startswith(("05_", "06_", "07_")), {}) for nb in nbs], out)
    print(
        f"\nmake run: {sum(r['ok'] for r in rows)}/{len(rows)} notebooks ok in {time.time() - t0:.0f} s; "
        f"executed copies in {out}, headlines and figures in runs/ (`make records` promotes them)"
    )
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
