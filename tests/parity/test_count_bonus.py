"""Tier 2 for count_bonus: the twins' module-level math agrees within 1e-5 on identical random inputs
(with episode ends), values and gradients; the framework-neutral count bookkeeping gives the same keys
and counts in both."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import torch_to_flax_params

TOL = 1e-5


@pytest.fixture(params=[0, 1, 2])
def batch(request):
    rng = np.random.default_rng(request.param)
    T, N = 64, 8
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    return {
        "counts": f32(rng.integers(1, 1000, size=T * N)),
        "obs": f32(rng.uniform(-1.5, 1.5, size=(T * N, 2))),
        "A": f32(rng.standard_normal((32, 3))),
    }


def test_count_bonus_and_gradient_parity(twins, batch):
    pt, jx = twins
    n = torch.tensor(batch["counts"], requires_grad=True)
    b_t = pt.count_bonus(n, 0.3)
    b_t.sum().backward()
    b_j, g_j = jax.value_and_grad(lambda c: jx.count_bonus(c, 0.3).sum())(batch["counts"])
    np.testing.assert_allclose(
        b_t.detach().numpy(), np.asarray(jx.count_bonus(batch["counts"], 0.3)), atol=TOL, rtol=TOL
    )
    np.testing.assert_allclose(n.grad.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)  # -beta / (2 N^1.5)


def test_simhash_parity(twins, batch):
    pt, jx = twins
    low, high = np.array([-1.2, -0.07], np.float32), np.array([0.6, 0.07], np.float32)
    g_t = pt.simhash_features(torch.as_tensor(batch["obs"]), torch.as_tensor(low), torch.as_tensor(high))
    g_j = jx.simhash_features(jnp.asarray(batch["obs"]), jnp.asarray(low), jnp.asarray(high))
    np.testing.assert_allclose(g_t.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)
    bits_t = pt.simhash(g_t, torch.as_tensor(batch["A"])).numpy()
    bits_j = np.asarray(jx.simhash(g_j, jnp.asarray(batch["A"])))
    # a point within float error of a hyperplane could flip one bit; with these draws none is
    np.testing.assert_array_equal(bits_t, bits_j)
    assert pt.observation_keys(None, bits_t) == jx.observation_keys(None, bits_j)


def test_count_bookkeeping_parity(twins, batch):
    pt, jx = twins
    obs = (batch["obs"] > 0).astype(np.float32)  # binary rows: many repeats
    c_t, c_j = {}, {}
    n_t = pt.update_counts(c_t, pt.observation_keys(obs))
    n_j = jx.update_counts(c_j, jx.observation_keys(obs))
    np.testing.assert_array_equal(n_t, n_j)
    assert c_t == c_j and sum(c_t.values()) == len(obs) and len(c_t) == 4


def test_solve_threshold_parity(twins):
    pt, jx = twins
    for env_id in ("DeepSea4-v0", "DeepSeaStochastic20-v0", "MountainCar-v0", "CartPole-v1"):
        assert pt.solve_threshold(env_id) == jx.solve_threshold(env_id)


def test_networks_agree_on_the_same_weights(twins):
    pt, jx = twins
    torch.manual_seed(0)
    t_agent = pt.Agent(9, 2)
    j_agent = jx.Agent(9, 2)

    params = {"actor": torch_to_flax_params(t_agent.actor), "critic": torch_to_flax_params(t_agent.critic)}
    obs = np.eye(9, dtype=np.float32)[np.random.default_rng(0).integers(0, 9, size=16)]  # one-hot cells
    actions = np.random.default_rng(1).integers(0, 2, size=16)
    logp_t, ent_t, v_t = t_agent.evaluate_actions(torch.as_tensor(obs), torch.as_tensor(actions))
    logp_j, ent_j, v_j = j_agent.evaluate_actions(params, jnp.asarray(obs), jnp.asarray(actions))
    for a, b in ((logp_t, logp_j), (ent_t, ent_j), (v_t, v_j)):
        np.testing.assert_allclose(a.detach().numpy(), np.asarray(b), atol=TOL, rtol=TOL)
