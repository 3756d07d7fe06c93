"""Table 6's batch at any world size (TRL's own arithmetic), --print-config, absolute result paths, one process
per run, and a real 2-process launch on CPU whose record lands where launch() reads it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from datasets import Dataset

from trgrpo.runs import fullscale
from trgrpo.runs.experiment import run
from trgrpo.runs.spec import RunSpec
from trgrpo.tasks import Task, register_task

ROOT = Path(__file__).resolve().parents[2]


def kk(**kw):
    base = dict(task="kk", prompts_per_step=64, num_generations=8, micro_batch_size=4)
    return RunSpec(**{**base, **kw})


def full_scale(task: str, **params) -> list[RunSpec]:
    """The runs of notebook 05 (kk) or 06 (math) at its full-scale defaults, ``params`` changed."""
    from trgrpo.notebook import parameter_defaults

    nb = {"kk": "05_kk_logic_full_scale", "math": "06_math_full_scale"}[task]
    defaults = parameter_defaults(Path(__file__).parents[2] / "notebooks" / f"{nb}.ipynb")
    return fullscale.specs_from_parameters(task, {**defaults, **params})


def test_fullscale_specs_are_the_papers_batch():
    for s in full_scale("kk", SEEDS=[0]):
        assert (s.prompts_per_step, s.num_generations, s.gradient_checkpointing) == (64, 8, True)
    for s in full_scale("math", SCHEMES=["tr"]):
        assert (s.prompts_per_step, s.gradient_checkpointing) == (128, True)


def test_launch_refuses_a_full_scale_run_without_cuda(tmp_path, monkeypatch):
    """Notebooks 05/06 call launch(): without CUDA a 3B run stops (one line) before anything is written; a ConfigError,
    so the notebook shows that line (issue 48, item 4: a SystemExit showed IPython's "An exception has occurred"
    and an exit warning)."""
    import torch

    from trgrpo.config import ConfigError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    specs = full_scale("kk", SCHEMES=["tr"])
    with pytest.raises(ConfigError, match="Qwen2.5-3B-Instruct is a full-scale model and no CUDA device"):
        fullscale.launch(specs, results_dir=tmp_path / "r", log_dir=tmp_path / "l")
    assert not any(tmp_path.iterdir())
    assert fullscale.refuse_without_cuda([RunSpec(task="kk", model="embedded")]) is None


def test_run_command_paths_are_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cmd = fullscale.run_command("spec.yaml", results_dir="../results", gpus=8, accelerate_config="configs/zero3.yaml")
    assert cmd[cmd.index("--results") + 1] == str((tmp_path / "../results").resolve())
    assert cmd[cmd.index("--config") + 1] == str(tmp_path / "spec.yaml")
    assert cmd[cmd.index("--config_file") + 1] == str(ROOT / "configs" / "zero3.yaml")
    assert cmd[cmd.index("--num_processes") + 1] == "8"
    one = fullscale.run_command("spec.yaml", results_dir="r", gpus=1)
    assert one[:4] == [sys.executable, "-m", "trgrpo", "train"]


def test_live_logs_sit_beside_the_record(tmp_path):
    from trgrpo.runs.checkpoints import live_log_dir

    assert live_log_dir(kk(), tmp_path) is None  # report_to="none"
    spec = kk(report_to="tensorboard", group="g", name="r")
    assert live_log_dir(spec, tmp_path) == tmp_path.resolve() / "g" / "r.logs"
    params = {
        "MODEL": "m",
        "SCHEMES": ["tr"],
        "SEEDS": [0],
        "STEPS": 1,
        "PROMPTS_PER_STEP": 64,
        "GROUP_SIZE": 8,
        "MAX_COMPLETION_LENGTH": 16,
        "N_TRAIN": 8,
        "N_EVAL_PER_SIZE": 1,
        "REPORT_TO": "tensorboard",
    }
    (s,) = fullscale.specs_from_parameters("kk", params, use_vllm=False)
    assert s.report_to == "tensorboard" and s.micro_batch_size == 2 and s.gradient_checkpointing


# From test_data_sources.py: Data as the paper's: Logic-RL parquet files for K&K, the source in the run record, the
# <think> pre-fill, math sets under Table 2's names (issue 15, item 7).


def test_record_carries_data_source(tiny_model_dir, tmp_path):
    spec = RunSpec(
        task="data-source-test",
        model=tiny_model_dir,
        steps=1,
        prompts_per_step=2,
        num_generations=2,
        max_completion_length=4,
        n_train=4,
        n_eval=0,
        group="unit",
        name="ds",
    )
    record = run(spec, results_dir=tmp_path / "r", checkpoint_dir=tmp_path / "c", verbose=False)
    assert record["data_source"] == {"train": {"source": "unit", "size": 4}, "eval": {"size": 1}}


def _build(spec, tokenizer):
    return Dataset.from_dict({"prompt": ["Count to 3:"] * 4}), ["Count to 3: 1 2 3"]


def _source(spec, train_ds, records):
    return {"train": {"source": "unit", "size": len(train_ds)}, "eval": {"size": len(records)}}


register_task(
    "data-source-test",
    Task(_build, lambda spec: [lambda completions, **kw: [0.0] * len(completions)], lambda *a: {}, _source),
)
