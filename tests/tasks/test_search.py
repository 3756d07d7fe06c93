"""Agentic search (Section 4.1, App. B.1.3, Eq. 14): corpus, retriever, reward, tool errors, tool masking."""

from __future__ import annotations

import inspect
import json
import logging
import math
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from trgrpo.runs import checkpoints, fullscale, records
from trgrpo.runs.experiment import run
from trgrpo.runs.spec import RunSpec
from trgrpo.tasks import search as S
from trgrpo.tasks import search_data
from trgrpo.tasks.search_data import ServerRetriever, make_corpus


@pytest.fixture(scope="module")
def corpus():
    return make_corpus(0)


@pytest.fixture(scope="module")
def tool(corpus):
    return S.make_search_tool(search_data.make_retriever("bm25", corpus.passages), top_k=2)


def test_reward_follows_eq14():
    gold = [["Kelmouth"]] * 3
    exact = "<answer>Kelmouth</answer>"
    normalised = "<answer> The  kelmouth! </answer>"  # case, article, punctuation, whitespace
    wrong = "<answer>Roves</answer>"
    assert S.search_reward([exact, normalised, wrong], answers=gold) == [1.0, 1.0, -1.0]
    # the last answer counts; no answer is wrong
    assert S.search_reward(["<answer>Roves</answer> <answer>Kelmouth</answer>", "Kelmouth"], [["Kelmouth"]] * 2) == [
        1.0,
        -1.0,
    ]
    # tool conversations: only the model's own turns count, not a retrieved passage
    convo = [
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "search"}}]},
        {"role": "tool", "name": "search", "content": "<answer>Kelmouth</answer>"},
        {"role": "assistant", "content": "<answer>Kelmouth</answer>"},
    ]
    assert S.search_reward([convo, convo[:2]], answers=gold[:2]) == [1.0, -1.0]
    # never raises, whatever arrives
    weird = [None, 17, {"content": None}, [None, "x"], "<answer>", "\x00<answer>\ud800</answer>", b"<answer>x</answer>"]
    assert S.search_reward(weird, answers=[None, 3, ["a"], [], "x", ["\ud800"], ["x"]]) == [-1.0] * 5 + [1.0, -1.0]
    assert S.search_reward(["<answer>1817</answer>"], answers=[[1817]]) == [1.0]
    assert S.normalize_answer("The Kobrafeir Guild.") == "kobrafeir guild"


def test_malformed_tool_calls_get_a_clear_error_message(tool, tiny_model_dir):
    assert tool(q="x").startswith("Error: search takes one argument, 'query'")
    assert tool(query="  ").startswith("Error: search needs a non-empty 'query' string")
    assert "Doc 1 (Title:" in tool(query="anything at all about a city")
    from transformers import AutoTokenizer

    tok = S.prepare_tokenizer(AutoTokenizer.from_pretrained(tiny_model_dir))
    prefix = tok.apply_chat_template(S.search_messages("Who?"), tools=[tool], add_generation_prompt=True)
    bad = tok('<tool_call>\n{"name": "search", "arguments": {"query": "Roves"\n</tool_call><|im_end|>')["input_ids"]
    parsed = tok.parse_response(bad, prefix=prefix, tools=[tool])
    fn = parsed["tool_calls"][0]["function"]
    assert fn["name"] == "search" and S.MALFORMED_KEY in fn["arguments"]
    assert tool(**fn["arguments"]).startswith("Error: could not parse the tool call")
    good = tok(S.tool_call_text("Roves") + "<|im_end|>")["input_ids"]
    assert tok.parse_response(good, prefix=prefix, tools=[tool])["tool_calls"][0]["function"]["arguments"] == {
        "query": "Roves"
    }


