"""Batch execution of notebooks with papermill (docs/design.md, "The scale-out path").

``python -m trgrpo.batch experiments/<name>.yaml`` executes the notebooks a YAML file lists, each with
its parameters, into ``runs/<name>/`` (executed notebook + log), goes on past a notebook that fails and
prints a summary table. The YAML layout::

    name: kk_qwen3b
    smoke: false            # default for every entry
    notebooks:
      - notebook: notebooks/05_kk_logic_full_scale.ipynb
        parameters: {MODEL: Qwen/Qwen2.5-3B-Instruct, SEEDS: [0, 1, 2]}
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from traitlets.config import Config

ROOT = Path(__file__).resolve().parents[2]


# A headless run has no frontend for live widgets: notebooks skip them (nbclient can block on widget messages,
# jupyter/nbclient#312). The hub stays as the caller has it (GPU servers download models; `make` sets it offline).
HEADLESS_ENV = {"TRGRPO_HEADLESS": "1", "TOKENIZERS_PARALLELISM": "false"}
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def kernel_config() -> Config:
    """The kernel talks to papermill over local IPC sockets, not TCP: nothing listens on a port, and ipykernel does
    not warn "Kernel is running over TCP without encryption" once per notebook. TCP stays on Windows (no IPC)."""
    from traitlets.config import Config

    return Config({"KernelManager": {"transport": "tcp" if os.name == "nt" else "ipc"}})


@contextlib.contextmanager
def environment(**values: str):
    """Set environment variables (the kernel inherits them) and restore the previous values afterwards."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_notebook(
    nb: Path, out_dir: Path, *, smoke: bool, parameters: dict | None = None, timeout: int | None = None
) -> dict:
    """Execute one notebook with papermill, headless (:data:`HEADLESS_ENV`, ``TRGRPO_SMOKE`` as ``smoke``); return
    a summary row (never raises for a failing notebook)."""
    import papermill as pm

    out_dir.mkdir(parents=True, exist_ok=True)
    out_nb = out_dir / nb.name
    params = {"SMOKE": bool(smoke), **(parameters or {})}
    t0 = time.time()
    row = {"notebook": nb.name, "smoke": bool(smoke), "ok": False, "seconds": 0.0, "error": ""}
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
    except Exception as exc:  # noqa: BLE001 - a failing notebook must not stop the batch
        row["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:200] if str(exc) else ''}"
    row["seconds"] = round(time.time() - t0, 1)
    row["output"] = str(out_nb)
    return row


def run_notebooks(plan: list[tuple[Path, bool, dict]], out_dir: Path) -> list[dict]:
    """Run (notebook, smoke, parameters) entries in order with progress lines; print and save a summary."""
    rows = []
    for k, (nb, smoke, params) in enumerate(plan, 1):
        print(f"[{k}/{len(plan)}] {nb.name} ({'smoke' if smoke else 'default'}) ...", flush=True)
        row = run_notebook(Path(nb), out_dir, smoke=smoke, parameters=params)
        print(f"      {'ok' if row['ok'] else 'FAILED'} in {row['seconds']:.0f} s {row['error']}", flush=True)
        rows.append(row)
    print(summary_table(rows))
    from ..pipeline.experiment import write_json

    write_json(out_dir / "summary.json", rows)  # atomic: a killed batch never leaves half a summary
    return rows


def summary_table(rows: list[dict]) -> str:
    lines = ["", f"{'notebook':<40} {'mode':<8} {'status':<7} {'seconds':>8}", "-" * 66]
    for r in rows:
        lines.append(
            f"{r['notebook']:<40} {'smoke' if r['smoke'] else 'default':<8} "
            f"{'ok' if r['ok'] else 'FAILED':<7} {r['seconds']:>8.1f}"
        )
    return "\n".join(lines)


def load_plan(path: Path) -> tuple[str, list[tuple[Path, bool, dict]]]:
    import yaml

    spec = yaml.safe_load(Path(path).read_text())
    if not isinstance(spec, dict) or "notebooks" not in spec:
        raise ValueError(f"{path}: expected a mapping with a 'notebooks' list")
    default_smoke = bool(spec.get("smoke", False))
    plan = []
    for i, entry in enumerate(spec["notebooks"]):
        if "notebook" not in entry:
            raise ValueError(f"{path}: notebooks[{i}] lacks the field 'notebook'")
        nb = (ROOT / entry["notebook"]) if not Path(entry["notebook"]).is_absolute() else Path(entry["notebook"])
        if not nb.exists():
            raise FileNotFoundError(f"{path}: notebooks[{i}].notebook {nb} does not exist")
        plan.append((nb, bool(entry.get("smoke", default_smoke)), dict(entry.get("parameters", {}))))
    return str(spec.get("name", Path(path).stem)), plan


def parse_overrides(items: list[str]) -> dict:
    """``["STEPS=10", "SEEDS=[0]"]`` -> ``{"STEPS": 10, "SEEDS": [0]}`` (values read as YAML)."""
    import yaml

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Execute notebooks with papermill into runs/<name>/")
    ap.add_argument("config", help="YAML file listing notebooks and parameters")
    ap.add_argument("--smoke", action="store_true", help="force smoke mode for every notebook")
    from ..pipeline.fullscale import RUNS_DIR

    ap.add_argument("--runs", default=str(RUNS_DIR), help="default: $TRGRPO_RUNS or runs/")
    ap.add_argument(
        "--set", nargs="*", default=[], metavar="KEY=VALUE", help="override a parameter of every notebook (YAML value)"
    )
    args = ap.parse_args(argv)
    name, plan = load_plan(Path(args.config))
    overrides = parse_overrides(args.set)
    if overrides:
        plan = [(nb, smoke, {**p, **overrides}) for nb, smoke, p in plan]
    if args.smoke:
        plan = [(nb, True, p) for nb, _, p in plan]
    rows = run_notebooks(plan, Path(args.runs) / name)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
