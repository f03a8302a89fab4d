"""Speed benchmark (prints figures; not a test). Runs the twins of one algorithm side by side at
their default budget, `--repeats` times each, interleaved, and prints median wall time and SPS.

    python tests/benchmark.py ppo                 # algos/ppo_torch.py vs algos/ppo_jax.py, 400k steps
    python tests/benchmark.py ppo --repeats 3 --total-timesteps 100000
"""
import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import run_train  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("algo", help="algorithm name, e.g. ppo (algos/<algo>_torch.py and _jax.py)")
    parser.add_argument("--folder", default="algos")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--total-timesteps", type=int, default=None)
    opts = parser.parse_args()
    overrides = {} if opts.total_timesteps is None else {"total_timesteps": opts.total_timesteps}
    twins = [f"{opts.folder}/{opts.algo}_torch.py", f"{opts.folder}/{opts.algo}_jax.py"]
    results = {t: [] for t in twins}
    with tempfile.TemporaryDirectory() as log_dir:
        for _ in range(opts.repeats):  # interleaved, so drift in machine load hits both twins alike
            for script in twins:
                s = run_train(script, log_dir, **overrides)
                results[script].append(s)
                print(f"  {script}: {s['wall_time']:.1f} s, {s['sps']:,.0f} SPS, "
                      f"final mean return {s.get('final_mean_return', float('nan')):.1f}", flush=True)
    print(f"\n| script | steps | median wall time (s) | median SPS | runs |\n|---|---|---|---|---|")
    medians = {}
    for script, runs in results.items():
        medians[script] = statistics.median(r["wall_time"] for r in runs)
        print(f"| {script} | {runs[0]['global_step']:,} | {medians[script]:.1f} | "
              f"{statistics.median(r['sps'] for r in runs):,.0f} | {len(runs)} |")
    torch_t, jax_t = medians[twins[0]], medians[twins[1]]
    print(f"\nJAX / torch wall-time ratio: {jax_t / torch_t:.2f}")


if __name__ == "__main__":
    main()
