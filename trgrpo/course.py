"""Teaching material: the GRPO primer's helpers (notebook 00), the exercises' checks and the student copy
(``make student``), and the notebooks' laptop times (``python -m trgrpo.course times``)."""

from __future__ import annotations

import argparse
import ast
import copy
import json
import random
import re
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trgrpo import toy
from trgrpo.experiment import ROOT
from trgrpo.models import sft_step
from trgrpo.tasks import addition


def taught_policy(row: dict, *, seed: int = 0) -> Any:
    """A fresh micro model taught ONE prompt in seconds, half of each batch the right sum and half the sum + 1, so
    that a sampled group holds right and wrong answers; ``(model, tokenizer)``."""
    import torch

    tok = toy.build_tokenizer()
    model = toy.build_model(tok, seed=seed)
    wrong = {**row, "target": addition.spaced(int(row["answer"]) + 1)}
    batch = toy._sft_batch(tok, [row, wrong] * 8)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    model.train()
    for _ in range(40):
        sft_step(model, opt, batch)
    model.eval()
    return model, tok


def first_mixed_group(model: Any, tok: Any, rows: Sequence[dict], group_size: int, *, seed: int = 0):
    """The first prompt of ``rows`` (shuffled by ``seed``) whose sampled group has both rewards 0 and 1, with the
    group; ``RuntimeError`` when none of the first 50 has (every advantage of Eq. 4 would be 0)."""
    order = list(rows)
    random.Random(seed).shuffle(order)
    for row in order[:50]:
        prompts = [row["prompt"]] * group_size
        completions = addition.generate(
            model, tok, prompts, max_new_tokens=addition.MAX_COMPLETION["addition"], do_sample=True, seed=seed
        )
        rewards = addition.correctness_reward(prompts, completions, [row["answer"]] * group_size)
        if 0 < sum(rewards) < group_size:
            return row, completions
    raise RuntimeError("no prompt among the first 50 gave a group with mixed rewards")


