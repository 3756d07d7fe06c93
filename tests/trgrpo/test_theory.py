"""Theorem 3.1 / 3.2 numerics (trgrpo.theory), notebook 02's tables (trgrpo.readings) and the figures
(trgrpo.plots)."""

import math

import pytest
import torch

from trgrpo import readings, stats, theory
from trgrpo import theory as sampling
from trgrpo.runs import lm_science
from trgrpo.tasks import generation
from trgrpo.theory import TokenBatch
from trgrpo.weights import WeightParams

SQRT2 = math.sqrt(2)


# ---------------------------------------------------------------- Theorem 3.1: identity and bounds


@pytest.mark.parametrize("vocab", [2, 7, 1000])
@pytest.mark.parametrize("temperature", [0.05, 1.0, 5.0])
def test_identity_matches_autograd(vocab, temperature):
    g = torch.Generator().manual_seed(vocab)
    h = (torch.randn(6, vocab, generator=g, dtype=torch.float64) / temperature).requires_grad_(True)
    k = torch.randint(0, vocab, (6,), generator=g)
    logp = torch.log_softmax(h, dim=-1).gather(-1, k.unsqueeze(-1)).sum()
    (auto,) = torch.autograd.grad(logp, h)  # row i only depends on its own log pi: the sum separates
    assert torch.allclose(theory.log_softmax_grad(h.detach(), k), auto, atol=1e-12)


def test_theorem31_norm_is_the_vector_norm():
    p = theory.random_distributions(20, 50, 0.5, generator=torch.Generator().manual_seed(0))
    k = theory.pick_tokens(p, "uniform", generator=torch.Generator().manual_seed(1))
    direct = (torch.nn.functional.one_hot(k, 50).double() - p).norm(dim=-1)
    b = theory.theorem31_bounds(p, k)
    assert torch.allclose(b["norm"], direct, atol=1e-14)
    assert torch.allclose(b["lower"], 1 - b["p_k"], atol=1e-14)


def test_bounds_hold_on_random_distributions():
    s = theory.theorem31_samples(n=30, vocab_sizes=(2, 10, 1000, 49152), temperatures=(0.02, 0.3, 1.0, 3.0), seed=3)
    assert (s["norm"] >= s["lower"] * (1 - 1e-12)).all() and (s["norm"] <= s["upper"] * (1 + 1e-12)).all()
    rows = theory.bounds_summary(s)
    assert len(rows) == 16 and all(r["violations"] == 0 for r in rows)
    assert all(1 - 1e-12 <= r["ratio_min"] <= r["ratio_max"] <= SQRT2 + 1e-12 for r in rows)
    by = {(r["vocab_size"], r["temperature"]): r for r in rows}
    # V = 2: the rest of the mass sits on one token, so the upper bound is attained
    assert by[(2, 1.0)]["ratio_min"] == pytest.approx(SQRT2, abs=1e-12)
    # a flat distribution over many tokens attains the lower bound
    assert by[(49152, 3.0)]["ratio_max"] < 1.001
    # peaked distributions reach p_k near 1 and near 0
    assert by[(1000, 0.02)]["p_k_max"] > 0.999 and by[(1000, 0.02)]["p_k_min"] < 1e-6


def test_bounds_exact_when_pk_rounds_to_one():
    p = torch.tensor([[1.0, 1e-30, 0.0]], dtype=torch.float64)
    b = theory.theorem31_bounds(p, torch.tensor([0]))
    assert b["lower"].item() == pytest.approx(1e-30) and b["norm"].item() == pytest.approx(SQRT2 * 1e-30)


