"""Figure 1 statistics: average token probability over occurrences, top/bottom tokens, categories."""

import json
import math
from pathlib import Path

import pytest

from trgrpo.tasks.generation import sample_token_probabilities
from trgrpo.token_stats import (
    average_probabilities,
    category_shares,
    classify_token,
    top_and_bottom,
    word_cloud,
)

ROOT = Path(__file__).resolve().parents[2]


def test_average_over_occurrences_by_hand():
    texts = [" the", "(", " the", "(", "x", " the"]
    probs = [0.2, 0.9, 0.4, 1.0, 0.5, 0.6]
    stats = average_probabilities(texts, probs, min_count=2)
    assert stats["the"] == pytest.approx((0.4, 3))
    assert stats["("] == pytest.approx((0.95, 2))
    assert "x" not in stats  # fewer than min_count occurrences


def test_top_and_bottom_order():
    stats = {"a": (0.9, 5), "b": (0.1, 5), "c": (0.5, 5), "d": (0.95, 2)}
    hi, lo = top_and_bottom(stats, k=2)
    assert [t for t, _, _ in hi] == ["d", "a"] and [t for t, _, _ in lo] == ["b", "c"]


@pytest.mark.parametrize(
    "text,cat",
    [
        ("(", "bracket"),
        (")", "bracket"),
        ("=", "operator"),
        ("42", "number"),
        ("<answer>", "tag/format"),
        ("Zoey", "name"),
        (".", "punctuation"),
        ("knight", "word"),
    ],
)
def test_classify(text, cat):
    assert classify_token(text, names=["Zoey", "Oliver"]) == cat


def test_category_shares_sum_to_one():
    shares = category_shares([("(", 0.9, 3), ("=", 0.8, 3), ("cat", 0.1, 3)])
    assert sum(shares.values()) == pytest.approx(1.0, abs=1e-3) and shares["bracket"] == pytest.approx(0.333)


def test_bad_input():
    with pytest.raises(ValueError, match="length"):
        average_probabilities(["a"], [0.1, 0.2])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        average_probabilities(["a"], [1.5])


def test_sampling_on_a_tiny_model(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    occ = sample_token_probabilities(
        model,
        tok,
        [[{"role": "user", "content": "Is Zoey a knight?"}], "2 + 2 ="],
        samples_per_prompt=2,
        max_new_tokens=6,
        seed=1,
    )
    assert 0 < len(occ.probs) <= 2 * 2 * 6
    assert all(0.0 <= p <= 1.0 for p in occ.probs) and len(occ.texts) == len(occ.token_ids)
    again = sample_token_probabilities(
        model,
        tok,
        [[{"role": "user", "content": "Is Zoey a knight?"}], "2 + 2 ="],
        samples_per_prompt=2,
        max_new_tokens=6,
        seed=1,
    )
    assert again.token_ids == occ.token_ids  # same seed, same sample


def test_word_cloud_is_deterministic():
    items = [("(", 0.9, 3), ("=", 0.8, 3), ("Zoey", 0.7, 4), ("cat", 0.1, 3)]
    a, b = word_cloud(items, seed=0).to_array(), word_cloud(items, seed=0).to_array()
    assert (a == b).all()


# ---- where sampled tokens sit on Eq. 11's weight curve (notebook 03 Part B) ----


def test_weight_shares_by_hand():
    from trgrpo.token_stats import weight_shares

    # Eq. 11 with the defaults: w = clip(2 (sigmoid(9 p) - 0.25), 1, 1.4): p = 0.05 -> 0.72 -> L; p = 0.2 -> 1.216
    # (between); p = 0.9, 0.99 -> U.
    h = weight_shares([0.05, 0.2, 0.9, 0.99], atol=1e-6)
    assert (h["share_at_lower"], h["share_between"], h["share_at_upper"]) == (0.25, 0.25, 0.5)
    assert h["n_tokens"] == 4 == sum(h["prob_counts"]) == sum(h["weight_counts"])


# ---- notebook 04: whole words, disjoint ends, the claim as a count with an interval ----


def test_word_occurrences_join_pieces_and_multiply():
    from trgrpo.token_stats import word_occurrences

    texts = [" Kn", "aves", " lie", ".", " 1", "2", "(", "Kn", "aves"]
    probs = [0.5, 0.9, 0.4, 0.8, 0.5, 0.5, 0.9, 0.2, 0.5]
    words, wp = word_occurrences(texts, probs, completion=[0, 0, 0, 0, 0, 0, 0, 1, 1])
    assert words == [" Knaves", " lie", ".", " 12", "(", "Knaves"]
    assert wp == pytest.approx([0.45, 0.4, 0.8, 0.25, 0.9, 0.1])
    # without completion indices the last word would run on across the boundary: "(" then "Kn" still splits
    assert word_occurrences(["ab", "cd"], [0.5, 0.5], completion=[0, 1])[0] == ["ab", "cd"]
    assert word_occurrences(["ab", "cd"], [0.5, 0.5])[0] == ["abcd"]
    with pytest.raises(ValueError, match="length"):
        word_occurrences(["a"], [0.1, 0.2])


def test_top_and_bottom_never_overlap_and_leave_a_middle():
    stats = {f"t{i}": (i / 10, 5) for i in range(10)}
    hi, lo = top_and_bottom(stats, k=100)
    assert len(hi) == len(lo) == 5 and not {t for t, _, _ in hi} & {t for t, _, _ in lo}
    hi, lo = top_and_bottom(stats, k=100, max_share=0.3)
    assert [t for t, _, _ in hi] == ["t9", "t8", "t7"] and [t for t, _, _ in lo] == ["t0", "t1", "t2"]
    with pytest.raises(ValueError, match="max_share"):
        top_and_bottom(stats, max_share=0.6)


def test_wilson_and_newcombe_intervals():
    from trgrpo.token_stats import difference_interval, structural_claim, wilson_interval

    # Wilson 95 % for 8 of 10 (Newcombe 1998, Table I style value): [0.490, 0.943]
    lo, hi = wilson_interval(8, 10)
    assert (round(lo, 3), round(hi, 3)) == (0.490, 0.943)
    assert wilson_interval(0, 0) == (0.0, 1.0) and wilson_interval(0, 5)[0] == 0.0
    with pytest.raises(ValueError, match="k"):
        wilson_interval(6, 5)
    # Newcombe's method 10, his example 56/70 vs 48/80: difference 0.2, interval [0.0524, 0.3339]
    lo, hi = difference_interval(56, 70, 48, 80)
    assert (round(lo, 4), round(hi, 4)) == (0.0524, 0.3339)
    assert structural_claim([], [("(", 0.1, 5)])["difference_ci"] == (-1.0, 1.0)  # a side without items says nothing


def _newcombe_by_hand(k1, n1, k2, n2):
    """Newcombe's method 10 written out (what token_stats computed before statsmodels did)."""
    from trgrpo.token_stats import wilson_interval

    p1, p2 = k1 / n1, k2 / n2
    (l1, u1), (l2, u2) = wilson_interval(k1, n1), wilson_interval(k2, n2)
    d = p1 - p2
    return d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)


