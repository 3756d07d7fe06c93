"""Agentic search, Search-R1 style (App. B.1.3, Eq. 14, Table 3), the run task ``search``: a ``search`` tool in
TRL's tool loop, the Eq. 14 reward, greedy evaluation through the trainer; for CPU runs a micro model and a warm start.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import html
import inspect
import itertools
import json
import os
import random
import re
import string
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import model_validator

from trgrpo.tasks import Task, TaskOptions, register_task
from trgrpo.tasks.generation import greedy_generate
from trgrpo.tasks.search_data import (
    FLASHRAG_REPO,
    RETRIEVERS,
    SEARCHR1_TRAIN_REPO,
    TABLE3_DATASETS,
    Corpus,
    load_qa,
    load_searchr1_train,
    make_corpus,
    make_retriever,
    sample_questions,
)
from trgrpo.tasks.search_template import MALFORMED_KEY, SEARCH_TOOL_NAME, TEMPLATES, prepare_tokenizer


def format_passages(hits: Sequence[dict[str, Any]], *, max_chars: int = 400) -> str:
    """Search-R1's ``_passages2string``: one ``Doc i (Title: ...) text`` line per hit."""
    if not hits:
        return "No results found."
    lines = []
    for i, h in enumerate(hits, 1):
        text = str(h.get("text", ""))
        if len(text) > max_chars:
            text = text[:max_chars].rsplit(" ", 1)[0] + " ..."
        lines.append(f"Doc {i} (Title: {h.get('title', '')}) {text}")
    return "\n".join(lines)


def tool_call_text(query: str) -> str:
    """The text of one search call, exactly as the Qwen2.5 chat template renders it."""
    payload = json.dumps({"query": query}, ensure_ascii=False)
    return f'<tool_call>\n{{"name": "{SEARCH_TOOL_NAME}", "arguments": {payload}}}\n</tool_call>'


class RetrievalFailure(RuntimeError):
    """A search the retriever could not answer: raised out of the tool, so TRL's tool loop counts it
    (``tools/failure_frequency``) and the rollout goes on with an error as the tool's response."""


def make_search_tool(retriever: Any, *, top_k: int = 3, max_query_chars: int = 300) -> Callable[..., str]:
    """A ``search(query: str) -> str`` tool for ``GRPOTrainer(tools=[...])``. A bad or unparseable call (the model's
    doing) gets an ``Error: ...`` tool response; a retriever that fails raises :class:`RetrievalFailure` and is
    counted in ``search.stats`` (``calls``, ``failures``, ``batches`` sent, the first ``errors``), which the run's
    record reports. ``search.expect(tool_calls)`` (the parser's hook, :func:`prepare_tokenizer`) queues the queries
    of parsed calls: the first call that misses sends every queued query in one ``batch_search``, so one tool-loop
    round of a generation batch is one request (TRL calls the tool one rollout at a time)."""
    stats: dict[str, Any] = {"calls": 0, "failures": 0, "batches": 0, "errors": []}
    queued: list[str] = []  # queries of parsed calls, not searched yet
    answered: dict[str, list] = {}  # the last batch's hits by query

    def clean(query: Any) -> str | None:
        return query.strip()[:max_query_chars] if isinstance(query, str) and query.strip() else None

    def expect(tool_calls: Any) -> None:
        for call in tool_calls or []:
            fn = call.get("function", call) if isinstance(call, dict) else None
            args = fn.get("arguments") if isinstance(fn, dict) and fn.get("name") == SEARCH_TOOL_NAME else None
            if isinstance(args, dict) and set(args) == {"query"} and (q := clean(args["query"])) is not None:
                queued.append(q)

    def search(query: str = "", **kwargs) -> str:
        if MALFORMED_KEY in kwargs:
            raw = str(kwargs[MALFORMED_KEY])[:120]
            return (
                f"Error: could not parse the tool call {raw!r}. Call the tool as "
                f"{tool_call_text('your query')!r} (JSON with a name and an arguments object)."
            )
        if kwargs:
            return f"Error: search takes one argument, 'query' (a string); got {sorted(kwargs)}."
        if (q := clean(query)) is None:
            return "Error: search needs a non-empty 'query' string."
        stats["calls"] += 1
        if q not in answered:  # a new round: this query and every queued one in one request
            batch = list(dict.fromkeys([q, *queued]))
            queued.clear()
            answered.clear()
            stats["batches"] += 1
            try:
                answered.update(zip(batch, retriever.batch_search(batch, top_k)))
            except Exception as e:  # counted, and raised for TRL's count; TRL's loop catches it, the rollout goes on
                stats["failures"] += 1
                message = f"the retriever failed ({type(e).__name__}: {e})"
                if len(stats["errors"]) < 3:
                    stats["errors"].append(message)
                raise RetrievalFailure(message) from None
        return format_passages(answered[q])

    search.__doc__ = """Search the encyclopedia and return the most relevant passages.

    Args:
        query: the words to search for, e.g. a name
    """
    search.__signature__ = inspect.Signature(
        [inspect.Parameter("query", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str)], return_annotation=str
    )
    search.__name__ = search.__qualname__ = SEARCH_TOOL_NAME
    search.retriever = retriever
    search.top_k = top_k
    search.stats = stats
    search.expect = expect
    return search


