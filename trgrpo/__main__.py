"""``trgrpo COMMAND [ARGS]`` (``python -m trgrpo`` is the same): the project's one command. Each command is the
``main`` of the module that does the work, loaded only when it runs, so that ``trgrpo --help`` is instant;
``trgrpo COMMAND --help`` shows that command's own options."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# command -> (module whose main(argv) runs it, one line of help); the order of `trgrpo --help`
COMMANDS = {
    "train": ("trgrpo.runs.train", "train and evaluate the runs of a spec YAML (resumes from the last checkpoint)"),
    "plan": ("trgrpo.runs.plan", "estimate peak GPU memory, hours and disk of a plan's runs before a launch"),
    "batch": ("trgrpo.runs.batch", "execute the notebooks of a batch plan headless (papermill) into runs/<name>/"),
    "toy": ("trgrpo.runs.toy_controls", "the toy's grids (controls, KL, tau): run them seed by seed, summarise"),
    "lm": ("trgrpo.runs.lm_science", "the real-LM experiment, one stage from its committed plan"),
    "bench": ("trgrpo.runs.bench", "what TR-GRPO costs against GRPO (Table 8): time and memory per step"),
    "records": ("trgrpo.runs.records", "promote the notebooks' last full-mode headlines and figures from runs/"),
    "model": ("trgrpo.models", "convert the embedded SmolLM2 model once and print its folder"),
    "course": ("course.cli", "the student copy, the instructor's copy, grading, the notebooks' laptop times"),
}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="trgrpo", description="TR-GRPO reproduced for reading and checking.")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_, what) in COMMANDS.items():
        sub.add_parser(name, help=what, add_help=False)  # the command's own parser answers --help
    args, rest = ap.parse_known_args(argv)
    try:
        module = importlib.import_module(COMMANDS[args.command][0])
        return module.main(rest) or 0
    except KeyboardInterrupt:  # Ctrl-C: one line, the shell's exit code for SIGINT, no traceback through the library
        resume = "; run the same command again: a run resumes from its last complete checkpoint"
        resume = resume if args.command == "train" else ""
        print(f"trgrpo {args.command}: interrupted (Ctrl-C){resume}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
