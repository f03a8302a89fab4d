"""The offline-RL table (docs/algorithms/offline.md), in the style of CORL's: D4RL-normalised score of
each offline method on each of this repo's datasets (algos/offline_data.py), at the script's default
budget, IQM [95% stratified-bootstrap CI] over seeds, with the behaviour policy (the dataset's own mean
episode return) beside it.

For each (method, dataset, twin), one sweep of `tests/evaluation.py` (seeds 1-5 by default, metric
`normalized_score` of the last evaluation) is stored as JSON in --dir; the table reads those files.
With --run, missing sweeps are run first, one process at a time.

    python -m benchmarks.offline_table --run                      # torch twins, run what is missing
    python -m benchmarks.offline_table --run --framework jax      # the JAX twins
    python -m benchmarks.offline_table                            # the table from the stored sweeps only
"""

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "algos"))
import offline_data  # noqa: E402
from evaluation import read_sweep, run_sweep_process, summarize  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
METHODS = ["bc", "td3_bc", "cql", "iql", "decision_transformer"]
DATASETS = [
    "pendulum-medium",
    "pendulum-replay",
    "pendulum-learner",
    "pendulum-expert",
    "pendulum-medium-expert",
    "pointmaze-stitch",
]
# Per-dataset settings, as the papers tune per domain: IQL on the sparse-reward stitch maze uses the
# IQL paper's AntMaze values (expectile 0.9, beta 10) instead of its locomotion defaults (0.7, 3).
EXTRA = {("iql", "pointmaze-stitch"): ["expectile=0.9", "beta=10.0"]}


def sweep_path(folder, method, dataset, framework):
    return Path(folder) / f"{method}_{framework}__{dataset}.json"


def run_sweep(folder, method, dataset, framework, seeds):
    run_sweep_process(
        f"algos/{method}_{framework}.py",
        seeds,
        sweep_path(folder, method, dataset, framework),
        Path(folder) / "runs",
        [f"dataset={dataset}", *EXTRA.get((method, dataset), [])],
        metric="normalized_score",
    )


def load(folder, method, dataset, framework):
    return read_sweep(sweep_path(folder, method, dataset, framework))


def behaviour_score(dataset):
    """The behaviour policy's normalised score: the dataset's mean trajectory return, normalised."""
    returns = offline_data.episode_returns(offline_data.load_dataset(dataset))
    return float(offline_data.normalized_score(dataset, returns.mean()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default="runs/offline_sweep", help="where the sweeps (JSON) live")
    parser.add_argument("--seeds", default="1-5")
    parser.add_argument("--framework", default="torch", choices=["torch", "jax"])
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--run", action="store_true", help="run the missing sweeps first")
    parser.add_argument(
        "--csv", default=None, help="default: docs/assets/curves/offline_table_<framework>.csv"
    )
    opts = parser.parse_args()
    folder = ROOT / opts.dir
    methods = [m for m in opts.methods.split(",") if (ROOT / "algos" / f"{m}_{opts.framework}.py").exists()]
    datasets = opts.datasets.split(",")
    cells = {}
    for dataset in datasets:
        for method in methods:
            if opts.run and load(folder, method, dataset, opts.framework) is None:
                run_sweep(folder, method, dataset, opts.framework, opts.seeds)
            cells[dataset, method] = load(folder, method, dataset, opts.framework)

    print(f"normalised score, {opts.framework} twins: IQM [95% CI] over seeds (per-seed scores below each)")
    print("| dataset | behaviour | " + " | ".join(methods) + " |")
    print("|---|---|" + "---|" * len(methods))
    out = []
    behaviour = {dataset: behaviour_score(dataset) for dataset in datasets}
    for dataset in datasets:
        row = [dataset, f"{behaviour[dataset]:.1f}"]
        for method in methods:
            c = cells[dataset, method]
            if c is None:
                row.append("not measured")
                continue
            iqm = summarize(c["scores"])["iqm"]
            row.append(f"{iqm[0]:.1f} [{iqm[1]:.1f}, {iqm[2]:.1f}]")
            out.append(
                {
                    "dataset": dataset,
                    "method": method,
                    "framework": opts.framework,
                    "seeds": " ".join(c["seeds"]),
                    "iqm": iqm[0],
                    "ci_low": iqm[1],
                    "ci_high": iqm[2],
                    "scores": " ".join(f"{s:.1f}" for s in c["scores"]),
                    "behaviour": behaviour[dataset],
                    "wall_time_median_s": float(np.median(c["wall"])),
                }
            )
        print("| " + " | ".join(row) + " |")
    for r in out:
        print(
            f"  {r['dataset']:18s} {r['method']:22s} seeds {r['scores']}"
            f"  (median {r['wall_time_median_s']:.0f} s)"
        )
    if out:
        path = ROOT / (opts.csv or f"docs/assets/curves/offline_table_{opts.framework}.csv")
        path.parent.mkdir(parents=True, exist_ok=True)
        # Rows of cells not in this run (other datasets or methods) are kept: a run over a subset
        # (--datasets pendulum-expert) updates its cells instead of erasing the rest of the table.
        fresh = {(r["dataset"], r["method"]) for r in out}
        kept = []
        if path.exists():
            with open(path, newline="") as f:
                kept = [r for r in csv.DictReader(f) if (r["dataset"], r["method"]) not in fresh]
        order = {d: i for i, d in enumerate(DATASETS)}
        rows = sorted(kept + out, key=lambda r: (order.get(r["dataset"], len(order)), r["dataset"]))
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(out[0]))
            writer.writeheader()
            writer.writerows(rows)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
