"""trgrpo.plan: memory per GPU and hours against numbers worked out by hand from the pinned libraries' source
(docs/gpu.md, "Memory per GPU") and the stated assumptions; the Table 1 plan fits 8 x 80 GB and is refused on
1 x 16 GB with the setting to change named; bad planner input is refused in one line (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runs import refused
from trgrpo import notebook
from trgrpo.runs import fullscale, plan
from trgrpo.runs.spec import RunSpec

ROOT = Path(__file__).resolve().parents[2]
# Qwen2.5-3B's config.json: 36 layers, hidden 2048, 16 heads, 2 KV heads (128 wide), MLP 11008, tied vocab 151936
N3B = 36 * (2 * 2048**2 + 2 * 2048 * 256 + 3 * 2048 * 11008) + 151936 * 2048  # 3.0857e9
N = N3B / 1e9


def table1_spec(**kw):
    base = dict(
        task="kk",
        model="Qwen/Qwen2.5-3B-Instruct",
        steps=300,
        prompts_per_step=64,
        num_generations=8,
        micro_batch_size=2,
        max_completion_length=4096,
        n_eval=500,
        gradient_checkpointing=True,
        use_vllm=True,
        vllm_gpu_memory_utilization=0.3,
        bf16=True,
    )
    return RunSpec(**{**base, **kw})


H100, H200 = (plan.GPUS[k].memory_gb for k in ("H100", "H200"))  # the cards' totals: 81559 and 143771 MiB
LAYERS_3B = N - 151936 * 2048 / 1e9  # Qwen2.5-3B's decoder layers: all but its tied embedding matrix


def test_memory_one_h200_by_hand():
    m = plan.memory_gb(table1_spec(), fullscale.model_shape("Qwen/Qwen2.5-3B-Instruct"), gpus=1, gpu_mem_gb=H200)
    # one GPU, no DeepSpeed: TRL's fp32 policy 4N, fp32 gradients 4N, AdamW 8N, fp32 reference 4N: 20N = 61.7
    assert m["weights"] + m["gradients"] + m["optimizer"] + m["reference"] == pytest.approx(20 * N, rel=1e-6)
    assert m["master"] == m["buffers"] == 0  # no DeepSpeed: the fp32 weights are the master copy
    # bf16 autocast's weight cache: a bf16 copy of every decoder-layer weight until the forward ends (5.55 GB)
    assert m["autocast"] == pytest.approx(2 * LAYERS_3B, rel=1e-6)
    # checkpointed activations: 36 layers x 2 x 5120 tokens x 2048 x 4 B (the fp32 residual stream) + one layer
    # 34 x 2 x 5120 x 2048 B
    assert m["activations"] == pytest.approx(2 * 1.50995 + 0.71303, rel=1e-4)
    # TRL's fused LM head: two fp32 tiles of 4096 tokens x 32768 vocabulary columns (no B x T x V logits)
    assert m["logits"] == pytest.approx(2 * 4 * 4096 * 32768 / 1e9)
    assert m["vllm"] == pytest.approx(0.3 * 143771 * 2**20 / 1e9)  # vLLM's share of the card's total bytes: 45.2
    want = 20 * N + 2 * LAYERS_3B + 3.73293 + 1.07374 + 0.3 * H200 + 4.0  # 121.3
    assert m["train_peak"] == pytest.approx(want, rel=1e-4)
    assert sum(m[k] for k in plan.PARTS) == pytest.approx(m["train_peak"])  # the components notebooks 05 / 06 show


def test_table1_on_one_h200_at_half_for_vllm_does_not_fit(capsys):
    """Issue 45 defect 3: 20N + autocast's bf16 weights + the fp32 residual stream + vLLM's half of 150.75 GB."""
    assert H200 == pytest.approx(150.7548, abs=1e-4) and ("kk_qwen3b.yaml", 1, "H200") in plan.README_ROWS
    path = str(ROOT / "experiments" / "kk_qwen3b.yaml")  # as typed: --gpu-mem-gb defaults to the card's total
    assert plan.main([path, "--gpus", "1", "--gpu-type", "H200", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    want = 20 * N + 2 * LAYERS_3B + 3.73293 + 1.07374 + 0.5 * H200 + 4.0  # 151.4 GB > 150.75
    assert out["runs"][0]["memory_gb"]["train_peak"] == pytest.approx(want, rel=1e-4) and want > H200
    assert out["problems"][0].endswith("Change: micro_batch_size: 2 -> 1")


def test_zero_sharding_by_hand():
    shape = fullscale.model_shape("Qwen/Qwen2.5-3B-Instruct")
    z2 = plan.memory_gb(table1_spec(), shape, gpus=8, gpu_mem_gb=H100, zero=2)
    z3 = plan.memory_gb(table1_spec(), shape, gpus=8, gpu_mem_gb=H100, zero=3)
    assert z2["autocast"] == z3["autocast"] == 0  # bf16 parameters: autocast casts nothing
    # ZeRO-2: bf16 parameters 2N, fp32 master 4N/8, bf16 gradients 2N/8, Adam 8N/8; bf16 reference at stage 0;
    # one 5e8-element bf16 reduce bucket
    z2_parts = [z2[k] for k in ("weights", "master", "gradients", "optimizer", "reference", "buffers")]
    assert z2_parts == pytest.approx([2 * N, N / 2, N / 4, N, 2 * N, 1.0])
    # ZeRO-3: parameters and reference partitioned too; + 1e9 live gathered bf16 parameters
    assert (z3["weights"], z3["reference"], z3["buffers"]) == pytest.approx((N / 4, N / 4, 3.0))
    no_ckpt = plan.memory_gb(table1_spec(gradient_checkpointing=False), shape, gpus=8, gpu_mem_gb=80)
    assert no_ckpt["activations"] == pytest.approx(36 * 0.71303, rel=1e-4)  # 34 B per token, layer, unit


def test_hours_one_h200_by_hand():
    r = plan.estimate(table1_spec(), gpus=1, gpu_mem_gb=141, gpu=plan.GPUS["H200"])
    # rollout: 512 sequences fit the KV cache (35.1 GB / (912 tokens x 36864 B) = 1044); a decode step reads
    # 6.18 GB of weights + 17.2 GB of KV at 2.4 TB/s = 9.75 ms -> 52.5k tokens/s; bulk 512 x 1024 / 52.5k = 9.98 s;
    # the longest completion alone: 4096 x (6.18 + 0.034) GB / 2.4 TB/s = 10.60 s -> 10.60 s
    assert r["rollout_s_per_step"] == pytest.approx(10.60, rel=2e-3)
    assert r["rollout_tokens_per_s_per_gpu"] == pytest.approx(52528, rel=2e-3)
    # training: 512 x 1424 tokens x 10 x 3.09e9 FLOP / (989e12 x 0.35) = 65.08 s
    assert r["train_s_per_step"] == pytest.approx(65.08, rel=2e-3)
    assert r["hours"] == pytest.approx((300 * (10.60 + 65.08) + 10.60) / 3600, rel=2e-3)  # 6.31 h
    assert r["fits"] and r["gpu"] == "H200 SXM"


def test_hours_eight_h100_by_hand():
    r = plan.estimate(table1_spec(), gpus=8, gpu_mem_gb=H100, gpu=plan.GPUS["H100"])
    # 64 sequences per GPU; the longest completion dominates: 4096 x 6.2136 GB / 1.675 TB/s = 15.19 s
    assert r["rollout_s_per_step"] == pytest.approx(15.19, rel=2e-3)
    assert r["train_s_per_step"] == pytest.approx(65.08 / 8, rel=2e-3)
    assert r["hours"] == pytest.approx((300 * (15.19 + 8.135) + 15.19) / 3600, rel=2e-3)  # 1.95 h
    states = (2 + 1 / 2 + 1 / 4 + 1 + 2) * N + 1.0
    assert r["memory_gb"]["train_peak"] == pytest.approx(states + 2.22298 + 1.07374 + 0.3 * H100 + 4, 1e-4)  # 51.7


def test_table1_plan_fits_8x80_and_is_refused_on_16gb(capsys):
    path = str(ROOT / "experiments" / "kk_qwen3b.yaml")
    assert plan.main([path, "--gpus", "8", "--gpu-mem-gb", "80"]) == 0
    out = capsys.readouterr().out
    assert "6 run(s)" in out and "NO" not in out
    assert plan.main([path, "--gpus", "1", "--gpu-mem-gb", "16"]) == 1
    err = capsys.readouterr().err
    assert "DOES NOT FIT" in err and "Change:" in err and ("model" in err or "--gpus" in err)


def test_suggestions_name_the_setting():
    spec = table1_spec()
    # one H100 (85.52 GB): 76.1 GB besides vLLM; vLLM's share must hold 2N + 1 GB + one 5120-token sequence: 0.09
    assert plan.suggestions(spec, gpus=1, gpu_mem_gb=H100, zero=2) == ["vllm_gpu_memory_utilization: 0.3 -> 0.09"]
    assert plan.suggestions(spec, gpus=8, gpu_mem_gb=32, zero=2) == [
        "accelerate_config: configs/zero2.yaml -> configs/zero3.yaml"
    ]
    fix = plan.suggestions(table1_spec(gradient_checkpointing=False, micro_batch_size=8), gpus=8, gpu_mem_gb=80, zero=2)
    assert fix == ["gradient_checkpointing: false -> true"]


def test_every_shipped_plan_has_runs_and_a_named_reduced_plan_fits_one_gpu():
    plans = sorted((ROOT / "experiments").glob("*.yaml"))
    for path in plans:
        specs, _ = plan.plan_specs(path)
        if path.name != "smoke.yaml":
            assert specs, path.name
    reduced = [p for p in plans if "reduced" in p.name]
    assert reduced, "a reduced one-GPU plan named as such"
    assert plan.main([str(reduced[0]), "--gpus", "1", "--gpu-mem-gb", "141"]) == 0


def test_unknown_model_names_the_field(tmp_path):
    with pytest.raises(ValueError, match="model"):
        fullscale.model_shape("nobody/unknown-model")
    (tmp_path / "config.json").write_text(
        '{"hidden_size": 32, "num_hidden_layers": 2, "vocab_size": 100, "num_attention_heads": 2,'
        ' "intermediate_size": 64, "tie_word_embeddings": true}'
    )
    shape = fullscale.model_shape(str(tmp_path))
    assert shape.params == 2 * (2 * 32 * 32 + 2 * 32 * 2 * 16 + 3 * 32 * 64) + 100 * 32


def _env():
    return {**os.environ, "PYTHONPATH": str(ROOT)}


# docs/gpu.md's three derived counts, GB per GPU; issue "scale" 6's hand counts 52 / 120 / 73 are within 15 %
N7 = fullscale.MODEL_SHAPES["Qwen2.5-7B-Instruct"].params / 1e9
DERIVED = [  # (plan, --set, GPUs, GPU type, derived peak, hand count, engine, disk of the whole plan)
    ("kk_qwen3b.yaml", "VLLM_GPU_MEMORY=0.3", "8", "H100", 51.70, 52, "DeepSpeed ZeRO-2", 7 * 16 * N),  # 346 GB
    (
        "kk_qwen3b_1gpu_reduced.yaml",
        "VLLM_GPU_MEMORY=0.3",
        "1",
        "H200",
        121.3,
        120,
        "one process, no DeepSpeed",
        36 * N,
    ),
    ("kk_qwen7b.yaml", "VLLM_GPU_MEMORY=0.5", "8", "H100", 71.3, 73, "DeepSpeed ZeRO-3", 7 * 14 * N7),  # 747 GB
]


def _check_derived(out, peak, hand, engine, disk):
    got = out["runs"][0]["memory_gb"]["train_peak"]
    assert got == pytest.approx(peak, abs=0.05) and got == pytest.approx(hand, rel=0.15)
    assert (out["engine"], out["disk_gb"]) == (engine, pytest.approx(disk))


def test_json_gives_the_derived_counts_and_the_whole_plans_disk(capsys):
    for name, override, gpus, mem, *want in DERIVED:
        args = [str(ROOT / "experiments" / name), "--gpus", gpus, "--gpu-type", mem, "--set", override, "--json"]
        assert plan.main(args) == 0
        _check_derived(json.loads(capsys.readouterr().out), *want)
    # the first by hand: (2N bf16 + N/2 master + N/4 gradients + N Adam + 2N reference) + 1 GB bucket + activations
    # + fused head + vLLM 0.3 x the H100's 85.52 GB + overhead
    want = (2 + 1 / 2 + 1 / 4 + 1 + 2) * N + 1.0 + 2.22298 + 1.07374 + 0.3 * H100 + 4
    assert DERIVED[0][4] == pytest.approx(want, abs=0.01)


@pytest.mark.slow
def test_json_as_typed():
    for name, override, gpus, mem, *want in DERIVED:
        cmd = [sys.executable, "-m", "trgrpo", "plan", f"experiments/{name}", "--gpus", gpus, "--gpu-type", mem]
        proc = subprocess.run(
            [*cmd, "--set", override, "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120, env=_env()
        )
        assert proc.returncode == 0, proc.stderr
        _check_derived(json.loads(proc.stdout), *want)


def test_a_3b_plan_at_half_the_gpu_for_vllm_fits_an_h100(capsys):
    path = str(ROOT / "experiments" / "kk_qwen3b.yaml")
    assert plan.main([path, "--gpus", "8", "--gpu-mem-gb", "80", "--set", "VLLM_GPU_MEMORY=0.5"]) == 0
    assert "NO" not in capsys.readouterr().out


def test_table9_models_are_planned(tmp_path, capsys):
    """Table 9's models have shapes (from their config.json values); notebook 05's planner cell plans them."""
    want = {
        "Qwen/Qwen2.5-3B": 3.0857,
        "mistralai/Mistral-7B-Instruct-v0.3": 7.2478,
        "meta-llama/Llama-3.1-8B-Instruct": 8.03,
    }
    for model, billions in want.items():
        assert fullscale.model_shape(model).params / 1e9 == pytest.approx(billions, abs=1e-3)
        specs = fullscale.specs_from_parameters("kk", {**notebook.parameter_defaults(NB05), "MODEL": model})
        _, rows, _ = plan.plan_report(specs, gpus=8, gpu_mem_gb=80, zero=3)
        assert rows[0]["memory_gb"]["train_peak"] < 80, model


NB05 = ROOT / "notebooks" / "05_kk_logic_full_scale.ipynb"
BAD_INPUTS = [  # (plan parameters or flags, what the one line names)
    (["--set", "SEEDS=[]"], "SEEDS"),
    (["--set", "SCHEMES=[]"], "SCHEMES"),
    (["--set", "RANGES=[[1.0]]"], "RANGES"),
    (["--set", "STEPS=1000000000"], "--allow-long"),
    (["--gpu-mem-gb=nan"], "--gpu-mem-gb"),
    (["--gpu-mem-gb=inf"], "--gpu-mem-gb"),
    (["--gpu-mem-gb=-5"], "--gpu-mem-gb"),
]


def _bad_args(extra):
    mem = [] if any(a.startswith("--gpu-mem-gb") for a in extra) else ["--gpu-mem-gb", "80"]
    return ["experiments/kk_qwen3b.yaml", "--gpus", "8", *mem, *extra]


def test_bad_planner_input_is_one_line_exit_2(capsys, monkeypatch):
    """Issue 38's planner inputs, through main (the subprocess form is the slow test below)."""
    monkeypatch.chdir(ROOT)
    for extra, named in BAD_INPUTS:
        assert plan.main(_bad_args(extra)) == 2, extra
        out = capsys.readouterr()
        assert out.out == "" and len(out.err.strip().splitlines()) == 1 and named in out.err, (extra, out.err)
    assert plan.main(_bad_args(["--set", "STEPS=1000000000", "--allow-long"])) == 0  # the override plans it


