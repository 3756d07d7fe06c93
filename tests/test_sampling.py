"""trgrpo.theory's sampler: seeded, left-padded, the policy's own distribution; the theory and tasks.generation's token
statistics draw the same tokens through it."""

import pytest
import torch

from trgrpo import theory
from trgrpo import theory as sampling
from trgrpo.tasks import generation


@pytest.fixture(scope="module")
def model_tok(tiny_model_dir):
    from trgrpo.models import load_model_and_tokenizer

    return load_model_and_tokenizer(tiny_model_dir)


def test_sample_batch_is_seeded_left_padded_and_grouped(model_tok):
    model, tok = model_tok
    texts = ["a much longer prompt than the other one", "hi"]
    tok.padding_side = "right"
    torch.manual_seed(5)
    enc, a = sampling.sample_batch(model, tok, texts, max_new_tokens=4, temperature=1.0, num_return_sequences=3)
    torch.manual_seed(5)
    _, b = sampling.sample_batch(model, tok, texts, max_new_tokens=4, temperature=1.0, num_return_sequences=3)
    assert torch.equal(a, b)
    assert a.shape[0] == 6 and a.shape[1] <= enc["input_ids"].shape[1] + 4
    assert enc["attention_mask"][1, 0] == 0 and enc["attention_mask"][1, -1] == 1  # "hi" is padded on the left
    assert tok.padding_side == "right"  # restored after padding on the left


@pytest.mark.parametrize(
    "field, kwargs", [("temperature", {"temperature": 0.0}), ("max_new_tokens", {"max_new_tokens": 0})]
)
def test_sample_batch_rejects_bad_settings_by_name(model_tok, field, kwargs):
    model, tok = model_tok
    settings = {"max_new_tokens": 2, "temperature": 1.0, **kwargs}
    with pytest.raises(ValueError, match=field):
        sampling.sample_batch(model, tok, ["x"], **settings)


def test_theory_and_token_stats_sample_the_same_tokens(model_tok):
    """One sampler for both: with the same seed and prompt, Theorem 3.1's batch and tasks.generation's token statistics
    see the same completion (token_stats seeds each chunk from its own generator: reproduce its first seed)."""
    model, tok = model_tok
    seed = 11
    first = int(torch.randint(0, 2**31 - 1, (1,), generator=torch.Generator().manual_seed(seed)))
    batch = theory.sample_completions(model, tok, ["count: one two"], max_new_tokens=5, temperature=0.9, seed=first)
    occ = generation.sample_token_probabilities(
        model, tok, ["count: one two"], samples_per_prompt=1, max_new_tokens=5, temperature=0.9, seed=seed
    )
    ids = batch.input_ids[0, batch.prompt_length :][batch.completion_mask[0, batch.prompt_length :].bool()].tolist()
    assert occ.token_ids == ids[: len(occ.token_ids)] and len(occ.token_ids) >= 1
