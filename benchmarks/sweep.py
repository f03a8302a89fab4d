"""Seed sweeps of the registered learning runs on Ray (local, or a cluster), with plain
multiprocessing as the fallback. Not a test.

    python -m benchmarks.sweep ppo_torch --seeds 1-10                 # local Ray if installed, else processes
    python -m benchmarks.sweep algos/dqn_jax.py --seeds 1-5 --engine processes --workers 2
    RAY_ADDRESS=ray://head:10001 python -m benchmarks.sweep sac_jax --seeds 1-20   # a Ray cluster
    python -m benchmarks.sweep ppo_torch --seeds 1-5 --benchmark      # wall time: sequential vs parallel

ALGO names a registered spec (tests/registry.py) by its script ("algos/ppo_torch.py" or "ppo_torch")
or its full name ("ppo_rlhf_torch-default-beta0"); with several specs for one script, all of them
run. Every seed is one task: `train(Args(seed=..., **spec.args))` in its own process, with the test
suite's settings (one torch thread, CPU JAX). The results are written exactly as `pytest -m learning`
writes them (tests/evaluation.py: write_curves, write_run_tables) into --out (docs/assets/curves/ by
default): <name>.csv with every seed's curve, .png with the mean and its 95% bootstrap band,
.runs.csv with each seed's metric and .summary.csv with mean, median and IQM [95% CI]. The spec's
bar is reported, not asserted: a sweep is for finding out, the learning suite for holding to it.

Engines. `ray` (pip install -r requirements-extra.txt): `ray.init()` joins the cluster named by
RAY_ADDRESS when it is set, and starts a local one otherwise; each seed is a remote task asking for
one CPU, so Ray runs as many at once as the cluster has cores. On a cluster the repository travels
to the workers as the job's working directory (runs/, .git and docs/assets/ left out). `processes`:
a spawn-context process pool of --workers on this machine (tests/evaluation.py run_seeds). `serial`:
one seed after another in this process.
"""

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

TESTS = Path(__file__).resolve().parents[1] / "tests"
ROOT = TESTS.parent
sys.path.insert(0, str(TESTS))
from evaluation import CURVES, format_ci, parse_seeds, run_seeds, summarize, write_curves, write_run_tables  # noqa: E402
from registry import REGISTRY  # noqa: E402


def find_specs(algo):
    """The registered specs of a script path, a script stem, or one spec's full name."""
    stem = Path(algo).stem
    specs = [s for s in REGISTRY if s.name == algo or s.script == algo or Path(s.script).stem == stem]
    if not specs:
        known = sorted({Path(s.script).stem for s in REGISTRY})
        raise SystemExit(f"no registered learning run for {algo!r}; registered scripts: {', '.join(known)}")
    return specs


