"""The arms a run compares, shown the same everywhere: one display name (:data:`LABELS`, :func:`label`) and one colour
(:data:`COLORS`, :func:`color`) per scheme, toy arm, LM arm and KL weighting."""

from __future__ import annotations

# Display names: record["scheme"], the toy arms (trgrpo.runs.toy_grid.run_label), the LM arms, the KL weightings
LABELS = {
    "equal": "GRPO",
    "grpo": "GRPO",
    "tr": "TR-GRPO",
    "tr-surrogate": "TR (surrogate)",
    "tr-ratio": "TR (ratio, Eq. 9 as printed)",
    "const-surrogate": "const (scale only)",
    "tr_norm-surrogate": "tr_norm (regulation only)",
    "reverse": "Reverse (2 − w)",
    "reverse-surrogate": "Reverse",
    "random": "Random (surrogate)",
    "equal-randomreward": "GRPO, random reward",
    "eq10": "KL inside the weight (Eq. 10)",
    "outside": "KL outside the weight",
    "plain": "plain KL (Eq. 6)",
}


def label(key: str) -> str:
    """The display name of a scheme or arm id (``tr-surrogate-tau2`` -> ``TR (surrogate), τ = 2``)."""
    if "-tau" in key:
        base, tau = key.split("-tau", 1)
        return f"{LABELS.get(base, base)}, τ = {tau}"
    return LABELS.get(key, key)


# One colour per scheme, toy arm (trgrpo.runs.toy_grid.run_label), LM arm and KL weighting; a tau variant takes
# its arm's
COLORS = {
    "equal": "tab:green",
    "grpo": "tab:green",
    "tr": "tab:blue",
    "tr-surrogate": "tab:blue",
    "tr-ratio": "tab:purple",
    "reverse": "tab:orange",
    "reverse-surrogate": "tab:orange",
    "random": "tab:gray",
    "equal-randomreward": "black",
    "const-surrogate": "tab:red",
    "tr_norm-surrogate": "tab:cyan",
    "eq10": "tab:red",
    "outside": "tab:blue",
    "plain": "tab:green",
}


def color(key: str) -> str:
    """The colour of a scheme or arm id (``tr-surrogate-tau2`` takes ``tr-surrogate``'s)."""
    return COLORS.get(key.split("-tau")[0], "tab:brown")
