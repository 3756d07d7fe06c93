"""One run: a :class:`RunSpec` -> :func:`run` (train with :class:`trgrpo.TRGRPOTrainer`, evaluate) -> one
record ``results/<group>/<name>.json`` (:func:`write_result`). :data:`RUN_FIELDS` is the record schema; a task adds
fields through ``run(..., record_extras=...)``; other JSON files (summaries) carry another ``kind``."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import math
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import jsonschema
import yaml
from pydantic import BeforeValidator, model_validator

from trgrpo.tasks import Task, get_task, task_names
from trgrpo.weights import DEFAULTS, Checked, TauMode, WeightParams

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = Path(os.environ.get("TRGRPO_RESULTS", ROOT / "results"))
CHECKPOINT_DIR = Path(os.environ.get("TRGRPO_CHECKPOINTS", ROOT / "checkpoints"))
# Executed notebooks (trgrpo.batch) and the logs and spec files of launched runs; not committed.
RUNS_DIR = Path(os.environ.get("TRGRPO_RUNS", ROOT / "runs"))
RUN_KIND = "run"
MAX_NAME_CHARS = 100  # a run's name and each part of its group (file names stay far below the 255-byte limit)

# The record schema (JSON Schema, draft 2020-12): the fields every run record has (the readers, notebooks 03 / 07 / 08
# and the tables rely on them), their types and ranges; docs/design.md's record table is rendered from it.
RECORD_SCHEMA = json.loads((Path(__file__).with_name("record.schema.json")).read_text(encoding="utf-8"))
CORE_FIELDS: list[str] = RECORD_SCHEMA["required"]  # a record written before "kind" existed
RUN_FIELDS: list[str] = RECORD_SCHEMA["then"]["required"]


def _numbers(validator, keys, row, schema):
    """The schema's keyword ``numbers``: ``true``, a step row's values besides ``step`` are numbers or null; a list,
    those keys' values (one pass over the row: the records hold ~10k rows of ~30 values, too many for a subschema
    per value)."""
    for key, value in row.items() if keys and isinstance(row, dict) else ():
        if (key in keys if isinstance(keys, list) else key != "step") and value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                yield jsonschema.ValidationError(f"must be a number or null, got {type(value).__name__}", path=[key])


# JSON Schema's "integer" takes 2.0; a record's integers are ints
_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    validators={"numbers": _numbers},
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _, x: isinstance(x, int) and not isinstance(x, bool)
    ),
)
_RECORD = _Validator(RECORD_SCHEMA)
# The other JSON files the pages read (summaries, benchmarks, course times, notebook headlines), one $def per role
RESULTS_SCHEMA = json.loads((Path(__file__).with_name("results.schema.json")).read_text(encoding="utf-8"))
_RESULTS = {role: _Validator({**RESULTS_SCHEMA, "$ref": f"#/$defs/{role}"}) for role in RESULTS_SCHEMA["$defs"]}
# Files beside the run records of a group, by name; every other *.json there (outside <name>.logs/) is a run record
SIDE_FILES = ("summary.json", "grid-summary.json", "plan.json", "token_hist.json", "decision.json", "analysis-*.json")
_JSON_TYPES = {
    "array": "list",
    "object": "dict",
    "integer": "int",
    "string": "str",
    "boolean": "bool",
    "number": "a number",
}


class RecordError(ValueError):
    """A record that cannot be read or does not follow its schema; the message names the file and the field."""

    def _render_traceback_(self) -> list[str]:  # IPython (notebook 08) shows this line, not a traceback
        return [f"RecordError: {self}"]


def is_run_record(record: Any) -> bool:
    """``kind == "run"``, or no ``kind`` and a ``history`` or a ``scheme`` (records written before ``kind``)."""
    if not isinstance(record, dict):
        return False
    kind = record.get("kind")
    return kind == RUN_KIND or (kind is None and ("history" in record or "scheme" in record))


def validate_record(record: Any, where: str = "run record") -> dict:
    """Check ``record`` against :data:`RECORD_SCHEMA`; return it. Raises :class:`RecordError` naming ``where`` and
    the field (the first fault jsonschema finds)."""
    if not isinstance(record, dict):
        raise RecordError(f"{where}: a run record is a JSON object, got {type(record).__name__}")
    if record.get("kind", RUN_KIND) != RUN_KIND:
        raise RecordError(f"{where}: field 'kind' is {record['kind']!r}, not a run record ({RUN_KIND!r})")
    return _check(_RECORD, record, where)


def _check(validator: jsonschema.protocols.Validator, record: dict, where: str) -> dict:
    """``record`` if it follows ``validator``'s schema, else :class:`RecordError` naming ``where`` and the field of
    the first fault jsonschema finds."""
    error = jsonschema.exceptions.best_match(validator.iter_errors(record))
    if error is None:
        return record
    field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".")
    if error.validator == "required":
        missing = next(k for k in error.validator_value if k not in error.instance)
        lacks = f"field '{field}' lacks" if field else "missing"
        raise RecordError(f"{where}: {lacks} required field {missing!r}")
    if error.validator == "type":
        types = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        got = type(error.instance).__name__
        want = " or ".join(_JSON_TYPES.get(t, t) for t in types)
        raise RecordError(f"{where}: field '{field}' must be {want}, got {got} ({error.instance!r:.40})")
    if error.validator == "numbers":
        raise RecordError(f"{where}: field '{field}' {error.message} ({error.instance[error.path[-1]]!r:.40})")
    raise RecordError(f"{where}: field '{field}': {error.message:.200}")


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


def provenance() -> dict:
    """Where and how a record was made: peak memory, machine, package versions, git commit, time."""
    import torch

    peak = {"rss_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if torch.cuda.is_available():
        peak["cuda_max_allocated_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return {
        "peak_memory": peak,
        "machine": machine_info(),
        "versions": package_versions(),
        "git_commit": git_commit(),
        "git_dirty": git_dirty(),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


# ---------------------------------------------------------------------------------------------------------------
# Files


def check_folder_name(field: str, value: Any, *, nested: bool = False) -> str:
    """``value`` as one path component (or with ``nested`` a relative path) that stays under its root folder."""
    what = "a relative path under the results folder" if nested else "one path component (a file name)"
    if not isinstance(value, str) or not value:
        raise ValueError(f"{field} must be {what}, got {value!r}")
    parts = value.split("/")
    if any(len(part) > MAX_NAME_CHARS for part in parts) or not value.isprintable():
        raise ValueError(f"{field} must be printable, at most {MAX_NAME_CHARS} characters a part, got {value!r:.120}")
    bad = (
        "\\" in value
        or value.startswith(("/", "~"))
        or (not nested and len(parts) > 1)
        or any(part in ("", ".", "..") for part in parts)
    )
    if bad:
        raise ValueError(f"{field} must be {what}, without '..', '/' at the start or empty parts, got {value!r}")
    return value


def write_result(group: str, name: str, record: dict, results_dir: Path | str | None = None) -> Path:
    """Write ``results/<group>/<name>.json`` atomically; a run record is validated first."""
    path = Path(results_dir or RESULTS_DIR) / check_folder_name("group", group, nested=True)
    path = path / f"{check_folder_name('name', name)}.json"
    if is_run_record(record):
        validate_record(jsonable(record), f"{path} (not written)")
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


def read_json(path: Path | str, role: str | None = None) -> dict | None:
    """A JSON object under ``results/`` that is not a run record; None when the file does not exist (not run yet).
    With ``role`` (a ``$defs`` key of ``results.schema.json``) its fields are checked; an unreadable file or a
    fault raises :class:`RecordError` naming the file and the field."""
    path = Path(path)
    if not path.exists():
        return None
    rec = _read_json(path)
    if not isinstance(rec, dict):
        raise RecordError(f"{path}: must be a JSON object, got {type(rec).__name__}")
    return _check(_RESULTS[role], rec, str(path)) if role else rec


def run_records(folder: Path | str) -> dict[Path, dict]:
    """Path -> run record, every one under ``folder`` (recursively, sorted by path; no folder: none). A file is a run
    record by its place: the :data:`SIDE_FILES` and ``<name>.logs/`` aside, each ``*.json`` must be one, validated
    (:class:`RecordError` naming the file and the field: a list, another kind or a broken file never drops out
    unseen); one run (group and name) in two files is refused naming both."""
    out: dict[Path, dict] = {}
    seen: dict[tuple, Path] = {}
    folder = Path(folder)
    for p in sorted(folder.rglob("*.json")) if folder.is_dir() else ():
        if any(p.match(side) for side in SIDE_FILES) or any(d.endswith(".logs") for d in p.relative_to(folder).parts):
            continue
        rec = out[p] = read_record(p)
        if (key := (rec["group"], rec["name"])) in seen:
            raise RecordError(f"{p}: the same run as {seen[key]} (group {rec['group']!r}, name {rec['name']!r})")
        seen[key] = p
    return out


def load_results(group: str, results_dir: Path | str | None = None) -> list[dict]:
    """The run records of ``results/<group>/`` (:func:`run_records`)."""
    return list(run_records(Path(results_dir or RESULTS_DIR) / group).values())


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


# ---------------------------------------------------------------------------------------------------------------
# The run spec, checked when it is made

VllmImportanceSampling = Literal["off", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]

# Table 6: sampling temperature per task.
TEMPERATURES = {"kk": 0.7, "math": 1.0, "search": 0.8, "arith": 1.0}
_NUMBER_TEXT = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _yaml_number(kind: type) -> BeforeValidator:
    """``"1e-6"`` -> 1e-06 for a float field, ``"1e3"`` -> 1000 for an int field: PyYAML (YAML 1.1) leaves such
    numbers strings; any other string stays an error."""

    def read(value: Any) -> Any:
        if not isinstance(value, str) or not _NUMBER_TEXT.fullmatch(value):
            return value
        number = float(value)
        return number if kind is float else int(number) if number.is_integer() else value

    return BeforeValidator(read)


Float = Annotated[float, _yaml_number(float)]
Int = Annotated[int, _yaml_number(int)]


class RunSpec(Checked):
    """Everything that defines a run, validated by pydantic (strict types, :data:`RULES`, the loss options, the
    task's options, folder names). Field names follow :class:`trgrpo.TRGRPOConfig` where they overlap."""

    task: str = "kk"
    model: str = "embedded"
    scheme: str = DEFAULTS.scheme
    tau: Float = DEFAULTS.tau
    tau_mode: TauMode = DEFAULTS.tau_mode
    alpha: Float = DEFAULTS.alpha
    mu: Float = DEFAULTS.mu
    lower: Float = DEFAULTS.lower
    upper: Float = DEFAULTS.upper
    placement: str = "ratio"
    kl_weighting: str = "eq10"
    seed: Int = 0
    steps: Int = 20
    prompts_per_step: Int = 2
    num_generations: Int = 8
    max_completion_length: Int = 4096
    max_eval_tokens: Int | None = None
    temperature: Float | None = None  # None -> Table 6 value for the task
    learning_rate: Float = 1e-6
    beta: Float = 0.001
    epsilon: Float = 0.2
    epsilon_high: Float = 0.24
    gradient_accumulation_steps: Int = 1
    micro_batch_size: Int | None = None  # completions per device per forward pass (None: from accumulation)
    n_train: Int = 1000
    n_eval: Int = 100
    eval_before: bool = False
    save_steps: Int = 20
    use_vllm: bool = False
    vllm_gpu_memory_utilization: Float = 0.3  # colocate: vLLM's share of each GPU
    vllm_importance_sampling: VllmImportanceSampling = "off"  # TRL's vLLM correction; "off" as verl does
    ddp_timeout_s: Int = 6 * 3600  # others wait while the main process evaluates (hours with HF generate)
    bf16: bool = False
    gradient_checkpointing: bool = False
    report_to: Literal["none", "tensorboard", "trackio"] = "none"  # live logs in results/<group>/<name>.logs/
    task_options: dict[str, Any] = {}
    group: str = "runs"
    name: str | None = None

    @model_validator(mode="after")
    def _rules(self) -> RunSpec:
        from trgrpo.loss import validate_loss_options

        WeightParams(**{k: getattr(self, k) for k in WeightParams.model_fields})  # Eq. 11's rules
        validate_loss_options(
            self.placement,
            self.kl_weighting,
            self.beta,
            self.epsilon,
            self.epsilon_high,
            names={"eps_low": "epsilon", "eps_high": "epsilon_high"},
        )
        for name, (ok, what) in RULES.items():
            v = getattr(self, name)
            if v is not None and not ok(v):
                raise ValueError(f"{name} must be {what}, got {v!r}")
        # a model given as a path (``/``, ``./``, ``../``, ``~``) must be an existing folder; a hub id is not checked
        if self.model.startswith(("/", "./", "../", "~")) and not Path(self.model).expanduser().is_dir():
            raise ValueError(f"model must be an existing folder or a hub id: the folder {self.model} does not exist")
        task = get_task(self.task)  # a ValueError names the registered tasks
        try:
            task.options(**self.task_options)
        except ValueError as e:
            raise ValueError(f"task_options.{e} (task {self.task!r})") from None
        check_folder_name("group", self.group, nested=True)  # results/<group>/<name>.json, checkpoints/<group>/<name>/
        if self.name is None:
            label = self.scheme
            if self.scheme in ("tr", "reverse"):
                label += f"-{self.placement}-tau{self.tau:g}-{self.tau_mode}-L{self.lower:g}-U{self.upper:g}"
            self.name = run_name(self.task, self.model, label, self.seed)
        check_folder_name("name", self.name)
        return self

    @property
    def sampling_temperature(self) -> float:
        return self.temperature if self.temperature is not None else TEMPERATURES.get(self.task, 1.0)

    @classmethod
    def from_dict(cls, d: dict) -> RunSpec:
        """A spec from a dict (a YAML file); the task's data files are read (``Task.check_data``), so a bad file
        stops the load, not the run."""
        spec = cls(**d)
        if (check := get_task(spec.task).check_data) is not None:
            check(spec)
        return spec


_COUNTS = ("steps", "prompts_per_step", "max_completion_length", "save_steps", "gradient_accumulation_steps")
MAX_EXAMPLES = 10_000_000  # n_train / n_eval: far beyond the paper's sets (the largest, ORZ, has 57k problems)
_POSITIVE = (lambda v: v > 0, "a finite number > 0")
# The value rules of RunSpec fields beyond their type: field -> (test, what it must be); None passes.
RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    **dict.fromkeys(
        _COUNTS + ("ddp_timeout_s", "max_eval_tokens", "micro_batch_size"), (lambda v: v >= 1, "an integer >= 1")
    ),
    "n_eval": (lambda v: 0 <= v <= MAX_EXAMPLES, f"an integer in [0, {MAX_EXAMPLES:,}]"),
    "n_train": (
        lambda v: 1 <= v <= MAX_EXAMPLES,
        f"an integer in [1, {MAX_EXAMPLES:,}] (generated data is made whole)",
    ),
    "seed": (lambda v: 0 <= v < 2**32, "an integer in [0, 2**32) (numpy's and torch's seeds)"),
    "num_generations": (lambda v: v >= 2, "an integer >= 2"),  # Eq. 4 needs a group
    "learning_rate": _POSITIVE,
    "temperature": _POSITIVE,
    "vllm_gpu_memory_utilization": (lambda v: 0 < v <= 1, "in (0, 1] (vLLM's share of each GPU)"),
}


