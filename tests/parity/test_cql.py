"""Tier 2 for CQL: on identical inputs (with terminal steps) the twins' module-level functions (the
tanh Jacobian, squashed samples and log-probs, the conservative penalty, both targets, the critic,
actor, temperature and Lagrange-weight losses) and their gradients agree within 1e-5; the networks
(critic, discrete Q network, actor) are the same function on the same weights; run_episodes gives the
same returns for the same policy."""

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
    B, K, A = 64, 12, 2
    f32 = lambda x: np.asarray(x, dtype=np.float32)  # noqa: E731
    return {
        "mean": f32(rng.normal(size=(B, A))),
        "log_std": f32(rng.uniform(-3, 1, size=(B, A))),
        "noise": f32(rng.normal(size=(B, A))),
        "scale": f32([2.0, 0.5]),
        "bias": f32([0.0, 0.25]),
        "q_data": f32(rng.normal(scale=20, size=B)),
        "q_sampled": f32(rng.normal(scale=20, size=(B, K))),
        "log_density": f32(rng.normal(scale=2, size=(B, K))),
        "rewards": f32(rng.normal(size=B)),
        "terminals": f32(rng.random(B) < 0.1),
        "next_q1": f32(rng.normal(size=B)),
        "next_q2": f32(rng.normal(size=B)),
        "next_q_all": f32(rng.normal(size=(B, 3))),
        "target": f32(rng.normal(size=B)),
        "log_prob": f32(rng.normal(size=B)),
    }


def close(a, b):
    np.testing.assert_allclose(
        np.asarray(a.detach() if isinstance(a, torch.Tensor) else a), np.asarray(b), atol=TOL, rtol=TOL
    )


def test_sampling_and_jacobian_parity(twins, batch):
    pt, jx = twins
    T = lambda k: torch.as_tensor(batch[k])  # noqa: E731
    close(pt.tanh_log_det_jacobian(T("noise") * 4), jx.tanh_log_det_jacobian(batch["noise"] * 4))
    a_t, lp_t = pt.sample_squashed(T("mean"), T("log_std"), T("noise"), T("scale"), T("bias"))
    a_j, lp_j = jx.sample_squashed(
        batch["mean"], batch["log_std"], batch["noise"], batch["scale"], batch["bias"]
    )
    close(a_t, a_j)
    close(lp_t, lp_j)


def test_penalty_targets_and_losses_parity(twins, batch):
    pt, jx = twins
    T = lambda k: torch.as_tensor(batch[k])  # noqa: E731
    close(
        pt.conservative_target(T("rewards"), T("terminals"), T("next_q1"), T("next_q2"), 0.99),
        jx.conservative_target(
            batch["rewards"], batch["terminals"], batch["next_q1"], batch["next_q2"], 0.99
        ),
    )
    close(
        pt.max_q_target(T("next_q_all"), T("rewards"), T("terminals"), 0.99),
        jx.max_q_target(batch["next_q_all"], batch["rewards"], batch["terminals"], 0.99),
    )
    close(
        pt.cql_penalty(T("q_data"), T("q_sampled"), T("log_density")),
        jx.cql_penalty(batch["q_data"], batch["q_sampled"], batch["log_density"]),
    )

    # the critic loss and its gradients in Q(s, a_data) and Q(s, a_k)
    q, qs = (
        torch.tensor(batch["q_data"], requires_grad=True),
        torch.tensor(batch["q_sampled"], requires_grad=True),
    )
    total_t, bellman_t, penalty_t = pt.cql_critic_loss(q, T("target"), qs, T("log_density"), 5.0)
    total_t.backward()
    fn = lambda a, b: jx.cql_critic_loss(a, batch["target"], b, batch["log_density"], 5.0)  # noqa: E731
    total_j, bellman_j, penalty_j = fn(batch["q_data"], batch["q_sampled"])
    g_q, g_qs = jax.grad(lambda a, b: fn(a, b)[0], argnums=(0, 1))(batch["q_data"], batch["q_sampled"])
    for x, y in ((total_t, total_j), (bellman_t, bellman_j), (penalty_t, penalty_j)):
        assert abs(x.item() - float(y)) < TOL * max(1.0, abs(float(y)))
    close(q.grad, g_q)
    close(qs.grad, g_qs)

    # the actor loss and its gradients
    q1, q2 = (
        torch.tensor(batch["next_q1"], requires_grad=True),
        torch.tensor(batch["next_q2"], requires_grad=True),
    )
    lp = torch.tensor(batch["log_prob"], requires_grad=True)
    pt.sac_actor_loss(q1, q2, lp, 0.2).backward()
    grads = jax.grad(jx.sac_actor_loss, argnums=(0, 1, 2))(
        batch["next_q1"], batch["next_q2"], batch["log_prob"], 0.2
    )
    for x, y in zip((q1.grad, q2.grad, lp.grad), grads):
        close(x, y)

    # the temperature loss and its gradient in log alpha
    log_alpha = torch.tensor(-1.3, requires_grad=True)
    loss_t = pt.temperature_loss(log_alpha, T("log_prob"), -2.0)
    loss_t.backward()
    loss_j, g = jax.value_and_grad(jx.temperature_loss)(jnp.float32(-1.3), batch["log_prob"], -2.0)
    assert abs(loss_t.item() - float(loss_j)) < TOL
    assert abs(log_alpha.grad.item() - float(g)) < TOL

    # the Lagrange weight's dual loss and its gradient in log cql_alpha, on the batch's mean penalty
    penalty = float(pt.cql_penalty(T("q_data"), T("q_sampled"), T("log_density")))
    for threshold in (-0.5, 10.0):
        log_cql_alpha = torch.tensor(0.7, requires_grad=True)
        loss_t = pt.lagrange_loss(log_cql_alpha, torch.tensor(penalty), threshold)
        loss_t.backward()
        loss_j, g = jax.value_and_grad(jx.lagrange_loss)(jnp.float32(0.7), jnp.float32(penalty), threshold)
        assert abs(loss_t.item() - float(loss_j)) < TOL * max(1.0, abs(float(loss_j)))
        assert abs(log_cql_alpha.grad.item() - float(g)) < TOL * max(1.0, abs(float(g)))


