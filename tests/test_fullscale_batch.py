"""Table 6's batch at any world size (TRL's own arithmetic), --print-config, absolute result paths, one process
per run, and a real 2-process launch on CPU whose record lands where launch() reads it."""

import json
import sys
from pathlib import Path

import pytest

from trgrpo.runs import checkpoints, fullscale
from trgrpo.runs.experiment import make_config
from trgrpo.runs.spec import RunSpec, batch_layout, vllm_max_model_length
from trgrpo.runs.train import main as train_main

ROOT = Path(__file__).resolve().parents[1]
TRAIN_KK = ROOT / "experiments" / "train_kk_qwen3b.yaml"


def kk(**kw):
    base = dict(task="kk", prompts_per_step=64, num_generations=8, micro_batch_size=4)
    return RunSpec(**{**base, **kw})


@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_global_batch_is_table6_at_any_world_size(world):
    lay = batch_layout(kk(), world)
    assert lay["global_prompts_per_step"] == 64
    assert lay["global_completions_per_step"] == 512
    assert lay["per_device_train_batch_size"] * lay["gradient_accumulation_steps"] * world == 512
    assert lay["per_device_train_batch_size"] == 4  # the micro-batch does not grow with the GPU count
    assert lay["steps_per_generation"] == lay["gradient_accumulation_steps"]  # one on-policy update per rollout


@pytest.mark.parametrize("world", [1, 2, 8])
def test_trl_config_gets_the_global_batch(world, tmp_path, monkeypatch):
    """TRL's GRPOConfig derives generation_batch_size from its world size: fake it, check TRL's own figure."""
    from trgrpo.trainer import TRGRPOConfig

    monkeypatch.setattr(TRGRPOConfig, "world_size", property(lambda self: world))
    cfg = make_config(kk(), tmp_path, world_size=world)
    assert cfg.generation_batch_size == 512
    assert cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps * world == 512
    assert cfg.steps_per_generation == cfg.gradient_accumulation_steps


def test_accumulation_form_and_bad_splits_name_the_setting():
    lay = batch_layout(RunSpec(task="kk", prompts_per_step=8, num_generations=8, gradient_accumulation_steps=4), 2)
    assert (lay["per_device_train_batch_size"], lay["global_completions_per_step"]) == (8, 64)
    with pytest.raises(ValueError, match="micro_batch_size"):
        batch_layout(kk(micro_batch_size=3), 1)
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        batch_layout(RunSpec(task="kk", prompts_per_step=1, num_generations=6, gradient_accumulation_steps=4), 1)
    with pytest.raises(ValueError, match="world_size"):
        batch_layout(kk(), 0)
    with pytest.raises(ValueError, match="micro_batch_size"):
        RunSpec(task="kk", micro_batch_size=0)


def test_vllm_context_is_prompt_plus_completion():
    assert vllm_max_model_length(kk(max_completion_length=4096)) == 1024 + 4096
    assert vllm_max_model_length(kk(task_options={"max_prompt_tokens": 300}, max_completion_length=100)) == 400


def test_make_config_sets_vllm_length_and_checkpointing(tmp_path):
    cfg = make_config(kk(use_vllm=True, gradient_checkpointing=True, max_completion_length=64), tmp_path, world_size=1)
    assert cfg.vllm_max_model_length == 1024 + 64 and cfg.gradient_checkpointing


def full_scale(task: str, **params) -> list[RunSpec]:
    """The runs of notebook 05 (kk) or 06 (math) at its full-scale defaults, ``params`` changed."""
    from trgrpo.notebook import parameter_defaults

    nb = {"kk": "05_kk_logic_full_scale", "math": "06_math_full_scale"}[task]
    defaults = parameter_defaults(Path(__file__).parents[1] / "notebooks" / f"{nb}.ipynb")
    return fullscale.specs_from_parameters(task, {**defaults, **params})


def test_fullscale_specs_are_the_papers_batch():
    for s in full_scale("kk", SEEDS=[0]):
        assert (s.prompts_per_step, s.num_generations, s.gradient_checkpointing) == (64, 8, True)
    for s in full_scale("math", SCHEMES=["tr"]):
        assert (s.prompts_per_step, s.gradient_checkpointing) == (128, True)


