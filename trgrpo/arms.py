"""The arms a run compares, in one table (:data:`ARMS`): per arm id its display name (:func:`label`), its colour
(:func:`color`), the run settings it stands for, the paper's names of its rows and whether the toy controls run it."""

from __future__ import annotations

from typing import NamedTuple


class Arm(NamedTuple):
    label: str
    color: str
    spec: dict = {}  # the settings of a run of this arm (trgrpo.runs.toy_grid.toy_spec's fields); never modified
    paper: tuple[str, ...] = ()  # the method names of the paper's rows that ran this scheme (Tables 1-4, 7, 9)
    control: bool = False  # an arm of the toy controls (trgrpo.runs.toy_controls.ARMS, in this order)


# arm id: a scheme (record["scheme"]), a toy arm (trgrpo.runs.toy_grid.run_label), an LM arm or a KL weighting
ARMS = {
    "equal": Arm("GRPO", "tab:green", dict(scheme="equal"), ("GRPO", "Equal weight"), control=True),
    "grpo": Arm("GRPO", "tab:green"),
    "tr": Arm("TR-GRPO", "tab:blue", dict(scheme="tr"), ("TR-GRPO",)),
    "tr-surrogate": Arm("TR (surrogate)", "tab:blue", dict(scheme="tr", placement="surrogate"), control=True),
    "tr-ratio": Arm("TR (ratio, Eq. 9 as printed)", "tab:purple", dict(scheme="tr", placement="ratio"), control=True),
    "const-surrogate": Arm("const (scale only)", "tab:red", dict(scheme="const", placement="surrogate"), control=True),
    "tr_norm-surrogate": Arm(
        "tr_norm (regulation only)", "tab:cyan", dict(scheme="tr_norm", placement="surrogate"), control=True
    ),
    "reverse": Arm("Reverse (2 − w)", "tab:orange", dict(scheme="reverse"), ("Reverse weight",)),
    "reverse-surrogate": Arm("Reverse", "tab:orange", dict(scheme="reverse", placement="surrogate"), control=True),
    "random": Arm(
        "Random (surrogate)", "tab:gray", dict(scheme="random", placement="surrogate"), ("Random weight",), control=True
    ),
    "equal-randomreward": Arm("GRPO, random reward", "black"),
    "eq10": Arm("KL inside the weight (Eq. 10)", "tab:red", dict(kl_weighting="eq10")),
    "outside": Arm("KL outside the weight", "tab:blue", dict(kl_weighting="outside")),
    "plain": Arm("plain KL (Eq. 6)", "tab:green", dict(kl_weighting="plain")),
}


def label(key: str) -> str:
    """The display name of a scheme or arm id (``tr-surrogate-tau2`` -> ``TR (surrogate), τ = 2``)."""
    base, tau = key.split("-tau", 1) if "-tau" in key else (key, None)
    name = ARMS[base].label if base in ARMS else base
    return name if tau is None else f"{name}, τ = {tau}"


def color(key: str) -> str:
    """The colour of a scheme or arm id (``tr-surrogate-tau2`` takes ``tr-surrogate``'s)."""
    arm = ARMS.get(key.split("-tau")[0])
    return arm.color if arm else "tab:brown"
