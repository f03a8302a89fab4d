"""Tier 1 for REINFORCE: worked problem 2 (docs/worked_problems.md), the bandit baseline, by exact
enumeration through the twins' own gradient code; returns-to-go by hand; the estimator variance
(estimator_variance, output_layer_score) by hand and against autograd; bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import conv, is_torch, load_script

TWINS = ["algos/reinforce_torch.py", "algos/reinforce_jax.py"]


def single_sample_gradient(script, theta, arm, weight):
    """d/dtheta of minus the twin's reinforce_loss for one pull of `arm` with weight r - b, where
    pi = softmax([0, theta]) (so pi(arm 1) = sigmoid(theta)): the REINFORCE estimate itself."""
    m = load_script(script)
    if is_torch(script):
        th = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
        logits = torch.stack([torch.zeros((), dtype=torch.float64), th])[None]
        logp = m.categorical_log_prob(logits, torch.tensor([arm]))
        m.reinforce_loss(
            logp, torch.tensor([weight], dtype=torch.float64), torch.ones(1, dtype=torch.float64)
        ).backward()
        return -th.grad.item()

    def loss(th):
        logits = jnp.stack([jnp.zeros(()), th])[None]
        logp = m.categorical_log_prob(logits, jnp.array([arm]))
        return m.reinforce_loss(logp, jnp.array([weight]), jnp.ones(1))

    return -float(jax.grad(loss)(jnp.float32(theta)))


def gradient_moments(script, baseline):
    """Exact mean and variance of the single-sample gradient over the two arms."""
    p = 0.25
    theta = float(np.log(p / (1 - p)))  # sigmoid(theta) = 0.25
    rewards, probs = [0.0, 1.0], [1 - p, p]
    grads = [single_sample_gradient(script, theta, arm, rewards[arm] - baseline) for arm in (0, 1)]
    mean = sum(q * g for q, g in zip(probs, grads))
    return mean, sum(q * (g - mean) ** 2 for q, g in zip(probs, grads))


@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize("baseline, variance", [(0.0, 0.10546875), (0.25, 0.046875), (0.75, 0.0)])
def test_problem2_bandit_baseline(script, baseline, variance):
    mean, var = gradient_moments(script, baseline)
    # the mean is p (1 - p) = 0.1875 whatever the baseline: baselines do not bias the gradient
    assert mean == pytest.approx(0.1875, abs=1e-6)
    assert var == pytest.approx(variance, abs=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_problem2_optimal_baseline_is_score_weighted(script):
    """b* = E[r s^2] / E[s^2] with s the score: 0.25 * 1 * 0.75^2 / (0.25 * 0.75^2 + 0.75 * 0.25^2) = 0.75,
    and no baseline on a grid does better."""
    variances = {b: gradient_moments(script, b)[1] for b in np.linspace(0, 1, 21)}
    assert min(variances, key=variances.get) == pytest.approx(0.75)


@pytest.mark.parametrize("script", TWINS)
def test_returns_to_go_by_hand(script):
    m = load_script(script)
    rewards = np.array([[1, 0], [0, 2], [2, 0], [1, 0]], dtype=np.float32)
    dones = np.array([[0, 0], [1, 1], [0, 0], [0, 0]], dtype=np.float32)
    to = conv(script)
    G = np.asarray(m.returns_to_go(to(rewards), to(dones), 0.5))
    # column 0: episode [1, 0] ends at t=1 -> [1, 0]; then [2, 1] -> [2.5, 1]
    np.testing.assert_allclose(G[:, 0], [1.0, 0.0, 2.5, 1.0], atol=1e-6)
    np.testing.assert_allclose(G[:, 1], [1.0, 2.0, 0.0, 0.0], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_masked_steps_do_not_count(script):
    """Steps after an environment's episode ended (mask 0) change neither the loss nor its gradient."""
    m = load_script(script)
    to = conv(script)
    logp = to(np.array([-0.5, -1.0, -7.0], dtype=np.float32))
    w = to(np.array([2.0, -1.0, 100.0], dtype=np.float32))
    mask = to(np.array([1.0, 1.0, 0.0], dtype=np.float32))
    assert float(m.reinforce_loss(logp, w, mask)) == pytest.approx(-(-1.0 + 1.0) / 2)
    normed = np.asarray(m.masked_normalize(w, mask))
    assert normed[2] == 0.0 and normed[:2].sum() == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_estimator_variance_by_hand(script):
    """Three episodes (columns), 2-d scores, weights w; g_e = sum_t mask w_t s_t:
    e0: 2 * (1, 0) + 1 * (0, 1) = (2, 1); e1: 3 * (1, 1) = (3, 3) (its second step, weight 7, is
    masked out); e2: 1 * (-1, 0) + 0.5 * (0, 2) = (-1, 1). Mean (4/3, 5/3); squared distances
    8/9, 41/9, 53/9, sum 102/9; divided by E - 1 = 2: 17/3."""
    m = load_script(script)
    to = conv(script)
    scores = np.array(
        [[[1, 0], [1, 1], [-1, 0]], [[0, 1], [5, 5], [0, 2]]], dtype=np.float32
    )  # (T=2, E=3, D=2)
    weights = np.array([[2, 3, 1], [1, 7, 0.5]], dtype=np.float32)
    mask = np.array([[1, 1, 1], [1, 0, 1]], dtype=np.float32)
    var = float(m.estimator_variance(to(scores), to(weights), to(mask)))
    assert var == pytest.approx(17 / 3, abs=1e-6)
    # the same estimate from every episode: no variance
    same = np.broadcast_to(scores[:, :1], scores.shape).copy()
    ones = to(np.ones((2, 3), np.float32))
    assert float(m.estimator_variance(to(same), ones, ones)) == 0.0


