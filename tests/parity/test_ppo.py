"""Tier 2 for PPO: the twins' module-level math agrees within 1e-5 on identical random batches
(with episode ends), values and gradients with respect to the inputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import load_script, torch_to_flax_params

TOL = 1e-5


@pytest.fixture(scope="module")
def twins():
    return load_script("algos/ppo_torch.py"), load_script("algos/ppo_jax.py")


@pytest.fixture(params=[0, 1, 2])
def batch(request):
    rng = np.random.default_rng(request.param)
    T, N = 64, 8
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
    """d(sum of advantages)/d(rewards, values, last_value): the same linear map in both twins."""
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


def test_networks_agree_on_the_same_weights(twins):
    """The torch Agent's weights copied into the JAX pytree give the same logits, values and
    log-probs: the two networks are the same function, not just the same shape."""
    pt, jx = twins
    torch.manual_seed(0)
    t_agent = pt.Agent(4, 2)
    j_agent = jx.Agent(4, 2)
    initialised = j_agent.init(jax.random.PRNGKey(0))
    params = {"actor": torch_to_flax_params(t_agent.actor), "critic": torch_to_flax_params(t_agent.critic)}
    assert jax.tree.structure(params) == jax.tree.structure(
        initialised
    )  # every JAX weight has a torch source
    obs = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    actions = np.random.default_rng(1).integers(0, 2, size=16)
    logp_t, ent_t, v_t = t_agent.evaluate_actions(torch.as_tensor(obs), torch.as_tensor(actions))
    logp_j, ent_j, v_j = j_agent.evaluate_actions(params, jnp.asarray(obs), jnp.asarray(actions))
    for a, b in ((logp_t, logp_j), (ent_t, ent_j), (v_t, v_j)):
        np.testing.assert_allclose(a.detach().numpy(), np.asarray(b), atol=TOL, rtol=TOL)
