"""The engine tier (issue "engines"): DeepSpeed ZeRO-3, the engine of Tables 1 and 2 on 7B, run by `trgrpo train` as
typed on two CPU processes (``TRGRPO_CPU_PROCESSES=2 TRGRPO_CPU_ZERO=3``: ``accelerate launch`` with
configs/zero3.yaml, DeepSpeed's CPU accelerator on gloo), not emulated. In make test: a run (each rank saves its own
shard, both ranks take part in the evaluation that gathers ZeRO-3's shards, another spec is refused in one line) and
its finished restart (evaluates only, the same record). Every run on several GPUs goes through an accelerate config
with DeepSpeed, so this is the multi-process test of make test; the plain two-process (DDP) runs of
tests/integration/test_two_processes.py are in the slow tier, with the kill after a checkpoint and its resume for
ZeRO-2 and ZeRO-3. What only a GPU shows (bf16, NCCL, vLLM) is docs/gpu.md's GPU check."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.test_two_processes import same_run, write_config
from tests.nbval_harness import ROOT
from trgrpo.runs import train as train_module


def zero_train(base: Path, config: Path, stage: int, *args: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "TRGRPO_CPU_PROCESSES": "2",
        "TRGRPO_CPU_ZERO": str(stage),
        "TRGRPO_CHECKPOINTS": str(base / "ckpt"),
        "EVAL_MARK": str(base / f"{config.stem}.eval"),
    }
    cmd = [sys.executable, "-m", "trgrpo", "train", "--config", str(config), "--results", str(base / "res"), *args]
    return subprocess.Popen(
        cmd, cwd=base, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


def record_of(base: Path, name: str) -> dict:
    return json.loads((base / "res" / "ranks" / f"{name}.json").read_text())


def test_a_zero3_run_on_two_cpu_processes_and_its_finished_restart(tiny_model_dir, tmp_path):
    """About 85 s on 2 cores (two 2-process launches), plus compiling DeepSpeed's comm op on first use."""
    cfg = write_config(tmp_path, tiny_model_dir, "zero3")
    proc = zero_train(tmp_path, cfg, 3)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-4000:]
    assert "accelerate.commands.launch" in out and "zero3.yaml --num_processes 2 --mixed_precision no" in out
    record = record_of(tmp_path, "zero3")
    assert record["engine"] == {"world_size": 2, "deepspeed_stage": 3} and record["steps_run"] == 2
    shards = sorted(p.name for p in (tmp_path / "ckpt" / "ranks" / "zero3").glob("checkpoint-2/global_step2/*"))
    assert [s for s in shards if s.startswith("zero_pp_rank_")] == [
        "zero_pp_rank_0_mp_rank_00_model_states.pt",
        "zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "zero_pp_rank_1_mp_rank_00_model_states.pt",
        "zero_pp_rank_1_mp_rank_00_optim_states.pt",
    ], shards  # each rank saved its own shard
    # ZeRO-3's HF generate gathers the sharded weights collectively: both ranks take part, one record is written
    assert sorted((tmp_path / "zero3.eval").read_text().split()) == ["0", "1"]
    refused = zero_train(tmp_path, cfg, 3, "--set", "steps=4")
    out, _ = refused.communicate(timeout=300)
    assert refused.returncode == 2 and "steps (2 stored, 4 now)" in out and "--force" in out, out[-3000:]
    (tmp_path / "res" / "ranks" / "zero3.json").unlink()  # killed during the final evaluation
    proc = zero_train(tmp_path, cfg, 3)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-4000:]
    again = record_of(tmp_path, "zero3")
    assert again["steps_run"] == 0 and again["resumed_from"].endswith("checkpoint-2")
    assert same_run(again) == same_run(record)  # evaluated only: the same record
    assert again["train_time_s"] <= record["train_time_s"]  # Table 8 counts training alone


@pytest.mark.slow  # ~3 min per stage on 2 cores
@pytest.mark.parametrize("stage", [2, 3])
def test_a_zero_run_killed_after_its_second_checkpoint_resumes_to_the_same_record(tiny_model_dir, tmp_path, stage):
    full = write_config(tmp_path, tiny_model_dir, f"full{stage}", steps=4)
    proc = zero_train(tmp_path, full, stage)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-4000:]
    cut = write_config(tmp_path, tiny_model_dir, f"cut{stage}", steps=4)
    proc = zero_train(tmp_path, cut, stage)
    ckpt = tmp_path / "ckpt" / "ranks" / f"cut{stage}"
    deadline = time.time() + 900
    while not (ckpt / "checkpoint-2" / "trgrpo_train_time.json").exists():  # the clock is the checkpoint's last file
        assert proc.poll() is None and time.time() < deadline, proc.communicate()[0][-4000:]
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)  # trgrpo train, accelerate launch and both ranks
    proc.wait()
    proc = zero_train(tmp_path, cut, stage)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-4000:]
    resumed = record_of(tmp_path, f"cut{stage}")
    assert resumed["resumed_from"] and same_run(resumed) == same_run(record_of(tmp_path, f"full{stage}"))


def test_the_zero_tier_says_what_it_needs_in_one_line(monkeypatch):
    monkeypatch.setenv("TRGRPO_CPU_ZERO", "4")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert train_module.cpu_zero(2) == (None, "TRGRPO_CPU_ZERO='4': 2 or 3, with TRGRPO_CPU_PROCESSES >= 2")
    monkeypatch.setenv("TRGRPO_CPU_ZERO", "3")
    assert train_module.cpu_zero(1)[1].startswith("TRGRPO_CPU_ZERO='3': 2 or 3, with TRGRPO_CPU_PROCESSES")
    monkeypatch.setattr(train_module.shutil, "which", lambda name: None)  # no C++ compiler
    assert "a C++ compiler for its CPU communication op (apt-get install -y g++)" in train_module.cpu_zero(2)[1]
    monkeypatch.undo()
    monkeypatch.setenv("TRGRPO_CPU_ZERO", "3")
    assert train_module.cpu_zero(2) == (3, None)