def run_name(task: str, model: str, label: str, seed: int) -> str:
    """The name of a run: ``<task>-<model folder name>-<label>-seed<seed>`` (every grid names its runs so)."""
    return f"{task}-{Path(str(model)).name}-{label}-seed{seed}"


class ConfigError(ValueError):
    """Bad input to a command line (train, batch, plan): one line naming the file and the field (exit code 2)."""


MAX_YAML_VALUES = 100_000  # values of a config with every alias expanded (a "billion laughs" file has 10**9)


class ConfigLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses a key given twice in one mapping (PyYAML keeps the last) and, before
    anything is built, aliases that expand to more than :data:`MAX_YAML_VALUES` values."""

    def construct_document(self, node: yaml.Node) -> Any:
        if _expanded_size(node, {}) > MAX_YAML_VALUES:
            raise yaml.constructor.ConstructorError(
                None, None, f"its aliases expand to more than {MAX_YAML_VALUES:,} values", node.start_mark
            )
        return super().construct_document(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = self.construct_object(key_node)
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep)


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """The number of values ``node`` stands for with every alias expanded (each shared node counted once per use)."""
    if id(node) not in memo:
        memo[id(node)] = 1  # a recursive alias counts once
        children = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else node.value
        if isinstance(node, yaml.CollectionNode):
            memo[id(node)] = 1 + sum(_expanded_size(c, memo) for c in children)
    return memo[id(node)]


def read_config(path: str | Path, what: str = "config") -> dict:
    """A YAML file holding a non-empty mapping; every fault is a :class:`ConfigError` naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such {what} file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read the {what} file ({type(e).__name__}: {e})") from None
    try:
        data = yaml.load(text, Loader=ConfigLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}: not valid YAML{where}: {problem}") from None
    if data is None or data == {}:
        raise ConfigError(f"{path}: the {what} file is empty")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a {what} file holds a mapping, got a {type(data).__name__}")
    return data


