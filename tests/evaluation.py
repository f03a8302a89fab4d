"""Multi-seed evaluation: run one script over N seeds and report what the seeds say together.

A single seeded run is one draw from a distribution (and on another CPU, another draw), so every
learning figure in README and docs is reported over seeds with the aggregates of Agarwal et al. 2021,
"Deep Reinforcement Learning at the Edge of the Statistical Precipice" (arXiv:2108.13264; the
rliable package): mean, median, the interquartile mean (IQM: the mean of the middle 50% of the runs)
and 95% percentile-bootstrap confidence intervals, resampling runs with replacement within each task
(stratified bootstrap; with one task, an ordinary bootstrap over seeds).

    python tests/evaluation.py algos/ppo_torch.py                     # registered budget, seeds 1-5
    python tests/evaluation.py algos/ppo_jax.py --seeds 1-10 --workers 2 --set clip_vloss=False
    python tests/evaluation.py algos/dqn_torch.py --seeds 1-10 --json sweep.json    # also per-seed JSON

The aggregates are a few lines of numpy (no dependency); tests/unit/test_evaluation.py checks them by
hand, against the exact bootstrap distribution (every resample enumerated) and against rliable's own
functions where rliable is installed.
"""

import argparse
import ast
import csv
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


# ----------------------------------------------------------------------------- aggregates
# Each aggregate takes scores of shape (runs,) or (runs, tasks), or a stack of them (..., runs, tasks)
# for the bootstrap, and reduces the last two axes.
def _runs_tasks(scores):
    x = np.asarray(scores, dtype=float)
    return x[:, None] if x.ndim == 1 else x


def iqm(scores):
    """Interquartile mean over all runs of all tasks: drop the lowest and highest 25% and average
    the rest, as scipy.stats.trim_mean(scores, 0.25, axis=None) (rliable's aggregate_iqm). With n
    scores, floor(n / 4) are cut from each end (n = 5: the middle 3)."""
    x = _runs_tasks(scores)
    flat = np.sort(x.reshape(*x.shape[:-2], -1), axis=-1)
    cut = int(0.25 * flat.shape[-1])
    return flat[..., cut : flat.shape[-1] - cut].mean(-1)


def aggregate_mean(scores):
    """rliable's aggregate_mean: the mean over tasks of each task's mean over runs."""
    return _runs_tasks(scores).mean(-2).mean(-1)


def median_of_runs(scores):
    """The median of all runs. rliable's aggregate_median is the median over tasks of each task's
    mean, which for one task is the mean again; over the seeds of one task this one says more."""
    x = _runs_tasks(scores)
    return np.median(x.reshape(*x.shape[:-2], -1), axis=-1)


AGGREGATES = {"mean": aggregate_mean, "median": median_of_runs, "iqm": iqm}


def stratified_bootstrap_ci(scores, statistic, reps=50_000, confidence=0.95, seed=0):
    """Percentile-bootstrap interval of statistic(scores), scores of shape (runs,) or (runs, tasks):
    each replicate redraws the runs with replacement within every task (the strata), as rliable's
    get_interval_estimates (arch's StratifiedBootstrap, percentile method). Returns (low, high)."""
    x = _runs_tasks(scores)
    runs, tasks = x.shape
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, runs, size=(reps, runs, tasks))
    stats = statistic(np.take_along_axis(np.broadcast_to(x, (reps, runs, tasks)), idx, axis=1))
    alpha = 100 * (1 - confidence) / 2
    low, high = np.percentile(stats, [alpha, 100 - alpha])
    return float(low), float(high)


def summarize(scores, reps=50_000, seed=0):
    """{"mean": (point, low, high), "median": ..., "iqm": ...} of one task's per-seed scores."""
    return {
        name: (float(fn(scores)), *stratified_bootstrap_ci(scores, fn, reps=reps, seed=seed))
        for name, fn in AGGREGATES.items()
    }


def format_ci(point, low, high, digits=1):
    """'467.2 [441.0, 489.5]': the form README and docs quote."""
    return f"{point:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def running_mean_on_grid(curve, grid, window=20):
    """One seed's (step, value) curve as the running mean of its last `window` values, interpolated
    at the steps of `grid`."""
    steps = np.array([s for s, _ in curve], dtype=float)
    values = np.array([v for _, v in curve], dtype=float)
    cums = np.cumsum(np.insert(values, 0, 0.0))
    first = np.maximum(0, np.arange(values.size) - window + 1)
    running = (cums[1:] - cums[first]) / (np.arange(values.size) + 1 - first)
    return np.interp(grid, steps, running)


