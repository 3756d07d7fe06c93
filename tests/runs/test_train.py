"""The run command line (trgrpo/runs/train.py; today trgrpo/train.py): one line naming the file and the field for bad
input, the data each run reads, one process per spec, the GPU path without CUDA."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.runs import refused
from trgrpo.files import ROOT
from trgrpo.runs import fullscale
from trgrpo.runs.fullscale import specs_from_parameters
from trgrpo.runs.spec import RunSpec
from trgrpo.runs.train import main as train_main

TRAIN_KK = ROOT / "experiments" / "train_kk_qwen3b.yaml"


def _full_scale_kk_config(tmp_path) -> Path:
    from trgrpo.notebook import parameter_defaults as notebook_defaults
    from trgrpo.runs.fullscale import write_specs

    defaults = notebook_defaults(ROOT / "notebooks" / "05_kk_logic_full_scale.ipynb")
    specs = specs_from_parameters("kk", {**defaults, "SEEDS": [0], "SCHEMES": ["tr"]}, use_vllm=False)
    return write_specs(specs, tmp_path / "kk.yaml")


KK_PAPER_DATA = "hub:K-and-K/knights-and-knaves"  # the shipped K&K configs' data (experiments/train_kk_qwen3b.yaml)
PAPER_DATA = {"train_path": KK_PAPER_DATA, "eval_path": KK_PAPER_DATA}
KK_REPO = KK_PAPER_DATA.removeprefix("hub:")


def test_print_config_names_each_runs_data(tmp_path, capsys):
    """`trgrpo train --print-config` (its main) on notebook 05's full-scale specs names the data."""
    import json

    from trgrpo.runs.train import main

    assert main(["--config", str(_full_scale_kk_config(tmp_path)), "--print-config", "--world-size", "8"]) == 0
    assert json.loads(capsys.readouterr().out)["data"] == PAPER_DATA


