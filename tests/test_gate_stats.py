"""The gate's statistics (one-sided Mann-Whitney U) and limit parsing, on hand-worked numbers."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from roofscope.cli import main
from roofscope.errors import RoofscopeError
from scipy.stats import rankdata

from roofscope.gate.stats import mann_whitney, min_steps, steps_to_decide
from roofscope.gate.thresholds import (DEFAULT_LIMITS, Limit, ThresholdError, bounds, limit_for, metric,
                                       metrics_for, parse_limit, parse_limits)


def test_complete_separation_three_against_three_reaches_alpha_exactly():
    # Every run step above every baseline step: U = 3*3 = 9; only 1 of C(6,3) = 20 splits is as
    # extreme, so p = 1/20 = 0.05, which is also the smallest p three steps a side can give.
    t = mann_whitney(np.array([11.0, 12.0, 13.0]), np.array([10.0, 10.1, 10.2]))
    assert t.u == 9.0
    assert t.p_value == pytest.approx(0.05)
    assert t.min_p == pytest.approx(0.05)
    assert t.exact and t.attainable(0.05) and t.clear(0.05)
    assert not t.clear(0.01)


def test_five_against_five_separation_and_interleaving():
    # Separation: p = 1/C(10,5) = 1/252.
    t = mann_whitney(np.array([6.0, 7, 8, 9, 10]), np.array([1.0, 2, 3, 4, 5]))
    assert t.p_value == pytest.approx(1 / 252)
    # Perfect interleaving (run ranks 2,4,6,8,10): rank sum 30, U = 30 - 15 = 15; 87 of the 252
    # 5-subsets of 1..10 sum to 30 or more: p = 87/252 = 0.345, nowhere near clear.
    t = mann_whitney(np.array([2.0, 4, 6, 8, 10]), np.array([1.0, 3, 5, 7, 9]))
    assert t.u == 15.0
    assert t.p_value == pytest.approx(87 / 252)


def test_improvement_is_not_a_regression():
    # The run is lower everywhere: rank sum 1+2+3 = 6, U = 0; every split is at least as extreme: p = 1.
    t = mann_whitney(np.array([1.0, 2, 3]), np.array([4.0, 5, 6]))
    assert t.u == 0.0 and t.p_value == pytest.approx(1.0)


def test_exact_p_value_with_ties_matches_enumeration():
    run, base = np.array([3.0, 3, 4, 5]), np.array([1.0, 3, 3, 2, 4])
    ranks = rankdata(np.concatenate([run, base]))  # mid-ranks: 3 < 5 = 5 < 7 ranks 1, 2.5, 2.5, 4
    observed = ranks[:4].sum()
    sums = [ranks[list(s)].sum() for s in itertools.combinations(range(9), 4)]
    hits = sum(x >= observed - 1e-9 for x in sums)
    t = mann_whitney(run, base)
    assert hits == 17  # of C(9,4) = 126
    # Exact with ties (SciPy's method="exact" ignores them: its p differs), by enumerating the splits.
    assert t.exact and t.p_value == pytest.approx(17 / 126)
    # The most extreme split: the run holds 5, 4, 4 and one of the four 3s (mid-ranks 9 + 7.5 + 7.5 + 4.5
    # = 28.5): 4 of 126 splits, so no outcome of these values can give less than p = 4/126 = 0.0317.
    assert max(sums) == 28.5
    assert t.min_p == pytest.approx(4 / 126)


def test_too_few_samples_cannot_reach_alpha():
    # 2 against 3: the most extreme split has p = 1/C(5,2) = 0.1 > 0.05.
    t = mann_whitney(np.array([20.0, 21.0]), np.array([10.0, 10.1, 10.2]))
    assert t.p_value == pytest.approx(0.1) and t.min_p == pytest.approx(0.1)
    assert not t.attainable(0.05)
    # Identical samples everywhere: every split ties, p = 1 and nothing is attainable.
    t = mann_whitney(np.full(4, 7.0), np.full(4, 7.0))
    assert t.p_value == pytest.approx(1.0) and t.min_p == pytest.approx(1.0)


def test_one_sample_a_side_with_ties():
    # SciPy permutes two or more a side: one baseline step tied with a run step takes the
    # tie-corrected normal approximation instead of a traceback.
    t = mann_whitney(np.array([0.4, 0.41, 0.42, 0.43]), np.array([0.4]))
    assert not t.exact and 0.0 < t.p_value < 1.0 and t.min_p > 0.05


def test_nans_are_dropped_and_empty_sides_refused():
    t = mann_whitney(np.array([11.0, np.nan, 12.0, 13.0]), np.array([10.0, 10.1, 10.2]))
    assert t.n_worse == 3 and t.p_value == pytest.approx(0.05)
    with pytest.raises(ValueError):
        mann_whitney(np.array([np.nan]), np.array([1.0]))


def test_large_samples_use_the_normal_approximation():
    rng = np.random.default_rng(0)
    run, base = rng.normal(1.0, 1.0, 40), rng.normal(0.0, 1.0, 30)
    t = mann_whitney(run, base)
    assert not t.exact
    # Without ties: mean U = 40*30/2 = 600, variance 40*30*71/12 = 7100; the normal tail with
    # continuity correction is P(Z >= (U - 600 - 0.5) / sqrt(7100)).
    from math import erfc, sqrt

    assert t.p_value == pytest.approx(0.5 * erfc((t.u - 600.5) / sqrt(7100) / sqrt(2)))
    scipy_stats = pytest.importorskip("scipy.stats")
    assert t.p_value == pytest.approx(scipy_stats.mannwhitneyu(run, base, alternative="greater").pvalue, rel=1e-6)


def test_fewest_steps_that_can_reach_alpha():
    # 1/C(4,2) = 1/6 > 0.05, 1/C(6,3) = 1/20 = 0.05: three a side; at 0.01, 1/C(8,4) = 1/70 > 0.01,
    # 1/C(10,5) = 1/252 <= 0.01: five a side.
    assert min_steps(0.05) == 3 and min_steps(0.01) == 5


def test_steps_to_decide_a_noisy_shift():
    # Interleaved (run ranks 2,4,6,8,10 of 10, p = 0.345): repeated, the shift of one rank step in
    # two stays, so enough steps make it clear; a run that is not worse never becomes clear.
    run, base = np.array([2.0, 4, 6, 8, 10]), np.array([1.0, 3, 5, 7, 9])
    need = steps_to_decide(run, base)
    assert need is not None and 5 < need <= 200
    assert mann_whitney(np.resize(run, need), np.resize(base, need)).clear()
    assert not mann_whitney(np.resize(run, need - 1), np.resize(base, need - 1)).clear()
    assert steps_to_decide(base, run) is None
    # Identical distributions: no number of steps separates them.
    assert steps_to_decide(np.array([1.0, 2, 3]), np.array([1.0, 2, 3])) is None


def test_parse_limits_units_and_defaults():
    limits = parse_limits("mfu=3%, step_time=2ms,idle_fraction=3pp,region:decode=250us,mbu=off")
    assert limits["mfu"] == Limit(0.03, True, "3%")
    assert limits["step_time"].value == pytest.approx(0.002) and not limits["step_time"].relative
    assert limits["idle_fraction"].value == pytest.approx(0.03) and limits["idle_fraction"].text == "3pp"
    assert limits["region:decode"].value == pytest.approx(250e-6)
    assert limits["mbu"] is None
    assert limits["hfu"] == DEFAULT_LIMITS["hfu"]          # untouched keys keep the defaults
    # region:* covers regions without their own limit.
    assert limit_for(metric("region:prefill"), limits) == DEFAULT_LIMITS["region:*"]
    assert limit_for(metric("region:decode"), limits).text == "250us"
    # Several --max-regression options merge, later ones win.
    assert parse_limits(["mfu=3%", "mfu=7%"])["mfu"].value == pytest.approx(0.07)
    assert parse_limits({"step_time": "10%", "region:*": None})["region:*"] is None


@pytest.mark.parametrize("spec, fragment", [
    ("mfu=5", "expected a number with %"),
    ("mfu=2ms", "mfu is a fraction"),
    ("step_time=3pp", r"pp \(percentage points\) is for fractions"),
    ("bogus=5%", "unknown metric 'bogus'"),
    ("mfu", "expected KEY=LIMIT"),
    ("mfu=-5%", "expected a number with %"),
    ("region:=5%", "unknown metric 'region:'"),
])
def test_bad_limits_are_one_line_usage_errors(spec, fragment):
    with pytest.raises(ThresholdError, match=fragment) as e:
        parse_limits(spec)
    assert e.value.exit_code == 2 and "\n" not in str(e.value)


def test_bad_limit_through_the_cli_exits_2_before_reading_the_run(tmp_path, capsys):
    # The run does not exist: the limit is refused first, with one line and no traceback.
    code = main(["gate", str(tmp_path / "missing"), "--baseline", str(tmp_path / "b.json"),
                 "--max-regression", "mfu=5"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == "roofscope: error: --max-regression mfu=5: expected a number with %, pp, ms, us or s, or off"


def test_limit_exceeded_in_each_direction():
    step, mfu = metric("step_time"), metric("mfu")
    five = parse_limit("mfu", "5%")
    # Step time 10 -> 10.6 ms: 6% worse > 5%; 10 -> 9 ms is better (-10%).
    assert five.exceeded_by(0.010, 0.0106, step) == (pytest.approx(0.06), True)
    assert five.exceeded_by(0.010, 0.009, step)[1] is False
    # MFU 0.40 -> 0.38: (0.40 - 0.38) / 0.40 = 5.0%, not past 5%; -> 0.37 is 7.5%.
    assert five.exceeded_by(0.40, 0.38, mfu)[0] == pytest.approx(0.05)
    assert five.exceeded_by(0.40, 0.37, mfu) == (pytest.approx(0.075), True)
    # A baseline of zero idle: any idle at all is infinitely worse in relative terms.
    assert five.exceeded_by(0.0, 0.01, metric("idle_fraction"))[1] is True


def test_bounds_validate_their_ranges():
    b = bounds(min_mfu=0.35, max_step_time_ms=120)
    assert [(x.metric.name, x.value) for x in b] == [("mfu", 0.35), ("step_time", pytest.approx(0.12))]
    assert b[0].violated(0.34) and not b[0].violated(0.35)
    assert b[1].violated(0.121) and not b[1].violated(0.119)
    assert b[0].text == ">= 35.00%" and b[1].text == "<= 120.000 ms"
    with pytest.raises(RoofscopeError, match="--min-mfu 35: expected a share between 0% and 100%"):
        bounds(min_mfu=35)
    with pytest.raises(RoofscopeError, match="--max-step-time-ms 0"):
        bounds(max_step_time_ms=0)


def test_metrics_for_sample_columns():
    cols = ["step_time_s", "flops", "bytes", "hfu", "mfu", "mbu", "busy_s", "idle_fraction",
            "region:fwd", "region:bwd"]
    assert [m.name for m in metrics_for(cols)] == ["step_time", "mfu", "hfu", "mbu", "idle_fraction",
                                                   "region:bwd", "region:fwd"]
    assert metric("region:fwd").is_time and not metric("region:fwd").higher_is_better