def parse_overrides(items: list[str]) -> dict:
    """``--set`` items: ``["STEPS=10", "SEEDS=[0]"]`` -> ``{"STEPS": 10, "SEEDS": [0]}`` (values read as YAML)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = yaml.load(value, Loader=ConfigLoader)
        except yaml.YAMLError:
            raise ConfigError(f"--set {key.strip()}: {value!r} is not a YAML value") from None
    return out


# ---------------------------------------------------------------------------------------------------------------
# Batch arithmetic (Table 6 -> TRL): steps_per_generation = accumulation, one on-policy update per rollout.

BATCH_READING = (
    "Table 6 'Mini-batch size' = prompts per optimizer step (verl train_batch_size), each with G completions; "
    "'Micro-batch size (updates)' >= it (verl ppo_mini_batch_size), so one on-policy update per step. "
    "The global figures do not depend on the number of GPUs."
)


SPEC_FILE_KEYS = ("base", "grid", "imports")


def load_specs(path: str | Path, overrides: dict | None = None) -> list[RunSpec]:
    """The run specs of a YAML file, every one checked before any runs (bad input: a :class:`ConfigError`)."""
    path = Path(path)
    data = read_config(path)
    import_task_modules(path, data.get("imports", []))
    fields = [k for k in data if k not in SPEC_FILE_KEYS]
    if fields and ("base" in data or "grid" in data):
        raise ConfigError(f"{path}: field(s) {fields} beside 'base' / 'grid' would be ignored; put them in 'base'")
    base = data.get("base", {k: data[k] for k in fields})
    if not isinstance(base, dict):
        raise ConfigError(f"{path}: field 'base' must be a mapping of run-spec fields, got {type(base).__name__}")
    grid = data.get("grid", [{}])
    if not isinstance(grid, list) or not grid or not all(isinstance(g, dict) for g in grid):
        raise ConfigError(f"{path}: field 'grid' must be a non-empty list of mappings (one per run), got {grid!r:.80}")
    overrides = overrides or {}
    specs = []
    for i, row in enumerate(grid):
        where = f"{path}: grid[{i}]" if "grid" in data else str(path)
        fields = {**base, **row, **overrides}
        if "task" not in fields:
            raise ConfigError(f"{where}: field 'task' is missing (the run's task: {task_names()})")
        try:
            specs.append(RunSpec.from_dict(fields))
        except (ValueError, TypeError) as e:
            raise ConfigError(f"{where}: {e}" + (f" (with --set {sorted(overrides)})" if overrides else "")) from None
    seen: dict[tuple[str, str], int] = {}
    for i, spec in enumerate(specs):
        j = seen.setdefault((spec.group, str(spec.name)), i)
        if j != i:
            raise ConfigError(f"{path}: grid[{j}] and grid[{i}] are both {spec.group}/{spec.name} (field 'name')")
    return specs


def import_task_modules(path: Path, imports) -> None:
    """Import the modules that register the specs' tasks: ``trgrpo...`` modules or ``.py`` files beside the config."""
    if not isinstance(imports, list) or not all(isinstance(m, str) and m for m in imports):
        raise ConfigError(f"{path}: field 'imports' must be a list of module names, got {imports!r:.80}")
    for name in imports:
        if name.endswith(".py"):
            local = path.parent / name
            if "/" in name or "\\" in name or not local.is_file():
                raise ConfigError(f"{path}: imports: {name!r} is not a .py file in the config's folder {path.parent}")
            module_spec = importlib.util.spec_from_file_location(local.stem, local)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[local.stem] = module
            module_spec.loader.exec_module(module)
        elif name == "trgrpo" or name.startswith("trgrpo."):
            try:
                importlib.import_module(name)
            except ImportError as e:
                raise ConfigError(f"{path}: imports: {name!r} cannot be imported ({e})") from None
        else:
            raise ConfigError(
                f"{path}: imports: {name!r} is neither a module of this project (trgrpo...) nor a .py file next "
                "to the config"
            )


