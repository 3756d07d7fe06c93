"""Theorem 3.1 and 3.2 numerically (Section 3, App. D), and the sampler tasks.generation shares (:func:`sample_batch`:
temperature only, no top-k/top-p, as Theorem 3.1 and Figure 1 are about tokens the policy samples itself)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from trgrpo.stats import spread_stats, to_numpy
from trgrpo.weights import DEFAULTS, WeightParams, as_weight_params, token_weights


def pad_token_id(tokenizer: Any) -> int:
    """The id a batch is padded with: the tokenizer's pad token, else its EOS token."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad is None:
        raise ValueError("the tokenizer has neither a pad token nor an eos token to pad with")
    return pad


@torch.no_grad()
def sample_batch(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    *,
    max_new_tokens: int,
    temperature: float,
    num_return_sequences: int = 1,
) -> tuple[dict, torch.Tensor]:
    """(left-padded encoding of ``texts``, sampled sequences: prompt then completion columns); the caller seeds torch,
    each prompt gives ``num_return_sequences`` adjacent rows."""
    if max_new_tokens < 1 or num_return_sequences < 1:
        raise ValueError("max_new_tokens and num_return_sequences must be >= 1")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 to sample, got {temperature!r}")
    old_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        enc = tokenizer(list(texts), return_tensors="pt", padding=True, add_special_tokens=False)
    finally:
        tokenizer.padding_side = old_side
    seqs = model.generate(
        **enc,
        do_sample=True,
        temperature=temperature,
        top_k=0,  # the policy's whole distribution at this temperature
        top_p=1.0,
        max_new_tokens=max_new_tokens,
        num_return_sequences=num_return_sequences,
        pad_token_id=pad_token_id(tokenizer),
    )
    return enc, seqs


DEFAULT_VOCAB_SIZES = (2, 10, 1000, 49152)  # 49152 = SmolLM2's vocabulary
DEFAULT_TEMPERATURES = (0.05, 0.3, 1.0, 3.0)  # peaked ... flat (logits ~ N(0, 1) divided by these)


def log_softmax_grad(logits: torch.Tensor, k: torch.Tensor | int) -> torch.Tensor:
    """App. D: d log softmax(h)_k / d h = 1_k - softmax(h), for logits (..., V) and token ids k (...)."""
    p = torch.softmax(logits, dim=-1)
    k = torch.as_tensor(k, device=logits.device).expand(logits.shape[:-1])
    one_hot = torch.nn.functional.one_hot(k.long(), logits.shape[-1]).to(p.dtype)
    return one_hot - p


def theorem31_bounds(probs: torch.Tensor, k: torch.Tensor | int) -> dict[str, torch.Tensor]:
    """App. D's bounds: {"p_k", "lower" = 1 - p_k, "norm" = ||1_k - p||, "upper" = sqrt(2)(1 - p_k)}, with 1 - p_k
    summed as sum_{j != k} p_j (exact when p_k rounds to 1)."""
    k = torch.as_tensor(k, device=probs.device).expand(probs.shape[:-1]).long()
    other = 1 - torch.nn.functional.one_hot(k, probs.shape[-1]).to(probs.dtype)
    rest, rest_sq = (probs * other).sum(-1), (probs**2 * other).sum(-1)
    return {
        "p_k": probs.gather(-1, k.unsqueeze(-1)).squeeze(-1),
        "lower": rest,
        "norm": torch.sqrt(rest**2 + rest_sq),
        "upper": math.sqrt(2) * rest,
    }


