"""Tier 1 for TRPO: conjugate gradient on random SPD systems, the Fisher-vector product against the
explicit Hessian of the mean KL on a small network, the line search's acceptance rule (a rejected
step leaves the parameters unchanged), the KL by hand, and bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import is_torch, load_script

TWINS = ["algos/trpo_torch.py", "algos/trpo_jax.py"]


@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_conjugate_gradient_solves_spd_system(script, seed):
    m = load_script(script)
    rng = np.random.default_rng(seed)
    n = 8
    M = rng.normal(size=(n, n))
    A = (M @ M.T + n * np.eye(n)).astype(np.float32)  # well-conditioned SPD
    b = rng.normal(size=n).astype(np.float32)
    conv = torch.as_tensor if is_torch(script) else jnp.asarray
    A_t, b_t = conv(A), conv(b)
    x = np.asarray(m.conjugate_gradient(lambda v: A_t @ v, b_t, iters=n))  # n steps: exact
    np.testing.assert_allclose(x, np.linalg.solve(A.astype(np.float64), b), rtol=1e-4, atol=1e-5)


def small_policy(rng):
    """A 3-4-2 softmax policy as a flat parameter vector: logits = tanh(obs W1 + b1) W2 + b2."""
    sizes = [(3, 4), (4,), (4, 2), (2,)]
    theta = np.concatenate([rng.normal(size=s).ravel() * 0.7 for s in sizes]).astype(np.float32)
    obs = rng.normal(size=(16, 3)).astype(np.float32)
    return theta, obs


def logits_fn(theta, obs, lib):
    W1, b1 = theta[:12].reshape(3, 4), theta[12:16]
    W2, b2 = theta[16:24].reshape(4, 2), theta[24:26]
    return lib.tanh(obs @ W1 + b1) @ W2 + b2


@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize("at_old", [True, False])
def test_fisher_vector_product_equals_explicit_hessian(script, at_old):
    """Hessian of the mean KL(pi_old || pi_theta) times v, built explicitly (autograd Hessian),
    against fisher_vector_product (damping 0), at theta_old (where it is the Fisher matrix) and at a
    perturbed theta."""
    m = load_script(script)
    rng = np.random.default_rng(3)
    theta_old, obs = small_policy(rng)
    theta = theta_old if at_old else theta_old + 0.3 * rng.normal(size=theta_old.shape).astype(np.float32)
    v = rng.normal(size=theta.shape).astype(np.float32)
    if is_torch(script):
        obs_t = torch.as_tensor(obs)
        logits_old = logits_fn(torch.as_tensor(theta_old), obs_t, torch)
        kl_fn = lambda th: m.categorical_kl(logits_old, logits_fn(th, obs_t, torch))
        H = torch.autograd.functional.hessian(kl_fn, torch.as_tensor(theta)).numpy()
        fvp = m.fisher_vector_product(kl_fn, torch.as_tensor(theta), torch.as_tensor(v), 0.0).numpy()
        fvp_damped = m.fisher_vector_product(kl_fn, torch.as_tensor(theta), torch.as_tensor(v), 0.1).numpy()
    else:
        logits_old = logits_fn(jnp.asarray(theta_old), obs, jnp)
        kl_fn = lambda th: m.categorical_kl(logits_old, logits_fn(th, obs, jnp))
        H = np.asarray(jax.hessian(kl_fn)(jnp.asarray(theta)))
        fvp = np.asarray(m.fisher_vector_product(kl_fn, jnp.asarray(theta), jnp.asarray(v), 0.0))
        fvp_damped = np.asarray(m.fisher_vector_product(kl_fn, jnp.asarray(theta), jnp.asarray(v), 0.1))
    np.testing.assert_allclose(fvp, H @ v, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(fvp_damped, H @ v + 0.1 * v, rtol=1e-4, atol=1e-5)
    if at_old:  # the Fisher matrix is symmetric positive semi-definite
        assert np.linalg.eigvalsh((H + H.T) / 2).min() > -1e-5


@pytest.mark.parametrize("script", TWINS)
def test_rejected_line_search_leaves_parameters_unchanged(script):
    m = load_script(script)
    conv = torch.as_tensor if is_torch(script) else jnp.asarray
    theta = conv(np.array([1.0, -2.0, 0.5], dtype=np.float32))
    step = conv(np.array([1.0, 1.0, 1.0], dtype=np.float32))
    # every candidate breaks the KL constraint (KL = 1 whatever the step)
    new, accepted, frac = m.line_search(lambda th: (float((th**2).sum()), 1.0), theta, step, 0.01, 10)
    assert not accepted and frac == 0.0
    assert np.array_equal(np.asarray(new), np.asarray(theta))
    # KL fine but the surrogate never improves: also rejected
    new, accepted, _ = m.line_search(
        lambda th: (-float(((th - theta) ** 2).sum()), 0.0), theta, step, 0.01, 10
    )
    assert not accepted and np.array_equal(np.asarray(new), np.asarray(theta))


@pytest.mark.parametrize("script", TWINS)
def test_line_search_backtracks_to_the_first_acceptable_fraction(script):
    """KL grows as the squared step length: |frac * step|^2 with |step|^2 = 3 is <= 0.01 from
    frac = 1/32 on (3/1024 < 0.01 but 3/256 > 0.01); the surrogate improves for any step."""
    m = load_script(script)
    conv = torch.as_tensor if is_torch(script) else jnp.asarray
    theta = conv(np.zeros(3, dtype=np.float32))
    step = conv(np.ones(3, dtype=np.float32))
    objective = lambda th: (float(th.sum()), float((th**2).sum()))
    new, accepted, frac = m.line_search(objective, theta, step, 0.01, 10)
    assert accepted and frac == 1 / 32
    np.testing.assert_allclose(np.asarray(new), np.full(3, 1 / 32))


@pytest.mark.parametrize("script", TWINS)
def test_categorical_kl_by_hand(script):
    m = load_script(script)
    conv = torch.as_tensor if is_torch(script) else jnp.asarray
    # p = (0.5, 0.5), q = (0.8, 0.2): KL = 0.5 log(0.5/0.8) + 0.5 log(0.5/0.2)
    lo = conv(np.log(np.array([[0.5, 0.5]], dtype=np.float32)))
    ln = conv(np.log(np.array([[0.8, 0.2]], dtype=np.float32)))
    expected = 0.5 * np.log(0.5 / 0.8) + 0.5 * np.log(0.5 / 0.2)
    assert float(m.categorical_kl(lo, ln)) == pytest.approx(expected, rel=1e-5)
    assert float(m.categorical_kl(lo, lo)) == pytest.approx(0.0, abs=1e-7)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("script", TWINS)
def test_continuous_env_is_refused_naming_the_right_script(script, tmp_path):
    m = load_script(script)
    twin = "ppo_continuous_torch.py" if is_torch(script) else "ppo_continuous_jax.py"
    with pytest.raises(ValueError, match=twin):
        m.train(m.Args(env_id="Pendulum-v1", log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"


@pytest.mark.parametrize("script", TWINS)
def test_nonpositive_trust_region_is_refused(script, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match="--max-kl must be > 0"):
        m.train(m.Args(max_kl=0.0, log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())