def batch_layout(spec: RunSpec, world_size: int = 1) -> dict:
    """TRL's per-device batch and accumulation for the spec's global batch on ``world_size`` processes
    (``micro_batch_size`` fixes the per-device batch, else ``gradient_accumulation_steps`` the accumulation)."""
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
    completions = spec.prompts_per_step * spec.num_generations
    knob, value = "micro_batch_size", spec.micro_batch_size
    if value is None:
        knob, value = "gradient_accumulation_steps", spec.gradient_accumulation_steps
    if completions % (value * world_size):
        raise ValueError(
            f"prompts_per_step x num_generations = {completions} completions do not split into {knob} {value} x "
            f"{world_size} process(es): change {knob} or prompts_per_step"
        )
    split = completions // (value * world_size)
    per_device, accumulation = (value, split) if knob == "micro_batch_size" else (split, value)
    return {
        "world_size": world_size,
        "per_device_train_batch_size": per_device,
        "gradient_accumulation_steps": accumulation,
        "steps_per_generation": accumulation,
        "num_generations": spec.num_generations,
        "global_prompts_per_step": completions // spec.num_generations,
        "global_completions_per_step": per_device * accumulation * world_size,
        "updates_per_step": 1,
    }


def vllm_max_model_length(spec: RunSpec) -> int:
    """vLLM's context: the prompt budget (the task's option ``max_prompt_tokens``) + the completion."""
    return get_task(spec.task).options(**spec.task_options).max_prompt_tokens + spec.max_completion_length


