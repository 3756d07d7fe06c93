"""``trgrpo batch experiments/<name>.yaml``: execute the notebooks a plan lists (``name``, ``smoke``,
``notebooks: [{notebook, parameters, smoke}]``) with papermill into ``runs/<name>/``, past failures, with a summary."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from trgrpo.config import ConfigError
from trgrpo.files import RUNS_DIR, write_json
from trgrpo.runs.plan import check_batch
from trgrpo.runs.spec import load_plan, parse_overrides

if TYPE_CHECKING:
    from traitlets.config import Config


# No frontend for live widgets (nbclient can block on them, jupyter/nbclient#312); the hub stays as the caller has it.
HEADLESS_ENV = {"TRGRPO_HEADLESS": "1", "TOKENIZERS_PARALLELISM": "false"}
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def kernel_config() -> Config:
    """The kernel over local IPC sockets (no open port, no TCP warning per notebook); TCP on Windows."""
    from traitlets.config import Config

    return Config({"KernelManager": {"transport": "tcp" if os.name == "nt" else "ipc"}})


def environment(**values: str):
    """A context that sets environment variables (the kernel inherits them) and restores them afterwards."""
    from unittest import mock

    return mock.patch.dict(os.environ, values)


def run_notebook(
    nb: Path, out_dir: Path, *, smoke: bool, parameters: dict | None = None, timeout: int | None = None
) -> dict:
    """Execute one notebook headless with papermill; return its summary row (a failing notebook does not raise)."""
    import papermill as pm

    out_dir.mkdir(parents=True, exist_ok=True)
    out_nb = out_dir / nb.name
    params = {"SMOKE": bool(smoke), **(parameters or {})}
    t0 = time.time()
    row = {"notebook": nb.name, "smoke": bool(smoke), "parameters": params, "ok": False, "seconds": 0.0, "error": ""}
    row["output"] = str(out_nb)
    try:
        with environment(**HEADLESS_ENV, TRGRPO_SMOKE="1" if smoke else "0"):
            pm.execute_notebook(
                str(nb),
                str(out_nb),
                parameters=params,
                cwd=str(nb.parent),
                kernel_name="python3",
                progress_bar=False,
                log_output=False,
                execution_timeout=timeout,
                config=kernel_config(),
            )
        row["ok"] = True
    except pm.PapermillExecutionError as exc:  # the failing cell's error as its one line, not papermill's report
        row["error"] = " ".join(f"{exc.ename}: {exc.evalue}".split())
    except Exception as exc:  # noqa: BLE001 - a failing notebook must not stop the batch
        row["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:200] if str(exc) else ''}"
    row["seconds"] = round(time.time() - t0, 1)
    return row


def run_notebooks(plan: list[tuple[Path, bool, dict]], out_dir: Path, *, rerun: bool = False) -> list[dict]:
    """Run (notebook, smoke, parameters) entries in order with progress lines; the summary (``summary.json``) saved
    after each. A notebook that finished in an earlier batch into ``out_dir`` (its summary row ok, with the same mode
    and parameters, its output there) is not run again unless ``rerun``."""
    done = {} if rerun else {_key(r): r for r in _earlier(out_dir) if r.get("ok") and Path(r["output"]).is_file()}
    rows = []
    for k, (nb, smoke, params) in enumerate(plan, 1):
        key = _key({"notebook": nb.name, "smoke": bool(smoke), "parameters": {"SMOKE": bool(smoke), **params}})
        if row := done.get(key):
            print(f"[{k}/{len(plan)}] {nb.name}: finished in an earlier batch ({row['output']}), not run again")
        else:
            print(f"[{k}/{len(plan)}] {nb.name} ({'smoke' if smoke else 'default'}) ...", flush=True)
            row = run_notebook(Path(nb), out_dir, smoke=smoke, parameters=params)
            print(f"      {'ok' if row['ok'] else 'FAILED'} in {row['seconds']:.0f} s {row['error']}", flush=True)
        rows.append(row)
        write_json(out_dir / "summary.json", rows)  # atomic: a killed batch never leaves half a summary
    print(f"\n{'notebook':<40} {'mode':<8} {'status':<7} {'seconds':>8}\n" + "-" * 66)
    for r in rows:
        mode, status = "smoke" if r["smoke"] else "default", "ok" if r["ok"] else "FAILED"
        print(f"{r['notebook']:<40} {mode:<8} {status:<7} {r['seconds']:>8.1f}")
    return rows


def _key(row: dict) -> tuple:
    return row.get("notebook"), row.get("smoke"), json.dumps(row.get("parameters"), sort_keys=True)


def _earlier(out_dir: Path) -> list[dict]:
    """The rows of an earlier batch's ``summary.json`` in ``out_dir``; none when there is none or it is unreadable
    (every notebook then runs again)."""
    try:
        rows = json.loads((out_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="trgrpo batch", description="Execute notebooks with papermill into runs/<name>/")
    ap.add_argument("config", help="YAML file listing notebooks and parameters")
    ap.add_argument("--smoke", action="store_true", help="force smoke mode for every notebook")
    ap.add_argument("--runs", default=str(RUNS_DIR), help="default: $TRGRPO_RUNS or runs/")
    ap.add_argument(
        "--set", nargs="*", default=[], metavar="KEY=VALUE", help="override a parameter of every notebook (YAML value)"
    )
    ap.add_argument("--rerun", action="store_true", help="also the notebooks that finished in an earlier batch")
    ap.add_argument("--allow-long", action="store_true", help="run notebooks whose runs `trgrpo plan` calls too long")
    args = ap.parse_args(argv)
    try:
        name, plan = load_plan(Path(args.config), parse_overrides(args.set))
        if args.smoke:
            plan = [(nb, True, p) for nb, _, p in plan]
        check_batch(Path(args.config), plan, allow_long=args.allow_long)
    except ConfigError as e:
        print(f"{ap.prog}: error: {e}", file=sys.stderr)
        return 2
    rows = run_notebooks(plan, Path(args.runs) / name, rerun=args.rerun)
    return 0 if all(r["ok"] for r in rows) else 1
