"""Tier 2 for IQL: on identical inputs (terminals and timeouts included), the twins' state normaliser,
dataset preparation, expectile loss, critic targets and losses, advantage weights, Gaussian log-density
and advantage-weighted actor loss agree within 1e-5, values and gradients; and the networks (actor mean
and log-std, value, critics) are the same function on the same weights, the actor's gradient included."""

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
    return {
        "observations": f32(rng.normal(loc=3.0, scale=rng.uniform(0.1, 5.0, size=O), size=(B, O))),
        "next_observations": f32(rng.normal(size=(B, O))),
        "actions": f32(rng.uniform(-2.0, 2.0, size=(B, A))),
        "mean": f32(rng.uniform(-2.0, 2.0, size=(B, A))),
        "log_std": f32(rng.uniform(-2.0, 1.0, size=A)),
        "rewards": f32(rng.normal(size=B)),
        "terminals": f32(rng.random(B) < 0.1),
        "timeouts": f32(rng.random(B) < 0.1),
        "q": f32(rng.normal(loc=-20.0, scale=10.0, size=B)),
        "v": f32(rng.normal(loc=-20.0, scale=10.0, size=B)),
        "q2": f32(rng.normal(size=B)),
        "next_v": f32(rng.normal(size=B)),
        "advantages": f32(rng.normal(scale=2.0, size=B)),
        "log_probs": f32(rng.normal(loc=-3.0, size=B)),
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
        "actions": batch["actions"],
        "rewards": batch["rewards"],
        "terminals": batch["terminals"],
        "timeouts": batch["timeouts"],
    }
    a_t, a_j = pt.prepare_dataset(data, mean_t, std_t), jx.prepare_dataset(data, mean_j, std_j)
    assert a_t.keys() == a_j.keys()
    for k in a_t:
        close(a_t[k], a_j[k])


@pytest.mark.parametrize("expectile", [0.5, 0.7, 0.9])
def test_expectile_loss_parity(twins, batch, expectile):
    pt, jx = twins
    v = torch.tensor(batch["v"], requires_grad=True)
    loss_t = pt.expectile_loss(torch.as_tensor(batch["q"]) - v, expectile)
    loss_t.backward()
    loss_j, g = jax.value_and_grad(lambda v_: jx.expectile_loss(batch["q"] - v_, expectile))(batch["v"])
    assert abs(loss_t.item() - float(loss_j)) < TOL * max(1.0, abs(float(loss_j)))
    close(v.grad, g)


def test_target_and_critic_parity(twins, batch):
    pt, jx = twins
    T = lambda k: torch.as_tensor(batch[k])
    tgt_t = pt.iql_target(T("rewards"), T("terminals"), T("next_v"), 0.99)
    tgt_j = jx.iql_target(batch["rewards"], batch["terminals"], batch["next_v"], 0.99)
    close(tgt_t, tgt_j)
    q1, q2 = torch.tensor(batch["q"], requires_grad=True), torch.tensor(batch["q2"], requires_grad=True)
    l1, l2 = pt.critic_losses(q1, q2, tgt_t)
    (l1 + l2).backward()
    loss_j, (g1, g2) = jax.value_and_grad(lambda a, b: sum(jx.critic_losses(a, b, tgt_j)), argnums=(0, 1))(
        batch["q"], batch["q2"]
    )
    assert abs((l1 + l2).item() - float(loss_j)) < TOL * max(1.0, abs(float(loss_j)))
    close(q1.grad, g1)
    close(q2.grad, g2)


@pytest.mark.parametrize("beta, max_weight", [(3.0, 100.0), (10.0, 100.0), (0.5, 2.0)])
def test_weights_log_prob_and_actor_loss_parity(twins, batch, beta, max_weight):
    pt, jx = twins
    close(
        pt.advantage_weights(torch.as_tensor(batch["advantages"]), beta, max_weight),
        jx.advantage_weights(batch["advantages"], beta, max_weight),
    )
    mean, log_std = (
        torch.tensor(batch["mean"], requires_grad=True),
        torch.tensor(batch["log_std"], requires_grad=True),
    )
    adv = torch.tensor(batch["advantages"], requires_grad=True)
    loss_t, w_t = pt.awr_actor_loss(
        pt.gaussian_log_prob(mean, log_std, torch.as_tensor(batch["actions"])), adv, beta, max_weight
    )
    loss_t.backward()

    def f(mean_, log_std_, adv_):
        return jx.awr_actor_loss(
            jx.gaussian_log_prob(mean_, log_std_, batch["actions"]), adv_, beta, max_weight
        )

    (loss_j, w_j), (g_mean, g_log_std, g_adv) = jax.value_and_grad(f, argnums=(0, 1, 2), has_aux=True)(
        batch["mean"], batch["log_std"], batch["advantages"]
    )
    assert abs(loss_t.item() - float(loss_j)) < TOL * max(1.0, abs(float(loss_j)))
    close(w_t, w_j)
    close(mean.grad, g_mean)
    close(log_std.grad, g_log_std)
    assert adv.grad is None  # the weights are constants to the gradient in both twins
    close(g_adv, np.zeros_like(batch["advantages"]))
    close(
        pt.gaussian_log_prob(
            torch.as_tensor(batch["mean"]),
            torch.as_tensor(batch["log_std"]),
            torch.as_tensor(batch["actions"]),
        ),
        jx.gaussian_log_prob(batch["mean"], batch["log_std"], batch["actions"]),
    )


