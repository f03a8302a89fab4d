"""Tier 2 for RND: the twins' module-level math agrees within 1e-5 on identical random batches
(with episode ends), values and gradients; and the networks are the same function on the same weights."""

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
    T, N, D = 64, 8, 16
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    return {
        "rewards": f32(rng.normal(size=(T, N))),
        "values": f32(rng.normal(size=(T, N))),
        "dones": f32(rng.random((T, N)) < 0.1),  # about six episode ends per column
        "last_value": f32(rng.normal(size=N)),
        "running": f32(rng.normal(size=N)),
        "logp": f32(np.log(rng.uniform(0.05, 1.0, size=T * N))),
        "logp_old": f32(np.log(rng.uniform(0.05, 1.0, size=T * N))),
        "advantages": f32(rng.normal(size=T * N)),
        "v": f32(rng.normal(size=T * N)),
        "returns": f32(rng.normal(size=T * N)),
        "obs": f32(rng.normal(loc=2.0, scale=3.0, size=(T, D))),
        "mean": f32(rng.normal(size=D)),
        "var": f32(rng.uniform(0.0, 2.0, size=D)),
        "pred": f32(rng.normal(size=(T, D))),
        "target": f32(rng.normal(size=(T, D))),
        "mask": f32(rng.random(T) < 0.25),
    }


@pytest.mark.parametrize("per_head", [False, True])
def test_combine_advantages_parity(twins, batch, per_head):
    pt, jx = twins
    ext, intr = batch["rewards"], 1e-3 * batch["values"]
    out_t = pt.combine_advantages(torch.as_tensor(ext), torch.as_tensor(intr), 2.0, 1.0, per_head=per_head)
    out_j = jx.combine_advantages(jnp.asarray(ext), jnp.asarray(intr), 2.0, 1.0, per_head=per_head)
    np.testing.assert_allclose(out_t.numpy(), np.asarray(out_j), atol=TOL, rtol=TOL)


def test_running_moments_parity(twins, batch):
    pt, jx = twins
    out_t = pt.update_running_moments(
        torch.as_tensor(batch["mean"]), torch.as_tensor(batch["var"]), 37.0, torch.as_tensor(batch["obs"])
    )
    out_j = jx.update_running_moments(
        jnp.asarray(batch["mean"]), jnp.asarray(batch["var"]), 37.0, jnp.asarray(batch["obs"])
    )
    for a, b in zip(out_t[:2], out_j[:2]):
        np.testing.assert_allclose(a.numpy(), np.asarray(b), atol=TOL, rtol=TOL)
    assert out_t[2] == out_j[2] == 37.0 + len(batch["obs"])


def test_normalize_obs_parity(twins, batch):
    pt, jx = twins
    a = pt.normalize_obs(*(torch.as_tensor(batch[k]) for k in ("obs", "mean", "var")))
    b = jx.normalize_obs(*(batch[k] for k in ("obs", "mean", "var")))
    np.testing.assert_allclose(a.numpy(), np.asarray(b), atol=TOL, rtol=TOL)


def test_discounted_reward_stream_parity(twins, batch):
    pt, jx = twins
    s_t, l_t = pt.discounted_reward_stream(
        torch.as_tensor(batch["running"]), torch.as_tensor(batch["rewards"]), 0.99
    )
    s_j, l_j = jx.discounted_reward_stream(batch["running"], batch["rewards"], 0.99)
    np.testing.assert_allclose(s_t.numpy(), np.asarray(s_j), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(l_t.numpy(), np.asarray(l_j), atol=TOL, rtol=TOL)


def test_intrinsic_reward_and_predictor_loss_parity(twins, batch):
    """Values, and the predictor loss's gradient: with respect to the prediction only (the target
    is held fixed in both twins: detach / stop_gradient)."""
    pt, jx = twins
    pred = torch.tensor(batch["pred"], requires_grad=True)
    tgt = torch.tensor(batch["target"], requires_grad=True)
    r_t = pt.rnd_intrinsic_reward(pred, tgt)
    r_j = jx.rnd_intrinsic_reward(batch["pred"], batch["target"])
    np.testing.assert_allclose(r_t.detach().numpy(), np.asarray(r_j), atol=TOL, rtol=TOL)
    loss_t = pt.rnd_predictor_loss(pred, tgt, torch.as_tensor(batch["mask"]))
    loss_t.backward()
    f = lambda p, t: jx.rnd_predictor_loss(p, t, batch["mask"])
    loss_j, (g_p, g_t) = jax.value_and_grad(f, argnums=(0, 1))(batch["pred"], batch["target"])
    assert abs(loss_t.item() - float(loss_j)) < TOL
    np.testing.assert_allclose(pred.grad.numpy(), np.asarray(g_p), atol=TOL, rtol=TOL)
    assert tgt.grad is None and not np.asarray(g_t).any(), "no gradient reaches the target"


def test_value_loss_and_gradient_parity(twins, batch):
    pt, jx = twins
    v = torch.tensor(batch["v"], requires_grad=True)
    loss_t = pt.ppo_value_loss(v, torch.as_tensor(batch["returns"]))
    loss_t.backward()
    loss_j, g_v = jax.value_and_grad(lambda v: jx.ppo_value_loss(v, batch["returns"]))(batch["v"])
    assert abs(loss_t.item() - float(loss_j)) < TOL
    np.testing.assert_allclose(v.grad.numpy(), np.asarray(g_v), atol=TOL, rtol=TOL)


def dense_params(layers):
    """torch Linear layers -> a flax {"params": {"Dense_i": ...}} pytree."""
    return {"params": {f"Dense_{i}": torch_dense(l) for i, l in enumerate(layers)}}


def test_networks_agree_on_the_same_weights(twins):
    """The torch Agent's and RND nets' weights copied into the JAX pytrees give the same logits,
    values (both heads), log-probs and embeddings: the same functions, not just the same shapes."""
    pt, jx = twins
    torch.manual_seed(0)
    linear = lambda seq: [m for m in seq if isinstance(m, torch.nn.Linear)]
    t_agent, j_agent = pt.Agent(6, 3), jx.Agent(6, 3)
    params = {"actor": dense_params(linear(t_agent.actor)), "critic": dense_params(linear(t_agent.critic))}
    obs = np.random.default_rng(0).normal(size=(16, 6)).astype(np.float32)
    actions = np.random.default_rng(1).integers(0, 3, size=16)
    out_t = t_agent.evaluate_actions(torch.as_tensor(obs), torch.as_tensor(actions))
    out_j = j_agent.evaluate_actions(params, jnp.asarray(obs), jnp.asarray(actions))
    for a, b in zip(out_t, out_j):
        np.testing.assert_allclose(a.detach().numpy(), np.asarray(b), atol=TOL, rtol=TOL)
    assert out_t[2].shape == (16, 2)
    for depth in (2, 3):
        t_net, j_net = pt.RNDNet(6, 8, depth), jx.RNDNet(out_dim=8, depth=depth)
        emb_t = t_net(torch.as_tensor(obs)).detach().numpy()
        emb_j = j_net.apply(dense_params(linear(t_net)), jnp.asarray(obs))
        np.testing.assert_allclose(emb_t, np.asarray(emb_j), atol=TOL, rtol=TOL)