def completion_logps(model: Any, tok: Any, prompt: str, completions: Sequence[str]):
    """Per-token log pi(o_t | q, o_<t) of each completion and its end token, by teacher forcing:
    ``(logps, mask, token_ids)``, each (G, T), right-padded."""
    import torch

    ids, att, labels = toy._sft_batch(tok, [{"prompt": prompt, "target": c} for c in completions])
    n = len(tok(prompt)["input_ids"])
    logits = model(input_ids=ids, attention_mask=att).logits[:, n - 1 : -1]
    targets, mask = labels[:, n:], (labels[:, n:] != -100).float()
    logps = torch.log_softmax(logits.float(), -1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return logps * mask, mask, ids[:, n:]


# Notebook cells are tagged: the exercise statements (``### Exercise N.k · kind · title``), their solutions and
# checks (in notebooks/solutions/), the long explanations a student copy leaves out, and derivations to write.
NOTEBOOKS = ROOT / "notebooks"
TIMES_PATH = ROOT / "results" / "course" / "notebook_times.json"
EXERCISE, SOLUTION, CHECK, EXPLANATION = "exercise", "solution", "check", "explanation"
DERIVATION = "derivation"
CONCLUSION = "conclusion"
KINDS = ("predict", "explore", "derive", "implement")  # graded from "change a parameter" to "write a variant"
HEADING_RE = re.compile(rf"^###\s+Exercise\s+(\d+)\.(\d+)\s*·\s*({'|'.join(KINDS)})\s*·\s*(.+?)\s*$", re.M)
EXPECTS_RE = re.compile(r"^#\s*expects:\s*(.+?)\s*$")
CONCLUSION_TEXT = (
    "**Your conclusion.** The explanation that stood here is left out of the student copy. Write, in two or three "
    "sentences, what the cells above show and what they do not; then compare with the full text in `notebooks/`."
)


def tags(cell: Any) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def _nbformat():
    import nbformat

    return nbformat


def read(path: Path | str) -> Any:
    return _nbformat().read(str(path), as_version=4)


def main_notebooks() -> list[Path]:
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def solutions_path(main: Path | str) -> Path:
    """``notebooks/NN_stem.ipynb`` -> ``notebooks/solutions/NN_stem_solutions.ipynb``."""
    main = Path(main)
    return main.parent / "solutions" / f"{main.stem}_solutions.ipynb"


def solution_notebooks() -> list[Path]:
    return sorted((NOTEBOOKS / "solutions").glob("[0-9][0-9]_*_solutions.ipynb"))


def exercise_heading(cell: Any) -> dict | None:
    """An exercise statement's id ``"N.k"``, kind and title; None for any other cell."""
    if EXERCISE not in tags(cell) or cell.cell_type != "markdown":
        return None
    m = HEADING_RE.search(cell.source)
    return {"id": f"{m.group(1)}.{m.group(2)}", "kind": m.group(3), "title": m.group(4)} if m else None


def exercises(nb: Any) -> list[dict]:
    """The exercise statements of a notebook, in order: id, kind, title and the cell's source."""
    return [{**h, "source": c.source} for c in nb.cells if (h := exercise_heading(c))]


def expected_names(check_source: str) -> list[str]:
    """The names a check cell's first line ``# expects: a, b`` declares ([] if none)."""
    m = EXPECTS_RE.match(check_source.strip().split("\n", 1)[0])
    return [n.strip() for n in m.group(1).split(",") if n.strip()] if m else []


def student_notebook(nb: Any) -> Any:
    """A main notebook for students: without ``solution`` cells, each run of ``explanation`` cells replaced by one
    "write your conclusion" cell, each ``derivation`` cell that defines a function by :func:`derivation_stub`."""
    out = copy.deepcopy(nb)
    cells: list[Any] = []
    for c in out.cells:
        t = set(tags(c))
        if EXPLANATION in t:
            if not (cells and CONCLUSION in tags(cells[-1])):
                cells.append(_nbformat().v4.new_markdown_cell(CONCLUSION_TEXT, metadata={"tags": [CONCLUSION]}))
        elif SOLUTION not in t:
            if DERIVATION in t and c.cell_type == "code" and _functions(c.source):
                c.source = derivation_stub(c.source)
            cells.append(c)
    out.cells = cells
    return out


def _functions(source: str) -> list[ast.FunctionDef]:
    return [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)]


def derivation_stub(source: str) -> str:
    """A ``derivation`` cell for students: its leading comments, then each top-level function's signature with a
    body that raises ``NotImplementedError`` (the check below fails until the student writes it)."""
    lines, funcs = source.splitlines(), _functions(source)
    if not funcs:
        raise ValueError("a derivation cell must define at least one top-level function (what the student writes)")
    out = [ln for ln in lines[: funcs[0].lineno - 1 - len(funcs[0].decorator_list)] if ln.startswith("#")]
    for f in funcs:
        header = lines[f.lineno - 1 - len(f.decorator_list) : f.body[0].lineno - 1]
        todo = f"write {f.name} (the equation above), then run the check below"
        out += [*header, f"    raise NotImplementedError({todo!r})"]
    return "\n".join(out)


def exercise_workbook(nb: Any) -> Any:
    """A solutions notebook as a workbook: each run of ``solution`` cells becomes one cell that raises until the
    student replaces it. ``ValueError`` when a solution precedes every statement or is not followed by a check."""
    out = copy.deepcopy(nb)
    cells, current, i, src = [], None, 0, out.cells
    while i < len(src):
        heading = exercise_heading(src[i])
        current = heading["id"] if heading else current
        if SOLUTION not in tags(src[i]):
            cells.append(src[i])
            i += 1
            continue
        j = i
        while j < len(src) and SOLUTION in tags(src[j]):
            j += 1
        if current is None:
            raise ValueError(f"solution cell {i} comes before any exercise statement")
        if j >= len(src) or CHECK not in tags(src[j]):
            raise ValueError(f"the solution of Exercise {current} (cells {i}-{j - 1}) is not followed by a check cell")
        names = expected_names(src[j].source)
        expects = f" The check below expects: {', '.join(names)}." if names else ""
        stub = (
            f"# Exercise {current}: your solution here.{expects}\n"
            f'raise NotImplementedError("Exercise {current}: replace this cell with your solution, '
            f'then run the check below")'
        )
        cells.append(_nbformat().v4.new_code_cell(stub, metadata={"tags": ["stub"]}))
        i = j
    out.cells = cells
    if cells and cells[0].cell_type == "markdown":
        title = cells[0].source.splitlines()[0].replace("Solutions", "Exercises", 1)
        cells[0].source = (
            f"{title}\n\nYour workbook. Replace each cell that raises `NotImplementedError` with your code, then run "
            "the check under it: it says what is wrong, with a hint, until your answer is right. "
            "Terms: [glossary](../../docs/glossary.md)."
        )
    return out


