"""The few lines every notebook needs, in one place: ``nb = setup("01_gradient_norm_theorem", SMOKE)``.

A notebook imports this in its first cell, prints :func:`versions`, keeps its ``parameters`` cell (papermill injects
into it; ``SMOKE = os.environ.get("TRGRPO_SMOKE", ...)`` there, so the cell runs with ``os`` alone, as
``trgrpo.pipeline.plan`` reads it), then calls :func:`setup`. The :class:`Notebook` it returns says where things go:

* ``root``      the checkout: the nearest of the working folder and its parents holding the ``trgrpo`` package
                (``notebooks/``, ``notebooks/solutions/``, ``student/``, ``student/exercises/``), else the working
                folder itself (a notebook copied elsewhere writes beside itself);
* ``results``   ``root/results``: the committed records (notebooks 03 and 08 read them; full runs write them);
                when the root has none (a student copy outside the checkout), the ``results/`` of the checkout
                that holds the imported package;
* ``runs``      where this run writes run records: ``root/results`` in full mode, ``root/runs/smoke-results`` in
                smoke mode (git-ignored: a smoke run leaves the committed records alone);
* ``figures``   ``$TRGRPO_FIGURES``, else ``root/figures``;
* ``tag``       ``"_smoke"`` in smoke mode, else ``""``: figure and headline names say the scale they came from
                (``figures/*smoke*`` and ``results/notebooks/*_smoke.json`` are git-ignored);
* :meth:`Notebook.save_headline` writes ``root/results/notebooks/<name><tag>.json`` and prints a short summary.

The package must be importable in the kernel (``make setup`` installs it, editable, into the ``.venv`` whose kernel
the notebooks use); no notebook edits ``sys.path``.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

SMOKE_ENV = "TRGRPO_SMOKE"
FALSE_WORDS = ("", "0", "false", "False")


def smoke_from_env() -> bool:
    """``TRGRPO_SMOKE`` as a switch: unset, empty, ``0`` or ``false`` is off, anything else on."""
    return os.environ.get(SMOKE_ENV, "0") not in FALSE_WORDS


def find_root(start: str | os.PathLike | None = None) -> Path:
    """The nearest of ``start`` (default: the working folder) and its parents that holds a ``trgrpo/`` package
    folder; ``start`` itself when none does."""
    here = Path(start or Path.cwd()).resolve()
    return next((p for p in (here, *here.parents) if (p / "trgrpo" / "__init__.py").is_file()), here)


def versions(*packages: str) -> str:
    """One line: python, each named package's version (torch with its device: CPU or the CUDA device count), and
    trgrpo's. ``print(versions("torch", "numpy"))`` is a notebook's first output."""
    import importlib

    from .. import __version__

    parts = [f"python {platform.python_version()}"]
    for name in packages:
        module = importlib.import_module(name)
        text = f"{name} {getattr(module, '__version__', '?')}"
        if name == "torch":
            n = module.cuda.device_count()
            text += f" ({n} CUDA device{'s' * (n != 1)})" if n else " (CPU)"
        parts.append(text)
    return " | ".join(parts + [f"trgrpo {__version__}"])


def cpu_threads(threads: int = 0) -> int:
    """Set torch's CPU threads and return the number: ``threads`` if > 0, else 2 (or 1 when the machine is already
    busy: two threads thrash on a loaded 2-core machine), never more than the cores."""
    import torch

    cores = os.cpu_count() or 1
    busy = hasattr(os, "getloadavg") and os.getloadavg()[0] >= cores
    n = threads if threads > 0 else (1 if busy else min(2, cores))
    torch.set_num_threads(n)
    return n


@dataclass(frozen=True)
class Notebook:
    """Where a notebook's outputs go, and its clock (see the module docstring)."""

    name: str
    smoke: bool
    root: Path
    started: float = field(default_factory=time.time)

    @property
    def tag(self) -> str:
        return "_smoke" if self.smoke else ""

    @property
    def results(self) -> Path:
        own = self.root / "results"
        package_checkout = Path(__file__).resolve().parents[2] / "results"
        return own if own.is_dir() or not package_checkout.is_dir() else package_checkout

    @property
    def runs(self) -> Path:
        return self.root / "runs" / "smoke-results" if self.smoke else self.root / "results"

    @property
    def figures(self) -> Path:
        return Path(os.environ.get("TRGRPO_FIGURES") or self.root / "figures")

    @property
    def headline_path(self) -> Path:
        return self.root / "results" / "notebooks" / f"{self.name}{self.tag}.json"

    def elapsed(self) -> float:
        """Seconds since :func:`setup`."""
        return time.time() - self.started

    def save_headline(self, headline: dict, keys: list[str] | None = None) -> Path:
        """Write ``headline`` to :attr:`headline_path` (JSON) and print ``saved to ...`` and at most eight of its
        entries (those named in ``keys``): :func:`trgrpo.teach.output.save_headline`."""
        from .output import save_headline

        save_headline(headline, self.headline_path, keys=keys)
        return self.headline_path


def setup(name: str, smoke: bool | None = None, *, root: str | os.PathLike | None = None) -> Notebook:
    """The :class:`Notebook` of the notebook ``name`` (its file name without ``.ipynb``), in smoke mode if ``smoke``
    (``None``: :func:`smoke_from_env`), rooted at ``root`` (default :func:`find_root`). Prints one line saying the
    mode."""
    if not isinstance(name, str) or not name or Path(name).name != name or name.endswith(".ipynb"):
        raise ValueError(f"name must be the notebook's file name without folder or .ipynb, got {name!r}")
    nb = Notebook(name, smoke_from_env() if smoke is None else bool(smoke), Path(root) if root else find_root())
    print(f"{name}: {'smoke mode (a fast pipeline check: its numbers mean nothing)' if nb.smoke else 'full mode'}")
    return nb
