"""Tier 2 for A2C: the twins' module-level math agrees within 1e-5 on identical random batches
(with episode ends), values and gradients; and the two networks are the same function."""

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
    T, N = 16, 8
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    return {
        "rewards": f32(rng.normal(size=(T, N))),
        "values": f32(rng.normal(size=(T, N))),
        "dones": f32(rng.random((T, N)) < 0.15),
        "last_value": f32(rng.normal(size=N)),
        "logp": f32(np.log(rng.uniform(0.05, 1.0, size=T * N))),
        "entropy": f32(rng.uniform(0, 0.7, T * N)),
        "v": f32(rng.normal(size=T * N)),
        "advantages": f32(rng.normal(size=T * N)),
        "returns": f32(rng.normal(size=T * N)),
    }


def test_a2c_loss_and_gradient_parity(twins, batch):
    pt, jx = twins
    keys = ("logp", "entropy", "v", "advantages", "returns")
    t = [torch.tensor(batch[k], requires_grad=True) for k in keys]
    out_t = pt.a2c_loss(*t, 0.5, 0.01)
    out_t[0].backward()
    f = lambda lp, en, v: jx.a2c_loss(lp, en, v, batch["advantages"], batch["returns"], 0.5, 0.01)[0]
    grads = jax.grad(f, argnums=(0, 1, 2))(batch["logp"], batch["entropy"], batch["v"])
    out_j = jx.a2c_loss(*(batch[k] for k in keys), 0.5, 0.01)
    for a, b in zip(out_t, out_j):
        assert abs(a.item() - float(b)) < TOL
    for g_t, g_j in zip((t[0].grad, t[1].grad, t[2].grad), grads):
        np.testing.assert_allclose(g_t.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)


def test_networks_agree_on_the_same_weights(twins):
    pt, jx = twins
    torch.manual_seed(0)
    t_agent, j_agent = pt.Agent(4, 2), jx.Agent(4, 2)

    params = {"actor": torch_to_flax_params(t_agent.actor), "critic": torch_to_flax_params(t_agent.critic)}
    obs = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    actions = np.random.default_rng(1).integers(0, 2, size=16)
    out_t = t_agent.evaluate_actions(torch.as_tensor(obs), torch.as_tensor(actions))
    out_j = j_agent.evaluate_actions(params, jnp.asarray(obs), jnp.asarray(actions))
    for a, b in zip(out_t, out_j):
        np.testing.assert_allclose(a.detach().numpy(), np.asarray(b), atol=TOL, rtol=TOL)
