"""Tier 2 for continuous-action PPO: the twins' Gaussian log-prob and entropy (the math that is
new relative to algos/ppo_*.py) agree within 1e-5 on identical random inputs, values and gradients
with respect to the mean, the log-std and the actions; the shared PPO functions are checked too."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

TOL = 1e-5


@pytest.fixture(params=[0, 1, 2])
def batch(request):
    rng = np.random.default_rng(request.param)
    B, A, T, N = 64, 3, 32, 4
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    return {
        "mean": f32(rng.normal(size=(B, A))),
        "log_std": f32(rng.uniform(-1.5, 0.5, size=A)),
        "actions": f32(rng.normal(size=(B, A)) * 1.5),
        "rewards": f32(rng.normal(size=(T, N))),
        "values": f32(rng.normal(size=(T, N))),
        "dones": f32(rng.random((T, N)) < 0.1),
        "last_value": f32(rng.normal(size=N)),
        "logp": f32(np.log(rng.uniform(0.05, 1.0, size=B))),
        "logp_old": f32(np.log(rng.uniform(0.05, 1.0, size=B))),
        "advantages": f32(rng.normal(size=B)),
    }


def test_gaussian_log_prob_and_gradient_parity(twins, batch):
    pt, jx = twins
    mean, log_std, actions = (
        torch.tensor(batch[k], requires_grad=True) for k in ("mean", "log_std", "actions")
    )
    logp_t = pt.gaussian_log_prob(mean, log_std, actions)
    # a weighted sum, so that each sample's gradient is checked, not only their total
    weights = np.linspace(-1.0, 1.0, len(batch["mean"]), dtype=np.float32)
    (logp_t * torch.as_tensor(weights)).sum().backward()
    logp_j = jx.gaussian_log_prob(batch["mean"], batch["log_std"], batch["actions"])
    np.testing.assert_allclose(logp_t.detach().numpy(), np.asarray(logp_j), atol=TOL, rtol=TOL)
    f = lambda m, s, a: (jx.gaussian_log_prob(m, s, a) * weights).sum()
    grads = jax.grad(f, argnums=(0, 1, 2))(batch["mean"], batch["log_std"], batch["actions"])
    for g_t, g_j in zip((mean.grad, log_std.grad, actions.grad), grads):
        np.testing.assert_allclose(g_t.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)


def test_gaussian_entropy_and_gradient_parity(twins, batch):
    pt, jx = twins
    log_std = torch.tensor(batch["log_std"], requires_grad=True)
    ent_t = pt.gaussian_entropy(log_std)
    ent_t.backward()
    ent_j, g_j = jax.value_and_grad(jx.gaussian_entropy)(batch["log_std"])
    assert abs(ent_t.item() - float(ent_j)) < TOL
    np.testing.assert_allclose(log_std.grad.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)
    # broadcast to a batch, as evaluate_actions does: one entropy per sample
    wide = np.broadcast_to(batch["log_std"], batch["mean"].shape)
    np.testing.assert_allclose(
        pt.gaussian_entropy(torch.as_tensor(wide.copy())).numpy(),
        np.asarray(jx.gaussian_entropy(jnp.asarray(wide))),
        atol=TOL,
        rtol=TOL,
    )


def test_policy_loss_on_gaussian_log_probs_gradient_parity(twins, batch):
    """The clipped surrogate on Gaussian log-probs, differentiated back to the mean and log-std:
    the path the update takes."""
    pt, jx = twins
    mean, log_std = (torch.tensor(batch[k], requires_grad=True) for k in ("mean", "log_std"))
    logp_old = batch["logp_old"]
    # old log-probs near the new ones, so that some ratios fall inside the clip and some outside
    logp_old = (
        pt.gaussian_log_prob(
            torch.as_tensor(batch["mean"]),
            torch.as_tensor(batch["log_std"]),
            torch.as_tensor(batch["actions"]),
        ).numpy()
        + 0.3 * logp_old
    )
    loss_t = pt.ppo_policy_loss(
        pt.gaussian_log_prob(mean, log_std, torch.as_tensor(batch["actions"])),
        torch.as_tensor(logp_old),
        torch.as_tensor(batch["advantages"]),
        0.2,
    )
    loss_t.backward()
    f = lambda m, s: jx.ppo_policy_loss(
        jx.gaussian_log_prob(m, s, batch["actions"]), logp_old, batch["advantages"], 0.2
    )
    loss_j, (g_m, g_s) = jax.value_and_grad(f, argnums=(0, 1))(batch["mean"], batch["log_std"])
    assert abs(loss_t.item() - float(loss_j)) < TOL
    np.testing.assert_allclose(mean.grad.numpy(), np.asarray(g_m), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(log_std.grad.numpy(), np.asarray(g_s), atol=TOL, rtol=TOL)
