"""Task families of the paper's experiments (Section 4.1, App. B.1): data, prompt, reward, evaluation.

* :mod:`trgrpo.tasks.kk` - Knights & Knaves logic puzzles (App. B.1.1, Table 5 reward, Table 1 evaluation).
* :mod:`trgrpo.tasks.math` - math with a binary boxed-answer reward (App. B.1.2, Table 2 evaluation).
* :mod:`trgrpo.tasks.arith` - two-number addition for a small chat model on a CPU (not a paper task; notebook 03 B).
* :mod:`trgrpo.tasks.search` - agentic search with a retrieval tool (Section 4.2.3, Eq. 14, Table 3).
* :mod:`trgrpo.tasks.addition` - the toy's two-digit addition for a 1M-parameter model (notebook 03 A).
* :mod:`trgrpo.tasks.common` - batched generation, the pass@k estimator, file readers.

A task registers its data, reward functions and evaluation by name (:mod:`trgrpo.tasks.registry`;
:mod:`trgrpo.tasks.paper_tasks` registers ``kk``, ``math`` and ``arith``) for
:func:`trgrpo.pipeline.experiment.run`. No module here imports the trainer.

Submodules load on first attribute access (``trgrpo.tasks.kk``), so importing the package is cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["addition", "arith", "common", "kk", "math", "registry", "search"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
