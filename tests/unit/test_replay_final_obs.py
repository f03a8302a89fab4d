"""The off-policy scripts store s' = the true last observation of an episode that ended, never the
next episode's first observation that gymnasium's SAME_STEP autoreset already put in next_obs.

Checked against a plain (non-vector) environment stepped with the same seed and actions: at every
step, including the time-limit truncation at step 200 of Pendulum-v1, `transition_next_obs` must
return the plain environment's observation, while next_obs itself holds the reset at that step.
"""
import gymnasium as gym
import numpy as np
import pytest

from helpers import load_script

SCRIPTS = [f"algos/{name}_{fw}.py" for name in ("sac", "td3", "ddpg") for fw in ("torch", "jax")]


@pytest.mark.parametrize("script", SCRIPTS)
def test_stored_next_obs_is_the_true_last_observation(script):
    module = load_script(script)
    envs = module.make_envs("Pendulum-v1", 1)
    plain = gym.make("Pendulum-v1")
    obs, _ = envs.reset(seed=7)
    plain_obs, _ = plain.reset(seed=7)
    np.testing.assert_allclose(obs[0], plain_obs, rtol=0, atol=0)
    rng = np.random.default_rng(0)
    truncations = 0
    for step in range(1, 201):
        action = rng.uniform(-2.0, 2.0, size=(1, 1)).astype(np.float32)
        next_obs, _, terminated, truncated, infos = envs.step(action)
        plain_next, _, plain_terminated, plain_truncated, _ = plain.step(action[0])
        stored = module.transition_next_obs(next_obs, infos)
        np.testing.assert_allclose(stored[0], plain_next, rtol=0, atol=1e-6)
        assert (terminated[0], truncated[0]) == (plain_terminated, plain_truncated)
        if truncated[0]:
            truncations += 1
            assert step == 200
            # next_obs already holds the next episode's first observation: storing it would be wrong
            assert not np.allclose(next_obs[0], plain_next)
    assert truncations == 1
    envs.close()
    plain.close()