def env_world_size() -> int:
    """The process count ``accelerate launch`` / ``torchrun`` set (1 when started alone)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def train_config_summary(spec: RunSpec, world_size: int = 1) -> dict:
    """What ``train --print-config`` prints: the batch layout and the memory settings, without loading a model."""
    memory = (
        "vllm_gpu_memory_utilization",
        "vllm_importance_sampling",
        "ddp_timeout_s",
        "max_completion_length",
        "steps",
    )
    return {
        **{k: getattr(spec, k) for k in ("name", "model")},
        **batch_layout(spec, world_size),
        **{k: getattr(spec, k) for k in ("gradient_checkpointing", "bf16", "use_vllm")},
        "vllm_max_model_length": vllm_max_model_length(spec),
        **{k: getattr(spec, k) for k in memory},
        "batch_reading": BATCH_READING,
    }


# ---------------------------------------------------------------------------------------------------------------
# Training


WEIGHT_FIELDS = (*WeightParams.model_fields, "placement")  # -> TRGRPOConfig.weight_<field>


def make_config(spec: RunSpec, output_dir: Path, world_size: int | None = None, **overrides):
    """The :class:`TRGRPOConfig` of a spec."""
    import torch

    from trgrpo.trainer import TRGRPOConfig

    cuda = torch.cuda.is_available()
    layout = batch_layout(spec, env_world_size() if world_size is None else world_size)
    # a RunSpec field named as a TRGRPOConfig field (RunSpec's docstring) passes as it is unless set here
    shared = {k: getattr(spec, k) for k in RunSpec.model_fields if k in TRGRPOConfig.__dataclass_fields__}
    kw = dict(
        shared,
        output_dir=str(output_dir),
        data_seed=spec.seed,
        max_steps=spec.steps,
        per_device_train_batch_size=layout["per_device_train_batch_size"],
        gradient_accumulation_steps=layout["gradient_accumulation_steps"],
        steps_per_generation=layout["steps_per_generation"],
        temperature=spec.sampling_temperature,
        **{f"weight_{k}": getattr(spec, k) for k in WEIGHT_FIELDS},
        logging_steps=1,
        save_strategy="steps",
        save_total_limit=1,  # resuming needs only the last checkpoint
        save_only_model=False,
        use_cpu=not cuda,
        bf16=spec.bf16 and cuda,
        disable_tqdm=False,
        dataloader_num_workers=0,
        lr_scheduler_type="constant",
        ddp_timeout=spec.ddp_timeout_s,
        vllm_importance_sampling_correction=spec.vllm_importance_sampling != "off",
    )
    if spec.vllm_importance_sampling != "off":
        kw["vllm_importance_sampling_mode"] = spec.vllm_importance_sampling
    if spec.use_vllm:
        kw.update(
            vllm_mode="colocate",
            vllm_max_model_length=vllm_max_model_length(spec),
        )
    kw.update(overrides)
    return TRGRPOConfig(**kw)


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
            if k not in BOOKKEEPING_FIELDS and jsonable(then.get(k)) != jsonable(now[k])
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
    """No space left while a checkpoint was written (one line: the folder and the space a checkpoint needs)."""


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
        f"({shutil.disk_usage(out_dir).free / 1e9:.2f} GB free); free space and start the run again: it "
        "resumes from its last complete checkpoint"
    )


class TrainClock:
    """Training seconds carried over restarts: saved into each checkpoint, read back when one is resumed."""

    FILE = "trgrpo_train_time.json"

    def __init__(self, ckpt: str | None) -> None:
        path = Path(ckpt) / self.FILE if ckpt else None
        self.before = json.loads(path.read_text())["train_time_s"] if path and path.exists() else 0.0
        self.t0 = time.time()

    def total(self) -> float:
        return self.before + time.time() - self.t0

    def callback(self):
        """The run's callback: the clock saved into each checkpoint; :class:`_Finished` once train() has loaded a
        checkpoint of the last step."""
        from transformers import TrainerCallback

        clock = self

        class RunClock(TrainerCallback):
            def on_train_begin(self, args, state, control, **kw):
                if state.global_step >= state.max_steps:  # train() has loaded the weights and optimizer (any engine)
                    raise _Finished

            def on_save(self, args, state, control, **kw):
                if state.is_world_process_zero:
                    ckpt = Path(args.output_dir) / f"checkpoint-{state.global_step}"
                    write_json(ckpt / clock.FILE, {"train_time_s": clock.total()})

        return RunClock()


def history_from_log(log_history: list[dict]) -> list[dict]:
    """One dict per optimizer step (TRL logs every step with ``logging_steps=1``)."""
    return [
        {k: v for k, v in h.items() if isinstance(v, (int, float))} for h in log_history if "loss" in h and "step" in h
    ]


class _Finished(Exception):
    """Raised once train() has loaded a checkpoint of the run's last step: evaluate, no further step."""


