"""Readable notebook output, set once at ``import trgrpo`` (issue 17).

* FutureWarnings that transformers, TRL, accelerate, datasets and huggingface_hub raise about their own internals
  (deprecations the reader cannot act on) are filtered; anything else still shows.
* Headless runs (``TRGRPO_HEADLESS=1``, set by ``trgrpo.tooling.batch`` and the notebook tests) turn progress bars off:
  a saved notebook would keep a widget frozen at "0%". In JupyterLab the bars stay (tqdm's notebook bar).
* The project's own ``[trgrpo] ...`` status lines go to stdout (they are not errors).
"""

from __future__ import annotations

import os
import warnings

DEPENDENCIES = r"(transformers|trl|accelerate|datasets|huggingface_hub|peft)(\.|$)"


def headless() -> bool:
    """True in a headless run (papermill from ``trgrpo.tooling.batch`` or the tests)."""
    return os.environ.get("TRGRPO_HEADLESS", "0") not in ("", "0", "false", "False")


def configure() -> None:
    """Filter the dependencies' FutureWarnings; in a headless run, disable progress bars (tqdm, transformers, hub)."""
    warnings.filterwarnings("ignore", category=FutureWarning, module=DEPENDENCIES)
    if headless():
        os.environ.setdefault("TQDM_DISABLE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
        import sys

        if "transformers" in sys.modules:  # imported before trgrpo: its bar switch was read already
            sys.modules["transformers"].utils.logging.disable_progress_bar()


def _short(value: object, width: int = 60) -> str:
    text = f"{value:.4g}" if isinstance(value, float) else str(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def save_headline(headline: dict, path: str | os.PathLike, keys: list[str] | None = None, max_items: int = 8) -> str:
    """Write a notebook's ``headline`` record to ``path`` (atomic JSON, NaN -> null) and print a short summary:
    a ``saved to PATH`` line, then ``key: value`` for at most ``max_items`` top-level scalar entries (those named in
    ``keys``, in that order, else the first ones; nested entries are in the file, not on screen). Returns the text."""
    from pathlib import Path

    from ..pipeline.experiment import write_json

    if not isinstance(headline, dict):
        raise TypeError(f"headline must be a dict, got {type(headline).__name__}")
    saved = write_json(Path(path), headline)
    unknown = [k for k in keys or [] if k not in headline]
    if unknown:
        raise KeyError(f"keys not in headline: {unknown}")
    items = [(k, headline[k]) for k in keys] if keys else list(headline.items())
    scalars = [(k, v) for k, v in items if v is None or isinstance(v, (bool, int, float, str))]
    lines = [f"saved to {saved}"] + [f"  {k}: {_short(v)}" for k, v in scalars[:max_items]]
    rest = len(headline) - min(len(scalars), max_items)
    if rest:
        lines.append(f"  (+{rest} more entries in the file)")
    text = "\n".join(lines)
    print(text)
    return text
