"""The several-process CPU tier (issue "scale"): ``python -m trgrpo.train``, the GPU path's entry point, with each
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
from unittest import mock

import psutil
import pytest
import torch
import yaml

from tests.runs.test_experiment import _build, _evaluate, spec, spec_fields
from tests.tasks.test_search import micro_spec
from trgrpo.paper import BETA
from trgrpo.runs import checkpoints, fullscale
from trgrpo.runs.experiment import run
from trgrpo.runs.spec import RunSpec
from trgrpo.tasks import Task, register_task, search, search_data

ROOT = Path(__file__).resolve().parents[2]


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
    ranks = dict(task="ranks-test", scheme="tr", seed=1, steps=2, num_generations=2, micro_batch_size=1,
                 max_completion_length=4, beta=BETA, save_steps=1, group="ranks")  # fmt: skip
    fields = spec_fields(str(model), name, **{**ranks, **kw})
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


@pytest.mark.slow  # about 50 s on 2 cores; make test runs the same checks on DeepSpeed ZeRO-3 (test_deepspeed.py)
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


@pytest.mark.slow
def test_a_search_run_on_two_processes_evaluates_on_every_rank(search_micro_model, tmp_path, monkeypatch):
    """accelerate launch, 2 CPU processes (as on 2 GPUs): TRL's rollout gathers across ranks, so every rank evaluates
    (the main process alone would wait forever for the others); one record, the evaluation before and after."""

    from trgrpo import files

    monkeypatch.setattr(checkpoints, "CHECKPOINT_DIR", tmp_path / "ckpt")
    monkeypatch.setattr(files, "CHECKPOINT_DIR", tmp_path / "ckpt")  # what launch hands the processes
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    spec = micro_spec(search_micro_model, STEPS=1, PROMPTS_PER_STEP=2, MICRO_BATCH_SIZE=1, SCALE="two")
    spec = spec.replace(ddp_timeout_s=120)
    (rec,) = fullscale.launch([spec], gpus=0, cpu_processes=2, results_dir=tmp_path / "res", log_dir=tmp_path / "log")
    assert rec["batch"]["world_size"] == 2 and rec["batch"]["global_completions_per_step"] == 4
    assert rec["initial"]["n"] == rec["final"]["n"] == 2 and rec["baseline_no_search"]["n"] == 2
    assert (tmp_path / "ckpt" / spec.group / spec.name / "checkpoint-1").is_dir()  # not the repository's checkpoints/


@pytest.fixture(scope="module")
def search_caller(search_micro_model, tmp_path_factory):
    """The search micro model warm-started on scripted trajectories (120 steps, about 15 s) until its greedy rollouts
    call the tool, which the random micro model never does; cached in a temporary folder."""
    corpus = search_data.make_corpus(0)
    tool = search.make_search_tool(search_data.make_retriever("bm25", corpus.passages), top_k=1)
    with mock.patch.dict(os.environ, {"TRGRPO_CACHE": str(tmp_path_factory.mktemp("search-cache"))}):
        warm = search.warm_start(search_micro_model, corpus.questions["train"][:64], tool, steps=120, batch_size=8,
                                 learning_rate=8e-3, template="compact")  # fmt: skip
    return warm["path"]


@pytest.mark.slow  # the warm start and a 2-process search run against the server: about 80 s on 2 cores
def test_a_two_process_search_run_counts_the_searches_a_killed_retrieval_server_fails(search_caller, tmp_path):
    """Issue 45 (the engine tier): ``trgrpo train`` as typed with ``TRGRPO_CPU_PROCESSES=2``, a search spec against
    scripts/retrieval_server.py, which is killed (SIGKILL) once checkpoint-1 is on disk. The run finishes; each rank
    rolled out its half of both evaluations; the first evaluation's searches were answered, the last one's failed on
    both ranks, and the record's ``retrieval`` counts every failure (TRL's tool loop went on with the error)."""
    with fullscale.retrieval_server("--corpus-seed", "0", wait_s=60) as url:
        (server,) = [p for p in psutil.Process().children() if url.split(":")[2].split("/")[0] in p.cmdline()]
        spec = micro_spec(search_caller, RETRIEVER="server", RETRIEVER_URL=url, STEPS=2, N_EVAL=4,
                          PROMPTS_PER_STEP=2, MICRO_BATCH_SIZE=1, SAVE_STEPS=1, SCALE="killed")  # fmt: skip
        cfg = fullscale.write_specs([spec.replace(ddp_timeout_s=300)], tmp_path / "search.yaml")
        proc = train(tmp_path, cfg)
        step1, deadline = tmp_path / "ckpt" / spec.group / spec.name / "checkpoint-1", time.time() + 300
        while not step1.exists():  # the first evaluation and step 1 are done; step 2 and the last evaluation follow
            assert proc.poll() is None, proc.communicate()[0][-4000:]
            assert time.time() < deadline, "the run never saved checkpoint-1"
            time.sleep(0.05)
        server.kill()
        code, out = finish(proc)
    assert code == 0, out[-4000:]
    rec = json.loads((tmp_path / "res" / spec.group / f"{spec.name}.json").read_text())
    assert rec["engine"]["world_size"] == 2 and rec["steps_run"] == 2
    assert rec["initial"]["ranks"] == [{"rollouts": 2, "retrieval_failures": 0}] * 2, rec["initial"]["ranks"]
    final = rec["final"]["ranks"]
    assert [r["rollouts"] for r in final] == [2, 2] and all(r["retrieval_failures"] > 0 for r in final), final
    retrieval = rec["retrieval"]
    assert retrieval["failures"] >= rec["final"]["retrieval_failures"] == sum(r["retrieval_failures"] for r in final)
    assert "Connection refused" in retrieval["errors"][0] and url in retrieval["errors"][0]
    assert f"{retrieval['failures']} of {retrieval['calls']} searches failed" in out


# From test_ranks.py: What several processes change (issue "scale" defects 5, 10): rollouts drawn from the run's seed
# on every path, and the clip-ratio extremes taken over every process's completions.


DRAWN: list = []


def rollouts(model, seed, tmp_path, **kw):
    DRAWN.clear()
    s = spec(model, f"seed{seed}", task="unit-seeded", seed=seed, steps=1, n_eval=0, **kw)
    run(s, results_dir=tmp_path / "res", checkpoint_dir=tmp_path / "ckpt", resume=False, verbose=False)
    return [row for batch in DRAWN for row in batch]


@pytest.mark.slow  # three runs: about 25 s on 2 cores
def test_two_seeds_draw_different_rollouts_one_seed_the_same(tiny_model_dir, tmp_path):
    """HF generate: the rollouts of seed 3 twice are the same, seed 4's differ."""
    a, b, c = (rollouts(tiny_model_dir, seed, tmp_path / str(i)) for i, seed in enumerate((3, 3, 4)))
    assert a and a == b and a != c


