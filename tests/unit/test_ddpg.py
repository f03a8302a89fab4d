"""Tier 1 for DDPG: the target in hand-computed numbers (termination cuts the bootstrap, truncation
does not), the actor's outputs inside a Box that is not [-1, 1] (scale and offset), in both twins;
and the bad-input checks."""

import jax
import numpy as np
import pytest
import torch

from helpers import conv, is_torch, load_script

TWINS = ["algos/ddpg_torch.py", "algos/ddpg_jax.py"]


@pytest.mark.parametrize("script", TWINS)
def test_target_by_hand(script):
    m, c = load_script(script), conv(script)
    # truncated (terminated 0): 1 + 0.9 * 5 = 5.5; terminated: the reward alone
    target = m.ddpg_target(c([1.0, 1.0]), c([0.0, 1.0]), c([5.0, 5.0]), 0.9)
    np.testing.assert_allclose(np.asarray(target), [5.5, 1.0], atol=1e-6)
    assert float(m.critic_loss(c([1.0, 3.0]), c([2.0, 1.0]))) == pytest.approx(2.5)  # (1 + 4) / 2
    assert float(m.ddpg_actor_loss(c([1.0, 2.0, 6.0]))) == pytest.approx(-3.0)


@pytest.mark.parametrize("script", TWINS)
def test_actor_respects_an_offset_box(script):
    """Box [0, 4] x [-3, -1]: scale (2, 1), bias (2, -2). Large pre-activations saturate tanh at the
    bounds; every output lies inside them."""
    m = load_script(script)
    low, high = np.array([0.0, -3.0], np.float32), np.array([4.0, -1.0], np.float32)
    scale, bias = (high - low) / 2, (high + low) / 2
    obs = np.random.default_rng(0).normal(scale=100.0, size=(512, 3)).astype(np.float32)
    if is_torch(script):
        torch.manual_seed(0)
        actor = m.Actor(3, 2, 16, scale, bias)
        with torch.no_grad():
            out = actor(torch.as_tensor(obs)).numpy()
    else:
        agent = m.Agent(3, 2, 16, scale, bias)
        out = np.asarray(agent.actor.apply(agent.init(jax.random.PRNGKey(0))["actor"], obs))
    assert np.all(out >= low) and np.all(out <= high)
    assert out[:, 0].max() > 3.5 and out[:, 1].min() < -2.5, "the whole box is reachable, not just [-1, 1]"


@pytest.mark.parametrize("script", TWINS)
def test_discrete_env_is_refused_naming_the_right_scripts(script, tmp_path):
    m = load_script(script)
    fw = "torch" if is_torch(script) else "jax"
    with pytest.raises(ValueError, match=f"algos/dqn_{fw}.py or algos/ppo_{fw}.py"):
        m.train(m.Args(env_id="CartPole-v1", log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"
