"""trgrpo.bench at a tiny size: the machinery runs, the JSON keeps its schema, the table renders from it."""

import json
import os

import pytest

from scripts import render_docs
from trgrpo.runs import bench


def _check_summary(s, n):
    assert set(s) >= {"median", "min", "max", "n", "values"}
    assert s["n"] == n == len(s["values"])
    assert s["min"] <= s["median"] <= s["max"]


def _check_meta(rec, name):
    assert rec["benchmark"] == name and rec["schema"] == bench.SCHEMA_VERSION
    assert {"platform", "cpu_count", "torch_threads"} <= set(rec["machine"])
    assert {"torch", "trl", "transformers"} <= set(rec["versions"])
    assert rec["runtime_s"] > 0


@pytest.fixture(scope="module")
def tiny_results(tiny_model_dir, tmp_path_factory):
    """Step (in-process, 1 repeat, 2 completions of 4 tokens) and loss (4 x 16) benchmarks, written as JSON."""
    import torch

    out = tmp_path_factory.mktemp("bench")
    threads = torch.get_num_threads()  # the benchmark sets 1 thread, as `make bench`; restored below
    step = bench.run_step_bench(
        bench.StepBenchConfig(
            model=tiny_model_dir,
            repeats=1,
            warmup_steps=1,
            steps=1,
            num_generations=2,
            max_completion_length=4,
            threads=1,
            isolate=False,
        )
    )
    loss = bench.run_loss_bench(
        bench.LossBenchConfig(
            batch=4,
            lengths=(16,),
            dtypes=("float32", "bfloat16"),
            repeats=2,
            iters=1,
            warmup=1,
            threads=1,
        )
    )
    torch.set_num_threads(threads)
    bench.write_json(out / "step.json", step)
    bench.write_json(out / "loss.json", loss)
    return out


def test_step_json_schema(tiny_results):
    rec = json.loads((tiny_results / "step.json").read_text())
    _check_meta(rec, "step")
    assert rec["rollouts_identical"] is True  # learning_rate=0 and one seed: every variant sees the same rollouts
    assert set(rec["variants"]) == set(bench.VARIANTS) and len(rec["runs"]) == len(bench.VARIANTS)
    for name, v in rec["variants"].items():
        for phase in bench.STEP_PHASES:
            for metric in ("wall", "cpu"):
                _check_summary(v["phases"][phase][metric], 1)
                _check_summary(v["ratio_vs_grpo"][phase][metric], 1)
        assert v["phases"]["step"]["cpu"]["median"] > 0 and v["phases"]["rollout"]["wall"]["median"] > 0
        assert v["peak_rss_mb"]["median"] > 0
        if name == "grpo_trl":
            assert v["ratio_vs_grpo"]["step"]["cpu"]["median"] == 1.0
    run = rec["runs"][0]
    assert len(run["steps"]) == 2 and run["measured_from"] == 1
    assert run["peak_rss_method"].startswith(("VmHWM", "ru_maxrss"))


def test_loss_json_schema(tiny_results):
    rec = json.loads((tiny_results / "loss.json").read_text())
    _check_meta(rec, "loss")
    assert [(c["length"], c["dtype"]) for c in rec["cases"]] == [(16, "float32"), (16, "bfloat16")]
    for case in rec["cases"]:
        assert set(case["variants"]) == set(bench.VARIANTS)
        for v in case["variants"].values():
            _check_summary(v["ms"]["cpu"], 2)
            _check_summary(v["ratio_vs_equal"]["wall"], 2)
            assert v["saved_mb"] >= 0
        assert case["variants"]["equal"]["ratio_vs_equal"]["cpu"]["median"] == 1.0


def test_tables_render_from_json(tiny_results):
    res = render_docs.bench_records(tiny_results)
    paper = render_docs.paper_table()
    assert "271.4" in paper and "+5.4%" in paper and "+6.4%" in paper  # the paper's Table 8
    md = render_docs.step_table(res["step"])
    for label in ("GRPO (TRL GRPOTrainer)", "TR-GRPO, placement=ratio", "TR-GRPO, placement=surrogate"):
        assert label in md
    step_row = next(line for line in md.splitlines() if line.startswith("| training step, process CPU (s) |"))
    assert "n/a" not in step_row and step_row.count("%") == 9  # three TR-GRPO cells: ratio [min, max]
    assert "| 4 x 16 | bfloat16 |" in render_docs.loss_table(res["loss"])


def test_tr_and_equal_losses_agree_where_weights_are_one():
    import torch

    cfg = bench.LossBenchConfig(batch=3, lengths=(8,), dtypes=("float32",), repeats=1, iters=1)
    x = bench.loss_inputs(3, 8, "float32", seed=1)
    trl = bench.loss_fn("grpo_trl", cfg)(x)
    equal = bench.loss_fn("equal", cfg)(x)
    assert torch.allclose(trl, equal, rtol=1e-5, atol=1e-7)  # w = 1: our loss is TRL's (Eq. 10 = Eq. 6)


@pytest.mark.slow
def test_isolated_child_run(tiny_model_dir):
    """The default path: each run in a fresh subprocess (slow: the child imports TRL)."""
    rec = bench.run_step_bench(
        bench.StepBenchConfig(
            model=tiny_model_dir,
            variants=("grpo_trl",),
            repeats=1,
            warmup_steps=0,
            steps=1,
            num_generations=2,
            max_completion_length=4,
        )
    )
    run = rec["runs"][0]
    assert run["pid"] != os.getpid() and run["peak_rss_mb"] > 0


def test_empty_results(tmp_path):
    assert render_docs.bench_records(tmp_path) == {}


def test_bad_configs():
    with pytest.raises(ValueError, match="grpo_trl"):
        bench.StepBenchConfig(variants=("tr_ratio",))
    with pytest.raises(ValueError, match="must be among"):
        bench.StepBenchConfig(variants=("grpo_trl", "foo"))
    with pytest.raises(ValueError, match="dtype"):
        bench.LossBenchConfig(dtypes=("int8",))
    with pytest.raises(ValueError, match="^repeats must be a valid integer, got '3'$"):  # one line naming the field
        bench.StepBenchConfig(repeats="3")
    assert bench.StepBenchConfig(variants=["grpo_trl", "equal"]).variants == ("grpo_trl", "equal")  # the CLI's list


def test_summaries():
    assert bench.summarize([3.0, 1.0, 2.0])["median"] == 2.0
    r = bench.paired_ratios([2.0, 3.0], [1.0, 3.0])
    assert (r["min"], r["max"], r["n"]) == (1.0, 2.0, 2)
