"""Episodes-to-solve against DeepSea size N: the exploration family's scaling plot. A driver,
not a test.

For every method, size N and seed it runs the script's train() in this process (tests/helpers.py's
run_train, as tests/evaluation.py does) on DeepSea{N}-v0 with the same budget in EPISODES for every
method (--episodes; total_timesteps = episodes * N, rounded up to a whole PPO rollout), and records
episodes_to_solve: the number of episodes after which the mean return of the last 20 first reaches
0.9 of the optimum (explore_envs.episodes_to_solve, from the run's own episodic_returns, so every
method is scored the same way). A run that never gets there counts as unsolved and is drawn at the
budget with a marker.

    python -m benchmarks.exploration_scaling --sizes 4,6,8,10,14,20 --seeds 1-3 \\
        --scripts algos/count_bonus_torch.py,algos/rnd_torch.py,algos/icm_torch.py,ppo,dqn
    python -m benchmarks.exploration_scaling --sizes 4,8 --seeds 1 --scripts ppo --episodes 500  # a look
    python -m benchmarks.exploration_scaling --plot-only  # redraw

Methods (--scripts, comma-separated):
  a path, e.g. algos/count_bonus_torch.py    the script with its own defaults (label: its file name);
                                             per-script extra overrides with --set PATH:FIELD=VALUE
  ppo   entropy-only PPO: algos/count_bonus_torch.py with --bonus-scale 0 ("PPO (entropy only)")
  dqn   epsilon-greedy DQN: algos/dqn_torch.py ("DQN (epsilon-greedy)"), with the replay buffer as
        long as the run, learning_starts = budget / 10 (128 to 1,000 steps) and epsilon annealed from
        1 to 0.01 over half the run (dqn_torch.py's CartPole defaults anneal over a tenth and would
        spend most of a small budget before the first update)

Writes docs/assets/curves/exploration_scaling.csv (one row per run, appended as each run ends;
--resume skips the rows already there) and exploration_scaling.png (log-scale y: median
episodes-to-solve over seeds against N with the min-max band; unsolved runs count at the budget and
are drawn there as open markers; dotted: 2^N, the expected episodes per success of a uniformly random
policy). One training process at a time.
"""

import argparse
import csv
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "algos"))
import explore_envs  # noqa: E402  registers DeepSea{N}-v0 before any script builds one
from evaluation import parse_overrides, parse_seeds  # noqa: E402
from helpers import ROOT, load_script, run_train  # noqa: E402

OUT = ROOT / "docs" / "assets" / "curves" / "exploration_scaling"
WINDOW = 20  # episodes in the running mean that must reach 0.9 of the optimum
FIELDS = [
    "label",
    "script",
    "size",
    "seed",
    "episodes_to_solve",
    "solved",
    "num_episodes",
    "budget_episodes",
    "total_timesteps",
    "final_mean_return",
    "wall_time",
    "overrides",
]
ALIASES = {
    "ppo": ("PPO (entropy only)", "algos/count_bonus_torch.py", {"bonus_scale": 0.0}),
    "dqn": ("DQN (epsilon-greedy)", "algos/dqn_torch.py", {}),
}


def methods_from(text, extra_sets):
    """[(label, script, overrides)] from --scripts and the per-script --set PATH:FIELD=VALUE flags."""
    per_script = {}
    for item in extra_sets:
        path, _, assignment = item.partition(":")
        per_script.setdefault(path, []).append(assignment)
    methods = []
    for name in [s.strip() for s in text.split(",") if s.strip()]:
        if name in ALIASES:
            label, script, overrides = ALIASES[name]
            overrides = dict(overrides)
        else:
            label, script, overrides = Path(name).stem, name, {}
        overrides.update(parse_overrides(per_script.get(name, [])))
        methods.append((label, script, overrides))
    return methods


