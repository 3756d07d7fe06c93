"""The addition task for SmolLM2 (notebook 03, Part B): data, prompt, the two rewards, the run registration."""

import pytest

from trgrpo.tasks import arith


def test_problems_distinct_in_range_and_seeded():
    ps = arith.make_problems(200, seed=3, low=10, high=49)
    pairs = [tuple(p["terms"]) for p in ps]
    assert len(set(pairs)) == 200
    assert all(10 <= a <= 49 and 10 <= b <= 49 and p["answer"] == a + b for (a, b), p in zip(pairs, ps))
    assert ps == arith.make_problems(200, seed=3, low=10, high=49)
    assert ps != arith.make_problems(200, seed=4, low=10, high=49)


@pytest.mark.parametrize("kind,answer", [("add3", lambda t: t[0] + t[1] + t[2]), ("mul", lambda t: t[0] * t[1])])
def test_other_kinds(kind, answer):
    ps = arith.make_problems(300, seed=1, low=10, high=99, kind=kind)
    assert len({tuple(p["terms"]) for p in ps}) == 300 and all(p["answer"] == answer(p["terms"]) for p in ps)
    if kind == "mul":
        assert all(10 <= p["terms"][0] <= 99 and 2 <= p["terms"][1] <= 9 for p in ps)
        assert arith.arith_prompt(ps[0])[2]["content"] == f"{ps[0]['terms'][0]} * {ps[0]['terms'][1]} ="
    else:
        assert len(ps[0]["terms"]) == 3 and arith.question(ps[0]).count(" + ") == 2
    with pytest.raises(ValueError, match="kind"):
        arith.make_problems(3, kind="div")


def test_answer_only_reward():
    (answer,) = arith.make_arith_reward_funcs("answer")
    assert answer(completions=[" 68", "68 apples", "7"], answer=[68, 68, 68]) == [1.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="reward"):
        arith.make_arith_reward_funcs("format")


@pytest.mark.parametrize("kw", [dict(n=-1), dict(n=5, low=9, high=3), dict(n=17, low=1, high=4)])
def test_problem_errors_name_the_field(kw):
    n = kw.pop("n")
    with pytest.raises(ValueError, match="n =|n must|low"):
        arith.make_problems(n, **kw)


def test_prompt_prefills_the_assistant_turn():
    msgs = arith.arith_prompt({"terms": [23, 45], "op": "+", "answer": 68})
    assert [m["role"] for m in msgs] == ["system", "user", "assistant"]
    assert msgs[1]["content"] == "23 + 45" and msgs[2]["content"] == "23 + 45 ="


@pytest.mark.parametrize(
    "completion,fmt,ans",
    [
        (" 68", 1.0, 1.0),
        (" 68.", 1.0, 1.0),
        (" 68\n", 1.0, 1.0),
        (" 67", 1.0, 0.0),
        (" 68 is the answer", 0.0, 1.0),
        (" 68\n\nHere is why", 0.0, 1.0),
        (" sixty-eight", 0.0, 0.0),
        ("", 0.0, 0.0),
        (" 6 8", 0.0, 0.0),
        ([{"role": "assistant", "content": " 68"}], 1.0, 1.0),
    ],
)
def test_rewards_by_hand(completion, fmt, ans):
    assert arith.format_reward(completion) == fmt
    assert arith.answer_reward(completion, 68) == ans


@pytest.mark.parametrize("bad", [None, 3, b"68", ["x"], {"a": 1}, "9" * 10_000, " 68" + " " * 1_000_000])
def test_rewards_never_raise(bad):
    assert arith.format_reward(bad) in (0.0, 1.0)
    assert arith.answer_reward(bad, 68) in (0.0, 1.0)
    assert arith.answer_reward(" 68", "not a number") == 0.0


def test_reward_funcs_are_logged_apart_and_need_the_answer_column():
    fmt, ans = arith.make_arith_reward_funcs()
    assert fmt.__name__ == "arith_format_reward" and ans.__name__ == "arith_answer_reward"
    comps = [" 68", " 68 because", " 12"]
    assert fmt(completions=comps, answer=[68, 68, 68]) == [1.0, 0.0, 1.0]
    assert ans(completions=comps, answer=[68, 68, 68]) == [1.0, 1.0, 0.0]
    with pytest.raises(KeyError, match="answer"):
        ans(completions=comps)
    with pytest.raises(ValueError, match="length"):
        ans(completions=comps, answer=[68])


def test_task_is_registered_with_temperature_one():
    from trgrpo.runs.spec import RunSpec
    from trgrpo.tasks import task_names

    assert "arith" in task_names()
    spec = RunSpec(task="arith", steps=1, max_completion_length=8)
    assert spec.sampling_temperature == 1.0


