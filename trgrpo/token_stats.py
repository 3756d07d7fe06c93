"""Token-probability statistics behind Figure 1: which tokens does the model itself find likely?

pi_bar(o) is the mean of pi_theta(o_t) over the occurrences of token o in the model's own sampled answers (Section 1);
the highest and lowest become the two word clouds, and :func:`structural_claim` turns the claim into a count.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from trgrpo.tasks.generation import TokenOccurrences, sample_token_probabilities

CATEGORIES = ("operator", "bracket", "number", "name", "tag/format", "punctuation", "word", "other")
_OPERATORS = set("+-*/=<>^%|&!~") | {"==", "!=", "<=", ">=", "->", "=>", "×", "÷", "±", "≤", "≥", "≠", "∧", "∨", "¬"}
_BRACKETS = set("()[]{}<>")
_LOGIC_WORDS = {"knight", "knave", "not", "and", "or", "if", "then", "iff", "true", "false", "is", "lying", "truth"}


def average_probabilities(
    texts: Sequence[str], probs: Sequence[float], *, min_count: int = 5
) -> dict[str, tuple[float, int]]:
    """pi_bar(o) and #occ(o) for every token text (stripped of spaces) seen at least ``min_count`` times (Section 1)."""
    if len(texts) != len(probs):
        raise ValueError(f"texts and probs differ in length ({len(texts)} vs {len(probs)})")
    if min_count < 1:
        raise ValueError(f"min_count must be >= 1, got {min_count}")
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for t, p in zip(texts, probs):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"probs must lie in [0, 1], got {p}")
        key = t.strip()
        if not key:
            continue
        sums[key] += p
        counts[key] += 1
    return {k: (sums[k] / counts[k], counts[k]) for k in sums if counts[k] >= min_count}


def _continues(prev: str, text: str) -> bool:
    """True when token ``text`` continues the word that ``prev`` ended (no space between two letters or digits)."""
    if not prev or not text or text[0].isspace():
        return False
    return (prev[-1].isalpha() and text[0].isalpha()) or (prev[-1].isdigit() and text[0].isdigit())


def word_occurrences(
    texts: Sequence[str], probs: Sequence[float], completion: Sequence[int] | None = None
) -> tuple[list[str], list[float]]:
    """Whole words from sampled tokens: a letter (digit) right after a letter (digit) of the same completion
    continues the word (``" Kn" + "aves"``), and the word's probability is the product of its pieces'."""
    if len(texts) != len(probs) or (completion is not None and len(completion) != len(texts)):
        raise ValueError("texts, probs and completion differ in length")
    words: list[str] = []
    wprobs: list[float] = []
    for i, (t, p) in enumerate(zip(texts, probs)):
        same = i > 0 and (completion is None or completion[i] == completion[i - 1])
        if words and same and _continues(texts[i - 1], t):
            words[-1] += t
            wprobs[-1] *= float(p)
        else:
            words.append(t)
            wprobs.append(float(p))
    return words, wprobs


def top_and_bottom(
    stats: dict[str, tuple[float, int]], k: int = 100, *, max_share: float = 0.5
) -> tuple[list[tuple[str, float, int]], list[tuple[str, float, int]]]:
    """The ``k`` tokens with the highest and the lowest average probability (ties by count, then text); each end
    holds at most ``max_share`` of the tokens, so the ends never overlap."""
    if not 0.0 < max_share <= 0.5:
        raise ValueError(f"max_share must lie in (0, 0.5], got {max_share}")
    items = sorted(((t, p, n) for t, (p, n) in stats.items()), key=lambda x: (-x[1], -x[2], x[0]))
    k = min(k, int(len(items) * max_share))
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
    counts = Counter(classify_token(t, names) for t, _, _ in items)
    return {c: round(counts[c] / max(1, len(items)), 3) for c in CATEGORIES}


STRUCTURAL = ("operator", "bracket", "number", "name", "tag/format")  # Figure 1's "operators, brackets, names"


def wilson_interval(k: int, n: int) -> tuple[float, float]:
    """The 95 % Wilson score interval for a proportion k / n (statsmodels); (0, 1) when n = 0."""
    from statsmodels.stats.proportion import proportion_confint

    if not (isinstance(k, int) and isinstance(n, int)) or n < 0 or not 0 <= k <= n:
        raise ValueError(f"need integers 0 <= k <= n, got k={k!r}, n={n!r}")
    if n == 0:
        return 0.0, 1.0
    lo, hi = proportion_confint(k, n, method="wilson")
    return max(0.0, float(lo)), min(1.0, float(hi))


