"""Tier 4: learning. Every LearningSpec in tests/registry.py is a claim that a script learns.

    pytest -m learning      all specs, all seeds; writes docs/assets/curves/<name>.csv, .png,
                            .runs.csv (per seed: the metric, wall time and SPS) and .summary.csv
                            (mean, median, IQM with 95% bootstrap CIs over the seeds)
    pytest                  (default) each spec's quick_seeds only, nothing written to docs/
"""
import csv
from pathlib import Path

import numpy as np
import pytest

from evaluation import curve_band, format_ci, running_mean_on_grid, summarize
from helpers import ROOT, run_train
from registry import REGISTRY

CURVES = ROOT / "docs" / "assets" / "curves"


def write_curves(spec, results):
    """CSV of every seed's raw curve and a PNG of the mean over seeds (of each seed's running mean
    over spec.smooth points) with its 95% bootstrap band and the min-max spread."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    CURVES.mkdir(parents=True, exist_ok=True)
    with open(CURVES / f"{spec.name}.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["seed", "global_step", "value"])
        for seed, summary in results.items():
            for step, value in summary[spec.curve]:
                w.writerow([seed, step, value])
    first_step = max(summary[spec.curve][0][0] for summary in results.values())
    last_step = min(summary[spec.curve][-1][0] for summary in results.values())
    grid = np.linspace(first_step, last_step, 200)  # the steps where every seed has a point
    curves = [summary[spec.curve] for summary in results.values()]
    mean, low, high = curve_band(curves, grid, window=spec.smooth)
    rows = np.array([running_mean_on_grid(c, grid, spec.smooth) for c in curves])
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(grid, mean, label=f"mean of {len(results)} seeds")
    ax.fill_between(grid, low, high, alpha=0.3, label="95% bootstrap CI of the mean")
    ax.fill_between(grid, rows.min(0), rows.max(0), alpha=0.1, color="gray", label="min-max over seeds")
    ax.axhline(spec.threshold, color="gray", ls="--", lw=1, label=f"threshold {spec.threshold:g}")
    ax.set_xlabel(spec.x_label)
    ax.set_ylabel(spec.curve if spec.smooth == 1 else f"{spec.curve} ({spec.smooth}-point running mean)")
    ax.set_title(spec.name)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(CURVES / f"{spec.name}.png", dpi=100)
    plt.close(fig)


def check(spec, results, needed, threshold):
    """At least `needed` seeds reach `threshold` (and every at_most bound); print the per-seed
    figures and the aggregates over seeds."""
    values = np.array([r[spec.metric] for r in results.values()])
    report = ", ".join(f"seed {s}: {r[spec.metric]:.2f} ({r['wall_time']:.0f} s)" for s, r in results.items())
    aggregates = "  ".join(f"{k} {format_ci(*v, digits=3)}" for k, v in summarize(values).items())
    print(f"{spec.name}: {report}\n  {aggregates}")
    passing = [s for s, r in results.items()
               if r[spec.metric] >= threshold and all(r[k] is not None and r[k] <= b for k, b in spec.at_most.items())]
    assert len(passing) >= needed, f"{len(passing)} of {len(results)} seeds reach {threshold} (need {needed}): {report}"


@pytest.mark.parametrize("spec", [s for s in REGISTRY if s.quick_seeds], ids=lambda s: s.name)
def test_quick_seeds(spec, tmp_path):
    results = {seed: run_train(spec.script, tmp_path / str(seed), seed=seed, **spec.args) for seed in spec.quick_seeds}
    needed = len(spec.quick_seeds) if spec.quick_min_passing is None else spec.quick_min_passing
    check(spec, results, needed, spec.threshold if spec.quick_threshold is None else spec.quick_threshold)


@pytest.mark.learning
@pytest.mark.parametrize("spec", REGISTRY, ids=lambda s: s.name)
def test_learning(spec, tmp_path):
    results = {seed: run_train(spec.script, tmp_path / str(seed), seed=seed, **spec.args) for seed in spec.seeds}
    write_curves(spec, results)
    with open(CURVES / f"{spec.name}.runs.csv", "w", newline="") as f:  # one row per seed, for the docs tables
        w = csv.writer(f)
        w.writerow(["seed", spec.metric, "wall_time_s", "sps", *spec.at_most])
        for seed, r in results.items():
            w.writerow([seed, f"{r[spec.metric]:.4f}", f"{r['wall_time']:.1f}", f"{r['sps']:.1f}",
                        *("" if r[k] is None else f"{r[k]:.4f}" for k in spec.at_most)])
    with open(CURVES / f"{spec.name}.summary.csv", "w", newline="") as f:  # aggregates over the seeds
        w = csv.writer(f)
        w.writerow(["aggregate", "value", "ci_low", "ci_high", "seeds"])
        for name, (point, low, high) in summarize([r[spec.metric] for r in results.values()]).items():
            w.writerow([name, f"{point:.4f}", f"{low:.4f}", f"{high:.4f}", len(results)])
    check(spec, results, len(spec.seeds) if spec.min_passing is None else spec.min_passing, spec.threshold)
