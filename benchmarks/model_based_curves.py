"""Sample efficiency on Pendulum-v1: PETS and MBPO against SAC on the same real steps, for
docs/algorithms/model_based.md. Not a test.

    python -m benchmarks.model_based_curves     # SAC (both twins) at 3,000 steps, seeds 1-5, then the figure
    python -m benchmarks.model_based_curves --pets-logs runs/pets_torch,runs/pets_jax  # redraw pets.md's too

Runs SAC for 3,000 real steps (15 episodes, `learning_starts=400`: two random episodes as MBPO and
PETS get one, since its default 5,000 would leave no update) and reads every other run from the
curves already recorded: PETS from docs/algorithms/pets.md's runs (docs/assets/curves/pets_pendulum.runs.csv),
MBPO from its learning spec's runs (docs/assets/curves/mbpo_{torch,jax}-Pendulum-v1.csv, seeds 1-5 at the
defaults, 3,000 steps) and the full 30,000-step SAC curves of the learning suite
(docs/assets/curves/sac_{torch,jax}-Pendulum-v1.csv). It writes

    docs/assets/curves/model_based_pendulum.runs.csv  every episode of every run
                                                      (method, twin, seed, episode, step, return)
    docs/assets/curves/model_based_pendulum.csv       per run: steps until the 5-episode mean first
                                                      reaches -300, final mean
    docs/assets/curves/model_based_pendulum.png       5-episode running mean against real steps
                                                      (log axis), median and range

Each finished SAC run is cached as JSON under --log-dir (runs/model_based/ by default), so an
interrupted sweep resumes where it stopped.

`--pets-logs TORCH,JAX` first rewrites pets.md's figure and table of runs
(docs/assets/curves/pets_pendulum.{png,runs.csv}) from the event files of two `tests/evaluation.py`
sweeps at the defaults (their `--log-dir`s, one a twin; the command is on pets.md).
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
BAR = -300.0  # the bar: "better than -300 on Pendulum"
WINDOW = 5  # episodes in the running mean (as the PETS and MBPO specs' final_mean_return)
STEPS = 3_000  # 15 Pendulum episodes


def steps_to_bar(steps, returns, bar=BAR, window=WINDOW):
    """The real step at which the mean of the last `window` episodes first reaches `bar` (None: never)."""
    returns = np.asarray(returns, dtype=float)
    for i in range(window - 1, len(returns)):
        if returns[i - window + 1 : i + 1].mean() >= bar:
            return int(steps[i])
    return None


def median_steps(reached):
    """Median of steps-to-bar over runs, a run that never got there counting as later than all
    (None when that puts the median among them)."""
    m = float(np.median([np.inf if r is None else r for r in reached]))
    return m if np.isfinite(m) else None


def read_event_returns(run_dir):
    """[(global_step, return)] of every episode logged under run_dir (charts/episodic_return)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    ea.Reload()
    return [(int(e.step), float(e.value)) for e in ea.Scalars("charts/episodic_return")]


