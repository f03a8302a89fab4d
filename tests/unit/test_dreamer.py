"""Tier 1 for Dreamer: the worked problem "Dreamer: the KL balance, free nats and the imagined
lambda-returns" (docs/algorithms/dreamer.md) by hand -- the Gaussian KL of two 1-D Gaussians, free
nats, the alpha : 1 - alpha gradient split of the KL balance, a 3-step lambda-return (and its
lambda = 0 and lambda = 1 ends), the discount weights, the GRU update, the Gaussian head, the
world-model and the actor / critic losses -- an imagined rollout through a stub model, and bad
input; every check in both twins, through the scripts' own functions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import is_torch, load_script

TWINS = ["algos/dreamer_torch.py", "algos/dreamer_jax.py"]


def conv(script):
    """float32 numpy -> the twin's array type."""
    if is_torch(script):
        return lambda x: torch.as_tensor(np.asarray(x, dtype=np.float32))
    return lambda x: jnp.asarray(np.asarray(x, dtype=np.float32))


def grads_of(script, f, *args):
    """Value and gradients of the scalar f(*args) with respect to every argument, as numpy."""
    if is_torch(script):
        leaves = [torch.tensor(np.asarray(a, dtype=np.float32), requires_grad=True) for a in args]
        out = f(*leaves)
        out.backward()
        return float(out.detach()), [leaf.grad.numpy() for leaf in leaves]
    value, grads = jax.value_and_grad(f, argnums=tuple(range(len(args))))(
        *(jnp.asarray(np.asarray(a, dtype=np.float32)) for a in args)
    )
    return float(value), [np.asarray(g) for g in grads]


# ----------------------------------------------------------------------------- the KL, free nats, the balance
@pytest.mark.parametrize("script", TWINS)
def test_gaussian_kl_by_hand(script):
    m, c = load_script(script), conv(script)
    # KL(N(1, 1^2) || N(0, 2^2)) = log(2 / 1) + (1 + (1 - 0)^2) / (2 * 4) - 1/2
    #                            = 0.6931472 + 0.25 - 0.5 = 0.4431472
    np.testing.assert_allclose(
        float(m.gaussian_kl(c([1.0]), c([1.0]), c([0.0]), c([2.0]))), 0.4431472, atol=1e-6
    )
    # the same Gaussian twice: 0; two dimensions are summed: 2 * 0.4431472
    np.testing.assert_allclose(float(m.gaussian_kl(c([3.0]), c([0.5]), c([3.0]), c([0.5]))), 0.0, atol=1e-7)
    np.testing.assert_allclose(
        float(m.gaussian_kl(c([1.0, 1.0]), c([1.0, 1.0]), c([0.0, 0.0]), c([2.0, 2.0]))), 0.8862944, atol=1e-6
    )