def build_trainer(
    spec: RunSpec,
    task: Task,
    output_dir: Path,
    *,
    callbacks: list | None = None,
    config_overrides: dict | None = None,
    world_size: int | None = None,
    verbose: bool = True,
):
    """(trainer, tokenizer, eval records, data source) of a spec on its task's data, rewards and tokenizer."""
    from transformers import AutoTokenizer

    from trgrpo.models import resolve_model
    from trgrpo.trainer import TRGRPOTrainer

    model_path = resolve_model(spec.model)
    tokenizer = task.tokenizer(model_path, spec) if task.tokenizer else AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    train_ds, eval_records = task.build(spec, tokenizer)
    data_source = task.data_source(spec, train_ds, eval_records) if task.data_source else None
    overrides = {**(task.config(spec) if task.config else {}), **(config_overrides or {})}
    config = make_config(spec, output_dir, world_size, **overrides)
    trainer = TRGRPOTrainer(
        model=model_path,
        reward_funcs=task.reward_funcs(spec),
        args=config,
        train_dataset=train_ds,
        processing_class=tokenizer,
        callbacks=callbacks,
        **(task.trainer_kwargs(spec) if task.trainer_kwargs else {}),
    )
    if not verbose:  # transformers prints every step's log dict otherwise
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        trainer.remove_callback(PrinterCallback)
        trainer.remove_callback(ProgressCallback)
    return trainer, tokenizer, eval_records, data_source


