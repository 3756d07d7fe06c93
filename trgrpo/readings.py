"""Tables for notebook 02, the three readings of docs/design.md next to the paper: tau (:func:`tau_table`,
:func:`lu_table`, Table 7), Eq. 9's placement (``zero_gradient_*``), Eq. 10 vs 12 (:func:`kl_offset_table`).
Eq. 11's settings: a :class:`~trgrpo.weights.WeightParams` ``params`` or its fields as keywords."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from trgrpo.loss import KL_WEIGHTINGS, PLACEMENTS, kl_term, zero_gradient_mask
from trgrpo.paper import EPS_HIGH, EPS_LOW, KK_COLUMNS, TABLE7_LU, TABLE7_TAUS, table7_accuracy
from trgrpo.weights import TAU_MODES, WeightParams, as_weight_params, token_weights

PROBE_PROBS = (0.01, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.9)


def _weights(p: torch.Tensor, params: WeightParams | str, fields: dict) -> torch.Tensor:
    return token_weights(p, **vars(as_weight_params(params, **fields)))


def _grid(resolution: float) -> torch.Tensor:
    return torch.linspace(0.0, 1.0, int(round(1.0 / resolution)) + 1, dtype=torch.float64)


def first_p(condition: torch.Tensor, p: torch.Tensor) -> float | None:
    """The smallest p of the grid where ``condition`` holds (``None`` when it never does)."""
    idx = torch.nonzero(condition)
    return float(p[idx[0, 0]]) if idx.numel() else None


def _weight_columns(prefix: str, params: WeightParams, resolution: float = 1e-5) -> dict:
    """Eq. 11's range on [0, 1] and where it leaves its clip bounds: the smallest grid p with w > L, with w = U."""
    p = _grid(resolution)
    w = token_weights(p, **vars(params.replace(scheme="tr")))
    return {
        f"{prefix}w_min": float(w.min()),
        f"{prefix}w_max": float(w.max()),
        f"{prefix}p_above_L": first_p(w > params.lower + 1e-12, p),
        f"{prefix}p_at_U": first_p(w >= params.upper - 1e-12, p),
    }


def _table7_rows(settings: Sequence[dict], base: WeightParams, tau_modes: Sequence[str]) -> list[dict]:
    """Per setting (``{"tau": ..}`` or ``{"lower": .., "upper": ..}``): w range and thresholds per mode, and Table 7's
    accuracy (``None`` where the paper has none)."""
    rows = []
    for setting in settings:
        row: dict = {k: float(v) for k, v in setting.items()}
        for mode in tau_modes:
            row.update(_weight_columns(f"{mode}_", base.replace(**setting, tau_mode=mode)))
        key = {"tau": row["tau"]} if "tau" in row else {"lu": (row["lower"], row["upper"])}
        try:
            acc = table7_accuracy(**key)
        except KeyError:
            acc = {}
        row.update({f"paper_{c}": acc.get(c) for c in KK_COLUMNS})
        rows.append(row)
    return rows


def tau_table(
    taus: Sequence[float] = TABLE7_TAUS,
    params: WeightParams | str = "tr",
    *,
    tau_modes: Sequence[str] = TAU_MODES,
    **fields: Any,
) -> list[dict]:
    """Table 7's tau sweep: ``tau``, ``{mode}_w_min``, ``_w_max``, ``_p_above_L``, ``_p_at_U`` per ``tau_mode``, and
    the paper's ``paper_3`` .. ``paper_7``, ``paper_avg``."""
    base = as_weight_params(params, **fields).replace(scheme="tr")
    return _table7_rows([{"tau": t} for t in taus], base, tau_modes)


def lu_table(
    ranges: Sequence[tuple[float, float]] = TABLE7_LU,
    params: WeightParams | str = "tr",
    *,
    tau_modes: Sequence[str] = TAU_MODES,
    **fields: Any,
) -> list[dict]:
    """Table 7's (L, U) ranges, as :func:`tau_table` (keys ``lower``, ``upper`` instead of ``tau``)."""
    base = as_weight_params(params, **fields).replace(scheme="tr")
    return _table7_rows([{"lower": lo, "upper": hi} for lo, hi in ranges], base, tau_modes)