@pytest.fixture(scope="module")
def scripted_trainer(corpus, tiny_model_dir, tmp_path_factory):
    """A search trainer on the tiny model whose sampling is scripted (:func:`_scripted_generate`)."""
    from trgrpo.runs.experiment import build_trainer
    from trgrpo.tasks import get_task

    spec = RunSpec(
        task="search",
        model=str(tiny_model_dir),
        steps=1,
        prompts_per_step=2,
        num_generations=3,
        max_completion_length=300,
        n_train=2,
        n_eval=0,
        task_options={"template": "compact", "top_k": 2, "max_tool_calls": 2},
    )
    trainer = build_trainer(spec, get_task("search"), tmp_path_factory.mktemp("scripted"), world_size=1, verbose=False)[
        0
    ]
    _scripted_generate(
        trainer, trainer.processing_class, {q["question"]: q["answers"][0] for q in corpus.questions["test"]}
    )
    return trainer


class Counting:
    """A retriever that records each batch it is sent, or fails every one."""

    def __init__(self, inner=None):
        self.inner, self.batches = inner, []

    def batch_search(self, queries, k):
        self.batches.append(list(queries))
        if self.inner is None:
            raise ConnectionError("retrieval server http://127.0.0.1:9/retrieve: no answer")
        return self.inner.batch_search(queries, k)


def test_one_tool_loop_round_is_one_retrieval_request(scripted_trainer, corpus):
    """Issue 45 defect 1: each search was one request with one query (TRL calls the tool one rollout at a time,
    grpo_trainer.py:1965-1982). The parser's hook queues the round's queries; the first call sends them together."""
    records = corpus.questions["test"][:6]
    retriever = Counting(search_data.BM25Retriever(corpus.passages))
    tool = S.make_search_tool(retriever, top_k=2)
    scripted_trainer.processing_class.expect_tool_calls = tool.expect
    try:
        rows = S.trl_rollouts(scripted_trainer, records, [tool])
    finally:
        del scripted_trainer.processing_class.expect_tool_calls
    asked = [r["question"] for r in records[::3]]  # the scripted good calls: rollouts 0 and 3
    assert retriever.batches == [asked] and tool.stats["calls"] == 2 and tool.stats["batches"] == 1
    one_by_one = S.make_search_tool(search_data.BM25Retriever(corpus.passages), top_k=2)
    tok = scripted_trainer.processing_class
    for row, query in zip(rows[::3], asked):  # the same passages as one request per query
        assert S.format_passages([]) != one_by_one(query=query) and one_by_one(query=query) in tok.decode(
            row["completion_ids"]
        )


def test_a_failed_retrieval_is_counted_by_trls_tool_loop_and_the_tool(scripted_trainer, corpus):
    """Issue 45 defect 1 / 48 item 8: a retrieval that failed came back as an 'Error:' tool response, a normal result
    for TRL (tools/failure_frequency 0). Now the tool raises: TRL's loop counts the failure and the rollout goes on
    with the error as the tool's response; the tool counts it for the record (:func:`search.retrieval_counts`)."""
    tool = S.make_search_tool(Counting(), top_k=2)
    scripted_trainer._metrics["eval"].clear()
    rows = S.trl_rollouts(scripted_trainer, corpus.questions["test"][:6], [tool])
    metrics = scripted_trainer._metrics["eval"]
    # two good calls (failed) and two malformed ones (an 'Error:' response, the model's doing) of six rollouts
    assert metrics["tools/failure_frequency"] == [0.5] and metrics["tools/call_frequency"] == [pytest.approx(4 / 6)]
    assert all(row["answer"] for row in rows)  # every rollout went on to its answer
    assert S.retrieval_counts(scripted_trainer, tool) == {
        "calls": 2,
        "failures": 2,
        "batches": 2,
        "errors": ["the retriever failed (ConnectionError: retrieval server http://127.0.0.1:9/retrieve: no answer)"]
        * 2,
    }


