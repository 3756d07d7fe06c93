"""Where things are and how a result file is written: the repository's folders (:data:`ROOT`, results, runs,
checkpoints; ``TRGRPO_RESULTS`` / ``TRGRPO_RUNS`` / ``TRGRPO_CHECKPOINTS`` move them), atomic JSON with NaN as null
(:func:`write_json`), and what a file was made from (:func:`provenance`: git commit, clean tree, machine, versions)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import resource
import subprocess
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = Path(os.environ.get("TRGRPO_RESULTS", ROOT / "results"))
CHECKPOINT_DIR = Path(os.environ.get("TRGRPO_CHECKPOINTS", ROOT / "checkpoints"))
# Executed notebooks (trgrpo.runs.batch) and the logs and spec files of launched runs; not committed.
RUNS_DIR = Path(os.environ.get("TRGRPO_RUNS", ROOT / "runs"))


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
        from trgrpo import __version__

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
    """True if tracked files differ from the commit; None if unknown."""
    out = _git("status", "--porcelain", "--untracked-files=no")
    return bool(out.stdout.strip()) if out is not None and out.returncode == 0 else None


def peak_memory() -> dict:
    """This process's peak resident memory and, on a GPU, torch's peak allocation (MB)."""
    import torch

    peak = {"rss_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if torch.cuda.is_available():
        peak["cuda_max_allocated_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return peak


def provenance() -> dict:
    """Where and how a record was made: peak memory, machine, package versions, git commit, time."""
    return {
        "peak_memory": peak_memory(),
        "machine": machine_info(),
        "versions": package_versions(),
        "git_commit": git_commit(),
        "git_dirty": git_dirty(),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def write_json(path: Path | str, record: Any) -> Path:
    """Write ``record`` as JSON atomically (a temporary file, fsync, ``os.replace``); a reader never sees a part."""
    import tempfile

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(jsonable(record), indent=1)
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
    """Delete ``.<name>.<pid>.*.tmp`` files beside ``path`` whose process is gone."""
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