def _zero_gradient(p, ratio, eps_low, eps_high, params, fields) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(w, ``{placement}_{pos|neg}`` -> which tokens of probabilities ``p`` get no policy gradient at ``ratio``)."""
    w = _weights(p, params, fields)
    r = torch.full_like(p, float(ratio))
    return w, {
        f"{pl}_{name}": zero_gradient_mask(r, torch.full_like(p, sign), w, eps_low, eps_high, pl)
        for pl in PLACEMENTS
        for name, sign in (("pos", 1.0), ("neg", -1.0))
    }


def zero_gradient_table(
    probs: Sequence[float] = PROBE_PROBS,
    *,
    ratio: float = 1.0,
    eps_low: float = EPS_LOW,
    eps_high: float = EPS_HIGH,
    params: WeightParams | str = "tr",
    **fields: Any,
) -> list[dict]:
    """Reading 2 (Eq. 9) per p at ``ratio``: ``p``, ``w``, ``w_times_r``, ``{placement}_{pos|neg}`` (True = zero
    policy gradient)."""
    p = torch.tensor([float(x) for x in probs], dtype=torch.float64)
    w, zero = _zero_gradient(p, ratio, eps_low, eps_high, params, fields)
    return [
        {
            "p": float(p[i]),
            "w": float(w[i]),
            "w_times_r": float(w[i] * ratio),
            **{k: bool(z[i]) for k, z in zero.items()},
        }
        for i in range(len(p))
    ]


def zero_gradient_thresholds(
    *,
    ratio: float = 1.0,
    eps_low: float = EPS_LOW,
    eps_high: float = EPS_HIGH,
    resolution: float = 1e-5,
    params: WeightParams | str = "tr",
    **fields: Any,
) -> dict[str, dict[str, float | None]]:
    """Per placement, on a grid: the smallest p whose A > 0 token gets no policy gradient (``pos_from_p``), the
    largest p whose A < 0 token gets none (``neg_up_to_p``); ``None``: no such p."""
    p = _grid(resolution)
    _, zero = _zero_gradient(p, ratio, eps_low, eps_high, params, fields)
    out = {}
    for pl in PLACEMENTS:
        neg = torch.nonzero(zero[f"{pl}_neg"])
        out[pl] = {
            "pos_from_p": first_p(zero[f"{pl}_pos"], p),
            "neg_up_to_p": float(p[neg[-1, 0]]) if neg.numel() else None,
        }
    return out


def zero_gradient_fraction(
    probs,
    *,
    ratio: float = 1.0,
    eps_low: float = EPS_LOW,
    eps_high: float = EPS_HIGH,
    params: WeightParams | str = "tr",
    **fields: Any,
) -> dict[str, float]:
    """Share of the tokens ``probs`` that would get no policy gradient at ``ratio``: ``{placement}_{pos|neg}``."""
    p = torch.as_tensor(probs, dtype=torch.float64).flatten()
    _, zero = _zero_gradient(p, ratio, eps_low, eps_high, params, fields)
    return {k: float(z.double().mean()) if p.numel() else 0.0 for k, z in zero.items()}


def kl_offset_table(
    probs: Sequence[float] = PROBE_PROBS,
    *,
    kl_weightings: Sequence[str] = KL_WEIGHTINGS,
    params: WeightParams | str = "tr",
    **fields: Any,
) -> list[dict]:
    """Reading 3 (Eq. 10 vs 12) at pi = pi_ref: ``p``, ``w``, ``{mode}_value``, ``{mode}_dlogpi`` (d KL / d log pi)
    per ``kl_weighting``, and Eq. 10's minimum ``eq10_target_ratio`` = w, ``eq10_target_p`` = w p."""
    p = torch.tensor([float(x) for x in probs], dtype=torch.float64)
    w = _weights(p, params, fields)
    ref = p.log()
    rows = [
        {"p": float(p[i]), "w": float(w[i]), "eq10_target_ratio": float(w[i]), "eq10_target_p": float(w[i] * p[i])}
        for i in range(len(p))
    ]
    for mode in kl_weightings:
        logps = ref.clone().requires_grad_(True)
        kl = kl_term(logps, ref, w, mode)
        (grad,) = torch.autograd.grad(kl.sum(), logps)
        for i, row in enumerate(rows):
            row[f"{mode}_value"] = float(kl[i].detach())
            row[f"{mode}_dlogpi"] = float(grad[i])
    return rows
