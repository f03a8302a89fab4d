"""The Dyna maze with and without planning (Sutton & Barto figure 8.2), for docs/algorithms/dyna_q.md.
Not a test: runs both Dyna-Q twins for n = 0, 5, 50 planning steps over a few seeds and writes

    docs/assets/curves/dyna_q_planning.csv       every run's steps per episode (twin, n, seed, episode, steps)
    docs/assets/curves/dyna_q_planning.runs.csv  one row per run: when the greedy policy first reached the
                                                 goal and first walked a shortest path, wall time
    docs/assets/curves/dyna_q_planning.png       mean real steps per episode against episode, 2-50

    python -m benchmarks.dyna_q_curves                       # seeds 1-5, both twins
    python -m benchmarks.dyna_q_curves --seeds 1-10 --twins torch

Budgets: n = 0 runs 20,000 real steps (it needs up to ~10,000 for 50 episodes and to find its way),
n = 5 runs 6,000, n = 50 the scripts' default 3,000 (over 100 episodes unless the first, random,
episode is very long; a run with fewer than 50 episodes is left out of the plot, whose legend counts
the seeds in each line).

With --changing it runs the blocking maze (3,000 steps, the wall moves after 1,000) and the shortcut
maze (6,000 steps, the shortcut opens after 3,000) instead, Dyna-Q (kappa 0) against Dyna-Q+ (kappa
1e-3), n = 50 (S&B figures 8.4 and 8.5), and writes dyna_q_changing.runs.csv (how long after the
change the greedy policy found a way and a shortest way, the reward collected after the change) and
dyna_q_changing.png (cumulative reward against real steps, mean over seeds). With --timing it times
one planning phase of each twin (and of a batched torch variant) and writes nothing.

With --against-n it runs the Dyna maze for n = 0, 1, 2, 5, 10, 20, 50, every run 20,000 real steps
(each run cached as JSON under --log-dir, so an interrupted sweep resumes), and writes
dyna_q_against_n.runs.csv (one row per run: the real step at which the greedy policy first reached the
goal and first walked a shortest path, or nothing when it did not within the budget) and
dyna_q_against_n.png (those real steps against n, every run and the median over seeds):

    python -m benchmarks.dyna_q_curves --against-n --seeds 1-5    # the figure of docs/algorithms/dyna_q.md
"""

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from evaluation import parse_seeds  # noqa: E402
from helpers import ROOT, run_train  # noqa: E402

OUT = ROOT / "docs" / "assets" / "curves"
BUDGET = {0: 20_000, 5: 6_000, 50: 3_000}
EPISODES = 50
MILESTONES = (
    "episodes_to_greedy_path",
    "steps_to_greedy_path",
    "episodes_to_optimal",
    "steps_to_optimal",
    "greedy_path_length",
)


AGAINST_N = (0, 1, 2, 5, 10, 20, 50)
AGAINST_N_BUDGET = 20_000
CHANGING = {"BlockingMaze-v0": (3_000, 1_000), "ShortcutMaze-v0": (6_000, 3_000)}
KAPPAS = {0.0: "Dyna-Q", 1e-3: "Dyna-Q+"}
AFTER_CHANGE = ("steps_to_greedy_path_after_change", "steps_to_optimal_after_change", "greedy_path_length")


