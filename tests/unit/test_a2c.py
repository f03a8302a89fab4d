"""Tier 1 for A2C: the n-step return and the TD error as advantages by hand (through compute_gae),
the actor-critic loss by hand, and bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import conv, is_torch, load_script
from helpers import gae_on_column as gae

TWINS = ["algos/a2c_torch.py", "algos/a2c_jax.py"]


@pytest.mark.parametrize("script", TWINS)
def test_lambda_one_gives_n_step_returns(script):
    """gae_lambda = 1 (the default): the return target is the n-step return bootstrapped from the
    value after the rollout, cut at the episode end. rewards [1, 0, 2, 1], dones [0, 1, 0, 0],
    gamma 0.5, V after the rollout 4:
        R_3 = 1 + 0.5 * 4 = 3, R_2 = 2 + 0.5 * 3 = 3.5, R_1 = 0 (episode ended), R_0 = 1 + 0.5 * 0 = 1."""
    values = [0.5, 0.4, 0.6, 0.3]
    adv, ret = gae(script, [1, 0, 2, 1], values, [0, 1, 0, 0], 4.0, gamma=0.5, lam=1.0)
    np.testing.assert_allclose(ret, [1.0, 0.0, 3.5, 3.0], atol=1e-6)
    np.testing.assert_allclose(adv, np.array([1.0, 0.0, 3.5, 3.0]) - values, atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_lambda_zero_gives_the_td_error(script):
    """The TD error r + gamma V(s') - V(s) as the advantage: the one-step actor-critic."""
    adv, _ = gae(script, [1, 0, 2, 1], [0.5, 0.4, 0.6, 0.3], [0, 1, 0, 0], 4.0, gamma=0.5, lam=0.0)
    np.testing.assert_allclose(adv, [1 + 0.2 - 0.5, -0.4, 2 + 0.15 - 0.6, 1 + 2.0 - 0.3], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_a2c_loss_by_hand(script):
    m = load_script(script)
    logp, ent, v = [np.log(0.5), np.log(0.25)], [0.7, 0.5], [1.0, 2.0]
    adv, ret = [2.0, -1.0], [3.0, 1.0]
    # policy -(2 log .5 - log .25)/2 = -(2 * -0.6931 + 1.3863) / 2 = 0; value 0.5 * (4 + 1) / 2 = 1.25
    to = conv(script)
    total, pg, vl, en = m.a2c_loss(*(to(x) for x in (logp, ent, v, adv, ret)), 0.5, 0.01)
    assert float(pg) == pytest.approx(0.0, abs=1e-6)
    assert float(vl) == pytest.approx(1.25)
    assert float(en) == pytest.approx(0.6)
    assert float(total) == pytest.approx(0.0 + 0.5 * 1.25 - 0.01 * 0.6)


@pytest.mark.parametrize("script", TWINS)
def test_no_gradient_through_advantages_or_targets(script):
    """The advantage and the return are constants of the loss: d loss / d(adv, ret) = 0."""
    m = load_script(script)
    rng = np.random.default_rng(0)
    x = [rng.normal(size=6).astype(np.float32) for _ in range(5)]
    if is_torch(script):
        t = [torch.tensor(a, requires_grad=True) for a in x]
        m.a2c_loss(*t, 0.5, 0.01)[0].backward()
        g_adv, g_ret = t[3].grad, t[4].grad
        assert g_adv is None or torch.all(g_adv == 0)
        assert g_ret is None or torch.all(g_ret == 0)
    else:
        g = jax.grad(lambda *a: m.a2c_loss(*a, 0.5, 0.01)[0], argnums=(3, 4))(*map(jnp.asarray, x))
        assert all(np.all(np.asarray(gi) == 0) for gi in g)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("script", TWINS)
def test_continuous_env_is_refused_naming_the_right_script(script, tmp_path):
    m = load_script(script)
    twin = "ppo_continuous_torch.py" if is_torch(script) else "ppo_continuous_jax.py"
    with pytest.raises(ValueError, match=twin):
        m.train(m.Args(env_id="Pendulum-v1", log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"


@pytest.mark.parametrize("script", TWINS)
def test_budget_below_one_rollout_is_refused(script, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match="--total-timesteps must be >= one rollout"):
        m.train(m.Args(total_timesteps=10, log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())
