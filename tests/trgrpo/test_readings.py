"""The readings of Eq. 11 (trgrpo/readings.py): the tau, L/U, zero-gradient and KL-offset tables."""

import math

import pytest

from trgrpo import readings
from trgrpo.weights import WeightParams


def _sig(x):
    return 1 / (1 + math.exp(-x))


def test_tau_table_matches_hand_values():
    rows = readings.tau_table()
    assert [r["tau"] for r in rows] == [0.5, 2.0, 7.0, 9.0, 10.0, 20.0]
    got = {r["tau"]: (r["scale_w_min"], r["scale_w_max"], r["divide_w_min"], r["divide_w_max"]) for r in rows}
    w2 = 2 * (_sig(2.0) - 0.25)  # sigmoid(tau * 1) at tau = 2, or sigmoid(1 / tau) at tau = 0.5
    expected = {
        0.5: (1.0, 1.0, 1.0, w2),
        2.0: (1.0, w2, 1.0, 1.0),
        7.0: (1.0, 1.4, 1.0, 1.0),
        9.0: (1.0, 1.4, 1.0, 1.0),
        10.0: (1.0, 1.4, 1.0, 1.0),
        20.0: (1.0, 1.4, 1.0, 1.0),
    }
    for tau, exp in expected.items():
        assert got[tau] == pytest.approx(exp, abs=1e-12), tau
    assert w2 == pytest.approx(1.2616, abs=1e-4)
    by = {r["tau"]: r for r in rows}
    # w leaves L = 1 where 2 (sigmoid(tau p) - 0.25) = 1, i.e. p = ln 3 / tau; reaches U = 1.4 at p = ln 19 / tau
    assert by[9.0]["scale_p_above_L"] == pytest.approx(math.log(3) / 9, abs=2e-5)
    assert by[9.0]["scale_p_at_U"] == pytest.approx(math.log(19) / 9, abs=2e-5)
    assert by[0.5]["scale_p_above_L"] is None and by[2.0]["scale_p_at_U"] is None
    assert by[0.5]["divide_p_above_L"] == pytest.approx(0.5 * math.log(3), abs=2e-5)
    assert [r["paper_avg"] for r in rows] == [0.39, 0.40, 0.46, 0.63, 0.62, 0.55]
    assert readings.tau_table([3.0])[0]["paper_avg"] is None


def test_lu_table():
    rows = readings.lu_table()
    assert [(r["lower"], r["upper"]) for r in rows] == [(1.0, 1.2), (1.0, 1.4), (0.8, 1.5), (0.5, 1.5)]
    wmax = 2 * (_sig(9.0) - 0.25)  # 1.4998: U = 1.5 is never reached
    got = [x for r in rows for x in (r["scale_w_min"], r["scale_w_max"])]
    assert got == pytest.approx([1.0, 1.2, 1.0, 1.4, 0.8, wmax, 0.5, wmax], abs=1e-12)
    div_max = 2 * (_sig(1 / 9) - 0.25)  # 0.5555
    got = [x for r in rows for x in (r["divide_w_min"], r["divide_w_max"])]
    assert got == pytest.approx([1.0, 1.0, 1.0, 1.0, 0.8, 0.8, 0.5, div_max], abs=1e-12)
    assert [r["paper_avg"] for r in rows] == [0.62, 0.63, 0.62, 0.60]


def test_zero_gradient_readings():
    rows = {r["p"]: r for r in readings.zero_gradient_table((0.05, 0.2, 0.3, 0.9))}
    for p in (0.3, 0.9):  # w > 1 + eps_h = 1.24: A > 0 tokens lose their policy gradient under "ratio"
        assert rows[p]["ratio_pos"] and not rows[p]["ratio_neg"]
    for p in (0.05, 0.2):
        assert not rows[p]["ratio_pos"] and not rows[p]["ratio_neg"]
    assert not any(r["surrogate_pos"] or r["surrogate_neg"] for r in rows.values())  # r = 1 is inside the clip
    th = readings.zero_gradient_thresholds()
    # w(p) > 1.24  <=>  sigmoid(9 p) > 1.24 / 2 + 0.25 = 0.87  <=>  p > ln(0.87 / 0.13) / 9
    assert th["ratio"]["pos_from_p"] == pytest.approx(math.log(0.87 / 0.13) / 9, abs=2e-5)
    assert th["ratio"]["neg_up_to_p"] is None and th["surrogate"] == {"pos_from_p": None, "neg_up_to_p": None}
    # with L = 0.5, A < 0 tokens with w < 1 - eps_l = 0.8 lose theirs: sigmoid(9 p) < 0.65
    th2 = readings.zero_gradient_thresholds(lower=0.5, upper=1.5)
    assert th2["ratio"]["neg_up_to_p"] == pytest.approx(math.log(0.65 / 0.35) / 9, abs=2e-5)
    assert readings.zero_gradient_thresholds(tau_mode="divide")["ratio"]["pos_from_p"] is None  # w = 1
    frac = readings.zero_gradient_fraction([0.05, 0.3, 0.5, 0.9])
    assert frac == {"ratio_pos": 0.75, "ratio_neg": 0.0, "surrogate_pos": 0.0, "surrogate_neg": 0.0}


def test_kl_offset_table():
    rows = readings.kl_offset_table((0.05, 0.2, 0.9))
    for r in rows:
        w = r["w"]
        assert r["eq10_value"] == pytest.approx(w - math.log(w) - 1, abs=1e-12)
        assert r["eq10_dlogpi"] == pytest.approx(1 - w, abs=1e-12)
        assert r["outside_value"] == 0 and abs(r["outside_dlogpi"]) < 1e-15
        assert r["plain_value"] == 0 and abs(r["plain_dlogpi"]) < 1e-15
        assert r["eq10_target_p"] == pytest.approx(w * r["p"])
    assert rows[0]["eq10_value"] == 0  # w = 1 at p = 0.05
    assert rows[2]["eq10_value"] == pytest.approx(0.4 - math.log(1.4), abs=1e-12)


def test_readings_sweep_eq11_whatever_the_scheme_given():
    """Table 7's tables and the clip thresholds are about Eq. 11 itself: a params object of another scheme gives
    the same rows as scheme "tr" (not 2 - w or w = 1)."""
    for scheme in ("reverse", "equal"):
        assert readings.tau_table((2.0, 9.0), WeightParams(scheme=scheme)) == readings.tau_table((2.0, 9.0))
