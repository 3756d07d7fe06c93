"""Math task: boxed-answer reward (App. B.1.2), data, loaders, pass@k, evaluation (Section 4.1, Table 2)."""

from __future__ import annotations

import ast
import itertools
import json
import operator
import os
import re
import signal
import subprocess
import sys
import threading
import time
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest

from tests.tasks.test_kk import build_tiny_lm
from trgrpo.runs import checkpoints
from trgrpo.runs.spec import RunSpec
from trgrpo.tasks import generation, get_task, math_verify
from trgrpo.tasks import math as mt
from trgrpo.tasks import math as tm

ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


@pytest.fixture(scope="module", autouse=True)
def warm_math_verify():
    """Import sympy/math-verify once (about a second) so that timings below measure the reward itself."""
    assert mt.math_reward("\\boxed{1}", "2") == 0.0


# --------------------------------------------------------------------------------------------------
# Boxed-answer extraction
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("the answer is \\boxed{42}.", "42"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("first \\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("\\boxed{}", ""),
        ("<think>\\boxed{1}</think> so \\boxed{3}", "3"),
        ("<think>\\boxed{1}</think> no box after thinking", None),
        ("<think>a</think>\\boxed{1}</think>\\boxed{2}", "2"),
        ("no box at all", None),
        ("\\boxed{1} and an unbalanced \\boxed{2", None),
        ("\\boxed 5", None),
    ],
)
def test_extract_last_boxed(text, expected):
    assert mt.extract_boxed_answer(text) == expected


def test_extract_caps_the_answer_length():
    assert mt.extract_boxed_answer("\\boxed{" + "1" * 1000 + "}") == "1" * 1000
    assert mt.extract_boxed_answer("\\boxed{" + "1" * 1001 + "}") is None


# --------------------------------------------------------------------------------------------------
# Reward rules
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pred, gold",
    [
        ("42", "42"),
        ("\\frac{1}{2}", "0.5"),
        ("\\dfrac{1}{2}", "\\frac{1}{2}"),
        ("1/2", "\\frac12"),
        ("-93", "-93"),
        ("2\\sqrt{2}", "\\sqrt{8}"),
        ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})"),
        ("x^2+7x+10", "(x+2)(x+5)"),
        ("\\text{(C)}", "C"),
    ],
)
def test_equivalent_answer_scores_one(pred, gold):
    assert mt.math_reward(f"Some reasoning. So the answer is $\\boxed{{{pred}}}$.", gold) == 1.0


@pytest.mark.parametrize("pred, gold", [("41", "42"), ("\\frac{1}{3}", "0.5"), ("x+1", "x-1"), ("3.14", "\\pi")])
def test_wrong_answer_scores_zero(pred, gold):
    assert mt.math_reward(f"\\boxed{{{pred}}}", gold) == 0.0


def test_answer_without_box_scores_zero():
    assert mt.math_reward("The answer is 42.", "42") == 0.0


def test_last_box_decides():
    assert mt.math_reward("\\boxed{42} wait, no: \\boxed{41}", "42") == 0.0
    assert mt.math_reward("\\boxed{41} wait, no: \\boxed{42}", "42") == 1.0


def test_only_the_text_after_think_counts():
    assert mt.math_reward("<think>maybe \\boxed{42}</think> I am unsure", "42") == 0.0
    assert mt.math_reward("<think>maybe \\boxed{41}</think> \\boxed{42}", "42") == 1.0


def test_unbalanced_or_too_long_or_empty_box_scores_zero():
    assert mt.math_reward("\\boxed{42", "42") == 0.0
    assert mt.math_reward("\\boxed{" + "0" * 999 + "42}", "42") == 0.0  # 1001 chars, over the cap
    assert mt.math_reward("\\boxed{}", "42") == 0.0
    assert mt.math_reward("\\boxed{42}", "") == 0.0


@pytest.mark.parametrize("bad", [None, 42, b"\\boxed{42}", ["\\boxed{42}"]])
def test_non_string_completion_scores_zero(bad):
    assert mt.math_reward(bad, "42") == 0.0


