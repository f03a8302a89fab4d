"""tests/evaluation.py: the multi-seed aggregates by hand, the bootstrap against its exact
distribution, and both against rliable (Agarwal et al. 2021)."""

import itertools

import numpy as np
import pytest

import evaluation as ev

SCORES = [300.0, 420.0, 480.0, 500.0, 350.0]  # five seeds of one task
TWO_TASKS = np.array([[300.0, 0.2], [420.0, 0.9], [480.0, 0.5], [500.0, 0.7], [350.0, 0.4]])  # (runs, tasks)


def test_point_estimates_by_hand():
    # IQM: n = 8 drops 2 from each end: mean(3, 4, 5, 6) = 4.5; n = 5 drops 1: mean(350, 420, 480).
    assert ev.iqm(range(1, 9)) == 4.5
    assert ev.iqm(SCORES) == pytest.approx((350 + 420 + 480) / 3)
    assert ev.aggregate_mean(SCORES) == 410.0
    assert ev.median_of_runs(SCORES) == 420.0
    # Two tasks: the IQM pools all 10 scores (drops 2 per end); the mean is the mean of task means.
    pooled = np.sort(TWO_TASKS.ravel())[2:8]
    assert ev.iqm(TWO_TASKS) == pytest.approx(pooled.mean())
    assert ev.aggregate_mean(TWO_TASKS) == pytest.approx((410.0 + 0.54) / 2)


def test_iqm_ignores_one_outlier_the_mean_does_not():
    assert ev.iqm([500, 500, 500, 500, 0]) == 500.0
    assert ev.aggregate_mean([500, 500, 500, 500, 0]) == 400.0


def exact_bootstrap_ci(scores, statistic, confidence=0.95):
    """Every one of the n^n resamples of n runs, equally likely: the distribution the Monte-Carlo
    bootstrap samples from, and its percentile interval."""
    x = np.asarray(scores, dtype=float)
    stats = np.array([statistic(x[list(idx)]) for idx in itertools.product(range(x.size), repeat=x.size)])
    alpha = 100 * (1 - confidence) / 2
    return np.percentile(stats, [alpha, 100 - alpha])


@pytest.mark.parametrize("name", ["mean", "median", "iqm"])
def test_bootstrap_matches_the_exact_bootstrap(name):
    fn = ev.AGGREGATES[name]
    low, high = ev.stratified_bootstrap_ci(SCORES, fn, reps=50_000, seed=3)
    exact_low, exact_high = exact_bootstrap_ci(SCORES, fn)
    # 3,125 equally likely resamples; 50,000 draws put the 2.5% and 97.5% points within a few
    # units of the exact ones (scores span 200).
    assert low == pytest.approx(exact_low, abs=5.0)
    assert high == pytest.approx(exact_high, abs=5.0)
    assert low <= fn(SCORES) <= high


def test_stratified_resamples_within_each_task():
    # Each replicate redraws runs inside a column: a column of equal values never moves, so the
    # interval of a task-mean of [c, c, ...] with a second, varying task moves only with that task.
    x = np.column_stack([np.full(5, 7.0), SCORES])
    low, high = ev.stratified_bootstrap_ci(x, lambda s: s[..., :, 0].mean(-1), reps=2_000)
    assert low == high == 7.0


def test_against_rliable_numbers():
    """rliable 1.2.0's get_interval_estimates (reps=50,000, arch 7.2.0, pandas 2.3.3), run here on
    these scores, gave: one task IQM 416.67 [316.67, 493.33], mean 410.00 [344.00, 476.00]; two tasks
    IQM 178.68 [150.33, 230.35], mean 205.27 [172.27, 238.22]."""
    one = ev.summarize(SCORES)
    assert one["iqm"] == pytest.approx((416.67, 316.67, 493.33), abs=0.01)
    assert one["mean"] == pytest.approx((410.0, 344.0, 476.0), abs=1.0)
    iqm = (ev.iqm(TWO_TASKS), *ev.stratified_bootstrap_ci(TWO_TASKS, ev.iqm))
    mean = (ev.aggregate_mean(TWO_TASKS), *ev.stratified_bootstrap_ci(TWO_TASKS, ev.aggregate_mean))
    assert iqm == pytest.approx((178.68, 150.33, 230.35), abs=0.5)
    assert mean == pytest.approx((205.27, 172.27, 238.22), abs=0.5)


def test_against_rliable_when_installed():
    try:  # optional (requirements-extra.txt); arch fails to import under pandas 3 with a TypeError
        from rliable import library as rly
        from rliable import metrics
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"rliable not importable: {exc!r}")
    rng = np.random.default_rng(0)
    scores = rng.normal(400, 60, size=(10, 3))
    fn = lambda x: np.array([metrics.aggregate_iqm(x), metrics.aggregate_mean(x)])
    points, cis = rly.get_interval_estimates({"a": scores}, fn, reps=20_000)
    assert ev.iqm(scores) == pytest.approx(points["a"][0])
    assert ev.aggregate_mean(scores) == pytest.approx(points["a"][1])
    for row, agg in enumerate((ev.iqm, ev.aggregate_mean)):
        low, high = ev.stratified_bootstrap_ci(scores, agg, reps=20_000)
        assert low == pytest.approx(cis["a"][0, row], abs=2.0)
        assert high == pytest.approx(cis["a"][1, row], abs=2.0)


