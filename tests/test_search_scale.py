"""Search at full scale (issue "search-scale"): the retrieval server as its own process speaking Search-R1's /retrieve
protocol, a search run and its evaluation through it, one clear line for a server that is down, slow or answers
garbage; the planner on the search plans; the no-search baseline's engine; TRL's rollout API the adapter relies on;
a search run launched as a process, killed after a checkpoint and resumed to the same record (slow)."""

from __future__ import annotations

import inspect
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from trgrpo.runs import checkpoints, fullscale
from trgrpo.runs.experiment import run
from trgrpo.runs.records import read_record
from trgrpo.tasks import search as S
from trgrpo.tasks import search_data
from trgrpo.tasks.search_data import ServerRetriever, make_corpus

from .test_search import micro_spec

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def corpus():
    return make_corpus(0)


@pytest.fixture(scope="module")
def server_url():
    """scripts/retrieval_server.py on a free port of 127.0.0.1 (BM25 over the generated corpus), stopped afterwards."""
    with fullscale.retrieval_server("--corpus-seed", "0", wait_s=60) as url:
        yield url


def test_the_server_answers_search_r1s_protocol_with_the_local_bm25_hits(server_url, corpus):
    queries = [q["question"] for q in corpus.questions["test"][:5]]
    served = ServerRetriever(server_url, timeout=10).batch_search(queries, 3)
    local = search_data.BM25Retriever(corpus.passages).batch_search(queries, 3)
    assert [[(h["id"], h["title"], h["text"]) for h in row] for row in served] == [
        [(h["id"], h["title"], h["text"]) for h in row] for row in local
    ]
    assert [h["score"] for h in served[0]] == pytest.approx([h["score"] for h in local[0]])
    raw = json.dumps({"queries": [queries[0]], "topk": 1}).encode()  # return_scores false: documents only
    import urllib.request

    with urllib.request.urlopen(urllib.request.Request(server_url, data=raw), timeout=10) as resp:
        (row,) = json.loads(resp.read())["result"]
    assert set(row[0]) == {"id", "contents"} and row[0]["contents"].startswith('"')


def test_a_search_run_and_its_evaluation_talk_to_the_server(
    server_url, search_micro_model, corpus, tmp_path, monkeypatch
):
    calls = []
    real = ServerRetriever.batch_search
    monkeypatch.setattr(ServerRetriever, "batch_search", lambda self, q, k=3: calls.append(q) or real(self, q, k))
    spec = micro_spec(search_micro_model, RETRIEVER="server", RETRIEVER_URL=server_url)
    rec = run(spec, results_dir=tmp_path, checkpoint_dir=tmp_path / "ckpt", resume=False, verbose=False)
    assert rec["data_source"]["retriever"] == f"server {server_url}"
    assert rec["final"]["n"] == 2 and rec["initial"]["n"] == 2
    assert calls and calls[0] == ["health check"]  # the run checked the server before loading the model
    search = S.make_search_tool(ServerRetriever(server_url), top_k=1)  # the tool a rollout calls
    assert search(query=corpus.questions["test"][0]["queries"][0]).startswith("Doc 1 (Title:")


def _serve(handler_body) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            handler_body(self)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/retrieve"


def _garbage(h):
    h.send_response(200)
    h.end_headers()
    h.wfile.write(b"<html>not json</html>")


def _wrong_shape(h):
    h.send_response(200)
    h.end_headers()
    h.wfile.write(json.dumps({"result": [[{"title": "no contents"}]]}).encode())


def _slow(h):
    time.sleep(3)


