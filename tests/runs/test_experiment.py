"""trgrpo.experiment: a run writes its record; a killed run resumes to the same metrics (App. B.2
checkpoints)."""

import json
import sys

import pytest
import torch
from datasets import Dataset

from trgrpo.runs.experiment import make_config, run
from trgrpo.runs.records import load_results
from trgrpo.runs.spec import RunSpec, vllm_max_model_length
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


def spec(tiny_model_dir, name, **kw):
    return RunSpec(**spec_fields(tiny_model_dir, name, **kw))


def spec_fields(tiny_model_dir, name, **kw) -> dict:
    """The fields of a few-step run of the tiny model (``kw`` overrides): a RunSpec here, a config file in the
    several-process tier (tests/integration/test_two_processes.py), whose task is registered in the run's processes."""
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
    return {**base, **kw}


def comparable(record):
    keys = ("step", "reward", "loss", "grad_norm", "tr/weight_mean")
    return [h[k] for h in record["history"] for k in keys]


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


def kk(**kw):
    base = dict(task="kk", prompts_per_step=64, num_generations=8, micro_batch_size=4)
    return RunSpec(**{**base, **kw})


@pytest.mark.parametrize("world", [1, 2, 8])
def test_trl_config_gets_the_global_batch(world, tmp_path, monkeypatch):
    """TRL's GRPOConfig derives generation_batch_size from its world size: fake it, check TRL's own figure."""
    from trgrpo.trainer import TRGRPOConfig

    monkeypatch.setattr(TRGRPOConfig, "world_size", property(lambda self: world))
    cfg = make_config(kk(), tmp_path, world_size=world)
    assert cfg.generation_batch_size == 512
    assert cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps * world == 512
    assert cfg.steps_per_generation == cfg.gradient_accumulation_steps


def test_vllm_context_is_prompt_plus_completion():
    assert vllm_max_model_length(kk(max_completion_length=4096)) == 1024 + 4096
    assert vllm_max_model_length(kk(task_options={"max_prompt_tokens": 300}, max_completion_length=100)) == 400


def test_make_config_sets_vllm_length_and_checkpointing(tmp_path):
    cfg = make_config(kk(use_vllm=True, gradient_checkpointing=True, max_completion_length=64), tmp_path, world_size=1)
    assert cfg.vllm_max_model_length == 1024 + 64 and cfg.gradient_checkpointing


def test_make_config_sets_ddp_timeout_and_importance_sampling(tmp_path):
    """TRL's defaults would be 1800 s and sequence_mask with C_max 3: the spec's choice reaches GRPOConfig."""
    cfg = make_config(kk(use_vllm=True), tmp_path, world_size=1)
    assert cfg.ddp_timeout == 6 * 3600 and cfg.vllm_importance_sampling_correction is False
    cfg = make_config(kk(use_vllm=True, vllm_importance_sampling="token_truncate", ddp_timeout_s=60), tmp_path, 1)
    assert cfg.ddp_timeout == 60 and cfg.vllm_importance_sampling_correction
    assert cfg.vllm_importance_sampling_mode == "token_truncate"
    with pytest.raises(ValueError, match="vllm_importance_sampling"):
        kk(vllm_importance_sampling="on")


def test_vllm_generate_adapter_feeds_generate_completions(tiny_model_dir, monkeypatch):
    """Evaluation through vLLM: unpadded prompt ids in, greedy = temperature 0, completions decoded as with HF."""
    import types

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trgrpo.runs.experiment import VLLMGenerate
    from trgrpo.tasks.generation import generate_completions

    class SamplingParams:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(SamplingParams=SamplingParams))
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    answer = tok("yes", add_special_tokens=False)["input_ids"]
    seen = {}

    class Engine:
        def generate(self, prompts, sampling_params, use_tqdm):
            seen["prompts"], seen["params"] = prompts, sampling_params
            one = types.SimpleNamespace(token_ids=answer)
            return [types.SimpleNamespace(outputs=[one] * sampling_params.n) for _ in prompts]

    policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    prompts = ["a", "a much longer prompt than the first"]
    out = generate_completions(VLLMGenerate(Engine(), policy), tok, prompts, batch_size=8, max_new_tokens=5)
    assert out == [["yes"], ["yes"]]
    assert seen["params"].temperature == 0.0 and seen["params"].max_tokens == 5
    lengths = [len(p["prompt_token_ids"]) for p in seen["prompts"]]
    assert lengths[0] < lengths[1]  # padding stripped
    out = generate_completions(
        VLLMGenerate(Engine(), policy), tok, prompts, do_sample=True, temperature=0.7, num_return_sequences=3
    )
    assert [len(r) for r in out] == [3, 3] and seen["params"].temperature == 0.7


@pytest.mark.parametrize("main_process", [True, False])
def test_the_evaluation_before_training_runs_on_the_main_process_only(main_process, tmp_path, monkeypatch):
    """Issue 45 defect 6: ``eval_before`` ran HF generate on every rank; it is evaluated as the final evaluation is
    (the main process; every rank only where the evaluation collects across them). A stand-in trainer on rank 0 or 1."""
    from types import SimpleNamespace

    from trgrpo.runs import experiment

    accelerator = SimpleNamespace(
        is_main_process=main_process,
        num_processes=2,
        state=SimpleNamespace(),
        wait_for_everyone=lambda: None,
        unwrap_model=lambda m: m,
    )
    trainer = SimpleNamespace(
        accelerator=accelerator,
        train=lambda resume_from_checkpoint=None: None,
        state=SimpleNamespace(log_history=[]),
        args=SimpleNamespace(generation_batch_size=8),
        model=None,
    )
    monkeypatch.setattr(experiment, "build_trainer", lambda *a, **k: (trainer, None, ["Count to 3: 1 2 3"], None))
    evaluated = []
    monkeypatch.setattr(experiment, "_evaluate", lambda *a, **k: evaluated.append(1) or {"accuracy": 0.5})
    s = spec("unused", "eval-before", eval_before=True, steps=1)
    record = run(s, results_dir=tmp_path / "results", checkpoint_dir=tmp_path / "ckpt", verbose=False)
    assert len(evaluated) == (2 if main_process else 0)  # before and after training, on rank 0 alone
    assert record["initial"] == ({"accuracy": 0.5} if main_process else {})
