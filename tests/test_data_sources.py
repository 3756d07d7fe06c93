"""Data as the paper's: Logic-RL parquet files for K&K, the source in the run record, the <think> pre-fill,
math sets under Table 2's names (issue 15, item 7)."""

from pathlib import Path

import pandas as pd
import pytest
import yaml
from datasets import Dataset

from trgrpo.files import ROOT
from trgrpo.runs.experiment import run
from trgrpo.runs.fullscale import specs_from_parameters
from trgrpo.runs.spec import RunSpec
from trgrpo.tasks import Task, get_task, kk, kk_puzzles, register_task
from trgrpo.tasks import math as tm

TABLE2_EVAL_SETS = ("olympiadbench", "minerva", "math500", "amc", "aime24")

QUIZ3 = "A very special island is inhabited only by knights and knaves. You meet 3 inhabitants: Zoey, Oliver, and Ava."
QUIZ4 = "A very special island is inhabited only by knights and knaves. You meet 4 inhabitants: Zoey, Max, Eli, Liam."
GOLD3 = "(1) Zoey is a knight\n(2) Oliver is a knave\n(3) Ava is a knight"
GOLD4 = "(1) Zoey is a knave\n(2) Max is a knave\n(3) Eli is a knight\n(4) Liam is a knight"


# The system prompt inside Logic-RL's K&K parquet rows (its data, typed out here independently of the library).
LOGIC_RL_SYSTEM = (
    "You are a helpful assistant. The assistant first thinks about the reasoning process in the mind and then provides "
    "the user with the answer. The reasoning process and answer are enclosed within <think> </think> and<answer> "
    "</answer> tags, respectively, i.e., <think> reasoning process here </think><answer> answer here </answer>.  Now "
    "the user asks you to solve a logical reasoning problem. After thinking, when you finally reach a conclusion, "
    "clearly state the identity of each character within <answer> </answer> tags. i.e., <answer> (1) Zoey is a "
    "knight\n(2) ... </answer>."
)


def logic_rl_row(quiz: str, gold: str, index: int) -> dict:
    """A row as Logic-RL's verl preprocessing writes it: the rendered prompt, the gold in the reward model."""
    content = (
        f"<|im_start|>system\n{LOGIC_RL_SYSTEM}\n<|im_end|>\n<|im_start|>user\n{quiz}\n<|im_end|>\n"
        "<|im_start|>assistant\n<think>"
    )
    return {
        "data_source": "kk_logic",
        "prompt": [{"role": "user", "content": content}],
        "ability": "logic",
        "reward_model": {"style": "rule", "ground_truth": {"solution_text_format": gold, "statements": "[]"}},
        "extra_info": {"split": "test", "index": index},
    }


@pytest.fixture
def logic_rl_parquet(tmp_path):
    rows = [logic_rl_row(QUIZ3 + f" #{i}", GOLD3, i) for i in range(3)]
    rows += [logic_rl_row(QUIZ4 + f" #{i}", GOLD4, 3 + i) for i in range(3)]
    path = tmp_path / "test_new.parquet"
    pd.DataFrame(rows).to_parquet(path)
    return path


def test_logic_rl_parquet_rows_load(logic_rl_parquet):
    records = kk.load_kk_files(logic_rl_parquet)
    assert len(records) == 6
    assert records[0]["quiz"] == QUIZ3 + " #0"  # taken out of the rendered user turn
    assert records[0]["names"] == ["Zoey", "Oliver", "Ava"]
    assert records[0]["solution"] == [True, False, True]
    assert records[3]["solution"] == [False, False, True, True]


def test_the_prompt_reproduces_the_logic_rl_rows_exactly(logic_rl_parquet, tiny_model_dir):
    """Issue 24, item 7: the system prompt and turn layout of the paper's data, under a ChatML template (Qwen2.5's)."""
    from transformers import AutoTokenizer

    rows = pd.read_parquet(logic_rl_parquet).to_dict("records")
    records = kk.load_kk_files(logic_rl_parquet)
    ds = kk.kk_dataset(records, prefill_think=True, tokenizer=AutoTokenizer.from_pretrained(tiny_model_dir))
    assert [p for p in ds["prompt"]] == [r["prompt"][0]["content"] for r in rows]
    assert kk_puzzles.KK_SYSTEM_PROMPT == LOGIC_RL_SYSTEM