def curve_band(curves, grid, window=20, reps=2_000, seed=0):
    """Mean curve over seeds and its 95% bootstrap band: per grid point, the mean of the seeds'
    running means and the percentile interval of the means of resampled seeds. Returns
    (mean, low, high)."""
    rows = np.array([running_mean_on_grid(c, grid, window) for c in curves])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, rows.shape[0], size=(reps, rows.shape[0]))
    boot = rows[idx].mean(axis=1)  # (reps, len(grid))
    return rows.mean(0), np.percentile(boot, 2.5, axis=0), np.percentile(boot, 97.5, axis=0)


# ----------------------------------------------------------------------------- curves and tables
# What `pytest -m learning` (tests/learning/test_learning.py) and the sweep (benchmarks/sweep.py) write for
# a LearningSpec under docs/assets/curves/.
CURVES = Path(__file__).resolve().parents[1] / "docs" / "assets" / "curves"


# (metric, curve) pairs on one scale: the spec's threshold can be drawn on the curve's axis. For the
# others (a normalised score against raw returns, a count of episodes against returns, ...) a line at
# the threshold would sit at a meaningless height; the plot's title states the bar instead.
SAME_SCALE = {
    ("final_mean_return", "episodic_returns"),
    ("greedy_mean_return", "episodic_returns"),
    ("dagger_return", "episodic_returns"),
    ("accuracy_gain", "accuracy_gain_curve"),
    ("test_accuracy", "accuracy_curve"),
    ("test_pair_accuracy", "accuracy_curve"),
}


