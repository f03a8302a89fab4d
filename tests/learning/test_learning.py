"""Tier 4: learning. Every LearningSpec in tests/registry.py is a claim that a script learns.

    pytest -m learning      all specs, all seeds; writes docs/assets/curves/<name>.csv, .png and
                            .runs.csv (per seed: the metric, wall time and SPS)
    pytest                  (default) each spec's verified_seed only, nothing written to docs/
"""
import csv
from pathlib import Path

import numpy as np
import pytest

from helpers import ROOT, run_train
from registry import REGISTRY

CURVES = ROOT / "docs" / "assets" / "curves"


def smoothed(curve, window=20):
    """(step, value) pairs -> (steps, running mean of the last `window` values)."""
    steps = np.array([s for s, _ in curve], dtype=float)
    values = np.array([v for _, v in curve], dtype=float)
    means = np.array([values[max(0, i - window + 1): i + 1].mean() for i in range(len(values))])
    return steps, means


def write_curves(spec, results):
    """CSV of every seed's raw curve and a PNG of the mean and min-max spread over seeds (of each
    seed's running mean over spec.smooth points)."""
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
    rows = []
    for summary in results.values():
        steps, means = smoothed(summary[spec.curve], spec.smooth)
        rows.append(np.interp(grid, steps, means))
    rows = np.array(rows)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(grid, rows.mean(0), label=f"mean of {len(results)} seeds")
    ax.fill_between(grid, rows.min(0), rows.max(0), alpha=0.25, label="min-max over seeds")
    ax.axhline(spec.threshold, color="gray", ls="--", lw=1, label=f"threshold {spec.threshold:g}")
    ax.set_xlabel(spec.x_label)
    ax.set_ylabel(spec.curve if spec.smooth == 1 else f"{spec.curve} ({spec.smooth}-point running mean)")
    ax.set_title(spec.name)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(CURVES / f"{spec.name}.png", dpi=100)
    plt.close(fig)


@pytest.mark.parametrize("spec", [s for s in REGISTRY if s.verified_seed is not None], ids=lambda s: s.name)
def test_verified_seed(spec, tmp_path):
    summary = run_train(spec.script, tmp_path, seed=spec.verified_seed, **spec.args)
    value = summary[spec.metric]
    print(f"{spec.name} seed {spec.verified_seed}: {spec.metric} = {value:.2f} (threshold {spec.threshold})")
    assert value >= spec.threshold
    for key, bound in spec.at_most.items():
        assert summary[key] <= bound, f"{key} = {summary[key]} > {bound}"


@pytest.mark.learning
@pytest.mark.parametrize("spec", REGISTRY, ids=lambda s: s.name)
def test_learning(spec, tmp_path):
    results = {seed: run_train(spec.script, tmp_path / str(seed), seed=seed, **spec.args) for seed in spec.seeds}
    write_curves(spec, results)
    values = {seed: r[spec.metric] for seed, r in results.items()}
    with open(CURVES / f"{spec.name}.runs.csv", "w", newline="") as f:  # one row per seed, for the docs tables
        w = csv.writer(f)
        w.writerow(["seed", spec.metric, "wall_time_s", "sps", *spec.at_most])
        for seed, r in results.items():
            w.writerow([seed, f"{r[spec.metric]:.4f}", f"{r['wall_time']:.1f}", f"{r['sps']:.1f}",
                        *(f"{r[k]:.4f}" for k in spec.at_most)])
    report = ", ".join(f"seed {s}: {v:.1f} ({results[s]['wall_time']:.0f} s)" for s, v in values.items())
    print(f"{spec.name}: {report}; mean {np.mean(list(values.values())):.1f}")
    needed = len(spec.seeds) if spec.min_passing is None else spec.min_passing
    passing = [s for s, r in results.items()
               if r[spec.metric] >= spec.threshold and all(r[k] <= b for k, b in spec.at_most.items())]
    assert len(passing) >= needed, report