def test_each_rank_rolls_out_its_share_of_the_evaluation():
    """Issue 45 defect 1: every rank evaluated every question (8x duplicated on 8 GPUs). Each rank takes every
    world-th record, padded to the same count (TRL's _generate gathers once per call); ZeRO-3 without vLLM keeps every
    rank on every record (each round's generation gathers the sharded weights)."""

    def trainer(world, rank, stage=None, use_vllm=False):
        plugin = SimpleNamespace(zero_stage=stage) if stage else None
        acc = SimpleNamespace(num_processes=world, process_index=rank, state=SimpleNamespace(deepspeed_plugin=plugin))
        return SimpleNamespace(accelerator=acc, use_vllm=use_vllm)

    shares = [S.rank_share(trainer(3, r), 7) for r in range(3)]
    assert shares == [([0, 3, 6], 3), ([1, 4, 0], 2), ([2, 5, 0], 2)]
    assert sorted(j for share, real in shares for j in share[:real]) == list(range(7))
    assert S.rank_share(trainer(1, 0), 5) == ([0, 1, 2, 3, 4], 5)
    assert S.rank_share(trainer(4, 3), 2) == ([0], 0)  # fewer records than ranks: one padded rollout
    assert S.rank_share(trainer(2, 1, stage=3), 4) == ([0, 1, 2, 3], 4)
    assert S.rank_share(trainer(2, 1, stage=3, use_vllm=True), 4) == ([1, 3], 2)
    assert S.rank_share(trainer(2, 1, stage=2), 4) == ([1, 3], 2)