@pytest.mark.slow
def test_bad_planner_input_as_typed():
    for extra, named in BAD_INPUTS:
        cmd = [sys.executable, "-m", "trgrpo", "plan", *_bad_args(extra)]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, env=_env())
        assert proc.returncode == 2 and proc.stdout == "", (extra, proc.stdout)
        assert len(proc.stderr.strip().splitlines()) == 1 and named in proc.stderr, (extra, proc.stderr)


def test_notebooks_vllm_share_is_the_planners_default():
    """Notebooks 05 / 06's literal parameters cells (papermill) carry the planner's one value."""
    for nb in ("05_kk_logic_full_scale.ipynb", "06_math_full_scale.ipynb"):
        got = notebook.parameter_defaults(ROOT / "notebooks" / nb)["VLLM_GPU_MEMORY"]
        assert got == fullscale.PARAMETER_DEFAULTS["VLLM_GPU_MEMORY"] == 0.5, nb


@pytest.mark.parametrize(("plan", "gpus", "mem"), [("search_qwen3b.yaml", 8, 80), ("search_qwen3b_1gpu.yaml", 1, 141)])
def test_the_planner_plans_the_search_runs(plan, gpus, mem, capsys, monkeypatch):
    """``trgrpo plan experiments/search_qwen3b.yaml --gpus 8 --gpu-mem-gb 80`` (its main, here): Table 3's
    runs, 256 completions per step (32 prompts x 8), both fit; the one-GPU variant fits on one H200 (141 GB)."""
    from trgrpo.runs import plan as planner

    monkeypatch.chdir(ROOT)
    assert planner.main([f"experiments/{plan}", "--gpus", str(gpus), "--gpu-mem-gb", str(mem), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["problems"] == [] and {r["gpu"] for r in out["runs"]} == {"H100 SXM" if gpus == 8 else "H200 SXM"}
    runs = out["runs"]
    assert [r["name"] for r in runs] == ["search-Qwen2.5-3B-equal-seed0", "search-Qwen2.5-3B-tr-seed0"]
    assert all(r["fits"] and r["batch"]["global_completions_per_step"] == 256 for r in runs)
    assert all(r["batch"]["global_prompts_per_step"] == 32 and r["batch"]["world_size"] == gpus for r in runs)
    assert all(r["memory_gb"]["vllm"] > 0 for r in runs)  # vLLM colocated, as the full-scale notebook runs it


def _notebook(path, params="SMOKE = False\nSTEPS = 1\nMODEL = 'x'"):
    import nbformat

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(params)
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell, nbformat.v4.new_code_cell("print(STEPS)")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


@pytest.mark.parametrize(
    "entry,field",
    [
        ("notebooks/05_kk_logic_full_scale.ipynb\n    parameters: {STEPZ: 3}", "STEPZ"),
        ("notebooks/05_kk_logic_full_scale.ipynb\n    parameters: {KK_TRAIN_PATH: /nope/train.parquet}", "train_path"),
        ("notebooks/06_math_full_scale.ipynb\n    parameters: {TRAIN: nope/dsr.parquet}", "nope/dsr.parquet"),
        ("notebooks/06_math_full_scale.ipynb\n    parameters: {EVAL_SETS: [math500, aime.jsonl]}", "aime.jsonl"),
        ("notebooks/07_agentic_search.ipynb\n    parameters: {TRAIN_FILE: nope/train.parquet}", "train_file"),
        ("notebooks/05_kk_missing.ipynb", "05_kk_missing"),
        ("{outside}", "project"),
    ],
)
def test_the_planner_refuses_unknown_parameters_missing_files_and_foreign_notebooks(tmp_path, capsys, entry, field):
    from trgrpo.runs import plan

    outside = _notebook(tmp_path / "05_evil.ipynb", "SMOKE = False\nMODEL = 'x'")
    cfg = tmp_path / "plan.yaml"
    cfg.write_text("notebooks:\n  - notebook: " + entry.replace("{outside}", str(outside)) + "\n")
    rc = plan.main([str(cfg), "--gpus", "8", "--gpu-mem-gb", "80"])
    refused(capsys, rc, cfg, field)


@pytest.mark.parametrize("text,field", [("", "empty"), ("name: kk_qwen3b\n", "task"), ("a: [\n", "YAML at line")])
def test_the_planner_refuses_empty_files_and_plans_without_notebooks(tmp_path, capsys, text, field):
    from trgrpo.runs import plan

    cfg = tmp_path / "plan.yaml"
    cfg.write_text(text)
    refused(capsys, plan.main([str(cfg), "--gpus", "1", "--gpu-mem-gb", "80"]), cfg, field)


def kk(**kw):
    base = dict(task="kk", prompts_per_step=64, num_generations=8, micro_batch_size=4)
    return RunSpec(**{**base, **kw})


def full_scale(task: str, **params) -> list[RunSpec]:
    """The runs of notebook 05 (kk) or 06 (math) at its full-scale defaults, ``params`` changed."""
    from trgrpo.notebook import parameter_defaults

    nb = {"kk": "05_kk_logic_full_scale", "math": "06_math_full_scale"}[task]
    defaults = parameter_defaults(Path(__file__).parents[2] / "notebooks" / f"{nb}.ipynb")
    return fullscale.specs_from_parameters(task, {**defaults, **params})


def test_planner_flags_an_evaluation_longer_than_the_timeout_and_states_the_disk():
    from trgrpo.runs import plan

    spec = full_scale("kk", SCHEMES=["tr"], USE_VLLM=False)[0]
    text, rows, problems = plan.plan_report([spec], gpus=8, gpu_mem_gb=80, gpu=plan.GPUS["H100"])
    assert not problems and "disk: a checkpoint every 20 steps" in text
    n = fullscale.MODEL_SHAPES["Qwen2.5-3B-Instruct"].params / 1e9
    assert rows[0]["checkpoint_gb"] == pytest.approx(16 * n)  # bf16 model 2N + module states 2N, master 4N, moments 8N
    short = spec.replace(ddp_timeout_s=int(rows[0]["eval_s"]))  # less than three evaluations
    _, _, problems = plan.plan_report([short], gpus=8, gpu_mem_gb=80, gpu=plan.GPUS["H100"])
    assert len(problems) == 1 and "ddp_timeout_s >=" in problems[0]


def test_the_search_runs_count_the_retrieval_servers_memory_and_time():
    """Issue 45 defect 1: the planner left the retrieval server out (its hours were generation and training alone). Its
    host memory and seconds are re-derived from the terms docs/gpu.md states (*The retrieval server at paper scale*),
    recomputed here from the numbers themselves, and the prose quotes them."""
    from trgrpo.runs import plan as planner

    specs, zero = planner.plan_specs(ROOT / "experiments" / "search_qwen3b.yaml")
    terms = planner.search_terms(specs[0], 8)
    p, d = 21_015_324, 768
    assert terms["host_gb"] == pytest.approx((4 * p * d + 16 * p) / 1e9)  # 64.9 GB
    step = 256 * 2 * 2 * p * d / 2e12 + 8 * 4 * 4 * p * d / 100e9
    evaluation = 3500 * 2 * 2 * p * d / 2e12 + 8 * 14 * 4 * 4 * p * d / 100e9
    assert terms["retrieval_s_per_step"] == pytest.approx(step) and terms["eval_retrieval_s"] == pytest.approx(
        evaluation
    )
    row = planner.estimate(specs[0], gpus=8, gpu_mem_gb=80, gpu=planner.GPUS["H100"], zero=zero)
    assert row["search"] == terms and row["rollout_s_per_step"] > terms["retrieval_s_per_step"]
    doc = (ROOT / "docs" / "gpu.md").read_text()
    quoted = [
        f"{4 * p * d / 1e9:.1f} GB",
        f"{2 * p * d / 1e9:.1f} GFLOP",
        f"{step:.1f} s a step",
        f"{16 * p / 1e9:.2f} GB",
    ]
    quoted += [f"{3500 * 2 * 2 * p * d / 2e12:.0f} s + {8 * 14 * 4 * 4 * p * d / 100e9:.0f} s"]
    quoted += [f"{512 * 4 * p * d / 100e9:.0f} s a step, about {512 * 4 * p * d / 100e9 * 200 / 3600:.0f} h"]
    quoted += [f"~{step * 200 / 3600:.1f} h now"]
    quoted += [f"{(4 * p * d + 16 * p) / 1e9:.1f} GB of the server's RAM", f"{96 * p / 1e9:.1f} GB plus 0.2 GB"]
    assert all(q in " ".join(doc.split()) for q in quoted), [q for q in quoted if q not in " ".join(doc.split())]