SYSTEM_PROMPT = (
    "Answer the question. Use the search tool to look up facts, as often as you need. "
    "Write the final answer as <answer>...</answer>."
)
NO_SEARCH_SYSTEM_PROMPT = "Answer the question from your own knowledge. Write the final answer as <answer>...</answer>."


def search_messages(question: str, *, search: bool = True) -> list[dict[str, str]]:
    """The chat prompt: a system message (the tool schema is appended by the template) and the question."""
    system = SYSTEM_PROMPT if search else NO_SEARCH_SYSTEM_PROMPT
    return [{"role": "system", "content": system}, {"role": "user", "content": f"Question: {question}"}]


def search_dataset(records: Sequence[dict[str, Any]]):
    """A ``datasets.Dataset`` for ``GRPOTrainer``: ``prompt`` (messages) and ``answers`` (:func:`search_reward`'s)."""
    from datasets import Dataset

    rows = [{"prompt": search_messages(r["question"]), "answers": [str(a) for a in r["answers"]]} for r in records]
    return Dataset.from_list(rows)


_PUNCTUATION = re.compile(f"[{re.escape(string.punctuation)}]+")
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")


def normalize_answer(s: Any) -> str:
    """SQuAD normalisation: lowercase, drop punctuation and the articles a/an/the, collapse whitespace (linear)."""
    text = _PUNCTUATION.sub("", str(s)).lower()
    return " ".join(_ARTICLES.sub(" ", text).split())


_TAG = re.compile(r"<(/?)answer>", re.IGNORECASE)


def extract_answer(text: Any) -> str | None:
    """The content of the last ``<answer>...</answer>`` (Search-R1's last match of ``<answer>(.*?)</answer>``, any
    case), or None; one pass over the tags (the regex is quadratic on unclosed tags)."""
    if not isinstance(text, str):
        return None
    last, start = None, None
    for tag in _TAG.finditer(text):
        if not tag.group(1):  # an opening tag: the first one after the last match opens the next
            start = tag.end() if start is None else start
        elif start is not None:
            last, start = (start, tag.start()), None
    return text[last[0] : last[1]].strip() if last else None


def exact_match(prediction: Any, answers: Any) -> bool:
    """Normalised exact match against any gold answer."""
    if prediction is None:
        return False
    golds = [answers] if isinstance(answers, (str, int, float)) else list(answers if answers is not None else [])
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(g) for g in golds)


