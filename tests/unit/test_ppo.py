"""Tier 1 for PPO: worked problems 3, 7 and 8 (docs/worked_problems.md) in both twins, exact
numbers; and the bad-input checks that must stop a run before any work."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import gae_on_column as gae
from helpers import load_script

TWINS = ["algos/ppo_torch.py", "algos/ppo_jax.py"]


def surrogate_and_grad(script, ratio, advantages, clip_coef):
    """Per-sample clipped objective's mean (the negated loss) and d(mean objective)/d(ratio),
    computed through the twin's ppo_policy_loss with logp_old = 0 and logp = log(ratio)."""
    m = load_script(script)
    ratio = np.asarray(ratio, dtype=np.float32)
    adv = np.asarray(advantages, dtype=np.float32)
    if script.endswith("torch.py"):
        r = torch.tensor(ratio, requires_grad=True)
        loss = m.ppo_policy_loss(torch.log(r), torch.zeros_like(r), torch.as_tensor(adv), clip_coef)
        loss.backward()
        return -loss.item(), -r.grad.numpy()
    f = lambda r: m.ppo_policy_loss(jnp.log(r), jnp.zeros_like(r), jnp.asarray(adv), clip_coef)
    loss, grad = jax.value_and_grad(f)(jnp.asarray(ratio))
    return -float(loss), -np.asarray(grad)


@pytest.mark.parametrize("script", TWINS)
def test_problem3_gae_by_hand(script):
    adv, ret = gae(script, [1, 0, 2, 1], [0.5, 0.4, 0.6, 0.3], [0, 1, 0, 0], 0.2, gamma=0.9, lam=0.8)
    # deltas [0.86, -0.4, 1.67, 0.88]; A_3 = 0.88, A_2 = 1.67 + 0.72 * 0.88, A_1 = -0.4 (episode
    # ended at t = 1, so nothing flows back from t = 2), A_0 = 0.86 + 0.72 * (-0.4)
    np.testing.assert_allclose(adv, [0.572, -0.4, 2.3036, 0.88], atol=1e-6)
    np.testing.assert_allclose(ret, [1.072, 0.0, 2.9036, 1.18], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_problem3_deltas_are_one_step_gae(script):
    # lambda = 0 reduces GAE to the one-step TD errors
    adv, _ = gae(script, [1, 0, 2, 1], [0.5, 0.4, 0.6, 0.3], [0, 1, 0, 0], 0.2, gamma=0.9, lam=0.0)
    np.testing.assert_allclose(adv, [0.86, -0.4, 1.67, 0.88], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_problem7_clip_zeroes_gradient_only_on_the_favoured_side(script):
    eps = 0.2
    # A > 0, ratio past 1 + eps: clipped, gradient exactly zero
    _, g = surrogate_and_grad(script, [1.5], [1.0], eps)
    assert g[0] == 0.0
    # A < 0, ratio below 1 - eps: clipped, gradient exactly zero
    _, g = surrogate_and_grad(script, [0.5], [-1.0], eps)
    assert g[0] == 0.0
    # A < 0, ratio 1.6: the min keeps the unclipped term, which pulls the overshoot back
    _, g = surrogate_and_grad(script, [1.6], [-1.0], eps)
    assert g[0] == pytest.approx(-1.0)
    # inside the trust region the gradient is the advantage itself
    _, g = surrogate_and_grad(script, [1.1], [2.0], eps)
    assert g[0] == pytest.approx(2.0)


@pytest.mark.parametrize("script", TWINS)
def test_problem8_clipped_objective_in_numbers(script):
    ratios, advs = [1.5, 0.5, 1.6, 0.7], [1.0, 1.0, -1.0, -1.0]
    objective, grad = surrogate_and_grad(script, ratios, advs, 0.2)
    # per-sample objective [1.2, 0.5, -1.6, -0.8]; mean -0.175
    assert objective == pytest.approx(-0.175, abs=1e-6)
    # d(mean)/d(ratio) = [0, 1, -1, 0] / 4
    np.testing.assert_allclose(grad * 4, [0.0, 1.0, -1.0, 0.0], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_value_loss_clip_by_hand(script):
    m = load_script(script)
    v, v_old, ret = [1.5, 0.0], [1.0, 0.0], [3.0, 0.4]
    # sample 0: unclipped (1.5-3)^2 = 2.25, clipped (1.2-3)^2 = 3.24 -> 3.24; sample 1: 0.16 both
    expected_clipped = 0.5 * (3.24 + 0.16) / 2
    expected_plain = 0.5 * (2.25 + 0.16) / 2
    conv = (lambda x: torch.tensor(x)) if script.endswith("torch.py") else (lambda x: jnp.asarray(x))
    assert float(m.ppo_value_loss(conv(v), conv(v_old), conv(ret), 0.2)) == pytest.approx(expected_clipped)
    assert float(m.ppo_value_loss(conv(v), conv(v_old), conv(ret), None)) == pytest.approx(expected_plain)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("script", TWINS)
def test_continuous_env_is_refused_naming_the_right_script(script, tmp_path):
    m = load_script(script)
    twin = "ppo_continuous_torch.py" if script.endswith("torch.py") else "ppo_continuous_jax.py"
    with pytest.raises(ValueError, match=twin):
        m.train(m.Args(env_id="Pendulum-v1", log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"


@pytest.mark.parametrize("script", TWINS)
def test_minibatches_must_divide_the_batch(script, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match="--num-minibatches must be a divisor"):
        m.train(m.Args(num_envs=3, num_steps=10, num_minibatches=4, log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("script", TWINS)
def test_value_clip_caps_progress_towards_a_far_target(script):
    """The clipped value loss lets a prediction move at most clip_coef (in return units) towards
    its target per rollout: past v_old + 0.2 the clipped branch is the larger one and its gradient
    is zero. With CartPole returns near 100 this is what holds the critic back (docs/algorithms/ppo.md)."""
    m = load_script(script)
    v_old, target = 10.0, 50.0
    for v, expect_zero in ((10.1, False), (10.3, True), (9.5, False)):
        if script.endswith("torch.py"):
            x = torch.tensor([v], requires_grad=True)
            m.ppo_value_loss(x, torch.tensor([v_old]), torch.tensor([target]), 0.2).backward()
            g = x.grad.item()
        else:
            g = float(
                jax.grad(lambda x: m.ppo_value_loss(x, jnp.array([v_old]), jnp.array([target]), 0.2))(
                    jnp.array([v])
                )[0]
            )
        assert (g == 0.0) == expect_zero, (v, g)
        if not expect_zero:
            assert g == pytest.approx(v - target)  # d/dv of 0.5 (v - R)^2