def write_student_copy(out: Path | str = ROOT / "student") -> list[Path]:
    """``make student``: write the student copy into ``out`` (replaced if it exists); the notebooks written."""
    out = Path(out)
    if out.resolve() in (NOTEBOOKS.resolve(), (NOTEBOOKS / "solutions").resolve(), ROOT.resolve()):
        raise ValueError(f"out must be a folder of its own, not {out}")
    shutil.rmtree(out, ignore_errors=True)
    (out / "exercises").mkdir(parents=True)
    written = [out / p.name for p in main_notebooks()]
    for path, dest in zip(main_notebooks(), written):
        _nbformat().write(student_notebook(read(path)), str(dest))
    for path in solution_notebooks():
        written.append(out / "exercises" / path.name.replace("_solutions.ipynb", "_exercises.ipynb"))
        _nbformat().write(exercise_workbook(read(path)), str(written[-1]))
    (out / "README.md").write_text(
        "# Student copy of the trgrpo notebooks\n\nWritten by `make student`, rewritten each time (copy your work "
        "elsewhere first). `NN_*.ipynb`: the notebooks without the long explanations; `exercises/`: one workbook per "
        "notebook with exercises. Reading order, times and goals: `docs/syllabus.md`.\n"
    )
    return written


class CheckFailed(AssertionError):
    """A check's verdict on a wrong answer: what is wrong and a hint, never the answer itself."""


def expect(ok: Any, what: str, hint: str = "") -> None:
    """Raise :class:`CheckFailed` with ``what`` (what is wrong) and ``hint`` unless ``ok``."""
    if not ok:
        raise CheckFailed(what + (f"\nHint: {hint}" if hint else ""))


def expect_close(name: str, got: Any, want: float, tol: float = 1e-9, hint: str = "") -> None:
    """``got`` within ``tol`` of a value the check recomputed; the message shows ``got``, never ``want``."""
    try:
        value = float(got)
    except (TypeError, ValueError):
        raise CheckFailed(f"`{name}` should be a number, got {type(got).__name__}") from None
    expect(abs(value - float(want)) <= tol, f"`{name}` = {value:.6g} is not the value the check recomputes", hint)


def parameters_source(path: Path | str) -> str:
    """The source of a notebook's papermill ``parameters`` cell: the settings a time of it was measured with."""
    cells = json.loads(Path(path).read_text())["cells"]
    return next("".join(c["source"]) for c in cells if "parameters" in c.get("metadata", {}).get("tags", []))


def fingerprint(value: Any) -> str:
    """A short hash of ``value`` (floats to 6 digits; lists, tuples, dicts, str, int, bool, None), so that a check
    can compare an answer it must not print."""
    import hashlib

    def canon(v: Any) -> Any:
        if isinstance(v, bool) or v is None or isinstance(v, str):
            return v
        if isinstance(v, (int, float)) or hasattr(v, "item"):
            return round(float(v), 6)
        if isinstance(v, dict):
            return sorted((str(k), canon(x)) for k, x in v.items())
        if isinstance(v, (list, tuple)):
            return [canon(x) for x in v]
        raise TypeError(f"fingerprint cannot hash a {type(v).__name__}")

    return hashlib.sha256(json.dumps(canon(value)).encode()).hexdigest()[:12]


