"""Measure a proposed speed-up of ``trgrpo/loss.py`` and ``trgrpo/weights.py`` against the library as it is.

``python -m benchmarks.loss_patch`` copies the package's ``loss.py``, ``weights.py`` and ``__init__.py`` to a
temporary folder, applies ``benchmarks/loss_speedup.patch`` there (the library itself is never touched),
checks that the patched loss, gradient and metrics equal the library's, then times forward + backward of
both, block by block alternating, on the shapes of the loss benchmark. Writes
``results/bench/loss_patch.json``; :func:`trgrpo.bench.table_markdown` shows it.

When the patch has been applied to the library (or no longer applies), the script says so and stops.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PATCH = Path(__file__).with_name("loss_speedup.patch")
PATCHED_NAME = "trgrpo_patched"


def patched_copy(tmp: Path, patch: Path = PATCH) -> Any:
    """Import a patched copy of trgrpo's loss and weights as the package ``trgrpo_patched``."""
    src = tmp / "trgrpo"
    src.mkdir(parents=True)
    for name in ("__init__.py", "loss.py", "weights.py"):
        shutil.copy(ROOT / "trgrpo" / name, src / name)
    proc = subprocess.run(
        ["patch", "-p1", "--forward", "--batch", "-d", str(tmp), "-i", str(patch)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{patch.name} does not apply (already applied?):\n{proc.stdout}{proc.stderr}")
    src.rename(tmp / PATCHED_NAME)
    sys.path.insert(0, str(tmp))
    importlib.invalidate_caches()
    return importlib.import_module(PATCHED_NAME)


def check_equal(lib: Any, cfg: Any, x: dict) -> dict[str, float]:
    """Largest differences between library and patched copy: loss, gradient, metrics (every variant)."""
    from trgrpo import loss as lib_loss
    from trgrpo import weights as lib_weights

    worst = {"loss": 0.0, "grad": 0.0, "metrics": 0.0}
    for scheme, placement in (("equal", "ratio"), ("tr", "ratio"), ("tr", "surrogate")):
        outs = []
        for tl, tw in ((lib_loss.tr_grpo_loss, lib_weights.token_weights), (lib.tr_grpo_loss, lib.token_weights)):
            logps = x["logps"].detach().clone().requires_grad_(True)
            w = tw(logps.detach().exp().clamp(0.0, 1.0), scheme)
            out = tl(
                logps,
                x["old"],
                x["advantages"],
                x["mask"],
                w,
                ref_logps=x["ref"],
                beta=cfg.beta,
                placement=placement,
                upper=1.4,
                normalizer=x["normalizer"],
            )
            out.loss.backward()
            outs.append((out.loss.detach().double(), logps.grad.double(), out.metrics))
        (l0, g0, m0), (l1, g1, m1) = outs
        if m0.keys() != m1.keys():
            raise RuntimeError(f"metric keys differ: {sorted(m0)} vs {sorted(m1)}")
        worst["loss"] = max(worst["loss"], float((l0 - l1).abs()))
        worst["grad"] = max(worst["grad"], float((g0 - g1).abs().max()))
        worst["metrics"] = max(worst["metrics"], max(abs(m0[k] - m1[k]) for k in m0))
    return worst


def run(lengths: tuple[int, ...], dtypes: tuple[str, ...], repeats: int, iters: int) -> dict:
    """Time library vs patched copy (equal and tr_ratio), plus TRL's ops as reference."""
    import torch

    from trgrpo import bench

    torch.set_num_threads(1)
    allocator = bench.steady_allocator()
    t0 = time.perf_counter()
    cfg = bench.LossBenchConfig(lengths=lengths, dtypes=dtypes, repeats=repeats, iters=iters)
    with tempfile.TemporaryDirectory(prefix="trgrpo-patch-") as tmp:
        lib = patched_copy(Path(tmp))
        names = {
            "grpo_trl": bench.loss_fn("grpo_trl", cfg),
            "equal": bench.loss_fn("equal", cfg),
            "tr_ratio": bench.loss_fn("tr_ratio", cfg),
            "patched_equal": bench.loss_fn("equal", cfg, lib=lib),
            "patched_tr_ratio": bench.loss_fn("tr_ratio", cfg, lib=lib),
        }
        cases = []
        for dtype in dtypes:
            for length in lengths:
                x = bench.loss_inputs(cfg.batch, length, dtype, seed=cfg.seed)
                diff = check_equal(lib, cfg, x)
                times = bench.time_blocks(names, x, repeats=repeats, iters=iters)
                case = {"batch": cfg.batch, "length": length, "dtype": dtype, "max_abs_diff": diff, "variants": {}}
                for v in names:
                    case["variants"][v] = {
                        "ms": {m: bench.summarize(times[v][m]) for m in ("wall", "cpu")},
                        "ratio_vs_library_same_scheme": {
                            m: bench.paired_ratios(times[v][m], times[v.replace("patched_", "")][m])
                            for m in ("wall", "cpu")
                        },
                        "ratio_vs_equal_same_code": {
                            m: bench.paired_ratios(
                                times[v][m], times["patched_equal" if v.startswith("patched") else "equal"][m]
                            )
                            for m in ("wall", "cpu")
                        },
                        "ratio_vs_grpo_trl": {
                            m: bench.paired_ratios(times[v][m], times["grpo_trl"][m]) for m in ("wall", "cpu")
                        },
                    }
                cases.append(case)
                V = case["variants"]
                print(
                    f"[loss_patch] B={cfg.batch} T={length} {dtype}: ms CPU "
                    + ", ".join(f"{v} {V[v]['ms']['cpu']['median']:.2f}" for v in names)
                    + f"; patched tr/equal {V['patched_tr_ratio']['ratio_vs_equal_same_code']['cpu']['median']:.3f}"
                    + f"; max |diff| {diff}",
                    flush=True,
                )
    return {
        "benchmark": "loss_patch",
        "schema": bench.SCHEMA_VERSION,
        **bench.machine_meta(),
        "patch": PATCH.read_text(),
        "method": "Library vs a patched copy (benchmarks/loss_speedup.patch) in one process, same inputs and "
        f"method as the loss benchmark, blocks alternating ({iters} calls per block, {repeats} blocks); loss, "
        "gradient and metrics of the copy checked against the library first.",
        "allocator": "glibc mallopt (as the loss benchmark)" if allocator else "default",
        "config": {"lengths": list(lengths), "dtypes": list(dtypes), "repeats": repeats, "iters": iters},
        "cases": cases,
        "runtime_s": time.perf_counter() - t0,
    }


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m benchmarks.loss_patch [--lengths ...] [--dtypes ...]``."""
    from trgrpo import bench

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", nargs="+", type=int, default=[512, 1024, 2048, 4096])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--out", default=str(bench.RESULTS_DIR))
    args = ap.parse_args(argv)
    try:
        rec = run(tuple(args.lengths), tuple(args.dtypes), args.repeats, args.iters)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"wrote {bench.write_json(rec, Path(args.out) / 'loss_patch.json')}")
    print(f"wrote {bench.write_table(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
