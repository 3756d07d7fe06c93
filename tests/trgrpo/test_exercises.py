"""The checks the notebooks call (trgrpo/exercises.py; today in trgrpo/course.py): ``course.check``, the hand-answer
checks, the GRPO primer's helpers, and the derivations of notebook 02 with their checks and student stubs."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
import torch

from course import workbooks
from trgrpo import exercises
from trgrpo.weights import token_weights


def test_taught_policy_splits_the_wrong_half_among_the_offsets():
    """Notebook 00's policy hesitates between the sum and the sum + 1; notebook 03's (offsets ±1) puts about a quarter
    on each neighbour, so its wrong answers' last digits fall strictly between Eq. 11's bounds."""
    import torch

    from trgrpo.tasks import addition

    row = addition.records([(23, 45)])[0]
    answers = ["6 8", "6 9", "6 7"]
    for offsets, expected in (((1,), [0.5, 0.5, 0.0]), ((1, -1), [0.5, 0.25, 0.25])):
        torch.manual_seed(0)
        model, tok = exercises.taught_policy(row, seed=0, offsets=offsets)
        logps, mask, _ = exercises.completion_logps(model, tok, row["prompt"], answers)
        last = logps.exp()[:, 1].tolist()  # the answer's second digit
        assert last == pytest.approx(expected, abs=0.05)


def test_a_keyed_check_accepts_a_list_in_any_order_as_the_recipes_do(capsys):
    """2.1 asks for the taus "as lists", in no order: the student copy's keys (here registered as ``make student``
    writes them) accept a list in any order, as the instructor's check always did (the keys used to reject one)."""
    taus = dict(tau_star_scale=1.099, tau_star_divide=0.9102, identity_taus_scale=[0.5])
    try:
        exercises.use_keys("2.1", json.loads(json.dumps(workbooks.keys_for("2.1", [{}]))))
        exercises.check_answers("2.1", **taus, identity_taus_divide=[20.0, 10.0, 9.0, 7.0, 2.0])
        assert "Exercise 2.1 ✓" in capsys.readouterr().out
        with pytest.raises(exercises.CheckFailed, match="`identity_taus_divide` is not right yet"):
            exercises.check_answers("2.1", **taus, identity_taus_divide=[20.0, 10.0, 9.0, 2.0])
    finally:
        exercises._KEYS.clear()


def test_check_turns_a_bare_assert_into_a_message_with_a_hint():
    src = "# expects: x\nwith exercises.check('9.1', hint='think again', x='x is a count'):\n    assert x == 3\n"
    import linecache

    linecache.cache["<check 9.1>"] = (len(src), None, src.splitlines(True), "<check 9.1>")
    code = compile(src, "<check 9.1>", "exec")
    exec(code, {"exercises": exercises, "x": 3})  # right: silent
    with pytest.raises(exercises.CheckFailed) as info:
        exec(code, {"exercises": exercises, "x": 4})
    msg = str(info.value)
    assert msg.startswith("Exercise 9.1: `x` is not right yet") and "Hint: x is a count" in msg and "think again" in msg
    assert "3" not in msg, "the message must not show the expected value"
    with pytest.raises(exercises.CheckFailed, match=r"`x` is not defined: run the cells above \(kernel restarted\?\)"):
        exec(code, {"exercises": exercises})
    with pytest.raises(exercises.CheckFailed, match="raised TypeError"):
        exec(
            compile("# expects: x\nwith exercises.check('9.2'):\n    assert len(x) == 3\n", "<c>", "exec"),
            {"exercises": exercises, "x": 4},
        )


KL = dict(kl_offset_12=0.01768, kl_offset_08=0.02314, kl_slope_12=-0.2, kl_push_12=+1)  # 2.2 by hand, 4 digits


def test_check_answers_accepts_hand_answers_within_the_stated_tolerance(capsys):
    exercises.check_answers("2.2", **KL)
    assert "Exercise 2.2 ✓" in capsys.readouterr().out
    exercises.check_answers("2.1", tau_star_scale=1.099, tau_star_divide=0.9102, identity_taus_scale=[0.5],
                         identity_taus_divide=[20.0, 10.0, 9.0, 7.0, 2.0])  # fmt: skip


@pytest.mark.parametrize("wrong", [{"kl_offset_08": 0.0232}, {"kl_offset_12": 0.0180, "kl_push_12": -1}])
def test_check_answers_names_every_wrong_item_and_only_those(wrong):
    with pytest.raises(exercises.CheckFailed) as info:
        exercises.check_answers("2.2", **{**KL, **wrong})
    msg = str(info.value)
    head = msg.splitlines()[0]
    assert head.startswith("Exercise 2.2: ") and "\nHint: " in msg
    assert [n for n in KL if f"`{n}`" in head] == [n for n in KL if n in wrong], head
    assert "0.1%" in head, "the message states the tolerance of a hand answer"
    assert "0.0176" not in msg and "0.02314" not in msg and "trgrpo/" not in msg and "File " not in msg
    assert info.value._render_traceback_() == [f"CheckFailed: {msg}"], "IPython shows the message, no frames"


