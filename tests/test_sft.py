"""The one supervised loop of the warm starts (trgrpo.models): padding, labels, one step."""

import pytest
import torch

from trgrpo import toy
from trgrpo.models import pad_batch, sft_step
from trgrpo.tasks import addition


def test_pad_batch_right_pads_and_labels_only_the_masked_tokens():
    ids, att, lab = pad_batch([([5, 6, 7], [0, 1, 1]), ([8], [1])], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert att.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert lab.tolist() == [[-100, 6, 7], [8, -100, -100]]
    assert ids.dtype == att.dtype == lab.dtype == torch.long
    with pytest.raises(ValueError, match="example 0: 2 token ids but 1 loss-mask"):
        pad_batch([([1, 2], [1])], pad_id=0)


def test_the_toy_batch_learns_the_completion_and_eos_only():
    tok = toy.build_tokenizer()
    row = addition.records([(12, 34)])[0]
    ids, att, lab = toy._sft_batch(tok, [row])
    prompt = tok(row["prompt"])["input_ids"]
    target = tok(row["target"])["input_ids"] + [tok.eos_token_id]
    assert ids[0].tolist() == prompt + target and att[0].tolist() == [1] * len(ids[0])
    assert lab[0].tolist() == [-100] * len(prompt) + target


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
