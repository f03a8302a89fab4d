"""Tier 1 for count_bonus: Problem 23 of docs/worked_problems.md in both twins, exact numbers:
the count bonus beta / sqrt(N(s)) on a tabular stream (increment, then bonus), SimHash's bits against
sign(A x) by hand on a 2-D example, GAE and the clipped surrogate by hand; and the bad flags that
must stop a run before any work (negative bonus scale, DeepSea size N < 1, simhash_bits < 1)."""

import numpy as np
import pytest

from helpers import conv, is_torch, load_script
from helpers import gae_on_column as gae

TWINS = ["algos/count_bonus_torch.py", "algos/count_bonus_jax.py"]


def one_hot(i, n=4):
    x = np.zeros(n, dtype=np.float32)
    x[i] = 1.0
    return x


@pytest.mark.parametrize("script", TWINS)
def test_bonus_is_beta_over_sqrt_count_after_the_increment(script):
    """Tabular stream s' = a, b, a, a, c (one-hot, counted exactly) with beta = 0.5: the counts after
    each increment are 1, 1, 2, 3, 1, so the bonuses are 0.5, 0.5, 0.5/sqrt(2), 0.5/sqrt(3), 0.5."""
    m = load_script(script)
    to = conv(script)
    counts, bonuses = {}, []
    for s in [0, 1, 0, 0, 2]:
        n = m.update_counts(counts, m.observation_keys(one_hot(s)[None]))
        bonuses.append(float(np.asarray(m.count_bonus(to(n), 0.5))[0]))
    np.testing.assert_allclose(bonuses, [0.5, 0.5, 0.35355339, 0.28867513, 0.5], atol=1e-6)
    assert sorted(counts.values()) == [1, 1, 3]  # a: 3, b: 1, c: 1; the unvisited state has no entry


@pytest.mark.parametrize("script", TWINS)
def test_two_envs_reaching_one_state_in_one_step_count_one_after_the_other(script):
    m = load_script(script)
    counts = {}
    batch = np.stack([one_hot(1), one_hot(1), one_hot(3)])
    np.testing.assert_array_equal(m.update_counts(counts, m.observation_keys(batch)), [1.0, 2.0, 1.0])
    np.testing.assert_array_equal(m.update_counts(counts, m.observation_keys(batch[:1])), [3.0])
    b = np.asarray(m.count_bonus(conv(script)([1.0, 4.0, 100.0]), 0.2))
    np.testing.assert_allclose(b, [0.2, 0.1, 0.02], atol=1e-7)


@pytest.mark.parametrize("script", TWINS)
def test_simhash_bits_match_sign_of_A_x_by_hand(script):
    """A = [[1, 2], [-1, 1], [0.5, -3]]. x = (1, 0.2): A x = (1.4, -0.8, -0.1), code 100.
    The nearby x' = (1.05, 0.25): A x' = (1.55, -0.8, -0.225), the same code 100.
    The far x'' = (-1, 0.6): A x'' = (0.2, 1.6, -2.3), code 110."""
    m = load_script(script)
    to = conv(script)
    A = to([[1.0, 2.0], [-1.0, 1.0], [0.5, -3.0]])
    bits = np.asarray(m.simhash(to([[1.0, 0.2], [1.05, 0.25], [-1.0, 0.6]]), A))
    np.testing.assert_array_equal(bits, [[1, 0, 0], [1, 0, 0], [1, 1, 0]])
    keys = m.observation_keys(None, bits)
    assert keys[0] == keys[1] != keys[2]


