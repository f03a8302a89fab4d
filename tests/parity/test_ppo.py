"""Tier 2 for PPO: the twins' module-level math agrees within 1e-5 on identical random batches
(with episode ends), values and gradients with respect to the inputs."""

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
    T, N = 64, 8
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    return {
        "rewards": f32(rng.normal(size=(T, N))),
        "values": f32(rng.normal(size=(T, N))),
        "dones": f32(rng.random((T, N)) < 0.1),  # about six episode ends per column
        "last_value": f32(rng.normal(size=N)),
        "logp": f32(np.log(rng.uniform(0.05, 1.0, size=T * N))),
        "logp_old": f32(np.log(rng.uniform(0.05, 1.0, size=T * N))),
        "advantages": f32(rng.normal(size=T * N)),
        "v": f32(rng.normal(size=T * N)),
        "v_old": f32(rng.normal(size=T * N)),
        "returns": f32(rng.normal(size=T * N)),
    }


def test_networks_agree_on_the_same_weights(twins):
    """The torch Agent's weights copied into the JAX pytree give the same logits, values and
    log-probs: the two networks are the same function, not just the same shape."""
    pt, jx = twins
    torch.manual_seed(0)
    t_agent = pt.Agent(4, 2)
    j_agent = jx.Agent(4, 2)
    initialised = j_agent.init(jax.random.PRNGKey(0))
    params = {"actor": torch_to_flax_params(t_agent.actor), "critic": torch_to_flax_params(t_agent.critic)}
    assert jax.tree.structure(params) == jax.tree.structure(
        initialised
    )  # every JAX weight has a torch source
    obs = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    actions = np.random.default_rng(1).integers(0, 2, size=16)
    logp_t, ent_t, v_t = t_agent.evaluate_actions(torch.as_tensor(obs), torch.as_tensor(actions))
    logp_j, ent_j, v_j = j_agent.evaluate_actions(params, jnp.asarray(obs), jnp.asarray(actions))
    for a, b in ((logp_t, logp_j), (ent_t, ent_j), (v_t, v_j)):
        np.testing.assert_allclose(a.detach().numpy(), np.asarray(b), atol=TOL, rtol=TOL)
