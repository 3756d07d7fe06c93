"""The reference answers of the exercises checked by ``trgrpo.exercises.check_answers``: course data, read by the
instructor's build (``make student`` turns them into salted hashes in the student's workbooks) and by the tests; not
part of the library a student imports.

Per exercise: the library computation of the reference values (from the notebook's data, e.g. ``batch_p``), the
answers found by hand (compared within 0.1 %; the others, computed with the library, to 7 significant digits), a
hint per answer and one for the exercise."""

from __future__ import annotations

import math


def _advantages_0_1(data: dict) -> dict:
    import torch

    from trgrpo.loss import group_advantages

    def adv(rewards: list[int]) -> list[float]:
        return group_advantages(torch.tensor(rewards, dtype=torch.float64), len(rewards)).tolist()

    hard, easy, solved = adv([1] + [0] * 7), adv([1] * 7 + [0]), adv([1] * 8)
    return {"adv_right_hard": hard[0], "adv_wrong_hard": hard[-1], "adv_right_easy": easy[0], "adv_solved": solved[0]}


def _clip_0_2(data: dict) -> dict:
    import torch

    from trgrpo.loss import zero_gradient_mask

    one, lo, hi = torch.ones(1, dtype=torch.float64), 0.0, 1.0  # the eps_h above which r = 1.3 (A > 0) is not cut
    for _ in range(60):
        mid = (lo + hi) / 2
        cut = bool(zero_gradient_mask(torch.tensor([1.3], dtype=torch.float64), one, one, 0.2, mid))
        lo, hi = (mid, hi) if cut else (lo, mid)
    return {"eps_high_frees_13": hi}


def _k3_0_3(data: dict) -> dict:
    import torch

    p = torch.softmax(torch.tensor([2.0, 1.0, 0.0, -1.0], dtype=torch.float64), 0)
    q = torch.softmax(torch.tensor([1.0, 1.5, 0.5, 0.0], dtype=torch.float64), 0)
    return {"kl_exact": float(torch.nn.functional.kl_div(q.log(), p, reduction="sum"))}  # KL(p || q)


def _spread_1_1(data: dict) -> dict:
    import torch

    from trgrpo import theory

    out = {}
    for name, lo in (("all", 0.0), ("high", 0.35)):
        p = torch.linspace(lo, 0.99, 1000, dtype=torch.float64)
        rows = theory.theorem32_spread(1 - p, p, tau_modes=("scale",), schemes=("equal", "tr"))
        out.update({f"cv_{'plain' if r['scheme'] == 'equal' else 'tr'}_{name}": r["cv"] for r in rows})
    return out


def _weights_2_1(data: dict) -> dict:
    from trgrpo import paper
    from trgrpo.weights import WeightParams, weight_range

    def leaves_floor(mode: str) -> float:  # the tau where weight_range's maximum leaves L, by bisection
        lo, hi, up = (1e-3, 1e3, mode == "scale")
        for _ in range(200):
            mid = math.sqrt(lo * hi)
            above = weight_range(tau=mid, tau_mode=mode)[1] > WeightParams().lower
            lo, hi = (lo, mid) if above == up else (mid, hi)
        return math.sqrt(lo * hi)

    ident = {
        m: [t for t in paper.TABLE7_TAUS if weight_range(tau=t, tau_mode=m)[1] == 1.0] for m in ("scale", "divide")
    }
    return {
        "tau_star_scale": leaves_floor("scale"),
        "tau_star_divide": leaves_floor("divide"),
        "identity_taus_scale": ident["scale"],
        "identity_taus_divide": ident["divide"],
    }


def _kl_2_2(data: dict) -> dict:
    from trgrpo import readings

    # Table 7's range (L, U) = (1, 1.2): section 9's table of notebook 02 prints U = 1.4's, not these
    tr = readings.kl_offset_table(probs=(0.9,), upper=1.2)[0]
    rev = readings.kl_offset_table(probs=(0.9,), upper=1.2, scheme="reverse")[0]
    return {
        "kl_offset_12": tr["eq10_value"],
        "kl_offset_08": rev["eq10_value"],
        "kl_slope_12": tr["eq10_dlogpi"],
        "kl_push_12": 1 if tr["eq10_dlogpi"] < 0 else -1,  # descent moves log pi against the derivative
    }


def _silenced_2_3(data: dict) -> dict:
    import torch

    from trgrpo import loss, readings
    from trgrpo.weights import token_weights, weight_range

    p = torch.as_tensor(data["batch_p"], dtype=torch.float64)
    logps = p.log().requires_grad_(True)  # on-policy: r = 1; every advantage positive
    adv, mask = torch.ones(p.shape[0], dtype=torch.float64), torch.ones_like(p)
    out = {"p_cut_030": readings.zero_gradient_thresholds(eps_high=0.30, resolution=1e-6)["ratio"]["pos_from_p"]}
    for eps, name in ((0.24, "zero_frac_024"), (0.30, "zero_frac_030"), (0.5, "zero_frac_050")):
        res = loss.tr_grpo_loss(logps, None, adv, mask, token_weights(p), eps_high=eps, placement="ratio")
        (grad,) = torch.autograd.grad(res.loss, logps)
        out[name] = float((grad == 0).double().mean())  # autograd: no policy gradient at all
    out["eps_high_no_cut"] = weight_range()[1] - 1.0  # w never exceeds its largest value
    return out


def _synth_pbar(synth: dict, min_count: int) -> dict:
    from trgrpo import token_stats

    texts = [t for t, ps in synth.items() for _ in ps]
    return token_stats.average_probabilities(texts, [p for ps in synth.values() for p in ps], min_count=min_count)


