"""Tier 2 for TD3+BC: on identical inputs (terminals and timeouts included), the twins' state
normaliser, dataset preparation, smoothed target actions, clipped double-Q targets, critic losses,
lambda and the actor loss (with and without the BC term) agree within 1e-5, values and gradients;
and the networks are the same function on the same weights."""

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
    B, A, O = 256, 3, 5
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    low = f32(-rng.uniform(0.5, 3.0, size=A))
    high = f32(rng.uniform(0.5, 3.0, size=A))
    return {
        "observations": f32(rng.normal(loc=3.0, scale=rng.uniform(0.1, 5.0, size=O), size=(B, O))),
        "next_observations": f32(rng.normal(size=(B, O))),
        "data_actions": f32(rng.uniform(low, high, size=(B, A))),
        "policy_actions": f32(rng.uniform(low, high, size=(B, A))),
        "target_actions": f32(rng.uniform(low, high, size=(B, A))),
        "noise": f32(rng.normal(scale=0.4, size=(B, A))),
        "scale": f32((high - low) / 2),
        "low": low,
        "high": high,
        "rewards": f32(rng.normal(size=B)),
        "terminals": f32(rng.random(B) < 0.1),
        "timeouts": f32(rng.random(B) < 0.1),
        "q1": f32(rng.normal(loc=-20.0, scale=10.0, size=B)),
        "q2": f32(rng.normal(size=B)),
        "next_q1": f32(rng.normal(size=B)),
        "next_q2": f32(rng.normal(size=B)),
    }


def close(x, y):
    x = x.detach().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    np.testing.assert_allclose(x, np.asarray(y), atol=TOL, rtol=TOL)


def test_normalizer_and_dataset_parity(twins, batch):
    pt, jx = twins
    mean_t, std_t = pt.state_normalizer(batch["observations"])
    mean_j, std_j = jx.state_normalizer(batch["observations"])
    close(mean_t, mean_j)
    close(std_t, std_j)
    data = {
        "observations": batch["observations"],
        "next_observations": batch["next_observations"],
        "actions": batch["data_actions"],
        "rewards": batch["rewards"],
        "terminals": batch["terminals"],
        "timeouts": batch["timeouts"],
    }
    a_t, a_j = pt.prepare_dataset(data, mean_t, std_t), jx.prepare_dataset(data, mean_j, std_j)
    assert a_t.keys() == a_j.keys()
    for k in a_t:
        close(a_t[k], a_j[k])


def test_smoothing_target_and_critic_parity(twins, batch):
    pt, jx = twins
    T = lambda k: torch.as_tensor(batch[k])
    close(
        pt.smoothed_target_actions(T("target_actions"), T("noise"), 0.5, T("scale"), T("low"), T("high")),
        jx.smoothed_target_actions(
            batch["target_actions"], batch["noise"], 0.5, batch["scale"], batch["low"], batch["high"]
        ),
    )
    tgt_t = pt.td3_target(T("rewards"), T("terminals"), T("next_q1"), T("next_q2"), 0.99)
    tgt_j = jx.td3_target(batch["rewards"], batch["terminals"], batch["next_q1"], batch["next_q2"], 0.99)
    close(tgt_t, tgt_j)
    q1, q2 = torch.tensor(batch["q1"], requires_grad=True), torch.tensor(batch["q2"], requires_grad=True)
    l1, l2 = pt.critic_losses(q1, q2, tgt_t)
    (l1 + l2).backward()
    loss_j, (g1, g2) = jax.value_and_grad(lambda a, b: sum(jx.critic_losses(a, b, tgt_j)), argnums=(0, 1))(
        batch["q1"], batch["q2"]
    )
    assert abs((l1 + l2).item() - float(loss_j)) < TOL * max(1.0, abs(float(loss_j)))
    close(q1.grad, g1)
    close(q2.grad, g2)


@pytest.mark.parametrize("bc", [True, False])
def test_lambda_and_actor_loss_parity(twins, batch, bc):
    pt, jx = twins
    close(pt.bc_lambda(torch.as_tensor(batch["q1"]), 2.5), jx.bc_lambda(batch["q1"], 2.5))
    q = torch.tensor(batch["q1"], requires_grad=True)
    pi = torch.tensor(batch["policy_actions"], requires_grad=True)
    loss_t, bc_t = pt.td3_bc_actor_loss(q, pi, torch.as_tensor(batch["data_actions"]), 2.5, bc)
    loss_t.backward()
    f = lambda q_, pi_: jx.td3_bc_actor_loss(q_, pi_, batch["data_actions"], 2.5, bc)
    (loss_j, bc_j), (gq, gpi) = jax.value_and_grad(f, argnums=(0, 1), has_aux=True)(
        batch["q1"], batch["policy_actions"]
    )
    close(loss_t, loss_j)
    close(bc_t, bc_j)
    close(q.grad, gq)
    close(pi.grad if bc else torch.zeros_like(pi), gpi)  # --no-bc: pi is not in the loss (no torch grad)
    # lambda is a constant to the gradient in both twins
    assert not pt.bc_lambda(torch.tensor(batch["q1"], requires_grad=True), 2.5).requires_grad
    close(jax.grad(lambda q_: jx.bc_lambda(q_, 2.5))(batch["q1"]), np.zeros_like(batch["q1"]))


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
    for x, y in ((a_t, a_j), (q_t[0], q_j[0]), (q_t[1], q_j[1]), (q_t[0], agent.q1(qf_params, obs, a_j))):
        close(x, y)


def test_actor_gradient_through_the_networks(twins):
    """The actor's full loss gradient (through Q1's input and the BC term) on the same weights."""
    pt, jx = twins
    torch.manual_seed(1)
    obs_dim, action_dim, hidden, B = 3, 2, 32, 64
    scale, bias = np.array([2.0, 0.5], np.float32), np.array([0.0, 0.25], np.float32)
    t_actor, t_q1 = (
        pt.Actor(obs_dim, action_dim, hidden, scale, bias),
        pt.QNetwork(obs_dim, action_dim, hidden),
    )
    agent = jx.Agent(obs_dim, action_dim, hidden, scale, bias)
    actor_params = torch_to_flax_params(t_actor)
    q_tree = torch_to_flax_params(t_q1)
    qf_params = jax.tree.map(lambda a: jnp.stack([a, a]), q_tree)
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(B, obs_dim)).astype(np.float32)
    data_actions = rng.uniform(-0.5, 0.5, size=(B, action_dim)).astype(np.float32)
    pi = t_actor(torch.as_tensor(obs))
    loss_t, _ = pt.td3_bc_actor_loss(t_q1(torch.as_tensor(obs), pi), pi, torch.as_tensor(data_actions), 2.5)
    loss_t.backward(inputs=list(t_actor.parameters()))

    def loss_fn(params):
        pi_j = agent.actor.apply(params, obs)
        return jx.td3_bc_actor_loss(agent.q1(qf_params, obs, pi_j), pi_j, data_actions, 2.5)[0]

    loss_j, grads = jax.value_and_grad(loss_fn)(actor_params)
    close(loss_t, loss_j)
    for i, l in enumerate(m for m in t_actor.modules() if isinstance(m, torch.nn.Linear)):
        close(l.weight.grad.T, grads["params"][f"Dense_{i}"]["kernel"])
        close(l.bias.grad, grads["params"][f"Dense_{i}"]["bias"])
