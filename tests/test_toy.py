"""The CPU toy (notebook 03): tokenizer, task, rewards, warm start, one run through experiment.run, the grid."""

import json
from pathlib import Path

import pytest

from trgrpo import toy
from trgrpo.reports import metrics, tables
from trgrpo.runs import toy_grid
from trgrpo.runs.spec import RunSpec
from trgrpo.tasks import addition

TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2)


@pytest.fixture(scope="module")
def tok():
    return toy.build_tokenizer()


@pytest.mark.parametrize(
    "text",
    ["1 2 + 3 4 =", "4 6", "1 2 5", addition.trace_completion(57, 68), addition.format_prompt(99, 10)],
)
def test_tokenizer_round_trip(tok, text):
    ids = tok(text)["input_ids"]
    assert tok.decode(ids) == text
    assert tok.unk_token_id not in ids


def test_tokenizer_splits_digits_and_has_specials(tok):
    assert tok("12 + 34 =")["input_ids"] == tok("1 2 + 3 4 =")["input_ids"]
    assert len(tok("1 2 + 3 4 =")["input_ids"]) == 6
    assert tok.pad_token == toy.PAD and tok.eos_token == toy.EOS and tok.pad_token_id != tok.eos_token_id
    assert len(tok) == len(toy.VOCAB)
    assert tok.decode([*tok("4 6")["input_ids"], tok.eos_token_id], skip_special_tokens=True) == "4 6"


def test_prompt_and_trace_format():
    assert addition.format_prompt(12, 34) == "1 2 + 3 4 ="
    assert addition.trace_completion(12, 34) == "2 + 4 = 6 ; 1 + 3 + 0 = 4 ; 4 6"
    assert addition.trace_completion(57, 68) == "7 + 8 = 1 5 ; 5 + 6 + 1 = 1 2 ; 1 2 5"
    for a, b in [(10, 10), (99, 99), (45, 55)]:
        assert addition.parse_answer(addition.trace_completion(a, b)) == a + b
        assert addition.parse_answer(addition.target_completion(a, b)) == a + b
    with pytest.raises(ValueError, match="task must be one of"):
        addition.target_completion(1, 2, "subtraction")


def test_splits_are_disjoint_and_fixed():
    s = addition.splits()
    sets = {k: set(v) for k, v in s.items()}
    assert len(s["test"]) == 400 and len(s["val"]) == 200 and len(s["train"]) == 90 * 90 - 600
    assert not (sets["test"] & sets["train"]) and not (sets["val"] & sets["train"]) and not (sets["test"] & sets["val"])
    assert addition.splits() == s


def test_rewards():
    prompts = ["1 2 + 3 4 ="] * 5
    comps = ["4 6", "4 7", "", "x", "2 + 4 = 6 ; 1 + 3 + 0 = 4 ; 4 6"]
    assert addition.correctness_reward(prompts, comps, answer=[46] * 5) == [1.0, 0.0, 0.0, 0.0, 1.0]
    r1 = addition.make_random_reward(3)(prompts * 40, comps * 40)
    r2 = addition.make_random_reward(3)(prompts * 40, comps * 40)
    assert r1 == r2 and set(r1) == {0.0, 1.0}
    assert 0.3 < sum(r1) / len(r1) < 0.7


def test_warm_start_errors_clearly_when_threshold_not_reached(tmp_path):
    with pytest.raises(toy.WarmStartError, match=r"did not reach greedy_accuracy >= 1.0 in 4 steps"):
        toy.warm_start(
            "addition",
            0,
            threshold=1.0,
            max_steps=4,
            check_every=2,
            cache=tmp_path,
            model_overrides=TINY,
            verbose=False,
        )
    with pytest.raises(ValueError, match="threshold"):
        toy.warm_start("addition", 0, threshold=1.5, cache=tmp_path)


def test_warm_start_reaches_threshold_and_is_cached(tmp_path):
    kw = dict(threshold=0.0, max_steps=6, check_every=3, cache=tmp_path, model_overrides=TINY, verbose=False)
    path = toy.warm_start("addition", 1, **kw)
    info = toy.warm_start_info(path)
    assert info["steps"] == 3 and info["seed"] == 1 and info["test"]["n"] == 400
    assert 0.0 <= info["test"]["greedy_accuracy"] <= 1.0 and "sampled_accuracy" in info["test"]
    mtime = (path / "warm_start.json").stat().st_mtime
    assert toy.warm_start("addition", 1, **kw) == path  # cached: same folder, not retrained
    assert (path / "warm_start.json").stat().st_mtime == mtime
    assert toy.warm_start("addition", 2, **kw) != path  # another seed, another folder


def test_tasks_are_registered():
    from trgrpo.tasks import task_names

    assert {"addition", "addition_trace"} <= set(task_names())


