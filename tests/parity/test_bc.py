"""Tier 2 for BC: on identical random inputs, the twins' squashing, MSE and cross-entropy losses
and their gradients agree within 1e-5, the numpy helpers give the same numbers, and the policy
network is the same function on the same weights."""

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
    B, A, N = 256, 3, 4
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    low, high = f32(-rng.uniform(0.5, 3.0, size=A)), f32(rng.uniform(0.5, 3.0, size=A))
    return {
        "pre_tanh": f32(rng.normal(scale=2.0, size=(B, A))),
        "scale": f32((high - low) / 2),
        "bias": f32((high + low) / 2),
        "actions": f32(rng.uniform(low, high, size=(B, A))),
        "logits": f32(rng.normal(scale=2.0, size=(B, N))),
        "labels": rng.integers(0, N, size=B),
    }


def test_mse_through_the_squash_and_its_gradient(twins, batch):
    pt, jx = twins
    x = torch.tensor(batch["pre_tanh"], requires_grad=True)
    loss_t = pt.bc_mse_loss(
        pt.squash_actions(x, torch.as_tensor(batch["scale"]), torch.as_tensor(batch["bias"])),
        torch.as_tensor(batch["actions"]),
    )
    loss_t.backward()
    f = lambda x: jx.bc_mse_loss(jx.squash_actions(x, batch["scale"], batch["bias"]), batch["actions"])
    loss_j, grad_j = jax.value_and_grad(f)(batch["pre_tanh"])
    assert abs(loss_t.item() - float(loss_j)) < TOL * max(1.0, abs(float(loss_j)))
    np.testing.assert_allclose(x.grad.numpy(), np.asarray(grad_j), atol=TOL, rtol=TOL)


def test_cross_entropy_and_its_gradient(twins, batch):
    pt, jx = twins
    x = torch.tensor(batch["logits"], requires_grad=True)
    loss_t = pt.bc_cross_entropy_loss(x, torch.as_tensor(batch["labels"]))
    loss_t.backward()
    loss_j, grad_j = jax.value_and_grad(jx.bc_cross_entropy_loss)(
        batch["logits"], jnp.asarray(batch["labels"])
    )
    assert abs(loss_t.item() - float(loss_j)) < TOL * max(1.0, abs(float(loss_j)))
    np.testing.assert_allclose(x.grad.numpy(), np.asarray(grad_j), atol=TOL, rtol=TOL)
    np.testing.assert_array_equal(
        pt.greedy_actions(torch.as_tensor(batch["logits"])).numpy(),
        np.asarray(jx.greedy_actions(batch["logits"])),
    )


def test_numpy_helpers_agree(twins):
    pt, jx = twins
    bounds = [(0, 200), (200, 350), (350, 351), (351, 600)]
    returns = np.random.default_rng(0).normal(size=len(bounds))
    for k in range(5):
        for fraction in (0.1, 0.25, 0.5, 1.0):
            np.testing.assert_array_equal(
                pt.training_rows(bounds, returns, k, fraction), jx.training_rows(bounds, returns, k, fraction)
            )
    for env_id in ("CartPole-v1", "Pendulum-v1", "PointMazeStitch-v0"):
        for a, b in zip(pt.policy_head(env_id), jx.policy_head(env_id)):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("out_dim", [1, 2])
def test_policy_network_agrees_on_the_same_weights(twins, out_dim):
    pt, jx = twins
    torch.manual_seed(0)
    obs_dim, hidden, B = 3, 32, 64
    t_policy = pt.Policy(obs_dim, out_dim, hidden)
    params = torch_to_flax_params(t_policy)
    obs = np.random.default_rng(0).normal(size=(B, obs_dim)).astype(np.float32)
    with torch.no_grad():
        out_t = t_policy(torch.as_tensor(obs)).numpy()
    out_j = np.asarray(jx.Policy(out_dim, hidden).apply(params, obs))
    np.testing.assert_allclose(out_t, out_j, atol=TOL, rtol=TOL)
    # the initialisers draw from the same distribution: uniform in +-1/sqrt(fan_in), zero biases
    j_params = jx.Policy(out_dim, hidden).init(jax.random.PRNGKey(0), jnp.zeros((1, obs_dim)))["params"]
    assert float(jnp.abs(j_params["Dense_0"]["kernel"]).max()) <= 1 / np.sqrt(obs_dim)
    assert float(jnp.abs(j_params["Dense_0"]["bias"]).max()) == 0.0
