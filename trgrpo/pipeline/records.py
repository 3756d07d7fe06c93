"""The run record: one schema for every task, its provenance, and the JSON files it lives in.

A run record is ``results/<group>/<name>.json``, written once at the end of a run by :func:`write_result`
(through :func:`trgrpo.pipeline.experiment.run` for every task: addition toy, K&K, math, arithmetic, search). Its
schema is
:data:`RUN_FIELDS` (required, with their types) and :data:`OPTIONAL_FIELDS`; :func:`validate_record` checks it
when a record is written and again when :func:`load_results` / :func:`read_record` read it back, and names the
file and the field when something is wrong.

Other JSON files beside the runs (summaries, analyses, plans) carry a ``kind`` other than ``"run"`` and are
written as they are. A record without ``kind`` but with a ``history`` is an unmarked run record (hand-built, e.g.
in tests): its :data:`CORE_FIELDS` are checked.
"""

from __future__ import annotations

import contextlib
import json
import math
import numbers
import os
import platform
import resource
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = Path(os.environ.get("TRGRPO_RESULTS", ROOT / "results"))
RUN_KIND = "run"

_NUM = (int, float)
_OPT_STR = (str, type(None))
_OPT_DICT = (dict, type(None))
# Fields every run record has (the readers, notebooks 03 / 07 / 08 and the tables, rely on them).
CORE_FIELDS: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "group": (str,),
    "scheme": (str,),
    "seed": (int,),
    "steps": (int,),
    "spec": (dict,),
    "history": (list,),  # one dict per optimizer step, each with an int "step"
}
RUN_FIELDS: dict[str, tuple[type, ...]] = {
    **CORE_FIELDS,
    "task": (str,),
    "model": (str,),
    "initial": _OPT_DICT,  # held-out evaluation before training (None when not measured)
    "final": (dict,),  # held-out evaluation after training ({} with n_eval = 0)
    "train_time_s": _NUM,
    "seconds_per_step": _NUM,
    "wall_time_s": _NUM,
    "peak_memory": (dict,),
    "machine": (dict,),
    "versions": (dict,),
    "git_commit": _OPT_STR,
    "finished_at": (str,),
}
OPTIONAL_FIELDS: dict[str, tuple[type, ...]] = {
    "kind": (str,),
    "git_dirty": (bool, type(None)),
    "resumed_from": _OPT_STR,
    "data_source": _OPT_DICT,
    "steps_run": (int,),
    "batch": (dict,),
    "live_logs": _OPT_STR,
    # the addition toy (trgrpo.pipeline.toy_run.run_toy)
    "eval_history": (list,),
    "warm_start": _OPT_DICT,
    "warm_start_cached_at": (str,),
    "model_path": (str,),
    "placement": _OPT_STR,
    "tau": (int, float, type(None)),
    "reward_kind": (str,),
    "cpu_time_s": _NUM,
    "run_wall_time_s": _NUM,
    "torch_threads": (int,),
    # agentic search (trgrpo.pipeline.search_run.run_search)
    "method": (str,),
    "init_model": _OPT_STR,
    "scale": (str,),
    "eval_curve": (list,),
    "baseline_no_search": _OPT_DICT,
    "example_rollout": _OPT_DICT,
    "n_train": (int,),
    "n_eval": (int,),
    # the real-LM experiment's task calibration (trgrpo.pipeline.lm_science.stage0)
    "calibration": (dict,),
}
STEP_LISTS = ("history", "eval_history", "eval_curve")  # lists of dicts, each with an int "step"


class RecordError(ValueError):
    """A run record that does not follow the schema; the message names the file (when known) and the field."""


def is_run_record(record: Any) -> bool:
    """A run record: ``kind == "run"``, or no ``kind`` and a ``history`` or a ``scheme`` (records written before
    ``kind``; one that lost either field is then still a run record, and the readers name what it lacks)."""
    if not isinstance(record, dict):
        return False
    kind = record.get("kind")
    return kind == RUN_KIND or (kind is None and ("history" in record or "scheme" in record))