def test_raw_kk_schema_parquet_loads(tmp_path):
    path = tmp_path / "train.parquet"
    row = {"quiz": QUIZ3, "names": ["Zoey", "Oliver", "Ava"], "solution": [True, False, True]}
    pd.DataFrame([{**row, "solution_text_format": GOLD3}]).to_parquet(path)
    (record,) = kk.load_kk_files([path])
    assert record["solution_text"] == GOLD3 and record["n_people"] == 3


def test_a_cut_keeps_every_size(logic_rl_parquet):
    records = kk.load_kk_files(logic_rl_parquet, n=4)
    assert [r["n_people"] for r in records] == [3, 4, 3, 4]
    assert [r["n_people"] for r in kk.load_kk_files(logic_rl_parquet, n_people=[4])] == [4, 4, 4]


def test_missing_path_names_the_file(tmp_path):
    missing = tmp_path / "nowhere" / "test_new.parquet"
    with pytest.raises(FileNotFoundError, match="nowhere/test_new.parquet"):
        kk.load_kk_files(missing)
    spec = RunSpec(task="kk", model="embedded", n_train=2, n_eval=2, task_options={"eval_path": str(missing)})
    with pytest.raises(FileNotFoundError, match=r"nowhere/test_new\.parquet"):
        get_task("kk").build(spec, None)


def test_bad_column_names_the_file_and_the_field(tmp_path):
    path = tmp_path / "test_new.parquet"
    pd.DataFrame([{"question": QUIZ3, "solution_text_format": GOLD3}]).to_parquet(path)
    with pytest.raises(ValueError, match=r"test_new\.parquet: row 0: .*needs a quiz"):
        kk.load_kk_files(path)
    pd.DataFrame([{"quiz": QUIZ3, "answer": "Zoey"}]).to_parquet(path)
    with pytest.raises(ValueError, match=r"test_new\.parquet: row 0: .*solution_text_format"):
        kk.load_kk_files(path)


def test_kk_build_reads_the_file_and_states_the_source(logic_rl_parquet, tmp_path):
    train_path = tmp_path / "train.parquet"
    pd.DataFrame([logic_rl_row(QUIZ3 + f" train {i}", GOLD3, i) for i in range(5)]).to_parquet(train_path)
    spec = RunSpec(
        task="kk",
        model="embedded",
        n_train=4,
        n_eval=4,
        task_options={"train_path": str(train_path), "eval_path": [str(logic_rl_parquet)], "n_people": [3, 4]},
    )
    task = get_task("kk")
    train_ds, test = task.build(spec, None)
    assert len(test) == 4 and {r["n_people"] for r in test} == {3, 4}
    source = task.data_source(spec, train_ds, test)
    assert source["eval"] == {
        "source": "logic-rl-file",
        "path": [str(logic_rl_parquet)],
        "split": ["test_new"],
        "size": 4,
    }
    assert source["train"]["source"] == "logic-rl-file" and source["train"]["size"] == len(train_ds) == 4
    assert source["train"]["split"] == ["train"]
    assert source["prefill_think"] is False


def test_kk_without_a_path_states_reasoning_gym():
    spec = RunSpec(task="kk", model="embedded", n_train=2, n_eval=2, task_options={"n_people": [3]})
    source = get_task("kk").data_source(spec, [0, 0], [0, 0])
    assert source["train"]["source"] == source["eval"]["source"] == "reasoning-gym"
    assert (source["train"]["split"], source["eval"]["split"], source["eval"]["size"]) == ("train", "test", 2)


def _build(spec, tokenizer):
    return Dataset.from_dict({"prompt": ["Count to 3:"] * 4}), ["Count to 3: 1 2 3"]


def _source(spec, train_ds, records):
    return {"train": {"source": "unit", "size": len(train_ds)}, "eval": {"size": len(records)}}


register_task(
    "data-source-test",
    Task(_build, lambda spec: [lambda completions, **kw: [0.0] * len(completions)], lambda *a: {}, _source),
)


def test_record_carries_data_source(tiny_model_dir, tmp_path):
    spec = RunSpec(
        task="data-source-test",
        model=tiny_model_dir,
        steps=1,
        prompts_per_step=2,
        num_generations=2,
        max_completion_length=4,
        n_train=4,
        n_eval=0,
        group="unit",
        name="ds",
    )
    record = run(spec, results_dir=tmp_path / "r", checkpoint_dir=tmp_path / "c", verbose=False)
    assert record["data_source"] == {"train": {"source": "unit", "size": 4}, "eval": {"size": 1}}


