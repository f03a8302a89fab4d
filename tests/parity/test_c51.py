"""Tier 2 for C51: categorical_projection and categorical_loss (values and gradients) agree
between the twins within 1e-5 on identical random batches (with terminations and rewards past
the support), and the two networks give the same Q-values on the same weights."""

import jax
import numpy as np
import pytest
import torch

from helpers import torch_to_flax_params

TOL = 1e-5


@pytest.fixture(params=[0, 1, 2])
def batch(request):
    rng = np.random.default_rng(request.param)
    B, N = 128, 51
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    return {
        "next_probs": f32(rng.dirichlet(np.ones(N), size=B)),
        "rewards": f32(rng.normal(size=B) * 30),
        "dones": f32(rng.random(B) < 0.2),
        "atoms": f32(np.linspace(-100, 100, N)),
        "logits": f32(rng.normal(size=(B, N))),
    }


def test_projection_parity(twins, batch):
    pt, jx = twins
    args = [batch[k] for k in ("next_probs", "rewards", "dones")]
    out_t = pt.categorical_projection(*map(torch.as_tensor, args), 0.99, torch.as_tensor(batch["atoms"]))
    out_j = jx.categorical_projection(*args, 0.99, batch["atoms"])
    np.testing.assert_allclose(out_t.numpy(), np.asarray(out_j), atol=TOL, rtol=TOL)
    assert batch["dones"].sum() > 5


def test_loss_and_gradient_parity(twins, batch):
    pt, jx = twins
    args = [batch[k] for k in ("next_probs", "rewards", "dones")]
    target = jx.categorical_projection(*args, 0.99, batch["atoms"])
    logits = torch.tensor(batch["logits"], requires_grad=True)
    loss_t = pt.categorical_loss(logits, torch.as_tensor(np.array(target)))
    loss_t.backward()
    loss_j, g_j = jax.value_and_grad(lambda l: jx.categorical_loss(l, target))(batch["logits"])
    assert abs(loss_t.item() - float(loss_j)) < TOL
    np.testing.assert_allclose(logits.grad.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)


def test_networks_agree_on_the_same_weights(twins):
    pt, jx = twins
    torch.manual_seed(0)
    t_net = pt.QNetwork(4, 3, 51, -100.0, 100.0)
    j_net = jx.QNetwork(3, 51, -100.0, 100.0)
    params = torch_to_flax_params(t_net)  # trunk Dense/LayerNorm, then the heads
    obs = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    np.testing.assert_allclose(
        t_net(torch.as_tensor(obs)).detach().numpy(), np.asarray(j_net.apply(params, obs)), atol=TOL, rtol=TOL
    )
    np.testing.assert_allclose(
        t_net.q_values(torch.as_tensor(obs)).detach().numpy(),
        np.asarray(j_net.apply(params, obs, method="q_values")),
        atol=1e-4,
        rtol=TOL,
    )