def test_numeric_gold_from_a_table():
    assert mt.math_reward("\\boxed{142}", 142) == 1.0


@pytest.mark.parametrize(
    "blowup", ["9^{9^{9}}", "10^{100000}", "100000!", "(10^{6})!", "2^{2^{2^{2^{2}}}}", "\\binom{10^{9}}{5}"]
)
def test_numeric_blowups_are_refused_fast(blowup):
    # without any time budget: evaluating these would take minutes of uninterruptible C arithmetic (or forever);
    # refusing them costs one parse (~0.2 s at most here; the bound leaves room for a loaded machine)
    t0 = time.perf_counter()
    assert mt.math_reward(f"\\boxed{{{blowup}}}", "1", timeout_s=None) == 0.0
    assert time.perf_counter() - t0 < 2.0


def test_budget_cuts_pathological_parsing():
    t0 = time.perf_counter()
    assert mt.math_reward("\\boxed{" + "(" * 25 + "1" + ")" * 25 + "}", "1", timeout_s=0.1) in (0.0, 1.0)
    assert time.perf_counter() - t0 < 1.0


def test_deep_nesting_is_refused_and_the_parser_is_cut_anyway():
    assert mt.nesting_depth("\\frac{\\sqrt{3}}{2}") == 2 and mt.nesting_depth("}}(([x]))") == 3
    deep = "{" * 11 + "42" + "}" * 11
    t0 = time.perf_counter()
    assert mt.math_reward(f"\\boxed{{{deep}}}", "42", timeout_s=None) == 0.0
    assert time.perf_counter() - t0 < 0.5  # refused before any parsing (instant; room for a loaded machine)
    math_verify.start()
    t0 = time.perf_counter()  # antlr4 is exponential in brace depth: the worker's budget cuts it
    assert math_verify.verify([("{" * 40 + "42" + "}" * 40, ("42",))], 0.1) == [False]
    assert time.perf_counter() - t0 < 1.5


def _in_a_worker(body: str) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``body`` (it defines ``check(pred, gold)``) as a worker's check under a 0.1 s budget, in a fresh process."""
    code = (
        "from trgrpo.tasks import math_verify as mv\n"
        "mv.analyze_gold = lambda gold: None\n"
        f"{body}\n"
        "mv._equivalent = check\n"
        "mv._worker_start()\n"
        "print(mv._verify_in_worker('x', ('y',), 0.1))\n"
    )
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=ENV)
    return proc, time.perf_counter() - t0


def test_a_workers_budget_fires_again_when_an_exception_is_swallowed():
    """C code that swallows exceptions (a dict lookup calling a Python __eq__) must not absorb the only alarm."""
    body = (
        "def check(pred, gold):\n"
        "    try:\n"
        "        while True:\n"
        "            pass\n"
        "    except mv._Spent:\n"
        "        pass\n"
        "    while True:  # would spin forever if the alarm fired only once\n"
        "        pass"
    )
    proc, seconds = _in_a_worker(body)
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr[-2000:]
    assert seconds < 10.0  # an interpreter start and 0.1 s of CPU, on a loaded machine


def test_a_long_c_call_ends_its_worker():
    """A computation that never returns to Python (here: a sum over 10^11 integers in C) cannot be interrupted:
    RLIMIT_CPU ends the worker one to two CPU seconds past the budget (the pool replaces it; the answer scores 0)."""
    proc, _ = _in_a_worker("def check(pred, gold):\n    return sum(range(10**11)) == 0")
    assert proc.returncode == -signal.SIGXCPU, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout == ""


def test_a_worker_that_dies_scores_zero_and_is_replaced():
    """The pool outlives its workers: an answer whose worker was killed (here from outside, while antlr4 parses 40
    nested braces without a budget) scores 0, and the next answers are verified by a new worker."""
    import psutil

    math_verify.start()
    result: list[bool] = []
    deep = "{" * 40 + "42" + "}" * 40
    waiter = threading.Thread(target=lambda: result.extend(math_verify.verify([(deep, ("42",))], None)))
    waiter.start()
    time.sleep(1.0)
    busy = max(psutil.Process().children(), key=lambda p: p.cpu_times().user)
    busy.kill()
    waiter.join(30)
    assert result == [False]
    assert mt.math_rewards(["\\boxed{\\frac{3}{4}}", "\\boxed{7}"] * 4, ["0.75", "8"] * 4) == [1.0, 0.0] * 4