def test_full_scale_kk_prefills_think_and_says_so():
    from trgrpo.notebook import parameter_defaults

    defaults = parameter_defaults(ROOT / "notebooks" / "05_kk_logic_full_scale.ipynb")
    specs = specs_from_parameters(
        "kk", {**defaults, "SEEDS": [0], "SCHEMES": ["tr"], "KK_EVAL_PATH": "data/kk/x.parquet"}
    )
    opts = specs[0].task_options
    assert opts["prefill_think"] is True and opts["eval_path"] == "data/kk/x.parquet"
    assert opts["train_path"] == kk.KK_PAPER_DATA == "hub:K-and-K/knights-and-knaves"  # the paper's data by default
    source = get_task("kk").data_source(specs[0], [0], [0])
    assert source["prefill_think"] is True
    params = {
        "MODEL": "m",
        "SCHEMES": ["tr"],
        "SEEDS": [0],
        "STEPS": 1,
        "PROMPTS_PER_STEP": 64,
        "GROUP_SIZE": 8,
        "MAX_COMPLETION_LENGTH": 16,
        "N_TRAIN": 8,
        "N_EVAL_PER_SIZE": 1,
        "KK_EVAL_PATH": "x/test_new.parquet",
    }  # notebook 05's parameters cell: the pre-fill is on unless PREFILL_THINK says otherwise
    (s,) = specs_from_parameters("kk", params, use_vllm=False)
    assert s.task_options["prefill_think"] is True and s.task_options["eval_path"] == "x/test_new.parquet"
    (s,) = specs_from_parameters("kk", {**params, "PREFILL_THINK": False}, use_vllm=False)
    assert s.task_options["prefill_think"] is False
    plan = yaml.safe_load((ROOT / "experiments" / "train_kk_qwen3b.yaml").read_text())
    assert plan["base"]["task_options"]["prefill_think"] is True  # Table 1's plan


