"""Token-probability statistics behind Figure 1 (Section 1): which tokens does the model itself find likely?

For the model's own sampled answers, each token's probability pi_theta(o_t) (at the sampling temperature,
as the trainer sees it) is averaged over the token's occurrences,

    pi_bar(o) = 1 / #occ(o) * sum_{occurrences} pi_theta(o_t),

for tokens occurring at least ``min_count`` times; the highest and lowest become the two word clouds.
"""

from __future__ import annotations

import re
import unicodedata
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

CATEGORIES = ("operator", "bracket", "number", "name", "tag/format", "punctuation", "word", "other")
_OPERATORS = set("+-*/=<>^%|&!~") | {"==", "!=", "<=", ">=", "->", "=>", "×", "÷", "±", "≤", "≥", "≠", "∧", "∨", "¬"}
_BRACKETS = set("()[]{}<>")
_LOGIC_WORDS = {"knight", "knave", "not", "and", "or", "if", "then", "iff", "true", "false", "is", "lying", "truth"}


@dataclass
class TokenOccurrences:
    """Per sampled completion token: its id, its text and pi_theta(o_t)."""

    token_ids: list[int]
    texts: list[str]
    probs: list[float]


def sample_token_probabilities(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[Any],
    *,
    samples_per_prompt: int = 4,
    max_new_tokens: int = 128,
    temperature: float = 0.7,
    batch_size: int = 4,
    seed: int = 0,
) -> TokenOccurrences:
    """Sample answers from ``model`` and return every completion token with its probability.

    Prompts are chat messages (rendered with the tokenizer's template) or plain strings. Probabilities are
    computed in a second forward pass from temperature-scaled logits (the distribution that was sampled).
    """
    import torch

    from .tasks.common import render_prompt

    if samples_per_prompt < 1 or max_new_tokens < 1:
        raise ValueError("samples_per_prompt and max_new_tokens must be >= 1")
    texts = [render_prompt(tokenizer, p)[0] for p in prompts]
    pad_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    out = TokenOccurrences([], [], [])
    gen = torch.Generator().manual_seed(seed)
    model.eval()
    try:
        for start in range(0, len(texts), batch_size):
            chunk = texts[start : start + batch_size]
            enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
            torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
            with torch.no_grad():
                seqs = model.generate(
                    **enc,
                    do_sample=True,
                    temperature=temperature,
                    top_k=0,
                    top_p=1.0,
                    max_new_tokens=max_new_tokens,
                    num_return_sequences=samples_per_prompt,
                    pad_token_id=tokenizer.pad_token_id,
                )
                attn = (seqs != tokenizer.pad_token_id).long()
                prompt_len = enc["input_ids"].shape[1]
                attn[:, :prompt_len] = enc["attention_mask"].repeat_interleave(samples_per_prompt, dim=0)
                logits = model(input_ids=seqs, attention_mask=attn).logits[:, prompt_len - 1 : -1].float()
                logp = torch.log_softmax(logits / temperature, dim=-1)
                comp = seqs[:, prompt_len:]
                tok_logp = logp.gather(-1, comp.unsqueeze(-1)).squeeze(-1)
            for row_ids, row_lp in zip(comp.tolist(), tok_logp.tolist()):
                for tid, lp in zip(row_ids, row_lp):
                    if tid == tokenizer.pad_token_id:
                        break
                    out.token_ids.append(tid)
                    out.texts.append(tokenizer.decode([tid]))
                    out.probs.append(float(torch.tensor(lp).exp()))
                    if tid == tokenizer.eos_token_id:
                        break
    finally:
        tokenizer.padding_side = pad_side
    return out


def average_probabilities(
    texts: Sequence[str], probs: Sequence[float], *, min_count: int = 5, strip: bool = True
) -> dict[str, tuple[float, int]]:
    """pi_bar(o) and #occ(o) for every token text seen at least ``min_count`` times (Section 1)."""
    if len(texts) != len(probs):
        raise ValueError(f"texts and probs differ in length ({len(texts)} vs {len(probs)})")
    if min_count < 1:
        raise ValueError(f"min_count must be >= 1, got {min_count}")
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for t, p in zip(texts, probs):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"probs must lie in [0, 1], got {p}")
        key = t.strip() if strip else t
        if not key:
            continue
        sums[key] += p
        counts[key] += 1
    return {k: (sums[k] / counts[k], counts[k]) for k in sums if counts[k] >= min_count}


