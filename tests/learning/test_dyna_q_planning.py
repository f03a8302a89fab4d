"""Tier 4 (learning): Dyna-Q reaches the optimum in fewer real steps than Q-learning.

The Dyna maze (Sutton & Barto figure 8.2), 20,000 real steps a run, seeds 1-10 of each twin, n = 50
planning updates per real step against n = 0 (plain Q-learning, the same script and seed). "The
optimum" is the first real step at which the greedy policy walks a shortest path, 14 steps
(`steps_to_optimal`; None when it never does within the run). Whether a run gets there at all depends
on what epsilon-greedy exploration happens to try: a greedy policy settled on the 16-step way round
keeps it, with or without planning (docs/algorithms/dyna_q.md, "Real steps to the goal and to the
optimum against n"). So each seed is a race between its two runs: Dyna-Q wins it when it walks a
shortest path first (or Q-learning never does), Q-learning wins it the other way round, and a seed
on which neither gets there is a tie. Asked: Dyna-Q wins more seeds than Q-learning. Measured
(docs/assets/curves/dyna_q_against_n.runs.csv has seeds 1-5):
torch Dyna-Q first on 7 of the 10 seeds, Q-learning on none, 3 ties; JAX Dyna-Q first on 9, Q-learning
on none, 1 tie (seeds 6-10 of n = 0 and 50 from the same runs as this test's, made beside that sweep).
"""

import pytest

from helpers import run_train

pytestmark = pytest.mark.learning

SEEDS = tuple(range(1, 11))
BUDGET = 20_000


def steps_to_optimum(script, log_dir, seed, n):
    s = run_train(script, log_dir, seed=seed, env_id="DynaMaze-v0", planning_steps=n, total_timesteps=BUDGET)
    return s["steps_to_optimal"]  # None: no shortest path within the budget


def first(a, b):
    """+1 when a got there first (or b never did), -1 the other way round, 0 when neither got there."""
    if a is None and b is None:
        return 0
    if b is None or (a is not None and a < b):
        return 1
    return -1 if a is None or b < a else 0


@pytest.mark.parametrize("script", ["algos/dyna_q_torch.py", "algos/dyna_q_jax.py"])
def test_planning_reaches_the_optimum_in_fewer_real_steps_than_q_learning(script, tmp_path):
    races = {
        s: (
            steps_to_optimum(script, tmp_path / f"n50_{s}", s, 50),
            steps_to_optimum(script, tmp_path / f"n0_{s}", s, 0),
        )
        for s in SEEDS
    }
    outcome = [first(*r) for r in races.values()]
    report = (
        f"real steps to a shortest path, seed: (n = 50, n = 0): {races} (None: not within {BUDGET:,}); "
        f"Dyna-Q first on {outcome.count(1)}, Q-learning first on {outcome.count(-1)}, "
        f"ties {outcome.count(0)}"
    )
    print(report)
    assert outcome.count(1) > outcome.count(-1), report