_tree = torch_to_flax_params  # kernels transposed, Dense_0, Dense_1, ... in module order


def test_networks_agree_on_the_same_weights(twins):
    pt, jx = twins
    torch.manual_seed(0)
    obs_dim, hidden, B = 3, 32, 64
    import gymnasium as gym

    box = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))
    nets = pt.make_networks(obs_dim, box, hidden, False)
    agent = jx.make_networks(obs_dim, box, hidden, False)
    params = {
        "actor": _tree(nets["actor"]),
        "qf": jax.tree.map(lambda a, b: jnp.stack([a, b]), _tree(nets["qf1"]), _tree(nets["qf2"])),
    }
    obs = np.random.default_rng(0).normal(size=(B, obs_dim)).astype(np.float32)
    with torch.no_grad():
        mean_t, log_std_t = nets["actor"](torch.as_tensor(obs))
        a_t = nets["actor"].deterministic(torch.as_tensor(obs))
        q_t = [nets[k](torch.as_tensor(obs), a_t) for k in ("qf1", "qf2")]
    mean_j, log_std_j = agent.actor.apply(params["actor"], obs)
    a_j = agent.deterministic(params, obs)
    q_j = agent.q_values(params["qf"], obs, a_j)
    for x, y in ((mean_t, mean_j), (log_std_t, log_std_j), (a_t, a_j), (q_t[0], q_j[0]), (q_t[1], q_j[1])):
        close(x, y)

    discrete = gym.spaces.Discrete(3)
    nets = pt.make_networks(obs_dim, discrete, hidden, True)
    agent = jx.make_networks(obs_dim, discrete, hidden, True)
    params = {"qf": _tree(nets["qf"])}
    with torch.no_grad():
        close(nets["qf"](torch.as_tensor(obs)), agent.qf.apply(params["qf"], obs))
    policy_t = pt.greedy_policy(nets, True, torch.device("cpu"))
    policy_j = jx.greedy_policy(agent, lambda: params)
    np.testing.assert_array_equal(policy_t(obs), policy_j(obs))


def test_run_episodes_is_the_same_loop(twins):
    pt, jx = twins
    import offline_data

    expert = offline_data.expert_policy("Pendulum-v1")
    r_t = pt.run_episodes(expert, "Pendulum-v1", 3, 10_000)
    r_j = jx.run_episodes(expert, "Pendulum-v1", 3, 10_000)
    np.testing.assert_allclose(r_t, r_j, atol=1e-9)
    assert r_t.mean() > -400  # the scripted expert swings up from these seeds