def test_the_workers_end_with_the_process():
    """Scoring starts worker processes; none is left once the process that scored has exited."""
    import psutil

    code = (
        "import psutil\n"
        "from trgrpo.tasks import math as mt\n"
        "assert mt.math_rewards(['\\\\boxed{\\\\frac{1}{2}}'] * 4, ['0.5'] * 4) == [1.0] * 4\n"
        "print(' '.join(str(p.pid) for p in psutil.Process().children(recursive=True)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=ENV)
    assert proc.returncode == 0, proc.stderr[-2000:]
    pids = [int(p) for p in proc.stdout.split()]
    assert len(pids) >= math_verify.WORKERS
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(psutil.pid_exists(p) for p in pids):
        time.sleep(0.1)
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_budget_restores_signal_state():
    import signal

    before = signal.getsignal(signal.SIGALRM)
    mt.math_reward("\\boxed{" + "(" * 25 + "2" + ")" * 25 + "}", "1", timeout_s=0.05)
    assert signal.getsignal(signal.SIGALRM) is before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_reward_works_outside_the_main_thread():
    results = []
    worker = threading.Thread(
        target=lambda: results.extend(
            [mt.math_reward("\\boxed{\\frac{3}{4}}", "0.75"), mt.math_reward("\\boxed{7}", "8")]
        )
    )
    worker.start()
    worker.join(30)
    assert results == [1.0, 0.0]


def test_model_text_never_reaches_eval(monkeypatch):
    """math-verify's plain-expression extractor runs sympy's parse_expr (eval) on text; the model's answer must
    not get there. latex2sympy only calls sympy.Number on NUMBER tokens (digits), which sympy evals as
    ``Integer (123456789 )``. The worker's own check runs here, in this process, where the spy is."""
    import builtins

    def score(pred: str, gold: str) -> float:
        return float(math_verify._verify_in_worker(pred, (gold,), None))

    score("1.5e3", "1500")  # first use of sympy's unit tables evals their definitions
    seen = []
    real_eval = builtins.eval

    def spy(source, *args, **kwargs):
        seen.append(str(source))
        return real_eval(source, *args, **kwargs)

    monkeypatch.setattr(builtins, "eval", spy)
    assert score("123456789 + 1", "123456790") == 1.0
    assert score("987654321*2", "1975308642") == 1.0
    assert score("__import__('os').getcwd()", "1") == 0.0
    assert score("(lambda: 7)()", "7") in (0.0, 1.0)
    monkeypatch.setattr(builtins, "eval", real_eval)
    ours = [s for s in seen if "123456789" in s or "987654321" in s]
    assert ours and all(re.fullmatch(r"Integer \((123456789|987654321) \)", s) for s in ours)
    assert not [s for s in seen if "+" in s or "*" in s or "import" in s or "lambda" in s]


def test_trl_math_reward_func():
    fn = mt.make_math_reward_func()
    assert fn.__name__ == "math_accuracy_reward"
    comps = ["\\boxed{6}", "\\boxed{5}", None]
    out = fn(prompts=["p"] * 3, completions=comps, completion_ids=None, answer=["6", "6", "6"], trainer_state=None)
    assert out == [1.0, 0.0, 0.0]
    msgs = [[{"role": "assistant", "content": c}] for c in comps]
    assert fn(None, msgs, answer=["6", "6", "6"]) == [1.0, 0.0, 0.0]
    with pytest.raises(KeyError, match="answer"):
        fn(None, comps)
    with pytest.raises(ValueError):
        fn(None, comps, answer=["6"])


# --------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def _exact(expr: str) -> Fraction:
    """Evaluate + - * / of integer literals exactly (an AST walk, no eval)."""

    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return Fraction(node.value)
        raise ValueError(ast.dump(node))

    return walk(ast.parse(expr, mode="eval"))


def test_generated_arithmetic_has_exact_answers():
    recs = mt.generate_math(30, seed=0)
    assert len(recs) == 30 and len({r["problem"] for r in recs}) == 30
    for r in recs:
        assert set(r) == {"problem", "answer"}
        expr = (
            r["problem"]
            .removeprefix("Calculate ")
            .removeprefix("State the final answer to the following arithmetic problem: ")
        )
        assert _exact(expr.rstrip(".= ")) == Fraction(int(r["answer"]))
        assert mt.math_reward(f"\\boxed{{{r['answer']}}}", r["answer"]) == 1.0


def test_generation_is_deterministic_and_configurable():
    assert mt.generate_math(10, seed=3) == mt.generate_math(10, seed=3)
    assert mt.generate_math(10, seed=3) != mt.generate_math(10, seed=4)
    div = mt.generate_math(20, seed=0, operators=("+", "*", "/"))
    assert any("/" in r["problem"] for r in div)  # reasoning-gym floor-divides; only exact quotients are kept
    assert all(Fraction(int(r["answer"])) == _exact(r["problem"][len("Calculate ") : -1]) for r in div)
    with pytest.raises(ValueError):
        mt.generate_math(-1)


def test_prompt_is_plain_text_asking_for_a_box():
    p = mt.math_prompt({"problem": "Calculate 2 + 3.", "answer": "5"})
    assert isinstance(p, str) and p.startswith("Calculate 2 + 3.\n") and "\\boxed{}" in p


def test_math_dataset_columns():
    ds = mt.math_dataset([{"problem": "Calculate 2 + 3.", "answer": "5"}, {"problem": "1+1", "answer": 2}])
    assert set(ds.column_names) == {"prompt", "answer"}
    assert ds["answer"] == ["5", "2"] and isinstance(ds[0]["prompt"], str)


# --------------------------------------------------------------------------------------------------
# Loaders
# --------------------------------------------------------------------------------------------------


def test_load_math_parquet_and_jsonl(tmp_path):
    pd = pytest.importorskip("pandas")
    rows = [
        {"problem": "What is 1+1?", "answer": "2"},
        {"problem": "Half of one?", "answer": "\\frac{1}{2}"},
    ]
    pq = tmp_path / "train.parquet"
    pd.DataFrame(rows).to_parquet(pq)
    assert mt.load_math_file(pq) == rows
    jl = tmp_path / "train.jsonl"
    jl.write_text("\n".join(json.dumps({"prompt": r["problem"], "answer": r["answer"]}) for r in rows))
    assert mt.load_math_file(jl) == [{**r, "prompt": r["problem"]} for r in rows]  # a row's own prompt: as is


def test_load_math_other_schemas(tmp_path):
    pd = pytest.importorskip("pandas")
    verl = {
        "prompt": [{"role": "user", "content": "What is 2+2?"}],
        "reward_model": {"style": "rule", "ground_truth": "4"},
    }
    olympiad = {"question": "Find x.", "final_answer": ["$3$"]}
    amc = {"problem": "AMC?", "answer": 142.0}
    math_solution = {"problem": "MATH?", "solution": "... so it is $\\boxed{\\frac{\\sqrt{3}}{2}}$."}
    path = tmp_path / "mixed.parquet"
    pd.DataFrame([verl]).to_parquet(path)
    assert mt.load_math_file(path) == [{"problem": "What is 2+2?", "answer": "4", "prompt": "What is 2+2?"}]
    jl = tmp_path / "mixed.jsonl"
    jl.write_text("\n".join(json.dumps(r) for r in (olympiad, amc, math_solution)))
    assert mt.load_math_file(jl) == [
        {"problem": "Find x.", "answer": "$3$"},
        {"problem": "AMC?", "answer": "142"},
        {"problem": "MATH?", "answer": "\\frac{\\sqrt{3}}{2}"},
    ]
    orz = tmp_path / "orz_math_57k_collected.json"
    pair = [{"from": "human", "value": "Q?"}, {"from": "assistant", "ground_truth": {"value": "7", "pass_at_n": 0.5}}]
    orz.write_text(json.dumps([pair]))
    assert mt.load_math_file(orz) == [{"problem": "Q?", "answer": "7"}]


def test_load_math_errors_are_clear(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"problem": "no answer"}))
    with pytest.raises(ValueError, match="row 0.*answer"):
        mt.load_math_file(bad)
    with pytest.raises(FileNotFoundError):
        mt.load_math_file(tmp_path / "none.parquet")
    pd = pytest.importorskip("pandas")
    empty_cell = tmp_path / "nan.parquet"
    pd.DataFrame([{"problem": "a", "answer": 1.0}, {"problem": "b", "answer": float("nan")}]).to_parquet(empty_cell)
    with pytest.raises(ValueError, match="row 1"):
        mt.load_math_file(empty_cell)