def run(
    spec: RunSpec | dict,
    *,
    results_dir: Path | str | None = None,
    checkpoint_dir: Path | str | None = None,
    resume: bool = True,
    callbacks: list | None = None,
    config_overrides: dict | None = None,
    keep_checkpoints: bool = True,
    verbose: bool = True,
    record_extras: Callable[[dict], dict] | None = None,
    trainer_ready: Callable[[Any, list], None] | None = None,
) -> dict:
    """Train (resuming from the last checkpoint) and evaluate one spec; write its record once and return it.
    Hooks: ``trainer_ready(trainer, eval_records)``, ``record_extras(record) -> fields``."""
    import torch

    spec = RunSpec.from_dict(spec) if isinstance(spec, dict) else spec
    task = get_task(spec.task)
    out_dir = checkpoint_folder(spec, checkpoint_dir)
    run_engine = engine()
    if resume:  # checkpoints of another spec or engine are never resumed
        check_run_folders(spec, run_engine, checkpoint_dir)
    logs = live_log_dir(spec, results_dir)
    check_writable(Path(results_dir or RESULTS_DIR), out_dir, *([logs] if logs else []))
    with run_lock(out_dir):
        if not resume:  # from scratch: no checkpoint of an earlier run may be resumed or outlive this one's rotation
            shutil.rmtree(out_dir, ignore_errors=True)
        ckpt = last_checkpoint(out_dir, verbose) if resume else None
        start_step = _checkpoint_step(ckpt)
        finished = start_step >= spec.steps  # killed during the final evaluation: evaluate only
        t0 = time.time()
        if logs is not None:  # transformers' TensorBoard callback reads it when the trainer is built
            os.environ["TENSORBOARD_LOGGING_DIR"] = str(logs)
            if verbose:
                print(f"[trgrpo] live logs ({spec.report_to}): {logs}")
        clock = TrainClock(ckpt)
        trainer, tokenizer, eval_records, data_source = build_trainer(
            spec,
            task,
            out_dir,
            callbacks=[*(callbacks or []), clock.callback()],
            config_overrides=config_overrides,
            verbose=verbose,
        )
        out_dir.mkdir(parents=True, exist_ok=True)  # once the data is built: a run that cannot start leaves nothing
        if not (out_dir / "spec.json").exists():  # the spec a checkpoint was trained with is never overwritten
            write_json(out_dir / "spec.json", {"spec": spec.model_dump(), "engine": run_engine})
        if task.trainer_ready is not None:
            task.trainer_ready(trainer, spec)
        if trainer_ready is not None:
            trainer_ready(trainer, eval_records)
        initial = None
        if spec.eval_before and spec.n_eval > 0:
            initial = _evaluate(trainer, tokenizer, task, eval_records, spec)
        if ckpt and verbose:
            print(f"[trgrpo] {'evaluating' if finished else 'resuming'} {spec.name} from {ckpt}")
        train_t0 = time.time()
        try:
            trainer.train(resume_from_checkpoint=ckpt)
        except _Finished:  # the checkpoint of the last step is loaded: evaluate only
            pass
        except (OSError, RuntimeError) as e:
            if (full := disk_full(e, trainer, out_dir)) is None:
                raise
            raise full from None
        train_s = time.time() - train_t0
        main_process = trainer.accelerator.is_main_process
        final = _evaluate_main(trainer, tokenizer, task, eval_records, spec) if spec.n_eval > 0 else {}
        history = history_from_log(trainer.state.log_history)
        steps_run = sum(1 for h in history if h["step"] > start_step)  # this process's steps only
        train_time = clock.before + (train_s if steps_run else 0.0)  # a finished run's loading is no training
        layout = batch_layout(spec, trainer.accelerator.num_processes)
        record = {
            "kind": RUN_KIND,
            **{k: getattr(spec, k) for k in ("name", "group", "task", "scheme", "seed", "model", "steps")},
            "spec": spec.model_dump(),
            "engine": run_engine,
            "history": history,
            "initial": initial,
            "final": final,
            "data_source": data_source,
            "batch": {
                **layout,
                "trl_generation_batch_size": trainer.args.generation_batch_size,
                "reading": BATCH_READING,
            },
            "resumed_from": ckpt,
            "live_logs": str(logs) if logs is not None else None,
            "train_time_s": train_time,
            "seconds_per_step": train_time / max(1, len(history)),
            "steps_run": steps_run,
            "wall_time_s": time.time() - t0,
            **provenance(),
        }
        if task.record_extras is not None:
            record.update(task.record_extras(trainer, record, spec))
        if record_extras is not None:  # the caller's own fields (the toy: held-out curve, warm start, CPU time)
            record.update(record_extras(record))
        path = write_result(spec.group, spec.name, record, results_dir) if main_process else None
        if verbose and main_process:
            acc = final.get("accuracy")
            print(
                f"[trgrpo] {spec.name}: {len(history)} steps, final accuracy "
                f"{'n/a' if acc is None else f'{acc:.3f}'}, {record['wall_time_s']:.0f} s -> {path}"
            )
        if not keep_checkpoints:
            shutil.rmtree(out_dir, ignore_errors=True)
        del trainer
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return record