def random_distributions(
    n: int, vocab_size: int, temperature: float = 1.0, *, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``n`` float64 distributions softmax(z / T) over ``vocab_size`` tokens, z ~ N(0, 1) (small T: peaked)."""
    if n < 1 or vocab_size < 2 or not temperature > 0:
        raise ValueError(f"need n >= 1, vocab_size >= 2, temperature > 0; got {n}, {vocab_size}, {temperature}")
    z = torch.randn(n, vocab_size, generator=generator, dtype=torch.float64)
    return torch.softmax(z / temperature, dim=-1)


def pick_tokens(probs: torch.Tensor, how: str = "sample", *, generator: torch.Generator | None = None) -> torch.Tensor:
    """Token ids k for each row of ``probs``: ``sample`` (k ~ p, as a model samples), ``uniform``, or ``argmax``."""
    if how == "sample":
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    if how == "uniform":
        return torch.randint(0, probs.shape[-1], probs.shape[:-1], generator=generator)
    if how == "argmax":
        return probs.argmax(-1)
    raise ValueError(f"how must be 'sample', 'uniform' or 'argmax', got {how!r}")


def theorem31_samples(
    n: int = 200,
    vocab_sizes: Sequence[int] = DEFAULT_VOCAB_SIZES,
    temperatures: Sequence[float] = DEFAULT_TEMPERATURES,
    *,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Both sides of the bounds for ``n`` distributions per (vocab size, temperature, pick): flat arrays
    ``vocab_size, temperature, pick, p_k, lower, norm, upper``."""
    g = torch.Generator().manual_seed(seed)
    cols: dict[str, list] = {k: [] for k in ("vocab_size", "temperature", "pick", "p_k", "lower", "norm", "upper")}
    for v in vocab_sizes:
        for t in temperatures:
            for how in ("sample", "uniform", "argmax"):
                probs = random_distributions(n, int(v), float(t), generator=g)
                b = theorem31_bounds(probs, pick_tokens(probs, how, generator=g))
                for key in ("p_k", "lower", "norm", "upper"):
                    cols[key].append(b[key].numpy())
                cols["vocab_size"].append(np.full(n, int(v)))
                cols["temperature"].append(np.full(n, float(t)))
                cols["pick"].append(np.full(n, how))
    return {k: np.concatenate(v) for k, v in cols.items()}


def bounds_summary(samples: dict[str, np.ndarray], *, rtol: float = 1e-12) -> list[dict]:
    """Per (vocab size, temperature): n, range of p_k, range of ||1_k - p|| / (1 - p_k) (tokens with 1 - p_k = 0
    skipped) and violations (a norm outside [lower, upper] by more than ``rtol`` relative)."""
    rows = []
    keys = sorted(set(zip(samples["vocab_size"].tolist(), samples["temperature"].tolist())))
    for v, t in keys:
        sel = (samples["vocab_size"] == v) & (samples["temperature"] == t)
        low, norm, up = samples["lower"][sel], samples["norm"][sel], samples["upper"][sel]
        ok = low > 0
        ratio = norm[ok] / low[ok]
        rows.append(
            {
                "vocab_size": int(v),
                "temperature": float(t),
                "n": int(sel.sum()),
                "p_k_min": float(samples["p_k"][sel].min()),
                "p_k_max": float(samples["p_k"][sel].max()),
                "ratio_min": float(ratio.min()) if ratio.size else float("nan"),
                "ratio_max": float(ratio.max()) if ratio.size else float("nan"),
                "violations": int(((norm < low * (1 - rtol)) | (norm > up * (1 + rtol))).sum()),
            }
        )
    return rows


@dataclass
class TokenBatch:
    """Prompts + sampled completions, left-padded: ``completion_mask`` marks the completion tokens."""

    input_ids: torch.Tensor  # (B, S)
    attention_mask: torch.Tensor  # (B, S)
    completion_mask: torch.Tensor  # (B, S), 1 on completion tokens (up to and including the first EOS)
    prompt_length: int  # S_prompt: completions start at this column

    @property
    def n_tokens(self) -> int:
        return int(self.completion_mask.sum())


@torch.no_grad()
def sample_completions(
    model,
    tokenizer,
    messages: Sequence[list[dict]] | Sequence[str],
    *,
    max_new_tokens: int = 96,
    temperature: float = 0.7,
    seed: int = 0,
) -> TokenBatch:
    """One completion per prompt (chat message lists or rendered strings); tokens after the first EOS masked out."""
    texts = [
        m if isinstance(m, str) else tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True)
        for m in messages
    ]
    torch.manual_seed(seed)
    enc, out = sample_batch(model, tokenizer, texts, max_new_tokens=max_new_tokens, temperature=temperature)
    s_prompt = enc["input_ids"].shape[1]
    completion = out[:, s_prompt:]
    is_eos = completion == tokenizer.eos_token_id
    after_eos = (is_eos.cumsum(1) - is_eos.long()) > 0  # strictly after the first EOS
    comp_mask = (~after_eos).long()
    attn = torch.cat([enc["attention_mask"], comp_mask], dim=1)
    cmask = torch.cat([torch.zeros_like(enc["attention_mask"]), comp_mask], dim=1)
    return TokenBatch(input_ids=out, attention_mask=attn, completion_mask=cmask, prompt_length=s_prompt)