def final_text(completion: Any) -> str:
    """A completion's own text: a string, or its assistant messages (never a tool response's)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, (list, tuple)):
        parts = [
            str(m.get("content") or "")
            for m in completion
            if isinstance(m, dict) and m.get("role", "assistant") == "assistant"
        ]
        return "\n".join(parts)
    return ""


def search_reward(completions: Sequence[Any], answers: Sequence[Any] | None = None, **kwargs: Any) -> list[float]:
    """Eq. 14: R = +1 if the normalised last ``<answer>`` exactly matches a gold answer, else -1. Never raises."""
    out = []
    answers = list(answers) if answers is not None else []
    for i, completion in enumerate(completions):
        try:  # no gold answers (None, or none for this completion): -1
            ok = i < len(answers) and exact_match(extract_answer(final_text(completion)), answers[i])
        except Exception:  # a reward must never stop training
            ok = False
        out.append(1.0 if ok else -1.0)
    return out


def render_rollout_html(tokenizer: Any, rollout: dict[str, Any], *, show_prompt: bool = False) -> str:
    """HTML of a rollout, token by token: the model's tokens (``tool_mask = 1``) on green, the tool's on grey, a newline
    token as a small ↵ (a run of them breaks the line once)."""
    parts = [
        '<div style="font-family:monospace;white-space:pre-wrap;line-height:1.6;font-size:12px">',
        '<div style="margin-bottom:6px"><span style="background:#c8f7c5;padding:1px 4px">model token '
        '(in the loss)</span> <span style="background:#e0e0e0;color:#555;padding:1px 4px">tool token (masked, no '
        "gradient)</span></div>",
    ]
    if show_prompt:
        parts.append(f'<span style="color:#999">{html.escape(tokenizer.decode(rollout["prompt_ids"]))}</span>')
    texts = [tokenizer.decode([tid]) for tid in rollout["completion_ids"]]
    newline = [t.isspace() and "\n" in t for t in texts] + [False]  # shown as ↵, one line break per run of them
    for i, (tid, m, text) in enumerate(zip(rollout["completion_ids"], rollout["tool_mask"], texts)):
        style = "background:#c8f7c5" if m else "background:#e0e0e0;color:#555"
        if newline[i]:
            text, style = text.replace("\n", "↵"), f"{style};color:#888;font-size:10px"
        parts.append(f'<span style="{style}" title="id {tid}, tool_mask {m}">{html.escape(text)}</span>')
        parts.append("\n" if newline[i] and not newline[i + 1] else "")
    parts.append("</div>")
    return "".join(parts)


def rollout_text(tokenizer: Any, rollout: dict[str, Any]) -> str:
    """Plain-text view of a rollout: tool (masked) spans inside ``[[masked: ...]]``."""
    runs = itertools.groupby(zip(rollout["completion_ids"], rollout["tool_mask"]), key=lambda pair: pair[1])
    texts = [(m, tokenizer.decode([tid for tid, _ in run])) for m, run in runs]
    return "".join(text if m else f"[[masked: {text}]]" for m, text in texts)


# TRL 1.16.0's GRPOTrainer has no public call that rolls out a prompt outside a training step. This adapter drives its
# tool loop as a training step does (read from trl 1.16.0, trainer/grpo_trainer.py): it fills the per-rollout tool
# dicts ``_sync_tool_dicts`` / ``_async_tool_dicts`` (built in ``_generate_and_score_completions``) and calls
# ``_generate(prompts)`` -> (prompt_ids, completion_ids, tool_mask, completions, ...). tests/tasks/test_search.py reads
# these names in TRL's source and fails when a TRL release changes them. With vLLM, greedy decoding is vLLM's
# temperature 0: the sampling settings live on ``trainer.vllm_generation`` (``temperature``, read in
# ``VLLMGeneration.generate``), not in ``trainer.generation_config``.
TRL_ROLLOUT_API = {"trl": "1.16.0", "method": "_generate", "tool_dicts": ("_sync_tool_dicts", "_async_tool_dicts")}


def trl_rollouts(
    trainer: Any, records: Sequence[dict[str, Any]], tools: Sequence[Callable[..., Any]]
) -> list[dict[str, Any]]:
    """Greedy rollouts through the trainer's own generation and tool loop (:data:`TRL_ROLLOUT_API`), 32 prompts per
    call: the record, ``completion_ids``, ``tool_mask``, ``answer``, ``em``, ``tool_calls``."""
    model = trainer.model
    was_training = model.training
    saved_config = trainer.generation_config
    engine = getattr(trainer, "vllm_generation", None)
    saved_temperature = getattr(engine, "temperature", None)
    gc = copy.deepcopy(saved_config)
    gc.do_sample, gc.temperature, gc.top_p, gc.top_k, gc.min_p = False, None, None, None, None
    trainer.generation_config = gc
    if engine is not None:
        engine.temperature = 0.0
    by_name = {t.__name__: t for t in tools}
    out: list[dict[str, Any]] = []
    mine, real = rank_share(trainer, len(records))
    model.eval()
    try:
        for start in range(0, len(mine), 32):
            chunk = mine[start : start + 32]
            prompts = [search_messages(records[j]["question"]) for j in chunk]
            trainer._sync_tool_dicts = [dict(by_name) for _ in chunk]
            trainer._async_tool_dicts = [{} for _ in chunk]
            _, completion_ids, tool_mask, completions, *_ = trainer._generate(prompts)
            for i, j in enumerate(chunk[: max(0, real - start)]):  # a rank's padding past ``real`` is dropped
                r = records[j]
                mask = tool_mask[i] if tool_mask is not None else [1] * len(completion_ids[i])
                answer = extract_answer(final_text(completions[i]))
                out.append(
                    {
                        "index": j,
                        "record": r,
                        "completion_ids": list(completion_ids[i]),
                        "tool_mask": list(mask),
                        "answer": answer,
                        "em": exact_match(answer, r["answers"]),
                        "tool_calls": sum(
                            len(m.get("tool_calls") or []) for m in completions[i] if isinstance(m, dict)
                        ),
                    }
                )
    finally:
        trainer.generation_config = saved_config
        if engine is not None:
            engine.temperature = saved_temperature
        model.train(was_training)
    if real < len(records):  # each rank rolled out its share: every rank gets every row, in order
        from accelerate.utils import gather_object

        out = sorted(gather_object(out), key=lambda row: row["index"])
    return out


def rank_share(trainer: Any, n: int) -> tuple[list[int], int]:
    """(record indices this rank rolls out, how many of them count): every ``num_processes``-th from its rank, padded
    with record 0 to the same count on every rank (TRL's ``_generate`` gathers across ranks once per call). All ``n``
    on one process, and under ZeRO-3 without vLLM, where each tool-loop round's generation gathers the sharded
    weights (``unwrap_model_for_generation``), so every rank must run the same rounds: the same rollouts."""
    acc = trainer.accelerator
    world, rank = acc.num_processes, acc.process_index
    zero3 = getattr(getattr(acc.state, "deepspeed_plugin", None), "zero_stage", 0) == 3
    if world == 1 or (zero3 and not getattr(trainer, "use_vllm", False)) or n == 0:
        return list(range(n)), n
    share = list(range(rank, n, world))
    return share + [0] * (-(-n // world) - len(share)), len(share)


def summarise_em(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """EM overall and per question type / dataset (Table 3 layout), the answer-format rate, tool calls."""
    if not rows:
        return {"em": float("nan"), "accuracy": float("nan"), "n": 0, "em_by_type": {}, "em_by_dataset": {}}
    res: dict[str, Any] = {"n": len(rows)}
    res["em"] = res["accuracy"] = sum(r["em"] for r in rows) / len(rows)
    for key, name in (("type", "em_by_type"), ("dataset", "em_by_dataset")):
        groups: dict[str, list[bool]] = {}
        for r in rows:
            groups.setdefault(str(r["record"].get(key, "")), []).append(bool(r["em"]))
        res[name] = {k: sum(v) / len(v) for k, v in sorted(groups.items())}
        res[name.replace("em_", "n_")] = {k: len(v) for k, v in sorted(groups.items())}
    res["answer_rate"] = sum(r["answer"] is not None for r in rows) / len(rows)
    if "tool_calls" in rows[0]:
        res["tool_calls_mean"] = sum(r["tool_calls"] for r in rows) / len(rows)
    return res


def evaluate_search(
    trainer: Any, records: Sequence[dict[str, Any]], tools: Sequence[Callable[..., Any]]
) -> dict[str, Any]:
    """Greedy EM with search (the tool loop of TRL), overall and per type/dataset, three example texts and the first
    question's rollout token by token (``example_rollout``); per rank (``ranks``), the rollouts it ran and its
    searches that failed, and their sum (``retrieval_failures``)."""
    t0 = time.time()
    counted = [t for t in tools if hasattr(t, "stats")]
    failed_before = sum(t.stats["failures"] for t in counted)
    rows = trl_rollouts(trainer, records, tools)
    res = summarise_em(rows)
    _, real = rank_share(trainer, len(records))
    res["rollout_ranks"] = trainer.accelerator.num_processes if real < len(records) else 1
    failed = sum(t.stats["failures"] for t in counted) - failed_before
    mine = [{"rollouts": real, "retrieval_failures": failed}]  # what this rank rolled out, its searches that failed
    if trainer.accelerator.num_processes > 1:
        from accelerate.utils import gather_object

        mine = gather_object(mine)
    res["ranks"] = mine  # one row per rank, in rank order
    res["retrieval_failures"] = sum(r["retrieval_failures"] for r in mine)  # searches of this evaluation that failed
    res["examples"] = [
        {"question": r["record"]["question"], "answers": r["record"]["answers"], "answer": r["answer"], "em": r["em"]}
        for r in rows[:3]
    ]
    if rows:
        first = rows[0]
        res["example_rollout"] = {
            "question": first["record"]["question"],
            "answers": first["record"]["answers"],
            "completion_ids": first["completion_ids"],
            "tool_mask": first["tool_mask"],
            "text": rollout_text(trainer.processing_class, first),
            "em": first["em"],
        }
    res["seconds"] = time.time() - t0
    return res


def generation_engine(trainer: Any) -> str:
    """``"vllm"`` when the trainer generates with a colocated vLLM engine, else ``"hf"`` (``model.generate``)."""
    return "vllm" if getattr(getattr(trainer, "vllm_generation", None), "llm", None) is not None else "hf"


def evaluate_no_search(trainer: Any, records: Sequence[dict[str, Any]], *, max_new_tokens: int = 32) -> dict[str, Any]:
    """The no-search baseline through the run's generation engine (:func:`generation_engine`): greedy answers from
    the model's own knowledge, scored on the last ``<answer>`` or the whole reply."""
    t0 = time.time()
    tokenizer = trainer.processing_class
    prompts = [search_messages(r["question"], search=False) for r in records]
    if generation_engine(trainer) == "vllm":
        from vllm import SamplingParams

        rendered = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
        params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens)
        outputs = trainer.vllm_generation.llm.generate(rendered, sampling_params=params, use_tqdm=False)
        texts = [o.outputs[0].text for o in outputs]
    else:  # greedy_generate pads on the left itself and restores the model's training mode
        model = trainer.accelerator.unwrap_model(trainer.model)
        texts = greedy_generate(model, tokenizer, prompts, batch_size=16, max_new_tokens=max_new_tokens)
    rows = []
    for r, text in zip(records, texts):
        tagged = extract_answer(text)
        pred = tagged if tagged is not None else text.strip()
        rows.append({"record": r, "answer": tagged, "em": exact_match(pred, r["answers"])})
    res = summarise_em(rows)
    res["examples"] = [
        {"question": r["question"], "answers": r["answers"], "reply": t} for r, t in zip(records, texts)
    ][:3]
    res["engine"] = generation_engine(trainer)
    res["seconds"] = time.time() - t0
    return res


