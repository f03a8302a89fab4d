"""Sample efficiency on Pendulum-v1: PETS and MBPO against SAC on the same real steps, for
docs/algorithms/model_based.md. Not a test.

    python tests/model_based_curves.py                    # MBPO (JAX) and SAC (both twins) at 3,000 steps, seeds 1-3
    python tests/model_based_curves.py --seeds 1-5 --mbpo-twins jax,torch

Runs MBPO and SAC for 3,000 real steps (15 episodes; SAC with `learning_starts=400`, two random
episodes as MBPO and PETS get one, since its default 5,000 would leave no update), reads the PETS
runs already recorded by docs/algorithms/pets.md (docs/assets/curves/pets_pendulum.runs.csv) and
the full 30,000-step SAC curves of the learning suite (docs/assets/curves/sac_{torch,jax}-Pendulum-v1.csv),
and writes

    docs/assets/curves/model_based_pendulum.runs.csv  every episode of every run (method, twin, seed, episode, step, return)
    docs/assets/curves/model_based_pendulum.csv       per run: steps until the 5-episode mean first reaches -300, final mean
    docs/assets/curves/model_based_pendulum.png       5-episode running mean against real steps (log axis), median and range

Each finished run is cached as JSON under --log-dir (runs/model_based/ by default), so an
interrupted sweep resumes where it stopped.
"""
import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from evaluation import parse_seeds  # noqa: E402
from helpers import ROOT, run_train  # noqa: E402

OUT = ROOT / "docs" / "assets" / "curves"
BAR = -300.0        # the bar: "better than -300 on Pendulum"
WINDOW = 5          # episodes in the running mean (as the PETS and MBPO specs' final_mean_return)
STEPS = 3_000       # 15 Pendulum episodes


def steps_to_bar(steps, returns, bar=BAR, window=WINDOW):
    """The real step at which the mean of the last `window` episodes first reaches `bar` (None: never)."""
    returns = np.asarray(returns, dtype=float)
    for i in range(window - 1, len(returns)):
        if returns[i - window + 1:i + 1].mean() >= bar:
            return int(steps[i])
    return None


def run_cached(script, seed, log_dir, **overrides):
    path = Path(log_dir) / f"{Path(script).stem}-{seed}-{STEPS}.json"
    if path.exists():
        return json.loads(path.read_text())
    s = run_train(script, log_dir, seed=seed, total_timesteps=STEPS, **overrides)
    keep = {"episodic_returns": [[int(a), float(b)] for a, b in s["episodic_returns"]],
            "wall_time": float(s["wall_time"]), "final_mean_return": float(s["final_mean_return"])}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(keep))
    return keep


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", default="1-3")
    p.add_argument("--mbpo-twins", default="jax")
    p.add_argument("--sac-twins", default="torch,jax")
    p.add_argument("--log-dir", default=str(ROOT / "runs" / "model_based"))
    opts = p.parse_args()
    seeds = parse_seeds(opts.seeds)

    rows = []  # (method, twin, seed, episode, step, return)
    with open(OUT / "pets_pendulum.runs.csv") as f:
        for r in csv.DictReader(f):
            rows.append(("PETS", r["twin"], int(r["seed"]), int(r["episode"]), int(r["global_step"]), float(r["return"])))
    wall = {}
    for method, script_of, twins, extra in (
            ("MBPO", "algos/mbpo_{}.py", opts.mbpo_twins, {}),
            ("SAC", "algos/sac_{}.py", opts.sac_twins, {"learning_starts": 400})):
        for twin in filter(None, twins.split(",")):
            for seed in seeds:
                s = run_cached(script_of.format(twin), seed, opts.log_dir, env_id="Pendulum-v1", **extra)
                wall[(method, twin, seed)] = s["wall_time"]
                for i, (step, ret) in enumerate(s["episodic_returns"], start=1):
                    rows.append((method, twin, seed, i, step, ret))
                print(f"{method} {twin} seed {seed}: final {s['final_mean_return']:.1f} ({s['wall_time']:.0f} s)",
                      flush=True)
    for twin in ("torch", "jax"):  # the learning suite's 30,000-step SAC runs
        path = OUT / f"sac_{twin}-Pendulum-v1.csv"
        if not path.exists():
            continue
        episode = {}
        with open(path) as f:
            for r in csv.DictReader(f):
                seed = int(r["seed"])
                episode[seed] = episode.get(seed, 0) + 1
                rows.append(("SAC 30k", twin, seed, episode[seed], int(r["global_step"]), float(r["value"])))

    with open(OUT / "model_based_pendulum.runs.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", "twin", "seed", "episode", "global_step", "return"])
        w.writerows(rows)

    runs = {}
    for method, twin, seed, _, step, ret in rows:
        runs.setdefault((method, twin, seed), []).append((step, ret))
    table = []
    for (method, twin, seed), curve in sorted(runs.items()):
        steps, rets = zip(*curve)
        table.append({"method": method, "twin": twin, "seed": seed, "steps": steps[-1],
                      "steps_to_-300": steps_to_bar(steps, rets),
                      "final_mean_return": round(float(np.mean(rets[-WINDOW:])), 1),
                      "wall_time_s": round(wall.get((method, twin, seed), float("nan")), 1)})
    with open(OUT / "model_based_pendulum.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(table[0]))
        w.writeheader()
        w.writerows(table)

    print(f"\nsteps until the {WINDOW}-episode mean first reaches {BAR:.0f} (None: not within the run)")
    medians = {}
    for method in ("PETS", "MBPO", "SAC", "SAC 30k"):
        got = [t for t in table if t["method"] == method]
        if not got:
            continue
        reached = [t["steps_to_-300"] for t in got]
        finite = [r for r in reached if r is not None]
        medians[method] = float(np.median(finite)) if len(finite) * 2 > len(reached) else None
        print(f"  {method:8s} {len(got)} runs: {reached}; median {medians[method]}; final "
              f"{[t['final_mean_return'] for t in got]}")
    if medians.get("SAC 30k"):
        for method in ("PETS", "MBPO"):
            if medians.get(method):
                print(f"  SAC (30k runs) needs {medians['SAC 30k'] / medians[method]:.1f}x the real steps of {method}")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.2))
    colours = {"PETS": "tab:blue", "MBPO": "tab:green", "SAC": "tab:orange", "SAC 30k": "tab:red"}
    labels = {"SAC": "SAC (3,000 steps, learning_starts 400)", "SAC 30k": "SAC (30,000 steps, defaults)"}
    for method, colour in colours.items():
        curves = [c for (m, _, _), c in runs.items() if m == method]
        if not curves:
            continue
        length = min(len(c) for c in curves)
        steps = np.array([s for s, _ in curves[0][:length]])
        smooth = np.array([[np.mean([r for _, r in c[max(0, i - WINDOW + 1):i + 1]]) for i in range(length)]
                           for c in curves])
        ax.plot(steps, np.median(smooth, axis=0), color=colour,
                label=f"{labels.get(method, method)}, {len(curves)} runs")
        ax.fill_between(steps, smooth.min(axis=0), smooth.max(axis=0), color=colour, alpha=0.15)
    ax.axhline(BAR, color="grey", ls="--", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("real environment steps (log scale)")
    ax.set_ylabel(f"return, {WINDOW}-episode running mean")
    ax.set_title("Pendulum-v1: median over runs (line), min-max (band)")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(OUT / "model_based_pendulum.png", dpi=110)
    print(f"wrote {OUT / 'model_based_pendulum.png'}")


if __name__ == "__main__":
    main()