def _checkpoint_step(ckpt: Path | str | None) -> int:
    """The step of a ``checkpoint-<step>`` folder; 0 without one."""
    return int(Path(ckpt).name.split("-")[-1]) if ckpt else 0


def _evaluate_main(trainer, tokenizer, task: Task, records: list, spec: RunSpec) -> dict:
    """Evaluate on the main process (others wait), through the colocated vLLM engine when there is one."""
    acc = trainer.accelerator
    engine = getattr(getattr(trainer, "vllm_generation", None), "llm", None)
    if engine is not None:
        trainer.vllm_generation.sync_weights()  # collective under ZeRO-3: every rank
        if hasattr(engine, "wake_up") and getattr(trainer.args, "vllm_enable_sleep_mode", False):
            engine.wake_up()
    zero3 = getattr(getattr(acc.state, "deepspeed_plugin", None), "zero_stage", 0) == 3
    # every rank when the evaluation collects across ranks (ZeRO-3's HF generate, TRL's rollouts of a tool task)
    run_here = acc.is_main_process or (zero3 and engine is None) or task.evaluate_with_trainer
    result = _evaluate(trainer, tokenizer, task, records, spec, engine=engine) if run_here else {}
    acc.wait_for_everyone()
    return result


class VLLMGenerate:
    """HF's ``model.generate`` on a vLLM engine: left-padded prompts in, prompt + completion ids out."""

    def __init__(self, engine, policy) -> None:
        self.engine, self.policy, self.training = engine, policy, False

    def parameters(self):
        return self.policy.parameters()

    def eval(self):
        return self

    def train(self, mode: bool = True):
        return self

    def generate(
        self,
        input_ids,
        attention_mask,
        max_new_tokens: int,
        do_sample: bool = False,
        num_return_sequences: int = 1,
        pad_token_id: int = 0,
        temperature=None,
        top_p=None,
        **_,
    ):
        import torch
        from vllm import SamplingParams

        ids_masks = zip(input_ids.cpu(), attention_mask.cpu())
        prompts = [{"prompt_token_ids": ids[m.bool()].tolist()} for ids, m in ids_masks]
        params = SamplingParams(
            n=num_return_sequences,
            max_tokens=max_new_tokens,
            temperature=float(temperature or 1.0) if do_sample else 0.0,
            top_p=float(top_p or 1.0) if do_sample else 1.0,
        )
        outputs = self.engine.generate(prompts, sampling_params=params, use_tqdm=False)
        rows = [list(c.token_ids) for o in outputs for c in o.outputs]
        width = input_ids.shape[1]
        out = torch.full((len(rows), width + max(1, max(map(len, rows)))), pad_token_id, dtype=torch.long)
        out[:, :width] = input_ids.cpu().repeat_interleave(num_return_sequences, dim=0)
        for i, r in enumerate(rows):
            out[i, width : width + len(r)] = torch.tensor(r, dtype=torch.long)
        return out


def _evaluate(trainer, tokenizer, task: Task, records: list, spec: RunSpec, engine=None) -> dict:
    if task.evaluate_with_trainer:  # rollouts through the trainer's own generation (search: its tool loop)
        return task.evaluate(trainer, tokenizer, records, spec)
    model = trainer.accelerator.unwrap_model(trainer.model)
    if engine is not None:  # vLLM batches itself: hand it every prompt at once
        spec = spec.replace(task_options={"eval_batch_size": 1024, **spec.task_options})
        return task.evaluate(VLLMGenerate(engine, model), tokenizer, records, spec)
    was_training = model.training
    model.eval()
    pad_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        return task.evaluate(model, tokenizer, records, spec)
    finally:
        tokenizer.padding_side = pad_side
        model.train(was_training)