class check:  # noqa: N801  (used as ``with course.check("2.1", hint=...):``, like a statement)
    """Wrap a check cell: a failing ``assert`` or an error while checking becomes a :class:`CheckFailed` naming the
    exercise, the answers the failing line tests (the cell's ``# expects:`` names) and the hints, never the expected
    values. ``hints`` maps an expected name to a hint shown when a line testing that name fails."""

    def __init__(self, exercise: str, hint: str = "", **hints: str) -> None:
        self.exercise, self.hint, self.hints = exercise, hint, hints

    def __enter__(self) -> check:
        import inspect
        import linecache

        # IPython keeps each cell's source in linecache under the cell's file name
        self.filename = inspect.currentframe().f_back.f_code.co_filename
        self.names = expected_names("".join(linecache.getlines(self.filename)))
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        import linecache

        if exc_type is None or not issubclass(exc_type, Exception):
            return False
        line = ""
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self.filename:
                line = linecache.getline(self.filename, tb.tb_lineno)
            tb = tb.tb_next
        named = [n for n in self.names if re.search(rf"\b{re.escape(n)}\b", line.split("#")[0])]
        subject = ", ".join(f"`{n}`" for n in named or self.names) or "your answer"
        if isinstance(exc, CheckFailed):
            what = str(exc)
        elif isinstance(exc, NameError):
            what = f"{exc}: run your solution cell above first (it defines {', '.join(self.names) or 'the answer'})"
        elif isinstance(exc, AssertionError):
            detail = f" ({str(exc).strip()})" if str(exc).strip() else ""
            what = f"{subject} {'is' if len(named) == 1 else 'are'} not right yet{detail}"
        else:
            what = (
                f"checking {subject} raised {exc_type.__name__}: {exc}. Is it of the type and shape the "
                "statement asks for?"
            )
        hints = [self.hints[n] for n in named if n in self.hints and self.hints[n] not in what]
        hints += [self.hint] if self.hint and self.hint not in what else []
        raise CheckFailed(f"Exercise {self.exercise}: {what}" + "".join(f"\nHint: {h}" for h in hints)) from None


def _cli(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trgrpo.course", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("student", help="write the student copy").add_argument("--out", default=str(ROOT / "student"))
    t = sub.add_parser(
        "times", help="time every notebook and its solutions as a laptop runs them (offline, 05-07 smoke)"
    )
    t.add_argument("--allow-dirty", action="store_true", help="time an uncommitted tree (the record says so)")
    args = ap.parse_args(argv)
    if args.cmd == "student":
        print(f"wrote {len(write_student_copy(args.out))} notebooks into {args.out}")
        return 0
    import tempfile

    from trgrpo.batch import OFFLINE_ENV, environment, run_notebook
    from trgrpo.experiment import git_commit, git_dirty, machine_info, write_json

    dirty = git_dirty()  # before the notebooks run: they rewrite results/notebooks/*.json and figures/
    if dirty and not args.allow_dirty:
        print("the tree has uncommitted changes: commit first, so the times name the code they measured")
        return 2
    out_dir, rows = Path(tempfile.mkdtemp(prefix="trgrpo-times-")), []
    for path in [p for m in main_notebooks() for p in (m, solutions_path(m)) if p.exists()]:
        smoke = path.name.startswith(("05_", "06_", "07_")) and "_solutions" not in path.name
        with environment(**OFFLINE_ENV):
            done = run_notebook(path, out_dir, smoke=smoke, timeout=3600)
        mode = "smoke" if smoke else "laptop default"
        rows.append(dict(notebook=str(path.relative_to(ROOT)), mode=mode, wall_s=done["seconds"], ok=done["ok"]))
        rows[-1]["parameters"] = fingerprint(parameters_source(path))
        rows[-1]["error"] = done["error"] or None
        print(f"{path.name}: {done['seconds']:.0f} s ({mode}){'' if done['ok'] else ' FAILED ' + done['error']}")
    record = {
        "measured_at": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": machine_info(),
        "git_commit": git_commit(),
        "dirty": dirty,
        "rows": sorted(rows, key=lambda r: r["notebook"]),
    }
    write_json(TIMES_PATH, record)
    print(f"wrote {TIMES_PATH}; `make docs` renders it into README.md and docs/syllabus.md")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(_cli())