def test_two_step_run_writes_a_valid_record_and_the_grid_skips_it(tmp_path, monkeypatch):
    from trgrpo import files
    from trgrpo.runs import records

    warm = dict(threshold=0.0, max_steps=4, check_every=2, cache=tmp_path / "ws", model_overrides=TINY)
    spec = toy_grid.toy_spec("tr", 0, placement="ratio", steps=2, prompts_per_step=2, num_generations=4, n_eval=16)
    writes: list[Path] = []
    real = files.write_json
    monkeypatch.setattr(records, "write_json", lambda p, rec: (writes.append(Path(p)), real(p, rec))[1])
    rec = toy_grid.run_toy(spec, results_dir=tmp_path / "res", warm_kwargs=warm, eval_every=1)
    path = tmp_path / "res" / "toy" / "micro" / f"{spec['name']}.json"
    # one pipeline: the record is written once, complete (no second edit-and-rewrite); spec.json is the checkpoint's
    assert [w for w in writes if w.name != "spec.json"] == [path]
    saved = records.read_record(path)  # validated against the schema
    assert saved == json.loads(json.dumps(files.jsonable(rec))) and saved["kind"] == "run"
    assert saved["name"] == rec["name"] == "addition-micro-tr-ratio-seed0"
    assert (saved["scheme"], saved["seed"], saved["steps"], saved["spec"]["placement"]) == ("tr", 0, 2, "ratio")
    assert saved["model"].startswith("micro-qwen2") and saved["machine"]["cpu_count"] >= 1
    assert len(saved["history"]) == 2
    for h in saved["history"]:
        for key in ("reward", "grad_norm", "tr/weight_mean", "tr/zero_grad_frac_pos_adv", "tr/zero_grad_frac_neg_adv"):
            assert key in h, key
    assert 0.0 <= saved["final"]["accuracy"] <= 1.0 and "sampled_accuracy" in saved["final"]
    assert [e["step"] for e in saved["eval_history"]] == [0, 1, 2]
    assert saved["wall_time_s"] > 0 and saved["cpu_time_s"] > 0
    assert toy_grid.run_label(saved) == "tr-ratio"
    assert [r["name"] for r in toy_grid.load_runs(tmp_path / "res")] == [saved["name"]]

    summary = toy_grid.run_grid([spec], results_dir=tmp_path / "res", warm_kwargs=warm, progress=False, threads=1)
    assert (summary["n_run"], summary["n_skipped"]) == (0, 1)


def test_toy_spec_names_carry_the_run_label():
    specs = [toy_grid.toy_spec("tr", 0, placement="surrogate", tau=0.5), toy_grid.toy_spec("equal", 1, reward="random")]
    assert [s["name"] for s in specs] == [
        "addition-micro-tr-surrogate-tau0.5-seed0",
        "addition-micro-equal-randomreward-seed1",
    ]
    assert all(s["group"] == "toy/micro" and s["steps"] == toy.TOY_DEFAULTS["steps"] for s in specs)


def test_toy_spec_is_a_validated_run_spec():
    """A toy spec is a RunSpec's fields: a bad value or an unknown field stops at the spec, naming the field."""
    assert toy_grid.toy_spec("tr", 0) == RunSpec.from_dict(toy_grid.toy_spec("tr", 0)).model_dump()
    with pytest.raises(ValueError, match=r"^tau must be > 0"):
        toy_grid.toy_spec("tr", 0, tau=-1.0)
    with pytest.raises(ValueError, match=r"^stpes is not a known field; known: \['alpha', "):
        toy_grid.toy_spec("tr", 0, stpes=3)


def test_token_grad_norms_fall_with_probability(tmp_path):
    import numpy as np

    warm = dict(threshold=0.0, max_steps=4, check_every=2, cache=tmp_path, model_overrides=TINY, verbose=False)
    rec = toy_grid.token_grad_analysis("addition", 0, n_prompts=8, warm_kwargs=warm, results_dir=tmp_path / "res")
    p, g = np.asarray(rec["prob"]), np.asarray(rec["grad_norm"])
    assert p.size == g.size == rec["n_tokens"] > 8
    assert ((p > 0) & (p <= 1)).all() and (g > 0).all()
    assert set(rec["weighted_spread"]) == {"equal", "tr", "reverse"}


def _fake(scheme, seed, acc, *, placement="surrogate", tau=9.0, reward="correct", zpos=0.0, w=1.0):
    spec = {"placement": placement, "tau": tau, "task_options": {"reward": reward}}
    hist = [
        {"step": s, "reward": 0.5, "grad_norm": 2.0 * w, "tr/weight_mean": w, "tr/zero_grad_frac_pos_adv": zpos}
        | {"tr/zero_grad_frac_neg_adv": 0.0, "tr/zero_grad_frac": zpos / 2, "tr/weight_at_upper": 0.0}
        for s in (1, 2)
    ]
    final = {"greedy_accuracy": acc, "sampled_accuracy": acc / 2, "accuracy": acc}
    return {"scheme": scheme, "seed": seed, "spec": spec, "history": hist, "final": final, "steps": 2}


def test_summary_tables_from_records():
    recs = [_fake("equal", s, 0.5 + 0.125 * s) for s in range(3)]  # exact in binary: differences are exact
    recs += [_fake("tr", s, 0.625 + 0.125 * s, placement="ratio", zpos=0.9, w=1.4) for s in range(3)]
    recs += [_fake("tr", s, 0.375 + 0.125 * s, tau=2.0) for s in range(2)]
    recs += [_fake("equal", 0, 0.1, reward="random")]
    groups = metrics.group_by(recs, toy_grid.run_label)
    assert set(groups) == {"equal", "tr-ratio", "tr-surrogate-tau2", "equal-randomreward"}
    zero = {r["run"]: r for r in tables.zero_grad_table(groups, ["equal", "tr-ratio"])}
    assert zero["tr-ratio"]["pos"] == pytest.approx(0.9) and zero["equal"]["pos"] == 0.0
    grad = {r["run"]: r for r in tables.grad_table(groups, ["equal", "tr-ratio"])}
    assert grad["tr-ratio"]["grad norm / mean w"] == "2.000 ± 0.000"  # 2 w / w
    cost = tables.grid_cost(recs)
    assert cost["n_runs"] == len(recs) and cost["steps_per_run"] == [2]