def changing_mazes(opts):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = []
    for twin in opts.twins.split(","):
        for env_id, (budget, change_at) in CHANGING.items():
            for kappa in KAPPAS:
                for seed in parse_seeds(opts.seeds):
                    s = run_train(
                        f"algos/dyna_q_{twin}.py",
                        opts.log_dir,
                        seed=seed,
                        env_id=env_id,
                        planning_steps=50,
                        total_timesteps=budget,
                        kappa=kappa,
                    )
                    after = sum(r for step, r in s["episodic_returns"] if step > change_at)
                    runs.append(
                        dict(
                            twin=twin,
                            env_id=env_id,
                            kappa=kappa,
                            seed=seed,
                            returns=s["episodic_returns"],
                            reward_after_change=after,
                            wall_time=s["wall_time"],
                            **{k: s[k] for k in AFTER_CHANGE},
                        )
                    )
                    print(
                        f"{twin:5s} {env_id} kappa={kappa:g} seed {seed}: "
                        + "  ".join(f"{k} {s[k]}" for k in AFTER_CHANGE)
                        + f"  reward after the change {after:.0f}  ({s['wall_time']:.1f} s)",
                        flush=True,
                    )
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "dyna_q_changing.runs.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["twin", "env_id", "kappa", "seed", *AFTER_CHANGE, "reward_after_change", "wall_time_s"])
        for r in runs:
            w.writerow(
                [
                    r["twin"],
                    r["env_id"],
                    r["kappa"],
                    r["seed"],
                    *("" if r[k] is None else r[k] for k in AFTER_CHANGE),
                    f"{r['reward_after_change']:.0f}",
                    f"{r['wall_time']:.1f}",
                ]
            )
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, (env_id, (budget, change_at)) in zip(axes, CHANGING.items()):
        grid = np.arange(budget + 1)
        for kappa, color in zip(KAPPAS, ("tab:blue", "tab:red")):
            for twin, style in (("torch", "-"), ("jax", "--")):
                curves = [
                    np.searchsorted([step for step, _ in r["returns"]], grid, side="right")
                    for r in runs
                    if (r["env_id"], r["kappa"], r["twin"]) == (env_id, kappa, twin)
                ]
                if curves:
                    ax.plot(
                        grid,
                        np.mean(curves, axis=0),
                        style,
                        color=color,
                        label=f"{KAPPAS[kappa]} ({twin}, {len(curves)} seeds)",
                    )
        ax.axvline(change_at, color="gray", ls=":", lw=1)
        ax.set_xlabel("real steps")
        ax.set_ylabel("cumulative reward (mean over seeds)")
        ax.set_title(f"{env_id}, n = 50")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT / "dyna_q_changing.png", dpi=100)
    print(f"wrote {OUT}/dyna_q_changing.runs.csv, .png")


