"""Tier 2 for ICM: the twins' module-level math (compute_gae, ppo_policy_loss, ppo_value_loss,
icm_losses, curiosity_reward) agrees within 1e-5 on identical random batches (with episode ends),
values and gradients with respect to the inputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

TOL = 1e-5


@pytest.fixture(params=[0, 1, 2])
def batch(request):
    rng = np.random.default_rng(request.param)
    B, F, A = 96, 16, 3
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    return {
        "logits": f32(rng.normal(size=(B, A)) * 2),
        "actions": rng.integers(0, A, B),
        "phi_next_pred": f32(rng.normal(size=(B, F))),
        "phi_next": f32(rng.normal(size=(B, F))),
    }


@pytest.mark.parametrize("beta", [0.0, 0.2, 1.0])
def test_icm_losses_and_gradient_parity(twins, batch, beta):
    """All three losses, and the gradients of the combined loss with respect to the inverse
    model's logits, the forward prediction and the (detached) target: zero in both twins."""
    pt, jx = twins
    logits = torch.tensor(batch["logits"], requires_grad=True)
    pred = torch.tensor(batch["phi_next_pred"], requires_grad=True)
    target = torch.tensor(batch["phi_next"], requires_grad=True)
    out_t = pt.icm_losses(logits, torch.as_tensor(batch["actions"]), pred, target, beta)
    out_t[0].backward()
    f = lambda lg, p, t: jx.icm_losses(lg, jnp.asarray(batch["actions"]), p, t, beta)
    out_j = f(batch["logits"], batch["phi_next_pred"], batch["phi_next"])
    for a, b in zip(out_t, out_j):
        assert abs(a.item() - float(b)) < TOL * max(1.0, abs(a.item()))
    grads = jax.grad(lambda *x: f(*x)[0], argnums=(0, 1, 2))(
        batch["logits"], batch["phi_next_pred"], batch["phi_next"]
    )
    np.testing.assert_allclose(logits.grad.numpy(), np.asarray(grads[0]), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(pred.grad.numpy(), np.asarray(grads[1]), atol=TOL, rtol=TOL)
    assert target.grad is None and np.all(np.asarray(grads[2]) == 0.0)


@pytest.mark.parametrize("eta", [0.0, 0.5, 2.0])
def test_curiosity_reward_and_gradient_parity(twins, batch, eta):
    pt, jx = twins
    pred = torch.tensor(batch["phi_next_pred"], requires_grad=True)
    r_t = pt.curiosity_reward(pred, torch.as_tensor(batch["phi_next"]), eta)
    r_t.sum().backward()
    f = lambda p: jx.curiosity_reward(p, batch["phi_next"], eta)
    np.testing.assert_allclose(
        r_t.detach().numpy(), np.asarray(f(batch["phi_next_pred"])), atol=TOL, rtol=TOL
    )
    g_j = jax.grad(lambda p: f(p).sum())(batch["phi_next_pred"])
    np.testing.assert_allclose(pred.grad.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)
