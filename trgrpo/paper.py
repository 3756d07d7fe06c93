"""The numbers the paper reports, transcribed exactly (Tables 1, 2, 3, 4, 7, 8, 9), as :class:`PaperTable` rows, and
the settings of Table 6 every run, loss and figure reads (Eq. 11's L, U, tau, mu: :class:`trgrpo.weights.WeightParams`).

K&K tables have columns ``"3" .. "7"`` and ``"avg"`` (accuracies in [0, 1]); base models have ``method="base"``;
``gain_pct`` is the printed relative gain of a TR-GRPO row. Kept as printed: Table 2's two AIME columns look swapped
(pass@16 < avg@16; Section 4.2.2 reads them the other way), and Table 3's Qwen3-4B avg of the trained rows is not
the mean of their columns (35.21 vs 35.51, 40.18 vs 39.67).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KK_SIZES = ("3", "4", "5", "6", "7")  # number of people in a K&K puzzle (Table 1's columns)
KK_COLUMNS = (*KK_SIZES, "avg")
KK_PEOPLE = tuple(int(n) for n in KK_SIZES)  # the puzzles' sizes as numbers: the K&K task's train and eval default

# Table 6: the clipping range and the KL coefficient of every task, the sampling temperature per task (arith: ours)
EPS_LOW = 0.2  # eps_l
EPS_HIGH = 0.24  # eps_h (clip-higher)
BETA = 0.001  # the KL coefficient
TEMPERATURES = {"kk": 0.7, "math": 1.0, "search": 0.8, "arith": 1.0}


@dataclass(frozen=True)
class PaperTable:
    """One table, given as ``data``: (labels, values, gain_pct) per printed row; ``rows``: one dict per row."""

    number: int
    caption: str
    index: tuple[str, ...]
    columns: tuple[str, ...]
    data: tuple[tuple[tuple, tuple, float | None], ...] = field(repr=False)
    rows: tuple[dict[str, Any], ...] = field(init=False)

    def __post_init__(self) -> None:
        rows = tuple({**dict(zip(self.index, l)), **dict(zip(self.columns, v)), "gain_pct": g} for l, v, g in self.data)
        object.__setattr__(self, "rows", rows)

    def records(self) -> list[dict[str, Any]]:
        """The rows as fresh dicts (safe to modify)."""
        return [dict(r) for r in self.rows]

    def row(self, **match: Any) -> dict[str, Any]:
        """The single row whose labels equal ``match`` (``KeyError`` when none or several match)."""
        hits = [r for r in self.rows if all(r.get(k) == v for k, v in match.items())]
        if len(hits) != 1:
            raise KeyError(f"Table {self.number}: {len(hits)} rows match {match}")
        return dict(hits[0])

    def value(self, column: str, **match: Any) -> float:
        """One number: ``table.value("avg", model="Qwen2.5-3B-Instruct", method="TR-GRPO")``."""
        return float(self.row(**match)[column])


_KK = ("model", "method")

TABLE1 = PaperTable(
    number=1,
    caption="Experimental results on the K&K Logic Puzzles benchmark (accuracy by number of people).",
    index=_KK,
    columns=KK_COLUMNS,
    data=(
        (("GPT-4o", "base"), (0.57, 0.49, 0.32, 0.23, 0.21, 0.36), None),
        (("o1-2024-12-17", "base"), (0.51, 0.38, 0.38, 0.35, 0.30, 0.38), None),
        (("Deepseek-R1", "base"), (0.73, 0.77, 0.78, 0.75, 0.88, 0.78), None),
        (("Qwen2.5-3B-Instruct", "base"), (0.09, 0.10, 0.03, 0.05, 0.02, 0.06), None),
        (("Qwen2.5-3B-Instruct", "GRPO"), (0.64, 0.47, 0.35, 0.30, 0.21, 0.39), None),
        (("Qwen2.5-3B-Instruct", "TR-GRPO"), (0.76, 0.76, 0.61, 0.59, 0.44, 0.63), 61.5),
        (("Qwen2.5-7B-Instruct-1M", "base"), (0.22, 0.15, 0.08, 0.10, 0.02, 0.11), None),
        (("Qwen2.5-7B-Instruct-1M", "GRPO"), (0.91, 0.91, 0.77, 0.65, 0.61, 0.77), None),
        (("Qwen2.5-7B-Instruct-1M", "TR-GRPO"), (0.95, 0.95, 0.92, 0.87, 0.84, 0.91), 18.2),
    ),
)

_MATH_INDEX = ("model", "dataset", "method")
MATH_COLUMNS = ("olympiad_bench", "minerva", "math500", "amc_avg16", "aime_pass16", "aime_avg16", "avg")
TABLE2 = PaperTable(
    number=2,
    caption="Experimental results on math-related datasets (DSR for DeepScaleR and ORZ for Open Reasoner-Zero). "
    "Columns as printed; the two AIME columns look swapped (see module docstring).",
    index=_MATH_INDEX,
    columns=MATH_COLUMNS,
    data=(
        (("Qwen2.5-7B", None, "base"), (27.64, 18.38, 63.00, 22.21, 30.00, 5.00, 27.71), None),
        (("Qwen2.5-7B", "DSR", "GRPO"), (36.50, 29.66, 74.67, 47.72, 28.89, 16.46, 38.98), None),
        (("Qwen2.5-7B", "DSR", "TR-GRPO"), (38.48, 32.35, 79.40, 46.84, 43.33, 18.13, 43.09), 10.5),
        (("Qwen2.5-7B", "ORZ", "GRPO"), (38.23, 27.69, 78.33, 49.57, 32.22, 12.92, 39.83), None),
        (("Qwen2.5-7B", "ORZ", "TR-GRPO"), (40.12, 30.51, 78.60, 45.48, 43.33, 16.88, 42.49), 6.7),
    ),
)

SEARCH_COLUMNS = ("nq", "triviaqa", "popqa", "hotpotqa", "2wiki", "musique", "bamboogle", "avg")
TABLE3 = PaperTable(
    number=3,
    caption="Agentic task with VT-Search on knowledge-QA benchmarks (exact match, %): general QA (NQ, TriviaQA, "
    "PopQA) and multi-hop QA (HotpotQA, 2Wiki, Musique, Bamboogle).",
    index=_KK,
    columns=SEARCH_COLUMNS,
    data=(
        (("Qwen2.5-3B", "base"), (0.50, 1.20, 0.80, 0.50, 1.50, 0.00, 0.00, 0.64), None),
        (("Qwen2.5-3B", "GRPO"), (13.50, 29.40, 11.50, 14.50, 16.30, 1.30, 10.40, 13.84), None),
        (("Qwen2.5-3B", "TR-GRPO"), (41.80, 52.30, 39.10, 24.50, 20.30, 5.00, 8.00, 27.29), 97.2),
        (("Qwen3-4B", "base"), (31.68, 60.00, 38.60, 27.59, 14.89, 6.70, 23.20, 28.95), None),
        (("Qwen3-4B", "GRPO"), (46.48, 59.84, 40.39, 35.54, 28.87, 10.26, 27.20, 35.21), None),
        (("Qwen3-4B", "TR-GRPO"), (48.23, 64.11, 46.00, 36.60, 30.89, 10.26, 41.60, 40.18), 14.1),
    ),
)

_ABL = ("model", "method", "scheme")
TABLE4 = PaperTable(
    number=4,
    caption="Ablation of the token weight on Qwen2.5-3B-Instruct, K&K. ``scheme`` is the trgrpo.weights scheme.",
    index=_ABL,
    columns=KK_COLUMNS,
    data=(
        (("Qwen2.5-3B-Instruct", "base", None), (0.09, 0.10, 0.03, 0.05, 0.02, 0.06), None),
        (("Qwen2.5-3B-Instruct", "Equal weight", "equal"), (0.64, 0.47, 0.35, 0.30, 0.21, 0.39), None),
        (("Qwen2.5-3B-Instruct", "Random weight", "random"), (0.67, 0.43, 0.37, 0.32, 0.24, 0.41), None),
        (("Qwen2.5-3B-Instruct", "Reverse weight", "reverse"), (0.59, 0.46, 0.35, 0.33, 0.20, 0.39), None),
        (("Qwen2.5-3B-Instruct", "TR-GRPO", "tr"), (0.76, 0.76, 0.61, 0.59, 0.44, 0.63), None),
    ),
)

TABLE7_TAUS = (0.5, 2.0, 7.0, 9.0, 10.0, 20.0)
TABLE7_LU = ((1.0, 1.2), (1.0, 1.4), (0.8, 1.5), (0.5, 1.5))
_HP = ("parameter", "value")
TABLE7 = PaperTable(
    number=7,
    caption="Hyperparameter sensitivity of the token weight on Qwen2.5-3B-Instruct, K&K (App. C.1). "
    "``parameter`` is 'tau' (value a float) or 'L,U' (value a (lower, upper) tuple); others at the defaults.",
    index=_HP,
    columns=KK_COLUMNS,
    data=(
        (("tau", 0.5), (0.63, 0.48, 0.35, 0.31, 0.20, 0.39), None),
        (("tau", 2.0), (0.64, 0.49, 0.37, 0.33, 0.19, 0.40), None),
        (("tau", 7.0), (0.67, 0.62, 0.41, 0.37, 0.24, 0.46), None),
        (("tau", 9.0), (0.76, 0.76, 0.61, 0.59, 0.44, 0.63), None),
        (("tau", 10.0), (0.77, 0.79, 0.58, 0.57, 0.37, 0.62), None),
        (("tau", 20.0), (0.74, 0.68, 0.51, 0.46, 0.35, 0.55), None),
        (("L,U", (1.0, 1.2)), (0.77, 0.76, 0.60, 0.58, 0.40, 0.62), None),
        (("L,U", (1.0, 1.4)), (0.76, 0.76, 0.61, 0.59, 0.44, 0.63), None),
        (("L,U", (0.8, 1.5)), (0.74, 0.75, 0.57, 0.62, 0.42, 0.62), None),
        (("L,U", (0.5, 1.5)), (0.70, 0.65, 0.59, 0.60, 0.44, 0.60), None),
    ),
)

COST_COLUMNS = ("train_time_per_sample_min", "peak_gpu_memory_gb")
TABLE8 = PaperTable(
    number=8,
    caption="Computational cost of GRPO and TR-GRPO on K&K (App. C.2): training time per sample (minutes, as "
    "printed) and peak GPU memory (GB).",
    index=_KK,
    columns=COST_COLUMNS,
    data=(
        (("Qwen2.5-3B-Instruct", "GRPO"), (271.4, 459.7), None),
        (("Qwen2.5-3B-Instruct", "TR-GRPO"), (286.0, 460.2), None),
        (("LLaMa3.1-8B-Instruct", "GRPO"), (678.5, 581.2), None),
        (("LLaMa3.1-8B-Instruct", "TR-GRPO"), (722.2, 580.6), None),
    ),
)

TABLE9 = PaperTable(
    number=9,
    caption="K&K Logic Puzzles on various models (App. C.3).",
    index=_KK,
    columns=KK_COLUMNS,
    data=(
        *TABLE1.data[3:],  # Table 1's Qwen rows, printed again
        (("Qwen2.5-3B-Base", "base"), (0.14, 0.04, 0.02, 0.01, 0.02, 0.05), None),
        (("Qwen2.5-3B-Base", "GRPO"), (0.60, 0.54, 0.43, 0.38, 0.28, 0.45), None),
        (("Qwen2.5-3B-Base", "TR-GRPO"), (0.68, 0.62, 0.44, 0.47, 0.26, 0.49), 8.9),
        (("Mistral-7B-Instruct-v0.3", "base"), (0.05, 0.01, 0.00, 0.02, 0.00, 0.02), None),
        (("Mistral-7B-Instruct-v0.3", "GRPO"), (0.29, 0.16, 0.09, 0.11, 0.03, 0.14), None),
        (("Mistral-7B-Instruct-v0.3", "TR-GRPO"), (0.47, 0.27, 0.18, 0.15, 0.08, 0.23), 64.3),
        (("LLaMa3.1-8B-Instruct", "base"), (0.08, 0.00, 0.00, 0.00, 0.00, 0.02), None),
        (("LLaMa3.1-8B-Instruct", "GRPO"), (0.92, 0.92, 0.83, 0.79, 0.80, 0.85), None),
        (("LLaMa3.1-8B-Instruct", "TR-GRPO"), (0.89, 0.95, 0.88, 0.87, 0.81, 0.88), 3.5),
    ),
)

TABLES: dict[int, PaperTable] = {t.number: t for t in (TABLE1, TABLE2, TABLE3, TABLE4, TABLE7, TABLE8, TABLE9)}


def table(number: int) -> PaperTable:
    """The transcribed table ``number`` (1, 2, 3, 4, 7, 8 or 9)."""
    if number not in TABLES:
        raise KeyError(f"no transcribed Table {number}; available: {sorted(TABLES)}")
    return TABLES[number]


def table7_accuracy(tau: float | None = None, lu: tuple[float, float] | None = None) -> dict[str, float]:
    """Table 7's accuracies (sizes 3-7 and avg) for one tau or else one (L, U) range."""
    if tau is not None:
        r = TABLE7.row(parameter="tau", value=float(tau))
    else:
        r = TABLE7.row(parameter="L,U", value=tuple(float(x) for x in lu))
    return {c: float(r[c]) for c in KK_COLUMNS}