WORD_PATTERN = r" ?[A-Za-z0-9_]+| ?[^A-Za-z0-9_\s]|\n| +"
WORD_SPECIALS = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"]


def micro_model(corpus: Corpus, tool: Callable[..., str], *, hidden: int = 128, layers: int = 3) -> str:
    """The folder of a small random Llama (CPU runs) with a word-level tokenizer that round-trips every text a run on
    ``corpus`` shows (prompts, scripted trajectories, tool errors), cached by its inputs."""
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from trgrpo.models import cache_dir

    def word_tokenizer(vocab: dict[str, int]) -> Any:
        core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
        core.pre_tokenizer = pre_tokenizers.Split(Regex(WORD_PATTERN), behavior="isolated")
        core.decoder = decoders.Fuse()
        tok = PreTrainedTokenizerFast(
            tokenizer_object=core,
            unk_token="<unk>",
            pad_token="<pad>",
            eos_token="<|im_end|>",
            additional_special_tokens=["<|im_start|>"],
            clean_up_tokenization_spaces=False,
        )
        return prepare_tokenizer(tok, template="compact")

    renderer = word_tokenizer({"<unk>": 0, "<pad>": 1, "<|im_end|>": 2, "<|im_start|>": 3})
    texts = [format_passages([p]) for p in corpus.passages]
    texts += [tool(q="x"), tool(query=""), tool(**{MALFORMED_KEY: "x"}), "No results found."]
    for q in (q for split in corpus.questions.values() for q in split):
        texts.append(renderer.apply_chat_template(search_messages(q["question"], search=False), tokenize=False))
        msgs = search_messages(q["question"]) + scripted_turns(q, tool, check_gold=False)
        texts.append(renderer.apply_chat_template(msgs, tools=[tool], tokenize=False))
    key = hashlib.sha256(json.dumps([texts, hidden, layers, 4, 0]).encode()).hexdigest()[:16]
    target = cache_dir() / "search" / f"micro-{key}"
    if (target / "config.json").exists():
        return str(target)
    split = re.compile("|".join(re.escape(t) for t in WORD_SPECIALS))
    pieces = {"\n", " "} | {p + c for c in string.printable if c not in string.whitespace for p in ("", " ")}
    for text in texts:
        for chunk in split.split(text):
            pieces.update(re.findall(WORD_PATTERN, chunk))
    tok = word_tokenizer({t: i for i, t in enumerate(WORD_SPECIALS + sorted(pieces - set(WORD_SPECIALS)))})
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=1024,
        bos_token_id=tok.convert_tokens_to_ids("<|im_start|>"),
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(cfg)  # its generation config takes the EOS and PAD ids from cfg
    target.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(target)
    tok.save_pretrained(target)
    return str(target)


