"""Resume that is really tested (issue "trust", finding 5): a run killed with SIGKILL after a checkpoint exists is
started again, only the remaining steps run, and it ends with the metrics of an uninterrupted run. The same check
fails when resuming is disabled (a deterministic rerun from step 0 gives the same numbers, so the step count is what
tells them apart)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from transformers import Trainer, TrainerCallback

from trgrpo.runs.experiment import run

from .test_experiment import comparable, spec

# Slow: two training processes and a resume (about 3 minutes on a loaded 2-core machine). The default run keeps
# the faster in-process variant (tests/test_experiment.py: a crash callback, the same step-count check).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
STEPS = 4

CHILD = f"""
import pathlib, sys, time
from transformers import TrainerCallback
from tests.test_experiment import spec
from trgrpo.runs.experiment import run

model, results, checkpoints, marker = sys.argv[1:5]


class Hang(TrainerCallback):
    def on_step_end(self, args, state, control, **kw):
        if state.global_step == 3:  # checkpoint-2 is on disk; wait here to be killed
            pathlib.Path(marker).write_text("3")
            time.sleep(600)


spec = spec(model, "killed", steps={STEPS})
run(spec, results_dir=results, checkpoint_dir=checkpoints, callbacks=[Hang()], verbose=False)
"""


class StepLog(TrainerCallback):
    def __init__(self):
        self.steps: list[int] = []

    def on_step_end(self, args, state, control, **kw):
        self.steps.append(state.global_step)


@pytest.fixture(scope="module")
def killed_and_full(tiny_model_dir, tmp_path_factory):
    """An uninterrupted run, and a run killed with SIGKILL in its third step (checkpoint-2 saved)."""
    base = tmp_path_factory.mktemp("resume")
    res, ck, marker = base / "results", base / "ckpt", base / "marker"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tiny_model_dir), str(res), str(ck), str(marker)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        # the uninterrupted run in this process meanwhile (same spec, another name)
        full = run(spec(tiny_model_dir, "full", steps=STEPS), results_dir=res, checkpoint_dir=ck, verbose=False)
        deadline = time.time() + 300
        while not marker.exists():
            assert child.poll() is None, child.stderr.read().decode()[-3000:]
            assert time.time() < deadline, "the child never reached step 3"
            time.sleep(0.2)
        assert (ck / "unit" / "killed" / "checkpoint-2" / "trainer_state.json").exists()
        child.send_signal(signal.SIGKILL)
        assert child.wait(60) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert not (res / "unit" / "killed.json").exists()  # it never finished
    spare = base / "spare"
    shutil.copytree(ck / "unit" / "killed", spare / "unit" / "killed")  # for the resume-disabled check
    return full, res, ck, spare


def resume_and_check(model_dir, results, checkpoints, full) -> None:
    log = StepLog()
    resumed = run(
        spec(model_dir, "killed", steps=STEPS),
        results_dir=results,
        checkpoint_dir=checkpoints,
        callbacks=[log],
        verbose=False,
    )
    assert resumed["resumed_from"].endswith("checkpoint-2")
    assert log.steps == [3, 4], f"steps run after the restart: {log.steps}"  # only the remaining steps ran
    assert comparable(resumed) == pytest.approx(comparable(full), rel=1e-6)
    assert resumed["final"]["loglik"] == pytest.approx(full["final"]["loglik"], rel=1e-6)


def test_a_killed_run_resumes_with_only_the_remaining_steps(tiny_model_dir, killed_and_full):
    full, res, ck, _ = killed_and_full
    resume_and_check(tiny_model_dir, res, ck, full)


def test_the_check_fails_when_resume_is_disabled(tiny_model_dir, killed_and_full, monkeypatch, tmp_path):
    full, _, _, spare = killed_and_full
    real_train = Trainer.train

    def train_from_scratch(self, resume_from_checkpoint=None, *args, **kwargs):
        return real_train(self, None, *args, **kwargs)

    monkeypatch.setattr(Trainer, "train", train_from_scratch)
    with pytest.raises(AssertionError, match="steps run after the restart"):
        resume_and_check(tiny_model_dir, tmp_path / "results", spare, full)
