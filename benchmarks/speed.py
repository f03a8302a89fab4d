"""Speed benchmark (prints figures; not a test). Runs the twins of one algorithm side by side at
their default budget, `--repeats` times each, interleaved, and prints median wall time and SPS
(and, for the off-policy scripts, gradient steps per second over the whole run, warm-up included).
For ppo (folder algos) two more contenders join the same interleaved repeats, with the torch twin's
Args: a seed-style reference loop (benchmarks/reference_ppo.py) and stable-baselines3's PPO (skipped when
it is not installed); the table then also gives each one's final mean return (last 20 episodes).

    python -m benchmarks.speed ppo                 # ppo_torch.py, ppo_jax.py, reference loop, SB3: 400k steps
    python -m benchmarks.speed ppo --repeats 3 --total-timesteps 100000
    python -m benchmarks.speed dqn --set train_frequency=10 --set learning_starts=10000   # other Args
    python -m benchmarks.speed ddp                 # data-parallel PPO: 1 and 2 processes x 4 and 8 envs
    python -m benchmarks.speed ddp --repeats 3 --total-timesteps 200000
"""

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # reference_ppo, beside this file
from evaluation import parse_overrides  # noqa: E402
from helpers import load_script, run_train  # noqa: E402

SB3 = "stable-baselines3 PPO"
REFERENCE = "benchmarks/reference_ppo.py (seed-style loop)"


def gradient_steps(script, summary, overrides):
    """Off-policy scripts (an Args field `learning_starts`) take a gradient step every
    `train_frequency` environment steps (1 where the field is absent: SAC, TD3, DDPG) after the
    warm-up. None for the on-policy scripts."""
    if "num_updates" in summary:  # the script counted them itself
        return summary["num_updates"]
    args = replace(load_script(script).Args(), **overrides)
    if not hasattr(args, "learning_starts"):
        return None
    iterations = (summary["global_step"] - args.learning_starts) // getattr(
        args, "num_envs", 1
    )  # one step of every env
    return iterations // getattr(args, "train_frequency", 1)


def train_sb3(args) -> dict:
    """stable-baselines3's PPO with the hyperparameters of our Args; the summary keys of our scripts."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.utils import LinearSchedule
    from stable_baselines3.common.vec_env import DummyVecEnv

    class EpisodeReturns(BaseCallback):
        """Every finished episode's return, from the Monitor wrapper's info (ep_info_buffer keeps 100)."""

        def __init__(self):
            super().__init__()
            self.returns = []

        def _on_step(self):
            self.returns += [
                (self.num_timesteps, float(info["episode"]["r"]))
                for info in self.locals["infos"]
                if "episode" in info
            ]
            return True

    torch.set_num_threads(1)  # as our torch twin
    batch = args.num_envs * args.num_steps
    # Whole rollouts only, as our twins (SB3 would round up, one rollout more).
    total_timesteps = args.total_timesteps // batch * batch
    envs = make_vec_env(args.env_id, n_envs=args.num_envs, seed=args.seed, vec_env_cls=DummyVecEnv)
    model = PPO(
        "MlpPolicy",
        envs,
        n_steps=args.num_steps,
        batch_size=batch // args.num_minibatches,
        n_epochs=args.update_epochs,
        # SB3 sets the rate from the progress after each rollout: one rollout later than our twins.
        learning_rate=LinearSchedule(args.learning_rate, 0.0, 1.0) if args.anneal_lr else args.learning_rate,
        gamma=args.gamma,
        gae_lambda=args.gae_lambda,
        clip_range=args.clip_coef,
        clip_range_vf=args.clip_coef if args.clip_vloss else None,
        normalize_advantage=args.norm_adv,
        ent_coef=args.ent_coef,
        vf_coef=args.vf_coef,
        max_grad_norm=args.max_grad_norm,
        policy_kwargs=dict(
            net_arch=dict(pi=[64, 64], vf=[64, 64]),
            activation_fn=torch.nn.Tanh,
            optimizer_kwargs=dict(eps=1e-5),
        ),
        seed=args.seed,
        device="cpu",
        verbose=0,
    )
    callback = EpisodeReturns()
    start = time.time()
    model.learn(total_timesteps=total_timesteps, callback=callback)
    wall_time = time.time() - start
    envs.close()
    recent = [r for _, r in callback.returns[-20:]]
    return {
        "episodic_returns": callback.returns,
        "final_mean_return": statistics.mean(recent) if recent else float("nan"),
        "sps": model.num_timesteps / wall_time,
        "wall_time": wall_time,
        "global_step": model.num_timesteps,
    }


def extra_contenders(script, overrides):
    """For PPO: {name: function of no arguments returning a summary}, the reference loop and SB3, both
    with the torch twin's Args and the --set / --total-timesteps overrides."""
    import reference_ppo  # now, before any twin pins torch's thread count (it reads the default)

    args = replace(load_script(script).Args(), progress=False, **overrides)
    extras = {REFERENCE: lambda: reference_ppo.train(args)}
    try:
        import stable_baselines3  # noqa: F401

        extras[SB3] = lambda: train_sb3(args)
    except ImportError as error:
        print(f"stable-baselines3 PPO skipped: cannot import stable_baselines3 ({error})")
    return extras


