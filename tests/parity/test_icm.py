"""Tier 2 for ICM: the twins' module-level math (compute_gae, ppo_policy_loss, ppo_value_loss,
icm_losses, curiosity_reward) agrees within 1e-5 on identical random batches (with episode ends),
values and gradients with respect to the inputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import load_script

TOL = 1e-5


@pytest.fixture(scope="module")
def twins():
    return load_script("algos/icm_torch.py"), load_script("algos/icm_jax.py")


@pytest.fixture(params=[0, 1, 2])
def batch(request):
    rng = np.random.default_rng(request.param)
    T, N, B, F, A = 64, 8, 96, 16, 3
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
        "logits": f32(rng.normal(size=(B, A)) * 2),
        "actions": rng.integers(0, A, B),
        "phi_next_pred": f32(rng.normal(size=(B, F))),
        "phi_next": f32(rng.normal(size=(B, F))),
    }


def test_batch_has_episode_ends(batch):
    assert batch["dones"].sum() > 10


def test_compute_gae_parity(twins, batch):
    pt, jx = twins
    args = [batch[k] for k in ("rewards", "values", "dones", "last_value")]
    adv_t, ret_t = pt.compute_gae(*map(torch.as_tensor, args), 0.99, 0.95)
    adv_j, ret_j = jx.compute_gae(*args, 0.99, 0.95)
    np.testing.assert_allclose(adv_t.numpy(), np.asarray(adv_j), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(ret_t.numpy(), np.asarray(ret_j), atol=TOL, rtol=TOL)


def test_compute_gae_gradient_parity(twins, batch):
    pt, jx = twins
    r, v, lv = (torch.tensor(batch[k], requires_grad=True) for k in ("rewards", "values", "last_value"))
    adv, _ = pt.compute_gae(r, v, torch.as_tensor(batch["dones"]), lv, 0.99, 0.95)
    adv.sum().backward()
    f = lambda r, v, lv: jx.compute_gae(r, v, batch["dones"], lv, 0.99, 0.95)[0].sum()
    grads = jax.grad(f, argnums=(0, 1, 2))(batch["rewards"], batch["values"], batch["last_value"])
    for g_t, g_j in zip((r.grad, v.grad, lv.grad), grads):
        np.testing.assert_allclose(g_t.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)


@pytest.mark.parametrize("clip_coef", [0.1, 0.2, 0.3])
def test_policy_loss_and_gradient_parity(twins, batch, clip_coef):
    pt, jx = twins
    logp = torch.tensor(batch["logp"], requires_grad=True)
    adv = torch.tensor(batch["advantages"], requires_grad=True)
    loss_t = pt.ppo_policy_loss(logp, torch.as_tensor(batch["logp_old"]), adv, clip_coef)
    loss_t.backward()
    f = lambda lp, a: jx.ppo_policy_loss(lp, batch["logp_old"], a, clip_coef)
    loss_j, (g_logp, g_adv) = jax.value_and_grad(f, argnums=(0, 1))(batch["logp"], batch["advantages"])
    assert abs(loss_t.item() - float(loss_j)) < TOL
    np.testing.assert_allclose(logp.grad.numpy(), np.asarray(g_logp), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(adv.grad.numpy(), np.asarray(g_adv), atol=TOL, rtol=TOL)


@pytest.mark.parametrize("clip_coef", [None, 0.2, 1.0])
def test_value_loss_and_gradient_parity(twins, batch, clip_coef):
    pt, jx = twins
    v = torch.tensor(batch["v"], requires_grad=True)
    loss_t = pt.ppo_value_loss(
        v, torch.as_tensor(batch["v_old"]), torch.as_tensor(batch["returns"]), clip_coef
    )
    loss_t.backward()
    f = lambda v: jx.ppo_value_loss(v, batch["v_old"], batch["returns"], clip_coef)
    loss_j, g_v = jax.value_and_grad(f)(batch["v"])
    assert abs(loss_t.item() - float(loss_j)) < TOL
    np.testing.assert_allclose(v.grad.numpy(), np.asarray(g_v), atol=TOL, rtol=TOL)


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
