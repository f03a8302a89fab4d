"""Tier 2 for Dueling DQN: dueling_aggregate (values and gradients) and the whole network on the
same weights agree between the twins within 1e-5."""

import jax
import numpy as np
import pytest
import torch

from helpers import torch_to_flax_params

TOL = 1e-5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_aggregate_and_gradient_parity(twins, seed):
    pt, jx = twins
    rng = np.random.default_rng(seed)
    value, advantage = (
        rng.normal(size=(64, 1)).astype(np.float32),
        rng.normal(size=(64, 3)).astype(np.float32),
    )
    weights = rng.normal(size=(64, 3)).astype(np.float32)
    v, a = torch.tensor(value, requires_grad=True), torch.tensor(advantage, requires_grad=True)
    q_t = pt.dueling_aggregate(v, a)
    (q_t * torch.as_tensor(weights)).sum().backward()
    f = lambda v, a: (jx.dueling_aggregate(v, a) * weights).sum()
    g_v, g_a = jax.grad(f, argnums=(0, 1))(value, advantage)
    np.testing.assert_allclose(
        q_t.detach().numpy(), np.asarray(jx.dueling_aggregate(value, advantage)), atol=TOL
    )
    np.testing.assert_allclose(v.grad.numpy(), np.asarray(g_v), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(a.grad.numpy(), np.asarray(g_a), atol=TOL, rtol=TOL)


@pytest.mark.parametrize("layer_norm", [False, True])
def test_networks_agree_on_the_same_weights(twins, layer_norm):
    pt, jx = twins
    torch.manual_seed(0)
    t_net, j_net = pt.QNetwork(4, 3, layer_norm=layer_norm), jx.QNetwork(3, layer_norm=layer_norm)
    params = torch_to_flax_params(t_net)  # trunk Dense (and LayerNorm), then the heads
    obs = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    np.testing.assert_allclose(
        t_net(torch.as_tensor(obs)).detach().numpy(), np.asarray(j_net.apply(params, obs)), atol=TOL, rtol=TOL
    )