def _type_ok(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in types:  # True is an int to Python, not to the schema
        return False
    if float in types and isinstance(value, numbers.Real) and not isinstance(value, bool):
        return True
    return isinstance(value, types)


def _type_names(types: tuple[type, ...]) -> str:
    return " or ".join("null" if t is type(None) else t.__name__ for t in types)


def validate_record(record: Any, where: str = "run record", *, strict_unknown: bool = False) -> dict:
    """Check ``record`` against the schema; return it. Raises :class:`RecordError` naming ``where`` and the field.

    A ``kind: "run"`` record needs every :data:`RUN_FIELDS` field, an unmarked one the :data:`CORE_FIELDS`;
    the types of :data:`OPTIONAL_FIELDS` present are checked too. ``strict_unknown`` (the writer) also rejects
    fields the schema does not know, so a new field is declared here before a record carries it."""
    if not isinstance(record, dict):
        raise RecordError(f"{where}: a run record is a JSON object, got {type(record).__name__}")
    if record.get("kind", RUN_KIND) != RUN_KIND:
        raise RecordError(f"{where}: field 'kind' is {record['kind']!r}, not a run record ({RUN_KIND!r})")
    required = RUN_FIELDS if record.get("kind") == RUN_KIND else CORE_FIELDS
    known = {**RUN_FIELDS, **OPTIONAL_FIELDS}
    for key, types in required.items():
        if key not in record:
            raise RecordError(f"{where}: missing required field {key!r} ({_type_names(types)})")
    for key, value in record.items():
        types = known.get(key)
        if types is None:
            if strict_unknown:
                raise RecordError(
                    f"{where}: unknown field {key!r}; declare it in trgrpo.pipeline.records.OPTIONAL_FIELDS"
                )
            continue
        if not _type_ok(value, types):
            raise RecordError(
                f"{where}: field {key!r} must be {_type_names(types)}, got {type(value).__name__} ({value!r:.60})"
            )
    for key in STEP_LISTS:
        for i, row in enumerate(record.get(key) or []):
            if not isinstance(row, dict) or isinstance(row.get("step"), bool) or not isinstance(row.get("step"), int):
                raise RecordError(f"{where}: field '{key}[{i}]' must be a dict with an integer 'step', got {row!r:.80}")
            for name, value in row.items():  # the tables and figures read every value as a number
                if value is not None and not _type_ok(value, (float,)):
                    raise RecordError(
                        f"{where}: field '{key}[{i}].{name}' must be a number or null, got {type(value).__name__} "
                        f"({value!r:.40})"
                    )
    if record.get("kind") == RUN_KIND and not record["name"]:
        raise RecordError(f"{where}: field 'name' is empty")
    return record


# ---------------------------------------------------------------------------------------------------------------
# Provenance: what every record says about where and how it was made


def machine_info() -> dict:
    import torch

    info = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_count"] = torch.cuda.device_count()
    return info


def package_versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("trgrpo", "torch", "transformers", "trl", "accelerate", "datasets", "papermill", "vllm"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    if "trgrpo" not in out:  # run from the source tree, not installed
        from .. import __version__

        out["trgrpo"] = __version__
    return out


def _git(*args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None


def git_commit() -> str | None:
    out = _git("rev-parse", "HEAD")
    return (out.stdout.strip() or None) if out is not None else None


def git_dirty() -> bool | None:
    """True if tracked files differ from the commit (numbers then belong to a tree no commit names); None if unknown."""
    out = _git("status", "--porcelain", "--untracked-files=no")
    return bool(out.stdout.strip()) if out is not None and out.returncode == 0 else None


def peak_memory_mb() -> dict:
    import torch

    out = {"rss_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if torch.cuda.is_available():
        out["cuda_max_allocated_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def build_record(
    *,
    name: str,
    group: str,
    task: str,
    scheme: str,
    seed: int,
    model: str,
    steps: int,
    spec: dict,
    history: list[dict],
    initial: dict | None,
    final: dict,
    train_time_s: float,
    steps_run: int,
    t0: float,
    **fields: Any,
) -> dict:
    """A run record: the run's identity and results, then the common provenance (time, memory, machine, package
    versions, git commit and state, finish time). Every run pipeline builds its record here."""
    return {
        "kind": RUN_KIND,
        "name": name,
        "group": group,
        "task": task,
        "scheme": scheme,
        "seed": seed,
        "model": model,
        "steps": steps,
        "spec": spec,
        "history": history,
        "initial": initial,
        "final": final,
        **fields,
        "train_time_s": train_time_s,
        "seconds_per_step": train_time_s / max(1, steps_run),
        "steps_run": steps_run,
        "wall_time_s": time.time() - t0,
        "peak_memory": peak_memory_mb(),
        "machine": machine_info(),
        "versions": package_versions(),
        "git_commit": git_commit(),
        "git_dirty": git_dirty(),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


# ---------------------------------------------------------------------------------------------------------------
# Files


def check_folder_name(field: str, value: Any, *, nested: bool = False) -> str:
    """``value`` as a name under a root folder: one path component, or with ``nested`` a relative path of several
    (``kk/qwen/main``); never absolute, never ``.`` / ``..``, an empty part or a backslash. ValueError names
    ``field``; a run's ``group`` and ``name`` are checked so when its spec is made."""
    what = "a relative path under the results folder" if nested else "one path component (a file name)"
    if not isinstance(value, str) or not value:
        raise ValueError(f"{field} must be {what}, got {value!r}")
    parts = value.split("/")
    bad = (
        "\\" in value
        or "\x00" in value
        or value.startswith(("/", "~"))
        or (not nested and len(parts) > 1)
        or any(part in ("", ".", "..") for part in parts)
    )
    if bad:
        raise ValueError(f"{field} must be {what}, without '..', '/' at the start or empty parts, got {value!r}")
    return value


def write_result(group: str, name: str, record: dict, results_dir: Path | str | None = None) -> Path:
    """Write ``results/<group>/<name>.json`` atomically (shared by every task and notebook). A run record is
    validated first (:func:`validate_record`, unknown fields rejected); other kinds are written as they are.
    ``group`` and ``name`` must stay under ``results_dir`` (:func:`check_folder_name`)."""
    path = Path(results_dir or RESULTS_DIR) / check_folder_name("group", group, nested=True)
    path = path / f"{check_folder_name('name', name)}.json"
    if is_run_record(record):
        validate_record(jsonable(record), f"{path} (not written)", strict_unknown=True)
    return write_json(path, record)


def read_record(path: Path | str) -> dict:
    """One run record, parsed and validated (:class:`RecordError` naming the file and the field)."""
    path = Path(path)
    return validate_record(_read_json(path), str(path))


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RecordError(f"{path}: not valid JSON ({e})") from e


def load_results(group: str, results_dir: Path | str | None = None) -> list[dict]:
    """Every run record under ``results/<group>/`` (recursively, sorted by path), each validated.

    Files of another ``kind`` (summaries, analyses stored beside the runs) are skipped; a file that is not JSON, or
    a run record that breaks the schema (one without its ``scheme`` or ``history`` too), raises :class:`RecordError`
    naming the file and the field: no record drops out of a mean unseen."""
    base = Path(results_dir or RESULTS_DIR) / group
    if not base.exists():
        return []
    out = []
    for p in sorted(base.rglob("*.json")):
        rec = _read_json(p)
        if is_run_record(rec):
            out.append(validate_record(rec, str(p)))
    return out


def update_marked_block(path: Path | str, start: str, end: str, body: str) -> bool:
    """Replace the text between the markers ``start`` and ``end`` of the file at ``path`` with ``body`` (a generated
    README block); True if the file changed. Raises ValueError naming the file when a marker is missing."""
    path = Path(path)
    text = path.read_text()
    if start not in text or end not in text:
        raise ValueError(f"{path} lacks the markers {start!r} ... {end!r}")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    new = f"{head}{start}\n{body}{end}{tail}"
    if new != text:
        path.write_text(new)
    return new != text


def write_json(path: Path | str, record: Any) -> Path:
    """Write ``record`` as JSON atomically: a temporary file of a unique name in the same folder (two writers never
    share one), flushed to disk (fsync), then renamed over ``path`` (``os.replace``). A reader sees the old file or
    the new one, never a part; a killed write leaves at most a stray temporary file, which the next write of the
    same path removes (its writer's process id, in its name, is no longer running)."""
    import tempfile

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(jsonable(record), indent=1, sort_keys=False)
    _remove_stray_temporaries(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return path


def _remove_stray_temporaries(path: Path) -> None:
    """Delete ``.<name>.<pid>.*.tmp`` files beside ``path`` whose process is gone (a write killed before its rename)."""
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        pid = tmp.name[len(path.name) + 2 :].split(".", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            with contextlib.suppress(OSError):
                tmp.unlink()
        except (PermissionError, OverflowError):  # alive under another user / not a process id
            continue


@contextlib.contextmanager
def file_lock(path: Path | str) -> Iterator[None]:
    """An exclusive lock (``fcntl.flock``) on the sidecar file ``<path>.lock``, for read-modify-write updates."""
    import fcntl

    lock = Path(f"{path}.lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def update_json(path: Path | str, update: Callable[[Any], Any], default: Any = None) -> Any:
    """Read ``path`` (``default`` when it does not exist), apply ``update``, write the result atomically, all under
    :func:`file_lock`: concurrent updaters (two grids appending to ``grid-summary.json``) lose no update."""
    path = Path(path)
    with file_lock(path):
        current = json.loads(path.read_text(encoding="utf-8")) if path.exists() else default
        new = update(current)
        write_json(path, new)
    return new


def jsonable(x):
    """Plain JSON values: tuples to lists, tensors/numpy scalars to numbers, non-finite floats to null."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if hasattr(x, "item") and callable(x.item):
        return jsonable(x.item())
    return x


def migrate_record(record: dict) -> dict:
    """A committed run record written before ``kind`` existed, marked ``kind: "run"`` (first key); else unchanged."""
    if not is_run_record(record) or record.get("kind") == RUN_KIND:
        return record
    return {"kind": RUN_KIND, **record}


def migrate_results(results_dir: Path | str | None = None) -> list[Path]:
    """Mark every unmarked run record under ``results_dir`` ``kind: "run"`` (:func:`migrate_record`), validate it,
    rewrite it (same layout: ``indent=1``); return the paths changed. Other files are left alone."""
    changed = []
    for p in sorted(Path(results_dir or RESULTS_DIR).rglob("*.json")):
        rec = _read_json(p)
        new = migrate_record(rec)
        if new is not rec:
            validate_record(new, str(p), strict_unknown=True)
            write_json(p, new)
            changed.append(p)
    return changed


if __name__ == "__main__":  # python -m trgrpo.pipeline.records: migrate the committed records
    for _p in migrate_results():
        print(f"migrated {_p.relative_to(ROOT) if _p.is_relative_to(ROOT) else _p}")
