"""scripts/device_grid.py, the powered SmolLM2 grid prepared as one device job: run as typed, on a CPU with a tiny model
(2 steps, 2 seeds), and its one-line refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLAN = "results/leverage/device_plan.yaml"


def _device_grid(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "scripts/device_grid.py", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    "args, says",
    [
        (["run", "nosuch.yaml"], "plan nosuch.yaml: no such file"),
        pytest.param(["run", PLAN, "--set", "learning_rate=abc"], "learning_rate", marks=pytest.mark.slow),  # torch
    ],
)
def test_bad_plan_or_override_is_one_line_exit_2_nothing_written(tmp_path, args, says):
    out = tmp_path / "out"
    r = _device_grid(*args, "--out", str(out))
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not out.exists()


def test_split_wheels_join_back(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    import device_grid

    blob = bytes(range(256)) * 1000
    for i, s in enumerate(range(0, len(blob), 100_000)):
        (tmp_path / f"x-1.0-py3-none-any.whl.part{i:02d}").write_bytes(blob[s : s + 100_000])
    (joined,) = device_grid.join_parts(tmp_path)
    assert joined.name == "x-1.0-py3-none-any.whl" and joined.read_bytes() == blob
    assert device_grid.join_parts(tmp_path) == []  # already joined


def test_past_its_budget_the_grid_hands_every_spec_to_a_worker_and_starts_none(tmp_path, tiny_model_dir):
    """The submit path without training (budget 0): every spec reaches a spawned worker, which skips it."""
    out = tmp_path / "out"
    r = _device_grid(
        "run", PLAN, "--out", str(out), "--set", f"model={tiny_model_dir}", "--seeds", "0", "--workers", "1",
        "--budget-s", "0",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads((out / "device_grid.json").read_text())
    assert summary["n_ran"] == 0 and len(summary["runs"]) == 3, summary


@pytest.mark.slow
def test_the_grid_runs_on_a_cpu_at_two_steps_and_two_seeds(tmp_path, tiny_model_dir):
    out = tmp_path / "out"
    r = _device_grid(
        "run", PLAN, "--out", str(out), "--set", f"model={tiny_model_dir}", "--set", "steps=2",
        "--set", "n_eval=2", "--set", "n_train=8", "--seeds", "0", "1", "--workers", "1",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads((out / "device_grid.json").read_text())
    names = sorted(p.stem for p in (out / "lm" / "device").glob("*.json"))
    assert names == sorted(f"{a}-seed{s}" for a in ("grpo", "tr", "tr-ratio") for s in (0, 1))
    assert summary["n_ran"] == 6 and summary["device"] == "cpu" and summary["seeds"] == [0, 1]
    rec = json.loads((out / "lm" / "device" / "tr-ratio-seed1.json").read_text())
    assert (
        rec["spec"]["placement"] == "ratio" and rec["steps"] == 2 and [e["step"] for e in rec["eval_history"]][0] == 0
    )
    again = _device_grid(*r.args[2:])  # every record there: nothing runs again
    assert json.loads((out / "device_grid.json").read_text())["runs"] == [] and again.returncode == 0