def test_random_distribution_inputs():
    with pytest.raises(ValueError):
        theory.random_distributions(3, 1)
    with pytest.raises(ValueError, match="how"):
        theory.pick_tokens(torch.ones(2, 3) / 3, "nope")
    p = theory.random_distributions(4, 9, 0.1, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(p.sum(-1), torch.ones(4, dtype=torch.float64))
    assert torch.equal(theory.pick_tokens(p, "argmax"), p.argmax(-1))


# ---------------------------------------------------------------- per-token gradient norms of a real LM


def _hand_batch(vocab: int) -> TokenBatch:
    """Two rows, the second left-padded by 3, completions from column 8; row 0 masked after its 5th token."""
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(3, vocab, (2, 14), generator=g)
    attn = torch.ones(2, 14, dtype=torch.long)
    attn[1, :3] = 0
    ids[1, :3] = 2  # pad
    comp = torch.zeros(2, 14, dtype=torch.long)
    comp[:, 8:] = 1
    comp[0, 13:] = 0
    attn[0, 13:] = 0
    return TokenBatch(input_ids=ids, attention_mask=attn, completion_mask=comp, prompt_length=8)


def _brute_force(model_dir, batch: TokenBatch, last_k: int, temperature: float):
    """One full forward + backward per token on an untied copy of the model, every group by autograd."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float64)
    model.lm_head.weight = torch.nn.Parameter(model.model.embed_tokens.weight.detach().clone())  # untie
    for p in model.parameters():
        p.requires_grad_(False)
    layers = model.model.layers
    groups = {
        "blocks": [p for layer in layers[len(layers) - last_k :] for p in layer.parameters()],
        "final_norm": list(model.model.norm.parameters()),
        "head": [model.lm_head.weight],
    }
    for ps in groups.values():
        for p in ps:
            p.requires_grad_(True)
    probs, norms = [], {k: [] for k in groups}
    for b in range(batch.input_ids.shape[0]):
        keep = batch.attention_mask[b].bool()
        ids = batch.input_ids[b, keep].unsqueeze(0)
        comp = batch.completion_mask[b, keep]
        for t in torch.nonzero(comp).squeeze(-1).tolist():
            logits = model(input_ids=ids).logits[0, t - 1] / temperature
            logp = torch.log_softmax(logits, -1)[ids[0, t]]
            flat = [p for ps in groups.values() for p in ps]
            grads = dict(zip(map(id, flat), torch.autograd.grad(logp, flat, allow_unused=True)))
            for name, ps in groups.items():
                sq = [float((grads[id(p)] ** 2).sum()) for p in ps if grads[id(p)] is not None]
                norms[name].append(math.sqrt(sum(sq)))
            probs.append(float(logp.detach().exp()))
    return torch.tensor(probs, dtype=torch.float64), {k: torch.tensor(v, dtype=torch.float64) for k, v in norms.items()}


@pytest.mark.parametrize("last_k,temperature", [(0, 1.0), (1, 0.7), (2, 1.0)])
def test_per_token_grad_norms_match_brute_force(tiny_model_dir, last_k, temperature):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float64)
    assert model.config.tie_word_embeddings
    flags = [p.requires_grad for p in model.parameters()]
    batch = _hand_batch(model.config.vocab_size)
    res = {
        "loop": theory.per_token_grad_norms(model, batch, last_k_blocks=last_k, temperature=temperature, chunk_size=4)
    }
    assert [p.requires_grad for p in model.parameters()] == flags  # restored
    probs, ref = _brute_force(tiny_model_dir, batch, last_k, temperature)
    assert batch.n_tokens == 11 and res["loop"].probs.shape == (11,)
    for r in res.values():
        assert torch.allclose(r.probs.double(), probs, rtol=1e-9)
        for name in ("blocks", "final_norm", "head"):
            assert torch.allclose(r.group_norms[name], ref[name], rtol=1e-7, atol=1e-12), name
        total = torch.sqrt(sum(v**2 for v in ref.values()))
        assert torch.allclose(r.grad_norm, total, rtol=1e-7)
        # the head's closed form: ||1_k - p|| ||a_L|| / T
        assert torch.allclose(r.group_norms["head"], r.one_hot_minus_p * r.hidden_norm / temperature, rtol=1e-9)
    assert torch.equal(res["loop"].sequence, torch.tensor([0] * 5 + [1] * 6))
    assert res["loop"].position.tolist() == [8, 9, 10, 11, 12] + [8, 9, 10, 11, 12, 13]
    assert res["loop"].subset["tied_head"] is True and res["loop"].subset["last_k_blocks"] == last_k
    if last_k == 0:
        assert (res["loop"].group_norms["blocks"] == 0).all()


def test_per_token_grad_norms_bad_inputs(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    batch = _hand_batch(model.config.vocab_size)
    with pytest.raises(ValueError, match="last_k_blocks"):
        theory.per_token_grad_norms(model, batch, last_k_blocks=3)
    empty = TokenBatch(batch.input_ids, batch.attention_mask, torch.zeros_like(batch.completion_mask), 8)
    with pytest.raises(ValueError, match="no completion"):
        theory.per_token_grad_norms(model, empty)


class _FakeGenerator:
    """Stands in for a model: `generate` appends fixed completions (with an EOS) to the prompt."""

    def __init__(self, completions):
        self.completions = torch.tensor(completions)

    def generate(self, input_ids, attention_mask, **kw):
        return torch.cat([input_ids, self.completions[: input_ids.shape[0]]], dim=1)


def test_sample_completions_masks_after_first_eos(tiny_model_dir):
    from trgrpo.models import load_model_and_tokenizer

    _, tok = load_model_and_tokenizer(tiny_model_dir)
    eos = tok.eos_token_id
    fake = _FakeGenerator([[10, 11, eos, eos, eos], [12, 13, 14, 15, 16]])
    msgs = [[{"role": "user", "content": "Who is a knight?"}], [{"role": "user", "content": "Hi"}]]
    b = theory.sample_completions(fake, tok, msgs, max_new_tokens=5)
    s = b.prompt_length
    assert b.completion_mask[:, :s].sum() == 0
    assert b.completion_mask[0, s:].tolist() == [1, 1, 1, 0, 0]  # up to and including the first EOS
    assert b.completion_mask[1, s:].tolist() == [1, 1, 1, 1, 1]
    assert b.attention_mask[0, s:].tolist() == [1, 1, 1, 0, 0]
    assert b.attention_mask[1, :s].sum() < s  # the shorter prompt is left-padded
    assert b.n_tokens == 8


def test_sample_completions_real_tiny_model(tiny_model_dir):
    from trgrpo.models import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(tiny_model_dir)
    msgs = [[{"role": "user", "content": "Who is a knight?"}], [{"role": "user", "content": "Hi"}]]
    b1 = theory.sample_completions(model, tok, msgs, max_new_tokens=6, seed=3)
    b2 = theory.sample_completions(model, tok, msgs, max_new_tokens=6, seed=3)
    assert torch.equal(b1.input_ids, b2.input_ids)  # seeded
    assert b1.input_ids.shape[1] == b1.prompt_length + 6 and 2 <= b1.n_tokens <= 12
    r = theory.per_token_grad_norms(model, b1, last_k_blocks=1)
    assert r.grad_norm.shape == (b1.n_tokens,) and (r.grad_norm > 0).all()


# ---------------------------------------------------------------- statistics and Theorem 3.2 spread


def test_spread_stats_hand_values():
    s = stats.spread_stats([1.0, 2.0, 3.0, 4.0])
    assert s["n"] == 4 and s["mean"] == 2.5 and s["median"] == 2.5 and s["max"] == 4.0
    # ddof = 1: sum of squares 5 over n - 1 = 3 (the convention of trgrpo.stats.mean_std)
    assert s["std"] == pytest.approx(math.sqrt(5 / 3)) and s["cv"] == pytest.approx(math.sqrt(5 / 3) / 2.5)
    assert s["max_over_median"] == pytest.approx(1.6)
    with pytest.raises(ValueError):
        stats.spread_stats([])


def test_theorem32_spread_hand_values():
    # p = 0 -> w = 1 (TR), 1 (Reverse); p = 0.5 -> w = 1.4 (TR), 0.6 (Reverse) under tau_mode="scale";
    # two values a, b: sd (ddof = 1) = |a - b| / sqrt(2)
    r2 = math.sqrt(2)
    rows = theory.theorem32_spread([2.0, 1.0], [0.0, 0.5])
    by = {(r["tau_mode"], r["scheme"]): r for r in rows}
    assert len(rows) == 6
    assert by[("scale", "equal")]["mean"] == pytest.approx(1.5) and by[("scale", "equal")]["cv"] == pytest.approx(
        r2 / 3
    )
    assert by[("scale", "tr")]["mean"] == pytest.approx(1.7) and by[("scale", "tr")]["cv"] == pytest.approx(
        r2 * 0.3 / 1.7
    )
    assert by[("scale", "reverse")]["mean"] == pytest.approx(1.3)
    assert by[("scale", "reverse")]["cv"] == pytest.approx(r2 * 0.7 / 1.3)
    assert by[("scale", "tr")]["w_max"] == pytest.approx(1.4) and by[("scale", "reverse")]["w_min"] == pytest.approx(
        0.6
    )
    # printed Eq. 11 (divide): w = 1 for every token, so all three schemes equal plain GRPO
    for scheme in ("equal", "tr", "reverse"):
        assert by[("divide", scheme)]["cv"] == pytest.approx(r2 / 3) and by[("divide", scheme)]["w_mean"] == 1.0
    with pytest.raises(ValueError, match="shape"):
        theory.theorem32_spread([1.0], [0.1, 0.2])


def test_binned_means_spearman_fit():
    x = [0.05, 0.15, 0.16, 0.95, 0.55]
    y = [1.0, 2.0, 4.0, 7.0, 5.0]
    b = stats.binned_means(x, y, bins=10)
    assert b["count"].tolist() == [1, 2, 1, 1]
    assert b["mean"].tolist() == pytest.approx([1.0, 3.0, 5.0, 7.0])
    assert b["left"].tolist() == pytest.approx([0.0, 0.1, 0.5, 0.9])
    assert b["sem"][1] == pytest.approx(math.sqrt(2) / math.sqrt(2))
    rho, pval = stats.spearman([1, 2, 3, 4], [10, 9, 3, 1])
    assert rho == pytest.approx(-1.0)
    c, r2 = stats.fit_proportional([1.0, 2.0, 3.0], [2.0, 4.0, 6.0])
    assert c == pytest.approx(2.0) and r2 == pytest.approx(1.0)


# ---------------------------------------------------------------- notebook 02's tables (trgrpo.readings)


# ---------------------------------------------------------------- figures


def test_head_terms_chunking_is_exact():
    head = torch.nn.Linear(8, 50, bias=True).double()
    a = torch.randn(7, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    tok = torch.randint(0, 50, (7,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # as per_token_grad_norms calls it
        one = theory._head_terms(a, tok, head, 0.7, 100)
        many = theory._head_terms(a, tok, head, 0.7, 2)
    for x, y in zip(one, many):
        assert torch.allclose(x, y, atol=1e-14)
    # with a bias the head's gradient also has the bias part: ||1_k - p||^2 (||a||^2 + 1) / T^2
    logp, ohmp, hnorm, head_sq, cot = one
    assert torch.allclose(head_sq, ohmp**2 * (hnorm**2 + 1) / 0.7**2)
    w = head.weight.detach().clone().requires_grad_(True)
    b = head.bias.detach().clone().requires_grad_(True)
    lp = torch.log_softmax(torch.nn.functional.linear(a[3], w, b) / 0.7, -1)[tok[3]]
    gw, gb = torch.autograd.grad(lp, (w, b))
    assert float(gw.pow(2).sum() + gb.pow(2).sum()) == pytest.approx(float(head_sq[3]), rel=1e-10)
    assert logp[3].item() == pytest.approx(lp.item(), rel=1e-12)


def test_readings_and_theory_take_one_weight_params():
    """The tables of notebooks 01/02 give the same rows for a WeightParams as for its fields as keywords."""
    params = WeightParams(alpha=1.5, mu=0.1, lower=0.9, upper=1.3)
    kw = {k: v for k, v in vars(params).items() if k != "scheme"}
    assert readings.tau_table((0.5, 9.0), params) == readings.tau_table((0.5, 9.0), alpha=1.5, mu=0.1, lower=0.9,
                                                                        upper=1.3)  # fmt: skip
    assert readings.lu_table(((1.0, 1.2),), params) == readings.lu_table(((1.0, 1.2),), alpha=1.5, mu=0.1)
    assert readings.kl_offset_table(params=params.replace(scheme="reverse")) == readings.kl_offset_table(
        scheme="reverse", **kw)  # fmt: skip
    assert readings.zero_gradient_fraction([0.1, 0.5], params=params) == readings.zero_gradient_fraction(
        [0.1, 0.5], **kw)  # fmt: skip
    g, p = [2.0, 1.0, 0.5], [0.0, 0.5, 0.9]
    assert theory.theorem32_spread(g, p, params=params) == theory.theorem32_spread(g, p, **kw)
    # tau_table sweeps tau and tau_mode over the given setting: its rows differ from the defaults' rows
    assert readings.tau_table((9.0,), params) != readings.tau_table((9.0,))


# ---------------------------------------------------------------- Leverage: the Kantorovich bound and the measurement


def test_kantorovich_bound_values():
    assert theory.kantorovich_cosine(1.0, 1.4) == pytest.approx(0.98601, abs=1e-5)
    assert math.degrees(math.acos(theory.kantorovich_cosine(1.0, 1.4))) == pytest.approx(9.59, abs=0.01)
    assert theory.kantorovich_cosine(0.5, 1.5) == pytest.approx(math.sqrt(3) / 2, abs=1e-12)  # 30 degrees
    assert theory.kantorovich_cosine(1.2, 1.2) == 1.0
    with pytest.raises(ValueError, match="lower"):
        theory.kantorovich_cosine(1.4, 1.0)


@pytest.mark.parametrize("bounds", [(1.0, 1.4), (0.5, 1.5), (1.0, 3.0)])
def test_bound_holds_for_orthogonal_gradients_and_is_attained(bounds):
    """Mutually orthogonal token gradients (columns of a random orthogonal matrix, random sizes), weights drawn in
    [L, U]: the actual cosine between sum g_i and sum w_i g_i never falls below 2 sqrt(LU)/(L+U); the two-point
    weights put a share L/(L+U) of the squared mass at U and reach it."""
    lo, up = bounds
    gen = torch.Generator().manual_seed(0)
    bound = theory.kantorovich_cosine(lo, up)
    worst = 1.0
    for _ in range(200):
        n = int(torch.randint(2, 40, (1,), generator=gen))
        q, _ = torch.linalg.qr(torch.randn(64, n, generator=gen, dtype=torch.float64))
        a = torch.rand(n, generator=gen, dtype=torch.float64) * 3
        w = lo + (up - lo) * torch.rand(n, generator=gen, dtype=torch.float64) ** 0.3
        g_grpo, g_tr = q @ a, q @ (w * a)
        cos = float(g_grpo @ g_tr / (g_grpo.norm() * g_tr.norm()))
        assert cos == pytest.approx(theory.orthogonal_cosine(w, a), abs=1e-12)
        assert cos >= bound - 1e-12
        worst = min(worst, cos)
    assert worst < 1.0
    ext = theory.extremal_weights(lo, up)
    a = torch.tensor([math.sqrt(ext["mass_at_upper"]), math.sqrt(1 - ext["mass_at_upper"])], dtype=torch.float64)
    assert theory.orthogonal_cosine([up, lo], a) == pytest.approx(bound, abs=1e-12)


def test_leverage_shares_hand_values():
    # two tokens below U (p 0.1, 0.2), one at U (p 0.9); ||pi||^2 given
    p, sq, w = [0.1, 0.2, 0.9], [0.1, 0.2, 0.82], [1.0, 1.2, 1.4]
    s = lm_science.leverage_shares(p, sq, w, upper=1.4)
    assert s["share_tokens_below_upper"] == pytest.approx(2 / 3)
    assert s["share_one_minus_p_below_upper"] == pytest.approx(1.7 / 1.8)
    logit = [math.sqrt(1 - 0.2 + 0.1), math.sqrt(1 - 0.4 + 0.2), math.sqrt(1 - 1.8 + 0.82)]
    assert s["share_logit_grad_norm_below_upper"] == pytest.approx(sum(logit[:2]) / sum(logit))


def test_update_leverage_on_a_tiny_model(tiny_model_dir):
    """Per-token samples line up; ||pi||^2 is the exact one (||e_k - pi||^2 = 1 - 2p + ||pi||^2 >= 0); with L = U the
    two losses are proportional (cosine 1); with Reverse-like spread the actual cosine is a real number <= 1."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    texts = ["1 + 2 =", "3 + 4 ="]
    reward = lambda i, t: float(len(t) % 2)  # noqa: E731 - any reward that differs within a group
    same = lm_science.update_leverage(
        model,
        tok,
        texts,
        reward,
        group_size=4,
        grad_batches=1,
        max_new_tokens=3,
        params=WeightParams(lower=1.2, upper=1.2),
    )
    n = same["prob"].size
    assert all(same[k].size == n for k in ("prob_sq_sum", "weight", "advantage", "batch", "completion"))
    assert same["reward"].size == 8 and set(same["completion"]) <= set(range(8))
    assert (1 - 2 * same["prob"] + same["prob_sq_sum"] >= -1e-6).all()
    assert same["grad_cosine"].size >= 1 and same["grad_cosine"] == pytest.approx(1.0, abs=1e-6)
    spread = lm_science.update_leverage(
        model,
        tok,
        texts,
        reward,
        group_size=4,
        grad_batches=2,
        params=WeightParams(alpha=50.0, mu=0.0, lower=0.5, upper=1.5),
    )
    assert ((spread["grad_cosine"] > -1) & (spread["grad_cosine"] <= 1 + 1e-9)).all()
    assert spread["grad_norm_grpo"].size == spread["grad_batch"].size == spread["grad_cosine"].size


# From test_sampling.py: trgrpo.theory's sampler: seeded, left-padded, the policy's own distribution; the theory and
# tasks.common's token statistics draw the same tokens through it.


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
