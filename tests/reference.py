"""An independent, scalar, pure-Python implementation of Eq. 9-11 and their gradients.

Written from the paper's equations without looking at ``trgrpo``: per token, with ``math`` only, and
the derivative with respect to log pi_theta(o_t) worked out by hand case by case. The unit tests
compare the tensor code (values and autograd gradients) against it.
"""

from __future__ import annotations

import math


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def weight(
    p: float, scheme: str, alpha=2.0, mu=0.25, tau=9.0, lower=1.0, upper=1.4, tau_mode="scale", u: float | None = None
) -> float:
    """Eq. 11 (and Table 4's ablations); ``u`` is the uniform draw in [0, 1) for ``random``."""
    if scheme == "equal":
        return 1.0
    if scheme == "random":
        return 0.5 + u
    z = tau * p if tau_mode == "scale" else p / tau
    w = alpha * (sigmoid(z) - mu)
    w = min(max(w, lower), upper)
    return 2.0 - w if scheme == "reverse" else w


def token_value_and_grad(
    logp: float,
    old_logp: float,
    ref_logp: float,
    adv: float,
    w: float,
    *,
    beta: float,
    eps_l: float,
    eps_h: float,
    placement: str,
    kl_weighting: str,
) -> tuple[float, float]:
    """Return (objective J_t, dJ_t / d logp) for one token (before the 1/N of Eq. 5)."""
    r = math.exp(logp - old_logp)
    if placement == "ratio":
        x = w * r
        unclipped, clipped = x * adv, min(max(x, 1 - eps_l), 1 + eps_h) * adv
        if unclipped <= clipped:
            j_pol, g_pol = unclipped, w * r * adv  # d(w r A)/dlogp = w r A
        else:
            j_pol, g_pol = clipped, 0.0
            if 1 - eps_l < x < 1 + eps_h:  # clip inactive: both branches equal, gradient flows
                g_pol = w * r * adv
    else:
        unclipped, clipped = r * adv, min(max(r, 1 - eps_l), 1 + eps_h) * adv
        if unclipped <= clipped:
            j_pol, g_pol = w * unclipped, w * r * adv
        else:
            j_pol, g_pol = w * clipped, 0.0
            if 1 - eps_l < r < 1 + eps_h:
                g_pol = w * r * adv
    rho = math.exp(ref_logp - logp)
    if kl_weighting == "eq10":
        kl = w * rho - math.log(w * rho) - 1
        g_kl = -w * rho + 1  # d/dlogp of w rho - log w - (ref - logp) - 1
    elif kl_weighting == "outside":
        kl = w * (rho - math.log(rho) - 1)
        g_kl = w * (1 - rho)
    else:
        kl = rho - math.log(rho) - 1
        g_kl = 1 - rho
    return j_pol - beta * kl, g_pol - beta * g_kl


def loss_and_grads(logps, old_logps, ref_logps, advs, mask, weights, **kw):
    """Minus Eq. 9 summed over valid tokens / their count, and d loss / d logps (nested lists)."""
    n = sum(sum(row) for row in mask)
    total, grads = 0.0, []
    for i, row in enumerate(logps):
        grow = []
        for t, lp in enumerate(row):
            if not mask[i][t]:
                grow.append(0.0)
                continue
            j, g = token_value_and_grad(lp, old_logps[i][t], ref_logps[i][t], advs[i][t], weights[i][t], **kw)
            total += j
            grow.append(-g / n)
        grads.append(grow)
    return -total / n, grads