def test_hub_names_and_offline_error(monkeypatch):
    import datasets

    assert {"deepscaler", "orz", "math500", "minerva", "olympiadbench", "amc", "aime24"} <= set(mt.MATH_HUB)
    with pytest.raises(ValueError, match="unknown math dataset"):
        mt.load_math_hub("gsm1m")

    def offline(*args, **kwargs):
        raise ConnectionError("offline")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(RuntimeError, match="no network.*load_math_file"):
        mt.load_math_hub("aime24")

    monkeypatch.setattr(datasets, "load_dataset", lambda repo, split: [{"problem": repo, "answer": 7.0}])
    assert mt.load_math_hub("amc") == [{"problem": "AI-MO/aimo-validation-amc", "answer": "7"}]


# --------------------------------------------------------------------------------------------------
# pass@k and avg@k
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        (16, 0, 16, 0.0),
        (16, 16, 1, 1.0),
        (16, 1, 1, 1 / 16),
        (16, 1, 16, 1.0),
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2)
        (10, 3, 5, 1 - 21 / 252),  # 1 - C(7,5)/C(10,5)
        (4, 1, 2, 0.5),
    ],
)
def test_pass_at_k_hand_values(n, c, k, expected):
    assert generation.pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-15)


def test_pass_at_k_matches_brute_force():
    for n in range(1, 8):
        for c in range(n + 1):
            samples = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(range(n), k))
                brute = sum(any(samples[i] for i in s) for s in subsets) / len(subsets)
                assert generation.pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12)


