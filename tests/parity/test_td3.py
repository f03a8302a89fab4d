"""Tier 2 for TD3: on identical parameters and batches (with terminations), the twins' smoothed
target actions, clipped double-Q targets, critic and actor losses and their gradients agree within
1e-5; and the networks are the same function on the same weights."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import torch_to_flax_params

TOL = 1e-5


@pytest.fixture(params=[0, 1, 2])
def batch(request):
    rng = np.random.default_rng(request.param)
    B, A = 256, 3
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    low = f32(-rng.uniform(0.5, 3.0, size=A))
    high = f32(rng.uniform(0.5, 3.0, size=A))
    return {
        "target_actions": f32(rng.uniform(low, high, size=(B, A))),
        "noise": f32(rng.normal(scale=0.4, size=(B, A))),
        "scale": f32((high - low) / 2),
        "low": low,
        "high": high,
        "rewards": f32(rng.normal(size=B)),
        "terminated": f32(rng.random(B) < 0.1),
        "q1": f32(rng.normal(size=B)),
        "q2": f32(rng.normal(size=B)),
        "next_q1": f32(rng.normal(size=B)),
        "next_q2": f32(rng.normal(size=B)),
    }


def test_smoothing_and_target_parity(twins, batch):
    pt, jx = twins
    T = lambda k: torch.as_tensor(batch[k])
    a_t = pt.smoothed_target_actions(T("target_actions"), T("noise"), 0.5, T("scale"), T("low"), T("high"))
    a_j = jx.smoothed_target_actions(
        batch["target_actions"], batch["noise"], 0.5, batch["scale"], batch["low"], batch["high"]
    )
    np.testing.assert_allclose(a_t.numpy(), np.asarray(a_j), atol=TOL, rtol=TOL)
    tgt_t = pt.td3_target(T("rewards"), T("terminated"), T("next_q1"), T("next_q2"), 0.99)
    tgt_j = jx.td3_target(batch["rewards"], batch["terminated"], batch["next_q1"], batch["next_q2"], 0.99)
    np.testing.assert_allclose(tgt_t.numpy(), np.asarray(tgt_j), atol=TOL, rtol=TOL)
    q1, q2 = torch.tensor(batch["q1"], requires_grad=True), torch.tensor(batch["q2"], requires_grad=True)
    l1, l2 = pt.critic_losses(q1, q2, tgt_t)
    (l1 + l2).backward()
    loss_j, (g1, g2) = jax.value_and_grad(lambda a, b: sum(jx.critic_losses(a, b, tgt_j)), argnums=(0, 1))(
        batch["q1"], batch["q2"]
    )
    assert abs((l1 + l2).item() - float(loss_j)) < TOL * max(1.0, abs(float(loss_j)))
    np.testing.assert_allclose(q1.grad.numpy(), np.asarray(g1), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(q2.grad.numpy(), np.asarray(g2), atol=TOL, rtol=TOL)
    q1 = torch.tensor(batch["q1"], requires_grad=True)
    pt.td3_actor_loss(q1).backward()
    g = jax.grad(jx.td3_actor_loss)(batch["q1"])
    np.testing.assert_allclose(q1.grad.numpy(), np.asarray(g), atol=TOL, rtol=TOL)


def test_networks_agree_on_the_same_weights(twins):
    pt, jx = twins
    torch.manual_seed(0)
    obs_dim, action_dim, hidden, B = 3, 2, 32, 64
    scale, bias = np.array([2.0, 0.5], np.float32), np.array([0.0, 0.25], np.float32)
    t_actor = pt.Actor(obs_dim, action_dim, hidden, scale, bias)
    t_q = [pt.QNetwork(obs_dim, action_dim, hidden) for _ in range(2)]
    agent = jx.Agent(obs_dim, action_dim, hidden, scale, bias)
    actor_params = torch_to_flax_params(t_actor)
    q_trees = [torch_to_flax_params(q) for q in t_q]
    qf_params = jax.tree.map(lambda a, b: jnp.stack([a, b]), *q_trees)
    obs = np.random.default_rng(0).normal(size=(B, obs_dim)).astype(np.float32)
    with torch.no_grad():
        a_t = t_actor(torch.as_tensor(obs))
        q_t = [q(torch.as_tensor(obs), a_t) for q in t_q]
    a_j = agent.actor.apply(actor_params, obs)
    q_j = agent.q_values(qf_params, obs, a_j)
    for x, y in ((a_t, a_j), (q_t[0], q_j[0]), (q_t[1], q_j[1])):
        np.testing.assert_allclose(x.numpy(), np.asarray(y), atol=TOL, rtol=TOL)
