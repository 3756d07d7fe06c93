"""A run that survives: its checkpoint folder, which checkpoint is complete (:func:`last_checkpoint`), the check
that a folder holds this spec and no other (:func:`check_run_folders`), one process per run (:func:`run_lock`) and a
full disk said in one line (:class:`DiskFull`)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

from trgrpo.config import ConfigError
from trgrpo.files import CHECKPOINT_DIR, RESULTS_DIR, jsonable
from trgrpo.runs.records import check_folder_name
from trgrpo.runs.spec import RunSpec, env_world_size


def live_log_dir(spec: RunSpec, results_dir: Path | str | None = None) -> Path | None:
    """Where ``report_to`` logging goes: ``results/<group>/<name>.logs/`` beside the record; None without it."""
    if spec.report_to == "none":
        return None
    return Path(results_dir or RESULTS_DIR).resolve() / spec.group / f"{spec.name}.logs"


def checkpoint_folder(spec: RunSpec, checkpoint_dir: Path | str | None = None) -> Path:
    """``<checkpoints>/<group>/<name>/``, its names checked again (the ``rmtree`` never leaves the root)."""
    root = Path(checkpoint_dir or CHECKPOINT_DIR)
    return root / check_folder_name("group", spec.group, nested=True) / check_folder_name("name", spec.name)


# Spec fields that do not change a run's result: a record or checkpoint whose spec differs only in them is reused.
BOOKKEEPING_FIELDS = ("group", "name", "report_to", "ddp_timeout_s", "save_steps")
# Settings that change a run's memory, not what it learns: the planner's fixes for an out-of-memory run
# (trgrpo.runs.plan.suggestions: the same effective batch), so a run restarted with them resumes; its record lists them.
MEMORY_FIELDS = ("gradient_checkpointing", "vllm_gpu_memory_utilization", "micro_batch_size")


def engine() -> dict:
    """What this process trains on, as far as a checkpoint cares: the world size and DeepSpeed's ZeRO stage (None:
    no DeepSpeed), from the variables ``accelerate launch`` / ``torchrun`` set."""
    deepspeed = os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true"
    stage = os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE")
    return {"world_size": env_world_size(), "deepspeed_stage": int(stage) if deepspeed and stage else None}


def refuse_another_run(stored: dict, spec: RunSpec, run_engine: dict, where: Path) -> None:
    """A :class:`ConfigError` (one line: the differing fields, how to go on) when a stored ``{"spec", "engine"}`` (a
    record, a checkpoint folder's spec.json) is another run than ``spec`` on ``run_engine``; a spec.json written
    before engines were stored is not compared on it."""
    try:
        then = RunSpec.from_dict(stored["spec"]).model_dump()
    except (KeyError, TypeError, ValueError) as e:
        diff = [f"spec (unreadable: {e})"]
    else:
        now = {**spec.model_dump(), **{f"engine.{k}": v for k, v in run_engine.items()}}
        then |= {f"engine.{k}": v for k, v in stored.get("engine", run_engine).items()}
        diff = [
            f"{k} ({then.get(k)!r:.60} stored, {now[k]!r:.60} now)"
            for k in now
            if k not in BOOKKEEPING_FIELDS + MEMORY_FIELDS and jsonable(then.get(k)) != jsonable(now[k])
        ]
    if diff:
        raise ConfigError(
            f"{where} is {spec.group}/{spec.name} run with another spec or engine: {'; '.join(diff)}; give this run "
            "another group or name, or start it over with --force (resume=False)"
        )


def check_run_folders(spec: RunSpec, run_engine: dict, checkpoint_dir: Path | str | None = None) -> None:
    """Refuse (a :class:`ConfigError`, nothing written) a run whose checkpoints another spec or engine wrote."""
    out_dir = checkpoint_folder(spec, checkpoint_dir)
    stored = out_dir / "spec.json"
    if stored.exists():
        try:
            doc = json.loads(stored.read_text())
        except (OSError, ValueError) as e:
            raise ConfigError(f"{stored}: unreadable ({e}); start the run over with --force") from None
        refuse_another_run(doc if "spec" in doc else {"spec": doc}, spec, run_engine, out_dir)
    elif any(out_dir.glob("checkpoint-*")):
        raise ConfigError(
            f"{out_dir}: checkpoints without spec.json: which spec trained them is unknown; start over with --force "
            "or give this run another name"
        )


def memory_changes(spec: RunSpec, checkpoint_dir: Path | str | None = None) -> dict:
    """``{field: [trained with, now]}`` for each of :data:`MEMORY_FIELDS` that ``spec`` changes against the spec its
    checkpoints were trained with (their ``spec.json``); empty for a run without checkpoints."""
    stored = checkpoint_folder(spec, checkpoint_dir) / "spec.json"
    if not stored.exists():
        return {}
    then = json.loads(stored.read_text())
    then, now = then.get("spec", then), spec.model_dump()
    return {k: [then[k], now[k]] for k in MEMORY_FIELDS if k in then and then[k] != now[k]}


def checkpoint_problem(ckpt: Path) -> str | None:
    """Why a checkpoint folder cannot be resumed (None: complete): its trainer_state.json must parse, its weights
    and optimizer state be there, and every ``.pt``/``.bin`` (zip) and ``.safetensors`` file be whole."""
    import zipfile

    from safetensors import safe_open

    try:
        json.loads((ckpt / "trainer_state.json").read_text())
    except (OSError, ValueError) as e:
        return f"trainer_state.json: {type(e).__name__}: {e}"
    deepspeed = any(ckpt.glob("global_step*"))
    weights = [*ckpt.glob("model*.safetensors"), *ckpt.glob("pytorch_model*.bin")]
    if not weights and not deepspeed:
        return "no model weights"
    if not (ckpt / "optimizer.pt").exists() and not deepspeed:
        return "no optimizer.pt"
    for f in sorted(ckpt.rglob("*")):
        if f.suffix in (".pt", ".bin", ".pth") and not zipfile.is_zipfile(f):
            return f"{f.name} is truncated"
        if f.suffix == ".safetensors":
            try:
                with safe_open(str(f), "pt"):
                    pass
            except Exception as e:  # safetensors raises its own error types for a cut file
                return f"{f.name}: {e}"
    return None


def last_checkpoint(output_dir: Path, verbose: bool = True) -> str | None:
    """The newest complete checkpoint; an incomplete newer one (a kill while it was written) is passed over, said."""
    ckpts = sorted(output_dir.glob("checkpoint-*"), key=_checkpoint_step, reverse=True)
    for ckpt in ckpts:
        if (problem := checkpoint_problem(ckpt)) is None:
            return str(ckpt)
        if verbose:
            print(f"[trgrpo] {ckpt} is incomplete ({problem}): passed over")
    return None


def check_writable(*folders: Path) -> None:
    """A :class:`ConfigError` naming the first folder that cannot be written (tried with a file, before training)."""
    import tempfile

    for folder in folders:
        existing = next(p for p in (folder, *folder.parents) if p.exists())
        try:
            with tempfile.TemporaryFile(dir=existing):
                pass
        except OSError as e:
            raise ConfigError(f"{folder} is not writable ({e.strerror}: {existing}); nothing was trained") from None


@contextlib.contextmanager
def run_lock(out_dir: Path):
    """One process per run: ``<checkpoints>/<group>/<name>.lock`` (filelock), taken by the main process; a second
    gets a :class:`ConfigError` naming the first's pid."""
    from filelock import FileLock, Timeout

    if os.environ.get("RANK", "0") != "0":
        yield
        return
    created = [d for d in out_dir.parents if not d.exists()]  # removed again when the run never started
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    lock, pid = FileLock(f"{out_dir}.lock"), Path(f"{out_dir}.pid")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        running = pid.read_text().strip() if pid.exists() else "unknown"
        raise ConfigError(
            f"{out_dir.parent.name}/{out_dir.name} is running in another process (pid {running}); "
            "wait for it to end or stop it"
        ) from None
    try:
        with writing(pid):
            pid.write_text(str(os.getpid()))
        yield
    finally:
        pid.unlink(missing_ok=True)
        lock.release()
        if not out_dir.exists():  # a run that could not start leaves nothing
            Path(f"{out_dir}.lock").unlink(missing_ok=True)
            for d in created:
                with contextlib.suppress(OSError):
                    d.rmdir()


class DiskFull(OSError):
    """No space left while a run wrote a checkpoint, its record or its pid file (one line: what, where, the space)."""


RESTART = "free space and start the run again: it resumes from its last complete checkpoint"


@contextlib.contextmanager
def writing(path: Path):
    """An ENOSPC while ``path`` is written: a :class:`DiskFull` of one line naming it and the space free."""
    import errno

    try:
        yield
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        free = shutil.disk_usage(next(p for p in (path, *path.parents) if p.exists())).free
        raise DiskFull(f"disk full writing {path} ({free / 1e9:.2f} GB free); {RESTART}") from None


def disk_full(e: BaseException, trainer, out_dir: Path) -> DiskFull | None:
    """A :class:`DiskFull` when ``e`` is ENOSPC, also as torch's zip writer reports it ("unexpected pos"); the space
    one checkpoint takes: a complete one on disk, else weights + Adam's two moments in fp32."""
    import errno

    if not ((isinstance(e, OSError) and e.errno == errno.ENOSPC) or "unexpected pos" in str(e)):
        return None
    if ckpt := last_checkpoint(out_dir, verbose=False):
        need = sum(f.stat().st_size for f in Path(ckpt).rglob("*") if f.is_file())
    else:
        need = sum(p.numel() for p in trainer.model.parameters()) * 4 * 3
    return DiskFull(
        f"disk full while saving a checkpoint in {out_dir}: a checkpoint needs about {need / 1e9:.2f} GB "
        f"({shutil.disk_usage(out_dir).free / 1e9:.2f} GB free); {RESTART}"
    )


def _checkpoint_step(ckpt: Path | str | None) -> int:
    """The step of a ``checkpoint-<step>`` folder; 0 without one."""
    return int(Path(ckpt).name.split("-")[-1]) if ckpt else 0