def linears(module):
    return [layer for layer in module.modules() if isinstance(layer, torch.nn.Linear)]


def copy_actor(t_actor):
    params = torch_to_flax_params(t_actor)["params"]
    params["log_std"] = jnp.asarray(t_actor.log_std.detach().numpy())
    return {"params": params}


def test_networks_agree_on_the_same_weights(twins):
    pt, jx = twins
    torch.manual_seed(0)
    obs_dim, action_dim, hidden, B = 3, 2, 32, 64
    scale, bias = np.array([2.0, 0.5], np.float32), np.array([0.0, 0.25], np.float32)
    t_actor = pt.Actor(obs_dim, action_dim, hidden, scale, bias)
    with torch.no_grad():
        t_actor.log_std.copy_(torch.tensor([-0.5, 3.0]))  # the second is clipped to LOG_STD_MAX = 2
    t_v = pt.ValueNetwork(obs_dim, hidden)
    t_q = [pt.QNetwork(obs_dim, action_dim, hidden) for _ in range(2)]
    agent = jx.Agent(obs_dim, action_dim, hidden, scale, bias)
    actor_params = copy_actor(t_actor)
    vf_params = torch_to_flax_params(t_v)
    q_trees = [torch_to_flax_params(q) for q in t_q]
    qf_params = jax.tree.map(lambda a, b: jnp.stack([a, b]), *q_trees)
    # the JAX twin's own init makes the same tree (names and shapes)
    init = agent.init(jax.random.PRNGKey(0))
    assert jax.tree.map(jnp.shape, init["actor"]) == jax.tree.map(jnp.shape, actor_params)
    assert jax.tree.map(jnp.shape, init["vf"]) == jax.tree.map(jnp.shape, vf_params)
    assert jax.tree.map(jnp.shape, init["qf"]) == jax.tree.map(jnp.shape, qf_params)
    obs = np.random.default_rng(0).normal(size=(B, obs_dim)).astype(np.float32)
    with torch.no_grad():
        mean_t, log_std_t = t_actor(torch.as_tensor(obs))
        v_t = t_v(torch.as_tensor(obs))
        q_t = [q(torch.as_tensor(obs), mean_t) for q in t_q]
    mean_j, log_std_j = agent.actor.apply(actor_params, obs)
    q_j = agent.q_values(qf_params, obs, mean_j)
    close(log_std_t, [-0.5, 2.0])
    for x, y in (
        (mean_t, mean_j),
        (log_std_t, log_std_j),
        (v_t, agent.vf.apply(vf_params, obs)),
        (q_t[0], q_j[0]),
        (q_t[1], q_j[1]),
    ):
        close(x, y)


def test_actor_gradient_through_the_network(twins):
    """The actor's full loss gradient (mean network and log-std) on the same weights and batch."""
    pt, jx = twins
    torch.manual_seed(1)
    obs_dim, action_dim, hidden, B = 3, 2, 32, 64
    scale, bias = np.array([2.0, 0.5], np.float32), np.array([0.0, 0.25], np.float32)
    t_actor = pt.Actor(obs_dim, action_dim, hidden, scale, bias)
    agent = jx.Agent(obs_dim, action_dim, hidden, scale, bias)
    actor_params = copy_actor(t_actor)
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(B, obs_dim)).astype(np.float32)
    actions = rng.uniform(-0.5, 0.5, size=(B, action_dim)).astype(np.float32)
    adv = rng.normal(size=B).astype(np.float32)
    mean, log_std = t_actor(torch.as_tensor(obs))
    loss_t, _ = pt.awr_actor_loss(
        pt.gaussian_log_prob(mean, log_std, torch.as_tensor(actions)), torch.as_tensor(adv), 3.0, 100.0
    )
    loss_t.backward()

    def loss_fn(params):
        mean_j, log_std_j = agent.actor.apply(params, obs)
        return jx.awr_actor_loss(jx.gaussian_log_prob(mean_j, log_std_j, actions), adv, 3.0, 100.0)[0]

    loss_j, grads = jax.value_and_grad(loss_fn)(actor_params)
    close(loss_t, loss_j)
    for i, layer in enumerate(linears(t_actor)):
        close(layer.weight.grad.T, grads["params"][f"Dense_{i}"]["kernel"])
        close(layer.bias.grad, grads["params"][f"Dense_{i}"]["bias"])
    close(t_actor.log_std.grad, grads["params"]["log_std"])