@pytest.mark.parametrize("script", TWINS)
def test_output_layer_score_by_hand_and_autograd(script):
    """h = (1, 2), logits (0, 0) so pi = (0.5, 0.5), action 1: onehot - pi = (-0.5, 0.5), and the score
    is (onehot - pi) outer h = [[-0.5, -1], [0.5, 1]] (row by row) then the bias part (-0.5, 0.5).
    On random inputs it equals autograd's gradient of categorical_log_prob with respect to W and b."""
    m = load_script(script)
    to = conv(script)
    score = np.asarray(
        m.output_layer_score(
            to(np.array([1.0, 2.0], np.float32)), to(np.zeros(2, np.float32)), conv(script, np.int32)(1)
        )
    )
    np.testing.assert_allclose(score, [-0.5, -1.0, 0.5, 1.0, -0.5, 0.5], atol=1e-7)

    rng = np.random.default_rng(0)
    H, A = 4, 3
    h = rng.normal(size=H).astype(np.float32)
    W = rng.normal(size=(A, H)).astype(np.float32)
    b = rng.normal(size=A).astype(np.float32)
    a = 2
    if is_torch(script):
        Wt, bt = torch.tensor(W, requires_grad=True), torch.tensor(b, requires_grad=True)
        m.categorical_log_prob(Wt @ torch.as_tensor(h) + bt, torch.tensor(a)).backward()
        expected = np.concatenate([Wt.grad.numpy().ravel(), bt.grad.numpy()])
    else:
        gW, gb = jax.grad(lambda W, b: m.categorical_log_prob(W @ h + b, jnp.array(a)), argnums=(0, 1))(W, b)
        expected = np.concatenate([np.asarray(gW).ravel(), np.asarray(gb)])
    got = np.asarray(m.output_layer_score(to(h), to(W @ h + b), conv(script, np.int32)(a)))
    np.testing.assert_allclose(got, expected, atol=1e-6)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("script", TWINS)
def test_continuous_env_is_refused_naming_the_right_script(script, tmp_path):
    m = load_script(script)
    twin = "ppo_continuous_torch.py" if script.endswith("torch.py") else "ppo_continuous_jax.py"
    with pytest.raises(ValueError, match=twin):
        m.train(m.Args(env_id="Pendulum-v1", log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"