def test_pass_at_k_large_n_and_bad_arguments():
    assert generation.pass_at_k(2000, 1, 1000) == pytest.approx(0.5)
    assert 0.0 < generation.pass_at_k(10_000, 3, 16) < 1.0
    for args in [(4, 5, 1), (4, 1, 5), (4, 1, 0), (0, 0, 1), (4, -1, 1)]:
        with pytest.raises(ValueError):
            generation.pass_at_k(*args)


def test_mean_avg_and_pass_at_k():
    correct = [[True] * 4 + [False] * 12, [False] * 16]
    assert generation.mean_avg_at_k(correct) == pytest.approx(0.125)
    assert generation.mean_pass_at_k(correct, 16) == pytest.approx(0.5)
    assert generation.mean_pass_at_k(correct, 1) == pytest.approx(0.125)
    with pytest.raises(ValueError):
        generation.mean_avg_at_k([])


# --------------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------------


RECORDS = [{"problem": "Calculate 2 + 3.", "answer": "5"}, {"problem": "Calculate 4 * 4.", "answer": "16"}]


def test_greedy_accuracy_with_a_fake_generate(monkeypatch):
    def fake(model, tokenizer, prompts, *, batch_size, max_new_tokens):
        assert prompts == [mt.math_prompt(r) for r in RECORDS]
        return ["\\boxed{5}", "\\boxed{15}"]

    monkeypatch.setattr(mt, "greedy_generate", fake)
    assert mt.evaluate_math(None, None, RECORDS) == {"accuracy": 0.5, "n": 2}


