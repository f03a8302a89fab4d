"""Tier 2 for Rainbow: every module-level function agrees between the twins within 1e-5 on
identical random inputs (values, and gradients of the loss and the noisy layer), and the networks
agree on the same weights with the noise off."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import torch_dense

TOL = 1e-5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_projection_and_loss_parity(twins, seed):
    pt, jx = twins
    rng = np.random.default_rng(seed)
    B, N = 128, 51
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    probs, rewards = f32(rng.dirichlet(np.ones(N), size=B)), f32(rng.normal(size=B) * 30)
    dones, discounts = f32(rng.random(B) < 0.2), f32(0.99 ** rng.integers(1, 4, size=B))
    atoms = f32(np.linspace(-100, 100, N))
    out_t = pt.categorical_projection(*map(torch.as_tensor, (probs, rewards, dones, discounts, atoms)))
    out_j = jx.categorical_projection(probs, rewards, dones, discounts, atoms)
    np.testing.assert_allclose(out_t.numpy(), np.asarray(out_j), atol=TOL, rtol=TOL)
    logits, weights = f32(rng.normal(size=(B, N))), f32(rng.random(B))
    l_t = torch.tensor(logits, requires_grad=True)
    loss_t, ce_t = pt.weighted_categorical_loss(l_t, out_t, torch.as_tensor(weights))
    loss_t.backward()
    f = lambda l: jx.weighted_categorical_loss(l, out_j, weights)
    (loss_j, ce_j), g_j = jax.value_and_grad(f, has_aux=True)(logits)
    assert abs(loss_t.item() - float(loss_j)) < TOL
    np.testing.assert_allclose(ce_t.detach().numpy(), np.asarray(ce_j), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(l_t.grad.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)


@pytest.mark.parametrize("seed", [0, 1])
def test_noisy_linear_and_gradient_parity(twins, seed):
    pt, jx = twins
    rng = np.random.default_rng(seed)
    f32 = lambda *shape: rng.normal(size=shape).astype(np.float32)
    args = [f32(16, 8), f32(8, 4), f32(8, 4), f32(4), f32(4), f32(8), f32(4)]
    t_args = [torch.tensor(a, requires_grad=True) for a in args]
    pt.noisy_linear(*t_args).sum().backward()
    grads = jax.grad(lambda *a: jx.noisy_linear(*a).sum(), argnums=(0, 1, 2, 3, 4))(*args)
    np.testing.assert_allclose(
        pt.noisy_linear(*map(torch.as_tensor, args)).numpy(),
        np.asarray(jx.noisy_linear(*args)),
        atol=TOL,
        rtol=TOL,
    )
    for t, g in zip(t_args[:5], grads):
        np.testing.assert_allclose(t.grad.numpy(), np.asarray(g), atol=1e-4, rtol=TOL)


def test_n_step_and_sum_tree_are_the_same_code(twins):
    pt, jx = twins
    o = [np.full(2, k, dtype=np.float32) for k in range(4)]
    window = [(o[0], 1, 1.0, o[1], False), (o[1], 0, -2.0, o[2], False), (o[2], 1, 0.5, o[3], True)]
    a, b = pt.n_step_transition(window, 0.97), jx.n_step_transition(window, 0.97)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y)


def test_networks_agree_on_the_same_weights_with_noise_off(twins):
    pt, jx = twins
    torch.manual_seed(0)
    t_net = pt.QNetwork(4, 3, 11, -10.0, 10.0, 0.5)
    t_net.eval()
    j_net = jx.QNetwork(3, 11, -10.0, 10.0, 0.5)
    lin = [l for l in t_net.trunk if isinstance(l, torch.nn.Linear)]
    p = {f"Dense_{i}": torch_dense(l) for i, l in enumerate(lin)}
    for i, layer in enumerate((t_net.value, t_net.advantage)):
        p[f"NoisyLinear_{i}"] = {
            k: jnp.asarray(getattr(layer, k).detach().numpy()) for k in ("mu_w", "sigma_w", "mu_b", "sigma_b")
        }
    params = {"params": p}
    obs = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    np.testing.assert_allclose(
        t_net(torch.as_tensor(obs)).detach().numpy(),
        np.asarray(j_net.apply(params, obs, False)),
        atol=TOL,
        rtol=TOL,
    )
