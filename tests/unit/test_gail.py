"""Tier 1 for GAIL: the discriminator loss, its gradient, the optimal discriminator and the reward
-log D on hand numbers (the GAIL worked problem) in both twins; the reward is high where D is low;
the expert pairs; and the bad-input checks that must stop a run before any work."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import gae_on_column as gae
from helpers import load_script

TWINS = ["algos/gail_torch.py", "algos/gail_jax.py"]
LN2, LN3, LN4_3 = math.log(2), math.log(3), math.log(4 / 3)


def is_torch(script):
    return script.endswith("torch.py")


def loss_and_grads(script, learner_logits, expert_logits):
    """discriminator_loss and its gradients with respect to both logit vectors, as numpy."""
    m = load_script(script)
    lo, ex = (np.asarray(x, dtype=np.float32) for x in (learner_logits, expert_logits))
    if is_torch(script):
        lt, et = torch.tensor(lo, requires_grad=True), torch.tensor(ex, requires_grad=True)
        loss = m.discriminator_loss(lt, et)
        loss.backward()
        return loss.item(), lt.grad.numpy(), et.grad.numpy()
    loss, (gl, ge) = jax.value_and_grad(m.discriminator_loss, argnums=(0, 1))(
        jnp.asarray(lo), jnp.asarray(ex)
    )
    return float(loss), np.asarray(gl), np.asarray(ge)


def reward(script, logits):
    m = load_script(script)
    x = np.asarray(logits, dtype=np.float32)
    out = m.gail_reward(torch.as_tensor(x)) if is_torch(script) else m.gail_reward(jnp.asarray(x))
    return np.asarray(out)


# ----------------------------------------------------------------------------- worked problem
@pytest.mark.parametrize("script", TWINS)
def test_discriminator_loss_by_hand(script):
    # Convention: learner = label 1, expert = label 0, D = sigmoid(logit) = P(learner).
    # learner logits [0, ln 3] -> D = [1/2, 3/4] -> -log D = [ln 2, ln 4/3], mean 0.490415
    # expert logits [0, -ln 3] -> D = [1/2, 1/4] -> -log(1 - D) = [ln 2, ln 4/3], mean 0.490415
    loss, g_learner, g_expert = loss_and_grads(script, [0.0, LN3], [0.0, -LN3])
    assert loss == pytest.approx(LN2 + LN4_3, abs=1e-6)  # 0.980829
    # d/dlogit: learner -(1 - D) / 2 = [-0.25, -0.125]; expert D / 2 = [0.25, 0.125]
    np.testing.assert_allclose(g_learner, [-0.25, -0.125], atol=1e-6)
    np.testing.assert_allclose(g_expert, [0.25, 0.125], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_confused_discriminator_loss_is_2_log_2(script):
    # D = 1/2 everywhere (the equilibrium when the occupancy measures match): loss = 2 ln 2
    loss, _, _ = loss_and_grads(script, [0.0] * 5, [0.0] * 3)
    assert loss == pytest.approx(2 * LN2, abs=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_optimal_discriminator_is_the_occupancy_ratio(script):
    # Two pairs x, y. Learner batch [x, x, x, y], expert batch [x, y, y, y]:
    # the optimum is D*(x) = 3 / (3 + 1) = 3/4 (logit ln 3), D*(y) = 1/4 (logit -ln 3), i.e.
    # D* = rho_learner / (rho_learner + rho_expert). The loss gradient vanishes there:
    # d/dl_x = 3 * (-(1 - 3/4)) / 4 + (3/4) / 4 = -0.1875 + 0.1875 = 0, likewise for y.
    m = load_script(script)
    lx_ly = np.array([LN3, -LN3], dtype=np.float32)
    learner_idx, expert_idx = np.array([0, 0, 0, 1]), np.array([0, 1, 1, 1])
    if is_torch(script):
        l = torch.tensor(lx_ly, requires_grad=True)
        m.discriminator_loss(l[learner_idx], l[expert_idx]).backward()
        g = l.grad.numpy()
    else:
        g = np.asarray(
            jax.grad(lambda l: m.discriminator_loss(l[learner_idx], l[expert_idx]))(jnp.asarray(lx_ly))
        )
    np.testing.assert_allclose(g, [0.0, 0.0], atol=1e-6)
    # ... and the learner's reward there: -log 3/4 = 0.2877 on the over-visited x, -log 1/4 = 1.3863
    # on y, which the expert visits three times as often: the learner is pushed towards y.
    np.testing.assert_allclose(reward(script, lx_ly), [LN4_3, math.log(4)], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_reward_minus_log_d_by_hand(script):
    # logits [ln 3, 0, -ln 3] -> D = [3/4, 1/2, 1/4] -> -log D = [0.287682, 0.693147, 1.386294]
    np.testing.assert_allclose(reward(script, [LN3, 0.0, -LN3]), [LN4_3, LN2, math.log(4)], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_reward_is_high_where_d_is_low_and_always_positive(script):
    logits = np.linspace(-30, 30, 61)
    r = reward(script, logits)  # D = sigmoid(logit) increases along the grid
    assert np.all(np.diff(r) < 0), "reward decreases as D grows"
    assert np.all(r >= 0) and np.all(np.isfinite(r)), "-log D >= 0 and finite even at D ~ 0 or 1"
    assert r[0] == pytest.approx(30.0, abs=1e-5)  # -log sigmoid(-30) = 30 + log(1 + e^-30)


@pytest.mark.parametrize("script", TWINS)
def test_discriminator_inputs_append_one_hot_actions(script):
    m = load_script(script)
    obs = np.array([[0.1, 0.2], [0.3, 0.4]], dtype=np.float32)
    actions = np.array([2, 0])
    conv = torch.as_tensor if is_torch(script) else jnp.asarray
    x = np.asarray(m.discriminator_inputs(conv(obs), conv(actions), 3))
    np.testing.assert_allclose(x, [[0.1, 0.2, 0, 0, 1], [0.3, 0.4, 1, 0, 0]], atol=1e-7)


@pytest.mark.parametrize("script", TWINS)
def test_gae_as_in_ppo(script):
    adv, _ = gae(script, [1, 0, 2, 1], [0.5, 0.4, 0.6, 0.3], [0, 1, 0, 0], 0.2, gamma=0.9, lam=0.8)
    np.testing.assert_allclose(adv, [0.572, -0.4, 2.3036, 0.88], atol=1e-6)  # worked problem 3


@pytest.mark.parametrize("script", TWINS)
def test_expert_pairs_come_from_the_first_k_trajectories(script):
    m = load_script(script)
    obs, actions = m.load_expert_pairs("cartpole-expert", 2)
    import offline_data

    data = offline_data.load_dataset("cartpole-expert")
    end = offline_data.episode_bounds(data)[1][1]
    assert len(obs) == len(actions) == end
    np.testing.assert_array_equal(actions, data["actions"][:end])
    all_obs, _ = m.load_expert_pairs("cartpole-expert", 0)
    assert len(all_obs) == len(data["actions"])


# ----------------------------------------------------------------------------- bad input
def refused(script, tmp_path, match, **overrides):
    m = load_script(script)
    with pytest.raises(ValueError, match=match):
        m.train(m.Args(log_dir=str(tmp_path), progress=False, **overrides))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"


@pytest.mark.parametrize("script", TWINS)
def test_continuous_env_is_refused_saying_there_is_no_continuous_script(script, tmp_path):
    refused(
        script, tmp_path, "no continuous-action GAIL script", env_id="Pendulum-v1", dataset="pendulum-expert"
    )


@pytest.mark.parametrize("script", TWINS)
def test_unknown_dataset_lists_the_valid_ones(script, tmp_path):
    refused(script, tmp_path, "valid: .*cartpole-expert", dataset="cartpole-perfect")


@pytest.mark.parametrize("script", TWINS)
def test_dataset_of_another_env_is_refused(script, tmp_path):
    refused(script, tmp_path, "collected on Pendulum-v1", dataset="pendulum-expert")


@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize("k, match", [(-1, "must be >= 0"), (10_000, "holds 40 trajectories")])
def test_expert_episodes_out_of_range(script, tmp_path, k, match):
    refused(script, tmp_path, match, expert_episodes=k)


@pytest.mark.parametrize("script", TWINS)
def test_minibatches_must_divide_the_batch(script, tmp_path):
    refused(
        script, tmp_path, "--num-minibatches must be a divisor", num_envs=3, num_steps=10, num_minibatches=4
    )


@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize("name", ["disc_steps", "disc_batch_size"])
def test_discriminator_sizes_must_be_positive(script, tmp_path, name):
    refused(script, tmp_path, f"--{name.replace('_', '-')} must be >= 1 \\(got 0\\)", **{name: 0})
