"""Tier 2 for DDPG: on identical parameters and batches (with terminations), the twins' targets,
critic and actor losses and their gradients agree within 1e-5; the networks are the same function
on the same weights, and so is the target they give."""

import jax
import numpy as np
import pytest
import torch

from helpers import torch_to_flax_params

TOL = 1e-5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_target_and_losses_parity(twins, seed):
    pt, jx = twins
    rng = np.random.default_rng(seed)
    B = 256
    r, nq, q = (rng.normal(size=B).astype(np.float32) for _ in range(3))
    term = (rng.random(B) < 0.1).astype(np.float32)
    assert 5 < term.sum() < B
    tgt_t = pt.ddpg_target(torch.as_tensor(r), torch.as_tensor(term), torch.as_tensor(nq), 0.99)
    tgt_j = jx.ddpg_target(r, term, nq, 0.99)
    np.testing.assert_allclose(tgt_t.numpy(), np.asarray(tgt_j), atol=TOL, rtol=TOL)
    q_t = torch.tensor(q, requires_grad=True)
    loss_t = pt.critic_loss(q_t, tgt_t)
    loss_t.backward()
    loss_j, g_j = jax.value_and_grad(lambda x: jx.critic_loss(x, tgt_j))(q)
    assert abs(loss_t.item() - float(loss_j)) < TOL * max(1.0, abs(float(loss_j)))
    np.testing.assert_allclose(q_t.grad.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)
    q_t = torch.tensor(q, requires_grad=True)
    pt.ddpg_actor_loss(q_t).backward()
    np.testing.assert_allclose(
        q_t.grad.numpy(), np.asarray(jax.grad(jx.ddpg_actor_loss)(q)), atol=TOL, rtol=TOL
    )


def test_networks_and_target_agree_on_the_same_weights(twins):
    pt, jx = twins
    torch.manual_seed(0)
    obs_dim, action_dim, hidden, B = 3, 2, 32, 64
    scale, bias = np.array([2.0, 0.5], np.float32), np.array([0.0, 0.25], np.float32)
    t_actor, t_q = (
        pt.Actor(obs_dim, action_dim, hidden, scale, bias),
        pt.QNetwork(obs_dim, action_dim, hidden),
    )
    agent = jx.Agent(obs_dim, action_dim, hidden, scale, bias)
    tree = torch_to_flax_params
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(B, obs_dim)).astype(np.float32)
    rewards, term = rng.normal(size=B).astype(np.float32), (rng.random(B) < 0.2).astype(np.float32)
    with torch.no_grad():
        a_t = t_actor(torch.as_tensor(obs))
        q_t = t_q(torch.as_tensor(obs), a_t)
        tgt_t = pt.ddpg_target(torch.as_tensor(rewards), torch.as_tensor(term), q_t, 0.99)
    a_j = agent.actor.apply(tree(t_actor), obs)
    q_j = agent.qf.apply(tree(t_q), obs, a_j)
    tgt_j = jx.ddpg_target(rewards, term, q_j, 0.99)
    for x, y in ((a_t, a_j), (q_t, q_j), (tgt_t, tgt_j)):
        np.testing.assert_allclose(x.numpy(), np.asarray(y), atol=TOL, rtol=TOL)
