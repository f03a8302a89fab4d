"""Tier 1 for QR-DQN: the quantile fractions, the quantile Huber loss by hand, its minimiser (a
fitted set of quantiles of a fixed discrete distribution converges to the true quantiles), and
the defaults (the paper's algorithm), and the bad-input checks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import load_script

TWINS = ["algos/qr_dqn_torch.py", "algos/qr_dqn_jax.py"]
# A fixed discrete distribution: P(0) = 0.1, P(1) = 0.2, P(2) = 0.3, P(3) = 0.4, written as ten
# equally likely samples; with N = 4 the fractions are 1/8, 3/8, 5/8, 7/8 and none of them falls
# on a jump of the CDF (0.1, 0.3, 0.6, 1), so each quantile is unique: 1, 2, 3, 3.
SAMPLES = [0, 1, 1, 2, 2, 2, 3, 3, 3, 3]
TRUE_QUANTILES = [1.0, 2.0, 3.0, 3.0]


def loss(script, pred, target, taus, kappa):
    m = load_script(script)
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    if script.endswith("torch.py"):
        return float(m.quantile_huber_loss(*(torch.as_tensor(f32(x)) for x in (pred, target, taus)), kappa))
    return float(m.quantile_huber_loss(f32(pred), f32(target), f32(taus), kappa))


@pytest.mark.parametrize("script", TWINS)
def test_quantile_taus_are_midpoints(script):
    taus = np.asarray(load_script(script).quantile_taus(4))
    np.testing.assert_allclose(taus, [0.125, 0.375, 0.625, 0.875], atol=1e-7)


@pytest.mark.parametrize("script", TWINS)
def test_quantile_huber_loss_by_hand(script):
    # one quantile at tau = 0.25, prediction 0. Target 2 (under-estimate, u = 2): weight tau = 0.25,
    # Huber(2) with kappa 1 = 2 - 0.5 = 1.5 -> 0.375. Target -2 (over-estimate): weight 0.75 -> 1.125.
    assert loss(script, [[0.0]], [[2.0]], [0.25], 1.0) == pytest.approx(0.375)
    assert loss(script, [[0.0]], [[-2.0]], [0.25], 1.0) == pytest.approx(1.125)
    # inside the threshold the loss is quadratic: u = 0.5 -> 0.25 * 0.5 * 0.25 / 1
    assert loss(script, [[0.0]], [[0.5]], [0.25], 1.0) == pytest.approx(0.03125)
    # kappa = 0: the plain quantile (pinball) loss, 0.25 * 2
    assert loss(script, [[0.0]], [[2.0]], [0.25], 0.0) == pytest.approx(0.5)
    # two quantiles, two targets: summed over quantiles, averaged over targets
    # tau 0.25 at 0 vs targets {1, -1}: (0.25 * 0.5 + 0.75 * 0.5) / 2 = 0.25;
    # tau 0.75 at 0 vs the same: (0.75 * 0.5 + 0.25 * 0.5) / 2 = 0.25
    assert loss(script, [[0.0, 0.0]], [[1.0, -1.0]], [0.25, 0.75], 1.0) == pytest.approx(0.5)


@pytest.mark.parametrize("script", TWINS)
def test_true_quantiles_minimise_the_plain_quantile_loss(script):
    taus = [0.125, 0.375, 0.625, 0.875]
    best = loss(script, [TRUE_QUANTILES], [SAMPLES], taus, 0.0)
    for i in range(4):
        for delta in (-0.3, -0.05, 0.05, 0.3):
            moved = list(TRUE_QUANTILES)
            moved[i] += delta
            assert loss(script, [moved], [SAMPLES], taus, 0.0) > best


@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize("kappa, tol", [(0.0, 0.02), (0.01, 0.03)])
def test_fitted_quantiles_converge_to_the_true_ones(script, kappa, tol):
    """Gradient descent on the twin's loss from zero, step size decaying to 0: the fitted quantiles
    reach the true ones (with a small Huber threshold, within about kappa of them)."""
    m = load_script(script)
    taus = np.array([0.125, 0.375, 0.625, 0.875], dtype=np.float32)
    target = np.array([SAMPLES], dtype=np.float32)
    steps = 3000
    if script.endswith("torch.py"):
        pred = torch.zeros((1, 4), requires_grad=True)
        for k in range(steps):
            pred.grad = None
            m.quantile_huber_loss(pred, torch.as_tensor(target), torch.as_tensor(taus), kappa).backward()
            with torch.no_grad():
                pred -= 0.5 * (1 - k / steps) * pred.grad
        fitted = pred.detach().numpy()[0]
    else:
        grad = jax.jit(jax.grad(lambda p: m.quantile_huber_loss(p, target, taus, kappa)))
        pred = jnp.zeros((1, 4))
        for k in range(steps):
            pred = pred - 0.5 * (1 - k / steps) * grad(pred)
        fitted = np.asarray(pred)[0]
    np.testing.assert_allclose(fitted, TRUE_QUANTILES, atol=tol)


@pytest.mark.parametrize("script", TWINS)
def test_defaults_are_the_papers_algorithm(script):
    # one-step target, plain MLP, constant learning rate, no advantage learning, DQN's discount
    a = load_script(script).Args()
    assert (a.n_step, a.layer_norm, a.anneal_lr, a.al_alpha) == (1, False, False, 0.0)
    assert (a.gamma, a.kappa, a.target_network_frequency) == (0.99, 1.0, 500)


@pytest.mark.parametrize("script", TWINS)
def test_continuous_env_is_refused_naming_the_right_scripts(script, tmp_path):
    m = load_script(script)
    suffix = "torch" if script.endswith("torch.py") else "jax"
    with pytest.raises(ValueError, match=f"sac_{suffix}.py"):
        m.train(m.Args(env_id="Pendulum-v1", log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())
