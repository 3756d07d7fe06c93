"""Bad training configs are refused at load (issue "hardening"): `python -m trgrpo.train --config FILE` exits 2 with
one line naming the file and the field, and writes nothing. Most classes go through `trgrpo.train.main` in this
process (the same loader); two run as typed, as subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trgrpo.runs import checkpoints, spec
from trgrpo.runs.spec import RunSpec, batch_layout
from trgrpo.runs.train import main

ROOT = Path(__file__).resolve().parents[2]
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


# From test_trust_options.py: Bad options are refused at construction, naming the field the user set (issue "trust",
# finding 7).


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(tau="ten"), "tau"),  # "Unknown format code 'g'" before
        (dict(learning_rate="1e-6x"), "learning_rate"),
        (dict(learning_rate=float("nan")), "learning_rate"),
        (dict(learning_rate=0.0), "learning_rate"),
        (dict(temperature=-1.0), "temperature"),
        (dict(alpha=True), "alpha"),
        (dict(upper=1e308), "upper"),
        (dict(epsilon=-0.2), "epsilon"),
        (dict(epsilon_high="0.28 "), "epsilon_high"),
        (dict(steps=True), "steps"),
        (dict(seed=-1), "seed"),
        (dict(seed=1.5), "seed"),
        (dict(max_eval_tokens=0), "max_eval_tokens"),
        (dict(bf16="yes"), "bf16"),
        (dict(model=""), "model"),
        (dict(task_options=[1]), "task_options"),
    ],
)
def test_runspec_refuses_bad_values_naming_the_field(kw, field):
    with pytest.raises(ValueError, match=rf"^{field} must"):
        RunSpec(**kw)


def test_yaml_scientific_notation_is_read_as_numbers():
    yaml = pytest.importorskip("yaml")
    data = yaml.safe_load("tau: 1e1\nlearning_rate: 1e-6\nbeta: 1.0e-3\nsteps: 2e1\nseed: 3\n")
    assert data["tau"] == "1e1" and data["learning_rate"] == "1e-6"  # PyYAML (YAML 1.1) leaves these as strings
    spec = RunSpec.from_dict(data)
    assert spec.tau == 10.0 and spec.learning_rate == 1e-6 and spec.beta == 1e-3 and spec.steps == 20
    assert isinstance(spec.steps, int) and spec.name.endswith("tau10-scale-L1-U1.4-seed3")
    assert RunSpec(tau="1e1") == RunSpec(tau=10.0)  # number text is a number in Python too (it was refused)
    with pytest.raises(ValueError, match="^steps must"):
        RunSpec.from_dict({"steps": "2.5e0"})
    with pytest.raises(ValueError, match="^tau must"):
        RunSpec.from_dict({"tau": "ten"})


@pytest.mark.parametrize(
    "kw,field",
    [
        (dict(group="/tmp/elsewhere"), "group"),
        (dict(group="../up"), "group"),
        (dict(group="kk/../../up"), "group"),
        (dict(group="kk//main"), "group"),
        (dict(group="kk/"), "group"),
        (dict(group="~/x"), "group"),
        (dict(group="a\\..\\..\\b"), "group"),
        (dict(name="a/b"), "name"),
        (dict(name=".."), "name"),
        (dict(name="/abs"), "name"),
        (dict(name="x\x00y"), "name"),
    ],
)
def test_group_and_name_stay_under_the_results_root(kw, field):
    with pytest.raises(ValueError, match=f"^{field} must be"):
        RunSpec(**kw)


def test_good_groups_and_names_are_kept():
    s = RunSpec(group="kk/Qwen2.5-3B/main", name="kk-tr-seed0_v1.5")
    assert (s.group, s.name) == ("kk/Qwen2.5-3B/main", "kk-tr-seed0_v1.5")


@pytest.mark.parametrize(
    "kw,field",
    [
        (dict(steps=0), "steps"),
        (dict(num_generations=1), "num_generations"),
        (dict(task="chess"), "task"),
        (dict(tau=-1.0), "tau"),
        (dict(placement="x"), "placement"),
    ],
)
def test_bad_spec_names_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        RunSpec(**kw)


def test_unknown_field_in_dict():
    with pytest.raises(ValueError, match="^colour is not a known field; known: "):
        RunSpec.from_dict({"task": "kk", "colour": "blue"})


def kk(**kw):
    base = dict(task="kk", prompts_per_step=64, num_generations=8, micro_batch_size=4)
    return RunSpec(**{**base, **kw})


@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_global_batch_is_table6_at_any_world_size(world):
    lay = batch_layout(kk(), world)
    assert lay["global_prompts_per_step"] == 64
    assert lay["global_completions_per_step"] == 512
    assert lay["per_device_train_batch_size"] * lay["gradient_accumulation_steps"] * world == 512
    assert lay["per_device_train_batch_size"] == 4  # the micro-batch does not grow with the GPU count
    assert lay["steps_per_generation"] == lay["gradient_accumulation_steps"]  # one on-policy update per rollout


def test_accumulation_form_and_bad_splits_name_the_setting():
    lay = batch_layout(RunSpec(task="kk", prompts_per_step=8, num_generations=8, gradient_accumulation_steps=4), 2)
    assert (lay["per_device_train_batch_size"], lay["global_completions_per_step"]) == (8, 64)
    with pytest.raises(ValueError, match="micro_batch_size"):
        batch_layout(kk(micro_batch_size=3), 1)
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        batch_layout(RunSpec(task="kk", prompts_per_step=1, num_generations=6, gradient_accumulation_steps=4), 1)
    with pytest.raises(ValueError, match="world_size"):
        batch_layout(kk(), 0)
    with pytest.raises(ValueError, match="micro_batch_size"):
        RunSpec(task="kk", micro_batch_size=0)


def test_vllms_share_has_one_default():
    """Issue 45 defect 6: RunSpec's 0.3 beside the plans' 0.5; the notebooks' and spec files' default is RunSpec's."""
    import json

    from trgrpo.runs import fullscale

    default = RunSpec.model_fields["vllm_gpu_memory_utilization"].default
    assert default == fullscale.PARAMETER_DEFAULTS["VLLM_GPU_MEMORY"] == 0.5
    root = Path(__file__).resolve().parents[2]
    for nb in ("05_kk_logic_full_scale", "06_math_full_scale"):  # their typed parameter states the same share
        cells = json.loads((root / "notebooks" / f"{nb}.ipynb").read_text())["cells"]
        assert any(line.startswith(f"VLLM_GPU_MEMORY = {default} ") for c in cells for line in c["source"]), nb