def load_tokenizer(path: str | os.PathLike, template: str = "auto") -> Any:
    """``AutoTokenizer`` + :func:`prepare_tokenizer`; a micro model's word tokenizer keeps the compact template and
    response template it was saved with (``"auto"`` keeps a template that renders tool calls)."""
    from transformers import AutoTokenizer

    return prepare_tokenizer(AutoTokenizer.from_pretrained(path), template=template)


def scripted_turns(
    record: dict[str, Any], tool: Callable[..., str], *, check_gold: bool = True
) -> list[dict[str, Any]] | None:
    """A scripted solution's messages (one real search per scripted query, then the answer); None when a hop's gold
    passage is not retrieved."""
    turns: list[dict[str, Any]] = []
    for hop, query in enumerate(record["queries"]):
        response = tool(query=query)
        if check_gold and hop < len(record.get("gold_ids", [])):  # the tool of make_search_tool knows its retriever
            if record["gold_ids"][hop] not in {h["id"] for h in tool.retriever.search(query, tool.top_k)}:
                return None
        call = {"type": "function", "function": {"name": SEARCH_TOOL_NAME, "arguments": {"query": query}}}
        turns.append({"role": "assistant", "content": "", "tool_calls": [call]})
        turns.append({"role": "tool", "name": SEARCH_TOOL_NAME, "content": response})
    turns.append({"role": "assistant", "content": f"<answer>{record['answers'][0]}</answer>"})
    return turns


