"""Readable notebook output, set once at ``import trgrpo`` (issue 17).

* FutureWarnings that transformers, TRL, accelerate, datasets and huggingface_hub raise about their own internals
  (deprecations the reader cannot act on) are filtered; anything else still shows.
* Headless runs (``TRGRPO_HEADLESS=1``, set by ``trgrpo.batch`` and the notebook tests) turn progress bars off:
  a saved notebook would keep a widget frozen at "0%". In JupyterLab the bars stay (tqdm's notebook bar).
* The project's own ``[trgrpo] ...`` status lines go to stdout (they are not errors).
"""

from __future__ import annotations

import os
import warnings

DEPENDENCIES = r"(transformers|trl|accelerate|datasets|huggingface_hub|peft)(\.|$)"


def headless() -> bool:
    """True in a headless run (papermill from ``trgrpo.batch`` or the tests)."""
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