@pytest.mark.slow
def test_print_config_names_each_runs_data_as_typed(tmp_path):
    import json
    import subprocess
    import sys

    cfg = _full_scale_kk_config(tmp_path)
    cmd = [sys.executable, "-m", "trgrpo", "train", "--config", str(cfg), "--print-config", "--world-size", "8"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["data"] == PAPER_DATA


KK = "task: kk\nmodel: embedded\n"


@pytest.mark.parametrize(
    "text,field",
    [
        ("", "empty"),
        ("{}\n", "empty"),
        ("# only a comment\n", "empty"),
        ("task: kk\nsteps: [1,\n", "YAML at line"),
        ("- task: kk\n", "mapping"),
        ("base: {task: kk}\ngrid: notalist\n", "grid"),
        ("base: {task: kk}\ngrid: []\n", "grid"),
        ("base: {task: kk}\nsteps: 3\ngrid: [{seed: 0}]\n", "steps"),
        ("base: notamapping\n", "base"),
        ("model: embedded\n", "task"),
        (KK + "colour: blue\n", "colour"),
        (KK + "steps: -1\n", "steps"),
        (KK + "group: /tmp/elsewhere\n", "group"),
        (KK + "name: ../up\n", "name"),
        ("base: {task: kk, name: same}\ngrid: [{seed: 0}, {seed: 1}]\n", "name"),
        (KK + "imports: [this]\n", "imports"),
        (KK + "imports: trgrpo.tasks\n", "imports"),
        (KK + "imports: [../evil.py]\n", "imports"),
        (KK + "prompts_per_step: 3\nnum_generations: 3\ngradient_accumulation_steps: 2\n", "gradient_accumulation"),
        (KK + "max_completion_length: 1e9\n", "--allow-long"),  # issue 48, item 5: runs that would never end
        ("task: arith\nmodel: embedded\nsteps: 1000000000\n", "--allow-long"),
    ],
)
def test_train_refuses_bad_configs_in_one_line(tmp_path, capsys, text, field):
    import sys

    from trgrpo.runs.train import main

    cfg = tmp_path / "run.yaml"
    cfg.write_text(text)
    rc = main(["--config", str(cfg), "--results", str(tmp_path / "res")])
    refused(capsys, rc, cfg, field)
    assert "this" not in sys.modules  # `imports: [this]` ran nothing
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.yaml"]  # nothing written


def test_a_model_the_planner_cannot_size_is_refused_at_load(tmp_path, capsys, monkeypatch):
    """Issue 48, item 5: a model of no known shape (a hub id the planner lacks) was not estimated (its ValueError was
    passed over), so ``max_completion_length: 1e9`` on it started training on a GPU machine; now it is refused at load
    as a too-long run is: one line naming the file, the run and the model, unless --allow-long."""
    monkeypatch.setattr(fullscale, "cuda_missing", lambda: None)  # as on a machine with one GPU: the run would start
    monkeypatch.setattr(fullscale, "n_devices", lambda: 1)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(fullscale, "launch", lambda *a, **k: pytest.fail("the run started"))
    cfg = tmp_path / "run.yaml"
    cfg.write_text("task: kk\nmodel: nobody/unknown-model\nmax_completion_length: 1e9\n")
    for extra in ([], ["--print-config"]):
        rc = train_main(["--config", str(cfg), "--results", str(tmp_path / "res"), *extra])
        refused(capsys, rc, cfg, "kk-unknown-model-", "model 'nobody/unknown-model': unknown shape", "--allow-long")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.yaml"]  # nothing written
    assert train_main(["--config", str(cfg), "--allow-long", "--print-config"]) == 0  # the override trains it
    cfg.write_text("task: kk\nmodel: HuggingFaceTB/SmolLM2-135M-Instruct\n")  # the embedded model's hub id: sized
    assert train_main(["--config", str(cfg), "--print-config"]) == 0


def test_train_refuses_a_missing_file_and_a_bad_set(tmp_path, capsys):
    from trgrpo.runs.train import main

    refused(capsys, main(["--config", str(tmp_path / "nope.yaml")]), "nope.yaml", "no such")
    cfg = tmp_path / "run.yaml"
    cfg.write_text(KK)
    refused(capsys, main(["--config", str(cfg), "--set", "group=/abs/path", "name=x"]), cfg, "group", "--set")
    refused(capsys, main(["--config", str(cfg), "--set", "STEPZ=3"]), cfg, "STEPZ")
    refused(capsys, main(["--config", str(cfg), "--set", "steps"]), "KEY=VALUE")


def test_train_imports_a_module_next_to_the_config(tmp_path, capsys):
    from trgrpo.runs.train import main

    (tmp_path / "my_task.py").write_text(
        "from trgrpo.tasks import Task, register_task\n"
        "register_task('my-task', Task(lambda s, t: None, lambda s: [], lambda *a: {}))\n"
    )
    cfg = tmp_path / "run.yaml"
    cfg.write_text("imports: [my_task.py]\ntask: my-task\nprompts_per_step: 2\n")
    assert main(["--config", str(cfg), "--print-config"]) == 0
    assert '"runs"' in capsys.readouterr().out


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


# From test_gpu_commands.py: The README's GPU-server commands run as typed, as subprocesses, on the CPU: only the
# model and the scale change, through the documented overrides (``--set`` for spec fields; ``TRGRPO_RESULTS`` /
# ``TRGRPO_CHECKPOINTS`` / ``TRGRPO_RUNS`` keep the test's files in its temporary folder). ``make gpu-check`` is in
# tests/scripts/test_gpu_check.py.


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


@pytest.mark.parametrize(
    "text,option,repo",
    [  # the names the shipped configs read: math's DeepScaleR (tasks.math.MATH_HUB), K&K's paper puzzles
        ("task: math\nmodel: embedded\ntask_options: {train: deepscaler}\n", "task_options.train", "agentica-org/"),
        (
            f"task: kk\nmodel: embedded\ntask_options: {{eval_path: '{KK_PAPER_DATA}'}}\n",
            "task_options.eval_path",
            KK_REPO,
        ),
        (
            f"task: kk\nmodel: embedded\ntask_options: {{train_path: '{KK_PAPER_DATA}'}}\n",
            "task_options.train_path",
            KK_REPO,
        ),
    ],
)
def test_offline_hub_data_is_refused_at_load_naming_the_config(
    tmp_path, tmp_path_factory, capsys, monkeypatch, text, option, repo
):
    """Issue 48, item 6: a hub dataset offline failed after the model and tokenizer loaded (~60 s), a ConnectionError
    line without the config file, exit 1; now at load: one line naming the file, the run and the option, exit 2. The
    datasets cache is an empty folder, so the shipped names are not found on any machine."""
    import datasets

    from trgrpo.runs.train import main

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path_factory.mktemp("empty-datasets-cache")))
    cfg = tmp_path / "run.yaml"
    cfg.write_text(text)
    monkeypatch.setenv("TRGRPO_CHECKPOINTS", str(tmp_path / "ckpt"))
    rc = main(["--config", str(cfg), "--results", str(tmp_path / "res")])
    refused(capsys, rc, cfg, "run 0", option, f"hub dataset '{repo}", "not in the local datasets cache")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.yaml"]  # nothing written