def test_vllm_engine_seeded_by_rank_does_not_decide_the_rollouts(tiny_model_dir, tmp_path, monkeypatch):
    """Colocated vLLM: TRL builds the engine with ``seed=process_index``, which seeds the process's RNG (the one
    vLLM samples from) with the rank, whatever the run's seed (defect 5). A stand-in engine does just that; after
    the trainer is built the RNG is the run's again: seeds 3 and 4 draw apart, 3 twice the same."""
    import trl.trainer.grpo_trainer as grpo

    class RankSeededEngine:
        def __init__(self, accelerator, **kw):
            torch.manual_seed(accelerator.process_index)  # what LLM(seed=process_index) does to the process

    monkeypatch.setattr(grpo, "VLLMGeneration", RankSeededEngine)
    monkeypatch.setattr(grpo, "is_vllm_available", lambda *a, **k: True, raising=False)
    from trgrpo.runs.experiment import build_trainer
    from trgrpo.tasks import get_task

    draws = []
    for seed in (3, 3, 4):
        s = spec(tiny_model_dir, f"v{seed}", task="unit-seeded", seed=seed, steps=1, n_eval=0, use_vllm=True)
        trainer = build_trainer(s, get_task("unit-seeded"), tmp_path / f"v{len(draws)}", verbose=False)[0]
        assert isinstance(trainer.vllm_generation, RankSeededEngine)
        draws.append(torch.rand(4).tolist())
    assert draws[0] == draws[1] and draws[0] != draws[2]


def _recording_reward(completions, completion_ids, **kwargs):
    DRAWN.append([list(ids) for ids in completion_ids])
    return [float(sum(ids) % 5) for ids in completion_ids]


register_task("unit-seeded", Task(_build, lambda spec: [_recording_reward], _evaluate))


def kk(**kw):
    base = dict(task="kk", prompts_per_step=64, num_generations=8, micro_batch_size=4)
    return RunSpec(**{**base, **kw})


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
