"""Tier 1 for Rainbow: each part in the one file, by hand. n-step transitions (termination and
truncation inside the window), the categorical projection with per-sample discounts, the noisy
layer against its formula, the dueling aggregation per atom, prioritised sampling, and the
bad-input checks."""

import numpy as np
import pytest

from helpers import conv, load_script

TWINS = ["algos/rainbow_torch.py", "algos/rainbow_jax.py"]


@pytest.mark.parametrize("script", TWINS)
def test_n_step_transition_by_hand(script):
    m = load_script(script)
    o = [np.full(2, k, dtype=np.float32) for k in range(5)]  # observation k is [k, k]
    window = [(o[0], 1, 1.0, o[1], False), (o[1], 0, 2.0, o[2], False), (o[2], 1, 3.0, o[3], False)]
    obs, action, ret, next_obs, done, discount = m.n_step_transition(window, 0.9)
    np.testing.assert_array_equal(obs, o[0])
    assert action == 1 and done == 0.0
    assert ret == pytest.approx(1 + 0.9 * 2 + 0.81 * 3)
    np.testing.assert_array_equal(next_obs, o[3])  # bootstrap from s_3 ...
    assert discount == pytest.approx(0.729)  # ... with gamma^3
    # a termination after two steps: the tail window stops there, done = 1 (no bootstrap)
    tail = [(o[1], 0, 2.0, o[2], False), (o[2], 1, 3.0, o[3], True)]
    _, _, ret, next_obs, done, discount = m.n_step_transition(tail, 0.9)
    assert ret == pytest.approx(2 + 0.9 * 3) and done == 1.0 and discount == pytest.approx(0.81)
    # a truncation (terminated False) bootstraps from the final observation with gamma^k
    _, _, ret, next_obs, done, discount = m.n_step_transition([(o[2], 1, 3.0, o[3], False)], 0.9)
    assert ret == 3.0 and done == 0.0 and discount == pytest.approx(0.9)
    np.testing.assert_array_equal(next_obs, o[3])


@pytest.mark.parametrize("script", TWINS)
def test_projection_with_per_sample_discounts(script):
    m, c = load_script(script), conv(script)
    atoms = c([-10.0, -5.0, 0.0, 5.0, 10.0])
    probs = c([[0, 0, 0, 1, 0], [0, 0, 0, 1, 0], [0.2] * 5])
    # z = 5 with discount 0.81 and r = 0: 4.05 -> 0.19 at 0, 0.81 at 5; discount 0.9, r = 1: 5.5 -> 0.9/0.1
    # terminal: all mass at r = -2.5 -> half at -5, half at 0
    out = np.asarray(
        m.categorical_projection(probs, c([0.0, 1.0, -2.5]), c([0.0, 0.0, 1.0]), c([0.81, 0.9, 0.729]), atoms)
    )
    np.testing.assert_allclose(
        out, [[0, 0, 0.19, 0.81, 0], [0, 0, 0, 0.9, 0.1], [0, 0.5, 0.5, 0, 0]], atol=1e-6
    )
    np.testing.assert_allclose(out.sum(-1), 1.0, atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_noisy_linear_by_hand(script):
    m, c = load_script(script), conv(script)
    x = c([[1.0, 2.0]])
    mu_w, sigma_w = c([[0.5, -1.0], [0.25, 0.0]]), c([[0.1, 0.2], [0.3, 0.4]])
    mu_b, sigma_b = c([0.1, -0.1]), c([1.0, 2.0])
    eps_in, eps_out = c([4.0, -1.0]), c([1.0, -9.0])  # f = sign * sqrt|.|: [2, -1] and [1, -3]
    y = np.asarray(m.noisy_linear(x, mu_w, sigma_w, mu_b, sigma_b, eps_in, eps_out))
    # W = mu + sigma * outer([2, -1], [1, -3]) = [[0.5 + 0.2, -1 - 1.2], [0.25 - 0.3, 0 + 1.2]]
    # b = mu_b + sigma_b * [1, -3] = [1.1, -6.1]; y = [1, 2] W + b
    np.testing.assert_allclose(y, [[0.7 - 0.1 + 1.1, -2.2 + 2.4 - 6.1]], atol=1e-6)
    # zero noise scale: a plain linear layer
    y0 = np.asarray(m.noisy_linear(x, mu_w, sigma_w * 0, mu_b, sigma_b * 0, eps_in, eps_out))
    np.testing.assert_allclose(y0, [[1.1, -1.1]], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_dueling_aggregate_per_atom(script):
    m, c = load_script(script), conv(script)
    rng = np.random.default_rng(0)
    value, advantage = rng.normal(size=(8, 1, 5)), rng.normal(size=(8, 3, 5))
    out = np.asarray(m.dueling_aggregate(c(value), c(advantage)))
    np.testing.assert_allclose(out.mean(axis=1, keepdims=True), value, atol=1e-5)
    np.testing.assert_allclose(np.asarray(m.dueling_aggregate(c(value), c(advantage + 3.0))), out, atol=1e-5)


@pytest.mark.parametrize("script", TWINS)
def test_sum_tree_and_importance_weights(script):
    m = load_script(script)
    tree = m.SumTree(4)
    tree.update(np.arange(4), np.array([1.0, 3.0, 0.0, 4.0]))
    rng = np.random.default_rng(0)
    counts = np.zeros(4)
    for _ in range(500):
        np.add.at(counts, tree.sample(64, rng, 4)[0], 1)
    np.testing.assert_allclose(counts / counts.sum(), [0.125, 0.375, 0.0, 0.5], atol=0.01)
    w = np.asarray(m.importance_weights(conv(script)([0.125, 0.5]), 4, 1.0))
    np.testing.assert_allclose(w, [1.0, 0.25], rtol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_continuous_env_is_refused_naming_the_right_scripts(script, tmp_path):
    m = load_script(script)
    suffix = "torch" if script.endswith("torch.py") else "jax"
    with pytest.raises(ValueError, match=f"sac_{suffix}.py"):
        m.train(m.Args(env_id="Pendulum-v1", log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("script", TWINS)
def test_bad_n_step_is_refused(script, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match="--n-step must be >= 1"):
        m.train(m.Args(n_step=0, log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())