@pytest.mark.parametrize("script", TWINS)
def test_free_nats_clip_the_kl_from_below(script):
    m = load_script(script)
    loss = lambda pm, ps, qm, qs, free: m.kl_balance_loss(pm, ps, qm, qs, 0.8, free)[0]
    # KL = 0.4431472 < free nats 1.0: the loss is the constant 1.0 and no gradient reaches either side
    value, grads = grads_of(
        script, lambda pm, ps, qm, qs: loss(pm, ps, qm, qs, 1.0), [1.0], [1.0], [0.0], [2.0]
    )
    assert value == pytest.approx(1.0, abs=1e-7)
    for g in grads:
        np.testing.assert_allclose(g, 0.0, atol=0)
    # above the floor (free nats 0.1): the value is the KL itself, 0.8 * 0.4431472 + 0.2 * 0.4431472
    value, _ = grads_of(script, lambda pm, ps, qm, qs: loss(pm, ps, qm, qs, 0.1), [1.0], [1.0], [0.0], [2.0])
    assert value == pytest.approx(0.4431472, abs=1e-6)
    # the second return value is the mean KL, unclipped
    c = conv(script)
    kl = m.kl_balance_loss(c([[1.0]]), c([[1.0]]), c([[0.0]]), c([[2.0]]), 0.8, 1.0)[1]
    assert float(kl) == pytest.approx(0.4431472, abs=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_kl_balance_splits_the_gradient_alpha_to_the_prior(script):
    m = load_script(script)
    # post N(1, 1), prior N(0, 2^2), alpha 0.8, free nats 0. The KL's own gradients:
    #   dKL/d post_mean  = (m1 - m2) / s2^2 = 0.25          dKL/d prior_mean = -0.25
    #   dKL/d post_std   = -1/s1 + s1 / s2^2 = -0.75
    #   dKL/d prior_std  = 1/s2 - (s1^2 + (m1 - m2)^2) / s2^3 = 0.25
    # the balance gives the prior alpha = 0.8 of them and the posterior 1 - alpha = 0.2:
    value, (g_pm, g_ps, g_qm, g_qs) = grads_of(
        script,
        lambda pm, ps, qm, qs: m.kl_balance_loss(pm, ps, qm, qs, 0.8, 0.0)[0],
        [1.0],
        [1.0],
        [0.0],
        [2.0],
    )
    assert value == pytest.approx(0.4431472, abs=1e-6)  # the value is the KL: 0.8 KL + 0.2 KL
    np.testing.assert_allclose(g_pm, [0.2 * 0.25], atol=1e-6)  # 0.05
    np.testing.assert_allclose(g_ps, [0.2 * -0.75], atol=1e-6)  # -0.15
    np.testing.assert_allclose(g_qm, [0.8 * -0.25], atol=1e-6)  # -0.2
    np.testing.assert_allclose(g_qs, [0.8 * 0.25], atol=1e-6)  # 0.2
    # the prior-to-posterior ratio of the mean gradients is alpha / (1 - alpha) = 4 (up to the sign)
    assert abs(g_qm[0] / g_pm[0]) == pytest.approx(4.0, rel=1e-5)


# ----------------------------------------------------------------------------- the imagined returns
@pytest.mark.parametrize("script", TWINS)
def test_lambda_returns_three_steps_by_hand(script):
    m, c = load_script(script), conv(script)
    rewards, values = c([[1.0], [2.0], [3.0]]), c([[10.0], [20.0], [30.0]])  # v_t = V(s_{t+1})
    discounts, bootstrap = c([[0.5], [0.5], [0.5]]), c([30.0])
    # lambda 0.5:  G_2 = 3 + 0.5 (0.5 * 30 + 0.5 * 30)   = 18
    #              G_1 = 2 + 0.5 (0.5 * 20 + 0.5 * 18)   = 11.5
    #              G_0 = 1 + 0.5 (0.5 * 10 + 0.5 * 11.5) = 6.375
    np.testing.assert_allclose(
        np.asarray(m.lambda_returns(rewards, values, discounts, bootstrap, 0.5))[:, 0],
        [6.375, 11.5, 18.0],
        atol=1e-6,
    )
    # lambda 0: one-step targets r_t + d v_t = 6, 12, 18
    np.testing.assert_allclose(
        np.asarray(m.lambda_returns(rewards, values, discounts, bootstrap, 0.0))[:, 0],
        [6.0, 12.0, 18.0],
        atol=1e-6,
    )
    # lambda 1: discounted rewards to the horizon plus the bootstrap: 18, 2 + 9 = 11, 1 + 5.5 = 6.5
    np.testing.assert_allclose(
        np.asarray(m.lambda_returns(rewards, values, discounts, bootstrap, 1.0))[:, 0],
        [6.5, 11.0, 18.0],
        atol=1e-6,
    )


@pytest.mark.parametrize("script", TWINS)
def test_discount_weights_and_losses_by_hand(script):
    m, c = load_script(script), conv(script)
    np.testing.assert_allclose(
        np.asarray(m.discount_weights(c([[0.9], [0.9], [0.9]])))[:, 0], [1.0, 0.9, 0.81], atol=1e-6
    )
    returns, log_probs, weights = c([[2.0], [4.0]]), c([[1.0], [1.0]]), c([[1.0], [0.5]])
    # actor: -mean(w (G - 0.1 log pi)) = -(1 * 1.9 + 0.5 * 3.9) / 2 = -1.925
    assert float(m.actor_loss_fn(returns, log_probs, weights, 0.1)) == pytest.approx(-1.925, abs=1e-6)
    # critic: 0.5 mean(w (V - G)^2) with V = 1, 3 and G = 2, 2: 0.5 * (1 + 0.5) / 2 = 0.375
    assert float(m.critic_loss_fn(c([[1.0], [3.0]]), c([[2.0], [2.0]]), weights)) == pytest.approx(
        0.375, abs=1e-6
    )


@pytest.mark.parametrize("script", TWINS)
def test_world_model_loss_by_hand(script):
    m, c = load_script(script), conv(script)
    # reconstruction 0.5 * mean over rows of the summed squares: 0.5 * ((1 + 4) + 0) / 2 = 1.25
    # reward on the masked-in steps only: 0.5 * (3 - 1)^2 = 2 (the first step, mask 0, would add 0.5 * 100)
    total, recon, reward = m.world_model_loss(
        c([[1.0, 2.0], [0.0, 0.0]]),
        c([[0.0, 0.0], [0.0, 0.0]]),
        c([10.0, 3.0]),
        c([0.0, 1.0]),
        c([0.0, 1.0]),
        c(0.5),
        2.0,
    )
    assert float(recon) == pytest.approx(1.25, abs=1e-6)
    assert float(reward) == pytest.approx(2.0, abs=1e-6)
    assert float(total) == pytest.approx(1.25 + 2.0 + 2.0 * 0.5, abs=1e-6)


# ----------------------------------------------------------------------------- the RSSM pieces
@pytest.mark.parametrize("script", TWINS)
def test_gru_update_and_gaussian_head_by_hand(script):
    m, c = load_script(script), conv(script)
    # all gate inputs 0, h = 1: r = 0.5, c = tanh(0) = 0, u = sigmoid(-1) = 0.2689414;
    # h' = (1 - u) * 1 = 0.7310586
    np.testing.assert_allclose(
        np.asarray(m.gru_update(c([[0.0, 0.0, 0.0]]), c([[1.0]]))), [[0.7310586]], atol=1e-6
    )
    # cand 2, reset 0 (r = 0.5), update 1 (u = 0.5), h = 0: h' = 0.5 * tanh(1) = 0.3807971
    np.testing.assert_allclose(
        np.asarray(m.gru_update(c([[0.0, 2.0, 1.0]]), c([[0.0]]))), [[0.3807971]], atol=1e-6
    )
    # mean 1, std softplus(0) + 0.1 = 0.6931472 + 0.1
    mean, std = m.gaussian_stats(c([[1.0, 0.0]]), 0.1)
    np.testing.assert_allclose(np.asarray(mean), [[1.0]], atol=1e-7)
    np.testing.assert_allclose(np.asarray(std), [[0.7931472]], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_imagine_through_a_stub_model(script):
    """A stub model h' = h + a, z' = z + noise and a stub policy a = sum(feat) + eps, log pi = -eps:
    two steps from (h, z) = (1, 0) by hand."""
    m, c = load_script(script), conv(script)
    img_step = lambda h, z, a, noise: (h + a, z + noise)
    policy = lambda feat, eps: (feat.sum(-1, keepdims=True) + eps, -eps[..., 0])
    feats, log_probs = m.imagine(
        img_step, policy, c([[1.0]]), c([[0.0]]), c([[[0.5]], [[-1.0]]]), c([[[0.0]], [[1.0]]])
    )
    # step 0: feat (1, 0), a = 1, h = 2, z = 0.5; step 1: feat (2, 0.5), a = 2.5 + 1 = 3.5, h = 5.5, z = -0.5
    np.testing.assert_allclose(np.asarray(feats)[:, 0], [[1.0, 0.0], [2.0, 0.5], [5.5, -0.5]], atol=1e-6)
    np.testing.assert_allclose(np.asarray(log_probs)[:, 0], [0.0, -1.0], atol=1e-6)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize(
    "override, match",
    [
        (dict(horizon=0), "^--horizon must be >= 1"),
        (dict(free_nats=-1.0), "^--free-nats must be >= 0"),
        (dict(kl_balance=1.5), r"^--kl-balance must be in \[0, 1\]"),
        (dict(return_lambda=1.2), r"^--return-lambda must be in \[0, 1\]"),
        (dict(batch_size=0), "^--batch-size must be >= 1"),
        (dict(seq_len=0), "^--seq-len must be >= 1"),
        (dict(seq_len=202), "^--seq-len must be <= 201, the observations of one 200-step episode"),
        (dict(train_steps=0), "^--train-steps must be >= 1"),
        (dict(seed_episodes=30), "^--total-timesteps must be > --seed-episodes x 200 = 6000 random steps"),
        (dict(env_id="CartPole-v1"), "^--env-id CartPole-v1 is not in NEVER_TERMINATES"),
    ],
)
def test_bad_input_is_refused_before_any_run(script, override, match, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match=match):
        m.train(m.Args(log_dir=str(tmp_path), progress=False, **override))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"
