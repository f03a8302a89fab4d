"""Tier 2 for MBPO: on identical inputs the twins' module-level functions agree within 1e-5: the SAC
pieces (tanh term, squashed samples and log-probs, soft targets, critic / actor / temperature losses
and their gradients), the model pieces (normaliser, log-variance bounds, Gaussian NLL and the
ensemble loss with gradients, elites, schedule, batch split, the Pendulum termination rule), a
branched rollout through the same stub model and policy, and the dynamics ensemble on the same weights."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from helpers import load_script

TOL = 1e-5


@pytest.fixture(scope="module")
def twins():
    return load_script("algos/mbpo_torch.py"), load_script("algos/mbpo_jax.py")


@pytest.fixture(params=[0, 1, 2])
def batch(request):
    rng = np.random.default_rng(request.param)
    B, A, E, D = 256, 2, 5, 4
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    return {
        "u": f32(rng.normal(scale=3.0, size=(B, A))),
        "mean": f32(rng.normal(size=(B, A))),
        "log_std": f32(rng.uniform(-5.0, 2.0, size=(B, A))),
        "noise": f32(rng.normal(size=(B, A))),
        "scale": f32(rng.uniform(0.5, 3.0, size=A)),
        "bias": f32(rng.normal(size=A)),
        "rewards": f32(rng.normal(size=B)),
        "terminated": f32(rng.random(B) < 0.1),
        "q1": f32(rng.normal(size=B)), "q2": f32(rng.normal(size=B)),
        "next_q1": f32(rng.normal(size=B)), "next_q2": f32(rng.normal(size=B)),
        "log_prob": f32(rng.normal(size=B)),
        "m_mean": f32(rng.normal(size=(E, B, D))),
        "m_raw": f32(rng.normal(scale=1.5, size=(E, B, D))),  # log-variances near the data range; near -10 the e^{10} weights make float32 sums differ by 1e-4
        "m_target": f32(rng.normal(size=(E, B, D))),
        "max_lv": f32(rng.uniform(0.0, 1.0, size=D)),
        "min_lv": f32(rng.uniform(-11.0, -9.0, size=D)),
        "x": f32(rng.normal(loc=2.0, scale=3.0, size=(B, D))),
    }


def assert_close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=TOL, rtol=TOL)


def test_sac_pieces_parity(twins, batch):
    pt, jx = twins
    T = lambda k: torch.as_tensor(batch[k])
    assert_close(pt.tanh_log_det_jacobian(T("u")), jx.tanh_log_det_jacobian(batch["u"]))
    keys = ("mean", "log_std", "noise", "scale", "bias")
    for x, y in zip(pt.sample_squashed(*(T(k) for k in keys)), jx.sample_squashed(*(batch[k] for k in keys))):
        assert_close(x, y)
    tgt_t = pt.soft_q_target(T("rewards"), T("terminated"), T("next_q1"), T("next_q2"), T("log_prob"), 0.2, 0.99)
    tgt_j = jx.soft_q_target(batch["rewards"], batch["terminated"], batch["next_q1"], batch["next_q2"],
                             batch["log_prob"], 0.2, 0.99)
    assert_close(tgt_t, tgt_j)
    q1, q2 = torch.tensor(batch["q1"], requires_grad=True), torch.tensor(batch["q2"], requires_grad=True)
    l1, l2 = pt.critic_losses(q1, q2, tgt_t)
    (l1 + l2).backward()
    loss_j, (g1, g2) = jax.value_and_grad(lambda a, b: sum(jx.critic_losses(a, b, tgt_j)), argnums=(0, 1))(
        batch["q1"], batch["q2"])
    assert abs((l1 + l2).item() - float(loss_j)) < TOL * max(1.0, abs(float(loss_j)))
    assert_close(q1.grad, g1)
    assert_close(q2.grad, g2)
    lp = torch.tensor(batch["log_prob"], requires_grad=True)
    q1, q2 = torch.tensor(batch["q1"], requires_grad=True), torch.tensor(batch["q2"], requires_grad=True)
    a_t = pt.sac_actor_loss(q1, q2, lp, 0.3)
    a_t.backward()
    a_j, grads = jax.value_and_grad(lambda a, b, c: jx.sac_actor_loss(a, b, c, 0.3), argnums=(0, 1, 2))(
        batch["q1"], batch["q2"], batch["log_prob"])
    assert abs(a_t.item() - float(a_j)) < TOL
    for g_t, g_j in zip((q1.grad, q2.grad, lp.grad), grads):
        assert_close(g_t, g_j)
    la = torch.tensor(np.log(0.3), dtype=torch.float32, requires_grad=True)
    t_t = pt.temperature_loss(la, T("log_prob"), -2.0)
    t_t.backward()
    t_j, g_j = jax.value_and_grad(jx.temperature_loss)(jnp.float32(np.log(0.3)), batch["log_prob"], -2.0)
    assert abs(t_t.item() - float(t_j)) < TOL and abs(la.grad.item() - float(g_j)) < TOL


def test_model_pieces_parity(twins, batch):
    pt, jx = twins
    T = lambda k: torch.as_tensor(batch[k])
    for x, y in zip(pt.fit_normaliser(T("x")), jx.fit_normaliser(batch["x"])):
        assert_close(x, y)
    const = np.ones((10, 3), np.float32)  # a constant feature: std 1
    assert_close(pt.fit_normaliser(torch.as_tensor(const))[1], jx.fit_normaliser(const)[1])
    raw = torch.tensor(batch["m_raw"], requires_grad=True)
    mx, mn = torch.tensor(batch["max_lv"], requires_grad=True), torch.tensor(batch["min_lv"], requires_grad=True)
    mean = torch.tensor(batch["m_mean"], requires_grad=True)
    lv_t = pt.bound_log_var(raw, mx, mn)
    assert_close(lv_t.detach(), jx.bound_log_var(batch["m_raw"], batch["max_lv"], batch["min_lv"]))
    assert_close(pt.gaussian_nll(mean, lv_t, T("m_target")).detach(),
                 jx.gaussian_nll(batch["m_mean"], jx.bound_log_var(batch["m_raw"], batch["max_lv"], batch["min_lv"]),
                                 batch["m_target"]))
    loss_t = pt.model_loss(mean, lv_t, T("m_target"), mx, mn)
    loss_t.backward()

    def loss_j(mean, raw, mx, mn):
        return jx.model_loss(mean, jx.bound_log_var(raw, mx, mn), batch["m_target"], mx, mn)
    value, grads = jax.value_and_grad(loss_j, argnums=(0, 1, 2, 3))(batch["m_mean"], batch["m_raw"],
                                                                       batch["max_lv"], batch["min_lv"])
    assert abs(loss_t.item() - float(value)) < TOL * max(1.0, abs(float(value)))
    for g_t, g_j in zip((mean.grad, raw.grad, mx.grad, mn.grad), grads):
        assert_close(g_t, g_j)
    losses = np.random.default_rng(0).random(7)
    assert list(pt.select_elites(losses, 5)) == list(jx.select_elites(losses, 5))
    for e in range(15):
        assert pt.rollout_length(e, 1, 5, 2, 10) == jx.rollout_length(e, 1, 5, 2, 10)
    for ratio in (0.0, 0.05, 0.3, 1.0):
        assert pt.real_model_split(256, ratio) == jx.real_model_split(256, ratio)
    obs = batch["x"][:, :3]
    assert_close(pt.no_termination(torch.as_tensor(obs), None, None), jx.no_termination(obs, None, None))


def copy_ensemble(t_model, jx, E, in_dim, out_dim, hidden, layers):
    """The torch ensemble's weights as the JAX twin's params pytree."""
    j_model = jx.DynamicsEnsemble(E, in_dim, out_dim, hidden, layers)
    layers_t = list(t_model.hidden) + [t_model.head]
    members = {"params": {f"Dense_{i}": {"kernel": jnp.asarray(l.weight.detach().numpy()),
                                         "bias": jnp.asarray(l.bias.detach().numpy()[:, 0])}
                          for i, l in enumerate(layers_t)}}
    params = {"members": members, "max_log_var": jnp.asarray(t_model.max_log_var.detach().numpy()),
              "min_log_var": jnp.asarray(t_model.min_log_var.detach().numpy())}
    norm = {"mean": jnp.asarray(t_model.input_mean.numpy()), "std": jnp.asarray(t_model.input_std.numpy())}
    return j_model, params, norm


def test_ensemble_and_rollout_parity_on_the_same_weights(twins):
    """The dynamics ensemble (shared input and per-member inputs) and a 4-step branched rollout,
    with the same members and noise, through the same ensemble and a fixed tanh policy."""
    pt, jx = twins
    torch.manual_seed(0)
    E, D, A, H, L, N, T = 4, 3, 1, 32, 2, 64, 4
    t_model = pt.DynamicsEnsemble(E, D + A, D + 1, H, L)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, D + A)).astype(np.float32)
    t_model.input_mean, t_model.input_std = pt.fit_normaliser(torch.as_tensor(x * 2.0 + 1.0))
    j_model, params, norm = copy_ensemble(t_model, jx, E, D + A, D + 1, H, L)
    with torch.no_grad():
        for inp in (x, rng.normal(size=(E, N, D + A)).astype(np.float32)):
            for a, b in zip(t_model(torch.as_tensor(inp)), j_model.apply(params, norm, inp)):
                assert_close(a, b)
        w = rng.normal(size=(D, A)).astype(np.float32)
        members = rng.integers(0, E, size=(T, N))
        model_noise = rng.normal(size=(T, N, D + 1)).astype(np.float32)
        action_noise = rng.normal(size=(T, N, A)).astype(np.float32)
        start = rng.normal(size=(N, D)).astype(np.float32)
        out_t = pt.model_rollout(lambda o, a: t_model(torch.cat([o, a], -1)),
                                 lambda o, n: torch.tanh(o @ torch.as_tensor(w) + 0.1 * n),
                                 torch.as_tensor(start), torch.as_tensor(members), torch.as_tensor(model_noise),
                                 torch.as_tensor(action_noise), pt.no_termination)
    out_j = jx.model_rollout(lambda o, a: j_model.apply(params, norm, jnp.concatenate([o, a], -1)),
                             lambda o, n: jnp.tanh(o @ w + 0.1 * n), start, jnp.asarray(members),
                             model_noise, action_noise, jx.no_termination)
    for k in out_t:
        np.testing.assert_allclose(out_t[k].numpy(), np.asarray(out_j[k]), atol=TOL,
                                   rtol=TOL, err_msg=k)