@pytest.mark.parametrize("script", TWINS)
def test_simhash_features_scale_to_unit_box_and_append_one(script):
    """MountainCar-v0's box: position in [-1.2, 0.6], velocity in [-0.07, 0.07]. The valley floor at
    rest (-0.3, 0) maps to (0, 0, 1); the flag at full speed (0.6, 0.07) to (1, 1, 1)."""
    m = load_script(script)
    to = conv(script)
    g = np.asarray(
        m.simhash_features(to([[-0.3, 0.0], [0.6, 0.07], [-1.2, -0.035]]), to([-1.2, -0.07]), to([0.6, 0.07]))
    )
    np.testing.assert_allclose(g, [[0.0, 0.0, 1.0], [1.0, 1.0, 1.0], [-1.0, -0.5, 1.0]], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_nearby_points_share_a_code_far_ones_rarely(script):
    """With k = 16 random hyperplanes over the 2-D box (plus the constant), points 1e-4 apart almost
    always share a code, while points drawn anywhere in the box almost never do."""
    m = load_script(script)
    to = conv(script)
    rng = np.random.default_rng(0)
    A = to(rng.standard_normal((16, 3)))
    x = rng.uniform(-1, 1, size=(500, 2)).astype(np.float32)
    near = x + 1e-4 * rng.standard_normal(x.shape).astype(np.float32)
    g = lambda p: to(np.concatenate([p, np.ones((len(p), 1), np.float32)], axis=1))
    same = (np.asarray(m.simhash(g(x), A)) == np.asarray(m.simhash(g(near), A))).all(axis=1)
    assert same.mean() > 0.98
    far = np.asarray(m.simhash(g(x[::-1].copy()), A))
    assert (far == np.asarray(m.simhash(g(x), A))).all(axis=1).mean() < 0.2


@pytest.mark.parametrize("script", TWINS)
def test_gae_by_hand(script):
    adv, ret = gae(script, [1, 0, 2, 1], [0.5, 0.4, 0.6, 0.3], [0, 1, 0, 0], 0.2, gamma=0.9, lam=0.8)
    np.testing.assert_allclose(adv, [0.572, -0.4, 2.3036, 0.88], atol=1e-6)
    np.testing.assert_allclose(ret, [1.072, 0.0, 2.9036, 1.18], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_clipped_objective_in_numbers(script):
    m = load_script(script)
    to = conv(script)
    ratios, advs = np.array([1.5, 0.5, 1.6, 0.7], np.float32), [1.0, 1.0, -1.0, -1.0]
    loss = m.ppo_policy_loss(to(np.log(ratios)), to(np.zeros(4)), to(advs), 0.2)
    assert float(loss) == pytest.approx(0.175, abs=1e-6)  # objective [1.2, 0.5, -1.6, -0.8], mean -0.175


@pytest.mark.parametrize("script", TWINS)
def test_solve_threshold(script):
    m = load_script(script)
    assert m.solve_threshold("DeepSea10-v0") == pytest.approx(0.891)
    assert m.solve_threshold("MountainCar-v0") == -150.0
    assert m.solve_threshold("CartPole-v1") is None


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"bonus_scale": -0.1}, "--bonus-scale must be >= 0"),
        ({"env_id": "DeepSea0-v0"}, "size N = 0 must be in 1..64"),
        ({"env_id": "DeepSea-3-v0"}, "size N = -3 must be in 1..64"),
        ({"env_id": "NoisyTVDeepSea0-v0"}, "size N = 0"),
        ({"env_id": "DeepSea65-v0"}, "size N = 65"),
        ({"env_id": "NoSuchEnv-v0"}, "not a registered"),
        ({"simhash_bits": 0}, "--simhash-bits must be >= 1"),
        ({"num_envs": 3, "num_steps": 10}, "--num-minibatches must be a divisor"),
    ],
)
def test_bad_flags_stop_before_any_work(script, tmp_path, overrides, match):
    m = load_script(script)
    with pytest.raises(ValueError, match=match):
        m.train(m.Args(log_dir=str(tmp_path), progress=False, **overrides))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"


@pytest.mark.parametrize("script", TWINS)
def test_continuous_env_is_refused_naming_the_right_script(script, tmp_path):
    m = load_script(script)
    twin = "ppo_continuous_torch.py" if is_torch(script) else "ppo_continuous_jax.py"
    with pytest.raises(ValueError, match=twin):
        m.train(m.Args(env_id="MountainCarContinuous-v0", log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())
