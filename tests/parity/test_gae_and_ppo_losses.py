"""Tier 2, shared: GAE and PPO's clipped losses, which several pairs define with one signature. For
every pair whose torch twin defines them, the two twins agree within 1e-5 in value and in gradient
on identical random batches with episode ends. A pair's own math stays in its own parity file."""

import jax
import numpy as np
import pytest
import torch

from helpers import load_script, pair_id, pairs_defining

TOL = 1e-5
SIGNATURES = {
    "gae": r"def compute_gae\(rewards, values, dones, last_value, gamma, lam[,)]",
    "policy": r"def ppo_policy_loss\(logp, logp_old, advantages, clip_coef\)",
    "value": r"def ppo_value_loss\(values, values_old, returns, clip_coef\)",
}
# Keyword variants a pair adds to the shared signature: RND's non-episodic intrinsic stream.
GAE_VARIANTS = {"algos/rnd_torch.py": [{"episodic": True}, {"episodic": False}]}


GAE_CASES = [
    (pair, kw) for pair in pairs_defining(SIGNATURES["gae"]) for kw in GAE_VARIANTS.get(pair[0], [{}])
]


def close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=TOL, rtol=TOL)


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


def test_the_shared_functions_are_found():
    """The discovery must see the pairs known to define them, or the tests below would pass empty."""
    assert {"ppo", "a2c", "trpo", "gail", "icm", "count_bonus", "rnd", "ppo_continuous"} <= {
        pair_id(p) for p, _ in GAE_CASES
    }
    assert {"ppo", "gail", "icm", "count_bonus"} <= {pair_id(p) for p in pairs_defining(SIGNATURES["policy"])}


def test_batch_has_episode_ends(batch):
    assert batch["dones"].sum() > 10


@pytest.mark.parametrize("lam", [0.0, 0.95, 1.0])
@pytest.mark.parametrize("pair, kw", GAE_CASES, ids=[f"{pair_id(p)}{kw or ''}" for p, kw in GAE_CASES])
def test_compute_gae_parity(pair, kw, batch, lam):
    pt, jx = (load_script(s) for s in pair)
    args = [batch[k] for k in ("rewards", "values", "dones", "last_value")]
    out_t = pt.compute_gae(*map(torch.as_tensor, args), 0.99, lam, **kw)
    out_j = jx.compute_gae(*args, 0.99, lam, **kw)
    for a, b in zip(out_t, out_j):  # advantages, returns (and any further output)
        close(a.numpy(), b)


@pytest.mark.parametrize("pair, kw", GAE_CASES, ids=[f"{pair_id(p)}{kw or ''}" for p, kw in GAE_CASES])
def test_compute_gae_gradient_parity(pair, kw, batch):
    """d(sum of advantages)/d(rewards, values, last_value): the same linear map in both twins."""
    pt, jx = (load_script(s) for s in pair)
    r, v, lv = (torch.tensor(batch[k], requires_grad=True) for k in ("rewards", "values", "last_value"))
    adv = pt.compute_gae(r, v, torch.as_tensor(batch["dones"]), lv, 0.99, 0.95, **kw)[0]
    adv.sum().backward()
    f = lambda r, v, lv: jx.compute_gae(r, v, batch["dones"], lv, 0.99, 0.95, **kw)[0].sum()
    grads = jax.grad(f, argnums=(0, 1, 2))(batch["rewards"], batch["values"], batch["last_value"])
    for g_t, g_j in zip((r.grad, v.grad, lv.grad), grads):
        close(g_t.numpy(), g_j)


@pytest.mark.parametrize("clip_coef", [0.1, 0.2, 0.3])
@pytest.mark.parametrize("pair", pairs_defining(SIGNATURES["policy"]), ids=pair_id)
def test_policy_loss_and_gradient_parity(pair, batch, clip_coef):
    pt, jx = (load_script(s) for s in pair)
    logp = torch.tensor(batch["logp"], requires_grad=True)
    adv = torch.tensor(batch["advantages"], requires_grad=True)
    loss_t = pt.ppo_policy_loss(logp, torch.as_tensor(batch["logp_old"]), adv, clip_coef)
    loss_t.backward()
    f = lambda lp, a: jx.ppo_policy_loss(lp, batch["logp_old"], a, clip_coef)
    loss_j, (g_logp, g_adv) = jax.value_and_grad(f, argnums=(0, 1))(batch["logp"], batch["advantages"])
    assert abs(loss_t.item() - float(loss_j)) < TOL
    close(logp.grad.numpy(), g_logp)
    close(adv.grad.numpy(), g_adv)


@pytest.mark.parametrize("clip_coef", [None, 0.2, 1.0])
@pytest.mark.parametrize("pair", pairs_defining(SIGNATURES["value"]), ids=pair_id)
def test_value_loss_and_gradient_parity(pair, batch, clip_coef):
    pt, jx = (load_script(s) for s in pair)
    v = torch.tensor(batch["v"], requires_grad=True)
    loss_t = pt.ppo_value_loss(
        v, torch.as_tensor(batch["v_old"]), torch.as_tensor(batch["returns"]), clip_coef
    )
    loss_t.backward()
    f = lambda v: jx.ppo_value_loss(v, batch["v_old"], batch["returns"], clip_coef)
    loss_j, g_v = jax.value_and_grad(f)(batch["v"])
    assert abs(loss_t.item() - float(loss_j)) < TOL
    close(v.grad.numpy(), g_v)