def test_check_answers_refuses_a_missing_answer_and_a_non_number():
    with pytest.raises(exercises.CheckFailed, match="pass kl_push_12"):
        exercises.check_answers("2.2", **{k: v for k, v in KL.items() if k != "kl_push_12"})
    with pytest.raises(exercises.CheckFailed, match="expected a number .*`kl_slope_12` is a str"):
        exercises.check_answers("2.2", **{**KL, "kl_slope_12": "-0.2"})


def test_a_tensor_given_for_a_number_is_told_so_without_a_hint():
    """A 7-value tensor where 0.1 asks for one advantage: "expected a number", not "not right yet" and a sign hint
    (the old message)."""
    right = dict(adv_right_hard=2.4746, adv_wrong_hard=-0.35352, adv_right_easy=0.35352, adv_solved=0.0)
    exercises.check_answers("0.1", **right)
    with pytest.raises(exercises.CheckFailed) as info:
        exercises.check_answers("0.1", **{**right, "adv_wrong_hard": torch.full((7,), -0.35352)})
    msg = str(info.value)
    assert (
        msg == "Exercise 0.1: expected a number (one value) for each of these: `adv_wrong_hard` is a tensor of 7 values"
    )


def _cell(src: str, name: str, ns: dict) -> None:
    import linecache

    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    exec(compile(src, name, "exec"), ns)


def test_an_assert_without_words_fails_in_words():
    """2.4's check used to print its raw payload `(({}, 0.4, 0.3271598865740488))`: a payload that is not a text
    reads as the case it fails for."""
    src = (
        "# expects: f\nwith exercises.check('9.3'):\n    for kw in ({}, {'tau': 2.0}):\n        got = f(0.4)\n"
        "        assert got is None, (kw, 0.4, got)\n"
    )
    with pytest.raises(exercises.CheckFailed) as info:
        _cell(src, "<check 9.3>", {"exercises": exercises, "f": lambda eps: 0.3271598865740488})
    assert str(info.value) == "Exercise 9.3: not right yet: it fails for {}, 0.4, 0.32716"


def _solution_and_check(exercise: str) -> tuple[str, str]:
    nb = workbooks.read(ROOT / "notebooks" / "solutions" / "02_token_weight_function_solutions.ipynb")
    if exercise.startswith("0."):
        nb = workbooks.read(ROOT / "notebooks" / "solutions" / "00_grpo_primer_solutions.ipynb")
    cells = [c for e, c in workbooks._by_exercise(nb.cells) if e == exercise and c.cell_type == "code"]
    return cells[0].source, next(c.source for c in cells if workbooks.CHECK in workbooks.tags(c))


def test_a_wrong_sampling_in_0_3_blames_the_sampling_not_all_four_answers():
    """Samples drawn from pi_ref instead of pi_theta: the check says so, without naming the four answers (it named all
    of them: the failing line tests a difference of two, by no answer's name)."""
    solution, check = _solution_and_check("0.3")
    ns = {"exercises": exercises, "torch": torch, "N_KL": 20000, "SEED": 0, "show_table": lambda *a, **k: None}
    exec(solution.replace("torch.multinomial(p_theta,", "torch.multinomial(p_ref,"), ns)
    with pytest.raises(exercises.CheckFailed) as info:
        _cell(check, "<check 0.3>", ns)
    head = str(info.value).splitlines()[0]
    assert head == "Exercise 0.3: not right yet: k1 and k3 disagree on average: sampled from p_theta?", head


def test_a_wrong_cut_threshold_in_2_4_is_named_in_a_sentence():
    from trgrpo import readings

    _, check = _solution_and_check("2.4")
    ns = {"exercises": exercises, "readings": readings, "EPS_GRID": (0.0, 0.24), "cut_threshold": lambda e, **kw: 0.5,
          "cut_p_scale": {}, "cut_p_divide": {}}  # fmt: skip
    with pytest.raises(exercises.CheckFailed) as info:
        _cell(check, "<check 2.4>", ns)
    head = str(info.value).splitlines()[0]
    assert head.startswith("Exercise 2.4: ") and "cut_threshold(0.0, **{}) is 0.5" in head and "((" not in head, head


# From test_derivations.py: The TR-GRPO math written out in notebook 02 (cells tagged ``derivation``) and the checks
# that follow them.
#
# Each derivation cell defines a function (Eq. 11, Eq. 9/10) and the code cell after it compares that function with
# the library on random inputs. Here: the cells are there, their checks pass in-process, a check fails for a wrong
# derivation, and the student copy turns each derivation into a stub whose check fails until it is written.


