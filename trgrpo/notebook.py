"""The few lines every notebook needs: ``nb = setup("01_gradient_norm_theorem", SMOKE)``.

:func:`setup` also makes the output readable: the dependencies' FutureWarnings filtered, progress bars off in a
headless run (``TRGRPO_HEADLESS=1``, set by ``trgrpo.runs.batch`` and the tests), where a saved bar would stay at "0%".
"""

from __future__ import annotations

import ast
import os
import platform
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field, ValidationError, create_model

from trgrpo.config import COUNT, NON_NEGATIVE, POSITIVE, Checked, ConfigError
from trgrpo.files import ROOT, provenance, write_json
from trgrpo.loss import PLACEMENTS, Placement
from trgrpo.weights import TAU_MODES, TauMode

DEPENDENCIES = r"(transformers|trl|accelerate|datasets|huggingface_hub|peft)(\.|$)"


def _switch(name: str) -> bool:
    """Unset, empty, ``0`` or ``false`` is off, anything else on."""
    return os.environ.get(name, "0") not in ("", "0", "false", "False")


def configure() -> None:
    """Filter the dependencies' FutureWarnings; in a headless run, disable progress bars."""
    warnings.filterwarnings("ignore", category=FutureWarning, module=DEPENDENCIES)
    if _switch("TRGRPO_HEADLESS"):
        os.environ.setdefault("TQDM_DISABLE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
        if "transformers" in sys.modules:  # imported before trgrpo: its bar switch was read already
            sys.modules["transformers"].utils.logging.disable_progress_bar()


def _short(value: object, width: int = 60) -> str:
    text = f"{value:.4g}" if isinstance(value, float) else str(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def find_root(start: str | os.PathLike | None = None) -> Path:
    """The nearest of ``start`` (default: the working folder) and its parents holding ``trgrpo/``; else ``start``."""
    here = Path(start or Path.cwd()).resolve()
    return next((p for p in (here, *here.parents) if (p / "trgrpo" / "__init__.py").is_file()), here)


def versions(*packages: str) -> str:
    """One line: python, each package's version (torch with its CUDA device count or CPU), and trgrpo's."""
    import importlib

    from trgrpo import __version__

    parts = [f"python {platform.python_version()}"]
    for name in packages:
        module = importlib.import_module(name)
        text = f"{name} {getattr(module, '__version__', '?')}"
        if name == "torch":
            n = module.cuda.device_count()
            text += f" ({n} CUDA device{'s' * (n != 1)})" if n else " (CPU)"
        parts.append(text)
    return " | ".join(parts + [f"trgrpo {__version__}"])


def cpu_threads(threads: int = 0) -> int:
    """Set torch's CPU threads: ``threads`` if > 0, else 2 (1 on a busy machine, where two thrash); the number."""
    import torch

    cores = os.cpu_count() or 1
    busy = hasattr(os, "getloadavg") and os.getloadavg()[0] >= cores
    n = threads if threads > 0 else (1 if busy else min(2, cores))
    torch.set_num_threads(n)
    return n


def show_table(rows: list[dict], columns: list[str] | None = None, digits: int = 3, title: str = "") -> None:
    """Display ``rows`` as a rendered Markdown table (floats to ``digits`` decimals, None '-', booleans yes / no),
    under ``title`` in bold if given, with the Markdown source as the plain text that nbval compares."""
    from IPython.display import display

    md = (f"**{title}**\n\n" if title else "") + markdown_table(rows, columns, digits=digits)
    display({"text/markdown": md, "text/plain": md}, raw=True)


@dataclass(frozen=True)
class Notebook:
    """Where a notebook's outputs go, and its clock."""

    name: str
    smoke: bool
    root: Path
    started: float = field(default_factory=time.time)

    @property
    def tag(self) -> str:
        return "_smoke" if self.smoke else ""

    @property
    def results(self) -> Path:
        own = self.root / "results"
        package_checkout = ROOT / "results"
        return own if own.is_dir() or not package_checkout.is_dir() else package_checkout

    @property
    def runs(self) -> Path:
        return self.root / "runs" / "smoke-results" if self.smoke else self.root / "results"

    @property
    def figures(self) -> Path:
        """``$TRGRPO_FIGURES``, else ``runs/figures/`` (git-ignored; ``trgrpo records`` promotes a
        run's figures into the committed ``figures/``); created if missing."""
        folder = Path(os.environ.get("TRGRPO_FIGURES") or self.root / "runs" / "figures")
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    @property
    def headline_path(self) -> Path:
        """``runs/notebooks/NAME[_smoke].json``: git-ignored, so a run rewrites no tracked file; the committed
        ``results/notebooks/`` changes only through ``trgrpo records``."""
        return self.root / "runs" / "notebooks" / f"{self.name}{self.tag}.json"

    def elapsed(self) -> float:
        """Seconds since :func:`setup`."""
        return time.time() - self.started

    def save_headline(self, headline: dict, keys: list[str] | None = None, *, quiet: bool = False) -> Path:
        """Write ``headline`` with its ``provenance`` (git commit, clean-tree flag, machine, versions:
        :func:`trgrpo.files.provenance`) to :attr:`headline_path` (atomic JSON, NaN -> null) and, unless
        ``quiet`` (a hidden bookkeeping cell), print a ``saved to PATH`` line, then ``key: value`` for at most eight
        top-level scalar entries (those named in ``keys``, in that order, else the first ones; nested entries are in
        the file, not on screen)."""
        if not isinstance(headline, dict):
            raise TypeError(f"headline must be a dict, got {type(headline).__name__}")
        unknown = [k for k in keys or [] if k not in headline]
        if unknown:
            raise KeyError(f"keys not in headline: {unknown}")
        headline = {**headline, "provenance": provenance()}
        saved = write_json(self.headline_path, headline)
        items = [(k, headline[k]) for k in keys] if keys else list(headline.items())
        scalars = [(k, v) for k, v in items if v is None or isinstance(v, (bool, int, float, str))]
        lines = [f"saved to {saved}"] + [f"  {k}: {_short(v)}" for k, v in scalars[:8]]
        rest = len(headline) - min(len(scalars), 8)
        if rest:
            lines.append(f"  (+{rest} more entries in the file)")
        if not quiet:
            print("\n".join(lines))
        return self.headline_path


_MAX_SEED = 2**32  # numpy's and torch's seed range
Count = Annotated[int, COUNT, Field(lt=_MAX_SEED)]
Index = Annotated[int, Field(ge=0, lt=_MAX_SEED, description="an integer >= 0 (below 2**32)")]
Positive = Annotated[float, POSITIVE]


def _ordered(pair: Sequence[float]) -> Sequence[float]:
    if pair[0] > pair[1]:
        raise ValueError("L > U")
    return pair


# name -> its type, pydantic's bounds and what it must be (the description); a parameter without a rule must have its
# default's type. None passes where the notebook's default is None (it means "the default of the run").
PARAMETER_RULES: dict[str, Any] = {
    **dict.fromkeys(
        (
            "STEPS",
            "PROMPTS_PER_STEP",
            "GROUP_SIZE",
            "G",
            "MICRO_BATCH_SIZE",
            "MAX_COMPLETION_LENGTH",
            "MAX_EVAL_TOKENS",
            "MAX_NEW_TOKENS",
            "N_TRAIN",
            "N_EVAL",
            "N_EVAL_PER_SIZE",
            "SAMPLED_K",
            "NUM_GENERATIONS",
            "MAX_TOOL_CALLS",
            "TOP_K",
            "WARM_START_BATCH",
            "N_PROMPTS",
            "N_KK_PROMPTS",
            "N_MATH_PROMPTS",
            "SAMPLES_PER_PROMPT",
            "MIN_COUNT",
            "N_BOOT",
            "N_DISTRIBUTIONS",
            "LAST_K_BLOCKS",
            "INNER_STEPS",
            "LM_STEPS",
            "LOPTI_STEPS",
            "N_TOKENS",
            "N_SPEARMAN",
            "N_DIRICHLET",
            "N_BOUNDS",
            "V_LARGE",
            "N_PEOPLE",
            "GPUS",
        ),
        Count,
    ),
    **dict.fromkeys(("SEED", "CORPUS_SEED", "LOPTI_SEED", "THREADS", "EVAL_EVERY"), Index),
    "SEEDS": Annotated[
        Sequence[Index], Field(min_length=1, description="a non-empty list of integers >= 0 (below 2**32)")
    ],
    **dict.fromkeys(
        ("SCHEMES", "EVAL_SETS"), Annotated[Sequence[str], Field(min_length=1, description="a non-empty list of names")]
    ),
    "WARM_START_STEPS": Annotated[
        Index | Annotated[Sequence[Index], Field(min_length=1)],
        Field(description="an integer >= 0 or a list of them (phases)"),
    ],
    "WARM_START_LR": Annotated[
        Positive | Annotated[Sequence[Positive], Field(min_length=1)],
        Field(description="a number > 0 or a list of them (phases)"),
    ],
    **dict.fromkeys(
        ("VLLM_GPU_MEMORY", "END_SHARE", "WARM_THRESHOLD"),
        Annotated[float, Field(gt=0, le=1, description="a number in (0, 1]")],
    ),
    **dict.fromkeys(
        ("TEMPERATURE", "LEARNING_RATE", "GPU_MEM_GB", "INNER_LR", "TAU", "ALPHA", "DIRICHLET_A", "LOWER", "UPPER"),
        Positive,
    ),
    **dict.fromkeys(("BETA", "EPS_LOW", "EPS_HIGH"), Annotated[float, NON_NEGATIVE]),
    **dict.fromkeys(
        ("KK_TRAIN_PATH", "KK_EVAL_PATH"),
        Annotated[
            str | Annotated[Sequence[str], Field(min_length=1)],
            Field(description='"hub:<dataset>", "reasoning-gym", a Logic-RL file or a list of them'),
        ],
    ),
    "PLACEMENT": Annotated[Placement, Field(description=f"one of {list(PLACEMENTS)}")],
    "TAU_MODE": Annotated[TauMode, Field(description=f"one of {list(TAU_MODES)}")],
    "TAUS": Annotated[Sequence[Positive], Field(description="a list of numbers > 0")],
    **dict.fromkeys(
        ("RANGES", "LU_RANGES"),
        Annotated[
            Sequence[Annotated[Sequence[Positive], Field(min_length=2, max_length=2), AfterValidator(_ordered)]],
            Field(description="a list of [L, U] pairs, 0 < L <= U"),
        ],
    ),
}


def parameters_model(defaults: dict) -> type[Checked]:
    """A notebook's parameters as a pydantic model: each by :data:`PARAMETER_RULES`, else by the type of its default
    (a list or a tuple for either; anything for None, where the default is an expression)."""

    def rule(name: str, default: Any) -> Any:
        kind = Any if default is None else list | tuple if isinstance(default, (list, tuple)) else type(default)
        what = f"a {type(default).__name__} (as its default {default!r:.40})"
        return PARAMETER_RULES.get(name, Annotated[kind, Field(description=what)])

    return create_model("Parameters", __base__=Checked, **{n: (rule(n, d), None) for n, d in defaults.items()})


def check_values(values: dict, defaults: dict, where: str) -> None:
    """Each of ``values`` by :func:`parameters_model` (a name ``defaults`` lacks has the default None). The first bad
    one is a :class:`ConfigError` naming ``where`` and the parameter."""
    model = parameters_model({**dict.fromkeys(values), **defaults})
    for name, value in values.items():
        try:
            if value is not None or defaults.get(name) is not None:
                model.model_validate({name: value})
        except ValidationError:
            what = model.model_fields[name].description
            raise ConfigError(f"{where}: parameter {name} must be {what}, got {value!r:.80}") from None


def parameter_defaults(nb: Path) -> dict:
    """The parameters papermill reads in the notebook's cell tagged ``parameters`` (never run; ``papermill
    --help-notebook``), each with its literal default (None where the default is an expression, such as ``SMOKE``'s)."""
    import ast

    import papermill as pm

    def literal(source: str):
        try:
            return ast.literal_eval(source)
        except (ValueError, SyntaxError):
            return None

    return {name: literal(p["default"]) for name, p in pm.inspect_notebook(str(nb)).items()}


class ParameterError(ConfigError):
    """A bad notebook parameter: IPython shows its one line (:class:`ConfigError`'s), not a traceback."""


def injected(namespace: dict) -> dict:
    """What papermill's injected cell (the kernel's input that starts "# Parameters") assigns: name -> value node."""
    source = next((src for src in namespace.get("In", ()) if src.startswith("# Parameters\n")), "")
    body = ast.parse(source).body
    return {t.id: n.value for n in body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}


def check_parameters(nb: Notebook, namespace: dict) -> None:
    """The values in ``namespace`` of the parameters the notebook's file declares, by the rules a batch plan's
    values meet (:func:`trgrpo.notebook.check_values`), before smoke mode shrinks them. A copy of a notebook without
    its file beside the project (a student's) is not checked."""
    folders = (nb.root / "notebooks", nb.root / "notebooks" / "solutions", Path.cwd())
    files = [f for f in (p / f"{nb.name}.ipynb" for p in folders) if f.is_file()]
    if not files:
        return
    defaults = parameter_defaults(files[0])
    # papermill only warns about a name the parameters cell lacks (a misspelt -p STEPZ)
    unknown = [name for name in injected(namespace) if name not in defaults]
    if unknown:
        raise ParameterError(f"{nb.name}: unknown parameter {unknown[0]} (its parameters: {', '.join(defaults)})")
    try:
        check_values({k: namespace[k] for k in defaults if k in namespace}, defaults, nb.name)
    except ConfigError as e:
        raise ParameterError(str(e)) from None


def setup(name: str, smoke: bool | None = None, *, root: str | os.PathLike | None = None) -> Notebook:
    """The :class:`Notebook` ``name`` (file name without ``.ipynb``), in smoke mode if ``smoke`` (``None``: the
    environment's), rooted at ``root`` (default :func:`find_root`), its output made readable; prints the mode."""
    if not isinstance(name, str) or not name or Path(name).name != name or name.endswith(".ipynb"):
        raise ValueError(f"name must be the notebook's file name without folder or .ipynb, got {name!r}")
    configure()
    nb = Notebook(name, _switch("TRGRPO_SMOKE") if smoke is None else bool(smoke), Path(root) if root else find_root())
    check_parameters(nb, sys._getframe(1).f_globals)  # the caller is the cell right after the parameters cell
    print(f"{name}: {'smoke mode (a fast pipeline check: its numbers mean nothing)' if nb.smoke else 'full mode'}")
    return nb


def markdown_table(rows: list[dict], columns: list[str] | None = None, *, digits: int | None = None) -> str:
    """Render a list of dicts as a Markdown table (for notebooks, the README and issue notes); with ``digits``,
    floats are rounded to that many decimals, None is '-' and booleans are 'yes' / 'no' (else each cell is ``str``)."""
    if not rows:
        return "(no rows)"
    columns = columns or list(rows[0])

    def cell(v: Any) -> str:
        if digits is None:
            return str(v)
        if v is None:
            return "-"
        if isinstance(v, bool):
            return "yes" if v else "no"
        return f"{round(v, digits) + 0.0:.{digits}f}" if isinstance(v, float) else str(v)  # + 0.0: -0.0 is 0.0

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)
