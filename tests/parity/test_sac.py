"""Tier 2 for SAC: on identical parameters and batches (with terminations), the twins' tanh term,
squashed samples and log-probs, critic targets and losses, actor and temperature losses and their
gradients agree within 1e-5; and the networks are the same function on the same weights."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import torch_dense

TOL = 1e-5


@pytest.fixture(params=[0, 1, 2])
def batch(request):
    rng = np.random.default_rng(request.param)
    B, A = 256, 3
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    return {
        "u": f32(rng.normal(scale=3.0, size=(B, A))),
        "mean": f32(rng.normal(size=(B, A))),
        "log_std": f32(rng.uniform(-5.0, 2.0, size=(B, A))),
        "noise": f32(rng.normal(size=(B, A))),
        "scale": f32(rng.uniform(0.5, 3.0, size=A)),
        "bias": f32(rng.normal(size=A)),
        "rewards": f32(rng.normal(size=B)),
        "terminated": f32(rng.random(B) < 0.1),
        "q1": f32(rng.normal(size=B)),
        "q2": f32(rng.normal(size=B)),
        "next_q1": f32(rng.normal(size=B)),
        "next_q2": f32(rng.normal(size=B)),
        "log_prob": f32(rng.normal(size=B)),
    }


def test_batch_has_terminations(batch):
    assert 5 < batch["terminated"].sum() < 256


def test_tanh_term_parity(twins, batch):
    pt, jx = twins
    u_t = torch.tensor(batch["u"], requires_grad=True)
    v_t = pt.tanh_log_det_jacobian(u_t)
    v_t.sum().backward()
    v_j, g_j = jax.value_and_grad(lambda u: jx.tanh_log_det_jacobian(u).sum())(batch["u"])
    np.testing.assert_allclose(
        v_t.detach().numpy(), np.asarray(jx.tanh_log_det_jacobian(batch["u"])), atol=TOL, rtol=TOL
    )
    np.testing.assert_allclose(u_t.grad.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)


def test_squashed_sample_parity(twins, batch):
    pt, jx = twins
    keys = ("mean", "log_std", "noise", "scale", "bias")
    a_t, lp_t = pt.sample_squashed(*(torch.as_tensor(batch[k]) for k in keys))
    a_j, lp_j = jx.sample_squashed(*(batch[k] for k in keys))
    np.testing.assert_allclose(a_t.numpy(), np.asarray(a_j), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(lp_t.numpy(), np.asarray(lp_j), atol=TOL, rtol=TOL)


@pytest.mark.parametrize("alpha", [0.02, 0.2, 1.0])
def test_critic_target_and_losses_parity(twins, batch, alpha):
    pt, jx = twins
    T = lambda k: torch.as_tensor(batch[k])
    tgt_t = pt.soft_q_target(
        T("rewards"), T("terminated"), T("next_q1"), T("next_q2"), T("log_prob"), alpha, 0.99
    )
    tgt_j = jx.soft_q_target(
        batch["rewards"],
        batch["terminated"],
        batch["next_q1"],
        batch["next_q2"],
        batch["log_prob"],
        alpha,
        0.99,
    )
    np.testing.assert_allclose(tgt_t.numpy(), np.asarray(tgt_j), atol=TOL, rtol=TOL)
    q1, q2 = torch.tensor(batch["q1"], requires_grad=True), torch.tensor(batch["q2"], requires_grad=True)
    l1_t, l2_t = pt.critic_losses(q1, q2, tgt_t)
    (l1_t + l2_t).backward()
    f = lambda a, b: sum(jx.critic_losses(a, b, tgt_j))
    loss_j, (g1, g2) = jax.value_and_grad(f, argnums=(0, 1))(batch["q1"], batch["q2"])
    assert abs((l1_t + l2_t).item() - float(loss_j)) < TOL * max(1.0, abs(float(loss_j)))
    np.testing.assert_allclose(q1.grad.numpy(), np.asarray(g1), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(q2.grad.numpy(), np.asarray(g2), atol=TOL, rtol=TOL)


def test_actor_and_temperature_loss_parity(twins, batch):
    pt, jx = twins
    q1, q2 = torch.tensor(batch["q1"], requires_grad=True), torch.tensor(batch["q2"], requires_grad=True)
    lp = torch.tensor(batch["log_prob"], requires_grad=True)
    loss_t = pt.sac_actor_loss(q1, q2, lp, 0.3)
    loss_t.backward()
    loss_j, grads = jax.value_and_grad(lambda a, b, c: jx.sac_actor_loss(a, b, c, 0.3), argnums=(0, 1, 2))(
        batch["q1"], batch["q2"], batch["log_prob"]
    )
    assert abs(loss_t.item() - float(loss_j)) < TOL
    for g_t, g_j in zip((q1.grad, q2.grad, lp.grad), grads):
        np.testing.assert_allclose(g_t.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)
    la = torch.tensor(np.log(0.3), dtype=torch.float32, requires_grad=True)
    a_t = pt.temperature_loss(la, torch.as_tensor(batch["log_prob"]), -3.0)
    a_t.backward()
    a_j, g_j = jax.value_and_grad(jx.temperature_loss)(jnp.float32(np.log(0.3)), batch["log_prob"], -3.0)
    assert abs(a_t.item() - float(a_j)) < TOL and abs(la.grad.item() - float(g_j)) < TOL


def test_networks_and_critic_targets_agree_on_the_same_weights(twins):
    """torch weights copied into the JAX pytrees: same actor outputs, same sampled actions for the
    same noise, same Q values and the same soft target on a batch with terminations."""
    pt, jx = twins
    torch.manual_seed(0)
    obs_dim, action_dim, hidden, B = 3, 2, 32, 64
    scale, bias = np.array([2.0, 0.5], np.float32), np.array([0.0, 0.25], np.float32)
    t_actor = pt.Actor(obs_dim, action_dim, hidden, scale, bias)
    t_q = [pt.QNetwork(obs_dim, action_dim, hidden) for _ in range(2)]
    agent = jx.Agent(obs_dim, action_dim, hidden, scale, bias)

    dense = torch_dense
    lin = lambda mod: [l for l in mod.modules() if isinstance(l, torch.nn.Linear)]
    actor_layers = lin(t_actor.trunk) + [t_actor.mean, t_actor.log_std]
    actor_params = {"params": {f"Dense_{i}": dense(l) for i, l in enumerate(actor_layers)}}
    q_trees = [{"params": {f"Dense_{i}": dense(l) for i, l in enumerate(lin(q))}} for q in t_q]
    qf_params = jax.tree.map(lambda a, b: jnp.stack([a, b]), *q_trees)

    rng = np.random.default_rng(0)
    obs = rng.normal(size=(B, obs_dim)).astype(np.float32)
    noise = rng.normal(size=(B, action_dim)).astype(np.float32)
    rewards = rng.normal(size=B).astype(np.float32)
    terminated = (rng.random(B) < 0.2).astype(np.float32)

    mean_t, log_std_t = t_actor(torch.as_tensor(obs))
    mean_j, log_std_j = agent.actor.apply(actor_params, obs)
    np.testing.assert_allclose(mean_t.detach().numpy(), np.asarray(mean_j), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(log_std_t.detach().numpy(), np.asarray(log_std_j), atol=TOL, rtol=TOL)
    with torch.no_grad():
        a_t, lp_t = pt.sample_squashed(
            mean_t, log_std_t, torch.as_tensor(noise), t_actor.action_scale, t_actor.action_bias
        )
        q_t = [q(torch.as_tensor(obs), a_t) for q in t_q]
        tgt_t = pt.soft_q_target(
            torch.as_tensor(rewards), torch.as_tensor(terminated), q_t[0], q_t[1], lp_t, 0.2, 0.99
        )
    a_j, lp_j = jx.sample_squashed(mean_j, log_std_j, noise, agent.action_scale, agent.action_bias)
    q_j = agent.q_values(qf_params, obs, a_j)
    tgt_j = jx.soft_q_target(rewards, terminated, q_j[0], q_j[1], lp_j, 0.2, 0.99)
    for x, y in ((a_t, a_j), (lp_t, lp_j), (q_t[0], q_j[0]), (q_t[1], q_j[1]), (tgt_t, tgt_j)):
        np.testing.assert_allclose(x.numpy(), np.asarray(y), atol=TOL, rtol=TOL)