def _ray_task(script, overrides, seed, log_dir):
    """One seed inside a Ray worker: the suite's thread settings, then train()."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    tests = Path.cwd() / "tests" if (Path.cwd() / "tests" / "helpers.py").exists() else TESTS
    sys.path.insert(0, str(tests))
    from helpers import run_train

    summary = run_train(script, Path(log_dir) / str(seed), seed=seed, **overrides)
    # keep what the tables and plots read (a summary may hold objects that do not travel well)
    return seed, {
        k: v for k, v in summary.items() if isinstance(v, (int, float, str, list, tuple, type(None)))
    }


def run_on_ray(script, overrides, seeds, log_dir):
    import ray

    if not ray.is_initialized():
        # The workers import this module (the task below) and tests/helpers.py: benchmarks/ and tests/
        # go on their path. On a cluster the repository travels as the job's working directory (the workers'
        # current directory, so the relative entry finds it); locally the workers share this disk.
        if os.environ.get("RAY_ADDRESS"):
            runtime_env = {
                "working_dir": str(ROOT),
                "excludes": ["runs/", ".git/", "docs/assets/"],
                "env_vars": {"PYTHONPATH": os.pathsep.join(["tests", "benchmarks", "."])},
            }
        else:
            paths = [str(TESTS), str(ROOT / "benchmarks"), str(ROOT)]
            runtime_env = {"env_vars": {"PYTHONPATH": os.pathsep.join(paths)}}
        # no dashboard: it is a web server this script does not need, and it slows the start
        ray.init(runtime_env=runtime_env, log_to_driver=False, include_dashboard=False)
    task = ray.remote(num_cpus=1)(_ray_task)
    return dict(ray.get([task.remote(script, overrides, seed, str(log_dir)) for seed in seeds]))


def pick_engine(engine):
    if engine != "auto":
        return engine
    try:
        import ray  # noqa: F401

        return "ray"
    except ImportError:
        return "processes"


def run(spec, seeds, engine, workers, log_dir, fallback=False):
    if engine == "ray":
        try:
            return run_on_ray(spec.script, dict(spec.args), seeds, log_dir)
        except Exception as err:  # noqa: BLE001
            # Ray 2.60's raylet gives up when its dashboard agent takes over 15 s to start, which
            # happens on a heavily loaded machine (ray-project/ray#65983): with --engine auto the
            # sweep goes on in a process pool, and says so; with --engine ray the error stands.
            if not fallback or os.environ.get("RAY_ADDRESS"):
                raise
            print(
                f"  Ray did not start ({type(err).__name__}: {err}); running on a process pool instead",
                flush=True,
            )
            engine = "processes"
    return run_seeds(
        spec.script, dict(spec.args), seeds, log_dir, workers=1 if engine == "serial" else workers
    )


def report(spec, results):
    values = np.array([results[s][spec.metric] for s in sorted(results)])
    for s in sorted(results):
        print(f"  seed {s}: {spec.metric} {results[s][spec.metric]:.3f}  ({results[s]['wall_time']:.1f} s)")
    print("  " + "  ".join(f"{k} {format_ci(*v, digits=3)}" for k, v in summarize(values).items()))
    if spec.threshold is None:  # a failure asserted through the at_most bounds (tests/registry.py)
        print(
            f"  no lower bar; upper bounds {spec.at_most} (the learning suite asks {len(spec.seeds)} of "
            f"{len(spec.seeds)} seeds {spec.seeds})"
        )
        return
    passing = sum(v >= spec.threshold for v in values)
    print(
        f"  bar {spec.threshold:g}: {passing} of {len(values)} seeds reach it "
        f"(the learning suite asks {len(spec.seeds) if spec.min_passing is None else spec.min_passing} of "
        f"{len(spec.seeds)} seeds {spec.seeds})"
    )
    if spec.floor is not None:
        print(
            f"  floor {spec.floor:g} (every seed): "
            f"{sum(v >= spec.floor for v in values)} of {len(values)} seeds reach it"
        )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("algo", help='a registered script ("algos/ppo_torch.py", "ppo_torch") or spec name')
    p.add_argument("--seeds", default="1-10")
    p.add_argument(
        "--engine",
        choices=("auto", "ray", "processes", "serial"),
        default="auto",
        help="auto: Ray when installed, else a process pool",
    )
    p.add_argument(
        "--workers", type=int, default=os.cpu_count(), help="processes at a time (engine processes)"
    )
    p.add_argument("--out", default=str(CURVES), help="where the CSV/PNG files go")
    p.add_argument("--log-dir", default=str(ROOT / "runs" / "sweep"))
    p.add_argument(
        "--benchmark",
        action="store_true",
        help="time the sweep twice, serial and parallel, and print both (writes nothing)",
    )
    opts = p.parse_args(argv)
    seeds = parse_seeds(opts.seeds)
    engine = pick_engine(opts.engine)
    if engine == "ray" and opts.engine == "ray":
        import ray  # noqa: F401  (a clear ImportError: pip install -r requirements-extra.txt)
    for spec in find_specs(opts.algo):
        print(f"{spec.name}: {spec.script} {spec.args} seeds {seeds} on {engine}", flush=True)
        if opts.benchmark:
            times = {}
            for mode in ("serial", engine if engine != "serial" else "processes"):
                start = time.perf_counter()
                run(
                    spec, seeds, mode, opts.workers, Path(opts.log_dir) / mode, fallback=opts.engine == "auto"
                )
                times[mode] = time.perf_counter() - start
                print(f"  {mode:9s} {len(seeds)} seeds: {times[mode]:.1f} s wall", flush=True)
            serial, parallel = times.values()
            print(f"  speed-up {serial / parallel:.2f}x on {os.cpu_count()} cores")
            continue
        start = time.perf_counter()
        results = run(spec, seeds, engine, opts.workers, opts.log_dir, fallback=opts.engine == "auto")
        print(f"  {len(seeds)} seeds in {time.perf_counter() - start:.1f} s wall")
        report(spec, results)
        write_curves(spec, results, opts.out)
        write_run_tables(spec, results, opts.out)
        print(f"  wrote {Path(opts.out) / spec.name}.csv, .png, .runs.csv, .summary.csv")


if __name__ == "__main__":
    main()