def test_dataset_renders_the_chat_and_continues_the_assistant_turn():
    from trgrpo.models import embedded_tokenizer

    try:
        tok = embedded_tokenizer()
    except Exception as e:  # the embedded model is converted on first use; absent on a bare machine
        pytest.skip(f"embedded tokenizer unavailable: {e}")
    ds = arith.arith_dataset(arith.make_problems(3, seed=0), tok)
    assert ds.column_names == ["prompt", "answer"]
    text = ds[0]["prompt"]
    p = arith.make_problems(3, seed=0)[0]
    assert text.rstrip().endswith(f"{p['terms'][0]} + {p['terms'][1]} =") and "You are a calculator." in text
    assert ds[0]["answer"] == p["answer"]


@pytest.mark.parametrize("text,needle", [(None, "no such plan file"), ("", "empty"), ("a: 1\na: 2\n", "duplicate key")])
def test_trgrpo_lm_refuses_a_bad_plan_file_in_one_line(tmp_path, capsys, text, needle):
    """The plans go through the hardened loader (trgrpo.runs.spec.read_config): one line, exit 2, nothing run."""
    from trgrpo.runs import lm_science

    plan = tmp_path / "plan.yaml"
    if text is not None:
        plan.write_text(text)
    assert lm_science.main(["grid", str(plan), "--results", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(plan) in err[0] and needle in err[0], err
    assert not (tmp_path / "results").exists()


def test_registered_evaluation_scores_its_greedy_completions(tiny_model_dir):
    """The run task's evaluation (what `trgrpo train` and the grid call): greedy completions of the
    pre-filled prompts, scored by the two rewards, means over the items."""
    from trgrpo.models import load_model_and_tokenizer
    from trgrpo.runs.spec import RunSpec
    from trgrpo.tasks import get_task

    model, tok = load_model_and_tokenizer(tiny_model_dir)
    problems = arith.make_problems(4, seed=0)
    spec = RunSpec(task="arith", steps=1, max_completion_length=8, task_options={"eval_batch_size": 3})
    res = get_task("arith").evaluate(model, tok, problems, spec)
    comps = res["examples"]
    assert res["n"] == len(comps) == 4 and all(isinstance(c, str) for c in comps)
    acc = sum(arith.answer_reward(c, p["answer"]) for c, p in zip(comps, problems)) / 4
    fmt = sum(arith.format_reward(c) for c in comps) / 4
    assert (res["accuracy"], res["format_rate"], res["reward"]) == (acc, fmt, acc + fmt)
    assert get_task("arith").evaluate(model, tok, [], spec)["accuracy"] is None


def test_answer_probability_is_exp_of_the_answer_tokens_log_probability_by_hand(tiny_model_dir):
    """Issue 46 B's primary metric: with task option answer_prob the evaluation reports p_correct, the mean over
    problems of P(" <answer>" | prompt) teacher-forced, and logp_correct, the mean log P (the first-order objective J);
    here each problem's probability is the product of the answer tokens' softmax probabilities, one unpadded forward
    pass per problem (batches of 3 over 5 problems: right padding must not change them)."""
    import math

    import torch

    from trgrpo.models import load_model_and_tokenizer
    from trgrpo.runs.spec import RunSpec
    from trgrpo.tasks import get_task
    from trgrpo.tasks.generation import render_prompt

    model, tok = load_model_and_tokenizer(tiny_model_dir)
    tok.pad_token = tok.pad_token or tok.eos_token
    problems = arith.make_problems(5, seed=1, low=10, high=99)
    by_hand = []
    for p in problems:
        prompt = tok(render_prompt(tok, arith.arith_prompt(p))[0], add_special_tokens=False)["input_ids"]
        answer = tok(f" {p['answer']}")["input_ids"]
        with torch.no_grad():
            probs = torch.softmax(model(input_ids=torch.tensor([prompt + answer])).logits[0].double(), -1)
        by_hand.append(math.prod(float(probs[len(prompt) - 1 + i, t]) for i, t in enumerate(answer)))
    opts = {"eval_batch_size": 3, "range": [10, 99]}
    spec = RunSpec(task="arith", steps=1, max_completion_length=1, task_options={**opts, "answer_prob": True})
    res = get_task("arith").evaluate(model, tok, problems, spec)
    assert res["p_correct"] == pytest.approx(sum(by_hand) / 5, rel=1e-4)
    assert res["logp_correct"] == pytest.approx(sum(map(math.log, by_hand)) / 5, rel=1e-4)
    assert arith.ArithOptions(**opts).answer_prob is False  # off by default: other runs' evaluations unchanged
