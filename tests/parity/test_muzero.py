"""Tier 2 for MuZero: on identical inputs the twins' value transform and its inverse, the two-hot
projection and its expectation, latent scaling, the gradient scaler (values and gradients), n-step
targets over windows with terminations and truncations, the MuZero loss (values and gradients with
respect to every logit), PUCT scores, the min-max normalisation, the visit-count policy and the
observation scaling agree within 1e-5; the two searches (our MCTS, mctx with min_max_qtransform)
return the same visit counts and root values for the same random model without root noise; and on
shared weights the two MuZeroNets agree (initial inference, the model step) and the evaluation search
of each twin (torch `search`, JAX `make_act`) picks the same actions from the same visit counts."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import torch_dense

TOL = 1e-5


@pytest.fixture(params=[0, 1, 2])
def data(request):
    rng = np.random.default_rng(request.param)
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    B, K, n, A, S = 32, 5, 10, 3, 10
    return {
        "x": f32(rng.normal(scale=30.0, size=200)),
        "y": f32(rng.uniform(-12, 12, size=200)),
        "logits": f32(rng.normal(size=(64, 2 * S + 1))),
        "latent": f32(rng.normal(size=(16, 8))),
        "rewards": f32(rng.uniform(0, 2, size=(B, K + n))),
        "values": f32(rng.uniform(-5, 50, size=(B, K + n + 1))),
        "terminated": f32(rng.random((B, K + n)) < 0.08),
        "truncated": f32(rng.random((B, K + n)) < 0.05),
        "bootstrap": f32(rng.uniform(0, 50, size=(B, K + n))),
        "policy_logits": f32(rng.normal(size=(B, K + 1, A))),
        "value_logits": f32(rng.normal(size=(B, K + 1, 2 * S + 1))),
        "reward_logits": f32(rng.normal(size=(B, K, 2 * S + 1))),
        "target_policies": f32(rng.dirichlet(np.ones(A), size=(B, K + 1))),
        "prior": f32(rng.dirichlet(np.ones(A), size=B)),
        "child_visits": f32(rng.integers(0, 6, size=(B, A))),
        "q": f32(rng.uniform(-3, 9, size=(B, A))),
        "q_min": f32(rng.uniform(-4, 0, size=B)),
        "q_max": f32(rng.uniform(0, 10, size=B)),
        "counts": f32(rng.integers(1, 20, size=(B, A))),
        "shape": (B, K, n, A, S),
    }


def T(x):
    return torch.as_tensor(x)


def close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=TOL, rtol=TOL)


def test_transform_support_and_latent_parity(twins, data):
    pt, jx = twins
    close(pt.h(T(data["x"])), jx.h(data["x"]))
    close(pt.h_inv(T(data["y"])), jx.h_inv(data["y"]))
    close(pt.scalar_to_support(T(data["x"]), 10), jx.scalar_to_support(data["x"], 10))
    close(pt.support_to_scalar(T(data["logits"]), 10), jx.support_to_scalar(data["logits"], 10))
    close(pt.scale_latent(T(data["latent"])), jx.scale_latent(data["latent"]))
    # scale_gradient: identity forward, gradient times the scale
    x = torch.tensor(data["latent"], requires_grad=True)
    out = pt.scale_gradient(x, 0.5)
    (out**2).sum().backward()
    f = lambda z: (jx.scale_gradient(z, 0.5) ** 2).sum()
    close(out.detach(), jx.scale_gradient(data["latent"], 0.5))
    close(x.grad, jax.grad(f)(data["latent"]))
    close(x.grad, 0.5 * 2 * data["latent"])


def test_n_step_targets_parity(twins, data):
    pt, jx = twins
    B, K, n, A, S = data["shape"]
    keys = ("rewards", "values", "terminated", "truncated", "bootstrap")
    out_t = pt.n_step_targets(*(T(data[k]) for k in keys), 0.99, n, K)
    out_j = jx.n_step_targets(*(data[k] for k in keys), 0.99, n, K)
    for a, b in zip(out_t, out_j):
        close(a, b)


def test_muzero_loss_parity_with_gradients(twins, data):
    pt, jx = twins
    B, K, n, A, S = data["shape"]
    keys = ("rewards", "values", "terminated", "truncated", "bootstrap")
    targets = [np.array(x) for x in jx.n_step_targets(*(data[k] for k in keys), 0.99, n, K)]
    # value targets up to ~100: beyond the support's h(x) = 10 for some, so the clipping is exercised
    logits_t = [
        torch.tensor(data[k], requires_grad=True) for k in ("policy_logits", "value_logits", "reward_logits")
    ]
    out_t = pt.muzero_loss(*logits_t, T(data["target_policies"]), *(T(x) for x in targets), S, 0.25)
    out_t[0].backward()

    def f(p, v, r):
        return jx.muzero_loss(p, v, r, data["target_policies"], *targets, S, 0.25)

    out_j = f(data["policy_logits"], data["value_logits"], data["reward_logits"])
    for a, b in zip(out_t, out_j):
        close(a.detach(), b)
    grads_j = jax.grad(lambda *l: f(*l)[0], argnums=(0, 1, 2))(
        data["policy_logits"], data["value_logits"], data["reward_logits"]
    )
    for a, b in zip(logits_t, grads_j):
        close(a.grad, b)


def test_puct_normalise_and_visit_policy_parity(twins, data):
    pt, jx = twins
    parent = data["child_visits"].sum(-1) + 1.0
    visited = data["child_visits"] > 0
    close(
        pt.normalise_q(data["q"], visited, data["q_min"], data["q_max"], 0.01),
        jx.normalise_q(data["q"], visited, data["q_min"], data["q_max"], 0.01),
    )
    q = np.asarray(jx.normalise_q(data["q"], visited, data["q_min"], data["q_max"], 0.01))
    close(
        pt.puct_scores(data["prior"], data["child_visits"], q, parent, 1.25, 19652.0),
        jx.puct_scores(data["prior"], data["child_visits"], q, parent, 1.25, 19652.0),
    )
    for temperature in (1.0, 0.5, 0.25):
        close(pt.visit_policy(T(data["counts"]), temperature), jx.visit_policy(data["counts"], temperature))
    for progress in (0.1, 0.6, 0.8):
        assert pt.temperature_schedule(progress) == jx.temperature_schedule(progress)


def test_obs_scaling_parity(twins):
    """Host-side numpy in both twins: the same (centre, half_width) for bounded, one-sided and
    unbounded entries, and half of (high - low) as the half-width of every bounded one."""
    pt, jx = twins
    rng = np.random.default_rng(0)
    low = rng.uniform(-5, 0, 8).astype(np.float32)
    high = rng.uniform(0.1, 5, 8).astype(np.float32)
    low[[1, 4]], high[[1, 6]] = -np.inf, np.inf
    for a, b in zip(pt.obs_scaling(low, high), jx.obs_scaling(low, high)):
        np.testing.assert_array_equal(a, b)
    bounded = np.isfinite(low) & np.isfinite(high)
    np.testing.assert_allclose(pt.obs_scaling(low, high)[1][bounded], ((high - low) / 2)[bounded], rtol=1e-6)


def test_searches_agree_on_a_random_model(twins):
    """The same small random model (numpy weights) behind both searches, no root noise: the same
    visit counts and root values. mctx breaks exact ties with 1e-7 noise and we take the first
    index, so the model is random enough that no two scores tie."""
    pt, jx = twins
    rng = np.random.default_rng(0)
    B, L, A = 6, 5, 3
    w_next = rng.normal(size=(L + A, L)).astype(np.float32)
    w_out = rng.normal(size=(L, 2 + A)).astype(np.float32)

    def model(xp, latent, action, one_hot):
        x = xp.concatenate([latent, one_hot(action)], -1)
        nxt = xp.tanh(x @ w_next)
        out = nxt @ w_out
        return out[:, 0], out[:, 1] * 3.0, out[:, 2:], nxt

    torch_fn = lambda latent, action: model(np, latent, action, lambda a: np.eye(A, dtype=np.float32)[a])
    jax_fn = lambda latent, action: model(jnp, latent, action, lambda a: jax.nn.one_hot(a, A))
    root = rng.normal(size=(B, L)).astype(np.float32)
    logits = rng.normal(size=(B, A)).astype(np.float32)
    value = rng.normal(size=B).astype(np.float32)
    visits_t, value_t = pt.run_mcts(torch_fn, root, logits, value, 24, 0.9, 1.25, 19652.0, 0.01)
    visits_j, value_j = jx.run_mcts(
        jax_fn,
        jnp.asarray(root),
        jnp.asarray(logits),
        jnp.asarray(value),
        24,
        0.9,
        1.25,
        19652.0,
        0.01,
        jax.random.PRNGKey(0),
    )
    np.testing.assert_array_equal(np.asarray(visits_t), np.asarray(visits_j))
    np.testing.assert_allclose(np.asarray(value_t), np.asarray(value_j), atol=1e-4, rtol=1e-4)


def _shared_networks(pt, jx, obs_dim=4, A=2, H=16, L=8, S=5, seed=0):
    """A torch MuZeroNet with every weight random (the heads too, which start at zero in a run) and
    the flax parameters holding the same numbers (a Dense kernel is the transposed Linear weight)."""
    torch.manual_seed(seed)
    net_t = pt.MuZeroNet(obs_dim, A, H, L, S)
    with torch.no_grad():
        for p in net_t.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    net_j = jx.MuZeroNet(A, H, L, S)
    params = {  # flax's nn.Sequential names its i-th layer layers_i, as torch's Sequential indexes it
        "representation": {
            "layers_0": torch_dense(net_t.representation[0]),
            "layers_2": torch_dense(net_t.representation[2]),
        },
        "dynamics_trunk": {"layers_0": torch_dense(net_t.dynamics_trunk[0])},
        "prediction_trunk": {"layers_0": torch_dense(net_t.prediction_trunk[0])},
        **{
            name: torch_dense(getattr(net_t, name))
            for name in ("dynamics_latent", "dynamics_reward", "prediction_policy", "prediction_value")
        },
    }
    template = net_j.init(jax.random.PRNGKey(0), jnp.zeros((1, obs_dim)), jnp.zeros((1,), jnp.int32))
    assert jax.tree_util.tree_structure(template) == jax.tree_util.tree_structure({"params": params})
    return net_t, net_j, {"params": params}


def test_networks_agree_on_the_same_weights(twins):
    """MuZeroNet on shared weights: initial inference (latent, policy logits, scalar value) and the
    search's model step (scalar reward, scalar value, policy logits, next latent) for every action."""
    pt, jx = twins
    net_t, net_j, params = _shared_networks(pt, jx)
    obs = np.random.default_rng(1).uniform(-1, 1, size=(12, 4)).astype(np.float32)
    out_t = net_t.initial_inference(T(obs))
    out_j = net_j.apply(params, obs, method=jx.MuZeroNet.initial_inference)
    for a, b in zip(out_t, out_j):
        close(a, b)
    latent = np.asarray(out_j[0])
    for action in (0, 1):
        actions = np.full(12, action)
        step_t = net_t.recurrent_inference(T(latent), torch.as_tensor(actions))
        step_j = net_j.apply(params, latent, jnp.asarray(actions), method=jx.MuZeroNet.recurrent_inference)
        for a, b in zip(step_t, step_j):
            close(a, b)


def test_evaluation_searches_agree_on_the_same_weights(twins):
    """The evaluation search (no root noise, argmax of the visit counts) of both twins from the same
    observations through the same network: the same visit-count policy and actions, root values
    within 1e-4 (the JAX twin's jitted make_act; the torch twin's search walks its tree in numpy)."""
    pt, jx = twins
    net_t, net_j, params = _shared_networks(pt, jx, seed=3)
    obs = np.random.default_rng(2).uniform(-1, 1, size=(8, 4)).astype(np.float32)
    args_t = pt.Args(num_simulations=16)
    args_j = jx.Args(num_simulations=16)
    actions_t, policy_t, value_t = pt.search(net_t, args_t, obs)
    act = jx.make_act(net_j, args_j)
    actions_j, policy_j, value_j, _ = act(
        params, jnp.asarray(obs), jax.random.PRNGKey(0), 1.0, 0.0, sample=False
    )
    np.testing.assert_array_equal(policy_t, np.asarray(policy_j))
    np.testing.assert_array_equal(actions_t, np.asarray(actions_j))
    np.testing.assert_allclose(value_t, np.asarray(value_j), atol=1e-4, rtol=1e-4)
