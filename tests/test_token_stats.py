"""Figure 1 statistics: average token probability over occurrences, top/bottom tokens, categories."""

import pytest

from trgrpo.token_stats import (
    average_probabilities,
    category_shares,
    classify_token,
    sample_token_probabilities,
    top_and_bottom,
    word_cloud,
)


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


def test_weight_histogram_shares_by_hand():
    from trgrpo.token_stats import check_histogram, weight_histogram

    # Eq. 11 with the defaults: w = clip(2 (sigmoid(9 p) - 0.25), 1, 1.4): p = 0.05 -> 0.72 -> L; p = 0.2 -> 1.216
    # (between); p = 0.9, 0.99 -> U.
    h = check_histogram(weight_histogram([0.05, 0.2, 0.9, 0.99], task="t", model="m", n_bins=10, n_weight_bins=4))
    assert (h["share_at_lower"], h["share_between"], h["share_at_upper"]) == (0.25, 0.25, 0.5)
    assert h["n_tokens"] == 4 and h["prob_counts"] == [1, 0, 1, 0, 0, 0, 0, 0, 0, 2]
    assert h["weight_counts"] == [1, 0, 1, 2] and h["bins"][0] == 0.0 and h["bins"][-1] == 1.0
    assert h["weight_bins"] == pytest.approx([1.0, 1.1, 1.2, 1.3, 1.4])


def test_weight_histogram_follows_the_weight_parameters():
    from trgrpo.token_stats import weight_histogram

    # with U = 2 no token reaches the cap: p = 0.99 gives 2 (sigmoid(8.91) - 0.25) = 1.4997
    h = weight_histogram([0.05, 0.99], task="t", model="m", upper=2.0)
    assert h["share_at_upper"] == 0.0 and h["share_between"] == 0.5


def test_weight_histogram_errors():
    from trgrpo.token_stats import check_histogram, weight_histogram

    with pytest.raises(ValueError, match="empty"):
        weight_histogram([], task="t", model="m")
    with pytest.raises(ValueError, match="probs"):
        weight_histogram([1.5], task="t", model="m")
    h = weight_histogram([0.5], task="t", model="m")
    with pytest.raises(ValueError, match="n_tokens"):
        check_histogram({**h, "n_tokens": 2})
    with pytest.raises(ValueError, match="share_at_upper"):
        check_histogram({k: v for k, v in h.items() if k != "share_at_upper"})
