"""Determinism: one seed is one run, however the script is started.

A figure in the docs is only reproducible if the same seed gives the same curve from the command
line, from `train()` in a Python session and under pytest with xdist, whatever the thread settings
of the process. Each PPO twin runs a short seeded training three ways and the runs must agree to the
bit (every episode's return and step, and the final losses):
- in this process (a pytest worker: OMP_NUM_THREADS=1 from conftest, other tests ran before);
- in a fresh interpreter with OMP_NUM_THREADS=1 (torch) / XLA's Eigen pool off (JAX);
- in a fresh interpreter with the machine's default threads (no OMP_NUM_THREADS, no XLA_FLAGS).
What makes it hold: the torch twin pins one intra-op thread inside train() (torch.set_num_threads(1));
the JAX twin's XLA CPU kernels reduce in the same order whatever the thread pool size (measured here).
Across CPUs (another SIMD width) the same seed may still give another run; that is why learning
thresholds are set over several seeds (tests/registry.py, docs/reproducibility.md).
"""

import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT, run_train

BUDGET = dict(total_timesteps=8 * 128 * 6)  # 6 updates: enough for the update to shape the returns

RUNNER = """
import json, sys
sys.path.insert(0, {tests!r})
from helpers import run_train
s = run_train({script!r}, {log_dir!r}, seed=3, **{budget!r})
print(json.dumps({{"returns": s["episodic_returns"], "losses": s["losses"]}}))
"""


def fingerprint(summary):
    """What must agree: (step, return) of every episode and the last update's losses, as JSON
    (floats printed to full precision, so equal strings mean bit-equal floats)."""
    return json.dumps({"returns": summary["episodic_returns"], "losses": summary["losses"]})


def run_fresh(script, log_dir, env_changes):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "XLA_FLAGS")}
    env.update(env_changes)
    code = RUNNER.format(tests=str(ROOT / "tests"), script=script, log_dir=str(log_dir), budget=BUDGET)
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    return json.dumps(json.loads(out.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "script, pinned",
    [
        ("algos/ppo_torch.py", {"OMP_NUM_THREADS": "1"}),
        (
            "algos/ppo_jax.py",
            {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"},
        ),
    ],
)
def test_same_seed_same_run_however_started(script, pinned, tmp_path):
    in_process = fingerprint(run_train(script, tmp_path / "a", seed=3, **BUDGET))
    assert len(json.loads(in_process)["returns"]) > 50  # enough episodes to tell runs apart
    assert run_fresh(script, tmp_path / "b", pinned) == in_process
    assert run_fresh(script, tmp_path / "c", {}) == in_process


def test_a_compilation_cache_hit_gives_the_same_run(tmp_path):
    """tests/conftest.py gives the suite one persistent JAX compilation cache, so most JAX runs in the
    suite load their programs instead of compiling them. A loaded program must be the one a compile
    gives: the JAX PPO twin once into an empty cache folder (every program compiled and stored), then
    again from it (every program loaded: nothing new is stored), and the two runs agree to the bit."""
    cache = tmp_path / "cache"
    cache.mkdir()
    env = {"JAX_COMPILATION_CACHE_DIR": str(cache), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    stored = lambda: {p.name for p in cache.iterdir() if not p.name.endswith("-atime")}
    compiled = run_fresh("algos/ppo_jax.py", tmp_path / "a", env)
    entries = stored()
    assert entries, "the first run stored no compiled program"
    loaded = run_fresh("algos/ppo_jax.py", tmp_path / "b", env)
    assert stored() == entries, "the second run compiled a program the first had stored"
    assert loaded == compiled
    assert len(json.loads(compiled)["returns"]) > 50