def _scripted_generate(trainer, tok, answers_by_question):
    """Replace the model's sampling by scripted turns: a good call, a malformed call, or a direct answer."""
    calls = {"n": 0}

    def fake(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        out = []
        for i, ids in enumerate(prompt_ids):
            text = tok.decode(ids)
            question = text.rsplit("Question: ", 1)[1].split("<|im_end|>")[0]
            answer = answers_by_question[question]
            if "<tool_response>" in text:
                reply = f"<answer>{answer}</answer>"
            elif i % 3 == 0:
                reply = S.tool_call_text(question)
            elif i % 3 == 1:
                reply = '<tool_call>\n{"name": "search", "arguments": {"query": \n</tool_call>'
            else:
                reply = "<answer>no idea</answer>"
            out.append(tok(reply + tok.eos_token, add_special_tokens=False)["input_ids"])
        calls["n"] += 1
        return out, None

    trainer._generate_single_turn = fake
    return calls


def test_tool_tokens_get_no_gradient(corpus, tool, tiny_model_dir, tmp_path, monkeypatch):
    import trgrpo.trainer as trainer_module

    records = [q for q in corpus.questions["train"] if q["type"] == "one-hop"][:2]
    from trgrpo.runs.experiment import build_trainer
    from trgrpo.tasks import get_task

    spec = RunSpec(
        task="search",
        model=str(tiny_model_dir),
        steps=1,
        prompts_per_step=2,
        num_generations=3,
        max_completion_length=300,
        learning_rate=1e-3,
        n_train=2,
        n_eval=0,
        task_options={"template": "compact", "top_k": 2, "max_tool_calls": 2},
    )
    trainer = build_trainer(spec, get_task("search"), tmp_path, world_size=1, verbose=False)[0]
    tok = trainer.processing_class
    _scripted_generate(trainer, tok, {q["question"]: q["answers"][0] for q in corpus.questions["train"]})

    seen = {}
    original_loss = trainer_module.tr_grpo_loss

    def spy(per_token_logps, old, advantages, mask, weights, **kw):
        out = original_loss(per_token_logps, old, advantages, mask, weights, **kw)
        # Changing the log-probs of masked (tool) tokens changes nothing: they are out of the loss.
        shifted = per_token_logps + (1 - mask) * 3.0
        again = original_loss(shifted, old, advantages, mask, weights, **kw)
        seen.update(mask=mask.detach().clone(), loss=out.loss.detach(), loss_shifted=again.loss.detach())
        return out

    monkeypatch.setattr(trainer_module, "tr_grpo_loss", spy)
    original_gen = trainer._generate_and_score_completions

    def keep_inputs(inputs):
        batch = original_gen(inputs)
        seen["batch"] = batch
        return batch

    trainer._generate_and_score_completions = keep_inputs
    trainer.train()

    batch, mask = seen["batch"], seen["mask"]
    assert "tool_mask" in batch
    expected = (batch["completion_mask"] * batch["tool_mask"]).to(mask.dtype)
    # TRL shuffles the generation batch before the loss: compare the rows as a multiset.
    assert sorted(map(tuple, mask.tolist())) == sorted(map(tuple, expected.tolist()))
    assert (mask == 0).logical_and(batch["completion_mask"] == 1).any(), "no tool token reached the loss mask"
    assert torch.equal(seen["loss"], seen["loss_shifted"])
    assert not math.isclose(float(seen["loss"]), 0.0)
    malformed = 0
    for ids, cm, tm in zip(batch["completion_ids"], batch["completion_mask"], batch["tool_mask"]):
        tool_text = tok.decode([t for t, c, m in zip(ids.tolist(), cm.tolist(), tm.tolist()) if c and not m])
        model_text = tok.decode([t for t, c, m in zip(ids.tolist(), cm.tolist(), tm.tolist()) if c and m])
        assert "<tool_response>" not in model_text and "Doc 1" not in model_text
        if tool_text:
            assert "<tool_response>" in tool_text
            malformed += "Error: could not parse the tool call" in tool_text
    assert malformed >= 1  # the malformed calls got an error message and their rollouts went on
    rewards = [h for h in trainer.state.log_history if "reward" in h][0]
    assert -1.0 < rewards["reward"] < 1.0

    # The warm start lays out a trajectory exactly as TRL's tool loop does (tool suffix tokens).
    turns = S.scripted_turns(records[0], tool)
    ids, own = S.encode_trajectory(tok, S.search_messages(records[0]["question"]), turns, [tool])
    suffix = trainer._get_tool_suffix_ids([turns[1]])
    text_ids = tok.apply_chat_template(
        S.search_messages(records[0]["question"]), tools=[tool], add_generation_prompt=True, return_dict=False
    )
    call = tok(S.tool_call_text(records[0]["queries"][0]) + tok.eos_token, add_special_tokens=False)["input_ids"]
    assert ids[: len(text_ids) + len(call) + len(suffix)] == list(text_ids) + call + list(suffix)
    assert own[: len(text_ids)] == [0] * len(text_ids) and own[len(text_ids) : len(text_ids) + len(call)] == [1] * len(
        call
    )


def test_micro_model_tokenizer_round_trips_and_renders_tool_calls(corpus, tool, tmp_path, monkeypatch):
    monkeypatch.setenv("TRGRPO_CACHE", str(tmp_path))
    tok = S.load_tokenizer(S.micro_model(corpus, tool, hidden=16, layers=1))
    q = corpus.questions["train"][0]
    msgs = S.search_messages(q["question"]) + S.scripted_turns(q, tool)
    texts = [S.format_passages([p]) for p in corpus.passages[:40]]
    texts.append(tok.apply_chat_template(msgs, tools=[tool], tokenize=False))
    for t in texts:
        assert tok.decode(tok(t, add_special_tokens=False)["input_ids"]) == t
    from trl.chat_template_utils import is_chat_template_prefix_preserving, supports_tool_calling

    assert supports_tool_calling(tok) and is_chat_template_prefix_preserving(tok)


def micro_spec(model, **options):
    """A one-step search run spec on the micro ``model`` (CPU seconds), as notebook 07's smoke parameters make it."""
    from trgrpo.runs import fullscale

    params = dict(MODEL="micro", TEMPLATE="compact", RETRIEVER="bm25", CORPUS="synthetic", SCALE="unit")
    params |= dict(SCHEMES=["tr"], SEEDS=[0], STEPS=1, PROMPTS_PER_STEP=1, NUM_GENERATIONS=2, TEMPERATURE=0.8)
    params |= dict(LEARNING_RATE=1e-4, MAX_COMPLETION_LENGTH=48, MAX_TOOL_CALLS=1, TOP_K=1, N_TRAIN=4, N_EVAL=2)
    params |= dict(GRADIENT_CHECKPOINTING=False, **options)
    (spec,) = fullscale.specs_from_parameters("search", params, init_model=model)
    return spec


def test_a_search_run_writes_one_record_of_the_common_schema(search_micro_model, tmp_path, monkeypatch):
    """A search run is a RunSpec of the task ``search`` trained by trgrpo.runs.experiment.run: one record of the common
    schema, written once, with the task's fields (EM curve, example rollout, the no-search baseline through the run's
    engine, the data's sources) and a checkpoint every save_steps."""
    from pathlib import Path

    from trgrpo import files
    from trgrpo.runs import experiment as R

    spec = micro_spec(search_micro_model, SAVE_STEPS=1)
    writes: list[Path] = []
    real = files.write_json
    spy = lambda p, rec: (writes.append(Path(p)), real(p, rec))[1]  # noqa: E731
    monkeypatch.setattr(R, "write_json", spy)  # the checkpoints' clock
    monkeypatch.setattr(records, "write_json", spy)  # the record
    warnings, seen = logging.getLogger("transformers"), logging.Handler(logging.WARNING)
    seen.emit = lambda r: messages.append(r.getMessage())
    messages: list[str] = []
    warnings.addHandler(seen)
    try:
        rec = R.run(spec, results_dir=tmp_path, checkpoint_dir=tmp_path / "ckpt", resume=False, verbose=False)
    finally:
        warnings.removeHandler(seen)
    assert not [m for m in messages if "PAD/BOS/EOS" in m]  # the config names the tokenizer's special tokens
    path = tmp_path / "search/unit" / f"{spec.name}.json"
    assert [w for w in writes if not w.is_relative_to(tmp_path / "ckpt")] == [path], (writes, path)  # the record, once
    assert spec.name == "search-micro-tr-seed0"
    saved = records.read_record(path)
    assert (saved["task"], saved["scheme"], saved["kind"]) == ("search", "tr", "run")
    assert [e["step"] for e in saved["eval_curve"]] == [0, 1] and saved["example_rollout"]["completion_ids"]
    assert saved["baseline_no_search"]["engine"] == "hf" and saved["baseline_no_search"]["n"] == 2
    assert saved["data_source"]["corpus"] == "synthetic" and "fallback" in saved["data_source"]
    assert saved["spec"]["task_options"]["scale"] == "unit" and saved["batch"]["global_completions_per_step"] == 2
    assert (tmp_path / "ckpt" / "search/unit" / spec.name / "checkpoint-1" / "trainer_state.json").exists()
    assert [r["name"] for r in records.load_results("search/unit", tmp_path)] == [rec["name"]]


def test_a_search_run_trains_with_the_config_of_the_search_trainer(tmp_path):
    """A search spec's config is experiment.make_config's plus the task's tool-call budget: equal to TRL's own
    config for the same settings (checkpoints every save_steps, bf16 and gradient checkpointing from the spec)."""
    from trgrpo.runs.experiment import make_config
    from trgrpo.tasks import get_task
    from trgrpo.trainer import TRGRPOConfig

    spec = RunSpec(
        task="search",
        scheme="reverse",
        steps=3,
        prompts_per_step=2,
        num_generations=4,
        max_completion_length=64,
        temperature=0.8,
        learning_rate=1e-5,
        seed=3,
        save_steps=2,
        gradient_checkpointing=True,
        placement="surrogate",
        task_options={"max_tool_calls": 2},
    )
    run_cfg = make_config(spec, tmp_path, world_size=1, **get_task("search").config(spec))
    cuda = torch.cuda.is_available()
    ref = TRGRPOConfig(  # TRL's own config for this spec
        output_dir=str(tmp_path),
        seed=3,
        data_seed=3,
        max_steps=3,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=64,
        max_tool_calling_iterations=2,
        temperature=0.8,
        learning_rate=1e-5,
        weight_scheme="reverse",
        logging_steps=1,
        save_strategy="steps",
        save_steps=2,
        save_total_limit=1,
        report_to="none",
        use_cpu=not cuda,
        bf16=False,
        gradient_checkpointing=True,
        dataloader_num_workers=0,
        lr_scheduler_type="constant",
        weight_placement="surrogate",
        ddp_timeout=6 * 3600,
        vllm_importance_sampling_correction=False,  # the spec's 'off', as verl
        vllm_gpu_memory_utilization=0.5,  # RunSpec's one default (TRL's own is 0.3)
    )
    a, b = run_cfg.to_dict(), ref.to_dict()
    # disable_tqdm follows transformers' log level when the config is made (other tests in the worker change it)
    assert {k: a[k] for k in a if k != "disable_tqdm"} == {k: b[k] for k in b if k != "disable_tqdm"}


def test_search_is_a_registered_run_task():
    """``task: search`` in a run spec (trgrpo train) builds the offline corpus, its questions and the tool
    from ``task_options``; an unknown corpus is named."""
    from trgrpo.tasks import get_task

    spec = RunSpec(task="search", n_train=3, n_eval=2, task_options={"top_k": 1, "template": "compact"})
    task = get_task("search")
    train, evals = task.build(spec, None)
    assert len(train) == 3 and len(evals) == 2 and "prompt" in train.column_names
    (tool,) = task.trainer_kwargs(spec)["tools"]
    assert tool.__name__ == "search" and "Doc 1" in tool(evals[0]["question"])
    assert task.evaluate_with_trainer and task.reward_funcs(spec) == [S.search_reward]
    with pytest.raises(ValueError, match="task_options.corpus must be 'synthetic' or 'searchr1', got 'wiki-2018'"):
        task.build(RunSpec(task="search", task_options={"corpus": "wiki-2018"}), None)
    with pytest.raises(ValueError, match=r"task_options.topk is not a known field"):
        task.build(RunSpec(task="search", task_options={"topk": 3}), None)
    with pytest.raises(ValueError, match="retriever: server"):
        task.build(RunSpec(task="search", task_options={"corpus": "searchr1"}), None)


def test_a_rollout_renders_newline_tokens_as_small_marks():
    """One span per token with its id and mask; a run of newline tokens shows as ↵ marks and breaks the line once."""
    import re

    class Tok:
        pieces = {1: "Paris", 2: "\n", 3: "\n\n", 4: " is", 5: "<|im_end|>"}

        def decode(self, ids):
            return "".join(self.pieces[i] for i in ids)

    ids, mask = [1, *[2] * 96, 3, 4, 2, 5], [1] * 98 + [0, 0, 1]
    out = S.render_rollout_html(Tok(), {"completion_ids": ids, "tool_mask": mask})
    titles = re.findall(r'<span [^>]*title="id (\d+), tool_mask (\d)">', out)
    assert [(int(i), int(m)) for i, m in titles] == list(zip(ids, mask))
    assert out.count("↵") == 96 + 2 + 1 and out.count("\n") == 2  # one break after each run of newline tokens
    assert "Paris</span><span" in out and "&lt;|im_end|&gt;" in out


# From test_search_scale.py: Search at full scale (issue "search-scale"): the retrieval server as its own process
# speaking Search-R1's /retrieve protocol, a search run and its evaluation through it, one clear line for a server
# that is down, slow or answers garbage; the planner on the search plans; the no-search baseline's engine; TRL's
# rollout API the adapter relies on; a search run launched as a process, killed after a checkpoint and resumed to the
# same record (slow).


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server_url():
    """scripts/retrieval_server.py on a free port of 127.0.0.1 (BM25 over the generated corpus), stopped afterwards."""
    with fullscale.retrieval_server("--corpus-seed", "0", wait_s=60) as url:
        yield url


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
    assert rec["retrieval"]["failures"] == 0 and rec["retrieval"]["errors"] == []  # every search answered, counted
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
            ServerRetriever(url, timeout=0.3, retries=0).check()
    finally:
        if httpd is not None:
            httpd.shutdown()
    assert time.monotonic() - t0 < 2.5 and "\n" not in str(err.value) and url in str(err.value)
    tool = S.make_search_tool(ServerRetriever(url, timeout=0.3, retries=0))  # inside a rollout: counted, raised
    with pytest.raises(S.RetrievalFailure, match=r"^the retriever failed \(ConnectionError: retrieval server"):
        tool(query="x")
    assert tool.stats["calls"] == tool.stats["failures"] == 1 and url in tool.stats["errors"][0]


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
        "timeout 30 s) after 4 tries; start one: python scripts/retrieval_server.py --port PORT (docs/gpu.md, "
        "'Retrieval server')"
    ]
    assert not (tmp_path / "ckpt").exists() and not list(tmp_path.rglob("*.json"))


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
        accelerator = SimpleNamespace(num_processes=1, process_index=0, state=SimpleNamespace())
        generation_config = GenerationConfig(do_sample=True, temperature=0.8)

        def _generate(self, prompts):
            seen.update(vllm=self.vllm_generation.temperature, hf=self.generation_config.do_sample)
            completions = [[{"role": "assistant", "content": "<answer>Paris</answer>"}] for _ in prompts]
            return [[1]] * len(prompts), [[2, 3]] * len(prompts), [[1, 1]] * len(prompts), completions, None

    trainer = Trainer()
    rows = S.trl_rollouts(trainer, [{"question": "Capital of France?", "answers": ["Paris"]}], [])
    assert seen == {"vllm": 0.0, "hf": False} and rows[0]["em"]
    assert trainer.vllm_generation.temperature == 0.8 and trainer.generation_config.do_sample and trainer.model.training


