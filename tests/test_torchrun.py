"""The several-process CPU tier (issue "scale"): ``trgrpo train``, the GPU path's entry point, with each
run under ``torchrun --nproc_per_node 2`` on CPU (gloo) by ``TRGRPO_CPU_PROCESSES=2`` (docs/gpu.md). A finished
2-process run started again only evaluates (same record), evaluation runs on the main process while the other rank
waits, a spec changed by ``--set`` is refused; in the slow tier, a run killed with SIGKILL after a checkpoint and
started again ends with the record of an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

# A task in a .py file beside the config (field `imports`): rewards that vary (so steps change the weights), an
# evaluation that fingerprints the final weights and notes the rank it ran on, a reward that hangs when told to.
TASK = """
import os, time
from pathlib import Path

import torch
from datasets import Dataset

from trgrpo.tasks import Task, register_task

CALLS = []


def build(spec, tokenizer):
    return Dataset.from_dict({"prompt": [f"Count to {i}:" for i in range(16)]}), ["Count to 3: 1 2 3"]


def reward(completions, completion_ids, **kwargs):
    CALLS.append(1)
    if len(CALLS) == int(os.environ.get("HANG_AT_CALL", "0")):  # checkpoint-1 is on disk: wait to be killed
        Path(os.environ["HANG_MARK"], os.environ["RANK"]).write_text(str(os.getpid()))
        time.sleep(600)
    return [float(sum(ids) % 5) for ids in completion_ids]


def evaluate(model, tokenizer, records, spec):
    with open(os.environ["EVAL_MARK"], "a") as fh:
        fh.write(os.environ.get("RANK", "?") + "\\n")
    ids = tokenizer(records[0], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        return {"accuracy": None, "loglik": float(-model(input_ids=ids, labels=ids).loss)}  # accuracy: a share


register_task("ranks-test", Task(build, lambda spec: [reward], evaluate))
"""

TIMING = ("step_time", "train_runtime", "train_samples_per_second", "train_steps_per_second")


def write_config(folder: Path, model, name: str, **kw) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ranks_task.py").write_text(TASK)
    fields = dict(
        task="ranks-test",
        model=str(model),
        scheme="tr",
        seed=1,
        steps=2,
        prompts_per_step=2,
        num_generations=2,
        micro_batch_size=1,
        max_completion_length=4,
        learning_rate=5e-3,
        n_train=16,
        n_eval=1,
        save_steps=1,
        group="ranks",
        name=name,
    )
    fields.update(kw)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"imports": ["ranks_task.py"], **fields}))
    return path


def train(base: Path, config: Path, *args: str, hang_at: int = 0) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "TRGRPO_CPU_PROCESSES": "2",
        "TRGRPO_CHECKPOINTS": str(base / "ckpt"),
        "EVAL_MARK": str(base / f"{config.stem}.eval"),
        "HANG_AT_CALL": str(hang_at),
        "HANG_MARK": str(base / "hang"),
    }
    cmd = [sys.executable, "-m", "trgrpo", "train", "--config", str(config), "--results", str(base / "res"), *args]
    return subprocess.Popen(
        cmd, cwd=base, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


def finish(proc: subprocess.Popen, timeout: float = 400) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def same_run(record: dict) -> tuple:
    history = [{k: v for k, v in h.items() if k not in TIMING} for h in record["history"]]
    return history, record["final"]


@pytest.fixture(scope="module")
def finished(tiny_model_dir, tmp_path_factory):
    base = tmp_path_factory.mktemp("torchrun")
    cfg = write_config(base, tiny_model_dir, "full")
    code, out = finish(train(base, cfg))
    assert code == 0, out[-4000:]
    return base, cfg, json.loads((base / "res" / "ranks" / "full.json").read_text())


def test_a_two_process_run_evaluates_on_the_main_process_and_is_refused_with_another_spec(finished):
    base, cfg, record = finished
    assert record["engine"] == {"world_size": 2, "deepspeed_stage": None} and record["batch"]["world_size"] == 2
    assert len(record["history"]) == 2 and record["steps_run"] == 2
    assert (base / "full.eval").read_text().split() == ["0"]  # rank 1 waited
    code, out = finish(train(base, cfg, "--set", "steps=4"))
    assert code == 2 and "steps (2 stored, 4 now)" in out and "--force" in out, out[-3000:]


@pytest.mark.slow  # a second 2-process start (about a minute): make test-slow
def test_a_finished_two_process_run_started_again_only_evaluates(finished):
    base, cfg, record = finished
    path = base / "res" / "ranks" / "full.json"
    path.rename(base / "full.first.json")  # killed during the final evaluation: checkpoint-2, no record
    code, out = finish(train(base, cfg))
    assert code == 0, out[-4000:]
    again = json.loads(path.read_text())
    assert again["resumed_from"].endswith("checkpoint-2") and again["steps_run"] == 0
    assert same_run(again) == same_run(record)
    assert again["seconds_per_step"] >= 0.5 * record["seconds_per_step"]  # the training's, not the reload's


@pytest.mark.slow  # two more 2-process runs: about 80 s on 2 cores
def test_a_killed_two_process_run_restarts_to_the_uninterrupted_record(finished):
    base, _, record = finished
    cfg = write_config(base, record["model"], "killed")
    proc = train(base, cfg, hang_at=2)  # each rank's second reward call: step 2, checkpoint-1 saved
    deadline = time.time() + 300
    (base / "hang").mkdir()
    while len(list((base / "hang").iterdir())) < 2:
        assert proc.poll() is None, proc.communicate()[0][-4000:]
        assert time.time() < deadline, "the run never reached step 2"
        time.sleep(0.2)
    time.sleep(0.5)  # both pids written
    for rank in (base / "hang").iterdir():  # torchrun starts its workers in sessions of their own
        os.kill(int(rank.read_text()), signal.SIGKILL)
    os.killpg(proc.pid, signal.SIGKILL)  # trgrpo train and torchrun
    proc.wait(60)
    assert not (base / "res" / "ranks" / "killed.json").exists()
    code, out = finish(train(base, cfg))
    assert code == 0, out[-4000:]
    resumed = json.loads((base / "res" / "ranks" / "killed.json").read_text())
    assert resumed["resumed_from"].endswith("checkpoint-1") and resumed["steps_run"] == 1
    assert same_run(resumed) == same_run(record)