ROOT = Path(__file__).resolve().parents[2]


NB02 = ROOT / "notebooks" / "02_token_weight_function.ipynb"


EXPECTED = {"eq11_weight": "token_weights", "eq9_loss": "tr_grpo_loss"}  # derivation -> the library it must equal


def _pairs() -> list[tuple[str, str]]:
    """(derivation source, check source) for every derivation cell of notebook 02, in order."""
    cells = workbooks.read(NB02).cells
    out = []
    for i, c in enumerate(cells):
        if workbooks.DERIVATION in workbooks.tags(c):
            assert c.cell_type == "code", f"cell {i}: a derivation is a code cell"
            assert i + 1 < len(cells) and cells[i + 1].cell_type == "code", f"cell {i}: no check cell follows"
            out.append((c.source, cells[i + 1].source))
    return out


def _namespace() -> dict:
    """What the checks use from notebook 02's first cells (the paper's defaults, as its parameters cell sets)."""
    W = {"alpha": 2.0, "mu": 0.25, "tau": 9.0, "lower": 1.0, "upper": 1.4, "tau_mode": "scale"}
    return {"torch": torch, "token_weights": token_weights, "W": W, "EPS_LOW": 0.2, "EPS_HIGH": 0.24}


def _run(derivation: str, check: str) -> None:
    ns = _namespace()
    exec(compile(derivation, "<derivation>", "exec"), ns)
    exec(compile(check, "<check>", "exec"), ns)


def test_notebook_02_writes_out_eq11_and_eq9_with_checks():
    pairs = _pairs()
    defined = [name for src, _ in pairs for name in EXPECTED if f"def {name}(" in src]
    assert defined == list(EXPECTED), f"derivation cells define {defined}, expected {list(EXPECTED)} in this order"
    for (src, check), (name, lib) in zip(pairs, EXPECTED.items(), strict=True):
        assert len(src.splitlines()) <= 20, f"{name}: a derivation is meant to be read in one glance (<= 20 lines)"
        assert lib in check and "assert_close" in check, f"the check after {name} must compare it with {lib}"
    assert ".backward()" in pairs[1][1] and ".grad" in pairs[1][1], "the Eq. 9 check must compare gradients"


@pytest.mark.parametrize("k", range(len(EXPECTED)))
def test_derivation_checks_pass(k, capsys):
    _run(*_pairs()[k])
    assert "==" in capsys.readouterr().out  # the check says what it compared


@pytest.mark.parametrize(
    ("k", "old", "new"),
    [
        (0, 'if tau_mode == "scale" else p / tau', 'if tau_mode == "scale" else tau * p'),  # ignores reading 1
        (0, "p = p.detach()", "p = p * 1"),  # forgets sg[.]
        (1, "torch.clamp(w * r, 1 - eps_low", "torch.clamp(r, 1 - eps_low"),  # w outside the clip in "ratio"
        (1, "kl = w * rho - torch.log(w * rho) - 1", "kl = rho - torch.log(rho) - 1"),  # Eq. 6, not Eq. 10
    ],
)
def test_a_wrong_derivation_fails_its_check(k, old, new):
    src, check = _pairs()[k]
    assert old in src, f"the derivation no longer contains {old!r}: update this test"
    with pytest.raises(AssertionError):
        _run(src.replace(old, new), check)


@pytest.mark.parametrize("k", range(len(EXPECTED)))
def test_student_stub_keeps_the_signature_and_fails_its_check(k):
    src, check = _pairs()[k]
    stub = workbooks.derivation_stub(src)
    full, short = _namespace(), _namespace()
    exec(src, full)
    exec(stub, short)
    name = list(EXPECTED)[k]
    assert inspect.signature(short[name]) == inspect.signature(full[name])
    assert stub.splitlines()[0] == src.splitlines()[0], "the stub keeps the cell's first comment (what to write)"
    with pytest.raises(NotImplementedError, match=name):
        _run(stub, check)


def test_student_notebook_stubs_derivations_only():
    nb = workbooks.read(NB02)
    st = workbooks.student_notebook(nb)
    derivations = [c.source for c in nb.cells if workbooks.DERIVATION in workbooks.tags(c)]
    stubs = [c.source for c in st.cells if workbooks.DERIVATION in workbooks.tags(c)]
    assert stubs == [workbooks.derivation_stub(s) for s in derivations] and stubs != derivations


def test_derivation_stub_needs_a_function():
    with pytest.raises(ValueError, match="define at least one"):
        workbooks.derivation_stub("# Eq. 1\nx = 1")