@pytest.mark.slow  # a 2-process search run (torchrun, gloo on CPU) against the server: about a minute on 2 cores
def test_a_two_process_search_run_splits_its_evaluation_and_counts_searches_over_ranks(
    server_url, search_micro_model, tmp_path, monkeypatch
):
    """Issue 45 defect 1: the evaluation is split across the ranks (each rolls out half, TRL gathers), the record's
    ``retrieval`` counts every rank's searches, and a round's queries reach the server as one request."""
    from trgrpo import files

    monkeypatch.setattr(checkpoints, "CHECKPOINT_DIR", tmp_path / "ckpt")
    monkeypatch.setattr(files, "CHECKPOINT_DIR", tmp_path / "ckpt")  # what launch hands the processes
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    spec = micro_spec(
        search_micro_model,
        RETRIEVER="server",
        RETRIEVER_URL=server_url,
        STEPS=1,
        N_EVAL=4,
        PROMPTS_PER_STEP=2,
        MICRO_BATCH_SIZE=1,
        SCALE="two",
    )
    spec = spec.replace(ddp_timeout_s=300)
    (rec,) = fullscale.launch([spec], gpus=0, cpu_processes=2, results_dir=tmp_path / "res", log_dir=tmp_path / "log")
    assert rec["batch"]["world_size"] == 2
    assert rec["initial"]["rollout_ranks"] == rec["final"]["rollout_ranks"] == 2
    assert rec["initial"]["n"] == rec["final"]["n"] == 4 and rec["final"]["retrieval_failures"] == 0
    assert rec["retrieval"]["failures"] == 0 and rec["retrieval"]["batches"] <= rec["retrieval"]["calls"]
