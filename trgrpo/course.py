"""Teaching material: the GRPO primer's helpers (notebook 00), the exercises' checks and the student copy
(``make student``), and the notebooks' laptop times (``python -m trgrpo.course times``)."""

from __future__ import annotations

import argparse
import ast
import copy
import json
import math
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


def taught_policy(row: dict, *, seed: int = 0, offsets: Sequence[int] = (1,)) -> Any:
    """A fresh micro model taught ONE prompt in seconds, half of each batch the right sum and half the sums + each
    of ``offsets`` (split evenly), so that a sampled group holds right and wrong answers; ``(model, tokenizer)``."""
    import torch

    tok = toy.build_tokenizer()
    model = toy.build_model(tok, seed=seed)
    wrongs = [{**row, "target": addition.spaced(int(row["answer"]) + d)} for d in offsets]
    batch = toy._sft_batch(tok, [x for w in wrongs for x in (row, w)] * (8 // len(wrongs)))
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


HANDOUT_MANIFEST = ".handout.json"  # what make student wrote last: file -> sha256 (a changed file is the student's)


def _sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_student_copy(out: Path | str = ROOT / "student") -> tuple[list[Path], list[Path]]:
    """``make student``: write the student copy into ``out``: ``(written, kept)``. A file the student changed since
    the last ``make student`` (its hash differs from the manifest's, or no manifest names it) is kept: the fresh copy
    goes beside it as ``NAME.new.ipynb``, listed in ``kept``."""
    out = Path(out)
    if out.resolve() in (NOTEBOOKS.resolve(), (NOTEBOOKS / "solutions").resolve(), ROOT.resolve()):
        raise ValueError(f"out must be a folder of its own, not {out}")
    (out / "exercises").mkdir(parents=True, exist_ok=True)
    manifest_path = out / HANDOUT_MANIFEST
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    books = [(out / p.name, student_notebook(read(p))) for p in main_notebooks()]
    for path in solution_notebooks():
        dest = out / "exercises" / path.name.replace("_solutions.ipynb", "_exercises.ipynb")
        books.append((dest, exercise_workbook(read(path))))
    written, kept = [], []
    for dest, nb in books:
        rel = str(dest.relative_to(out))
        if dest.exists() and manifest.get(rel) != _sha(dest):
            kept.append(dest)
            dest = dest.with_suffix(".new.ipynb")
        _nbformat().write(nb, str(dest))
        written.append(dest)
        if dest.name.endswith(".new.ipynb"):
            continue
        manifest[rel] = _sha(dest)
    (out / "README.md").write_text((ROOT / "course" / "student_README.md").read_text())
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return written, kept


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


class CheckFailed(AssertionError):
    """A check's verdict on a wrong answer: what is wrong and a hint, never the answer itself."""

    def _render_traceback_(self) -> list[str]:  # IPython shows this instead of a traceback through the library
        return [f"CheckFailed: {self}"]


def expect(ok: Any, what: str, hint: str = "") -> None:
    """Raise :class:`CheckFailed` with ``what`` (what is wrong) and ``hint`` unless ``ok``."""
    if not ok:
        raise CheckFailed(what + (f"\nHint: {hint}" if hint else ""))


HAND_RTOL = 1e-3  # a hand answer counts as right within 0.1 % (relative), as the exercises' statements say
EXACT_RTOL = 1e-9  # an answer the statement asks to compute with the library


def _spread_1_1(data: dict) -> dict:
    import torch

    from trgrpo import theory

    out = {}
    for name, lo in (("all", 0.0), ("high", 0.35)):
        p = torch.linspace(lo, 0.99, 1000, dtype=torch.float64)
        rows = theory.theorem32_spread(1 - p, p, tau_modes=("scale",), schemes=("equal", "tr"))
        out.update({f"cv_{'plain' if r['scheme'] == 'equal' else 'tr'}_{name}": r["cv"] for r in rows})
    return out


def _weights_2_1(data: dict) -> dict:
    from trgrpo import paper
    from trgrpo.weights import WeightParams, weight_range

    def leaves_floor(mode: str) -> float:  # the tau where weight_range's maximum leaves L, by bisection
        lo, hi, up = (1e-3, 1e3, mode == "scale")
        for _ in range(200):
            mid = math.sqrt(lo * hi)
            above = weight_range(tau=mid, tau_mode=mode)[1] > WeightParams().lower
            lo, hi = (lo, mid) if above == up else (mid, hi)
        return math.sqrt(lo * hi)

    ident = {
        m: [t for t in paper.TABLE7_TAUS if weight_range(tau=t, tau_mode=m)[1] == 1.0] for m in ("scale", "divide")
    }
    return {
        "tau_star_scale": leaves_floor("scale"),
        "tau_star_divide": leaves_floor("divide"),
        "identity_taus_scale": ident["scale"],
        "identity_taus_divide": ident["divide"],
    }


def _kl_2_2(data: dict) -> dict:
    from trgrpo import readings

    tr, rev = readings.kl_offset_table(probs=(0.9,))[0], readings.kl_offset_table(probs=(0.9,), scheme="reverse")[0]
    return {
        "kl_offset_14": tr["eq10_value"],
        "kl_offset_06": rev["eq10_value"],
        "kl_slope_14": tr["eq10_dlogpi"],
        "kl_push_14": 1 if tr["eq10_dlogpi"] < 0 else -1,  # descent moves log pi against the derivative
    }


def _silenced_2_3(data: dict) -> dict:
    import torch

    from trgrpo import loss, readings
    from trgrpo.weights import token_weights, weight_range

    p = torch.as_tensor(data["batch_p"], dtype=torch.float64)
    logps = p.log().requires_grad_(True)  # on-policy: r = 1; every advantage positive
    adv, mask = torch.ones(p.shape[0], dtype=torch.float64), torch.ones_like(p)
    out = {"p_cut_030": readings.zero_gradient_thresholds(eps_high=0.30, resolution=1e-6)["ratio"]["pos_from_p"]}
    for eps, name in ((0.24, "zero_frac_024"), (0.30, "zero_frac_030"), (0.5, "zero_frac_050")):
        res = loss.tr_grpo_loss(logps, None, adv, mask, token_weights(p), eps_high=eps, placement="ratio")
        (grad,) = torch.autograd.grad(res.loss, logps)
        out[name] = float((grad == 0).double().mean())  # autograd: no policy gradient at all
    out["eps_high_no_cut"] = weight_range()[1] - 1.0  # w never exceeds its largest value
    return out


def _synth_pbar(synth: dict, min_count: int) -> dict:
    from trgrpo import token_stats

    texts = [t for t, ps in synth.items() for _ in ps]
    return token_stats.average_probabilities(texts, [p for ps in synth.values() for p in ps], min_count=min_count)


def _spearman_4_2(data: dict) -> dict:
    from trgrpo import stats

    rho = {k: stats.spearman(*zip(*_synth_pbar(data["SYNTH"], k).values()))[0] for k in (1, 3)}
    return {"rho": rho[1], "rho_min3": rho[3]}


def _scales_4_4(data: dict) -> dict:
    import torch

    from trgrpo.weights import token_weights

    avg = _synth_pbar(data["SYNTH"], 1)
    w = dict(zip(avg, token_weights(torch.tensor([p for p, _ in avg.values()], dtype=torch.float64)).tolist()))
    hi, lo = max(avg, key=lambda t: avg[t][0]), min(avg, key=lambda t: avg[t][0])
    return {
        "g_grpo": {t: 1 - p for t, (p, _) in avg.items()},
        "g_tr": {t: w[t] * (1 - p) for t, (p, _) in avg.items()},
        "tr_factor": w[hi] / w[lo],
    }


# Per exercise checked by :func:`check_answers`: the library computation of the reference values (from the notebook's
# data, e.g. ``batch_p``), the answers found by hand (compared at HAND_RTOL; the others, computed with the library, at
# EXACT_RTOL), a hint per answer and one for the exercise. The check cell shows only ``course.check_answers(...)``.
ANSWERS: dict[str, dict] = {
    "1.1": dict(
        reference=_spread_1_1,
        hint="the coefficient of variation is std / mean with ddof=1 (the sample standard deviation, as "
        "trgrpo.stats.mean_std), of w(p)(1-p) on the grid itself",
        cv_tr_all="TR-GRPO's factor is w(p)(1 - p) with Eq. 11's default weight (tau_mode='scale')",
        cv_tr_high="TR-GRPO's factor is w(p)(1 - p) with Eq. 11's default weight (tau_mode='scale')",
    ),
    "2.1": dict(
        reference=_weights_2_1,
        hand=("tau_star_scale", "tau_star_divide"),
        hint="tau* is a value of tau: the tau at which the largest weight over p in [0, 1] first leaves L = 1",
        tau_star_scale="under tau_mode='scale', at which p is the sigmoid's argument largest?",
        tau_star_divide="under tau_mode='divide' the argument is p / tau: which p makes it largest?",
        identity_taus_scale="the taus of paper.TABLE7_TAUS where weight_range(tau=t, tau_mode='scale') is (1, 1)",
        identity_taus_divide="the taus of paper.TABLE7_TAUS where weight_range(tau=t, tau_mode='divide') is (1, 1)",
    ),
    "2.2": dict(
        reference=_kl_2_2,
        hand=("kl_offset_14", "kl_offset_06", "kl_slope_14", "kl_push_14"),
        hint="at rho = 1 the statement gives both the value (w - log w - 1, natural log) and the derivative (1 - w)",
        kl_offset_14="evaluate w - log w - 1 at w = 1.4",
        kl_offset_06="evaluate w - log w - 1 at w = 0.6 (log 0.6 is negative)",
        kl_slope_14="the derivative in log pi at rho = 1 is 1 - w; mind its sign",
        kl_push_14="a descent step moves log pi against the derivative: which sign does the step on log pi have?",
    ),
    "2.3": dict(
        reference=_silenced_2_3,
        hand=("p_cut_030", "eps_high_no_cut"),
        hint="a token with A > 0 is silenced where its weight exceeds 1 + eps_h",
        p_cut_030="at which p does Eq. 11's weight reach 1 + eps_h = 1.30? The weight grows with p",
        zero_frac_024="the share of batch_p's tokens that readings.zero_gradient_fraction reports at eps_high=0.24",
        zero_frac_030="the share of batch_p's tokens that readings.zero_gradient_fraction reports at eps_high=0.30",
        zero_frac_050="the share of batch_p's tokens that readings.zero_gradient_fraction reports at eps_high=0.5",
        eps_high_no_cut="no token is silenced once 1 + eps_h is at least the largest weight Eq. 11 can give",
    ),
    "4.2": dict(
        reference=_spearman_4_2,
        hand=("rho", "rho_min3"),
        hint="Spearman's rho is Pearson's correlation of the ranks: rank pi_bar and the counts, then compare the ranks",
        rho="all five tokens (min_count=1)",
        rho_min3="only the tokens seen at least 3 times",
    ),
    "4.4": dict(
        reference=_scales_4_4,
        hand=("tr_factor",),
        hint="keys are the token texts stripped, as average_probabilities returns them; weights from token_weights",
        g_grpo="the GRPO scale of a token is 1 - pi_bar",
        g_tr="the TR-GRPO scale of a token is w(pi_bar) (1 - pi_bar), w from trgrpo.token_weights",
        tr_factor="write both ratios of scales as fractions: which factors cancel?",
    ),
}


def _close(got: Any, want: Any, rtol: float) -> bool:
    """``got`` equals ``want`` within ``rtol`` (relative) number by number; a list in any order, a dict key by key."""
    if want is None or isinstance(want, (bool, str)):
        return got == want
    if isinstance(want, dict):
        return isinstance(got, dict) and set(got) == set(want) and all(_close(got[k], want[k], rtol) for k in want)
    if isinstance(want, (list, tuple)):
        try:
            return len(got) == len(want) and all(_close(g, w, rtol) for g, w in zip(sorted(got), sorted(want)))
        except TypeError:
            return False
    try:
        value = float(got) if not isinstance(got, (str, bytes)) else math.nan
    except (TypeError, ValueError):
        return False
    return abs(value - float(want)) <= rtol * abs(float(want)) + 1e-12


def check_answers(exercise: str, *, data: dict | None = None, **answers: Any) -> None:
    """Compare the named ``answers`` of ``exercise`` with the reference values of :data:`ANSWERS` (computed by the
    library from ``data``), hand answers within :data:`HAND_RTOL`; print a tick, or raise one :class:`CheckFailed`
    that names every wrong answer (only those) with its hint, never a reference value."""
    spec = ANSWERS[exercise]
    hand = set(spec.get("hand", ()))
    want = spec["reference"](data or {})
    missing = sorted(set(want) - set(answers))
    if missing:
        raise CheckFailed(f"Exercise {exercise}: pass {', '.join(missing)} to the check as well")
    wrong = [n for n in want if not _close(answers[n], want[n], HAND_RTOL if n in hand else EXACT_RTOL)]
    if not wrong:
        print(f"Exercise {exercise} ✓")
        return
    names = ", ".join(f"`{n}`" for n in wrong)
    what = f"{names} {'is' if len(wrong) == 1 else 'are'} not right yet"
    if hand & set(wrong):
        what += f" (a hand answer counts within {HAND_RTOL:.1%} of the reference, e.g. 4 significant digits)"
    hints = [f"{n}: {spec[n]}" for n in wrong if n in spec] + [spec["hint"]]
    raise CheckFailed(f"Exercise {exercise}: {what}" + "".join(f"\nHint: {h}" for h in hints))


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
    r = sub.add_parser("records", help="promote the notebooks' last full-mode headlines and figures from runs/")
    r.add_argument("--allow-dirty", action="store_true", help="also headlines made on an uncommitted tree")
    t = sub.add_parser(
        "times", help="time every notebook and its solutions as a laptop runs them (offline, 05-07 smoke)"
    )
    t.add_argument("--allow-dirty", action="store_true", help="time an uncommitted tree (the record says so)")
    args = ap.parse_args(argv)
    if args.cmd == "student":
        written, kept = write_student_copy(args.out)
        print(f"wrote {len(written)} notebooks into {args.out}")
        for k in kept:
            print(f"kept your changed {k}; the fresh copy is {k.with_suffix('.new.ipynb')}")
        return 0
    if args.cmd == "records":
        try:
            copied = promote_records(allow_dirty=args.allow_dirty)
        except ValueError as e:
            print(f"records: {e}")
            return 2
        print("\n".join(f"updated {p.relative_to(ROOT)}" for p in copied) or "records: nothing in runs/ to promote")
        return 0
    import tempfile

    from trgrpo.batch import OFFLINE_ENV, environment, run_notebook
    from trgrpo.experiment import git_commit, git_dirty, machine_info, write_json

    dirty = git_dirty()  # before the notebooks run
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
