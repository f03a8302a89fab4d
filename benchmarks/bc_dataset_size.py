"""BC's compounding error made visible, for docs/algorithms/bc.md. Not a test: trains BC (default
Args: 5,000 gradient steps) on the first k expert trajectories of pendulum-expert for several k and
seeds, and writes

    docs/assets/curves/bc_dataset_size.csv   one row per run: twin, k, transitions, seed, final mean
                                             return, normalised score, wall time
    docs/assets/curves/bc_dataset_size.png   final return against k (mean over seeds, each seed a dot),
                                             with the expert's reference return

    python -m benchmarks.bc_dataset_size                   # torch twin, k = 1, 2, 5, 10, all; seeds 1-5
    python -m benchmarks.bc_dataset_size --twin jax --episodes 0 --out bc_default_jax   # the default run only
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
    parser.add_argument("--episodes", default="1,2,5,10,0", help="values of --dataset-episodes (0 = all)")
    parser.add_argument("--dataset", default="pendulum-expert")
    parser.add_argument("--out", default="bc_dataset_size", help="file stem under docs/assets/curves/")
    parser.add_argument("--log-dir", default="/tmp/bc_dataset_size_runs")
    opts = parser.parse_args()
    script = f"algos/bc_{opts.twin}.py"
    offline_data = load_script(script).offline_data
    rows = []
    for k in [int(x) for x in opts.episodes.split(",")]:
        for seed in parse_seeds(opts.seeds):
            s = run_train(script, opts.log_dir, seed=seed, dataset=opts.dataset, dataset_episodes=k)
            rows.append(
                {
                    "twin": opts.twin,
                    "episodes": k or "all",
                    "transitions": s["dataset_size"],
                    "seed": seed,
                    "final_mean_return": round(s["final_mean_return"], 2),
                    "normalized_score": round(s["normalized_score"], 1),
                    "wall_time": round(s["wall_time"], 1),
                }
            )
            print(rows[-1], flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / f"{opts.out}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    ks = list(dict.fromkeys(r["episodes"] for r in rows))
    if len(ks) > 1:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        info = offline_data.dataset_info(opts.dataset)
        fig, ax = plt.subplots(figsize=(6, 4))
        for i, k in enumerate(ks):
            values = [r["final_mean_return"] for r in rows if r["episodes"] == k]
            ax.scatter([i] * len(values), values, color="tab:blue", alpha=0.5, s=15)
            ax.scatter([i], [np.mean(values)], color="tab:blue", marker="_", s=400)
        ax.plot(
            range(len(ks)),
            [np.mean([r["final_mean_return"] for r in rows if r["episodes"] == k]) for k in ks],
            color="tab:blue",
            label=f"BC ({opts.twin}), mean over seeds",
        )
        ax.axhline(info["ref_max_return"], color="tab:green", ls="--", label="scripted expert")
        ax.axhline(info["ref_min_return"], color="tab:red", ls=":", label="random policy")
        ax.set_xticks(
            range(len(ks)),
            [f"{k}\n({next(r['transitions'] for r in rows if r['episodes'] == k)})" for k in ks],
        )
        ax.set_xlabel("expert trajectories (transitions)")
        ax.set_ylabel("final mean return (10 episodes)")
        ax.set_title(f"BC on {opts.dataset}: return against dataset size")
        ax.legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        fig.savefig(OUT / f"{opts.out}.png", dpi=110)
    print(f"wrote {OUT / opts.out}.csv" + (" and .png" if len(ks) > 1 else ""))


if __name__ == "__main__":
    main()
