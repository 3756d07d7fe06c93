"""The toy addition task (trgrpo/tasks/addition.py): prompts, traces, splits, rewards."""

import pytest

from trgrpo.tasks import addition


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
