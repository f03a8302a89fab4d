"""exploration_draws of the six epsilon-greedy JAX twins (Rainbow explores with noisy layers): one
jitted call draws the coins and random actions of a block of env steps with exactly the key splits
and draws that one call per step would make, so drawing in blocks changes the speed and not a number."""

import jax
import numpy as np
import pytest

from helpers import VALUE_BASED, load_script

SCRIPTS = [f"algos/{name}_jax.py" for name in VALUE_BASED if name != "rainbow"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_block_equals_one_step_at_a_time(script):
    m = load_script(script)
    key = jax.random.PRNGKey(3)
    coins, random_actions, next_key = m.exploration_draws(40, 2, 3, key)
    assert coins.shape == (40, 2) and random_actions.shape == (40, 2)
    for t in range(
        40
    ):  # the per-step act this replaces: split in three, coin from the 2nd, action from the 3rd
        key, explore_key, action_key = jax.random.split(key, 3)
        np.testing.assert_array_equal(coins[t], jax.random.uniform(explore_key, (2,)))
        np.testing.assert_array_equal(random_actions[t], jax.random.randint(action_key, (2,), 0, 3))
    np.testing.assert_array_equal(next_key, key)  # the next block continues the same chain


@pytest.mark.parametrize("script", SCRIPTS)
def test_coins_and_actions_are_uniform(script):
    m = load_script(script)
    coins, random_actions, _ = m.exploration_draws(m.EXPLORATION_BLOCK, 8, 3, jax.random.PRNGKey(0))
    coins, random_actions = np.asarray(coins), np.asarray(random_actions)
    assert 0.0 <= coins.min() and coins.max() < 1.0
    assert abs((coins < 0.3).mean() - 0.3) < 0.015  # 8,000 coins: binomial sd 0.005
    np.testing.assert_allclose(
        np.bincount(random_actions.ravel(), minlength=3) / random_actions.size, [1 / 3] * 3, atol=0.02
    )
