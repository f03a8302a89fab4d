"""DAgger against BC at equal numbers of expert labels, for docs/algorithms/dagger.md. Not a test:
runs a DAgger twin with its default Args (which also train the BC baseline on expert-only rollouts)
over several seeds and writes

    docs/assets/curves/dagger_vs_bc_<twin>_<n>it.csv  one row per (seed, iteration): expert labels so far,
                                                 DAgger's and BC's mean evaluation return, the expert's
    docs/assets/curves/dagger_vs_bc_<twin>_<n>it.runs.csv  one row per seed: dagger_return, bc_return,
                                                 expert_return, wall time
    docs/assets/curves/dagger_vs_bc_<twin>_<n>it.png  mean return against expert labels, both learners,
                                                 each seed a thin line

(<n> the iterations run) and prints them.

    python -m benchmarks.dagger_vs_bc                      # torch twin, seeds 1-5, default 10 iterations
    python -m benchmarks.dagger_vs_bc --twin jax --seeds 1-3
    python -m benchmarks.dagger_vs_bc --iterations 5      # 1,000 labels: dagger_vs_bc_torch_5it.*
"""

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from evaluation import parse_seeds  # noqa: E402
from helpers import ROOT, load_script, run_train  # noqa: E402

OUT = ROOT / "docs" / "assets" / "curves"


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--twin", default="torch", choices=("torch", "jax"))
    parser.add_argument("--seeds", default="1-5")
    parser.add_argument("--iterations", type=int, default=0, help="Args.iterations (0: the script's default)")
    parser.add_argument("--log-dir", default="/tmp/dagger_vs_bc_runs")
    opts = parser.parse_args()
    script = f"algos/dagger_{opts.twin}.py"
    iterations = opts.iterations or load_script(script).Args().iterations  # the files name the budget
    curve_rows, run_rows = [], []
    for seed in parse_seeds(opts.seeds):
        s = run_train(script, opts.log_dir, seed=seed, iterations=iterations)
        for (labels, dagger), (_, bc) in zip(s["dagger_curve"], s["bc_curve"]):
            curve_rows.append(
                {
                    "seed": seed,
                    "labels": labels,
                    "dagger_return": round(dagger, 2),
                    "bc_return": round(bc, 2),
                    "expert_return": round(s["expert_return"], 2),
                }
            )
        run_rows.append(
            {
                "twin": opts.twin,
                "seed": seed,
                "dagger_return": round(s["dagger_return"], 2),
                "bc_return": round(s["bc_return"], 2),
                "expert_return": round(s["expert_return"], 2),
                "wall_time": round(s["wall_time"], 1),
            }
        )
        print(run_rows[-1], flush=True)
    stem = OUT / f"dagger_vs_bc_{opts.twin}_{iterations}it"
    OUT.mkdir(parents=True, exist_ok=True)
    for rows, path in ((curve_rows, f"{stem}.csv"), (run_rows, f"{stem}.runs.csv")):
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    labels = sorted({r["labels"] for r in curve_rows})
    for key, color, name in (
        ("dagger_return", "tab:blue", "DAgger"),
        ("bc_return", "tab:orange", "BC (expert rollouts)"),
    ):
        for seed in {r["seed"] for r in curve_rows}:
            ax.plot(
                labels, [r[key] for r in curve_rows if r["seed"] == seed], color=color, alpha=0.25, lw=0.8
            )
        ax.plot(
            labels,
            [np.mean([r[key] for r in curve_rows if r["labels"] == n]) for n in labels],
            color=color,
            lw=2,
            marker="o",
            label=f"{name}, mean of {len(run_rows)} seeds",
        )
    ax.axhline(
        np.mean([r["expert_return"] for r in run_rows]), color="tab:green", ls="--", label="scripted expert"
    )
    ax.set_xlabel("expert labels")
    ax.set_ylabel("mean return (10 evaluation episodes)")
    ax.set_title(f"Pendulum-v1: DAgger against BC at equal labels ({opts.twin})")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{stem}.png", dpi=110)
    print(f"wrote {stem}.csv, .runs.csv, .png")


if __name__ == "__main__":
    main()