def against_n(opts):
    """Real steps until the greedy policy first reaches the goal and first walks a shortest path, against
    the number of planning updates per real step; a run that does not within the budget is drawn at the
    top of the axis (censored) and counts as above every measured value in the median."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = []
    for twin in opts.twins.split(","):
        for n in AGAINST_N:
            for seed in parse_seeds(opts.seeds):
                cache = Path(opts.log_dir) / f"against_n-{twin}-{n}-{seed}-{AGAINST_N_BUDGET}.json"
                if cache.exists():  # an interrupted sweep resumes where it stopped
                    s = json.loads(cache.read_text())
                else:
                    s = run_train(
                        f"algos/dyna_q_{twin}.py",
                        opts.log_dir,
                        seed=seed,
                        env_id="DynaMaze-v0",
                        planning_steps=n,
                        total_timesteps=AGAINST_N_BUDGET,
                    )
                    cache.parent.mkdir(parents=True, exist_ok=True)
                    cache.write_text(json.dumps({k: s[k] for k in (*MILESTONES, "wall_time")}))
                runs.append(
                    dict(twin=twin, n=n, seed=seed, wall_time=s["wall_time"], **{k: s[k] for k in MILESTONES})
                )
                print(
                    f"{twin:5s} n={n:2d} seed {seed}: "
                    + "  ".join(f"{k} {s[k]}" for k in MILESTONES)
                    + f"  ({s['wall_time']:.1f} s)",
                    flush=True,
                )
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "dyna_q_against_n.runs.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["twin", "n", "seed", *MILESTONES, "budget", "wall_time_s"])
        for r in runs:
            w.writerow(
                [
                    r["twin"],
                    r["n"],
                    r["seed"],
                    *("" if r[k] is None else r[k] for k in MILESTONES),
                    AGAINST_N_BUDGET,
                    f"{r['wall_time']:.1f}",
                ]
            )
    censored = AGAINST_N_BUDGET * 1.5  # where a run that never got there is drawn
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8), sharey=True)
    for ax, key, title in zip(
        axes,
        ("steps_to_greedy_path", "steps_to_optimal"),
        ("greedy policy first reaches the goal", "greedy policy first walks a shortest path"),
    ):
        for twin, color, shift in (("torch", "tab:blue", -0.12), ("jax", "tab:orange", 0.12)):
            medians, counts = [], set()
            for i, n in enumerate(AGAINST_N):
                values = [
                    censored if r[key] is None else r[key] for r in runs if (r["twin"], r["n"]) == (twin, n)
                ]
                if not values:
                    continue
                ax.scatter([i + shift] * len(values), values, s=10, color=color, alpha=0.5)
                medians.append((i + shift, float(np.median(values))))
                counts.add(len(values))
            if medians:
                ax.plot(
                    *zip(*medians),
                    "-o",
                    color=color,
                    ms=4,
                    label=f"{twin}: median of {'/'.join(map(str, sorted(counts)))} seeds",
                )
        ax.axhline(AGAINST_N_BUDGET, color="gray", ls=":", lw=1)
        ax.text(
            0, AGAINST_N_BUDGET * 1.15, f"not within {AGAINST_N_BUDGET:,} steps", fontsize=7, color="gray"
        )
        ax.set_yscale("log")
        ax.set_xticks(range(len(AGAINST_N)), [str(n) for n in AGAINST_N])
        ax.set_xlabel("planning updates per real step, n")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7, loc="lower left")
    axes[0].set_ylabel("real steps (log scale)")
    fig.suptitle("Dyna maze: real steps to the goal and to the optimum against n", fontsize=10)
    fig.tight_layout()
    fig.savefig(OUT / "dyna_q_against_n.png", dpi=100)
    print(f"wrote {OUT}/dyna_q_against_n.runs.csv, .png")


def planning_timing(repeats=200):
    """Microseconds per planning phase of n = 50 updates on a 54 x 4 table with every pair known: the
    torch twin's sequential loop, a batched torch variant (every update reads the same table and
    colliding pairs add up: another algorithm, timed for comparison only) and the JAX twin's jitted
    plan (lax.scan). Median of 5 blocks of `repeats` calls, one torch thread."""
    import statistics
    import time

    import jax
    import torch

    from helpers import load_script

    torch.set_num_threads(1)
    jax.config.update("jax_cpu_enable_async_dispatch", False)
    pt, jx = load_script("algos/dyna_q_torch.py"), load_script("algos/dyna_q_jax.py")
    rs = np.random.default_rng(0)
    data = {
        "reward": rs.random((54, 4), dtype=np.float32),
        "next_state": rs.integers(0, 54, (54, 4)),
        "terminated": np.zeros((54, 4), dtype=np.float32),
        "last_tried": np.zeros((54, 4), dtype=np.int64),
        "known": np.ones((54, 4), dtype=bool),
    }
    q0 = rs.random((54, 4), dtype=np.float32)
    m_t = {k: torch.as_tensor(v) for k, v in data.items()}
    m_j = {k: jax.numpy.asarray(v.astype(np.int32) if v.dtype == np.int64 else v) for k, v in data.items()}
    generator, key = torch.Generator().manual_seed(0), jax.random.PRNGKey(0)

    def batched_torch():
        states, actions = pt.sample_pairs(m_t["known"], 50, generator)
        q = torch.as_tensor(q0)
        td = (
            m_t["reward"][states, actions]
            + 0.95
            * (1 - m_t["terminated"][states, actions])
            * q[m_t["next_state"][states, actions]].max(-1).values
            - q[states, actions]
        )
        return q.index_put((states, actions), 0.1 * td, accumulate=True)

    contenders = {
        "torch plan, sequential loop (the script)": lambda: pt.plan(
            torch.as_tensor(q0), m_t, 50, 0.1, 0.95, 0.0, 1, generator
        ),
        "torch, batched (not the algorithm)": batched_torch,
        "JAX plan, jitted lax.scan (the script)": lambda: jax.block_until_ready(
            jx.plan(jax.numpy.asarray(q0), m_j, 50, 0.1, 0.95, 0.0, 1, key)
        ),
    }
    for name, call in contenders.items():
        call()
        blocks = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(repeats):
                call()
            blocks.append((time.perf_counter() - start) / repeats * 1e6)
        print(f"{name:45s} {statistics.median(blocks):8.0f} us per planning phase of n = 50")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="1-5")
    parser.add_argument("--twins", default="torch,jax")
    parser.add_argument(
        "--changing", action="store_true", help="the blocking and shortcut mazes, Dyna-Q against Dyna-Q+"
    )
    parser.add_argument("--timing", action="store_true", help="time one planning phase (n = 50) of each twin")
    parser.add_argument(
        "--against-n",
        action="store_true",
        help="real steps to the goal and to a shortest path for n = 0 ... 50, 20,000 steps a run",
    )
    parser.add_argument("--log-dir", default="/tmp/dyna_q_curves")
    opts = parser.parse_args()
    if opts.timing:
        return planning_timing()
    if opts.changing:
        return changing_mazes(opts)
    if opts.against_n:
        return against_n(opts)
    runs = []
    for twin in opts.twins.split(","):
        for n, budget in BUDGET.items():
            for seed in parse_seeds(opts.seeds):
                s = run_train(
                    f"algos/dyna_q_{twin}.py",
                    opts.log_dir,
                    seed=seed,
                    planning_steps=n,
                    total_timesteps=budget,
                )
                runs.append(
                    dict(
                        twin=twin,
                        n=n,
                        seed=seed,
                        steps=s["steps_per_episode"],
                        wall_time=s["wall_time"],
                        **{k: s[k] for k in MILESTONES},
                    )
                )
                print(
                    f"{twin:5s} n={n:2d} seed {seed}: "
                    + "  ".join(f"{k} {s[k]}" for k in MILESTONES)
                    + f"  ({s['wall_time']:.1f} s)",
                    flush=True,
                )

    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "dyna_q_planning.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["twin", "n", "seed", "episode", "steps"])
        for r in runs:
            w.writerows(
                [r["twin"], r["n"], r["seed"], e, steps] for e, steps in enumerate(r["steps"], start=1)
            )
    with open(OUT / "dyna_q_planning.runs.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["twin", "n", "seed", *MILESTONES, "episodes", "wall_time_s"])
        for r in runs:
            w.writerow(
                [
                    r["twin"],
                    r["n"],
                    r["seed"],
                    *("" if r[k] is None else r[k] for k in MILESTONES),
                    len(r["steps"]),
                    f"{r['wall_time']:.1f}",
                ]
            )

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.8))
    episodes = np.arange(2, EPISODES + 1)
    for n, color in zip(BUDGET, ("tab:blue", "tab:orange", "tab:green")):
        for twin, style in (("torch", "-"), ("jax", "--")):
            curves = [
                r["steps"][1:EPISODES]
                for r in runs
                if r["n"] == n and r["twin"] == twin and len(r["steps"]) >= EPISODES
            ]
            if curves:
                ax.plot(
                    episodes,
                    np.mean(curves, axis=0),
                    style,
                    color=color,
                    label=f"n = {n} ({twin}, {len(curves)} seeds)",
                )
    ax.axhline(14, color="gray", ls=":", lw=1, label="shortest path (14)")
    ax.set_ylim(0, 800)
    ax.set_xlabel("episode")
    ax.set_ylabel("real steps per episode (mean over seeds)")
    ax.set_title("Dyna maze: planning steps n")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "dyna_q_planning.png", dpi=100)
    print(f"wrote {OUT}/dyna_q_planning.csv, .runs.csv, .png")


if __name__ == "__main__":
    main()
