"""Tier 2 for PETS: on identical inputs the twins' Pendulum reward, soft log-variance bounds,
Gaussian NLL and ensemble loss (with their gradients), TS-1 routing, CEM refit, CEM on the same
noise, the warm-start shift, and the ensemble network (mean, log-variance, a sample with the same
eps, the loss gradient) on the same weights agree within 1e-5. So do, on the same ensemble weights
and normaliser, the planner's TS-1 objective (Planner.returns: every candidate's predicted return
for the same start observation, candidates, member routing and Gaussian-head noise), one whole CEM
planning call (Planner.act / Planner.plan: the action and the shifted warm-start mean, with the same
CEM noise, routing and head noise), and the model fit (fit_ensemble through make_fit in JAX, from
the same weights and bootstrap/minibatch draws: the normaliser, the loss, the gradients as one
plain SGD step, the parameters after a few Adam steps)."""

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch

TOL = 1e-5


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
        "delta": f32(rng.normal(size=(256, 3)) * [0.05, 0.05, 0.8] + [0.0, 0.0, 0.1]),
        "plan_samples": f32(rng.uniform(-2, 2, size=(20, 6, 1))),
        "seed": request.param,
    }


def T(x):
    return torch.as_tensor(x)


def test_reward_and_logvar_bounds_parity(twins, data):
    pt, jx = twins
    np.testing.assert_allclose(
        pt.pendulum_reward(T(data["obs"]), T(data["action"])).numpy(),
        np.asarray(jx.pendulum_reward(data["obs"], data["action"])),
        atol=TOL,
        rtol=TOL,
    )
    raw = torch.tensor(data["raw"], requires_grad=True)
    out_t = pt.soft_bound_logvar(raw, T(data["max_logvar"]), T(data["min_logvar"]))
    out_t.sum().backward()
    f = lambda r: jx.soft_bound_logvar(r, data["max_logvar"], data["min_logvar"])
    np.testing.assert_allclose(out_t.detach().numpy(), np.asarray(f(data["raw"])), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(
        raw.grad.numpy(), np.asarray(jax.grad(lambda r: f(r).sum())(data["raw"])), atol=TOL, rtol=TOL
    )


def test_nll_and_ensemble_loss_parity_with_gradients(twins, data):
    pt, jx = twins
    names = ("mean", "logvar", "max_logvar", "min_logvar")
    leaves = {k: torch.tensor(data[k], requires_grad=True) for k in names}
    loss_t = pt.ensemble_loss(
        leaves["mean"], leaves["logvar"], T(data["target"]), leaves["max_logvar"], leaves["min_logvar"], 0.01
    )
    loss_t.backward()
    f = lambda mu, lv, mx, mn: jx.ensemble_loss(mu, lv, data["target"], mx, mn, 0.01)
    loss_j, grads = jax.value_and_grad(f, argnums=(0, 1, 2, 3))(*(data[k] for k in names))
    assert abs(loss_t.item() - float(loss_j)) < TOL * max(1.0, abs(float(loss_j)))
    for k, g in zip(names, grads):
        np.testing.assert_allclose(leaves[k].grad.numpy(), np.asarray(g), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(
        pt.gaussian_nll(T(data["mean"]), T(data["logvar"]), T(data["target"])).item(),
        float(jx.gaussian_nll(data["mean"], data["logvar"], data["target"])),
        atol=TOL,
        rtol=TOL,
    )


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
    m_t, s_t = pt.cem_refit(
        T(data["samples"]), T(data["values"]), T(data["cem_mean"]), T(data["cem_std"]), 8, 0.1
    )
    m_j, s_j = jx.cem_refit(data["samples"], data["values"], data["cem_mean"], data["cem_std"], 8, 0.1)
    np.testing.assert_allclose(m_t.numpy(), np.asarray(m_j), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(s_t.numpy(), np.asarray(s_j), atol=TOL, rtol=TOL)
    target = np.random.default_rng(5).uniform(-1.5, 1.5, size=(7, 2)).astype(np.float32)
    low, high = np.array([-2.0, -1.0], np.float32), np.array([2.0, 1.0], np.float32)
    plan_t = pt.cem_optimize(
        lambda s, i: -((s - T(target)) ** 2).sum((1, 2)),
        T(data["cem_mean"]),
        T(data["cem_std"]),
        T(low),
        T(high),
        T(data["noise"]),
        8,
        0.1,
    )
    plan_j = jax.jit(
        lambda mean, std, noise: jx.cem_optimize(
            lambda s, i: -((s - target) ** 2).sum((1, 2)), mean, std, low, high, noise, 8, 0.1
        )
    )(data["cem_mean"], data["cem_std"], data["noise"])
    np.testing.assert_allclose(plan_t.numpy(), np.asarray(plan_j), atol=TOL, rtol=TOL)
    fill = (low + high) / 2.0
    np.testing.assert_allclose(
        pt.shift_mean(plan_t, T(fill)).numpy(), np.asarray(jx.shift_mean(plan_j, fill)), atol=TOL
    )


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
    params = {
        "params": {
            f"EnsembleLinear_{i}": {
                "kernel": jnp.asarray(l.weight.detach().numpy()),
                "bias": jnp.asarray(l.bias.detach().numpy()),
            }
            for i, l in enumerate(t_model.layers)
        }
    }
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
    np.testing.assert_allclose(
        t_model.sample(T(x), T(eps)).detach().numpy(),
        np.asarray(jx.ensemble_sample(j_model, params, norm, x, eps)),
        atol=TOL,
        rtol=TOL,
    )
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
    np.testing.assert_allclose(
        t_model.max_logvar.grad.numpy(), np.asarray(grads["params"]["max_logvar"]), atol=TOL
    )
    np.testing.assert_allclose(
        t_model.min_logvar.grad.numpy(), np.asarray(grads["params"]["min_logvar"]), atol=TOL
    )


# ----------------------------------------------------------------------------- same weights, same draws
def twin_ensembles(pt, jx, E=5, in_dim=4, out_dim=3, hidden=32):
    """A torch ensemble (torch.manual_seed(0)) and the JAX module with its weights copied over."""
    torch.manual_seed(0)
    t_model = pt.ProbabilisticEnsemble(E, in_dim, out_dim, hidden)
    params = {
        "params": {
            f"EnsembleLinear_{i}": {
                "kernel": jnp.asarray(l.weight.detach().numpy()),
                "bias": jnp.asarray(l.bias.detach().numpy()),
            }
            for i, l in enumerate(t_model.layers)
        }
    }
    params["params"]["max_logvar"] = jnp.asarray(t_model.max_logvar.detach().numpy())
    params["params"]["min_logvar"] = jnp.asarray(t_model.min_logvar.detach().numpy())
    j_model = jx.ProbabilisticEnsemble(E, out_dim, hidden)
    assert jax.tree.structure(
        j_model.init(jax.random.PRNGKey(0), jnp.zeros((E, 1, in_dim)))
    ) == jax.tree.structure(params)
    return t_model, j_model, params


def transitions(data):
    """Pendulum-like (s, a) inputs and s' - s targets (256 rows) for the normaliser and the fit."""
    return np.concatenate([data["obs"], data["action"]], -1), data["delta"]


def ts1_draws(key, rows, E, obs_dim, horizon):
    """What the JAX Planner.returns draws from its key, in torch's order: per imagined step t the TS-1
    permutation of the rows, then the heads' standard normal eps (E, rows / E, obs_dim)."""
    draws = []
    for t in range(horizon):
        perm_key, eps_key = jax.random.split(jax.random.fold_in(key, t))
        draws.append(np.asarray(jax.random.permutation(perm_key, rows)))
        draws.append(np.asarray(jax.random.normal(eps_key, (E, rows // E, obs_dim))))
    return draws


class FedTorch:
    """The torch module for the torch twin, except that randperm and randn hand out the given draws
    in order (checking each one's size): the torch planner then routes and samples exactly as the
    JAX one does with its key."""

    def __init__(self, draws):
        self.draws = list(draws)

    def __getattr__(self, name):
        return getattr(torch, name)

    def randperm(self, n, device=None):
        x = self.draws.pop(0)
        assert x.shape == (n,)
        return torch.tensor(x, dtype=torch.int64)

    def randn(self, *shape, device=None):
        x = self.draws.pop(0)
        assert x.shape == tuple(shape) and x.dtype == np.float32
        return torch.tensor(x)


def planner_inputs(pt, jx, data):
    """Both twins' ensembles on the same weights, each with the normaliser of the same transitions,
    and Pendulum's action bounds: what a planner of either twin is built from."""
    t_model, j_model, params = twin_ensembles(pt, jx)
    inputs, targets = transitions(data)
    t_model.set_normalizer(inputs, targets)
    low, high = np.array([-2.0], np.float32), np.array([2.0], np.float32)
    return t_model, j_model, params, jx.make_normalizer(inputs, targets), low, high


PLAN = SimpleNamespace(
    horizon=6, particles=2, population=20, num_elites=4, cem_iterations=3, cem_smoothing=0.1
)


def test_planner_returns_parity(twins, data, monkeypatch):
    """Planner.returns, the TS-1 objective: the same weights, normaliser, start observation and
    candidate action sequences (population 20, horizon 6, 2 particles, 5 members). Neither twin takes
    the routing or the Gaussian heads' noise as an argument (torch draws torch.randperm / torch.randn
    inside, JAX splits its key), so the JAX twin draws from its key and the torch twin is handed the
    same permutations and eps through its module's `torch` (FedTorch). Every candidate's predicted
    return agrees within 1e-5."""
    pt, jx = twins
    t_model, j_model, params, norm, low, high = planner_inputs(pt, jx, data)
    obs = data["obs"][0]
    samples = data["plan_samples"]
    key = jax.random.PRNGKey(data["seed"])
    j_planner = jx.Planner(j_model, PLAN, low, high, key)
    values_j = np.asarray(jax.jit(j_planner.returns)(params, norm, obs, samples, key))
    fed = FedTorch(ts1_draws(key, PLAN.population * PLAN.particles, 5, 3, PLAN.horizon))
    monkeypatch.setattr(pt, "torch", fed)
    with torch.no_grad():
        values_t = pt.Planner(t_model, PLAN, low, high).returns(T(obs), T(samples)).numpy()
    assert fed.draws == [] and values_t.shape == (PLAN.population,)
    assert np.ptp(values_j) > 1.0  # the candidates differ: the test is not comparing constants
    np.testing.assert_allclose(values_t, values_j, atol=TOL, rtol=TOL)


def test_planner_cem_plan_parity(twins, data, monkeypatch):
    """One whole planning call, Planner.act (torch) against the jitted Planner.plan (JAX), from the
    same weights, normaliser, observation and warm-start mean: the torch twin is handed the CEM noise
    and then, per CEM iteration, the TS-1 routing and heads' eps that the JAX twin draws from its key
    (split into noise / returns keys, the returns key folded with the iteration). The first action and
    the shifted mean kept for the next step agree within 1e-5. The plan depends on the objective only
    through which candidates are elites, so this checks the elite choices and the refits; the values
    themselves are test_planner_returns_parity's."""
    pt, jx = twins
    t_model, j_model, params, norm, low, high = planner_inputs(pt, jx, data)
    obs = data["obs"][1]
    key = jax.random.PRNGKey(100 + data["seed"])
    j_planner = jx.Planner(j_model, PLAN, low, high, key)
    action_j, mean_j, _ = j_planner.plan(params, norm, jnp.asarray(obs), j_planner.mean, key)
    _, noise_key, returns_key = jax.random.split(key, 3)
    draws = [
        np.asarray(jax.random.normal(noise_key, (PLAN.cem_iterations, PLAN.population, PLAN.horizon, 1)))
    ]
    for i in range(PLAN.cem_iterations):
        draws += ts1_draws(
            jax.random.fold_in(returns_key, i), PLAN.population * PLAN.particles, 5, 3, PLAN.horizon
        )
    fed = FedTorch(draws)
    monkeypatch.setattr(pt, "torch", fed)
    t_planner = pt.Planner(t_model, PLAN, low, high)
    action_t = t_planner.act(obs)
    assert fed.draws == []
    np.testing.assert_allclose(action_t, np.asarray(action_j), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(t_planner.mean.numpy(), np.asarray(mean_j), atol=TOL, rtol=TOL)


def _fit_both(twins, data, t_opt, j_opt, num_updates):
    """fit_ensemble of both twins from the same weights on the same transitions, with numpy
    Generators of the same seed (both draw the bootstrap, then each step's minibatch, in the same
    order); asserts the normalisers and the last losses agree. Returns the fitted torch model, its
    parameters before, and the JAX parameters before and after."""
    pt, jx = twins
    t_model, j_model, params = twin_ensembles(pt, jx)
    before = {n: p.detach().clone() for n, p in t_model.named_parameters()}
    inputs, targets = transitions(data)
    loss_t = pt.fit_ensemble(
        t_model, t_opt(t_model.parameters()), inputs, targets, num_updates, 32, 0.01, np.random.default_rng(3)
    )
    fit = jx.make_fit(j_model, j_opt, 0.01)
    new_params, _, norm, loss_j = jx.fit_ensemble(
        j_model, fit, params, j_opt.init(params), inputs, targets, num_updates, 32, np.random.default_rng(3)
    )
    for k in ("in_mean", "in_std", "out_mean", "out_std"):
        np.testing.assert_allclose(getattr(t_model, k).numpy(), np.asarray(norm[k]), atol=TOL, rtol=TOL)
    assert abs(loss_t - loss_j) < TOL * max(1.0, abs(loss_j))
    return t_model, before, params, new_params


def flax_leaf(p, name):
    """The JAX leaf of a torch parameter name: layers.i.weight -> EnsembleLinear_i.kernel."""
    if name.startswith("layers."):
        _, i, kind = name.split(".")
        return np.asarray(p["params"][f"EnsembleLinear_{i}"]["kernel" if kind == "weight" else "bias"])
    return np.asarray(p["params"][name])


def test_fit_ensemble_sgd_step_parity(twins, data):
    """One fit step through the real fitting code (torch fit_ensemble; JAX fit_ensemble -> make_fit),
    plain SGD with lr 1 so the step is the gradient itself: the same normaliser, the same loss, and
    the same gradient (before - after) of every parameter."""
    t_model, before, params, new_params = _fit_both(
        twins, data, lambda ps: torch.optim.SGD(ps, lr=1.0), optax.sgd(1.0), 1
    )
    for name, p in t_model.named_parameters():
        g_t = (before[name] - p.detach()).numpy()
        g_j = flax_leaf(params, name) - flax_leaf(new_params, name)
        assert np.abs(g_j).max() > 0
        np.testing.assert_allclose(g_t, g_j, atol=TOL, rtol=TOL)


def test_fit_ensemble_adam_parity(twins, data):
    """The fit as training runs it: Adam (lr 1e-3), 5 steps on bootstrap minibatches drawn from the
    same rng seed, from the same weights: the last loss and every parameter afterwards agree."""
    t_model, before, params, new_params = _fit_both(
        twins, data, lambda ps: torch.optim.Adam(ps, lr=1e-3), optax.adam(1e-3), 5
    )
    for name, p in t_model.named_parameters():
        assert not torch.equal(before[name], p.detach())
        np.testing.assert_allclose(p.detach().numpy(), flax_leaf(new_params, name), atol=TOL, rtol=TOL)