def test_prefill_appears_in_the_prompt(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    record = kk_puzzles.make_record(QUIZ3, ["Zoey", "Oliver", "Ava"], [True, False, True])
    ds = kk.kk_dataset([record], prefill_think=True, tokenizer=tok)
    prompt = ds[0]["prompt"]
    assert isinstance(prompt, str) and prompt.rstrip().endswith("<think>")
    assert prompt.endswith("<|im_start|>assistant\n<think>")  # the assistant turn is open, not closed
    assert (
        prompt.count("<think>") == kk_puzzles.KK_SYSTEM_PROMPT.count("<think>") + 1
    )  # the system prompt names the tag
    plain = kk.kk_dataset([record], prefill_think=False, tokenizer=tok)[0]["prompt"]
    assert not plain.rstrip().endswith("<think>")


def test_math_sets_carry_table2_names_and_substitutes_are_stated():
    names = {name: tm.math_source(name, 10)["name"] for name in TABLE2_EVAL_SETS}
    assert names == {
        "olympiadbench": "Olympiad Bench",
        "minerva": "Minerva",
        "math500": "MATH 500",
        "amc": "AMC",
        "aime24": "AIME",
    }
    assert not any(tm.math_source(n, 1)["substitute"] for n in TABLE2_EVAL_SETS)
    generated = tm.math_source("generated", 5)
    assert generated["substitute"] is True and "substitute" in generated["note"] and generated["size"] == 5
    spec = RunSpec(task="math", model="embedded", task_options={"train": "generated", "eval_sets": ["generated"]})
    source = get_task("math").data_source(spec, [0, 0], {"generated": [0]})
    assert source["train"]["substitute"] and source["eval"]["generated"]["size"] == 1


# DeepScaleR's verl rows (deepscaler_dataset.py of the paper's code base): the problem with DSR's own instruction in
# one user message, the gold in reward_model.ground_truth (a list of accepted forms for some Minerva rows).
DSR_INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


def dsr_row(problem: str, gold, index: int, split: str = "train") -> dict:
    return {
        "data_source": "",
        "prompt": [{"role": "user", "content": f"{problem} {DSR_INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": gold},
        "extra_info": {"split": split, "index": index},
    }


def test_a_dsr_row_carrying_its_prompt_is_used_as_is(tmp_path):
    """Issue 24, item 8: no second instruction appended to a row that has its own."""
    path = tmp_path / "deepscaler.parquet"
    pd.DataFrame([dsr_row("What is $2+2$?", "4", 0), dsr_row("Compute $3\\cdot 5$.", "15", 1)]).to_parquet(path)
    ds = tm.math_dataset(tm.load_math_file(path))
    assert ds["prompt"] == [f"What is $2+2$? {DSR_INSTRUCTION}", f"Compute $3\\cdot 5$. {DSR_INSTRUCTION}"]
    assert ds["answer"] == ["4", "15"]
    plain = tm.math_dataset([{"problem": "What is $2+2$?", "answer": "4"}])["prompt"][0]
    assert plain.endswith(tm.MATH_INSTRUCTION) and plain.count("boxed") == 1  # a bare problem gets the paper's


def test_minervas_alternate_forms_in_a_ground_truth_list_are_all_accepted(tmp_path):
    """Issue 24, item 9: ``6630.65`` is right for a Minerva row whose forms are ["6630", "6630.65"]."""
    path = tmp_path / "minerva.parquet"
    rows = [dsr_row("Find the energy in joules.", ["6630", "6630.65"], 0, "test"), dsr_row("Find x.", ["2"], 1, "test")]
    pd.DataFrame(rows).to_parquet(path)
    records = tm.load_math_file(path)
    assert records[0]["answers"] == ["6630", "6630.65"] and "answers" not in records[1]
    ds = tm.math_dataset(records)
    reward = tm.make_math_reward_func()
    comps = ["\\boxed{6630.65}", "\\boxed{2}"]
    assert reward(None, comps, answer=ds["answer"], answers=ds["answers"]) == [1.0, 1.0]


@pytest.mark.parametrize(
    "name,sampled",
    [("aime24", True), ("aime", True), ("AIME_2024", True), ("amc", True), ("math500", False), ("minerva", False)],
)
def test_aime_and_amc_from_any_file_name_are_scored_avg_and_pass_at_k(monkeypatch, name, sampled):
    """Issue 24, item 9: a local ``aime.jsonl`` (stem ``aime``) is sampled k times like the hub's ``aime24``."""
    from trgrpo.tasks import math as math_task

    calls = []
    monkeypatch.setattr(math_task, "evaluate_math_sampled", lambda *a, **k: calls.append("sampled") or {"avg@16": 0.5})
    monkeypatch.setattr(math_task, "evaluate_math", lambda *a, **k: calls.append("greedy") or {"accuracy": 0.5})
    spec = RunSpec(task="math", model="embedded", task_options={"eval_sets": [f"data/{name}.jsonl"]})
    get_task("math").evaluate(None, None, {name: [{"problem": "p", "answer": "1"}]}, spec)
    assert calls == ["sampled" if sampled else "greedy"]


def test_table2_sets_are_evaluated_whole():
    """OlympiadBench has 675 rows (the largest Table 2 set): neither the plan's default nor notebook 06's cuts it."""

    from trgrpo.notebook import parameter_defaults
    from trgrpo.runs import fullscale

    defaults = parameter_defaults(Path(__file__).parents[1] / "notebooks/06_math_full_scale.ipynb")
    assert min(s.n_eval for s in fullscale.specs_from_parameters("math", defaults)) >= 675


# The hub dataset's layout (K-and-K/knights-and-knaves): README configs "train" / "test", one split per size
# ("<n>ppl"), a jsonl file each, rows in the K-and-K schema. A local folder laid out so is what load_dataset reads.
HUB_README = """---
configs:
- config_name: train
  data_files:
  - split: 3ppl
    path: train/people3_num1000.jsonl
  - split: 4ppl
    path: train/people4_num1000.jsonl
- config_name: test
  data_files:
  - split: 3ppl
    path: test/people3_num100.jsonl
  - split: 4ppl
    path: test/people4_num100.jsonl
---
"""


def kk_hub_folder(root: Path) -> Path:
    import json

    root.mkdir()
    (root / "README.md").write_text(HUB_README)
    rows = {3: (QUIZ3, ["Zoey", "Oliver", "Ava"], [True, False, True], GOLD3)}
    rows[4] = (QUIZ4, ["Zoey", "Max", "Eli", "Liam"], [False, False, True, True], GOLD4)
    for config, count in (("train", 1000), ("test", 100)):
        (root / config).mkdir()
        for n, (quiz, names, solution, gold) in rows.items():
            lines = [
                {"quiz": f"{quiz} {config} #{i}", "names": names, "solution": solution, "solution_text_format": gold}
                for i in range(3)
            ]
            (root / config / f"people{n}_num{count}.jsonl").write_text("\n".join(map(json.dumps, lines)))
    return root


def test_kk_hub_data_loads_by_config_and_size_and_states_the_source(tmp_path):
    """The full-scale default (the paper's data from the hub) read through datasets, from a folder laid out as the
    hub dataset; the record names the hub source, reasoning-gym is a stated substitute."""
    source = f"hub:{kk_hub_folder(tmp_path / 'kk')}"
    spec = RunSpec(
        task="kk",
        model="embedded",
        n_train=4,
        n_eval=3,
        task_options={"train_path": source, "eval_path": source, "n_people": [3, 4]},
    )
    train_ds, test = get_task("kk").build(spec, None)
    assert [r["n_people"] for r in test] == [3, 4, 3] and all(" test #" in r["quiz"] for r in test)
    assert len(train_ds) == 4 and " train #0" in str(train_ds[0]["prompt"])
    got = get_task("kk").data_source(spec, train_ds, test)
    assert got["train"] == {
        "source": "hub",
        "repo": str(tmp_path / "kk"),
        "config": "train",
        "split": "train",
        "size": 4,
        "substitute": False,
    }
    assert got["eval"]["config"] == "test" and got["eval"]["size"] == 3
    fallback = kk.kk_source(kk.KK_GENERATED, "train", 2)
    assert fallback["source"] == "reasoning-gym" and fallback["substitute"] and "not the paper's" in fallback["note"]


def test_kk_hub_offline_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(RuntimeError, match="reasoning-gym"):
        kk.load_kk_hub("hub:nobody-here/no-such-dataset", "train", n=2, n_people=[3])


def _full_scale_kk_config(tmp_path) -> Path:
    from trgrpo.notebook import parameter_defaults as notebook_defaults
    from trgrpo.runs.fullscale import write_specs

    defaults = notebook_defaults(ROOT / "notebooks" / "05_kk_logic_full_scale.ipynb")
    specs = specs_from_parameters("kk", {**defaults, "SEEDS": [0], "SCHEMES": ["tr"]}, use_vllm=False)
    return write_specs(specs, tmp_path / "kk.yaml")


PAPER_DATA = {"train_path": "hub:K-and-K/knights-and-knaves", "eval_path": "hub:K-and-K/knights-and-knaves"}


def test_print_config_names_each_runs_data(tmp_path, capsys):
    """`trgrpo train --print-config` (its main) on notebook 05's full-scale specs names the data."""
    import json

    from trgrpo.runs.train import main

    assert main(["--config", str(_full_scale_kk_config(tmp_path)), "--print-config", "--world-size", "8"]) == 0
    assert json.loads(capsys.readouterr().out)["data"] == PAPER_DATA


@pytest.mark.slow
def test_print_config_names_each_runs_data_as_typed(tmp_path):
    import json
    import subprocess
    import sys

    cfg = _full_scale_kk_config(tmp_path)
    cmd = [sys.executable, "-m", "trgrpo", "train", "--config", str(cfg), "--print-config", "--world-size", "8"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["data"] == PAPER_DATA


def test_kk_data_parameters_take_a_source_or_files():
    from trgrpo.config import ConfigError
    from trgrpo.notebook import check_values as check_parameters

    defaults = {"KK_TRAIN_PATH": kk.KK_PAPER_DATA}
    for ok in (kk.KK_GENERATED, "data/kk/3ppl/train.parquet", ["a.parquet", "b.parquet"]):
        check_parameters({"KK_TRAIN_PATH": ok}, defaults, "plan.yaml")
    for bad in (5, "", [], [""]):
        with pytest.raises(ConfigError, match="plan.yaml: parameter KK_TRAIN_PATH"):
            check_parameters({"KK_TRAIN_PATH": bad}, defaults, "plan.yaml")