def encode_trajectory(
    tokenizer: Any, prompt: list[dict[str, Any]], turns: list[dict[str, Any]], tools: list[Callable]
) -> tuple[list[int], list[int]]:
    """Token ids and a 0/1 mask (1 = the model's own tokens) laid out as TRL's tool loop lays out a rollout."""
    eos = tokenizer.eos_token

    def render(msgs: list[dict[str, Any]], gen: bool) -> str:
        return tokenizer.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=gen)

    def ids(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    msgs = list(prompt)
    done = render(msgs, True)
    input_ids, mask = ids(done), [0] * len(ids(done))
    for msg in turns:
        if msg["role"] == "assistant":
            full = render(msgs + [msg], False)
            if not full.startswith(done):
                raise ValueError("the chat template is not prefix-preserving; TRL's tool loop needs one that is")
            piece = full[len(done) :]
            piece = piece[: piece.rindex(eos) + len(eos)]
            keep = 1
        else:  # tool: everything after the previous <|im_end|> up to the next assistant header
            full = render(msgs + [msg], True)
            piece = full[len(done) :]
            keep = 0
        piece_ids = ids(piece)
        input_ids += piece_ids
        mask += [keep] * len(piece_ids)
        msgs.append(msg)
        done += piece
    return input_ids, mask


def warm_start(
    model: str,
    records: Sequence[dict[str, Any]],
    tool: Callable[..., str],
    *,
    steps: int = 60,
    batch_size: int = 4,
    learning_rate: float = 5e-5,
    template: str = "auto",
) -> dict[str, Any]:
    """A few AdamW steps on scripted trajectories (loss on the model's own tokens only), saved to a folder cached by
    its inputs: ``{"path", "losses", "n_trajectories", "seconds", "cached", ...}``."""
    import torch
    from transformers import AutoModelForCausalLM

    from trgrpo.models import cache_dir, pad_batch, resolve_model, sft_step

    path = resolve_model(model)
    tokenizer = load_tokenizer(path, template)
    prompts_turns = [(search_messages(r["question"]), scripted_turns(r, tool)) for r in records]
    examples = [encode_trajectory(tokenizer, p, t, [tool]) for p, t in prompts_turns if t is not None]
    if not examples:
        raise ValueError("no scripted trajectory found its gold passages: check the retriever and the corpus")
    key = hashlib.sha256(json.dumps([str(path), examples, steps, batch_size, learning_rate, 0]).encode()).hexdigest()
    target = cache_dir() / "search" / f"warmstart-{key[:16]}"
    info_path = target / "warm_start.json"
    if info_path.exists() and (target / "config.json").exists():
        return {**json.loads(info_path.read_text()), "path": str(target), "cached": True}
    t0 = time.time()
    torch.manual_seed(0)
    rng = random.Random(0)
    net = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    net.train()
    opt = torch.optim.AdamW(net.parameters(), lr=learning_rate, weight_decay=0.0)
    losses, order = [], []
    for _ in range(steps):
        if len(order) < batch_size:
            order += rng.sample(range(len(examples)), len(examples))
        batch = [examples[order.pop()] for _ in range(batch_size)]
        losses.append(sft_step(net, opt, pad_batch(batch, tokenizer.pad_token_id), clip_norm=1.0))
    target.mkdir(parents=True, exist_ok=True)
    net.save_pretrained(target)
    tokenizer.save_pretrained(target)
    info = {"base_model": str(model), "steps": steps, "batch_size": batch_size, "learning_rate": learning_rate}
    info |= {"seed": 0, "n_trajectories": len(examples), "losses": losses, "seconds": time.time() - t0}
    info_path.write_text(json.dumps(info, indent=1))
    return {**info, "path": str(target), "cached": False}


class SearchOptions(TaskOptions):
    """The task options of the run task ``search`` and their defaults."""

    max_prompt_tokens: int = 4096  # vLLM's prompt budget: the question, the tool's results, the turns
    # searchr1: Search-R1's data (NQ + HotpotQA, Table 3's seven sets); synthetic: offline
    corpus: Literal["synthetic", "searchr1"] = "synthetic"
    corpus_seed: int = 0
    train_file: str | None = None  # searchr1: Search-R1's nq_hotpotqa_train parquet (None: the hub)
    data_dir: str | None = None  # searchr1: a folder of the seven QA sets, FlashRAG or Search-R1 files (None: the hub)
    # bm25 or dense over the synthetic corpus; server: a /retrieve server at url
    retriever: Literal[RETRIEVERS] = "bm25"
    url: str = "http://127.0.0.1:8000/retrieve"
    timeout_s: float = 30.0  # per retrieval request
    top_k: int = 3
    template: Literal[TEMPLATES] = "auto"
    max_tool_calls: int = 4
    eval_every: int = 0  # greedy EM every k steps (0: before and after only)
    no_search_baseline: bool = True  # the initial model without the tool, through the run's generation engine
    baseline_tokens: int = 32
    warm_start: Any = None  # what the run's model was warm-started from (recorded as given)
    scale: str = "full"

    @model_validator(mode="after")
    def _server_for_searchr1(self) -> SearchOptions:
        if self.corpus == "searchr1" and self.retriever != "server":
            raise ValueError("retriever: Search-R1's data searches wiki-18 through a server (retriever: server)")
        return self


@functools.lru_cache(maxsize=4)
def _search_data(options: str, n_train: int, n_eval: int) -> tuple[list, list, Callable[..., str], dict]:
    """(train records, eval records, the search tool, the data's sources) of JSON-encoded :class:`SearchOptions`."""
    o = json.loads(options)
    if o["corpus"] == "synthetic":
        corpus, seed = make_corpus(o["corpus_seed"]), o["corpus_seed"]
        train = sample_questions(corpus.questions["train"], n_train, seed=seed, balanced=False)
        evals = sample_questions(corpus.questions["test"], n_eval, seed=seed)
        passages = corpus.passages
        source = {"corpus": "synthetic", "corpus_seed": seed, "fingerprint": corpus.fingerprint()}
        source["fallback"] = "offline: a generated encyclopedia stands in for Search-R1's data and wiki-18"
    else:
        per_set = max(1, n_eval // len(TABLE3_DATASETS))
        train = load_searchr1_train(o["train_file"], n=n_train)
        evals = [r for name in TABLE3_DATASETS for r in load_qa(name, path=o["data_dir"], n=per_set)]
        passages = None
        source = {"corpus": "searchr1", "train": o["train_file"] or f"hub:{SEARCHR1_TRAIN_REPO}"}
        source["eval"] = o["data_dir"] or f"hub:{FLASHRAG_REPO} ({per_set} per set of {list(TABLE3_DATASETS)})"
    kw = {"url": o["url"], "timeout": o["timeout_s"]} if o["retriever"] == "server" else {}
    retriever = make_retriever(o["retriever"], passages, **kw)
    if o["retriever"] == "server":
        retriever.check()  # one line when the server is down, slow or answers garbage
    source["retriever"] = o["retriever"] + (f" {o['url']}" if o["retriever"] == "server" else "")
    return train, evals, make_search_tool(retriever, top_k=o["top_k"]), source


def _data(spec: Any) -> tuple[list, list, Callable[..., str], dict]:
    return _search_data(SearchOptions(**spec.task_options).model_dump_json(), spec.n_train, spec.n_eval)


def _align_special_tokens(model: Any, tokenizer: Any) -> None:
    """The tokenizer's PAD / BOS / EOS ids into the model's config and generation config (EOS joins the stop tokens),
    as ``Trainer.train`` would (warning): the micro model's and Qwen2.5's configs name a BOS their tokenizer lacks."""
    gen = model.generation_config
    for key in ("bos_token_id", "pad_token_id"):
        setattr(model.config, key, getattr(tokenizer, key))
        setattr(gen, key, getattr(tokenizer, key))
    model.config.eos_token_id, stops = tokenizer.eos_token_id, gen.eos_token_id
    stops = [] if stops is None else [stops] if isinstance(stops, int) else list(stops)
    gen.eos_token_id = stops if tokenizer.eos_token_id in stops else [tokenizer.eos_token_id, *stops]


def _trainer_ready(trainer: Any, spec: Any) -> None:
    """Special tokens aligned; the EM-curve callback (``eval_every``, logged as ``eval_em`` in the trainer state, so
    a resumed run keeps it); the no-search baseline of the initial model."""
    from transformers import TrainerCallback

    o, (_, evals, tool, _) = SearchOptions(**spec.task_options), _data(spec)
    _align_special_tokens(trainer.model, trainer.processing_class)
    tool.stats.update(calls=0, failures=0, batches=0, errors=[])  # this run's count (the tool is cached across runs)
    trainer.processing_class.expect_tool_calls = tool.expect  # one request per tool-loop round, not per rollout

    class EMCurve(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % o.eval_every == 0 and state.global_step < spec.steps:
                em = evaluate_search(trainer, evals, [tool])["em"]
                state.log_history.append({"step": state.global_step, "eval_em": em})

    if o.eval_every and evals:
        trainer.add_callback(EMCurve())
    if o.no_search_baseline and evals:  # on every rank, as the evaluation (a model sharded by ZeRO-3 needs it)
        trainer.search_baseline = evaluate_no_search(trainer, evals, max_new_tokens=o.baseline_tokens)


def _record_extras(trainer: Any, record: dict, spec: Any) -> dict:
    """Search's record fields: training EM per step (Eq. 14's +-1 rewards), the EM curve, one greedy rollout, the
    no-search baseline, the warm start, the scale."""
    o, (train, evals, _, _) = SearchOptions(**spec.task_options), _data(spec)
    for h in record["history"]:
        if "reward" in h:
            h["em"] = (h["reward"] + 1.0) / 2.0
    final, initial = record["final"], record["initial"] or {}
    curve = [{"step": 0, "em": initial["em"]}] if "em" in initial else []
    curve += [{"step": h["step"], "em": h["eval_em"]} for h in trainer.state.log_history if "eval_em" in h]
    if "em" in final:
        curve.append({"step": spec.steps, "em": final["em"]})
    initial.pop("example_rollout", None)
    retrieval = retrieval_counts(trainer, _data(spec)[2])
    if retrieval["failures"] and trainer.accelerator.is_main_process:
        print(
            f"[trgrpo] {spec.name}: {retrieval['failures']} of {retrieval['calls']} searches failed (record "
            f"'retrieval'; TRL's tools/failure_frequency): {retrieval['errors'][0]}",
            flush=True,
        )
    return {
        "retrieval": retrieval,
        "eval_curve": curve,
        "example_rollout": final.pop("example_rollout", None),
        "baseline_no_search": getattr(trainer, "search_baseline", None),
        "warm_start": o.warm_start,
        "scale": o.scale,
        "n_train": len(train),
        "n_eval": len(evals),
    }


def retrieval_counts(trainer: Any, tool: Callable[..., str]) -> dict[str, Any]:
    """The search tool's calls and failures since the run began, summed over the ranks (every rank calls this)."""
    from accelerate.utils import gather_object

    keys = ("calls", "failures", "batches")
    counts = dict(zip(keys, _sum_over_ranks(trainer, [tool.stats[k] for k in keys])))
    errors = gather_object([tool.stats["errors"]]) if trainer.accelerator.num_processes > 1 else [tool.stats["errors"]]
    return {**counts, "errors": [e for rank in errors for e in rank][:3]}


def _sum_over_ranks(trainer: Any, values: list[int]) -> list[int]:
    import torch

    acc = trainer.accelerator
    if acc.num_processes == 1:
        return values
    return [int(x) for x in acc.reduce(torch.tensor(values, device=acc.device), reduction="sum").tolist()]


def _check_data(spec: Any) -> None:
    """Read Search-R1's local files as :func:`_search_data` will (the hub's and the synthetic corpus are not read)."""
    o = SearchOptions(**spec.task_options).model_dump()
    reads = {"train_file": load_searchr1_train, "data_dir": lambda p: [load_qa(n, path=p) for n in TABLE3_DATASETS]}
    for key, read in reads.items() if o["corpus"] == "searchr1" else ():
        try:
            if o[key]:
                read(o[key])
        except (OSError, ValueError, TypeError) as e:
            raise ValueError(f"task_options.{key}: {e}") from None


# The run task ``search`` (task_options: :class:`SearchOptions`).
register_task(
    "search",
    Task(
        build=lambda spec, tokenizer: (search_dataset(_data(spec)[0]), _data(spec)[1]),
        reward_funcs=lambda spec: [search_reward],
        evaluate=lambda trainer, tokenizer, records, spec: evaluate_search(trainer, records, [_data(spec)[2]]),
        data_source=lambda spec, train_ds, eval_records: _data(spec)[3],
        tokenizer=lambda path, spec: load_tokenizer(path, SearchOptions(**spec.task_options).template),
        trainer_kwargs=lambda spec: {"tools": [_data(spec)[2]]},
        evaluate_with_trainer=True,
        options=SearchOptions,
        config=lambda spec: {"max_tool_calling_iterations": SearchOptions(**spec.task_options).max_tool_calls},
        trainer_ready=_trainer_ready,
        record_extras=_record_extras,
        check_data=_check_data,
    ),
)
