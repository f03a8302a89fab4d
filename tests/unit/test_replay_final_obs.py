"""The off-policy scripts store s' = the true last observation of an episode that ended, never the
next episode's first observation that gymnasium's SAME_STEP autoreset already put in next_obs.

Checked against a plain (non-vector) environment stepped with the same seed and actions: at every
step, including the time-limit truncation at step 200 of Pendulum-v1, `transition_next_obs` must
return the plain environment's observation, while next_obs itself holds the reset at that step.
The value-based scripts (DQN family, C51, QR-DQN, Rainbow) get the same check on CartPole-v1 with
random discrete actions, through terminations and through truncations by a short time limit.
"""

import gymnasium as gym
import numpy as np
import pytest

from helpers import VALUE_BASED, load_script, twin_scripts, value_based_scripts

SCRIPTS = [f"algos/{name}_{fw}.py" for name in ("sac", "td3", "ddpg") for fw in ("torch", "jax")]
VALUE_SCRIPTS = value_based_scripts()
# CartPole-v1 with a time limit short enough that random actions also reach it: the script's own
# make_envs builds it by id, so the truncation goes through the same vector env and wrappers.
SHORT_CARTPOLE = "CartPoleShortLimit-v1"
SHORT_LIMIT = 12
if SHORT_CARTPOLE not in gym.registry:
    gym.register(
        SHORT_CARTPOLE, entry_point=gym.spec("CartPole-v1").entry_point, max_episode_steps=SHORT_LIMIT
    )


def test_value_based_scripts_are_all_listed():
    assert len(VALUE_SCRIPTS) == 2 * len(VALUE_BASED) and set(VALUE_SCRIPTS) <= set(twin_scripts())


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


@pytest.mark.parametrize("env_id", ["CartPole-v1", SHORT_CARTPOLE])
@pytest.mark.parametrize("script", VALUE_SCRIPTS)
def test_value_based_stored_next_obs_is_the_true_last_observation(script, env_id):
    module = load_script(script)
    envs = module.make_envs(env_id, 1)
    plain = gym.make(env_id)
    obs, _ = envs.reset(seed=7)
    plain_obs, _ = plain.reset(seed=7)
    np.testing.assert_array_equal(obs[0], plain_obs)
    rng = np.random.default_rng(0)
    terminations = truncations = 0
    for step in range(300):
        action = rng.integers(0, 2, size=(1,))
        next_obs, _, terminated, truncated, infos = envs.step(action)
        plain_next, _, plain_terminated, plain_truncated, _ = plain.step(int(action[0]))
        stored = module.transition_next_obs(np.asarray(next_obs, dtype=np.float32), infos)
        np.testing.assert_array_equal(stored[0], plain_next)
        assert (bool(terminated[0]), bool(truncated[0])) == (plain_terminated, plain_truncated)
        if plain_terminated or plain_truncated:
            terminations += plain_terminated
            truncations += plain_truncated and not plain_terminated
            # next_obs already holds the next episode's first observation: storing it would be wrong
            assert not np.array_equal(next_obs[0], plain_next)
            plain_next, _ = plain.reset()
            np.testing.assert_array_equal(next_obs[0], plain_next)
        else:
            np.testing.assert_array_equal(next_obs[0], plain_next)
    assert terminations >= 1
    if env_id == SHORT_CARTPOLE:
        assert truncations >= 1
    envs.close()
    plain.close()