def test_sampled_avg_and_pass_at_k_with_a_fake_generate(monkeypatch):
    def fake(model, tokenizer, prompts, *, num_return_sequences, do_sample, **kwargs):
        assert do_sample and num_return_sequences == 16
        return [["\\boxed{5}"] * 4 + ["\\boxed{6}"] * 12, ["\\boxed{1}"] * 16]

    monkeypatch.setattr(mt, "generate_completions", fake)
    res = mt.evaluate_math_sampled(None, None, RECORDS)
    assert res["avg@16"] == pytest.approx(0.125) and res["pass@16"] == pytest.approx(0.5)
    assert res["n"] == 2 and res["k"] == 16


@pytest.fixture(scope="module")
def tiny_lm():
    return build_tiny_lm()


def test_evaluate_with_a_tiny_model(tiny_lm):
    model, tok = tiny_lm
    greedy = mt.evaluate_math(model, tok, RECORDS, batch_size=2, max_new_tokens=4)
    assert set(greedy) == {"accuracy", "n"} and 0.0 <= greedy["accuracy"] <= 1.0
    sampled = mt.evaluate_math_sampled(model, tok, RECORDS, k=2, batch_size=1, max_new_tokens=4)
    assert 0.0 <= sampled["avg@2"] <= sampled["pass@2"] <= 1.0
    assert mt.evaluate_math_sampled(model, tok, RECORDS, k=2, batch_size=1, max_new_tokens=4) == sampled  # seeded


def test_generate_rejects_bad_settings(tiny_lm):
    model, tok = tiny_lm
    with pytest.raises(ValueError):
        generation.generate_completions(model, tok, ["x"], num_return_sequences=2)
    with pytest.raises(ValueError):
        generation.generate_completions(model, tok, ["x"], batch_size=0)
    with pytest.raises(TypeError):
        generation.generate_completions(model, tok, [[]])


def test_the_verifier_logs_as_the_task():
    assert math_verify.logger is mt.logger and mt.logger.name == "trgrpo.tasks.math"


# about 60 s on the 2-core VM: slow tier
@pytest.mark.slow
def test_math_reward_in_two_accelerate_ranks(tiny_model_dir, tmp_path, monkeypatch):
    """TRL's reward function in each of two ranks (accelerate launch, CPU, gloo): each rank starts its own pool
    (make_math_reward_func verifies a first batch in it), the run finishes, and no worker outlives the ranks (a
    forked worker has its rank's command line)."""
    import psutil

    from trgrpo.runs import fullscale
    from trgrpo.runs.spec import RunSpec

    monkeypatch.setattr(checkpoints, "CHECKPOINT_DIR", tmp_path / "ckpt")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    spec = RunSpec(
        task="math",
        model=tiny_model_dir,
        scheme="tr",
        steps=2,
        prompts_per_step=2,
        num_generations=4,
        micro_batch_size=2,
        max_completion_length=8,
        n_train=8,
        n_eval=0,
        save_steps=100,
        task_options={"train": "generated", "eval_sets": []},
        group="math2",
        name="two-ranks",
    )
    before = {p.pid for p in psutil.process_iter()}
    (rec,) = fullscale.launch([spec], gpus=0, cpu_processes=2, results_dir="res", log_dir=tmp_path / "logs")
    assert rec["steps_run"] == 2 and all("reward" in h for h in rec["history"])
    time.sleep(2)
    left = [
        p
        for p in psutil.process_iter(["cmdline", "status"])
        if p.pid not in before and "trgrpo train" in " ".join(p.info["cmdline"] or []) and p.info["status"] != "zombie"
    ]
    assert not left, left


TABLE2_EVAL_SETS = ("olympiadbench", "minerva", "math500", "amc", "aime24")


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

    defaults = parameter_defaults(Path(__file__).parents[2] / "notebooks/06_math_full_scale.ipynb")
    assert min(s.n_eval for s in fullscale.specs_from_parameters("math", defaults)) >= 675
