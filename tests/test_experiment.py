"""trgrpo.runs.experiment: a run writes its record; a killed run resumes to the same metrics (App. B.2
checkpoints)."""

import json

import pytest
import torch
from datasets import Dataset
from transformers import TrainerCallback

from trgrpo.files import write_json
from trgrpo.runs import checkpoints
from trgrpo.runs.experiment import run, run_pending
from trgrpo.runs.records import load_results, record_path
from trgrpo.runs.spec import RunSpec
from trgrpo.tasks import Task, register_task

PROMPTS = [f"Count to {i}:" for i in range(16)]


def _build(spec, tokenizer):
    return Dataset.from_dict({"prompt": PROMPTS}), ["Count to 3: 1 2 3"]


def _reward(completions, completion_ids, **kwargs):
    return [float(sum(ids) % 5) for ids in completion_ids]


def _evaluate(model, tokenizer, records, spec):
    """Mean log-likelihood of a fixed text: a deterministic fingerprint of the final weights."""
    ids = tokenizer(records[0], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model(input_ids=ids, labels=ids)
    return {"accuracy": None, "loglik": float(-out.loss)}  # an accuracy is a share in [0, 1] (record schema)


register_task("unit-test", Task(_build, lambda spec: [_reward], _evaluate))


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


def spec(tiny_model_dir, name, **kw):
    base = dict(
        task="unit-test",
        model=tiny_model_dir,
        scheme="random",
        seed=3,
        steps=4,
        prompts_per_step=2,
        num_generations=4,
        max_completion_length=8,
        learning_rate=5e-3,
        beta=0.04,
        n_train=16,
        n_eval=1,
        save_steps=2,
        group="unit",
        name=name,
    )
    base.update(kw)
    return RunSpec(**base)


def comparable(record):
    keys = ("step", "reward", "loss", "grad_norm", "tr/weight_mean")
    return [h[k] for h in record["history"] for k in keys]


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


def test_record_schema_and_same_seed_same_result(tiny_model_dir, tmp_path):
    res, ck = tmp_path / "results", tmp_path / "ckpt"
    a = run(spec(tiny_model_dir, "a", steps=2, scheme="tr"), results_dir=res, checkpoint_dir=ck, verbose=False)
    b = run(
        spec(tiny_model_dir, "b", steps=2, scheme="tr"),
        results_dir=res,
        checkpoint_dir=ck,
        verbose=False,
        keep_checkpoints=False,
    )
    assert comparable(a) == comparable(b)
    on_disk = json.loads((res / "unit" / "a.json").read_text())
    for key in (
        "scheme",
        "seed",
        "model",
        "steps",
        "history",
        "final",
        "wall_time_s",
        "machine",
        "versions",
        "spec",
        "peak_memory",
        "git_commit",
    ):
        assert key in on_disk
    assert len(on_disk["history"]) == 2 and {"reward", "grad_norm"} <= set(on_disk["history"][0])
    assert [r["name"] for r in load_results("unit", res)] == ["a", "b"]
    assert not (ck / "unit" / "b").exists()


@pytest.mark.parametrize(
    "kw,field",
    [
        (dict(steps=0), "steps"),
        (dict(num_generations=1), "num_generations"),
        (dict(task="chess"), "task"),
        (dict(tau=-1.0), "tau"),
        (dict(placement="x"), "placement"),
    ],
)
def test_bad_spec_names_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        RunSpec(**kw)


def test_unknown_field_in_dict():
    with pytest.raises(ValueError, match="^colour is not a known field; known: "):
        RunSpec.from_dict({"task": "kk", "colour": "blue"})


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