def budget_overrides(script, size, episodes, overrides):
    """Args overrides that give `episodes` episodes of DeepSea{size}: total_timesteps = episodes * N,
    rounded up to a whole rollout (num_envs * num_steps) for the PPO-based scripts; DQN's replay and
    exploration schedule scaled to the run."""
    args = load_script(script).Args(**overrides)
    steps = episodes * size
    out = {"env_id": f"DeepSea{size}-v0", **overrides}
    if hasattr(args, "num_steps"):  # on-policy: whole rollouts
        rollout = args.num_envs * args.num_steps
        out["total_timesteps"] = int(math.ceil(steps / rollout) * rollout)
    else:  # DQN: one env, a buffer as long as the run, a tenth of it (128..1,000 steps) of warm-up
        out["total_timesteps"] = steps
        out.setdefault("buffer_size", steps)
        out.setdefault("learning_starts", int(min(1000, max(128, steps // 10))))
        out.setdefault("exploration_fraction", 0.5)
        out.setdefault("end_e", 0.01)
    return out


def score(summary, size):
    """(episodes_to_solve, solved, num_episodes) from a run's own episodic_returns."""
    returns = [r for _, r in summary["episodic_returns"]]
    solved = 0.9 * explore_envs.deep_sea_optimal_return(f"DeepSea{size}-v0")
    at = explore_envs.episodes_to_solve(returns, solved, WINDOW)
    return (len(returns) + 1 if at is None else at), at is not None, len(returns)


def read_rows(path):
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def run_all(opts, methods, csv_path):
    done = (
        {(r["label"], int(r["size"]), int(r["seed"])) for r in read_rows(csv_path)} if opts.resume else set()
    )
    if not opts.resume or not csv_path.exists():
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        with open(csv_path, "w", newline="") as f:
            csv.DictWriter(f, FIELDS).writeheader()
    for size in parse_sizes(opts.sizes):
        for label, script, overrides in methods:
            for seed in parse_seeds(opts.seeds):
                if (label, size, seed) in done:
                    continue
                kwargs = budget_overrides(script, size, opts.episodes, overrides)
                start = time.time()
                summary = run_train(script, Path(opts.log_dir) / f"N{size}", seed=seed, **kwargs)
                ets, solved, n_eps = score(summary, size)
                row = {
                    "label": label,
                    "script": script,
                    "size": size,
                    "seed": seed,
                    "episodes_to_solve": ets,
                    "solved": int(solved),
                    "num_episodes": n_eps,
                    "budget_episodes": opts.episodes,
                    "total_timesteps": kwargs["total_timesteps"],
                    "final_mean_return": round(summary["final_mean_return"], 4),
                    "wall_time": round(time.time() - start, 1),
                    "overrides": ";".join(f"{k}={v}" for k, v in overrides.items()),
                }
                with open(csv_path, "a", newline="") as f:
                    csv.DictWriter(f, FIELDS).writerow(row)
                print(
                    f"N={size:>3} {label:<24} seed {seed}: "
                    f"{'solved after ' + str(ets) + ' episodes' if solved else 'unsolved in ' + str(n_eps)}"
                    f"  (final 20-episode mean {summary['final_mean_return']:.3f}, {row['wall_time']} s)",
                    flush=True,
                )


def plot(csv_path, png_path):
    """Median episodes-to-solve over seeds against N (log y), min-max band, unsolved at the budget."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_rows(csv_path)
    if not rows:
        print(f"nothing to plot in {csv_path}")
        return
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    labels = list(dict.fromkeys(r["label"] for r in rows))
    budgets = sorted({int(r["budget_episodes"]) for r in rows})
    for i, label in enumerate(labels):
        mine = [r for r in rows if r["label"] == label]
        sizes = sorted({int(r["size"]) for r in mine})
        color = f"C{i}"
        med, lo, hi = [], [], []
        for n in sizes:
            # an unsolved run counts at its budget: the median then says "at least this many"
            vals = [
                min(float(r["episodes_to_solve"]), float(r["budget_episodes"]))
                if int(r["solved"])
                else float(r["budget_episodes"])
                for r in mine
                if int(r["size"]) == n
            ]
            med.append(np.median(vals)), lo.append(min(vals)), hi.append(max(vals))
        ax.plot(sizes, med, "-o", color=color, label=label, ms=4)
        ax.fill_between(sizes, lo, hi, color=color, alpha=0.2, lw=0)
        unsolved = [(int(r["size"]), float(r["budget_episodes"])) for r in mine if not int(r["solved"])]
        if unsolved:
            xs, ys = zip(*unsolved)
            jitter = (i - (len(labels) - 1) / 2) * 0.15
            ax.scatter(np.array(xs) + jitter, ys, marker="x", color=color, s=30, zorder=3)
    all_sizes = sorted({int(r["size"]) for r in rows})
    grid = np.linspace(min(all_sizes), max(all_sizes), 100)
    ax.plot(grid, 2.0**grid, ":", color="gray", lw=1, label=r"$2^N$ (random policy, per success)")
    for b in budgets:
        ax.axhline(b, color="gray", ls="--", lw=0.8)
    ax.set_yscale("log")
    ax.set_ylim(10, max(budgets) * 3)
    ax.set_xlabel("DeepSea size N")
    ax.set_ylabel("episodes to solve (20-episode mean >= 0.9 x optimum)")
    seeds = sorted(
        {
            len({r["seed"] for r in rows if r["label"] == l and r["size"] == n})
            for l in labels
            for n in {r["size"] for r in rows}
        }
        - {0}
    )
    count = f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}"
    ax.set_title(f"DeepSea: median over {count} seeds, min-max band; x = unsolved at the budget", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    print(f"wrote {png_path}")


def parse_sizes(text):
    return [int(s) for s in text.split(",")]


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    parser.add_argument("--sizes", default="4,6,8,10,14,20", help="DeepSea sizes N, comma-separated")
    parser.add_argument("--seeds", default="1-3", help="e.g. 1-3 or 1,4,7")
    parser.add_argument(
        "--scripts",
        default="algos/count_bonus_torch.py,ppo,dqn",
        help="methods: script paths and the aliases ppo, dqn (see above)",
    )
    parser.add_argument(
        "--episodes", type=int, default=2000, help="budget per run, in episodes (the same for every N)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PATH:FIELD=VALUE",
        help="an Args override for one method, e.g. algos/rnd_torch.py:bonus_scale=0.5 (repeatable)",
    )
    parser.add_argument(
        "--out", default=str(OUT), help="output path without extension (.csv and .png are written)"
    )
    parser.add_argument("--log-dir", default="runs/exploration_scaling")
    parser.add_argument(
        "--resume", action="store_true", help="keep the CSV's rows and skip the runs already in it"
    )
    parser.add_argument("--plot-only", action="store_true", help="redraw the PNG from the CSV, run nothing")
    opts = parser.parse_args()
    csv_path, png_path = Path(opts.out + ".csv"), Path(opts.out + ".png")
    if opts.episodes < WINDOW:
        raise ValueError(f"--episodes {opts.episodes}: at least {WINDOW} (the running-mean window)")
    if any(n < 1 or n > explore_envs.MAX_SIZE for n in parse_sizes(opts.sizes)):
        raise ValueError(f"--sizes {opts.sizes}: each N must be in 1..{explore_envs.MAX_SIZE}")
    if not opts.plot_only:
        run_all(opts, methods_from(opts.scripts, opts.set), csv_path)
    plot(csv_path, png_path)


if __name__ == "__main__":
    main()