# ----------------------------------------------------------------------------- ddp
DDP_SCRIPT = "algos/ppo_ddp_torch.py"
DDP_LAYOUTS = [(1, 4), (1, 8), (2, 4), (2, 8)]  # (processes, envs per process)


def run_ddp(nproc, num_envs, total_timesteps, log_dir):
    """One torchrun launch of algos/ppo_ddp_torch.py on the CPU (gloo); returns rank 0's SPS over
    the training loop (its last charts/SPS scalar: environment steps of all ranks per second, start-up
    and the process group set-up excluded) and the launch's wall time (start-up included)."""
    import os
    import subprocess

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    root = Path(__file__).resolve().parents[1]
    run_log = Path(log_dir) / f"{nproc}x{num_envs}_{time.time_ns()}"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        DDP_SCRIPT,
        "--total-timesteps",
        str(total_timesteps),
        "--num-envs",
        str(num_envs),
        "--log-dir",
        str(run_log),
        "--no-progress",
        "--no-cuda",
    ]
    start = time.time()
    subprocess.run(
        cmd, cwd=root, check=True, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1")
    )
    wall_time = time.time() - start
    (run_dir,) = list(run_log.iterdir())  # only rank 0 writes one
    events = EventAccumulator(str(run_dir))
    events.Reload()
    sps = events.Scalars("charts/SPS")[-1]
    return {"sps": sps.value, "global_step": sps.step, "wall_time": wall_time}


