"""Tier 2 for prioritized replay: importance_weights and weighted_td_loss (values and gradients)
agree between the twins within 1e-5, and the two sum trees draw the same samples."""

import jax
import numpy as np
import pytest
import torch

TOL = 1e-5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_weights_and_loss_parity(twins, seed):
    pt, jx = twins
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.ones(128)).astype(np.float32)
    for beta in (0.4, 0.7, 1.0):
        np.testing.assert_allclose(
            pt.importance_weights(torch.as_tensor(probs), 1000, beta).numpy(),
            np.asarray(jx.importance_weights(probs, 1000, beta)),
            atol=TOL,
            rtol=TOL,
        )
    q, y = (rng.normal(size=128).astype(np.float32) * 3 for _ in range(2))
    w = np.asarray(jx.importance_weights(probs, 1000, 0.6))
    q_t = torch.tensor(q, requires_grad=True)
    loss_t, err_t = pt.weighted_td_loss(q_t, torch.as_tensor(y), torch.as_tensor(np.array(w)))
    loss_t.backward()
    g_j = jax.grad(lambda q: jx.weighted_td_loss(q, y, w)[0])(q)
    assert abs(loss_t.item() - float(jx.weighted_td_loss(q, y, w)[0])) < TOL
    np.testing.assert_allclose(err_t.detach().numpy(), np.asarray(jx.weighted_td_loss(q, y, w)[1]), atol=TOL)
    np.testing.assert_allclose(q_t.grad.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)


def test_sum_trees_draw_the_same_samples(twins):
    pt, jx = twins
    priorities = np.random.default_rng(0).random(1000) ** 3
    trees = [m.SumTree(1000) for m in twins]
    for t in trees:
        t.update(np.arange(1000), priorities)
    a = trees[0].sample(256, np.random.default_rng(1), 1000)
    b = trees[1].sample(256, np.random.default_rng(1), 1000)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_allclose(a[1], b[1])
