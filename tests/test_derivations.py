"""The TR-GRPO math written out in notebook 02 (cells tagged ``derivation``) and the checks that follow them.

Each derivation cell defines a function (Eq. 11, Eq. 9/10) and the code cell after it compares that function with
the library on random inputs. Here: the cells are there, their checks pass in-process, a check fails for a wrong
derivation, and the student copy turns each derivation into a stub whose check fails until it is written.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch

from course import workbooks
from trgrpo.weights import token_weights

ROOT = Path(__file__).resolve().parents[1]
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
