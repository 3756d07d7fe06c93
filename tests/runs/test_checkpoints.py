"""Restarts that never get stuck or mix runs (issue "hardening" faults 1-4, issue "scale" defects 1-3): a record or a
checkpoint is reused only by the spec and engine that wrote it; an incomplete newest checkpoint is passed over; one
process per run; unwritable folders refused before training; a full disk said in one line, and the restart resumes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from transformers import TrainerCallback

from tests.runs.test_experiment import _evaluate, _reward, comparable, spec
from trgrpo import config
from trgrpo.files import write_json
from trgrpo.runs import checkpoints
from trgrpo.runs.experiment import run, run_pending
from trgrpo.runs.records import record_path, write_result
from trgrpo.runs.spec import RunSpec
from trgrpo.tasks import Task, register_task

ROOT = Path(__file__).resolve().parents[2]


def kk_config(tmp_path: Path, model, **kw) -> Path:
    """A one-run YAML for ``trgrpo train``: the K&K task on the tiny model (offline generator data)."""
    fields = dict(
        task="kk",
        model=str(model),
        scheme="tr",
        steps=1,
        prompts_per_step=2,
        num_generations=2,
        micro_batch_size=2,
        max_completion_length=4,
        n_train=4,
        n_eval=1,
        save_steps=1,
        task_options={"n_people": [2]},
        group="restart",
        name="kk",
    )
    fields.update(kw)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(fields))
    return path


def train_cli(config: Path, tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``trgrpo train --config ...`` as typed, its checkpoints under tmp_path/ckpt."""
    cmd = [sys.executable, "-m", "trgrpo", "train", "--config", str(config), "--results", str(tmp_path / "res"), *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRGRPO_CHECKPOINTS": str(tmp_path / "ckpt"), **(env or {})}
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # 23 s; test_torchrun refuses another spec through the CLI in the default tier
def test_a_changed_spec_is_refused_over_a_record_and_over_a_checkpoint(tiny_model_dir, tmp_path):
    """Scale 1: over a finished ``steps: 1`` run, ``--set steps=2`` said "1 already done" and exited 0 (old code)."""
    cfg = kk_config(tmp_path, tiny_model_dir)
    first = train_cli(cfg, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    record = tmp_path / "res" / "restart" / "kk.json"
    before = record.read_text()
    again = train_cli(cfg, tmp_path, "--set", "steps=2", "learning_rate=0.5")
    assert again.returncode == 2, again.stdout[-2000:] + again.stderr[-2000:]
    line = again.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "steps (1 stored, 2 now)" in line and "learning_rate" in line and "--force" in line
    assert record.read_text() == before
    same = train_cli(cfg, tmp_path, "--set", "report_to=none")  # bookkeeping only: the same run, already done
    assert same.returncode == 0 and "1 already done" in same.stdout
    record.unlink()  # killed during its final evaluation: the checkpoint is left, with the spec that trained it
    spec_json = tmp_path / "ckpt" / "restart" / "kk" / "spec.json"
    trained_with = spec_json.read_text()
    again = train_cli(cfg, tmp_path, "--set", "scheme=equal")
    assert again.returncode == 2 and "scheme ('tr' stored, 'equal' now)" in again.stderr
    assert str(tmp_path / "ckpt" / "restart" / "kk") in again.stderr and not record.exists()
    assert spec_json.read_text() == trained_with  # never overwritten


def test_a_broken_record_of_the_run_is_named_in_one_line(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """A record cut short where the run's record lies: ``train`` stops in one line naming the file (old code: a
    RecordError traceback from the "already done" check), and leaves the file as it was."""
    from trgrpo.runs.train import main

    record = tmp_path / "res" / "restart" / "kk.json"
    record.parent.mkdir(parents=True)
    record.write_text('{"kind": "run", "scheme": "tr", "fin')
    monkeypatch.setattr(checkpoints, "CHECKPOINT_DIR", tmp_path / "ckpt")
    rc = main(["--config", str(kk_config(tmp_path, tiny_model_dir)), "--results", str(tmp_path / "res")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and f"{record}: not valid JSON" in err, err
    assert record.read_text() == '{"kind": "run", "scheme": "tr", "fin'


@pytest.fixture(scope="module")
def uninterrupted(tiny_model_dir, tmp_path_factory):
    """The record of an uninterrupted 2-step run that saves every step."""
    base = tmp_path_factory.mktemp("uninterrupted")
    return run(two_steps(tiny_model_dir, "full"), results_dir=base / "res", checkpoint_dir=base / "ckpt", verbose=False)


def two_steps(model, name):
    return spec(model, name, steps=2, save_steps=1)


def test_a_half_written_trainer_state_is_passed_over(tiny_model_dir, tmp_path, capsys, uninterrupted):
    """Fault 1: the newest checkpoint's trainer_state.json cut short (a kill while it was written): the restart
    resumes from the previous checkpoint, says so, and ends with the uninterrupted run's record (old code:
    JSONDecodeError on every restart)."""
    res, ck = tmp_path / "results", tmp_path / "ckpt"
    with pytest.raises(RuntimeError, match="simulated crash"):
        run(two_steps(tiny_model_dir, "cut"), results_dir=res, checkpoint_dir=ck, callbacks=[Crash(2)], verbose=False)
    folder = ck / "unit" / "cut"
    shutil.copytree(folder / "checkpoint-1", folder / "checkpoint-2")  # the newer one, its state half written
    state = folder / "checkpoint-2" / "trainer_state.json"
    state.write_text(state.read_text()[:40])
    log = StepLog()
    capsys.readouterr()
    resumed = run(two_steps(tiny_model_dir, "cut"), results_dir=res, checkpoint_dir=ck, callbacks=[log])
    assert "checkpoint-2 is incomplete (trainer_state.json" in capsys.readouterr().out
    assert resumed["resumed_from"].endswith("checkpoint-1") and log.steps == [2]
    assert comparable(resumed) == pytest.approx(comparable(uninterrupted), rel=1e-6)


@pytest.mark.slow  # about 13 s on 2 cores; the read-only half of fault 4 is in the default tier
def test_a_full_disk_is_said_and_the_restart_resumes(tiny_model_dir, tmp_path, monkeypatch, uninterrupted):
    """Fault 4: torch's zip writer out of space ("unexpected pos") while a checkpoint is saved: one "disk full" error
    naming the folder and the space a checkpoint needs; once space is back, the restart passes over the cut
    checkpoint and ends with the uninterrupted run's record."""
    res, ck = tmp_path / "results", tmp_path / "ckpt"
    real_save = torch.save

    def full_disk(obj, f, *a, **kw):
        if str(f).endswith("optimizer.pt") and "checkpoint-2" in str(f):
            Path(f).write_bytes(b"PK\x03\x04 cut")
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 4096 vs 1234")
        return real_save(obj, f, *a, **kw)

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(checkpoints.DiskFull, match=r"disk full .*unit/cut: a checkpoint needs about [0-9.]+ GB"):
        run(two_steps(tiny_model_dir, "cut"), results_dir=res, checkpoint_dir=ck, verbose=False)
    monkeypatch.setattr(torch, "save", real_save)
    log = StepLog()
    again = run(two_steps(tiny_model_dir, "cut"), results_dir=res, checkpoint_dir=ck, callbacks=[log], verbose=False)
    assert again["resumed_from"].endswith("checkpoint-1") and log.steps == [2]
    assert comparable(again) == pytest.approx(comparable(uninterrupted), rel=1e-6)


def test_a_second_process_on_a_running_run_is_refused(tiny_model_dir, tmp_path):
    """Fault 3: the run's lock is held (here by this test's process): the second process stops in one line naming
    the running process's pid, exit 2, before training."""
    cfg = kk_config(tmp_path, tiny_model_dir)
    with checkpoints.run_lock(tmp_path / "ckpt" / "restart" / "kk"):
        second = train_cli(cfg, tmp_path)
    assert second.returncode == 2, second.stderr[-2000:]
    assert f"restart/kk is running in another process (pid {os.getpid()})" in second.stderr
    assert not (tmp_path / "res").exists() and not (tmp_path / "ckpt" / "restart" / "kk").exists()


def test_an_unwritable_results_folder_is_refused_before_training(tiny_model_dir, tmp_path):
    """Fault 4: a read-only results folder (/sys is read-only) is found before any training: one line, exit 2."""
    cfg = kk_config(tmp_path, tiny_model_dir)
    cmd = [sys.executable, "-m", "trgrpo", "train", "--config", str(cfg), "--results", "/sys/trgrpo-results"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRGRPO_CHECKPOINTS": str(tmp_path / "ckpt")}
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "/sys/trgrpo-results is not writable" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and not (tmp_path / "ckpt").exists()


def test_spec_json_keeps_the_spec_and_engine_a_checkpoint_was_trained_with(tiny_model_dir, tmp_path):
    """Scale 3: the engine is part of a run's identity: a checkpoint folder written on 1 process is refused on 2."""
    s = spec(tiny_model_dir, "eng", steps=1)
    folder = checkpoints.checkpoint_folder(s, tmp_path)
    folder.mkdir(parents=True)
    one = {"world_size": 1, "deepspeed_stage": None}
    (folder / "spec.json").write_text(json.dumps({"spec": s.model_dump(), "engine": one}))
    checkpoints.check_run_folders(s, one, tmp_path)  # the same run: no refusal
    with pytest.raises(config.ConfigError, match=r"engine.world_size \(1 stored, 2 now\)"):
        checkpoints.check_run_folders(s, {"world_size": 2, "deepspeed_stage": None}, tmp_path)
    with pytest.raises(config.ConfigError, match=r"engine.deepspeed_stage \(None stored, 3 now\)"):
        checkpoints.check_run_folders(s, {"world_size": 1, "deepspeed_stage": 3}, tmp_path)


def test_a_finished_run_restarts_through_train_when_parameters_are_placeholders(tiny_model_dir, tmp_path, monkeypatch):
    """Scale 2: under ZeRO-3 the model is loaded partitioned (every parameter a 0-element placeholder) and only
    the engine, inside ``train()``, holds the weights. Emulated: placeholders until ``train()`` starts. The old
    finished-run path loaded the checkpoint into the model before ``train()`` (transformers' size mismatch on every
    restart); through ``train(resume_from_checkpoint=...)`` the restart evaluates, with no step and the record of
    the uninterrupted run, and its seconds_per_step is the training's, not the reload's."""
    from transformers import Trainer

    res, ck = tmp_path / "results", tmp_path / "ckpt"
    full = run(spec(tiny_model_dir, "z3", steps=2), results_dir=res, checkpoint_dir=ck, verbose=False)
    (res / "unit" / "z3.json").unlink()  # killed during the final evaluation
    real = {}

    def partition(trainer, records):
        for name, p in trainer.model.named_parameters():
            real[name] = p.data
            p.data = torch.empty(0)

    real_train = Trainer.train

    def engine_train(self, *a, **kw):  # the engine gathers its partitions when training starts
        for name, p in self.model.named_parameters():
            p.data = real[name]
        return real_train(self, *a, **kw)

    monkeypatch.setattr(Trainer, "train", engine_train)
    log = StepLog()
    again = run(
        spec(tiny_model_dir, "z3", steps=2),
        results_dir=res,
        checkpoint_dir=ck,
        callbacks=[log],
        trainer_ready=partition,
        verbose=False,
    )
    assert log.steps == [] and again["resumed_from"].endswith("checkpoint-2")
    assert comparable(again) == comparable(full)
    assert again["final"]["loglik"] == pytest.approx(full["final"]["loglik"], rel=1e-6)
    assert again["seconds_per_step"] >= 0.5 * full["seconds_per_step"]  # not the reload's ~0
    assert again["train_time_s"] >= 0.5 * full["train_time_s"]


def test_the_planners_memory_fixes_are_the_same_run(tiny_model_dir, tmp_path):
    """Issue "engines" (2): `--set gradient_checkpointing=true vllm_gpu_memory_utilization=0.25 micro_batch_size=...`,
    the planner's out-of-memory fixes, were refused as "another spec" (old code: ConfigError), so an OOM fix restarted
    the run from step 0. They change memory, not what is learned: the run resumes and the record lists them."""
    trained = spec(tiny_model_dir, "oom", micro_batch_size=4)
    folder = checkpoints.checkpoint_folder(trained, tmp_path)
    folder.mkdir(parents=True)
    (folder / "spec.json").write_text(json.dumps({"spec": trained.model_dump(), "engine": checkpoints.engine()}))
    fixed = trained.replace(gradient_checkpointing=True, vllm_gpu_memory_utilization=0.25, micro_batch_size=2)
    checkpoints.check_run_folders(fixed, checkpoints.engine(), tmp_path)  # no ConfigError: the same run
    assert checkpoints.memory_changes(fixed, tmp_path) == {
        "gradient_checkpointing": [False, True],
        "vllm_gpu_memory_utilization": [trained.vllm_gpu_memory_utilization, 0.25],
        "micro_batch_size": [4, 2],
    }
    with pytest.raises(config.ConfigError, match=r"learning_rate \(0.005 stored, 0.01 now\)"):
        checkpoints.check_run_folders(fixed.replace(learning_rate=0.01), checkpoints.engine(), tmp_path)


@pytest.mark.slow  # ~20 s: a killed run, then its restart with the planner's memory fixes
def test_a_killed_run_resumes_with_the_planners_memory_fixes(tiny_model_dir, tmp_path):
    res, ck = tmp_path / "results", tmp_path / "ckpt"
    with pytest.raises(RuntimeError, match="simulated crash"):
        run(spec(tiny_model_dir, "oom"), results_dir=res, checkpoint_dir=ck, callbacks=[Crash(3)], verbose=False)
    fixed = spec(tiny_model_dir, "oom", gradient_checkpointing=True, vllm_gpu_memory_utilization=0.25)
    rec = run(fixed, results_dir=res, checkpoint_dir=ck, verbose=False)
    assert rec["resumed_from"] and rec["resumed_from"].endswith("checkpoint-2"), rec["resumed_from"]
    assert rec["changed_on_resume"] == {
        "gradient_checkpointing": [False, True],
        "vllm_gpu_memory_utilization": [0.5, 0.25],
    }
    assert [h["step"] for h in rec["history"]][-2:] == [3, 4]


@pytest.mark.slow  # 33 s on 2 cores; the handler itself is in the default tier (test_layout's one-command test)
def test_ctrl_c_is_one_line_and_exit_130_and_the_run_resumes(tiny_model_dir, tmp_path):
    """Issue "faults" (2): Ctrl-C ended `trgrpo train` with exit 1 and a ~30-frame KeyboardInterrupt traceback. Now
    one line saying how the run resumes, exit 130 (the shell's code for SIGINT); the restart resumes."""
    import signal
    import time

    cfg = kk_config(tmp_path, tiny_model_dir, steps=40)
    cmd = [sys.executable, "-m", "trgrpo", "train", "--config", str(cfg), "--results", str(tmp_path / "res")]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRGRPO_CHECKPOINTS": str(tmp_path / "ckpt")}
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not list((tmp_path / "ckpt" / "restart" / "kk").glob("checkpoint-*/trgrpo_train_time.json")):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    said = "trgrpo train: interrupted (Ctrl-C); run the same command again: a run resumes from its last complete "
    said += "checkpoint"
    assert "Traceback" not in err and said in err.splitlines(), err[-3000:]  # (tqdm redraws its bar after it)
    again = train_cli(cfg, tmp_path, "--set", "steps=2")  # a shorter run of the same spec is another spec
    assert again.returncode == 2 and "steps (40 stored, 2 now)" in again.stderr


def test_no_rmtree_outside_the_checkpoints_root_even_for_a_reassigned_spec(tmp_path):
    outside = tmp_path / "precious"
    outside.mkdir()
    spec = RunSpec(group="g", name="n")
    spec.group = str(outside)  # a dataclass field reassigned after the spec was checked
    with pytest.raises(ValueError, match="group"):
        checkpoints.checkpoint_folder(spec, tmp_path / "ckpt")
    with pytest.raises(ValueError, match="group"):
        write_result(spec.group, spec.name, {"kind": "note"}, tmp_path / "res")
    assert outside.exists() and not (tmp_path / "res").exists()


class Crash(TrainerCallback):
    """Simulates a killed job right after ``at`` optimizer steps."""

    def __init__(self, at):
        self.at = at

    def on_step_end(self, args, state, control, **kw):
        if state.global_step == self.at:
            raise RuntimeError("simulated crash")


class StepLog(TrainerCallback):
    """The optimizer steps a run makes (after a resume: only the remaining ones)."""

    def __init__(self):
        self.steps = []

    def on_step_end(self, args, state, control, **kw):
        self.steps.append(state.global_step)


def test_killed_run_resumes_to_the_same_metrics(tiny_model_dir, tmp_path):
    res, ck = tmp_path / "results", tmp_path / "ckpt"
    full = run(spec(tiny_model_dir, "full"), results_dir=res, checkpoint_dir=ck, verbose=False)
    with pytest.raises(RuntimeError, match="simulated crash"):
        run(spec(tiny_model_dir, "killed"), results_dir=res, checkpoint_dir=ck, callbacks=[Crash(3)], verbose=False)
    assert (ck / "unit" / "killed" / "checkpoint-2").exists()
    # only the last checkpoint is kept (save_total_limit=1): resuming needs no more
    assert sorted(p.name for p in (ck / "unit" / "full").glob("checkpoint-*")) == ["checkpoint-4"]
    steps_run = StepLog()
    resumed = run(
        spec(tiny_model_dir, "killed"), results_dir=res, checkpoint_dir=ck, callbacks=[steps_run], verbose=False
    )
    assert resumed["resumed_from"].endswith("checkpoint-2")
    # only the remaining steps ran: a deterministic rerun from step 0 gives the same metrics, this tells them apart
    assert steps_run.steps == [3, 4]
    assert comparable(resumed) == pytest.approx(comparable(full), rel=1e-6)
    assert resumed["final"]["loglik"] == pytest.approx(full["final"]["loglik"], rel=1e-6)


def test_run_pending_runs_the_specs_without_a_record_in_order(tmp_path):
    """The one loop over runs: a spec with a record at record_path is skipped (unless force), the rest run in order."""
    specs = [RunSpec(task="kk", group="g/h", name=n) for n in ("a", "b", "c")]
    assert record_path("g/h", "b", tmp_path) == tmp_path / "g" / "h" / "b.json"
    write_json(record_path("g/h", "b", tmp_path), {"kind": "note"})
    ran = []
    assert run_pending(specs, lambda s: ran.append(s.name), results_dir=tmp_path, disable=True) == [specs[0], specs[2]]
    assert ran == ["a", "c"]
    assert run_pending(specs, lambda s: None, results_dir=tmp_path, force=True, disable=True) == specs
    with pytest.raises(ValueError, match="name must be"):
        record_path("g", "../x", tmp_path)


@pytest.mark.slow  # two tiny runs (20 s on 2 cores): make test-slow, for make test's budget
def test_launch_can_drop_checkpoints_of_finished_runs(tiny_model_dir, tmp_path, monkeypatch):
    """Smoke runs of notebooks 05/06 pass keep_checkpoints=False: a finished run leaves its result, no checkpoint."""
    from trgrpo.runs import fullscale

    monkeypatch.setattr(checkpoints, "CHECKPOINT_DIR", tmp_path / "ckpt")
    specs = [spec(tiny_model_dir, "dropped", steps=2), spec(tiny_model_dir, "kept", steps=2)]
    fullscale.launch(specs[:1], gpus=0, results_dir=tmp_path / "res", keep_checkpoints=False)
    fullscale.launch(specs[1:], gpus=0, results_dir=tmp_path / "res")
    assert (tmp_path / "res" / "unit" / "dropped.json").exists()
    assert not (tmp_path / "ckpt" / "unit" / "dropped").exists()
    assert (tmp_path / "ckpt" / "unit" / "kept" / "checkpoint-2").exists()


def test_a_finished_run_started_again_only_evaluates_and_resume_false_starts_from_scratch(tiny_model_dir, tmp_path):
    """Issue 24, item 1: a run killed during its final evaluation (its last checkpoint is its last step) goes straight
    to evaluation on restart: no extra step, the record of an uninterrupted run. ``resume=False`` (``--force``) clears
    the run's checkpoints and trains from step 1."""
    res, ck = tmp_path / "results", tmp_path / "ckpt"
    full = run(spec(tiny_model_dir, "done", steps=2), results_dir=res, checkpoint_dir=ck, verbose=False)
    (res / "unit" / "done.json").unlink()  # killed during the final evaluation: checkpoint-2, no record
    log = StepLog()
    again = run(
        spec(tiny_model_dir, "done", steps=2), results_dir=res, checkpoint_dir=ck, callbacks=[log], verbose=False
    )
    assert log.steps == []
    assert again["resumed_from"].endswith("checkpoint-2")
    assert comparable(again) == comparable(full) and len(again["history"]) == 2
    assert again["final"]["loglik"] == pytest.approx(full["final"]["loglik"], rel=1e-6)
    stale = ck / "unit" / "done" / "checkpoint-7"  # a checkpoint of an older, longer run of the same name
    stale.mkdir()
    (stale / "trainer_state.json").write_text("{}")
    log = StepLog()
    fresh = run(
        spec(tiny_model_dir, "done", steps=2),
        results_dir=res,
        checkpoint_dir=ck,
        callbacks=[log],
        verbose=False,
        resume=False,
    )
    assert log.steps == [1, 2] and fresh["resumed_from"] is None
    assert sorted(p.name for p in (ck / "unit" / "done").glob("checkpoint-*")) == ["checkpoint-2"]
    assert comparable(fresh) == comparable(full)


def test_checkpoints_of_another_spec_or_of_no_known_spec_are_refused(tiny_model_dir, tmp_path):
    """A checkpoint folder is resumed only by the spec (and engine) that wrote it: steps 9 there, 2 asked: refused,
    nothing written; checkpoints without their spec.json: refused too."""
    ck = tmp_path / "ckpt"
    folder = ck / "unit" / "short"
    (folder / "checkpoint-9").mkdir(parents=True)
    (folder / "checkpoint-9" / "trainer_state.json").write_text("{}")
    with pytest.raises(ValueError, match="without spec.json"):
        run(spec(tiny_model_dir, "short", steps=2), results_dir=tmp_path / "res", checkpoint_dir=ck, verbose=False)
    longer = spec(tiny_model_dir, "short", steps=9).model_dump()
    (folder / "spec.json").write_text(
        json.dumps({"spec": longer, "engine": {"world_size": 1, "deepspeed_stage": None}})
    )
    with pytest.raises(ValueError, match=r"steps \(9 stored, 2 now\).*--force"):
        run(spec(tiny_model_dir, "short", steps=2), results_dir=tmp_path / "res", checkpoint_dir=ck, verbose=False)
    assert not (tmp_path / "res").exists() and sorted(p.name for p in folder.iterdir()) == ["checkpoint-9", "spec.json"]


def _missing_data(spec, tokenizer):
    raise FileNotFoundError("data/nowhere.parquet")


register_task("unit-missing-data", Task(_missing_data, lambda spec: [_reward], _evaluate))


def test_a_run_whose_data_fails_leaves_no_checkpoint_folder(tiny_model_dir, tmp_path):
    """Issue 24, minor: the spec.json of a run that never started is not left behind."""
    with pytest.raises(FileNotFoundError, match="nowhere"):
        run(
            spec(tiny_model_dir, "nodata", task="unit-missing-data"),
            results_dir=tmp_path / "res",
            checkpoint_dir=tmp_path / "ckpt",
            verbose=False,
        )
    assert not (tmp_path / "ckpt").exists() and not (tmp_path / "res").exists()


def test_a_finished_restart_keeps_the_training_time_and_peak_memory(tiny_model_dir, tmp_path):
    """Issue "engines" (5): the run's clock started before the trainer was built, so a restarted run counted model
    loading, set-up and evaluation as training (Table 8's seconds per step, 1.06 -> 3.33 s on ZeRO-2), and a finished
    restart recorded its evaluation process's peak memory as training's. The clock runs from train's first step to
    its last; a restart that only evaluates keeps the time and the peak memory its checkpoint saved."""
    res, ck = tmp_path / "results", tmp_path / "ckpt"
    first = run(spec(tiny_model_dir, "clock", steps=2, save_steps=2), results_dir=res, checkpoint_dir=ck, verbose=False)
    saved = json.loads((ck / "unit" / "clock" / "checkpoint-2" / "trgrpo_train_time.json").read_text())
    assert 0 < saved["train_time_s"] <= first["train_time_s"] and saved["peak_memory"]["rss_peak_mb"] > 0
    (res / "unit" / "clock.json").unlink()  # killed during its final evaluation: the restart evaluates only
    again = run(spec(tiny_model_dir, "clock", steps=2, save_steps=2), results_dir=res, checkpoint_dir=ck, verbose=False)
    assert again["steps_run"] == 0 and again["resumed_from"].endswith("checkpoint-2")
    assert again["train_time_s"] == saved["train_time_s"]  # old code: + the restart's model loading and set-up
    assert again["peak_memory"] == saved["peak_memory"]


def _no_space(monkeypatch, suffix: str) -> None:
    """Every write of a file ending in ``suffix`` fails as a full disk does (ENOSPC)."""
    import errno

    real = Path.write_text

    def full(self, *a, **kw):
        if str(self).endswith(suffix):
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real(self, *a, **kw)

    monkeypatch.setattr(Path, "write_text", full)


def test_a_restart_on_a_full_disk_is_one_line_from_the_pid_file(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """Issue 48, item 1: run_lock writing its pid file on a full checkpoint disk was an OSError traceback
    (experiment.py); now one line naming the file, exit 1, the lock let go and nothing left behind."""
    from trgrpo.runs import train

    _no_space(monkeypatch, ".pid")
    out_dir = tmp_path / "ckpt" / "restart" / "kk"
    with pytest.raises(checkpoints.DiskFull, match=rf"disk full writing {out_dir}.pid \([0-9.]+ GB free\); free"):
        with checkpoints.run_lock(out_dir):
            pass
    assert not (tmp_path / "ckpt").exists()
    monkeypatch.setattr(checkpoints, "CHECKPOINT_DIR", tmp_path / "ckpt")
    capsys.readouterr()
    assert train.main(["--config", str(kk_config(tmp_path, tiny_model_dir)), "--results", str(tmp_path / "res")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: disk full writing {out_dir}.pid"), err
    assert "resumes from its last complete checkpoint" in err[0]
    assert not (tmp_path / "ckpt").exists() and not (tmp_path / "res").exists()


@pytest.mark.slow  # two tiny runs, ~10 s on 2 cores
def test_a_full_results_disk_is_one_line_and_the_restart_only_evaluates(tiny_model_dir, tmp_path, monkeypatch):
    """Issue 48, item 1: every step trained, then write_json's ``OSError: [Errno 28]`` as a traceback; now a
    DiskFull naming the record (train: one line, exit 1), and the restart evaluates the last checkpoint only."""
    import errno
    import os as os_module

    res, ck = tmp_path / "results", tmp_path / "ckpt"
    real = os_module.fsync

    def full(fd):
        if str(res) in os_module.readlink(f"/proc/self/fd/{fd}"):  # the record's temporary file
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)

    monkeypatch.setattr(os_module, "fsync", full)
    target = record_path("unit", "full", res)
    with pytest.raises(checkpoints.DiskFull, match=rf"disk full writing {target} \([0-9.]+ GB free\); free space"):
        run(two_steps(tiny_model_dir, "full"), results_dir=res, checkpoint_dir=ck, verbose=False)
    assert not target.exists() and not list(target.parent.glob("*.tmp"))
    monkeypatch.setattr(os_module, "fsync", real)
    log = StepLog()
    again = run(two_steps(tiny_model_dir, "full"), results_dir=res, checkpoint_dir=ck, callbacks=[log], verbose=False)
    assert log.steps == [] and again["resumed_from"].endswith("checkpoint-2") and target.exists()