def difference_interval(k1: int, n1: int, k2: int, n2: int) -> tuple[float, float]:
    """Newcombe's 95 % hybrid score interval for p1 - p2 (statsmodels, his method 10); n1, n2 > 0."""
    from statsmodels.stats.proportion import confint_proportions_2indep

    return tuple(map(float, confint_proportions_2indep(k1, n1, k2, n2, method="newcomb", compare="diff")))


def structural_claim(
    high: Sequence[tuple[str, float, int]], low: Sequence[tuple[str, float, int]], names: Sequence[str] = ()
) -> dict[str, Any]:
    """Figure 1's claim as a count: structural items (:data:`STRUCTURAL`) at the high vs the low end, with Wilson
    and Newcombe intervals, Fisher's one-sided p and a verdict (supported / contradicted / undecided by the interval).
    """
    from scipy.stats import fisher_exact

    k_hi = sum(classify_token(t, names) in STRUCTURAL for t, _, _ in high)
    k_lo = sum(classify_token(t, names) in STRUCTURAL for t, _, _ in low)
    n_hi, n_lo = len(high), len(low)
    lo_d, hi_d = difference_interval(k_hi, n_hi, k_lo, n_lo) if n_hi and n_lo else (-1.0, 1.0)  # no items: no claim
    p = (
        float(fisher_exact([[k_hi, n_hi - k_hi], [k_lo, n_lo - k_lo]], alternative="greater")[1])
        if n_hi and n_lo
        else 1.0
    )
    verdict = "supported" if lo_d > 0 else "contradicted" if hi_d < 0 else "undecided"
    return {
        "k_high": k_hi,
        "n_high": n_hi,
        "share_high": k_hi / n_hi if n_hi else None,
        "ci_high": wilson_interval(k_hi, n_hi),
        "k_low": k_lo,
        "n_low": n_lo,
        "share_low": k_lo / n_lo if n_lo else None,
        "ci_low": wilson_interval(k_lo, n_lo),
        "difference": (k_hi / n_hi if n_hi else 0.0) - (k_lo / n_lo if n_lo else 0.0),
        "difference_ci": (lo_d, hi_d),
        "p_fisher_greater": p,
        "verdict": verdict,
    }


def word_cloud(items: Sequence[tuple[str, float, int]], *, high: bool = True, seed: int = 0):
    """A wordcloud image: size grows with the average probability (``high``) or with 1 - probability."""
    from wordcloud import WordCloud

    freqs = {(t if t.strip() else repr(t)): max(1e-6, p if high else 1.0 - p) for t, p, _ in items}
    wc = WordCloud(
        width=600,
        height=360,
        background_color="white",
        random_state=seed,
        regexp=r"\S+",
        collocations=False,
        normalize_plurals=False,
    )
    return wc.generate_from_frequencies(freqs)


def fmt_interval(ci: Sequence[float], digits: int = 2) -> str:
    """``[lo, hi]`` with ``digits`` decimals (the notebooks' way of quoting an interval)."""
    return f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def ends_rows(
    high: Sequence[tuple[str, float, int]], low: Sequence[tuple[str, float, int]], n: int = 10
) -> list[dict[str, Any]]:
    """Side-by-side rows of the ``n`` highest and ``n`` lowest items: text, average probability, occurrences."""
    return [
        {
            "highest": repr(h[0]),
            "π̄ (high)": round(h[1], 3),
            "occ (high)": h[2],
            "lowest": repr(lo[0]),
            "π̄ (low)": round(lo[1], 3),
            "occ (low)": lo[2],
        }
        for h, lo in zip(high[:n], low[:n])
    ]


