"""Tier 2 for MBPO: on identical inputs the twins' module-level functions agree within 1e-5: the SAC
pieces (tanh term, squashed samples and log-probs, soft targets, critic / actor / temperature losses
and their gradients), the model pieces (normaliser, log-variance bounds, Gaussian NLL and the
ensemble loss with gradients, elites, schedule, batch split, the Pendulum termination rule), a
branched rollout through the same stub model and policy, the dynamics ensemble on the same weights,
and the SAC networks on the same weights: the actor (mean, bounded log std, the tanh-squashed sample
and its log-prob for the same noise, the deterministic action), the Q networks alone and as the JAX
`Agent`'s stacked twin critics, and the critic and actor losses' gradients in every weight."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import torch_dense

TOL = 1e-5


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
        "q1": f32(rng.normal(size=B)),
        "q2": f32(rng.normal(size=B)),
        "next_q1": f32(rng.normal(size=B)),
        "next_q2": f32(rng.normal(size=B)),
        "log_prob": f32(rng.normal(size=B)),
        "m_mean": f32(rng.normal(size=(E, B, D))),
        "m_raw": f32(
            rng.normal(scale=1.5, size=(E, B, D))
        ),  # log-variances near the data range; near -10 the e^{10} weights make float32 sums differ by 1e-4
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
    tgt_t = pt.soft_q_target(
        T("rewards"), T("terminated"), T("next_q1"), T("next_q2"), T("log_prob"), 0.2, 0.99
    )
    tgt_j = jx.soft_q_target(
        batch["rewards"],
        batch["terminated"],
        batch["next_q1"],
        batch["next_q2"],
        batch["log_prob"],
        0.2,
        0.99,
    )
    assert_close(tgt_t, tgt_j)
    q1, q2 = torch.tensor(batch["q1"], requires_grad=True), torch.tensor(batch["q2"], requires_grad=True)
    l1, l2 = pt.critic_losses(q1, q2, tgt_t)
    (l1 + l2).backward()
    loss_j, (g1, g2) = jax.value_and_grad(lambda a, b: sum(jx.critic_losses(a, b, tgt_j)), argnums=(0, 1))(
        batch["q1"], batch["q2"]
    )
    assert abs((l1 + l2).item() - float(loss_j)) < TOL * max(1.0, abs(float(loss_j)))
    assert_close(q1.grad, g1)
    assert_close(q2.grad, g2)
    lp = torch.tensor(batch["log_prob"], requires_grad=True)
    q1, q2 = torch.tensor(batch["q1"], requires_grad=True), torch.tensor(batch["q2"], requires_grad=True)
    a_t = pt.sac_actor_loss(q1, q2, lp, 0.3)
    a_t.backward()
    a_j, grads = jax.value_and_grad(lambda a, b, c: jx.sac_actor_loss(a, b, c, 0.3), argnums=(0, 1, 2))(
        batch["q1"], batch["q2"], batch["log_prob"]
    )
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
    mx, mn = (
        torch.tensor(batch["max_lv"], requires_grad=True),
        torch.tensor(batch["min_lv"], requires_grad=True),
    )
    mean = torch.tensor(batch["m_mean"], requires_grad=True)
    lv_t = pt.bound_log_var(raw, mx, mn)
    assert_close(lv_t.detach(), jx.bound_log_var(batch["m_raw"], batch["max_lv"], batch["min_lv"]))
    assert_close(
        pt.gaussian_nll(mean, lv_t, T("m_target")).detach(),
        jx.gaussian_nll(
            batch["m_mean"],
            jx.bound_log_var(batch["m_raw"], batch["max_lv"], batch["min_lv"]),
            batch["m_target"],
        ),
    )
    loss_t = pt.model_loss(mean, lv_t, T("m_target"), mx, mn)
    loss_t.backward()

    def loss_j(mean, raw, mx, mn):
        return jx.model_loss(mean, jx.bound_log_var(raw, mx, mn), batch["m_target"], mx, mn)

    value, grads = jax.value_and_grad(loss_j, argnums=(0, 1, 2, 3))(
        batch["m_mean"], batch["m_raw"], batch["max_lv"], batch["min_lv"]
    )
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
    members = {
        "params": {
            f"Dense_{i}": {
                "kernel": jnp.asarray(l.weight.detach().numpy()),
                "bias": jnp.asarray(l.bias.detach().numpy()[:, 0]),
            }
            for i, l in enumerate(layers_t)
        }
    }
    params = {
        "members": members,
        "max_log_var": jnp.asarray(t_model.max_log_var.detach().numpy()),
        "min_log_var": jnp.asarray(t_model.min_log_var.detach().numpy()),
    }
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
        out_t = pt.model_rollout(
            lambda o, a: t_model(torch.cat([o, a], -1)),
            lambda o, n: torch.tanh(o @ torch.as_tensor(w) + 0.1 * n),
            torch.as_tensor(start),
            torch.as_tensor(members),
            torch.as_tensor(model_noise),
            torch.as_tensor(action_noise),
            pt.no_termination,
        )
    out_j = jx.model_rollout(
        lambda o, a: j_model.apply(params, norm, jnp.concatenate([o, a], -1)),
        lambda o, n: jnp.tanh(o @ w + 0.1 * n),
        start,
        jnp.asarray(members),
        model_noise,
        action_noise,
        jx.no_termination,
    )
    for k in out_t:
        np.testing.assert_allclose(out_t[k].numpy(), np.asarray(out_j[k]), atol=TOL, rtol=TOL, err_msg=k)


def copy_sac(actor, qf1, qf2):
    """The torch actor and critics as the JAX `Agent`'s params {"actor", "qf"} (kernels transposed;
    "qf" holds the two critics stacked on a leading axis of 2)."""
    actor_p = {
        "params": {
            "Dense_0": torch_dense(actor.trunk[0]),
            "Dense_1": torch_dense(actor.trunk[2]),
            "Dense_2": torch_dense(actor.mean),
            "Dense_3": torch_dense(actor.log_std),
        }
    }
    qf = lambda q: {"params": {f"Dense_{i}": torch_dense(q.net[2 * i]) for i in range(3)}}
    return {"actor": actor_p, "qf": jax.tree.map(lambda a, b: jnp.stack([a, b]), qf(qf1), qf(qf2))}


@pytest.fixture(params=[0, 1, 2])
def sac_nets(twins, request):
    """The torch actor and twin critics with random biases, and a wide, unbiased log-std head of
    opposite rows, so that some log stds sit near each bound; their weights copied into the JAX
    `Agent` (checked against its own init's tree and shapes); inputs and noise."""
    pt, jx = twins
    torch.manual_seed(request.param)
    O, A, H, B = 3, 2, 32, 64
    scale, bias = np.array([2.0, 0.5], np.float32), np.array([0.0, 0.1], np.float32)
    actor = pt.Actor(O, A, H, scale, bias)
    qf1, qf2 = pt.QNetwork(O, A, H), pt.QNetwork(O, A, H)
    with torch.no_grad():
        for net in (actor, qf1, qf2):
            for p in net.parameters():
                if p.ndim == 1:
                    p.normal_(0.0, 0.3)
        actor.log_std.weight.mul_(8.0)
        actor.log_std.weight[1] = -actor.log_std.weight[0]  # opposite pre-tanh outputs: both bounds
        actor.log_std.bias.zero_()
    agent = jx.Agent(O, A, H, scale, bias)
    params = copy_sac(actor, qf1, qf2)
    template = agent.init(jax.random.PRNGKey(0))
    assert jax.tree.structure(template) == jax.tree.structure(params)
    assert all(a.shape == b.shape for a, b in zip(jax.tree.leaves(template), jax.tree.leaves(params)))
    rng = np.random.default_rng(request.param)
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    return {
        "actor": actor,
        "qf1": qf1,
        "qf2": qf2,
        "agent": agent,
        "params": params,
        "obs": f32(rng.normal(scale=2.0, size=(B, O))),
        "actions": f32(rng.uniform(-2, 2, size=(B, A))),
        "noise": f32(rng.normal(size=(B, A))),
        "target": f32(rng.normal(size=B)),
    }


def test_actor_on_the_same_weights(twins, sac_nets):
    """The same mean and bounded log std, the same squashed action and log-prob (Gaussian term minus
    the tanh Jacobian and log scale) for the same noise, the same deterministic action."""
    pt, jx = twins
    n = sac_nets
    actor, agent, params, obs = n["actor"], n["agent"], n["params"], n["obs"]
    assert (pt.LOG_STD_MIN, pt.LOG_STD_MAX) == (jx.LOG_STD_MIN, jx.LOG_STD_MAX)
    with torch.no_grad():
        mean_t, log_std_t = actor(torch.as_tensor(obs))
        action_t, log_prob_t = actor.sample(torch.as_tensor(obs), torch.as_tensor(n["noise"]))
        det_t = actor.deterministic(torch.as_tensor(obs))
    mean_j, log_std_j = agent.actor.apply(params["actor"], obs)
    assert_close(mean_t, mean_j)
    assert_close(log_std_t, log_std_j)
    for ls in (log_std_t.numpy(), np.asarray(log_std_j)):
        assert ls.min() >= jx.LOG_STD_MIN and ls.max() <= jx.LOG_STD_MAX
    assert (
        log_std_t.min() < jx.LOG_STD_MIN + 1.0 and log_std_t.max() > jx.LOG_STD_MAX - 1.0
    )  # both ends reached
    action_j, log_prob_j = agent.sample(params["actor"], obs, noise=n["noise"])
    assert_close(action_t, action_j)
    assert_close(log_prob_t, log_prob_j)
    assert_close(det_t, agent.deterministic(params["actor"], obs))


def test_q_networks_on_the_same_weights(twins, sac_nets):
    """Each critic alone (`QNetwork`) and both at once through the `Agent`'s vmap over the stacked
    params: the same Q(s, a) as the two torch critics."""
    pt, jx = twins
    n = sac_nets
    obs, actions = n["obs"], n["actions"]
    with torch.no_grad():
        q_t = [n[k](torch.as_tensor(obs), torch.as_tensor(actions)) for k in ("qf1", "qf2")]
    q_j = n["agent"].q_values(n["params"]["qf"], obs, actions)
    assert isinstance(n["agent"].qf, jx.QNetwork) and q_j.shape == (2, len(obs))
    for i in range(2):
        single = jax.tree.map(lambda x: x[i], n["params"]["qf"])
        assert_close(q_t[i], n["agent"].qf.apply(single, obs, actions))
        assert_close(q_t[i], q_j[i])


def test_sac_losses_on_the_same_weights_with_gradients(twins, sac_nets):
    """The critic loss on a fixed target and the actor loss through both critics (the same noise),
    as in the twins' update: the same values and the same gradients in every weight and bias."""
    pt, jx = twins
    n = sac_nets
    actor, qf1, qf2, agent, params = n["actor"], n["qf1"], n["qf2"], n["agent"], n["params"]
    obs, actions, noise, target = (torch.as_tensor(n[k]) for k in ("obs", "actions", "noise", "target"))
    l1, l2 = pt.critic_losses(qf1(obs, actions), qf2(obs, actions), target)
    (l1 + l2).backward()

    def q_loss(qf_params):
        q = agent.q_values(qf_params, n["obs"], n["actions"])
        return sum(jx.critic_losses(q[0], q[1], n["target"]))

    value, g_q = jax.value_and_grad(q_loss)(params["qf"])
    assert abs((l1 + l2).item() - float(value)) < TOL * max(1.0, abs(float(value)))
    for i, qf in enumerate((qf1, qf2)):
        for k in range(3):
            g = g_q["params"][f"Dense_{k}"]
            assert_close(qf.net[2 * k].weight.grad.T, g["kernel"][i])
            assert_close(qf.net[2 * k].bias.grad, g["bias"][i])
    actions_pi, log_prob = actor.sample(obs, noise)
    loss_t = pt.sac_actor_loss(qf1(obs, actions_pi), qf2(obs, actions_pi), log_prob, 0.2)
    loss_t.backward(inputs=list(actor.parameters()))

    def actor_loss(actor_params):
        a, lp = agent.sample(actor_params, n["obs"], noise=n["noise"])
        q = agent.q_values(params["qf"], n["obs"], a)
        return jx.sac_actor_loss(q[0], q[1], lp, 0.2)

    value, g_a = jax.value_and_grad(actor_loss)(params["actor"])
    assert abs(loss_t.item() - float(value)) < TOL * max(1.0, abs(float(value)))
    for k, layer in enumerate((actor.trunk[0], actor.trunk[2], actor.mean, actor.log_std)):
        assert_close(layer.weight.grad.T, g_a["params"][f"Dense_{k}"]["kernel"])
        assert_close(layer.bias.grad, g_a["params"][f"Dense_{k}"]["bias"])