def _spearman_4_2(data: dict) -> dict:
    from trgrpo import stats

    rho = {k: stats.spearman(*zip(*_synth_pbar(data["SYNTH"], k).values()))[0] for k in (1, 3)}
    return {"rho": rho[1], "rho_min3": rho[3]}


def _scales_4_4(data: dict) -> dict:
    import torch

    from trgrpo.weights import token_weights

    avg = _synth_pbar(data["SYNTH"], 1)
    w = dict(zip(avg, token_weights(torch.tensor([p for p, _ in avg.values()], dtype=torch.float64)).tolist()))
    hi, lo = max(avg, key=lambda t: avg[t][0]), min(avg, key=lambda t: avg[t][0])
    return {
        "g_grpo": {t: 1 - p for t, (p, _) in avg.items()},
        "g_tr": {t: w[t] * (1 - p) for t, (p, _) in avg.items()},
        "tr_factor": w[hi] / w[lo],
    }


ANSWERS: dict[str, dict] = {
    "0.1": dict(
        reference=_advantages_0_1,
        hand=("adv_right_hard", "adv_wrong_hard", "adv_right_easy", "adv_solved"),
        hint="Eq. 4: (r_i - mean) / (std + 1e-4), with the sample std of the group (G - 1 = 7 in its denominator)",
        adv_right_hard="the group's mean is 1/8; its sample std is the same for one 1 among eight as for one 0",
        adv_wrong_hard="a wrong answer's reward 0 lies below the mean 1/8: its advantage is negative",
        adv_right_easy="the easy group's mean is 7/8; its std is that of the hard group",
        adv_solved="every reward equals the mean: what is the numerator, and what keeps the denominator above 0?",
    ),
    "0.2": dict(
        reference=_clip_0_2,
        hand=("eps_high_frees_13",),
        hint="with A > 0 the clipped branch is the smaller one once r passes the upper end of the clip range",
        eps_high_frees_13="the token is free again once r = 1.3 lies inside the clip range: where is its upper end?",
    ),
    "0.3": dict(
        reference=_k3_0_3,
        hint="KL(pi_theta || pi_ref) = sum over tokens of p_theta log(p_theta / p_ref), in float64",
        kl_exact="the expectation is under p_theta: weight each token's log(p_theta / p_ref) by p_theta",
    ),
    "1.1": dict(
        reference=_spread_1_1,
        hint="the coefficient of variation is std / mean with ddof=1 (the sample standard deviation, as "
        "trgrpo.stats.mean_std), of w(p)(1-p) on the grid itself",
        cv_tr_all="TR-GRPO's factor is w(p)(1 - p) with Eq. 11's default weight (tau_mode='scale')",
        cv_tr_high="TR-GRPO's factor is w(p)(1 - p) with Eq. 11's default weight (tau_mode='scale')",
    ),
    "2.1": dict(
        reference=_weights_2_1,
        hand=("tau_star_scale", "tau_star_divide"),
        hint="tau* is a value of tau: the tau at which the largest weight over p in [0, 1] first leaves L = 1",
        tau_star_scale="under tau_mode='scale', at which p is the sigmoid's argument largest?",
        tau_star_divide="under tau_mode='divide' the argument is p / tau: which p makes it largest?",
        identity_taus_scale="the taus of paper.TABLE7_TAUS where weight_range(tau=t, tau_mode='scale') is (1, 1)",
        identity_taus_divide="the taus of paper.TABLE7_TAUS where weight_range(tau=t, tau_mode='divide') is (1, 1)",
    ),
    "2.2": dict(
        reference=_kl_2_2,
        hand=("kl_offset_12", "kl_offset_08", "kl_slope_12", "kl_push_12"),
        hint="at rho = 1 the statement gives both the value (w - log w - 1, natural log) and the derivative (1 - w)",
        kl_offset_12="evaluate w - log w - 1 at w = 1.2",
        kl_offset_08="evaluate w - log w - 1 at w = 0.8 (log 0.8 is negative)",
        kl_slope_12="the derivative in log pi at rho = 1 is 1 - w; mind its sign",
        kl_push_12="a descent step moves log pi against the derivative: which sign does the step on log pi have?",
    ),
    "2.3": dict(
        reference=_silenced_2_3,
        hand=("p_cut_030", "eps_high_no_cut"),
        hint="a token with A > 0 is silenced where its weight exceeds 1 + eps_h",
        p_cut_030="at which p does Eq. 11's weight reach 1 + eps_h = 1.30? The weight grows with p",
        zero_frac_024="the share of batch_p's tokens that readings.zero_gradient_fraction reports at eps_high=0.24",
        zero_frac_030="the share of batch_p's tokens that readings.zero_gradient_fraction reports at eps_high=0.30",
        zero_frac_050="the share of batch_p's tokens that readings.zero_gradient_fraction reports at eps_high=0.5",
        eps_high_no_cut="no token is silenced once 1 + eps_h is at least the largest weight Eq. 11 can give",
    ),
    "4.2": dict(
        reference=_spearman_4_2,
        hand=("rho", "rho_min3"),
        hint="Spearman's rho is Pearson's correlation of the ranks: rank pi_bar and the counts, then compare the ranks",
        rho="all five tokens (min_count=1)",
        rho_min3="only the tokens seen at least 3 times",
    ),
    "4.4": dict(
        reference=_scales_4_4,
        hand=("tr_factor",),
        hint="keys are the token texts stripped, as average_probabilities returns them; weights from token_weights",
        g_grpo="the GRPO scale of a token is 1 - pi_bar",
        g_tr="the TR-GRPO scale of a token is w(pi_bar) (1 - pi_bar), w from trgrpo.token_weights",
        tr_factor="write both ratios of scales as fractions: which factors cancel?",
    ),
}