def write_curves(spec, results, out_dir=None):
    """CSV of every seed's raw curve and a PNG of the mean over seeds (of each seed's running mean
    over spec.smooth points) with its 95% bootstrap band and the min-max spread. The threshold is a
    dashed line when the metric is on the curve's scale (SAME_SCALE), and in the title otherwise."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir or CURVES)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / f"{spec.name}.csv", "w", newline="") as f:
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
    bars = (
        [(f"{spec.metric} >= {spec.threshold:g}", spec.metric, spec.threshold)]
        if spec.threshold is not None
        else []
    ) + [(f"{k} <= {v:g}", k, v) for k, v in spec.at_most.items()]
    off_axis = []
    for text, key, value in bars:
        if (key, spec.curve) in SAME_SCALE:
            ax.axhline(value, color="gray", ls="--", lw=1, label=text.replace(key, "bar:"))
        else:  # the bar is on another quantity than the plotted curve
            off_axis.append(text)
    ax.set_title(
        spec.name + (f"\n(bar: {', '.join(off_axis)}; not on this axis)" if off_axis else ""),
        fontsize=10 if off_axis else None,
    )
    ax.set_xlabel(spec.x_label)
    ax.set_ylabel(spec.curve if spec.smooth == 1 else f"{spec.curve} ({spec.smooth}-point running mean)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / f"{spec.name}.png", dpi=100)
    plt.close(fig)


def write_run_tables(spec, results, out_dir=None):
    """<name>.runs.csv (per seed: the metric, wall time, SPS and every at_most key) and
    <name>.summary.csv (mean, median, IQM with 95% bootstrap CIs over the seeds), for the docs tables."""
    out_dir = Path(out_dir or CURVES)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(
        out_dir / f"{spec.name}.runs.csv", "w", newline=""
    ) as f:  # one row per seed, for the docs tables
        w = csv.writer(f)
        w.writerow(["seed", spec.metric, "wall_time_s", "sps", *spec.at_most])
        for seed, r in results.items():
            w.writerow(
                [
                    seed,
                    f"{r[spec.metric]:.4f}",
                    f"{r['wall_time']:.1f}",
                    f"{r['sps']:.1f}",
                    *("" if r[k] is None else f"{r[k]:.4f}" for k in spec.at_most),
                ]
            )
    with open(out_dir / f"{spec.name}.summary.csv", "w", newline="") as f:  # aggregates over the seeds
        w = csv.writer(f)
        w.writerow(["aggregate", "value", "ci_low", "ci_high", "seeds"])
        for name, (point, low, high) in summarize([r[spec.metric] for r in results.values()]).items():
            w.writerow([name, f"{point:.4f}", f"{low:.4f}", f"{high:.4f}", len(results)])


# ----------------------------------------------------------------------------- running seeds
def _run_one(job):
    """One seed in a worker process (tests/conftest.py's settings: one torch thread, CPU JAX)."""
    script, overrides, seed, log_dir = job
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from helpers import run_train

    summary = run_train(script, Path(log_dir) / str(seed), seed=seed, **overrides)
    return seed, summary


def run_seeds(script, overrides, seeds, log_dir, workers=1):
    """{seed: summary} of train() over the seeds, `workers` processes at a time (spawned: each run
    starts in a fresh interpreter, as from the command line)."""
    jobs = [(script, overrides, seed, str(log_dir)) for seed in seeds]
    if workers <= 1:
        return dict(map(_run_one, jobs))
    import multiprocessing

    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return dict(pool.map(_run_one, jobs))


def parse_seeds(text):
    """'1-5' -> [1, 2, 3, 4, 5]; '1,3,7' -> [1, 3, 7]."""
    seeds = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds.extend(range(int(lo), int(hi or lo) + 1))
    return seeds


def run_sweep_process(script, seeds, json_path, log_dir, overrides=(), metric=None):
    """Run this module's command line on one script in a fresh process (`--workers 1`), writing its
    per-seed JSON to json_path: the step the table drivers (benchmarks/offline_table.py,
    benchmarks/llm_table.py) take for each sweep they lack. overrides: "FIELD=VALUE" strings."""
    import subprocess

    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        script,
        "--seeds",
        seeds,
        "--workers",
        "1",
        *[a for kv in overrides for a in ("--set", kv)],
        *(["--metric", metric] if metric else []),
        "--log-dir",
        str(log_dir),
        "--json",
        str(json_path),
    ]
    print(" ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=Path(__file__).resolve().parents[1], check=True)


def read_sweep(json_path):
    """A sweep written by `--json`, seeds in numeric order: {"seeds", "scores", "wall", "scalars"} (arrays
    aligned with seeds; scalars a list of each seed's summary scalars), or None when the file is absent."""
    path = Path(json_path)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    seeds = sorted(data["scores"], key=int)
    return {
        "seeds": seeds,
        "scores": np.array([data["scores"][s] for s in seeds]),
        "wall": np.array([data["wall_time"][s] for s in seeds]),
        "scalars": [data["scalars"][s] for s in seeds],
    }


def parse_overrides(items):
    """["lr=1e-3", "env_id=Acrobot-v1"] -> {"lr": 0.001, "env_id": "Acrobot-v1"} (the --set flags of
    this CLI and of benchmarks/speed.py)."""
    out = {}
    for item in items:
        field, value = item.split("=", 1)
        try:
            out[field] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[field] = value  # a plain string, e.g. env_id=Acrobot-v1
    return out


def main():
    from registry import REGISTRY

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("script", help="repo-relative script, e.g. algos/ppo_torch.py")
    parser.add_argument("--seeds", default="1-5")
    parser.add_argument("--workers", type=int, default=1, help="runs at a time (one process each)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override one Args field (repeatable); the registered spec's args come first",
    )
    parser.add_argument("--metric", default=None, help="summary key (default: the registered spec's)")
    parser.add_argument("--log-dir", default="runs/evaluation")
    parser.add_argument("--json", default=None, help="write per-seed metrics and the summary here")
    opts = parser.parse_args()
    specs = [s for s in REGISTRY if s.script == opts.script]
    base = dict(specs[0].args) if specs else {}
    metric = opts.metric or (specs[0].metric if specs else "final_mean_return")
    overrides = {**base, **parse_overrides(opts.set)}
    seeds = parse_seeds(opts.seeds)
    print(f"{opts.script} {overrides} seeds {seeds}", flush=True)
    results = run_seeds(opts.script, overrides, seeds, opts.log_dir, opts.workers)
    scores = np.array([results[s][metric] for s in seeds])
    for s in seeds:
        print(f"  seed {s}: {metric} {results[s][metric]:.2f}  ({results[s]['wall_time']:.1f} s)")
    agg = summarize(scores)
    print("  " + "  ".join(f"{k} {format_ci(*v)}" for k, v in agg.items()))
    print(
        f"  min {scores.min():.1f}  max {scores.max():.1f}"
        f"  median wall {np.median([results[s]['wall_time'] for s in seeds]):.1f} s"
    )
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(
                {
                    "script": opts.script,
                    "overrides": overrides,
                    "metric": metric,
                    "scores": {s: results[s][metric] for s in seeds},
                    "wall_time": {s: results[s]["wall_time"] for s in seeds},
                    # every scalar of each seed's summary (e.g. kl_to_ref), for tables across scripts
                    "scalars": {
                        s: {
                            k: v
                            for k, v in results[s].items()
                            if isinstance(v, (int, float)) and not isinstance(v, bool)
                        }
                        for s in seeds
                    },
                    "summary": agg,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
