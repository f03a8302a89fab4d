"""Tier 1 for prioritized replay: the sum tree (sums after updates, O(log N) depth, sampling in
proportion to the priorities by a chi-square test), the importance weights against the formula,
the weighted Huber loss by hand, and the bad-input checks."""

import numpy as np
import pytest

from helpers import conv, load_script

TWINS = ["algos/per_dqn_torch.py", "algos/per_dqn_jax.py"]


@pytest.mark.parametrize("script", TWINS)
def test_sum_tree_sums_and_updates(script):
    m = load_script(script)
    tree = m.SumTree(5)  # padded to 8 leaves: depth 3
    assert tree.capacity == 8
    tree.update(np.arange(5), np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
    assert tree.total() == pytest.approx(15.0)
    np.testing.assert_allclose(tree.tree[2:4], [10.0, 5.0])  # the root's children
    tree.update(np.array([1, 3]), np.array([0.5, 10.0]))  # overwrite two leaves
    assert tree.total() == pytest.approx(1 + 0.5 + 3 + 10 + 5)
    # find: cumulative sums 1, 1.5, 4.5, 14.5, 19.5 -> the leaf whose interval holds each value
    np.testing.assert_array_equal(
        tree.find(np.array([0.0, 0.99, 1.0, 1.49, 1.5, 4.6, 14.5, 19.4])), [0, 0, 1, 1, 2, 3, 4, 4]
    )


@pytest.mark.parametrize("script", TWINS)
def test_sum_tree_samples_in_proportion_to_priorities(script):
    m = load_script(script)
    rng = np.random.default_rng(0)
    priorities = np.array([1.0, 2.0, 3.0, 4.0, 0.5, 9.5, 0.0, 5.0, 3.0, 2.0])  # one zero: never drawn
    tree = m.SumTree(len(priorities))
    tree.update(np.arange(len(priorities)), priorities)
    counts = np.zeros(len(priorities))
    for _ in range(2000):
        idx, p = tree.sample(64, rng, len(priorities))
        np.testing.assert_allclose(p, priorities[idx])  # the returned priorities are the leaves'
        np.add.at(counts, idx, 1)
    assert counts[6] == 0
    expected = priorities / priorities.sum() * counts.sum()
    mask = expected > 0
    chi2 = (((counts - expected) ** 2)[mask] / expected[mask]).sum()
    # 8 degrees of freedom: P(chi2 > 26.1) = 0.001. Stratified draws are less spread than i.i.d.
    # ones, so the statistic is if anything smaller.
    assert chi2 < 26.1, (chi2, counts, expected)


@pytest.mark.parametrize("script", TWINS)
def test_importance_weights_match_the_formula(script):
    m = load_script(script)
    probs = np.array([0.1, 0.02, 0.3, 0.05], dtype=np.float32)
    n, beta = 50, 0.4
    w = np.asarray(m.importance_weights(conv(script)(probs), n, beta))
    raw = (n * probs.astype(np.float64)) ** -beta
    np.testing.assert_allclose(w, raw / raw.max(), rtol=1e-6)
    assert w.max() == pytest.approx(1.0) and w.argmax() == 1  # the rarest sample weighs most
    # uniform sampling (P = 1/N) gives all-ones weights for any beta
    np.testing.assert_allclose(
        np.asarray(m.importance_weights(conv(script)([0.02] * 4), n, 1.0)), 1.0, rtol=1e-6
    )


@pytest.mark.parametrize("script", TWINS)
def test_weighted_td_loss_by_hand(script):
    m, c = load_script(script), conv(script)
    # errors 0.5 (0.125), -2 (1.5); weights 1 and 0.5: (0.125 + 0.75) / 2
    loss, abs_errors = m.weighted_td_loss(c([1.5, 0.0]), c([1.0, 2.0]), c([1.0, 0.5]))
    assert float(loss) == pytest.approx(0.4375)
    np.testing.assert_allclose(np.asarray(abs_errors), [0.5, 2.0])


@pytest.mark.parametrize("script", TWINS)
def test_continuous_env_is_refused_naming_the_right_scripts(script, tmp_path):
    m = load_script(script)
    suffix = "torch" if script.endswith("torch.py") else "jax"
    with pytest.raises(ValueError, match=f"sac_{suffix}.py"):
        m.train(m.Args(env_id="Pendulum-v1", log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("script", TWINS)
def test_bad_priority_settings_are_refused(script, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match="^--beta-start must be in"):
        m.train(m.Args(beta_start=1.5, log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())
