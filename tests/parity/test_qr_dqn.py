"""Tier 2 for QR-DQN: quantile_taus and quantile_huber_loss (values and gradients, for several
kappa) agree between the twins within 1e-5 on identical random batches."""

import jax
import numpy as np
import pytest
import torch

TOL = 1e-5


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("kappa", [0.0, 0.5, 1.0])
def test_quantile_huber_loss_and_gradient_parity(twins, seed, kappa):
    pt, jx = twins
    rng = np.random.default_rng(seed)
    pred = rng.normal(size=(64, 50)).astype(np.float32) * 2
    target = rng.normal(size=(64, 50)).astype(np.float32) * 2
    taus_t, taus_j = pt.quantile_taus(50), jx.quantile_taus(50)
    np.testing.assert_allclose(taus_t.numpy(), np.asarray(taus_j), atol=1e-7)
    p = torch.tensor(pred, requires_grad=True)
    loss_t = pt.quantile_huber_loss(p, torch.as_tensor(target), taus_t, kappa)
    loss_t.backward()
    loss_j, g_j = jax.value_and_grad(lambda x: jx.quantile_huber_loss(x, target, taus_j, kappa))(pred)
    assert abs(loss_t.item() - float(loss_j)) < TOL
    np.testing.assert_allclose(p.grad.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)