def test_curve_band():
    curves = [[(0, 0.0), (10, 10.0), (20, 20.0)], [(0, 2.0), (10, 12.0), (20, 22.0)]]
    grid = np.array([0.0, 10.0, 20.0])
    mean, low, high = ev.curve_band(curves, grid, window=1)
    assert mean == pytest.approx([1.0, 11.0, 21.0])
    assert np.all(low <= mean) and np.all(mean <= high)
    assert low == pytest.approx([0.0, 10.0, 20.0]) and high == pytest.approx([2.0, 12.0, 22.0])
    # window 2: running means (0, 5, 15) and (2, 7, 17)
    mean2, _, _ = ev.curve_band(curves, grid, window=2)
    assert mean2 == pytest.approx([1.0, 6.0, 16.0])


def test_parse_seeds():
    assert ev.parse_seeds("1-5") == [1, 2, 3, 4, 5]
    assert ev.parse_seeds("1,3,7-8") == [1, 3, 7, 8]


def test_threshold_lines_only_on_their_own_scale(tmp_path, monkeypatch):
    """write_curves draws a spec's bar as a line only where the metric lives on the plotted curve's
    axis; a normalised score over a returns curve, or an at_most-only spec, goes in the title."""
    import matplotlib.axes

    from registry import LearningSpec

    lines = []
    monkeypatch.setattr(matplotlib.axes.Axes, "axhline", lambda self, y, **kw: lines.append(y))
    results = {s: {"episodic_returns": [(0, -1200.0 + s), (10, -150.0 - s)]} for s in (1, 2, 3)}
    ev.write_curves(
        LearningSpec("algos/x.py", {"dataset": "d"}, threshold=80.0, metric="normalized_score", smooth=1),
        results,
        tmp_path,
    )
    assert lines == []  # 80 is a normalised score: no line at 80 on a returns axis
    ev.write_curves(
        LearningSpec("algos/x.py", {"env_id": "E"}, threshold=-250.0, smooth=1), results, tmp_path
    )
    assert lines == [-250.0]
    ev.write_curves(
        LearningSpec(
            "algos/x.py", {"env_id": "F"}, threshold=None, smooth=1, at_most={"final_mean_return": -700.0}
        ),
        results,
        tmp_path,
    )
    assert lines == [-250.0, -700.0]  # the upper bound, on the returns axis
    assert (tmp_path / "x-F.png").exists()


def test_a_spec_must_assert_something():
    from registry import LearningSpec

    with pytest.raises(ValueError, match="at_most"):
        LearningSpec("algos/x.py", threshold=None)


def test_a_floor_must_lie_below_the_threshold_and_is_asserted_on_every_seed():
    import importlib.util
    from pathlib import Path

    from registry import LearningSpec

    with pytest.raises(ValueError, match="floor"):
        LearningSpec("algos/x.py", threshold=450.0, floor=450.0)
    path = Path(__file__).resolve().parents[1] / "learning" / "test_learning.py"
    module_spec = importlib.util.spec_from_file_location("learning_check", path)
    learning = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(learning)
    spec = LearningSpec("algos/x.py", {"env_id": "E"}, threshold=450.0, min_passing=4, floor=200.0)
    results = {
        s: {"final_mean_return": v, "wall_time": 1.0} for s, v in zip(range(1, 6), [500, 500, 480, 460, 300])
    }
    learning.check(spec, results, 4, 450.0, 200.0)  # 4 of 5 over 450, none under 200: passes
    results[5]["final_mean_return"] = 150.0
    with pytest.raises(AssertionError, match="floor"):
        learning.check(spec, results, 4, 450.0, 200.0)
    results[5]["final_mean_return"], results[4]["final_mean_return"] = 300.0, 440.0
    with pytest.raises(AssertionError, match="3 of 5"):
        learning.check(spec, results, 4, 450.0, 200.0)


def test_no_quick_check_rests_on_one_seed():
    """The rule: a seed on another CPU is another draw, so no learning assertion of the default
    suite may rest on one seed (docs/reproducibility.md)."""
    from registry import REGISTRY

    single = [s.name for s in REGISTRY if len(s.quick_seeds) == 1]
    assert single == []


def test_read_sweep_orders_seeds_numerically(tmp_path):
    """read_sweep (the table drivers' reader of `--json` files) aligns scores, wall times and scalars
    with the seeds in numeric order, not JSON's string order ("10" after "2")."""
    import json

    path = tmp_path / "sweep.json"
    path.write_text(
        json.dumps(
            {
                "scores": {"10": 3.0, "2": 1.0},
                "wall_time": {"10": 30.0, "2": 20.0},
                "scalars": {"10": {"kl_to_ref": 0.3}, "2": {"kl_to_ref": 0.2}},
            }
        )
    )
    sweep = ev.read_sweep(path)
    assert sweep["seeds"] == ["2", "10"]
    assert sweep["scores"].tolist() == [1.0, 3.0] and sweep["wall"].tolist() == [20.0, 30.0]
    assert [x["kl_to_ref"] for x in sweep["scalars"]] == [0.2, 0.3]
    assert ev.read_sweep(tmp_path / "absent.json") is None