@pytest.mark.parametrize(
    ("body", "message"),
    [(None, "refused"), (_slow, "timed out"), (_garbage, "not Search-R1's"), (_wrong_shape, "not Search-R1's")],
)
def test_a_server_down_slow_or_answering_garbage_gives_one_line_fast(body, message):
    if body is None:  # nothing listens on a port just freed
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            url, httpd = f"http://127.0.0.1:{sock.getsockname()[1]}/retrieve", None
    else:
        httpd, url = _serve(body)
    t0 = time.monotonic()
    try:
        with pytest.raises(ConnectionError, match=message) as err:
            ServerRetriever(url, timeout=0.3).check()
    finally:
        if httpd is not None:
            httpd.shutdown()
    assert time.monotonic() - t0 < 2.5 and "\n" not in str(err.value) and url in str(err.value)
    tool = S.make_search_tool(ServerRetriever(url, timeout=0.3))  # inside a rollout: an error turn, never a raise
    assert tool(query="x").startswith("Error: the retriever failed (ConnectionError: retrieval server")


def test_a_run_without_its_server_stops_with_one_line(search_micro_model, tmp_path, monkeypatch, capsys):
    """``trgrpo train`` (its main, in this process): exit 2, one line naming the URL, nothing written."""
    from trgrpo.runs import train

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/retrieve"
    spec = micro_spec(search_micro_model, RETRIEVER="server", RETRIEVER_URL=url, SCALE="down")
    from trgrpo.runs.fullscale import write_specs

    cfg = write_specs([spec], tmp_path / "spec.yaml")
    monkeypatch.setattr(checkpoints, "CHECKPOINT_DIR", tmp_path / "ckpt")
    assert train.main(["--config", str(cfg), "--results", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"trgrpo train: error: retrieval server {url}: no answer ([Errno 111] Connection refused; "
        "timeout 30 s); start one: python scripts/retrieval_server.py --port PORT (docs/gpu.md, 'Retrieval server')"
    ]
    assert not (tmp_path / "ckpt").exists() and not list(tmp_path.rglob("*.json"))


@pytest.mark.parametrize(("plan", "gpus", "mem"), [("search_qwen3b.yaml", 8, 80), ("search_qwen3b_1gpu.yaml", 1, 141)])
def test_the_planner_plans_the_search_runs(plan, gpus, mem, capsys, monkeypatch):
    """``trgrpo plan experiments/search_qwen3b.yaml --gpus 8 --gpu-mem-gb 80`` (its main, here): Table 3's
    runs, 256 completions per step (32 prompts x 8), both fit; the one-GPU variant fits on one H200 (141 GB)."""
    from trgrpo.runs import plan as planner

    monkeypatch.chdir(ROOT)
    assert planner.main([f"experiments/{plan}", "--gpus", str(gpus), "--gpu-mem-gb", str(mem), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["problems"] == [] and {r["gpu"] for r in out["runs"]} == {"H100 SXM" if gpus == 8 else "H200 SXM"}
    runs = out["runs"]
    assert [r["name"] for r in runs] == ["search-Qwen2.5-3B-equal-seed0", "search-Qwen2.5-3B-tr-seed0"]
    assert all(r["fits"] and r["batch"]["global_completions_per_step"] == 256 for r in runs)
    assert all(r["batch"]["global_prompts_per_step"] == 32 and r["batch"]["world_size"] == gpus for r in runs)
    assert all(r["memory_gb"]["vllm"] > 0 for r in runs)  # vLLM colocated, as the full-scale notebook runs it


def test_the_training_spec_file_matches_the_notebook_plan():
    """experiments/train_search_qwen3b.yaml (trgrpo train) holds the runs notebook 07 plans."""
    from trgrpo.runs.plan import plan_specs

    nb_specs, _ = plan_specs(ROOT / "experiments" / "search_qwen3b.yaml")
    file_specs, _ = plan_specs(ROOT / "experiments" / "train_search_qwen3b.yaml")
    assert [s.name for s in nb_specs] == [s.name for s in file_specs]
    for a, b in zip(nb_specs, file_specs):
        keep = {"warm_start", "eval_every", "scale", "corpus_seed", "train_file", "data_dir"}
        assert {k: v for k, v in a.task_options.items() if k not in keep} == {
            k: v for k, v in b.task_options.items() if k not in keep
        }
        for field in ("model", "steps", "prompts_per_step", "num_generations", "micro_batch_size", "n_eval", "bf16"):
            assert getattr(a, field) == getattr(b, field), field
        assert a.gradient_checkpointing and a.use_vllm and a.eval_before and b.use_vllm


def test_the_no_search_baseline_runs_on_the_runs_generation_engine(monkeypatch):
    """vLLM when the trainer holds a colocated engine (its prompts rendered by the chat template, greedy), else the
    policy's HF generate."""
    assert S.generation_engine(SimpleNamespace(vllm_generation=SimpleNamespace(llm=object()))) == "vllm"
    assert S.generation_engine(SimpleNamespace(vllm_generation=SimpleNamespace(llm=None))) == "hf"
    assert S.generation_engine(SimpleNamespace()) == "hf"
    seen = {}

    class Engine:
        def generate(self, texts, sampling_params, use_tqdm):
            seen.update(texts=texts, params=sampling_params)
            return [SimpleNamespace(outputs=[SimpleNamespace(text="<answer>Paris</answer>")]) for _ in texts]

    class Tok:
        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            return "|".join(m["content"] for m in messages) + ("<gen>" if add_generation_prompt else "")

    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(SamplingParams=lambda **kw: kw))
    trainer = SimpleNamespace(vllm_generation=SimpleNamespace(llm=Engine()), processing_class=Tok())
    res = S.evaluate_no_search(trainer, [{"question": "Capital of France?", "answers": ["Paris"]}], max_new_tokens=7)
    assert res["engine"] == "vllm" and res["em"] == 1.0
    assert seen["params"] == {"temperature": 0.0, "max_tokens": 7} and seen["texts"][0].endswith("France?<gen>")
    assert "search tool" not in seen["texts"][0]  # the no-search system prompt


def test_trl_still_has_the_rollout_api_the_adapter_was_read_from():
    """trl_rollouts drives TRL's private tool loop (no public route in TRL 1.16): this fails when TRL changes it."""
    import trl
    from trl import GRPOTrainer

    api = S.TRL_ROLLOUT_API
    assert trl.__version__ == api["trl"], f"TRL {trl.__version__}: re-read {api} in trainer/grpo_trainer.py"
    generate = getattr(GRPOTrainer, api["method"])
    assert list(inspect.signature(generate).parameters) == ["self", "prompts"]
    source = inspect.getsource(generate)
    assert "return prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields" in source
    loop = inspect.getsource(GRPOTrainer._tool_call_loop)
    assert all(f"self.{name}[" in loop for name in api["tool_dicts"])
    from trl.generation.vllm_generation import VLLMGeneration

    assert "temperature = self.temperature" in inspect.getsource(VLLMGeneration.generate)  # greedy with vLLM: 0.0


@pytest.mark.slow
def test_a_search_run_killed_after_a_checkpoint_resumes_to_the_same_record(search_micro_model, tmp_path):
    """``trgrpo train`` as notebook 07 launches it; SIGKILL once a checkpoint is on disk; the same command
    again resumes and ends with the record of an uninterrupted run."""
    from trgrpo.runs.fullscale import write_specs

    spec = micro_spec(search_micro_model, STEPS=12, SAVE_STEPS=2, SCALE="resume")
    cfg = write_specs([spec], tmp_path / "spec.yaml")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRGRPO_CHECKPOINTS": str(tmp_path / "ckpt")}
    cmd = [sys.executable, "-m", "trgrpo", "train", "--config", str(cfg), "--results", str(tmp_path / "res")]
    ckpt_dir, record = tmp_path / "ckpt" / spec.group / spec.name, tmp_path / "res" / spec.group / f"{spec.name}.json"
    child = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while not list(ckpt_dir.glob("checkpoint-*/trainer_state.json")):
            assert child.poll() is None, child.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint within 300 s"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        assert child.wait(60) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert not record.exists()
    resumed_cmd = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert resumed_cmd.returncode == 0, resumed_cmd.stderr[-3000:]
    resumed = read_record(record)
    assert resumed["resumed_from"] and 0 < resumed["steps_run"] < spec.steps
    full = micro_spec(search_micro_model, STEPS=12, SAVE_STEPS=2, SCALE="full")
    full = run(full, results_dir=tmp_path / "res2", checkpoint_dir=tmp_path / "ck2", verbose=False)
    # sampling-dependent figures of every step (a resume that lost the RNG state or re-ran steps differs)
    keys = ("step", "num_tokens", "completions/mean_length", "entropy", "reward", "loss")
    flat = [[float(h[k]) for k in keys] for h in resumed["history"]]
    assert sum(map(len, flat)) == len(keys) * spec.steps and len({row[2] for row in flat}) > 1
    assert sum(flat, []) == pytest.approx(sum([[float(h[k]) for k in keys] for h in full["history"]], []), rel=1e-5)
    for part in ("initial", "final", "baseline_no_search"):
        assert resumed[part]["em"] == full[part]["em"]


def test_greedy_rollouts_set_vllms_temperature_to_zero_and_back():
    """Evaluation is greedy on either engine: HF's generation config, and vLLM's temperature (TRL reads it from
    ``trainer.vllm_generation``, not from the generation config); both restored for training."""
    from transformers import GenerationConfig

    seen = {}

    class Model:
        training = True

        def eval(self):
            self.training = False

        def train(self, mode=True):
            self.training = mode

    class Trainer:
        model, vllm_generation = Model(), SimpleNamespace(temperature=0.8)
        generation_config = GenerationConfig(do_sample=True, temperature=0.8)

        def _generate(self, prompts):
            seen.update(vllm=self.vllm_generation.temperature, hf=self.generation_config.do_sample)
            completions = [[{"role": "assistant", "content": "<answer>Paris</answer>"}] for _ in prompts]
            return [[1]] * len(prompts), [[2, 3]] * len(prompts), [[1, 1]] * len(prompts), completions, None

    trainer = Trainer()
    rows = S.trl_rollouts(trainer, [{"question": "Capital of France?", "answers": ["Paris"]}], [])
    assert seen == {"vllm": 0.0, "hf": False} and rows[0]["em"]
    assert trainer.vllm_generation.temperature == 0.8 and trainer.generation_config.do_sample and trainer.model.training


@pytest.mark.slow
def test_a_search_run_on_two_processes_evaluates_on_every_rank(search_micro_model, tmp_path, monkeypatch):
    """accelerate launch, 2 CPU processes (as on 2 GPUs): TRL's rollout gathers across ranks, so every rank evaluates
    (the main process alone would wait forever for the others); one record, the evaluation before and after."""


    monkeypatch.setattr(checkpoints, "CHECKPOINT_DIR", tmp_path / "ckpt")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    spec = micro_spec(search_micro_model, STEPS=1, PROMPTS_PER_STEP=2, MICRO_BATCH_SIZE=1, SCALE="two")
    spec = spec.replace(ddp_timeout_s=120)
    (rec,) = fullscale.launch([spec], gpus=0, cpu_processes=2, results_dir=tmp_path / "res", log_dir=tmp_path / "log")
    assert rec["batch"]["world_size"] == 2 and rec["batch"]["global_completions_per_step"] == 4
    assert rec["initial"]["n"] == rec["final"]["n"] == 2 and rec["baseline_no_search"]["n"] == 2


@pytest.mark.slow
def test_the_server_reads_a_search_r1_corpus_file(tmp_path):
    """``--corpus FILE``: Search-R1's JSONL (``{"id", "contents": '"Title"\\ntext'}``), served in the same protocol."""
    rows = [
        {"id": "0", "contents": '"Hamlet"\nHamlet is a tragedy written by William Shakespeare.'},
        {"id": "1", "contents": '"Paris"\nParis is the capital of France.'},
    ]
    corpus = tmp_path / "wiki.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with fullscale.retrieval_server("--corpus", str(corpus)) as url:
        (hits,) = ServerRetriever(url, timeout=10).batch_search(["who wrote hamlet"], 1)
    assert hits[0]["id"] == "0" and hits[0]["title"] == "Hamlet" and hits[0]["text"].startswith("Hamlet is")
