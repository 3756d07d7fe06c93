"""The CPU toy (notebook 03): tokenizer, model, warm start, token gradient norms (trgrpo/toy.py)."""

from __future__ import annotations

import pytest

from trgrpo import toy
from trgrpo.runs import toy_grid
from trgrpo.tasks import addition

TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2)


@pytest.fixture(scope="module")
def tok():
    return toy.build_tokenizer()


@pytest.mark.parametrize(
    "text",
    ["1 2 + 3 4 =", "4 6", "1 2 5", addition.trace_completion(57, 68), addition.format_prompt(99, 10)],
)
def test_tokenizer_round_trip(tok, text):
    ids = tok(text)["input_ids"]
    assert tok.decode(ids) == text
    assert tok.unk_token_id not in ids


def test_tokenizer_splits_digits_and_has_specials(tok):
    assert tok("12 + 34 =")["input_ids"] == tok("1 2 + 3 4 =")["input_ids"]
    assert len(tok("1 2 + 3 4 =")["input_ids"]) == 6
    assert tok.pad_token == toy.PAD and tok.eos_token == toy.EOS and tok.pad_token_id != tok.eos_token_id
    assert len(tok) == len(toy.VOCAB)
    assert tok.decode([*tok("4 6")["input_ids"], tok.eos_token_id], skip_special_tokens=True) == "4 6"


def test_warm_start_errors_clearly_when_threshold_not_reached(tmp_path):
    with pytest.raises(toy.WarmStartError, match=r"did not reach greedy_accuracy >= 1.0 in 4 steps"):
        toy.warm_start(
            "addition",
            0,
            threshold=1.0,
            max_steps=4,
            check_every=2,
            cache=tmp_path,
            model_overrides=TINY,
            verbose=False,
        )
    with pytest.raises(ValueError, match="threshold"):
        toy.warm_start("addition", 0, threshold=1.5, cache=tmp_path)


def test_warm_start_reaches_threshold_and_is_cached(tmp_path):
    kw = dict(threshold=0.0, max_steps=6, check_every=3, cache=tmp_path, model_overrides=TINY, verbose=False)
    path = toy.warm_start("addition", 1, **kw)
    info = toy.warm_start_info(path)
    assert info["steps"] == 3 and info["seed"] == 1 and info["test"]["n"] == 400
    assert 0.0 <= info["test"]["greedy_accuracy"] <= 1.0 and "sampled_accuracy" in info["test"]
    mtime = (path / "warm_start.json").stat().st_mtime
    assert toy.warm_start("addition", 1, **kw) == path  # cached: same folder, not retrained
    assert (path / "warm_start.json").stat().st_mtime == mtime
    assert toy.warm_start("addition", 2, **kw) != path  # another seed, another folder


def test_tasks_are_registered():
    from trgrpo.tasks import task_names

    assert {"addition", "addition_trace"} <= set(task_names())


def test_token_grad_norms_fall_with_probability(tmp_path):
    import numpy as np

    warm = dict(threshold=0.0, max_steps=4, check_every=2, cache=tmp_path, model_overrides=TINY, verbose=False)
    rec = toy_grid.token_grad_analysis("addition", 0, n_prompts=8, warm_kwargs=warm, results_dir=tmp_path / "res")
    p, g = np.asarray(rec["prob"]), np.asarray(rec["grad_norm"])
    assert p.size == g.size == rec["n_tokens"] > 8
    assert ((p > 0) & (p <= 1)).all() and (g > 0).all()
    assert set(rec["weighted_spread"]) == {"equal", "tr", "reverse"}


def test_the_toy_batch_learns_the_completion_and_eos_only():
    tok = toy.build_tokenizer()
    row = addition.records([(12, 34)])[0]
    ids, att, lab = toy._sft_batch(tok, [row])
    prompt = tok(row["prompt"])["input_ids"]
    target = tok(row["target"])["input_ids"] + [tok.eos_token_id]
    assert ids[0].tolist() == prompt + target and att[0].tolist() == [1] * len(ids[0])
    assert lab[0].tolist() == [-100] * len(prompt) + target
