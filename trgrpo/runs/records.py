"""Records: the JSON a run writes, ``results/<group>/<name>.json`` (:func:`write_result`), its schema
(``record.schema.json``: :data:`RUN_FIELDS`; summaries and other files by ``results.schema.json``), the readers that
validate it (:func:`read_record`, :func:`read_json`, :func:`run_records`, :func:`load_results`) and ``make records``
(:func:`promote_records`)."""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema

from trgrpo.files import RESULTS_DIR, ROOT, jsonable, write_json

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
RUNS_FILE, STEP0_FILE = "runs.jsonl", "step0.json"  # the device job's: a run record a line; the shared step 0
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


def record_path(group: str, name: str, results_dir: Path | str | None = None) -> Path:
    """``results/<group>/<name>.json`` (``results_dir`` in place of ``results/``), both names checked."""
    path = Path(results_dir or RESULTS_DIR) / check_folder_name("group", group, nested=True)
    return path / f"{check_folder_name('name', name)}.json"


def write_result(group: str, name: str, record: dict, results_dir: Path | str | None = None) -> Path:
    """Write :func:`record_path` atomically; a run record is validated first."""
    path = record_path(group, name, results_dir)
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


def run_records(folder: Path | str, role: str | None = None) -> dict[Path, dict]:
    """Path -> run record, every one under ``folder`` (recursively, sorted by path; no folder: none). A file is a run
    record by its place: the :data:`SIDE_FILES` and ``<name>.logs/`` aside, each ``*.json`` must be one, validated
    (:class:`RecordError` naming the file and the field: a list, another kind or a broken file never drops out
    unseen), and with ``role`` (a ``$defs`` key of ``results.schema.json``: ``toy_run``) also by that; one run (group
    and name) in two files is refused naming both."""
    out: dict[Path, dict] = {}
    seen: dict[tuple, Path] = {}
    folder = Path(folder)
    for p in sorted(folder.rglob("*.json")) if folder.is_dir() else ():
        if any(p.match(side) for side in SIDE_FILES) or any(d.endswith(".logs") for d in p.relative_to(folder).parts):
            continue
        rec = out[p] = read_record(p) if role is None else _check(_RESULTS[role], read_record(p), str(p))
        if (key := (rec["group"], rec["name"])) in seen:
            raise RecordError(f"{p}: the same run as {seen[key]} (group {rec['group']!r}, name {rec['name']!r})")
        seen[key] = p
    return out


def load_results(group: str, results_dir: Path | str | None = None, role: str | None = None) -> list[dict]:
    """The run records of ``results/<group>/`` (:func:`run_records`)."""
    return list(run_records(Path(results_dir or RESULTS_DIR) / group, role).values())


def record_hash(record: dict) -> str:
    """The SHA-256 of a record's content (canonical JSON: key order and indentation aside): a summary keeps one per
    record it was built from (:func:`summary_sources`), :func:`changed_since` compares them."""
    text = json.dumps(jsonable(record), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def summary_sources(records: list[dict]) -> dict[str, str]:
    """``{"<group>/<name>": record_hash}`` of the run records a summary is built from (its ``records`` field)."""
    return {f"{r['group']}/{r['name']}": record_hash(r) for r in records}


def changed_since(summary_path: Path | str, role: str, results_dir: Path | str | None = None) -> list[str]:
    """What changed in the run records since the summary at ``summary_path`` was built from them (its ``records``
    field, :func:`summary_sources`): each record edited or gone, and each record of its own folder it does not
    list; empty when none (or no summary)."""
    summary_path, root = Path(summary_path), Path(results_dir or RESULTS_DIR)
    if (summary := read_json(summary_path, role)) is None:
        return []
    built = summary["records"]
    groups = {k.rsplit("/", 1)[0] for k in built} | {summary_path.parent.relative_to(root).as_posix()}
    now = {f"{r['group']}/{r['name']}": r for g in sorted(groups) for r in run_records(root / g).values()}
    out = [
        f"{k} {'changed' if k in now else 'gone'}" for k, h in built.items() if k not in now or record_hash(now[k]) != h
    ]
    own = summary_path.parent.relative_to(root).as_posix()
    return out + [f"{k} added" for k, r in now.items() if k not in built and str(r["group"]) == own]


def run_name(task: str, model: str, label: str, seed: int) -> str:
    """The name of a run: ``<task>-<model folder name>-<label>-seed<seed>`` (every grid names its runs so)."""
    return f"{task}-{Path(str(model)).name}-{label}-seed{seed}"


def promote_records(root: Path = ROOT, allow_dirty: bool = False) -> list[Path]:
    """``make records``: copy each main notebook's full-mode headline of ``runs/notebooks/`` (where a notebook writes
    it: :attr:`trgrpo.notebook.Notebook.headline_path`) into the committed ``results/notebooks/``, and the full-mode
    figures of ``runs/figures/`` into ``figures/``; the files copied. ``ValueError`` (nothing copied) when a headline
    was made on an uncommitted tree or has no provenance, unless ``allow_dirty``."""
    runs = root / "runs"
    stems = [p.stem for p in (root / "notebooks").glob("[0-9][0-9]_*.ipynb")]
    heads = sorted(runs / "notebooks" / f"{s}.json" for s in stems if (runs / "notebooks" / f"{s}.json").is_file())
    dirty = [h.name for h in heads if json.loads(h.read_text()).get("provenance", {}).get("git_dirty") is not False]
    if dirty and not allow_dirty:
        raise ValueError(f"made on an uncommitted tree (or without provenance): {', '.join(dirty)}; commit and rerun")
    figs = sorted(f for f in (runs / "figures").glob("*") if f.is_file() and "smoke" not in f.name)
    pairs = [(h, root / "results" / "notebooks") for h in heads] + [(f, root / "figures") for f in figs]
    for _, dest in pairs:
        dest.mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copy2(src, dest / src.name)) for src, dest in pairs]


def main(argv: list[str] | None = None) -> int:
    """``trgrpo records`` (``make records``): :func:`promote_records`, one line per file copied."""
    ap = argparse.ArgumentParser(
        prog="trgrpo records", description="Promote the notebooks' last full-mode headlines and figures from runs/"
    )
    ap.add_argument("--allow-dirty", action="store_true", help="also headlines made on an uncommitted tree")
    args = ap.parse_args(argv)
    try:
        copied = promote_records(allow_dirty=args.allow_dirty)
    except ValueError as e:
        print(f"records: {e}")
        return 2
    print("\n".join(f"updated {p.relative_to(ROOT)}" for p in copied) or "records: nothing in runs/ to promote")
    return 0
