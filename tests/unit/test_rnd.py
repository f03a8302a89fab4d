"""Tier 1 for RND (docs/worked_problems.md, the RND problem) in both twins, hand-computed numbers:
the running mean/variance against a known stream, the non-episodic GAE across an episode end, the
intrinsic reward and the masked predictor loss, the discounted intrinsic-return stream, the
predictor's error falling on visited DeepSea states and staying high on unvisited ones; and the
bad-input checks that must stop a run before any work."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch

from helpers import conv, is_torch, load_script

TWINS = ["algos/rnd_torch.py", "algos/rnd_jax.py"]


def moments(script, mean, var, count, batch):
    m = load_script(script)
    to = conv(script)
    new_mean, new_var, new_count = m.update_running_moments(to(mean), to(var), count, to(batch))
    return np.asarray(new_mean), np.asarray(new_var), float(new_count)


def gae(script, rewards, values, dones, last_value, gamma, lam, episodic):
    m = load_script(script)
    to = conv(script)
    col = lambda x: to(np.asarray(x, dtype=np.float32)[:, None])
    adv, ret = m.compute_gae(
        col(rewards), col(values), col(dones), to([last_value]), gamma, lam, episodic=episodic
    )
    return np.asarray(adv)[:, 0], np.asarray(ret)[:, 0]


# ----------------------------------------------------------------------------- running moments
@pytest.mark.parametrize("script", TWINS)
def test_running_moments_by_hand(script):
    # From nothing (count 0), the batch [1, 3] gives mean 2, var 1. Then [2, 6, 7] (mean 5, var 14/3):
    # delta = 3, n = 5, mean = 2 + 3 * 3 / 5 = 3.8, M2 = 1 * 2 + 14/3 * 3 + 9 * 2 * 3 / 5 = 26.8,
    # var = 26.8 / 5 = 5.36 -- np.mean / np.var of [1, 3, 2, 6, 7].
    mean, var, count = moments(script, 0.0, 1.0, 0.0, [1.0, 3.0])
    assert (float(mean), float(var), count) == pytest.approx((2.0, 1.0, 2.0))
    mean, var, count = moments(script, mean, var, count, [2.0, 6.0, 7.0])
    assert (float(mean), float(var), count) == pytest.approx((3.8, 5.36, 5.0), abs=1e-5)
    stream = np.array([1.0, 3.0, 2.0, 6.0, 7.0])
    assert float(mean) == pytest.approx(stream.mean()) and float(var) == pytest.approx(stream.var(), abs=1e-5)


@pytest.mark.parametrize("script", TWINS)
def test_running_moments_match_the_whole_stream(script):
    """A 2-D stream fed in uneven batches, from the scripts' own start (mean 0, var 1, count 1e-4):
    the result is np.mean / np.var of the whole stream (the 1e-4 pseudo-count moves it by < 1e-4)."""
    rng = np.random.default_rng(0)
    stream = rng.normal(loc=[3.0, -1.0], scale=[2.0, 0.5], size=(1000, 2)).astype(np.float32)
    mean, var, count = np.zeros(2), np.ones(2), 1e-4
    for lo, hi in ((0, 1), (1, 8), (8, 300), (300, 301), (301, 1000)):
        mean, var, count = moments(script, mean, var, count, stream[lo:hi])
    np.testing.assert_allclose(mean, stream.mean(0), atol=1e-4)
    np.testing.assert_allclose(var, stream.var(0), rtol=1e-4)
    assert count == pytest.approx(1000.0001)


@pytest.mark.parametrize("script", TWINS)
def test_discounted_reward_stream_by_hand(script):
    # running 1, rewards 1 then 2, gamma 0.5: 0.5 * 1 + 1 = 1.5, then 0.5 * 1.5 + 2 = 2.75
    m = load_script(script)
    to = conv(script)
    stream, last = m.discounted_reward_stream(to([1.0]), to([[1.0], [2.0]]), 0.5)
    np.testing.assert_allclose(np.asarray(stream)[:, 0], [1.5, 2.75])
    assert float(np.asarray(last)[0]) == pytest.approx(2.75)


# ----------------------------------------------------------------------------- GAE, two heads
@pytest.mark.parametrize("script", TWINS)
def test_non_episodic_gae_crosses_the_episode_end(script):
    r, v, d = [1.0, 0.0, 2.0], [0.5, 0.4, 0.6], [0.0, 1.0, 0.0]
    # Episodic (the extrinsic head): delta_2 = 2 + 0.9 * 0.2 - 0.6 = 1.58 = A_2; the episode ended at
    # t = 1, so delta_1 = 0 - 0.4 = -0.4 = A_1; delta_0 = 1 + 0.9 * 0.4 - 0.5 = 0.86,
    # A_0 = 0.86 + 0.72 * (-0.4) = 0.572.
    adv, _ = gae(script, r, v, d, 0.2, 0.9, 0.8, episodic=True)
    np.testing.assert_allclose(adv, [0.572, -0.4, 1.58], atol=1e-6)
    # Non-episodic (the intrinsic head): the end at t = 1 is ignored. delta_1 = 0 + 0.9 * 0.6 - 0.4
    # = 0.14, A_1 = 0.14 + 0.72 * 1.58 = 1.2776, A_0 = 0.86 + 0.72 * 1.2776 = 1.779872.
    adv, ret = gae(script, r, v, d, 0.2, 0.9, 0.8, episodic=False)
    np.testing.assert_allclose(adv, [1.779872, 1.2776, 1.58], atol=1e-6)
    np.testing.assert_allclose(ret, [2.279872, 1.6776, 2.18], atol=1e-6)


# ----------------------------------------------------------------------------- the bonus
@pytest.mark.parametrize("script", TWINS)
def test_intrinsic_reward_and_masked_predictor_loss_by_hand(script):
    m = load_script(script)
    to = conv(script)
    predicted = to([[1.0, 2.0], [0.0, 1.0], [2.0, 0.0]])
    target = to([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    # ||.||^2 per row: 1 + 4 = 5, 0 + 1 = 1, 4 + 0 = 4
    np.testing.assert_allclose(np.asarray(m.rnd_intrinsic_reward(predicted, target)), [5.0, 1.0, 4.0])
    # mask keeps rows 0 and 2: (5 + 4) / 2 = 4.5; an empty mask gives 0, not a division by zero
    assert float(m.rnd_predictor_loss(predicted, target, to([1.0, 0.0, 1.0]))) == pytest.approx(4.5)
    assert float(m.rnd_predictor_loss(predicted, target, to([0.0, 0.0, 0.0]))) == 0.0


@pytest.mark.parametrize("script", TWINS)
def test_normalize_obs_clips_a_never_seen_feature(script):
    m = load_script(script)
    to = conv(script)
    # feature 0: (3 - 1) / 2 = 1; feature 1 never varied (var 0): 1 / sqrt(1e-8) clipped to 5
    out = np.asarray(m.normalize_obs(to([[3.0, 1.0]]), to([1.0, 0.0]), to([4.0, 0.0])))
    np.testing.assert_allclose(out, [[1.0, 5.0]], rtol=1e-6)


def predictor_errors(script, visited, steps=300):
    """Train a fresh predictor on the DeepSea-5 one-hot states in `visited` for `steps` Adam steps
    (lr 1e-3, every row kept); return the errors on all 25 states before and after."""
    m = load_script(script)
    states = np.eye(25, dtype=np.float32)
    if is_torch(script):
        torch.manual_seed(0)
        target, predictor = m.RNDNet(25, 64, depth=2), m.RNDNet(25, 64, depth=3)
        opt = torch.optim.Adam(predictor.parameters(), lr=1e-3)
        x = torch.as_tensor(states)
        errors = lambda: m.rnd_intrinsic_reward(predictor(x), target(x)).detach().numpy()
        before = errors()
        for _ in range(steps):
            loss = m.rnd_predictor_loss(predictor(x[visited]), target(x[visited]), torch.ones(len(visited)))
            opt.zero_grad()
            loss.backward()
            opt.step()
        return before, errors()
    target, predictor = m.RNDNet(out_dim=64, depth=2), m.RNDNet(out_dim=64, depth=3)
    x = jnp.asarray(states)
    tp = target.init(jax.random.PRNGKey(0), x[:1])
    pp = predictor.init(jax.random.PRNGKey(1), x[:1])
    opt = optax.adam(1e-3)
    state = opt.init(pp)
    xv, ones = x[np.asarray(visited)], jnp.ones(len(visited))

    @jax.jit
    def step(pp, state):
        grads = jax.grad(lambda p: m.rnd_predictor_loss(predictor.apply(p, xv), target.apply(tp, xv), ones))(
            pp
        )
        updates, state = opt.update(grads, state, pp)
        return optax.apply_updates(pp, updates), state

    errors = lambda pp: np.asarray(m.rnd_intrinsic_reward(predictor.apply(pp, x), target.apply(tp, x)))
    before = errors(pp)
    for _ in range(steps):
        pp, state = step(pp, state)
    return before, errors(pp)


@pytest.mark.parametrize("script", TWINS)
def test_predictor_error_falls_on_visited_states_only(script):
    """RND's premise: distillation error is a novelty signal. The diagonal of a 5 x 5 DeepSea (the
    cells an always-"right" agent visits) is trained on; the other 20 cells are never shown.
    Measured: visited errors fall from ~3-5 to < 1e-5; unvisited ones stay above 1.0."""
    visited = [0, 6, 12, 18, 24]
    unvisited = [i for i in range(25) if i not in visited]
    before, after = predictor_errors(script, visited)
    assert after[visited].max() < 1e-3 * before[visited].mean()  # learned: error ~ 0
    assert after[unvisited].min() > 100 * after[visited].max()  # every unvisited state is still novel
    assert after[unvisited].mean() > 0.25 * before[unvisited].mean()  # and stays the same order


# ----------------------------------------------------------------------------- bad input
def refused(script, tmp_path, match, **overrides):
    m = load_script(script)
    with pytest.raises(ValueError, match=match):
        m.train(m.Args(log_dir=str(tmp_path), progress=False, **overrides))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"


# ----------------------------------------------------------------------------- combining the two heads
def combine(script, ext, intr, ext_coef, int_coef, per_head):
    m = load_script(script)
    to = conv(script)
    f32 = lambda x: to(np.asarray(x, dtype=np.float32))
    return np.asarray(m.combine_advantages(f32(ext), f32(intr), ext_coef, int_coef, per_head=per_head))


@pytest.mark.parametrize("script", TWINS)
def test_combine_advantages_by_hand(script):
    ext, intr = [1.0, 2.0, 3.0], [0.0, 0.0, 3.0]
    # The paper's sum: 2 * A_ext + 1 * A_int.
    np.testing.assert_allclose(combine(script, ext, intr, 2.0, 1.0, False), [2.0, 4.0, 9.0], rtol=1e-6)
    # Per head: A_ext has mean 2 and unbiased std 1 -> (-1, 0, 1); A_int has mean 1, squared deviations
    # 1 + 1 + 4 = 6 over n - 1 = 2 -> std sqrt(3) -> (-1, -1, 2) / sqrt(3).
    r3 = np.sqrt(3.0)
    expected = 2.0 * np.array([-1.0, 0.0, 1.0]) + np.array([-1.0, -1.0, 2.0]) / r3
    np.testing.assert_allclose(combine(script, ext, intr, 2.0, 1.0, True), expected, rtol=1e-5)


@pytest.mark.parametrize("script", TWINS)
def test_per_head_balance_is_set_by_the_coefficients_not_the_reward_scales(script):
    """MountainCar's case: extrinsic advantages of order 1, normalised novelty of order 1e-4. The plain
    sum is the extrinsic head alone to 4 digits; per head, rescaling either head changes nothing."""
    rng = np.random.default_rng(0)
    ext, intr = rng.normal(size=256), rng.normal(size=256)
    plain = combine(script, 4.0 * ext, 1e-4 * intr, 2.0, 1.0, False)
    np.testing.assert_allclose(plain, 8.0 * ext, atol=1e-3)
    per_head = combine(script, ext, intr, 2.0, 1.0, True)
    # (to 1e-3: the 1e-8 added to a std of ~1e-4 moves the intrinsic part by ~1e-4 of itself)
    np.testing.assert_allclose(combine(script, 4.0 * ext, 1e-4 * intr, 2.0, 1.0, True), per_head, atol=1e-3)
    # ... and the intrinsic head carries half the extrinsic head's weight in the result.
    z = lambda a: (a - a.mean()) / a.std(ddof=1)
    np.testing.assert_allclose(per_head, 2.0 * z(ext) + z(intr), atol=1e-4)


@pytest.mark.parametrize("script", TWINS)
def test_per_head_without_norm_adv_is_refused(script, tmp_path):
    refused(script, tmp_path, "no-norm-adv", norm_adv=False, norm_adv_per_head=True)


@pytest.mark.parametrize("script", TWINS)
def test_negative_bonus_scale_is_refused(script, tmp_path):
    refused(script, tmp_path, "--bonus-scale must be >= 0", bonus_scale=-0.5)


@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize("env_id", ["DeepSea0-v0", "DeepSea65-v0", "NoisyTVDeepSea0-v0", "DeepSeaX-v0"])
def test_deep_sea_size_out_of_range_is_refused(script, tmp_path, env_id):
    refused(script, tmp_path, "1 <= N <= 64", env_id=env_id)


@pytest.mark.parametrize("script", TWINS)
def test_update_proportion_outside_0_1_is_refused(script, tmp_path):
    refused(script, tmp_path, "--update-proportion must be in", update_proportion=0.0)
    refused(script, tmp_path, "--update-proportion must be in", update_proportion=1.5)


@pytest.mark.parametrize("script", TWINS)
def test_continuous_env_is_refused_naming_the_right_script(script, tmp_path):
    twin = "ppo_continuous_torch.py" if is_torch(script) else "ppo_continuous_jax.py"
    refused(script, tmp_path, twin, env_id="Pendulum-v1")


@pytest.mark.parametrize("script", TWINS)
def test_minibatches_must_divide_the_batch(script, tmp_path):
    refused(
        script, tmp_path, "--num-minibatches must be a divisor", num_envs=3, num_steps=10, num_minibatches=4
    )
