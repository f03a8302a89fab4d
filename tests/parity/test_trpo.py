"""Tier 2 for TRPO: the twins' module-level math agrees within 1e-5 on identical inputs: GAE, the
log-prob, the KL, the surrogate (values and gradients), the Fisher-vector product and conjugate
gradient on a small policy network."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

TOL = 1e-5


@pytest.fixture(params=[0, 1, 2])
def batch(request):
    rng = np.random.default_rng(request.param)
    T, N, A = 32, 4, 3
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    return {
        "rewards": f32(rng.normal(size=(T, N))),
        "values": f32(rng.normal(size=(T, N))),
        "dones": f32(rng.random((T, N)) < 0.1),
        "last_value": f32(rng.normal(size=N)),
        "logits_old": f32(rng.normal(size=(T * N, A))),
        "logits_new": f32(rng.normal(size=(T * N, A))),
        "actions": rng.integers(0, A, T * N),
        "advantages": f32(rng.normal(size=T * N)),
        "theta": f32(rng.normal(size=26) * 0.7),
        "obs": f32(rng.normal(size=(16, 3))),
        "v": f32(rng.normal(size=26)),
    }


def close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=TOL, rtol=TOL)


def test_kl_and_surrogate_parity_with_gradients(twins, batch):
    pt, jx = twins
    ln = torch.tensor(batch["logits_new"], requires_grad=True)
    logp_old_t = pt.categorical_log_prob(
        torch.as_tensor(batch["logits_old"]), torch.as_tensor(batch["actions"])
    )
    kl_t = pt.categorical_kl(torch.as_tensor(batch["logits_old"]), ln)
    s_t = pt.surrogate(
        pt.categorical_log_prob(ln, torch.as_tensor(batch["actions"])),
        logp_old_t,
        torch.as_tensor(batch["advantages"]),
    )
    (kl_t + s_t).backward()
    logp_old_j = jx.categorical_log_prob(batch["logits_old"], jnp.asarray(batch["actions"]))
    close(logp_old_t.numpy(), logp_old_j)

    def f(lnj):
        kl = jx.categorical_kl(batch["logits_old"], lnj)
        s = jx.surrogate(
            jx.categorical_log_prob(lnj, jnp.asarray(batch["actions"])), logp_old_j, batch["advantages"]
        )
        return kl + s, (kl, s)

    (_, (kl_j, s_j)), g_j = jax.value_and_grad(f, has_aux=True)(batch["logits_new"])
    assert abs(kl_t.item() - float(kl_j)) < TOL and abs(s_t.item() - float(s_j)) < TOL
    close(ln.grad.numpy(), g_j)


def logits_fn(theta, obs, lib):
    W1, b1 = theta[:12].reshape(3, 4), theta[12:16]
    W2, b2 = theta[16:24].reshape(4, 2), theta[24:26]
    return lib.tanh(obs @ W1 + b1) @ W2 + b2


def test_fisher_vector_product_and_cg_parity(twins, batch):
    pt, jx = twins
    theta_old = batch["theta"]
    theta = theta_old + 0.1 * batch["v"]
    obs_t = torch.as_tensor(batch["obs"])
    lo_t = logits_fn(torch.as_tensor(theta_old), obs_t, torch)
    kl_t = lambda th: pt.categorical_kl(lo_t, logits_fn(th, obs_t, torch))
    lo_j = logits_fn(jnp.asarray(theta_old), batch["obs"], jnp)
    kl_j = lambda th: jx.categorical_kl(lo_j, logits_fn(th, batch["obs"], jnp))
    for damping in (0.0, 0.1):
        close(
            pt.fisher_vector_product(
                kl_t, torch.as_tensor(theta), torch.as_tensor(batch["v"]), damping
            ).numpy(),
            jx.fisher_vector_product(kl_j, jnp.asarray(theta), jnp.asarray(batch["v"]), damping),
        )
    # conjugate gradient through the damped Fisher-vector product, 10 iterations
    x_t = pt.conjugate_gradient(
        lambda v: pt.fisher_vector_product(kl_t, torch.as_tensor(theta_old), v, 0.1),
        torch.as_tensor(batch["v"]),
        10,
    )
    x_j = jx.conjugate_gradient(
        lambda v: jx.fisher_vector_product(kl_j, jnp.asarray(theta_old), v, 0.1), jnp.asarray(batch["v"]), 10
    )
    np.testing.assert_allclose(x_t.numpy(), np.asarray(x_j), atol=1e-4, rtol=1e-4)


def test_conjugate_gradient_parity_on_spd_system(twins, batch):
    """The same SPD system in both twins: the CG iterates agree within 1e-5."""
    pt, jx = twins
    rng = np.random.default_rng(7)
    M = rng.normal(size=(26, 26))
    A = (M @ M.T / 26 + np.eye(26)).astype(np.float32)
    x_t = pt.conjugate_gradient(lambda v: torch.as_tensor(A) @ v, torch.as_tensor(batch["v"]), 10)
    x_j = jx.conjugate_gradient(lambda v: jnp.asarray(A) @ v, jnp.asarray(batch["v"]), 10)
    close(x_t.numpy(), x_j)
