"""Tier 2 for Double DQN: double_q_target and the TD loss through it agree between the twins
within 1e-5 on identical random batches (with terminations)."""

import jax
import numpy as np
import pytest
import torch

TOL = 1e-5


@pytest.fixture(params=[0, 1, 2])
def batch(request):
    rng = np.random.default_rng(request.param)
    B, A = 128, 3
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    return {
        "next_q_online": f32(rng.normal(size=(B, A)) * 5),
        "next_q_target": f32(rng.normal(size=(B, A)) * 5),
        "rewards": f32(rng.normal(size=B)),
        "dones": f32(rng.random(B) < 0.2),
        "q_taken": f32(rng.normal(size=B) * 3),
    }


def test_double_q_target_parity(twins, batch):
    pt, jx = twins
    args = [batch[k] for k in ("next_q_online", "next_q_target", "rewards", "dones")]
    y_t = pt.double_q_target(*map(torch.as_tensor, args), 0.99)
    y_j = jx.double_q_target(*args, 0.99)
    np.testing.assert_allclose(y_t.numpy(), np.asarray(y_j), atol=TOL, rtol=TOL)
    assert batch["dones"].sum() > 5


def test_td_loss_through_double_target_parity(twins, batch):
    pt, jx = twins
    args = [batch[k] for k in ("next_q_online", "next_q_target", "rewards", "dones")]
    q = torch.tensor(batch["q_taken"], requires_grad=True)
    loss_t = pt.td_loss(q, pt.double_q_target(*map(torch.as_tensor, args), 0.99))
    loss_t.backward()
    f = lambda q: jx.td_loss(q, jx.double_q_target(*args, 0.99))
    loss_j, g_j = jax.value_and_grad(f)(batch["q_taken"])
    assert abs(loss_t.item() - float(loss_j)) < TOL
    np.testing.assert_allclose(q.grad.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)