def claim_rows(claims: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One table row per :func:`structural_claim` result (keyed by level: token, word)."""
    return [
        {
            "level": level,
            "high: structural / n": f"{c['k_high']} / {c['n_high']}",
            "share high [95% CI]": f"{c['share_high']:.2f} {fmt_interval(c['ci_high'])}",
            "low: structural / n": f"{c['k_low']} / {c['n_low']}",
            "share low [95% CI]": f"{c['share_low']:.2f} {fmt_interval(c['ci_low'])}",
            "difference [95% CI]": f"{c['difference']:+.2f} {fmt_interval(c['difference_ci'])}",
            "Fisher p (high > low)": round(c["p_fisher_greater"], 3),
            "verdict": c["verdict"],
        }
        for level, c in claims.items()
    ]


def sample_occurrences(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[Any],
    *,
    samples_per_prompt: int = 4,
    max_new_tokens: int = 96,
    temperature: float = 0.7,
    batch_prompts: int = 8,
    seed: int = 0,
) -> TokenOccurrences:
    """Sample ``samples_per_prompt`` completions of each prompt (a string or chat messages) and record every token
    with its probability under the temperature-scaled logits it was drawn from, taken from the sampling pass itself.

    One batched pass per chunk of ``batch_prompts`` prompts: the left-padded prompts are read once and their cache is
    repeated for the samples; a completion leaves the batch at its EOS token (not recorded) or after
    ``max_new_tokens`` tokens. Completions are numbered prompt by prompt, as :class:`TokenOccurrences` says.
    """
    import torch

    from trgrpo.tasks.generation import render_prompt

    k = samples_per_prompt
    if k < 1 or max_new_tokens < 1 or not temperature > 0:
        raise ValueError("samples_per_prompt and max_new_tokens must be >= 1 and temperature > 0")
    eos = model.generation_config.eos_token_id
    stop = torch.tensor(sorted({tokenizer.eos_token_id, *(eos if isinstance(eos, list) else [eos])} - {None}))
    texts = [render_prompt(tokenizer, p)[0] for p in prompts]
    gen = torch.Generator().manual_seed(seed)
    rows, ids, logps = [], [], []
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    model.eval()
    try:
        with torch.inference_mode():
            for start in range(0, len(texts), batch_prompts):
                chunk = texts[start : start + batch_prompts]
                enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
                mask = enc["attention_mask"]
                pos = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
                out = model(**enc, position_ids=pos, use_cache=True, logits_to_keep=1)
                cache, logits = out.past_key_values, out.logits[:, -1].repeat_interleave(k, 0)
                cache.batch_repeat_interleave(k)
                mask = mask.repeat_interleave(k, 0)
                row = torch.arange(start * k, (start + len(chunk)) * k)
                for step in range(max_new_tokens):
                    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
                    tok = torch.multinomial(logp.exp(), 1, generator=gen).squeeze(1)
                    live = ~torch.isin(tok, stop)
                    rows.append(row[live])
                    ids.append(tok[live])
                    logps.append(logp.gather(1, tok[:, None]).squeeze(1)[live])
                    if step == max_new_tokens - 1 or not live.any():
                        break
                    if not live.all():
                        keep = live.nonzero().squeeze(1)
                        cache.batch_select_indices(keep)
                        mask, tok, row = mask[keep], tok[keep], row[keep]
                    mask = torch.cat([mask, mask.new_ones(len(mask), 1)], dim=1)
                    pos = mask.sum(-1, keepdim=True) - 1
                    out = model(input_ids=tok[:, None], attention_mask=mask, position_ids=pos, past_key_values=cache)
                    logits = out.logits[:, -1]
    finally:
        tokenizer.padding_side = side
    if not rows:
        return TokenOccurrences([], [], [], [])
    row_all = torch.cat(rows)
    order = torch.sort(row_all, stable=True).indices  # steps were appended in order: a stable sort keeps them
    token_ids = torch.cat(ids)[order].tolist()
    text_of = {t: tokenizer.decode([t]) for t in set(token_ids)}
    probs = torch.cat(logps)[order].exp().tolist()
    return TokenOccurrences(token_ids, [text_of[t] for t in token_ids], probs, row_all[order].tolist())


def arith_token_histogram(
    model_name: str = "embedded",
    *,
    n_prompts: int = 64,
    samples_per_prompt: int = 8,
    max_new_tokens: int = 8,
    seed: int = 0,
) -> dict[str, Any]:
    """:func:`trgrpo.token_stats.weight_shares` of a chat model's own sampled tokens (T = 1) on ``n_prompts``
    training pairs of the addition task, before RL (notebook 03, Part B)."""
    from trgrpo.models import load_model_and_tokenizer
    from trgrpo.tasks import arith

    model, tokenizer = load_model_and_tokenizer(model_name)
    prompts = [arith.arith_prompt(p) for p in arith.make_problems(n_prompts, seed=seed)]
    kw = dict(samples_per_prompt=samples_per_prompt, max_new_tokens=max_new_tokens, temperature=1.0, seed=seed)
    occ = sample_token_probabilities(model, tokenizer, prompts, batch_size=16, **kw)
    return {
        "task": "arith",
        "model": str(model_name),
        **weight_shares(occ.probs, atol=1e-6),
        "n_prompts": n_prompts,
        **kw,
    }


def histogram_rows(hists: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per histogram record: sampled tokens and the shares at L, strictly between, at U."""
    return [
        {
            "": label,
            "sampled tokens": h["n_tokens"],
            "w = L (p small)": round(h["share_at_lower"], 3),
            "L < w < U": round(h["share_between"], 3),
            "w = U (p large)": round(h["share_at_upper"], 3),
        }
        for label, h in hists.items()
    ]


def figure1_difference(
    occ: TokenOccurrences,
    level: str,
    *,
    names: Sequence[str] = (),
    min_count: int = 5,
    end_share: float = 1 / 3,
    top_k: int = 100,
) -> float:
    """:func:`structural_claim`'s difference for the ``"token"`` or ``"word"`` items of ``occ``, as notebook 04."""
    texts, probs = occ.texts, occ.probs
    if level == "word":
        texts, probs = word_occurrences(occ.texts, occ.probs, occ.completion)
    elif level != "token":
        raise ValueError(f"level must be 'token' or 'word', got {level!r}")
    high, low = top_and_bottom(average_probabilities(texts, probs, min_count=min_count), k=top_k, max_share=end_share)
    return structural_claim(high, low, names)["difference"] if high and low else math.nan


def prompt_bootstrap(
    occ: TokenOccurrences,
    samples_per_prompt: int,
    *,
    levels: Sequence[str] = ("token", "word"),
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
    n_prompts: int | None = None,
    **rank: Any,
) -> dict[str, dict[str, Any]]:
    """Figure 1's count with the prompt as the unit: a cluster bootstrap resampling whole prompts. Per level: the
    observed difference, percentile intervals at 1 - alpha / m (Holm's first step over the m levels) and 95 %, the
    share of resamples <= 0; ``rank`` goes to :func:`figure1_difference`."""
    import numpy as np

    prompt = [c // samples_per_prompt for c in occ.completion]
    n_prompts = n_prompts if n_prompts is not None else (max(prompt) + 1 if prompt else 0)
    by_prompt: list[list[int]] = [[] for _ in range(n_prompts)]
    for i, p in enumerate(prompt):
        by_prompt[p].append(i)
    rng = np.random.default_rng(seed)
    observed = {lv: figure1_difference(occ, lv, **rank) for lv in levels}
    boots: dict[str, list[float]] = {lv: [] for lv in levels}
    for _ in range(n_boot):
        picked = [(j, i) for j, p in enumerate(rng.integers(0, n_prompts, n_prompts)) for i in by_prompt[p]]
        sample = TokenOccurrences(
            *([f[i] for _, i in picked] for f in (occ.token_ids, occ.texts, occ.probs)),
            # a resampled prompt's completions get fresh indices: words never join across copies
            [j * samples_per_prompt + occ.completion[i] % samples_per_prompt for j, i in picked],
        )
        for lv in levels:
            boots[lv].append(figure1_difference(sample, lv, **rank))
    m = len(levels)
    out = {}
    for lv in levels:
        b = np.asarray(boots[lv], dtype=float)
        b = b[np.isfinite(b)]
        qs = np.quantile(b, [alpha / m / 2, 1 - alpha / m / 2, 0.025, 0.975]).tolist() if b.size else [math.nan] * 4
        out[lv] = {
            "difference": observed[lv],
            "ci": qs[:2],
            "level": 1 - alpha / m,
            "ci95": qs[2:],
            "share_at_or_below_0": float((b <= 0).mean()) if b.size else math.nan,
            "n_boot": int(b.size),
            "n_prompts": n_prompts,
        }
    return out


# ---------------------------------------------------------------------------------------------------------------
# Task choice: how many sampled tokens the weight has to act on

PROB_BINS = [i / 20 for i in range(21)]  # 0, 0.05, ..., 1
WEIGHT_BINS = [1.0 + i * 0.02 for i in range(21)]  # L = 1 ... U = 1.4


def weight_shares(probs: Sequence[float], *, atol: float = 0.0) -> dict:
    """Histograms of sampled-token probabilities and their Eq. 11 weights (paper defaults), and the shares of
    tokens with w = L, L < w < U and w = U, within ``atol`` (the schema of ``results/toy/*/token_hist.json``)."""
    import numpy as np
    import torch

    from trgrpo.weights import DEFAULTS, token_weights

    p = np.asarray(probs, dtype=float)
    w = token_weights(torch.tensor(p, dtype=torch.float64), "tr").numpy()
    n = int(p.size)
    at_lo = int((w <= DEFAULTS.lower + atol).sum())
    at_hi = int((w >= DEFAULTS.upper - atol).sum())
    return {
        "bins": PROB_BINS,
        "prob_counts": np.histogram(p, bins=PROB_BINS)[0].tolist(),
        "weight_bins": WEIGHT_BINS,
        "weight_counts": np.histogram(np.clip(w, DEFAULTS.lower, DEFAULTS.upper), bins=WEIGHT_BINS)[0].tolist(),
        "share_at_lower": at_lo / n,
        "share_between": (n - at_lo - at_hi) / n,
        "share_at_upper": at_hi / n,
        "n_tokens": n,
    }
