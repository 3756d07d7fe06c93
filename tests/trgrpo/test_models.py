"""The embedded model's tokenizer (trgrpo.models) decodes without transformers' warning about
``clean_up_tokenization_spaces`` (a flag transformers ignores for a BPE tokenizer), also from a cache converted
before the flag was turned off, and decodes exactly as the tokenizer's own BPE decoder does."""

import json
import logging
import shutil

import pytest
import torch
from transformers import AutoTokenizer
from transformers.utils import logging as hf_logging

from trgrpo import models, toy
from trgrpo.models import pad_batch, sft_step
from trgrpo.tasks import addition

TEXT = "Hello , world ! Isn 't it ? Zoey is a knight , and (3 + 4) = 7 ."


def _decode(tok) -> tuple[str, list[str]]:
    """``tok.decode`` of TEXT's ids, and the cleanup warnings it logged (warned once per process: the cache is
    cleared, so an earlier decode cannot hide one; transformers' verbosity at warning, whatever an earlier test of
    this process set)."""
    hf_logging.warning_once.cache_clear()
    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_warning()
    try:
        text = tok.decode(tok(TEXT)["input_ids"])
    finally:
        hf_logging.set_verbosity(verbosity)
        logger.removeHandler(handler)
    return text, [r.getMessage() for r in seen if "clean_up_tokenization_spaces" in r.getMessage()]


def test_the_embedded_tokenizer_decodes_without_a_cleanup_warning():
    tok = models.embedded_tokenizer()
    text, warnings = _decode(tok)
    assert warnings == []
    assert tok.clean_up_tokenization_spaces is False
    assert text == tok.backend_tokenizer.decode(tok(TEXT)["input_ids"]) == TEXT  # BPE round trip, spaces kept


def test_a_cache_converted_with_the_flag_on_is_turned_off_and_decodes_the_same(tmp_path):
    folder = tmp_path / "old-cache"
    shutil.copytree(models.embedded_model_path(), folder, ignore=shutil.ignore_patterns("*.safetensors"))
    config_path = folder / "tokenizer_config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), "clean_up_tokenization_spaces": True}))
    before, warned = _decode(AutoTokenizer.from_pretrained(folder))
    assert warned, "the flag on: transformers warns (else this test could not see the warning)"
    assert models._without_cleanup(folder) == folder
    assert json.loads(config_path.read_text()).get("clean_up_tokenization_spaces", False) is False
    after, warned = _decode(AutoTokenizer.from_pretrained(folder))
    assert warned == [] and after == before


def test_display_name_names_the_embedded_model():
    assert models.display_name("embedded") == models.display_name(None) == "SmolLM2-135M-Instruct"
    assert models.display_name("Qwen/Qwen2.5-3B-Instruct") == "Qwen2.5-3B-Instruct"
    assert models.display_name(models.embedded_model_path()) == "SmolLM2-135M-Instruct"


# From test_sft.py: The one supervised loop of the warm starts (trgrpo.models): padding, labels, one step.


def test_pad_batch_right_pads_and_labels_only_the_masked_tokens():
    ids, att, lab = pad_batch([([5, 6, 7], [0, 1, 1]), ([8], [1])], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert att.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert lab.tolist() == [[-100, 6, 7], [8, -100, -100]]
    assert ids.dtype == att.dtype == lab.dtype == torch.long
    with pytest.raises(ValueError, match="example 0: 2 token ids but 1 loss-mask"):
        pad_batch([([1, 2], [1])], pad_id=0)


def test_sft_steps_lower_the_loss_and_clip():
    tok = toy.build_tokenizer()
    model = toy.build_model(
        tok,
        seed=0,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    batch = toy._sft_batch(tok, addition.records([(12, 34), (56, 78)]))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = [sft_step(model, opt, batch, clip_norm=1.0) for _ in range(10)]
    assert losses[-1] < losses[0] and all(isinstance(x, float) for x in losses)
