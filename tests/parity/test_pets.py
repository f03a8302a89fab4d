"""Tier 2 for PETS: on identical inputs the twins' Pendulum reward, soft log-variance bounds,
Gaussian NLL and ensemble loss (with their gradients), TS-1 routing, CEM refit, CEM on the same
noise, the warm-start shift, and the ensemble network (mean, log-variance, a sample with the same
eps, the loss gradient) on the same weights agree within 1e-5."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from helpers import load_script

TOL = 1e-5


@pytest.fixture(scope="module")
def twins():
    return load_script("algos/pets_torch.py"), load_script("algos/pets_jax.py")


@pytest.fixture(params=[0, 1, 2])
def data(request):
    rng = np.random.default_rng(request.param)
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    th = rng.uniform(-np.pi, np.pi, size=256)
    return {
        "obs": f32(np.stack([np.cos(th), np.sin(th), rng.uniform(-8, 8, size=256)], -1)),
        "action": f32(rng.uniform(-3, 3, size=(256, 1))),
        "raw": f32(rng.normal(scale=6.0, size=(5, 64, 3))),
        "mean": f32(rng.normal(size=(5, 64, 3))),
        "logvar": f32(rng.uniform(-6, 1, size=(5, 64, 3))),
        "target": f32(rng.normal(size=(5, 64, 3))),
        "max_logvar": f32(rng.uniform(0, 1, size=3)),
        "min_logvar": f32(rng.uniform(-11, -9, size=3)),
        "perm": rng.permutation(100),
        "rows": f32(rng.normal(size=(100, 4))),
        "samples": f32(rng.uniform(-2, 2, size=(50, 7, 2))),
        "values": f32(rng.normal(size=50)),
        "cem_mean": f32(rng.normal(size=(7, 2))),
        "cem_std": f32(rng.uniform(0.1, 1, size=(7, 2))),
        "noise": f32(rng.normal(size=(4, 50, 7, 2))),
    }


def T(x):
    return torch.as_tensor(x)


def test_reward_and_logvar_bounds_parity(twins, data):
    pt, jx = twins
    np.testing.assert_allclose(pt.pendulum_reward(T(data["obs"]), T(data["action"])).numpy(),
                               np.asarray(jx.pendulum_reward(data["obs"], data["action"])), atol=TOL, rtol=TOL)
    raw = torch.tensor(data["raw"], requires_grad=True)
    out_t = pt.soft_bound_logvar(raw, T(data["max_logvar"]), T(data["min_logvar"]))
    out_t.sum().backward()
    f = lambda r: jx.soft_bound_logvar(r, data["max_logvar"], data["min_logvar"])
    np.testing.assert_allclose(out_t.detach().numpy(), np.asarray(f(data["raw"])), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(raw.grad.numpy(), np.asarray(jax.grad(lambda r: f(r).sum())(data["raw"])), atol=TOL, rtol=TOL)


def test_nll_and_ensemble_loss_parity_with_gradients(twins, data):
    pt, jx = twins
    names = ("mean", "logvar", "max_logvar", "min_logvar")
    leaves = {k: torch.tensor(data[k], requires_grad=True) for k in names}
    loss_t = pt.ensemble_loss(leaves["mean"], leaves["logvar"], T(data["target"]), leaves["max_logvar"],
                              leaves["min_logvar"], 0.01)
    loss_t.backward()
    f = lambda mu, lv, mx, mn: jx.ensemble_loss(mu, lv, data["target"], mx, mn, 0.01)
    loss_j, grads = jax.value_and_grad(f, argnums=(0, 1, 2, 3))(*(data[k] for k in names))
    assert abs(loss_t.item() - float(loss_j)) < TOL * max(1.0, abs(float(loss_j)))
    for k, g in zip(names, grads):
        np.testing.assert_allclose(leaves[k].grad.numpy(), np.asarray(g), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(pt.gaussian_nll(T(data["mean"]), T(data["logvar"]), T(data["target"])).item(),
                               float(jx.gaussian_nll(data["mean"], data["logvar"], data["target"])), atol=TOL, rtol=TOL)


def test_ts1_routing_parity(twins, data):
    pt, jx = twins
    g_t = pt.ts1_group(T(data["rows"]), T(data["perm"]), 5)
    g_j = jx.ts1_group(jnp.asarray(data["rows"]), jnp.asarray(data["perm"]), 5)
    np.testing.assert_array_equal(g_t.numpy(), np.asarray(g_j))
    assert g_t.shape == (5, 20, 4)
    back_t, back_j = pt.ts1_ungroup(g_t, T(data["perm"])), jx.ts1_ungroup(g_j, jnp.asarray(data["perm"]))
    np.testing.assert_array_equal(back_t.numpy(), data["rows"])  # a round trip
    np.testing.assert_array_equal(np.asarray(back_j), data["rows"])


def test_cem_parity(twins, data):
    pt, jx = twins
    m_t, s_t = pt.cem_refit(T(data["samples"]), T(data["values"]), T(data["cem_mean"]), T(data["cem_std"]), 8, 0.1)
    m_j, s_j = jx.cem_refit(data["samples"], data["values"], data["cem_mean"], data["cem_std"], 8, 0.1)
    np.testing.assert_allclose(m_t.numpy(), np.asarray(m_j), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(s_t.numpy(), np.asarray(s_j), atol=TOL, rtol=TOL)
    target = np.random.default_rng(5).uniform(-1.5, 1.5, size=(7, 2)).astype(np.float32)
    low, high = np.array([-2.0, -1.0], np.float32), np.array([2.0, 1.0], np.float32)
    plan_t = pt.cem_optimize(lambda s, i: -((s - T(target)) ** 2).sum((1, 2)), T(data["cem_mean"]), T(data["cem_std"]),
                             T(low), T(high), T(data["noise"]), 8, 0.1)
    plan_j = jax.jit(lambda mean, std, noise: jx.cem_optimize(lambda s, i: -((s - target) ** 2).sum((1, 2)), mean, std,
                                                              low, high, noise, 8, 0.1))(data["cem_mean"], data["cem_std"], data["noise"])
    np.testing.assert_allclose(plan_t.numpy(), np.asarray(plan_j), atol=TOL, rtol=TOL)
    fill = (low + high) / 2.0
    np.testing.assert_allclose(pt.shift_mean(plan_t, T(fill)).numpy(), np.asarray(jx.shift_mean(plan_j, fill)), atol=TOL)


def test_networks_agree_on_the_same_weights(twins, data):
    """torch weights copied into the JAX pytree, the same normaliser: the same normalised mean and
    log-variance, the same raw sample for the same eps, the same loss gradients."""
    pt, jx = twins
    torch.manual_seed(0)
    E, in_dim, out_dim, hidden = 5, 4, 3, 32
    t_model = pt.ProbabilisticEnsemble(E, in_dim, out_dim, hidden)
    rng = np.random.default_rng(0)
    inputs = (rng.normal(size=(300, in_dim)) * [1, 1, 5, 2]).astype(np.float32)
    targets = (rng.normal(size=(300, out_dim)) * [0.1, 0.2, 1.0]).astype(np.float32)
    t_model.set_normalizer(inputs, targets)
    norm = jx.make_normalizer(inputs, targets)
    for k in ("in_mean", "in_std", "out_mean", "out_std"):
        np.testing.assert_allclose(getattr(t_model, k).numpy(), np.asarray(norm[k]), atol=TOL, rtol=TOL)
    params = {"params": {f"EnsembleLinear_{i}": {"kernel": jnp.asarray(l.weight.detach().numpy()),
                                                 "bias": jnp.asarray(l.bias.detach().numpy())}
                         for i, l in enumerate(t_model.layers)}}
    params["params"]["max_logvar"] = jnp.asarray(t_model.max_logvar.detach().numpy())
    params["params"]["min_logvar"] = jnp.asarray(t_model.min_logvar.detach().numpy())
    j_model = jx.ProbabilisticEnsemble(E, out_dim, hidden)
    template = j_model.init(jax.random.PRNGKey(0), jnp.zeros((E, 1, in_dim)))
    assert jax.tree.structure(template) == jax.tree.structure(params)
    x = inputs[:100].reshape(E, 20, in_dim)
    eps = rng.normal(size=(E, 20, out_dim)).astype(np.float32)
    xn = (x - np.asarray(norm["in_mean"])) / np.asarray(norm["in_std"])
    mean_t, logvar_t = t_model(T(xn))
    mean_j, logvar_j = j_model.apply(params, xn)
    np.testing.assert_allclose(mean_t.detach().numpy(), np.asarray(mean_j), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(logvar_t.detach().numpy(), np.asarray(logvar_j), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(t_model.sample(T(x), T(eps)).detach().numpy(),
                               np.asarray(jx.ensemble_sample(j_model, params, norm, x, eps)), atol=TOL, rtol=TOL)
    y = rng.normal(size=(E, 20, out_dim)).astype(np.float32)
    loss_t = pt.ensemble_loss(mean_t, logvar_t, T(y), t_model.max_logvar, t_model.min_logvar, 0.01)
    loss_t.backward()

    def loss_j(p):
        mu, lv = j_model.apply(p, xn)
        return jx.ensemble_loss(mu, lv, y, p["params"]["max_logvar"], p["params"]["min_logvar"], 0.01)
    value, grads = jax.value_and_grad(loss_j)(params)
    assert abs(loss_t.item() - float(value)) < TOL * max(1.0, abs(float(value)))
    for i, l in enumerate(t_model.layers):
        g = grads["params"][f"EnsembleLinear_{i}"]
        np.testing.assert_allclose(l.weight.grad.numpy(), np.asarray(g["kernel"]), atol=TOL, rtol=1e-4)
        np.testing.assert_allclose(l.bias.grad.numpy(), np.asarray(g["bias"]), atol=TOL, rtol=1e-4)
    np.testing.assert_allclose(t_model.max_logvar.grad.numpy(), np.asarray(grads["params"]["max_logvar"]), atol=TOL)
    np.testing.assert_allclose(t_model.min_logvar.grad.numpy(), np.asarray(grads["params"]["min_logvar"]), atol=TOL)
