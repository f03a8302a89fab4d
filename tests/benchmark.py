"""Speed benchmark (prints figures; not a test). Runs the twins of one algorithm side by side at
their default budget, `--repeats` times each, interleaved, and prints median wall time and SPS
(and, for the off-policy scripts, gradient steps per second over the whole run, warm-up included).

    python tests/benchmark.py ppo                 # algos/ppo_torch.py vs algos/ppo_jax.py, 400k steps
    python tests/benchmark.py ppo --repeats 3 --total-timesteps 100000
    python tests/benchmark.py dqn --set train_frequency=10 --set learning_starts=10000   # other Args
"""
import ast
import argparse
from dataclasses import replace
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import load_script, run_train  # noqa: E402


def gradient_steps(script, summary, overrides):
    """Off-policy scripts (an Args field `learning_starts`) take a gradient step every
    `train_frequency` environment steps (1 where the field is absent: SAC, TD3, DDPG) after the
    warm-up. None for the on-policy scripts."""
    if "num_updates" in summary:  # the script counted them itself
        return summary["num_updates"]
    args = replace(load_script(script).Args(), **overrides)
    if not hasattr(args, "learning_starts"):
        return None
    iterations = (summary["global_step"] - args.learning_starts) // getattr(args, "num_envs", 1)  # one step of every env
    return iterations // getattr(args, "train_frequency", 1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("algo", help="algorithm name, e.g. ppo (algos/<algo>_torch.py and _jax.py)")
    parser.add_argument("--folder", default="algos")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--total-timesteps", type=int, default=None)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override one Args field in both twins (repeatable), e.g. train_frequency=10")
    opts = parser.parse_args()
    overrides = {} if opts.total_timesteps is None else {"total_timesteps": opts.total_timesteps}
    for item in opts.set:
        field, value = item.split("=", 1)
        try:
            overrides[field] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            overrides[field] = value  # a plain string, e.g. env_id=Acrobot-v1
    if overrides:
        print(f"overrides: {overrides}")
    twins = [f"{opts.folder}/{opts.algo}_torch.py", f"{opts.folder}/{opts.algo}_jax.py"]
    results = {t: [] for t in twins}
    with tempfile.TemporaryDirectory() as log_dir:
        for _ in range(opts.repeats):  # interleaved, so drift in machine load hits both twins alike
            for script in twins:
                s = run_train(script, log_dir, **overrides)
                results[script].append(s)
                print(f"  {script}: {s['wall_time']:.1f} s, {s['sps']:,.0f} SPS, "
                      f"final mean return {s.get('final_mean_return', float('nan')):.1f}", flush=True)
    print("\n| script | steps | median wall time (s) | median SPS | median gradient steps/s | runs |")
    print("|---|---|---|---|---|---|")
    medians = {}
    for script, runs in results.items():
        medians[script] = statistics.median(r["wall_time"] for r in runs)
        updates = gradient_steps(script, runs[0], overrides)
        per_s = "-" if updates is None else f"{statistics.median(updates / r['wall_time'] for r in runs):,.0f}"
        print(f"| {script} | {runs[0]['global_step']:,} | {medians[script]:.1f} | "
              f"{statistics.median(r['sps'] for r in runs):,.0f} | {per_s} | {len(runs)} |")
    torch_t, jax_t = medians[twins[0]], medians[twins[1]]
    print(f"\nJAX / torch wall-time ratio: {jax_t / torch_t:.2f}")


if __name__ == "__main__":
    main()
