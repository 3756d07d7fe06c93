"""The CPU toy of the search task: a word-level tokenizer over the corpus, a ~1M-parameter Llama, and a
supervised warm start on scripted search trajectories (a small model never calls a tool by itself)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import string
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .search_data import Corpus
from .search_prompts import COMPACT_CHAT_TEMPLATE, prepare_tokenizer, search_messages
from .search_tool import MALFORMED_KEY, SEARCH_TOOL_NAME, format_passages

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

    from ..pipeline.models import cache_dir

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

    from ..pipeline.models import cache_dir, resolve_model
    from ..pipeline.sft import pad_batch, sft_step

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
        losses.append(sft_step(net, opt, pad_batch(batch, pad), clip_norm=1.0))
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
