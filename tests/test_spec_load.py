"""Bad training configs are refused at load (issue "hardening"): `trgrpo train --config FILE` exits 2 with
one line naming the file and the field, and writes nothing. Most classes go through `trgrpo.runs.train.main` in this
process (the same loader); two run as typed, as subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trgrpo import config
from trgrpo.runs import checkpoints, spec
from trgrpo.runs.train import main

ROOT = Path(__file__).resolve().parents[1]
KK = "task: kk\nmodel: embedded\nsteps: 1\n"


def _bomb(levels: int = 9) -> str:
    """A "billion laughs" inside task_options: 10**levels values once every alias is expanded."""
    lines = ["task: kk", "task_options:", "  l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def _data(tmp: Path) -> dict[str, str]:
    """K&K data files that fail: each config trains on one."""
    files = {
        "empty_quiz": '{"quiz": "", "names": ["A"], "solution": [true]}\n',
        "nulls": '{"quiz": null, "names": null, "solution": null}\n',
        "zero_people": '{"quiz": "q", "names": [], "solution": []}\n',
        "duplicate_names": '{"quiz": "q", "names": ["A", "A"], "solution": [true, false]}\n',
        "bad_json": '{"quiz": \n',
        "empty_file": "",
    }
    for name, text in files.items():
        (tmp / f"{name}.jsonl").write_text(text)
    (tmp / "not_utf8.jsonl").write_bytes(b'\xff\xfe{"quiz"\n')
    names = [*files, "not_utf8", "missing"]
    return {f"data_{n}": f"{KK}task_options: {{train_path: {tmp / f'{n}.jsonl'}}}\n" for n in names}


BAD = {  # config -> (the text, what the one line must name)
    "duplicate_key": (KK + "steps: 2\n", "duplicate key 'steps'"),
    "yaml_bomb": (_bomb(), "aliases expand to more than"),
    "name_newline": (KK + 'name: "run\\none"\n', "name must be printable"),
    "name_300": (KK + f"name: {'n' * 300}\n", "name must be printable, at most 100"),
    "seed_2_32": (KK + "seed: 4294967296\n", "seed must be an integer in [0, 2**32)"),
    "vllm_negative": (KK + "vllm_gpu_memory_utilization: -0.3\n", "vllm_gpu_memory_utilization must be in (0, 1]"),
    "vllm_2": (KK + "vllm_gpu_memory_utilization: 2.0\n", "vllm_gpu_memory_utilization must be in (0, 1]"),
    "vllm_nan": (KK + "vllm_gpu_memory_utilization: .nan\n", "vllm_gpu_memory_utilization must be a finite"),
    "report_to": (KK + "report_to: nope\n", "report_to must be 'none', 'tensorboard' or 'trackio'"),
    "eval_batch_size_0": (KK + "task_options: {eval_batch_size: 0}\n", "task_options.eval_batch_size must be"),
    "misspelt_option": (KK + "task_options: {train_paht: x.jsonl}\n", "task_options.train_paht is not a known"),
    "n_people_0": (KK + "task_options: {n_people: [0]}\n", "task_options.n_people must be"),
    "n_people_99": (KK + "task_options: {n_people: [99]}\n", "task_options.n_people must be"),
    "n_people_x": (KK + "task_options: {n_people: x}\n", "task_options.n_people must be"),
    "n_people_empty": (KK + "task_options: {n_people: []}\n", "task_options.n_people must be"),
    "train_path_5": (KK + "task_options: {train_path: 5}\n", "task_options.train_path must be"),
    "prefill_no": (KK + "task_options: {prefill_think: 'no'}\n", "task_options.prefill_think must be a valid boolean"),
    "bool_for_count": (KK.replace("steps: 1", "steps: true"), "steps must be a valid integer"),
    "model_missing": (KK.replace("embedded", "/nonexistent"), "the folder /nonexistent does not exist"),
    "steps_1e9": (KK.replace("steps: 1", "steps: 1000000000"), "h on 1 x H100 (trgrpo plan), far beyond"),
    "length_1e9": (KK + "max_completion_length: 1000000000\n", "far beyond any plan (> 720 h)"),
    "n_train_1e9": (KK + "n_train: 1000000000\n", "n_train must be an integer in [1, 10,000,000]"),
}


def _check_refused(path: Path, rc: int, err: str, expected: str, tmp: Path) -> None:
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, (rc, err)
    assert f"{path}: " in lines[0] and expected in lines[0], lines[0]
    assert not (tmp / "results").exists() and not (tmp / "checkpoints").exists()


DATA = ("empty_quiz", "nulls", "zero_people", "duplicate_names", "empty_file", "not_utf8", "missing")


def _other_data(tmp: Path) -> dict[str, tuple[str, str]]:
    """Math and search (Search-R1) data files that fail: config -> (text, the field the line names)."""
    (tmp / "no_answer.jsonl").write_text('{"problem": "1+1"}\n')
    (tmp / "empty.parquet").write_bytes(b"PAR1")
    search = "task: search\nsteps: 1\ntask_options: {corpus: searchr1, retriever: server, "
    return {
        "math_train": ("task: math\nsteps: 1\ntask_options: {train: %s}\n" % (tmp / "no_answer.jsonl"), "train"),
        "math_eval": ("task: math\nsteps: 1\ntask_options: {eval_sets: [%s]}\n" % (tmp / "missing.jsonl"), "eval_sets"),
        "search_train": (search + f"train_file: {tmp / 'empty.parquet'}}}\n", "train_file"),
        "search_dir_only": (search + f"data_dir: {tmp / 'nowhere'}}}\n", "data_dir"),
    }


@pytest.mark.parametrize("case", ["math_train", "math_eval", "search_train", "search_dir_only"])
def test_bad_math_or_search_data_is_refused_at_load(case, tmp_path, monkeypatch, capsys):
    text, key = _other_data(tmp_path)[case]
    path = tmp_path / f"{case}.yaml"
    path.write_text(text)
    monkeypatch.setattr(checkpoints, "CHECKPOINT_DIR", tmp_path / "checkpoints")
    rc = main(["--config", str(path), "--results", str(tmp_path / "results")])
    err = capsys.readouterr().err
    _check_refused(path, rc, err, f"task_options.{key}: ", tmp_path)
    assert err.count(str(tmp_path)) >= 2  # the config and the data file


@pytest.mark.parametrize("case", [*BAD, *(f"data_{n}" for n in DATA)])
def test_bad_config_is_refused_at_load_in_one_line(case, tmp_path, monkeypatch, capsys):
    text, expected = BAD.get(case) or (_data(tmp_path)[case], "task_options.train_path: ")
    path = tmp_path / f"{case}.yaml"
    path.write_text(text)
    monkeypatch.setattr(checkpoints, "CHECKPOINT_DIR", tmp_path / "checkpoints")
    rc = main(["--config", str(path), "--results", str(tmp_path / "results")])
    err = capsys.readouterr().err
    _check_refused(path, rc, err, expected, tmp_path)
    assert case in BAD or f"{tmp_path}/{case[5:]}.jsonl" in err  # the data file too


@pytest.mark.parametrize("case, expected", [("data_bad_json", "bad_json.jsonl:1: not valid JSON")])
def test_bad_data_file_is_refused_at_load_as_typed(case, expected, tmp_path):
    """As the user types it: the data file is read when the spec is loaded, not after training started."""
    path = tmp_path / f"{case}.yaml"
    path.write_text(_data(tmp_path)[case])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRGRPO_RESULTS": str(tmp_path / "results")}
    env["TRGRPO_CHECKPOINTS"] = str(tmp_path / "checkpoints")
    r = subprocess.run(
        [sys.executable, "-m", "trgrpo", "train", "--config", str(path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    _check_refused(path, r.returncode, r.stderr, expected, tmp_path)


def test_a_key_twice_in_a_set_override_or_an_alias_inside_bounds_is_read():
    assert spec.parse_overrides(["task_options={a: &x [1, 2], b: *x}"]) == {"task_options": {"a": [1, 2], "b": [1, 2]}}
    with pytest.raises(config.ConfigError, match="--set steps"):
        spec.parse_overrides(["steps={a: 1, a: 2}"])


def test_a_long_run_trains_with_allow_long(tmp_path, capsys):
    path = tmp_path / "long.yaml"
    path.write_text(KK.replace("steps: 1", "steps: 1000000000"))
    assert main(["--config", str(path), "--allow-long", "--print-config"]) == 0
    assert '"steps": 1000000000' in capsys.readouterr().out


BOUNDED = {  # the RunSpec fields with a value rule beyond their type: pydantic bounds, each with its words
    *("seed", "steps", "prompts_per_step", "num_generations", "max_completion_length", "max_eval_tokens"),
    *("temperature", "learning_rate", "beta", "epsilon", "epsilon_high", "gradient_accumulation_steps"),
    *("micro_batch_size", "n_train", "n_eval", "save_steps", "vllm_gpu_memory_utilization", "ddp_timeout_s"),
}


def test_every_bound_of_a_spec_refuses_the_value_past_it_in_its_words():
    """The value rules are pydantic bounds (``Field(ge=1, description="an integer >= 1")``): each refuses the value
    just past it in one line saying its description. A bound pydantic does not see (a ``Field`` put where an
    ``Annotated`` type does not read it) would let its field go unchecked: the set of bounded fields is pinned."""
    import annotated_types as at

    past = {at.Ge: lambda b: b.ge - 1, at.Gt: lambda b: b.gt, at.Le: lambda b: b.le + 1, at.Lt: lambda b: b.lt}
    seen = set()
    for name, field in spec.RunSpec.model_fields.items():
        for bound in (m for m in field.metadata if type(m) in past):
            seen.add(name)
            value = past[type(bound)](bound)
            with pytest.raises(ValueError) as err:
                spec.RunSpec(**{name: value})
            assert str(err.value) == f"{name} must be {field.description}, got {value!r}"
    assert seen == BOUNDED