def top_and_bottom(
    stats: dict[str, tuple[float, int]], k: int = 100
) -> tuple[list[tuple[str, float, int]], list[tuple[str, float, int]]]:
    """The ``k`` tokens with the highest and the lowest average probability (ties broken by count, then text)."""
    items = sorted(((t, p, n) for t, (p, n) in stats.items()), key=lambda x: (-x[1], -x[2], x[0]))
    k = min(k, len(items) // 2) if len(items) < 2 * k else k
    return items[:k], sorted(items[-k:], key=lambda x: (x[1], -x[2], x[0])) if k else []


def classify_token(text: str, names: Sequence[str] = ()) -> str:
    """A coarse category, to check the paper's claim that operators, brackets and names dominate the high end."""
    t = text.strip()
    if not t:
        return "other"
    if t in _BRACKETS or all(c in _BRACKETS for c in t):
        return "bracket"
    if t in _OPERATORS or all(c in _OPERATORS for c in t):
        return "operator"
    if re.fullmatch(r"\d+([.,]\d+)?", t):
        return "number"
    if t.startswith("<") and t.endswith(">") or t.startswith("</") or re.fullmatch(r"<\|?\w+\|?>?|\w+>|</?\w*", t):
        return "tag/format"
    if any(t == n or t == n[: len(t)] and len(t) >= 3 for n in names):
        return "name"
    if all(unicodedata.category(c).startswith("P") for c in t):
        return "punctuation"
    if t.lower() in _LOGIC_WORDS or t.isalpha():
        return "word"
    return "other"


def category_shares(items: Sequence[tuple[str, float, int]], names: Sequence[str] = ()) -> dict[str, float]:
    """Share of each category among ``items`` (as returned by :func:`top_and_bottom`)."""
    counts = dict.fromkeys(CATEGORIES, 0)
    for t, _, _ in items:
        counts[classify_token(t, names)] += 1
    n = max(1, len(items))
    return {c: round(v / n, 3) for c, v in counts.items()}


def word_cloud(
    items: Sequence[tuple[str, float, int]], *, high: bool = True, seed: int = 0, width: int = 600, height: int = 360
):
    """A wordcloud image: size grows with the average probability (``high``) or with 1 - probability."""
    from wordcloud import WordCloud

    freqs = {}
    for t, p, _ in items:
        key = t if t.strip() else repr(t)
        freqs[key] = max(1e-6, p if high else 1.0 - p)
    wc = WordCloud(
        width=width,
        height=height,
        background_color="white",
        random_state=seed,
        regexp=r"\S+",
        collocations=False,
        normalize_plurals=False,
    )
    return wc.generate_from_frequencies(freqs)


# ---------------------------------------------------------------------------------------------------------------
# Where the sampled tokens fall on Eq. 11's weight curve (notebook 03: is the toy representative of a real LM?)

HIST_KEYS = (
    "task",
    "model",
    "bins",
    "prob_counts",
    "weight_bins",
    "weight_counts",
    "share_at_lower",
    "share_between",
    "share_at_upper",
    "n_tokens",
)


def weight_histogram(
    probs: Sequence[float],
    *,
    task: str,
    model: str,
    n_bins: int = 20,
    n_weight_bins: int = 20,
    alpha: float = 2.0,
    mu: float = 0.25,
    tau: float = 9.0,
    lower: float = 1.0,
    upper: float = 1.4,
    tau_mode: str = "scale",
    atol: float = 1e-6,
) -> dict[str, Any]:
    """Histograms of sampled-token probabilities and of their TR weights (Eq. 11), and where the weights sit.

    ``share_at_lower``: tokens with w = L (|w - L| <= atol), ``share_at_upper``: w = U, ``share_between``: strictly
    between (the three add up to 1). Probabilities are binned on ``n_bins`` equal bins of [0, 1], weights on
    ``n_weight_bins`` equal bins of [L, U]; the top edge is inclusive (w = U and p = 1 land in the last bin).
    """
    import numpy as np
    import torch

    from .weights import token_weights

    if n_bins < 1 or n_weight_bins < 1:
        raise ValueError(f"n_bins and n_weight_bins must be >= 1, got {n_bins} and {n_weight_bins}")
    p = torch.as_tensor(list(probs), dtype=torch.float64)
    if p.numel() == 0:
        raise ValueError("probs is empty: no sampled tokens to histogram")
    w = token_weights(p, "tr", alpha=alpha, mu=mu, tau=tau, lower=lower, upper=upper, tau_mode=tau_mode).numpy()
    bins = np.linspace(0.0, 1.0, n_bins + 1)
    weight_bins = np.linspace(lower, upper, n_weight_bins + 1)
    prob_counts, _ = np.histogram(p.numpy(), bins=bins)
    weight_counts, _ = np.histogram(w, bins=weight_bins)
    n = int(p.numel())
    at_lower = int(np.sum(np.abs(w - lower) <= atol))
    at_upper = int(np.sum(np.abs(w - upper) <= atol))
    return {
        "task": task,
        "model": model,
        "bins": [round(float(b), 10) for b in bins],
        "prob_counts": [int(c) for c in prob_counts],
        "weight_bins": [round(float(b), 10) for b in weight_bins],
        "weight_counts": [int(c) for c in weight_counts],
        "share_at_lower": at_lower / n,
        "share_between": (n - at_lower - at_upper) / n,
        "share_at_upper": at_upper / n,
        "n_tokens": n,
        "weight_params": {"alpha": alpha, "mu": mu, "tau": tau, "lower": lower, "upper": upper, "tau_mode": tau_mode},
    }


def check_histogram(rec: dict[str, Any]) -> dict[str, Any]:
    """Raise ``ValueError`` naming the field when ``rec`` does not follow :data:`HIST_KEYS`' schema; return it."""
    missing = [k for k in HIST_KEYS if k not in rec]
    if missing:
        raise ValueError(f"token histogram lacks field(s) {missing}")
    for counts, edges in (("prob_counts", "bins"), ("weight_counts", "weight_bins")):
        if len(rec[counts]) != len(rec[edges]) - 1:
            raise ValueError(f"{counts} has {len(rec[counts])} entries for {len(rec[edges])} edges in {edges}")
        if sum(rec[counts]) != rec["n_tokens"]:
            raise ValueError(f"{counts} sums to {sum(rec[counts])}, not n_tokens = {rec['n_tokens']}")
    total = rec["share_at_lower"] + rec["share_between"] + rec["share_at_upper"]
    if abs(total - 1.0) > 1e-9:
        raise ValueError(f"share_at_lower + share_between + share_at_upper = {total}, not 1")
    return rec