def write_pets_figure(log_dirs):
    """pets_pendulum.runs.csv and .png from two tests/evaluation.py sweeps: log_dirs = {twin: dir}, each
    holding one run directory a seed (dir/SEED/Pendulum-v1__pets_TWIN__SEED__TIME)."""
    runs = {}
    for twin, log_dir in log_dirs.items():
        for seed_dir in sorted(Path(log_dir).iterdir(), key=lambda d: int(d.name)):
            (run_dir,) = list(seed_dir.glob("Pendulum-v1__*"))  # one run a seed, or the sweep is ambiguous
            runs[(twin, int(seed_dir.name))] = read_event_returns(run_dir)
    with open(OUT / "pets_pendulum.runs.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["twin", "seed", "episode", "global_step", "return"])
        for (twin, seed), curve in sorted(runs.items()):
            w.writerows((twin, seed, i, step, round(ret, 2)) for i, (step, ret) in enumerate(curve, start=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for twin, colour in (("torch", "tab:blue"), ("jax", "tab:orange")):
        curves = np.array([[r for _, r in c] for (t, _), c in sorted(runs.items()) if t == twin])
        episodes = np.arange(1, curves.shape[1] + 1)
        for c in curves:
            ax.plot(episodes, c, color=colour, lw=0.8, alpha=0.25)
        ax.plot(
            episodes,
            np.mean(curves, axis=0),
            color=colour,
            lw=2,
            label=f"{twin}: mean of {len(curves)} seeds",
        )
        finals = curves[:, -WINDOW:].mean(axis=1)
        print(
            f"PETS {twin}: final_mean_return {np.round(finals, 1).tolist()}; "
            f"{int((finals > BAR).sum())} of {len(finals)} better than {BAR:.0f}"
        )
    ax.axhline(BAR, color="black", ls="--", lw=1, label=f"the learning bar ({BAR:.0f})")
    ax.set_xlabel("episode (200 steps each; episode 1 random)")
    ax.set_ylabel("episodic return")
    ax.set_title(f"PETS on Pendulum-v1, {STEPS // 200} episodes = {STEPS:,} steps")
    ax.legend(loc="lower center")
    fig.tight_layout()
    fig.savefig(OUT / "pets_pendulum.png", dpi=100)
    print(f"wrote {OUT / 'pets_pendulum.png'}")


def read_spec_curves(name):
    """A learning spec's recorded runs: {(twin, seed): [(step, return)]} from
    docs/assets/curves/NAME_TWIN-Pendulum-v1.csv and {(twin, seed): wall time in s} from its .runs.csv."""
    runs, wall = {}, {}
    for twin in ("torch", "jax"):
        path = OUT / f"{name}_{twin}-Pendulum-v1.csv"
        if path.exists():
            with open(path) as f:
                for r in csv.DictReader(f):
                    runs.setdefault((twin, int(r["seed"])), []).append(
                        (int(r["global_step"]), float(r["value"]))
                    )
        if path.with_suffix(".runs.csv").exists():  # written by the learning suite since it kept wall times
            with open(path.with_suffix(".runs.csv")) as f:
                wall.update({(twin, int(r["seed"])): float(r["wall_time_s"]) for r in csv.DictReader(f)})
    return runs, wall


def run_cached(script, seed, log_dir, **overrides):
    path = Path(log_dir) / f"{Path(script).stem}-{seed}-{STEPS}.json"
    if path.exists():
        return json.loads(path.read_text())
    s = run_train(script, log_dir, seed=seed, total_timesteps=STEPS, **overrides)
    keep = {
        "episodic_returns": [[int(a), float(b)] for a, b in s["episodic_returns"]],
        "wall_time": float(s["wall_time"]),
        "final_mean_return": float(s["final_mean_return"]),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(keep))
    return keep


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", default="1-5", help="seeds of the 3,000-step SAC runs")
    p.add_argument("--sac-twins", default="torch,jax")
    p.add_argument("--log-dir", default=str(ROOT / "runs" / "model_based"))
    p.add_argument(
        "--pets-logs", default=None, help="TORCH_DIR,JAX_DIR: first redraw pets.md's figure from these sweeps"
    )
    opts = p.parse_args()
    seeds = parse_seeds(opts.seeds)
    if opts.pets_logs:
        write_pets_figure(dict(zip(("torch", "jax"), opts.pets_logs.split(","), strict=True)))

    rows = []  # (method, twin, seed, episode, step, return)
    with open(OUT / "pets_pendulum.runs.csv") as f:
        for r in csv.DictReader(f):
            rows.append(
                (
                    "PETS",
                    r["twin"],
                    int(r["seed"]),
                    int(r["episode"]),
                    int(r["global_step"]),
                    float(r["return"]),
                )
            )
    wall = {}
    mbpo, mbpo_wall = read_spec_curves("mbpo")  # the learning spec's runs, seeds 1-5
    for (twin, seed), curve in sorted(mbpo.items()):
        rows += [("MBPO", twin, seed, i, step, ret) for i, (step, ret) in enumerate(curve, start=1)]
        wall[("MBPO", twin, seed)] = mbpo_wall.get((twin, seed), float("nan"))
    for twin in filter(None, opts.sac_twins.split(",")):
        for seed in seeds:
            s = run_cached(
                f"algos/sac_{twin}.py", seed, opts.log_dir, env_id="Pendulum-v1", learning_starts=400
            )
            wall[("SAC", twin, seed)] = s["wall_time"]
            rows += [
                ("SAC", twin, seed, i, step, ret)
                for i, (step, ret) in enumerate(s["episodic_returns"], start=1)
            ]
            print(
                f"SAC {twin} seed {seed}: final {s['final_mean_return']:.1f} ({s['wall_time']:.0f} s)",
                flush=True,
            )
    for (twin, seed), curve in sorted(
        read_spec_curves("sac")[0].items()
    ):  # the learning suite's 30,000-step runs
        rows += [("SAC 30k", twin, seed, i, step, ret) for i, (step, ret) in enumerate(curve, start=1)]

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
        table.append(
            {
                "method": method,
                "twin": twin,
                "seed": seed,
                "steps": steps[-1],
                "steps_to_-300": steps_to_bar(steps, rets),
                "final_mean_return": round(float(np.mean(rets[-WINDOW:])), 1),
                "wall_time_s": round(wall.get((method, twin, seed), float("nan")), 1),
            }
        )
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
        medians[method] = median_steps(reached)
        print(
            f"  {method:8s} {len(got)} runs: {reached}; median {medians[method]}; final "
            f"{[t['final_mean_return'] for t in got]}"
        )
    if medians.get("SAC 30k"):
        for method in ("PETS", "MBPO"):
            if medians.get(method):
                print(
                    f"  SAC (30k runs) needs {medians['SAC 30k'] / medians[method]:.1f}x"
                    f" the real steps of {method}"
                )

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
        smooth = np.array(
            [
                [np.mean([r for _, r in c[max(0, i - WINDOW + 1) : i + 1]]) for i in range(length)]
                for c in curves
            ]
        )
        ax.plot(
            steps,
            np.median(smooth, axis=0),
            color=colour,
            label=f"{labels.get(method, method)}, {len(curves)} runs",
        )
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