def test_smoke_mode_names_the_parameters_it_replaces(capsys):
    """Issue 48, item 4: -p KK_TRAIN_PATH data/x.parquet in smoke mode was silently replaced (notebook 05 trains on
    reasoning-gym's puzzles there); the end of a smoke branch names each parameter passed that smoke mode replaced,
    in one line, and says nothing of those it kept, of None (the default) or when nothing was passed."""
    injected = "# Parameters\nKK_TRAIN_PATH = 'data/x.parquet'\nSTEPS = 5\nRESULTS = '/r'\nSMOKE = True\nGPUS = None\n"
    after = {"KK_TRAIN_PATH": "reasoning-gym", "STEPS": 1, "RESULTS": "/r", "SMOKE": True, "GPUS": 0}
    spec.smoke_replaced({"In": ["", "import os", injected, "nb = setup(...)"], **after})
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("smoke mode replaces the parameters you passed: KK_TRAIN_PATH='data/x.parquet', STEPS=5 (")
    spec.smoke_replaced({"In": ["", "import os"], **after})  # run by hand, not by papermill: nothing passed
    spec.smoke_replaced({"In": ["", "# Parameters\nSTEPS = 1\nX = float('nan')\n"], **after})
    assert capsys.readouterr().out == ""


TEACHING = ("00_", "01_", "02_")  # they may not import trgrpo.runs (tests/integration/test_layout.py)


def test_every_smoke_branch_says_what_it_replaces():
    """Each notebook's ``if SMOKE:`` branch that assigns one of its parameters ends with ``smoke_replaced(globals())``
    (but notebooks 00-02's, whose imports stay within the method)."""
    import ast
    import json

    from trgrpo.notebook import parameter_defaults

    checked = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        params = set(parameter_defaults(path)) - {"SMOKE"}
        for cell in json.loads(path.read_text())["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] != "code" or "parameters" in cell["metadata"].get("tags", []):
                continue
            for node in ast.walk(ast.parse(source)):
                if not (isinstance(node, ast.If) and ast.unparse(node.test) == "SMOKE"):
                    continue
                assigned = {
                    t.id
                    for s in node.body
                    if isinstance(s, ast.Assign)
                    for target in s.targets
                    for t in ast.walk(target)
                    if isinstance(t, ast.Name) and t.id in params
                }
                if assigned and not path.name.startswith(TEACHING):
                    assert ast.unparse(node.body[-1]) == "smoke_replaced(globals())", (path.name, sorted(assigned))
                    checked.append(path.name[:2])
    assert checked == ["03", "04", "05", "06", "07"]