@pytest.mark.parametrize("world,accum", [(1, 256), (8, 32)])
def test_print_config_cli(world, accum, capsys):
    assert train_main(["--config", str(TRAIN_KK), "--world-size", str(world), "--print-config"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["world_size"] == world and out["gradient_accumulation_steps"] == accum
    assert out["global_prompts_per_step"] == 64 and out["global_completions_per_step"] == 512
    assert out["per_device_train_batch_size"] * out["gradient_accumulation_steps"] * world == 512
    assert out["gradient_checkpointing"] is True and out["vllm_max_model_length"] == 5120
    assert out["num_generations"] == 8 and len(out["runs"]) == 6
    assert out["ddp_timeout_s"] == 6 * 3600 and out["vllm_importance_sampling"] == "off"


def test_make_config_sets_ddp_timeout_and_importance_sampling(tmp_path):
    """TRL's defaults would be 1800 s and sequence_mask with C_max 3: the spec's choice reaches GRPOConfig."""
    cfg = make_config(kk(use_vllm=True), tmp_path, world_size=1)
    assert cfg.ddp_timeout == 6 * 3600 and cfg.vllm_importance_sampling_correction is False
    cfg = make_config(kk(use_vllm=True, vllm_importance_sampling="token_truncate", ddp_timeout_s=60), tmp_path, 1)
    assert cfg.ddp_timeout == 60 and cfg.vllm_importance_sampling_correction
    assert cfg.vllm_importance_sampling_mode == "token_truncate"
    with pytest.raises(ValueError, match="vllm_importance_sampling"):
        kk(vllm_importance_sampling="on")


def test_planner_flags_an_evaluation_longer_than_the_timeout_and_states_the_disk():
    from trgrpo.runs import plan

    spec = full_scale("kk", SCHEMES=["tr"], USE_VLLM=False)[0]
    text, rows, problems = plan.plan_report([spec], gpus=8, gpu_mem_gb=80, gpu=plan.GPUS["H100"])
    assert not problems and "disk: a checkpoint every 20 steps" in text
    n = fullscale.MODEL_SHAPES["Qwen2.5-3B-Instruct"].params / 1e9
    assert rows[0]["checkpoint_gb"] == pytest.approx(16 * n)  # bf16 model 2N + module states 2N, master 4N, moments 8N
    short = spec.replace(ddp_timeout_s=int(rows[0]["eval_s"]))  # less than three evaluations
    _, _, problems = plan.plan_report([short], gpus=8, gpu_mem_gb=80, gpu=plan.GPUS["H100"])
    assert len(problems) == 1 and "ddp_timeout_s >=" in problems[0]


def test_launch_refuses_a_full_scale_run_without_cuda(tmp_path, monkeypatch):
    """Notebooks 05/06 call launch(): without CUDA a 3B run stops (one line) before anything is written."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    specs = full_scale("kk", SCHEMES=["tr"])
    with pytest.raises(SystemExit, match="Qwen2.5-3B-Instruct is a full-scale model and no CUDA device"):
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


# 35 s on the idle 2-core VM: in the slow tier (make test-slow), which keeps make test under 15 minutes; the batch
# arithmetic of several processes is checked without launching them above (batch_layout, run_command)
@pytest.mark.slow
def test_launch_two_cpu_processes(tiny_model_dir, tmp_path, monkeypatch):
    """accelerate launch, 2 processes on CPU (gloo), 2 steps: the global batch is the spec's, not 2x it, and the
    record lands where launch() reads it (an absolute results path given as a relative one)."""

    monkeypatch.setattr(checkpoints, "CHECKPOINT_DIR", tmp_path / "ckpt")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    spec = RunSpec(
        task="kk",
        model=tiny_model_dir,
        scheme="tr",
        steps=2,
        prompts_per_step=2,
        num_generations=4,
        micro_batch_size=2,
        max_completion_length=8,
        n_train=8,
        n_eval=0,
        save_steps=100,  # no checkpoint: this test is about the batch and the record
        task_options={"n_people": [2]},
        group="launch2",
        name="two-procs",
    )
    records = fullscale.launch([spec], gpus=0, cpu_processes=2, results_dir="res", log_dir=tmp_path / "logs")
    assert len(records) == 1
    rec = records[0]
    assert (tmp_path / "res" / "launch2" / "two-procs.json").exists()
    b = rec["batch"]
    assert b["world_size"] == 2 and b["global_completions_per_step"] == 8 and b["global_prompts_per_step"] == 2
    assert b["trl_generation_batch_size"] == 8  # TRL's own figure under 2 processes
    assert (b["per_device_train_batch_size"], b["gradient_accumulation_steps"]) == (2, 2)
    assert len(rec["history"]) == 2 and rec["steps_run"] == 2
    assert (tmp_path / "logs" / "launch2" / "two-procs.log").read_text().count("[1/1] two-procs") >= 1


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