@dataclass
class TokenGradNorms:
    """Per completion token (flattened over the batch): pi(o_t) and ||grad log pi(o_t)|| by parameter group."""

    probs: torch.Tensor  # (N,) pi(o_t) at the given temperature
    grad_norm: torch.Tensor  # (N,) ||grad_theta log pi(o_t)||_2 over the whole subset
    group_norms: dict[str, torch.Tensor]  # (N,) per group: "head", "final_norm", "blocks"
    one_hot_minus_p: torch.Tensor  # (N,) ||1_k - p||_2 (App. D)
    hidden_norm: torch.Tensor  # (N,) ||a_L|| (the final normed hidden state fed to the head)
    token_ids: torch.Tensor  # (N,)
    sequence: torch.Tensor  # (N,) row of the batch
    position: torch.Tensor  # (N,) column of the token in input_ids
    subset: dict[str, object]  # the parameter subset: last_k_blocks, blocks, tied_head, n_params


def per_token_grad_norms(
    model,
    batch: TokenBatch,
    *,
    last_k_blocks: int = 2,
    temperature: float = 1.0,
    chunk_size: int = 256,
) -> TokenGradNorms:
    """||grad_theta log pi(o_t)||_2 per completion token (Eq. 8), pi = softmax(logits / T), by group: the last
    ``last_k_blocks`` decoder blocks (Lemma D.1), the final norm, and the head in closed form ||1_k - p|| ||a_L|| / T
    (Theorem 3.1; a tied head counted as untied). One backward per token; other parameters frozen meanwhile."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    base = model.get_decoder() if hasattr(model, "get_decoder") else model.model  # the Llama/Qwen/Mistral layout
    layers, norm_mod, head = getattr(base, "layers", None), getattr(base, "norm", None), model.get_output_embeddings()
    if layers is None or norm_mod is None or head is None:
        raise ValueError(f"{type(model).__name__}: expected model.model.layers, .norm and an output embedding")
    if not 0 <= last_k_blocks <= len(layers):
        raise ValueError(f"last_k_blocks must be in [0, {len(layers)}], got {last_k_blocks}")
    start = len(layers) - last_k_blocks
    groups = {
        "blocks": [p for layer in layers[start:] for p in layer.parameters()],
        "final_norm": list(norm_mod.parameters()),
    }
    saved = {id(p): p.requires_grad for p in model.parameters()}
    was_training = model.training
    captured: dict[str, torch.Tensor] = {}
    hook = norm_mod.register_forward_hook(lambda mod, args, out: captured.__setitem__("a_L", out))
    rows: list[tuple[torch.Tensor, ...]] = []
    try:
        model.eval()
        for p in model.parameters():
            p.requires_grad_(False)
        for p in (p for g in groups.values() for p in g):
            p.requires_grad_(True)
        for b in range(batch.input_ids.shape[0]):
            keep = batch.attention_mask[b].bool()
            cols = torch.nonzero(keep).squeeze(-1)
            ids = batch.input_ids[b, keep].unsqueeze(0)
            cmask = batch.completion_mask[b, keep]
            targets = torch.nonzero(cmask).squeeze(-1)  # positions (in the unpadded row) of completion tokens
            targets = targets[targets > 0]
            if targets.numel() == 0:
                continue
            base(input_ids=ids, use_cache=False)  # the decoder only: logits are needed at `targets` alone
            a_L = captured["a_L"][0, targets - 1]  # (n, d) final normed hidden states predicting each target
            tok = ids[0, targets]
            with torch.no_grad():
                logp, ohmp, hnorm, head_sq, cotangent = _head_terms(a_L.detach(), tok, head, temperature, chunk_size)
            sq = _per_token_sq_norms(a_L, cotangent.to(a_L.dtype), groups)
            seq = torch.full((len(tok),), b, dtype=torch.long)
            norms = (head_sq.sqrt(), sq["final_norm"].sqrt(), sq["blocks"].sqrt())
            rows.append((logp.exp(), *norms, ohmp, hnorm, tok, seq, cols[targets]))
            del a_L, cotangent, captured["a_L"]
    finally:
        hook.remove()
        for p in model.parameters():
            p.requires_grad_(saved[id(p)])
        model.train(was_training)

    if not rows:
        raise ValueError("the batch has no completion tokens (completion_mask is all zeros)")
    probs, head_n, final_n, blocks_n, ohmp, hnorm, ids, seq, pos = (torch.cat(c).detach() for c in zip(*rows))
    group_norms = {"head": head_n, "final_norm": final_n, "blocks": blocks_n}
    total = torch.sqrt(sum(v**2 for v in group_norms.values()))
    n_params = {k: sum(p.numel() for p in g) for k, g in groups.items()}
    n_params["head"] = head.weight.numel() + (head.bias.numel() if getattr(head, "bias", None) is not None else 0)
    subset = {
        "last_k_blocks": last_k_blocks,
        "blocks": f"layers {start}..{len(layers) - 1} of {len(layers)}" if last_k_blocks else "no blocks",
        "tied_head": bool(getattr(model.config, "tie_word_embeddings", False)),
        "n_params": n_params,
    }
    return TokenGradNorms(probs, total, group_norms, ohmp, hnorm, ids, seq, pos, subset)


def _head_terms(a_L: torch.Tensor, tok: torch.Tensor, head, temperature: float, rows: int) -> tuple[torch.Tensor, ...]:
    """Per token of a_L (n, d), ``rows`` at a time: log pi, ||1_k - p||, ||a_L||, the head's squared gradient norm
    (App. D, plus a bias's) and the cotangent d log pi / d a_L = W^T (1_k - p) / T."""
    dt = torch.promote_types(a_L.dtype, torch.float32)  # at least float32 for the softmax
    w_head = head.weight.to(dt)
    bias = None if getattr(head, "bias", None) is None else head.bias.to(dt)
    outs: list[list[torch.Tensor]] = [[] for _ in range(5)]
    for s in range(0, a_L.shape[0], max(1, rows)):
        a, k = a_L[s : s + rows].to(dt), tok[s : s + rows]
        logits = torch.nn.functional.linear(a, w_head, bias) / temperature
        logp = torch.log_softmax(logits, dim=-1).gather(-1, k.unsqueeze(-1)).squeeze(-1)
        resid = log_softmax_grad(logits, k)  # (rows, V) = 1_k - p
        ohmp, hnorm = resid.norm(dim=-1), a.norm(dim=-1)
        head_sq = (ohmp * hnorm / temperature) ** 2
        if bias is not None:
            head_sq = head_sq + (ohmp / temperature) ** 2
        for lst, v in zip(outs, (logp, ohmp, hnorm, head_sq, (resid @ w_head) / temperature)):
            lst.append(v)
    return tuple(torch.cat(lst) for lst in outs)


def _per_token_sq_norms(
    outputs: torch.Tensor, cotangents: torch.Tensor, groups: dict[str, list[torch.nn.Parameter]]
) -> dict[str, torch.Tensor]:
    """Per row t and group: the squared norm of grad <outputs[t], cotangents[t]> (= grad log pi(o_t), chain rule)."""
    params = [p for g in groups.values() for p in g]
    res = {k: torch.zeros(outputs.shape[0], dtype=torch.float64) for k in groups}
    for t in range(outputs.shape[0] if params else 0):
        grads = torch.autograd.grad(
            outputs[t], params, grad_outputs=cotangents[t], retain_graph=True, allow_unused=True
        )
        grads = iter(grads)
        for k, g in groups.items():
            res[k][t] = sum(float((gr.double() ** 2).sum()) for _, gr in zip(g, grads) if gr is not None)
    return res


def theorem32_spread(
    grad_norms,
    probs,
    *,
    tau_modes: Sequence[str] = ("scale", "divide"),
    schemes: Sequence[str] = ("equal", "tr", "reverse"),
    params: WeightParams | str = "tr",
    **fields: Any,
) -> list[dict]:
    """Eq. 13 without |gamma|: the spread of w ||grad log pi|| per scheme and tau reading (other Eq. 11 fields from
    ``params`` / ``fields``): rows ``tau_mode, scheme, w_mean, w_min, w_max`` and :func:`~trgrpo.stats.spread_stats`."""
    g = torch.as_tensor(to_numpy(grad_norms))
    p = torch.as_tensor(to_numpy(probs)).clamp(0, 1)
    if g.shape != p.shape:
        raise ValueError(f"grad_norms and probs must have the same shape, got {tuple(g.shape)} and {tuple(p.shape)}")
    base = as_weight_params(params, **fields)
    rows = []
    for mode in tau_modes:
        for scheme in schemes:
            w = token_weights(p, **vars(base.replace(scheme=scheme, tau_mode=mode)))
            rows.append(
                {
                    "tau_mode": mode,
                    "scheme": scheme,
                    "w_mean": float(w.mean()),
                    "w_min": float(w.min()),
                    "w_max": float(w.max()),
                    **spread_stats(w * g),
                }
            )
    return rows


# ---------------------------------------------------------------------------------------------------------------
# Leverage: how far the token weights can turn an update (cos between the GRPO and the TR-GRPO gradient)


def kantorovich_cosine(lower: float = DEFAULTS.lower, upper: float = DEFAULTS.upper) -> float:
    """The least cos(g_GRPO, g_TR) over weights w in [L, U] when the token gradients are mutually orthogonal:
    2 sqrt(L U) / (L + U) (a Kantorovich-type inequality; attained by :func:`extremal_weights`)."""
    if not 0 < lower <= upper:
        raise ValueError(f"need 0 < lower <= upper, got lower={lower}, upper={upper}")
    return 2.0 * math.sqrt(lower * upper) / (lower + upper)


def orthogonal_cosine(weights, sizes) -> float:
    """cos(sum a_i e_i, sum w_i a_i e_i) for orthonormal e_i: sum w a^2 / sqrt(sum a^2 * sum w^2 a^2)
    (``sizes`` a_i = |A_i| ||grad log pi_i||)."""
    w, a2 = np.asarray(to_numpy(weights), float), np.asarray(to_numpy(sizes), float) ** 2
    return float((w * a2).sum() / math.sqrt(a2.sum() * (w * w * a2).sum()))


def extremal_weights(lower: float = DEFAULTS.lower, upper: float = DEFAULTS.upper) -> dict[str, float]:
    """The two-point weights that attain :func:`kantorovich_cosine`: a share L / (L + U) of the squared gradient
    mass at w = U, the rest at w = L."""
    return {"lower": lower, "upper": upper, "mass_at_upper": lower / (lower + upper)}
