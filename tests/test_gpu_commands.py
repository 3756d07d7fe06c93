"""The README's GPU-server commands run as typed, as subprocesses, on the CPU: only the model and the scale change,
through the documented overrides (``--set`` for spec fields; ``TRGRPO_RESULTS`` / ``TRGRPO_CHECKPOINTS`` /
``TRGRPO_RUNS`` keep the test's files in its temporary folder). ``make gpu-check`` is in tests/test_gpu_check.py."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
TRAIN_KK = ROOT / "experiments" / "train_kk_qwen3b.yaml"
# the scale of a CPU run; the rest of the spec is the shipped file's
CPU_SCALE = [
    "steps=1",
    "prompts_per_step=1",
    "num_generations=2",
    "micro_batch_size=2",
    "max_completion_length=8",
    "max_eval_tokens=8",
    "n_train=8",
    "n_eval=2",
    "use_vllm=false",
    "gradient_checkpointing=false",
    "task_options={n_people: [2], eval_n_people: [2], prefill_think: true}",
]


def _python_m(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    folders = {"TRGRPO_RESULTS": "results", "TRGRPO_CHECKPOINTS": "checkpoints", "TRGRPO_RUNS": "runs"}
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
        **{k: str(tmp_path / v) for k, v in folders.items()},
        **env,
    }
    cmd = [sys.executable, "-m", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def _no_cuda():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")


@pytest.mark.slow  # 26 s; the default tier runs the CLI's processes in test_torchrun and nb 07
def test_train_config_runs_one_process_per_spec(tiny_model_dir, tmp_path):
    """`trgrpo train --config FILE` with two specs: this process trains nothing, each spec trains in its own
    `trgrpo train` process (which sees one spec) and writes one record."""
    data = yaml.safe_load(TRAIN_KK.read_text())
    data["grid"] = data["grid"][:2]  # equal and tr, seed 0
    cfg = tmp_path / "two.yaml"
    cfg.write_text(yaml.safe_dump(data))
    r = _python_m(["trgrpo", "train", "--config", str(cfg), "--set", f"model={tiny_model_dir}", *CPU_SCALE], tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    children = re.findall(r"^  \$ (\S+) -m trgrpo train --config (\S+)", r.stdout, re.M)
    assert len(children) == 2 and all(exe == sys.executable for exe, _ in children)
    group = data["base"]["group"]
    records = sorted((tmp_path / "results" / group).glob("*.json"))
    assert len(records) == 2
    for (_, spec_file), record in zip(sorted(children, key=lambda c: c[1]), records):
        rec = json.loads(record.read_text())
        assert Path(spec_file).stem == rec["name"] and len(rec["history"]) == 1
        log = Path(spec_file).with_suffix(".log").read_text()
        assert f"[1/1] {rec['name']}" in log  # the child held this one spec
        assert Path(spec_file).is_relative_to(tmp_path / "runs" / "launch")
    assert {json.loads(p.read_text())["scheme"] for p in records} == {"equal", "tr"}


def test_full_scale_without_cuda_stops_with_one_line(tmp_path):
    """The README's full-scale training command on a machine without CUDA: one line naming CUDA and the driver, no
    traceback, nothing written (no results, checkpoints or logs)."""
    _no_cuda()
    r = _python_m(["trgrpo", "train", "--config", str(TRAIN_KK.relative_to(ROOT))], tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "CUDA" in lines[0] and "Qwen2.5-3B-Instruct" in lines[0], r.stderr
    assert "driver" in lines[0] or "CPU build" in lines[0]
    assert not any(tmp_path.iterdir())


def test_one_process_refuses_several_gpus_and_a_launcher_several_specs(monkeypatch):
    """Without a launcher's WORLD_SIZE, several visible GPUs are refused (TRL's device_map="auto" would pipeline one
    model over them); under a launcher, several specs are; --gpus N launches each spec on N GPUs."""
    from trgrpo.runs import fullscale
    from trgrpo.runs.spec import RunSpec
    from trgrpo.runs.train import processes

    one, two = [RunSpec(task="kk", name="a")], [RunSpec(task="kk", name="a"), RunSpec(task="kk", name="b")]
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(fullscale, "n_devices", lambda: 8)
    gpus, problem = processes(one, None)
    assert gpus is None and "8 GPUs visible" in problem and "CUDA_VISIBLE_DEVICES=0" in problem
    assert processes(two, 8) == (8, None) and processes(one, 1) == (1, None)
    assert "--gpus 9" in processes(one, 9)[1]
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert processes(one, None) == (None, None)
    assert "one per launch" in processes(two, None)[1]
    monkeypatch.setattr(fullscale, "n_devices", lambda: 1)
    monkeypatch.delenv("WORLD_SIZE")
    assert processes(one, None) == (None, None) and processes(two, None) == (1, None)
    monkeypatch.setattr(fullscale, "n_devices", lambda: 0)
    assert processes(two, None) == (0, None) and "0 GPU(s) visible" in processes(one, 1)[1]


# notebooks 05 and 06 in smoke mode under papermill: ~2 minutes on 2 cores, and `make test` executes both notebooks
# already (nbval); the command itself is checked here, in the slow tier
@pytest.mark.slow
def test_batch_smoke_plan(tmp_path):
    """`trgrpo batch experiments/smoke.yaml` as typed: both notebooks run, the summary says so."""
    r = _python_m(["trgrpo", "batch", "experiments/smoke.yaml"], tmp_path, TRGRPO_FIGURES=str(tmp_path / "figures"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = json.loads((tmp_path / "runs" / "smoke" / "summary.json").read_text())
    assert [row["notebook"] for row in rows] == ["05_kk_logic_full_scale.ipynb", "06_math_full_scale.ipynb"]
    assert all(row["ok"] and row["smoke"] for row in rows)
