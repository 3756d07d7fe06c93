"""Reading the rows of a task's data: a JSON / JSONL / parquet / CSV file (:func:`read_table`), a hub dataset with a
clear error offline (:func:`load_from_hub`), a cell as a list, the first present of several column names, a
completion as text."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def read_table(path: str | os.PathLike, *, allow_empty: bool = False) -> list[dict[str, Any]]:
    """Rows of a local ``.parquet``, ``.jsonl`` or ``.json`` file (UTF-8, a byte-order mark accepted) as dicts.

    Each bad input raises one error naming the file (and the line for JSON); no rows is an error unless
    ``allow_empty``."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"no such file: {p}")
    suffix = p.suffix.lower()
    if suffix not in (".parquet", ".jsonl", ".json"):
        raise ValueError(f"{p}: unsupported file type {suffix!r} (use .parquet, .jsonl or .json)")
    if suffix == ".parquet":
        import pandas as pd

        try:
            rows = pd.read_parquet(p).to_dict(orient="records")
        except Exception as e:  # pyarrow's ArrowInvalid, OSError, ...
            raise ValueError(f"{p}: not a readable parquet file ({type(e).__name__}: {e})") from e
    else:
        try:
            text = p.read_bytes().decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise ValueError(f"{p}: not UTF-8 text (byte {e.start}); decompress it or save it as UTF-8") from None
        lines = text.splitlines() if suffix == ".jsonl" else [text]
        rows = []
        for lineno, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{p}:{lineno if suffix == '.jsonl' else e.lineno}: not valid JSON ({e.msg})") from e
            rows.append(data)
        if suffix == ".json" and rows:
            data = rows[0]
            if isinstance(data, dict):  # {"data": [...]} or a single record
                data = next((v for v in data.values() if isinstance(v, list)), [data])
            if not isinstance(data, list):
                raise ValueError(f"{p}: expected a list of rows or an object, got {type(data).__name__}")
            rows = data
    if not rows and not allow_empty:
        raise ValueError(f"{p}: the file holds no rows (pass allow_empty=True if that is expected)")
    return rows


def as_list(value: Any) -> list[Any]:
    """A list from a list, tuple or numpy array (parquet hands arrays back); clear error otherwise."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if hasattr(value, "tolist"):
        out = value.tolist()
        if isinstance(out, list):
            return out
    raise TypeError(f"expected a list, got {type(value).__name__}")


def load_from_hub(repo: str, config: str | None, split: str, hint: str) -> list[dict[str, Any]]:
    """The rows of ``split`` of a hub dataset (needs a network); when the hub cannot be reached, a RuntimeError that
    says so and what to do instead (``hint``)."""
    import datasets

    try:
        ds = datasets.load_dataset(repo, config, split=split) if config else datasets.load_dataset(repo, split=split)
    except Exception as e:  # offline: ConnectionError, OfflineModeIsEnabled, DatasetNotFoundError, ...
        raise RuntimeError(
            f"could not load the dataset {repo!r} (split {split!r}) from the Hugging Face hub ({type(e).__name__}: "
            f"{e}). This machine may have no network (or HF_HUB_OFFLINE / HF_DATASETS_OFFLINE is set). {hint}"
        ) from e
    return [dict(row) for row in ds]


def completion_text(completion: Any) -> Any:
    """A string as is, a message list's last content; anything else unchanged (rewards score it as their minimum)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, (list, tuple)) and completion and isinstance(completion[-1], dict):
        return completion[-1].get("content")
    return completion


def first_present(row: dict[str, Any], keys: Iterable[str]) -> Any:
    """The value of the first key of ``keys`` present (and not None) in ``row``, else None."""
    for key in keys:
        if key in row and row[key] is not None:
            return row[key]
    return None
