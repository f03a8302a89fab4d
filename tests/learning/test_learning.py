"""Tier 4: learning. Every LearningSpec in tests/registry.py is a claim that a script learns.

pytest -m learning      all specs, all seeds; writes docs/assets/curves/<name>.csv, .png,
                        .runs.csv (per seed: the metric, wall time and SPS) and .summary.csv
                        (mean, median, IQM with 95% bootstrap CIs over the seeds)
pytest                  (default) each spec's quick_seeds only, nothing written to docs/
"""

import numpy as np
import pytest

from evaluation import format_ci, iqm, summarize, write_curves, write_run_tables
from helpers import run_train
from registry import REGISTRY


def check(spec, results, needed, threshold, floor=None, iqm_bar=None):
    """At least `needed` seeds reach `threshold` (and every at_most bound), every seed reaches
    `floor` and the seeds' IQM reaches `iqm_bar` when given; print the per-seed figures and the
    aggregates over seeds."""
    values = np.array([r[spec.metric] for r in results.values()])
    report = ", ".join(f"seed {s}: {r[spec.metric]:.2f} ({r['wall_time']:.0f} s)" for s, r in results.items())
    aggregates = "  ".join(f"{k} {format_ci(*v, digits=3)}" for k, v in summarize(values).items())
    print(f"{spec.name}: {report}\n  {aggregates}")
    passing = [
        s
        for s, r in results.items()
        if (threshold is None or r[spec.metric] >= threshold)
        and all(r[k] is not None and r[k] <= b for k, b in spec.at_most.items())
    ]
    bars = ([f"{spec.metric} >= {threshold}"] if threshold is not None else []) + [
        f"{k} <= {b}" for k, b in spec.at_most.items()
    ]
    assert len(passing) >= needed, (
        f"{len(passing)} of {len(results)} seeds meet {' and '.join(bars)} (need {needed}): {report}"
    )
    if floor is not None:
        under = [s for s, r in results.items() if r[spec.metric] < floor]
        assert not under, (
            f"seeds {under} are below the floor {spec.metric} >= {floor} that every seed must reach: {report}"
        )
    if iqm_bar is not None:
        assert iqm(values) >= iqm_bar, f"IQM {iqm(values):.2f} of {spec.metric} is below {iqm_bar}: {report}"


@pytest.mark.parametrize("spec", [s for s in REGISTRY if s.quick_seeds], ids=lambda s: s.name)
def test_quick_seeds(spec, tmp_path):
    results = {
        seed: run_train(spec.script, tmp_path / str(seed), seed=seed, **spec.args)
        for seed in spec.quick_seeds
    }
    needed = len(spec.quick_seeds) if spec.quick_min_passing is None else spec.quick_min_passing
    check(spec, results, needed, spec.threshold if spec.quick_threshold is None else spec.quick_threshold)


@pytest.mark.learning
@pytest.mark.parametrize("spec", REGISTRY, ids=lambda s: s.name)
def test_learning(spec, tmp_path):
    results = {
        seed: run_train(spec.script, tmp_path / str(seed), seed=seed, **spec.args) for seed in spec.seeds
    }
    write_curves(spec, results)
    write_run_tables(spec, results)
    check(
        spec,
        results,
        len(spec.seeds) if spec.min_passing is None else spec.min_passing,
        spec.threshold,
        spec.floor,
        spec.iqm,
    )