def test_newcombe_interval_is_the_hand_formula_and_the_committed_records():
    """statsmodels' confint_proportions_2indep gives the hand formula's floats, bit for bit, on a grid of counts and
    on the counts of every level of notebook 04's committed records; the stored intervals agree to 1e-16 (written
    before the Wilson interval came from statsmodels, commit 7deff40)."""
    from trgrpo.token_stats import difference_interval

    for k1, n1, k2, n2 in [(56, 70, 48, 80), (0, 5, 0, 5), (5, 5, 0, 5), (3, 10, 1, 10), (1, 200, 150, 151)]:
        assert difference_interval(k1, n1, k2, n2) == _newcombe_by_hand(k1, n1, k2, n2)
    records = sorted((ROOT / "results" / "notebooks").glob("04_token_probabilities*.json"))
    levels = [c for f in records for c in json.loads(f.read_text())["claim"].values()]
    assert levels, "no committed notebook 04 record"
    for c in levels:
        counts = (c["k_high"], c["n_high"], c["k_low"], c["n_low"])
        assert difference_interval(*counts) == _newcombe_by_hand(*counts)
        assert difference_interval(*counts) == pytest.approx(c["difference_ci"], rel=0, abs=1e-16)


def test_structural_claim_verdicts():
    from trgrpo.token_stats import structural_claim

    high = [("(", 0.9, 5)] * 30 + [("cat", 0.9, 5)] * 2
    low = [("dog", 0.1, 5)] * 30 + [("=", 0.1, 5)] * 2
    c = structural_claim(high, low)
    assert (c["k_high"], c["n_high"], c["k_low"], c["n_low"]) == (30, 32, 2, 32)
    assert c["verdict"] == "supported" and c["difference_ci"][0] > 0 and c["p_fisher_greater"] < 1e-6
    assert structural_claim(low, high)["verdict"] == "contradicted"
    assert structural_claim(high[:3], low[28:31])["verdict"] == "undecided"  # 3 vs 3 items: too few to tell


def test_batched_sampling_probabilities_equal_an_unbatched_forward(tiny_model_dir):
    """Figure 1's probabilities come from the batched sampling pass (left padding, the prompt's cache repeated for
    its samples, finished rows dropped); each must equal a plain forward of that one prompt + completion."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trgrpo.tasks.generation import render_prompt
    from trgrpo.token_stats import sample_occurrences

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.pad_token = tok.pad_token or tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    prompts = [[{"role": "user", "content": "Is Zoey a knight? Tell me why."}], "2 + 2 =", "Say: (x + y) * 3"]
    kw = dict(samples_per_prompt=3, max_new_tokens=7, temperature=0.7, seed=3)
    for stop in (None, list(range(0, len(tok), 3))):  # then a third of the vocabulary ends a completion early
        model.generation_config.eos_token_id = stop or tok.eos_token_id
        occ = sample_occurrences(model, tok, prompts, batch_prompts=2, **kw)
        assert occ.completion == sorted(occ.completion) and set(occ.completion) <= set(range(9))
        assert occ == sample_occurrences(model, tok, prompts, batch_prompts=2, **kw)  # same seed, same sample
        assert occ.texts == [tok.decode([t]) for t in occ.token_ids] and not set(occ.token_ids) & set(stop or [])
        lengths = [occ.completion.count(c) for c in range(9)]
        assert max(lengths) <= 7 and (stop is None or min(lengths) < 7)
        for c in set(occ.completion):
            rows = [i for i, x in enumerate(occ.completion) if x == c]
            prompt = tok(render_prompt(tok, prompts[c // 3])[0], add_special_tokens=False, return_tensors="pt")
            n = prompt["input_ids"].shape[1]
            ids = torch.cat([prompt["input_ids"], torch.tensor([[occ.token_ids[i] for i in rows]])], dim=1)
            with torch.no_grad():
                logp = torch.log_softmax(model(input_ids=ids).logits[0, n - 1 : -1] / 0.7, dim=-1)
            want = logp.gather(1, ids[0, n:, None]).squeeze(1).exp()
            assert torch.allclose(torch.tensor([occ.probs[i] for i in rows]), want, atol=1e-5)