def ddp_main(opts):
    """`python -m benchmarks.speed ddp`: PPO SPS of algos/ppo_ddp_torch.py at 1 process x 4 and x 8
    envs and 2 processes x 4 and x 8, interleaved repeats, medians. Two comparisons: the same work
    per process (2 x n vs 1 x n: does a second process add steps per second?) and the same total
    environments (2 x 4 vs 1 x 8: does splitting a fixed batch over two processes speed it up?)."""
    import os

    print(
        f"{DDP_SCRIPT}, CartPole-v1, {opts.total_timesteps:,} steps, torchrun on the CPU (gloo), "
        f"1 torch thread per process; {os.cpu_count()} CPU cores here"
    )
    results = {layout: [] for layout in DDP_LAYOUTS}
    with tempfile.TemporaryDirectory() as log_dir:
        for _ in range(opts.repeats):  # interleaved, so drift in machine load hits all layouts alike
            for nproc, num_envs in DDP_LAYOUTS:
                r = run_ddp(nproc, num_envs, opts.total_timesteps, log_dir)
                results[(nproc, num_envs)].append(r)
                print(
                    f"  {nproc} process(es) x {num_envs} envs: {r['sps']:,.0f} SPS, "
                    f"launch wall time {r['wall_time']:.1f} s",
                    flush=True,
                )
    print(
        "\n| processes x envs each | total envs | steps | median SPS | SPS per process "
        "| median launch wall time (s) | runs |"
    )
    print("|---|---|---|---|---|---|---|")
    medians = {}
    for (nproc, num_envs), runs in results.items():
        medians[(nproc, num_envs)] = statistics.median(r["sps"] for r in runs)
        print(
            f"| {nproc} x {num_envs} | {nproc * num_envs} | {runs[0]['global_step']:,} | "
            f"{medians[(nproc, num_envs)]:,.0f} | {medians[(nproc, num_envs)] / nproc:,.0f} | "
            f"{statistics.median(r['wall_time'] for r in runs):.1f} | {len(runs)} |"
        )
    print("\nSPS ratios (>= 1: the 2-process run is not slower per environment step):")
    for n in (4, 8):
        print(f"  2 x {n} / 1 x {n} (the same work per process): {medians[(2, n)] / medians[(1, n)]:.2f}")
    print(
        f"  2 x 4 / 1 x 8 (the same 8 environments split over two processes): "
        f"{medians[(2, 4)] / medians[(1, 8)]:.2f}"
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "algo",
        help="algorithm name, e.g. ppo (algos/<algo>_torch.py and _jax.py), or ddp "
        "(algos/ppo_ddp_torch.py under torchrun at 1 and 2 processes)",
    )
    parser.add_argument("--folder", default="algos")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--total-timesteps", type=int, default=None)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override one Args field in both twins (repeatable), e.g. train_frequency=10; "
        "for ppo also in the reference loop and SB3",
    )
    opts = parser.parse_args()
    if opts.algo == "ddp":  # torchrun launches of one script at several layouts, not a pair of twins
        if opts.set or opts.folder != "algos":
            parser.error("ddp takes only --repeats and --total-timesteps")
        opts.total_timesteps = opts.total_timesteps or 100_000
        return ddp_main(opts)
    overrides = {} if opts.total_timesteps is None else {"total_timesteps": opts.total_timesteps}
    overrides.update(parse_overrides(opts.set))
    if overrides:
        print(f"overrides: {overrides}")
    twins = [f"{opts.folder}/{opts.algo}_torch.py", f"{opts.folder}/{opts.algo}_jax.py"]
    extras = extra_contenders(twins[0], overrides) if (opts.algo, opts.folder) == ("ppo", "algos") else {}
    results = {name: [] for name in twins + list(extras)}
    with tempfile.TemporaryDirectory() as log_dir:
        for _ in range(opts.repeats):  # interleaved, so drift in machine load hits all contenders alike
            for name in results:
                s = extras[name]() if name in extras else run_train(name, log_dir, **overrides)
                results[name].append(s)
                print(
                    f"  {name}: {s['wall_time']:.1f} s, {s['sps']:,.0f} SPS, "
                    f"final mean return {s.get('final_mean_return', float('nan')):.1f}",
                    flush=True,
                )
    return_col = " median final mean return |" if extras else ""  # only in the PPO comparison
    print(
        "\n| script | steps | median wall time (s) | median SPS | median gradient steps/s |"
        f"{return_col} runs |"
    )
    print("|---|---|---|---|---|" + ("---|" if extras else "") + "---|")
    medians = {}
    for name, runs in results.items():
        medians[name] = statistics.median(r["wall_time"] for r in runs)
        updates = None if name in extras else gradient_steps(name, runs[0], overrides)
        per_s = (
            "-" if updates is None else f"{statistics.median(updates / r['wall_time'] for r in runs):,.0f}"
        )
        ret = f" {statistics.median(r['final_mean_return'] for r in runs):.1f} |" if extras else ""
        print(
            f"| {name} | {runs[0]['global_step']:,} | {medians[name]:.1f} | "
            f"{statistics.median(r['sps'] for r in runs):,.0f} | {per_s} |{ret} {len(runs)} |"
        )
    torch_t, jax_t = medians[twins[0]], medians[twins[1]]
    print(f"\nJAX / torch wall-time ratio: {jax_t / torch_t:.2f}")
    for name in extras:
        print(f"{name} / torch wall-time ratio: {medians[name] / torch_t:.2f}")
    if extras:
        from reference_ppo import DEFAULT_THREADS  # imported already, by extra_contenders

        pinned = "our torch twin and SB3 run" if SB3 in extras else "our torch twin runs"
        print(
            f"\nNote: torch threads: {pinned} on 1 intra-op thread (torch.set_num_threads(1)); "
            f"the reference loop on torch's default ({DEFAULT_THREADS} here)."
        )


if __name__ == "__main__":
    main()
