"""Tier 1 for continuous-action PPO: the Gaussian log-prob and entropy and the running mean/std
against hand-computed numbers in both twins; and the bad-input checks that must stop a run before
any work."""

import numpy as np
import pytest

from helpers import conv, load_script

TWINS = ["algos/ppo_continuous_torch.py", "algos/ppo_continuous_jax.py"]
LOG_2PI = np.log(2.0 * np.pi)


@pytest.mark.parametrize("script", TWINS)
def test_gaussian_log_prob_by_hand(script):
    m, c = load_script(script), conv(script)
    # 1-D, mean 0, log_std 0 (sigma 1), a = 1: -0.5 * 1^2 - 0 - 0.5 log(2 pi)
    assert float(m.gaussian_log_prob(c([[0.0]]), c([0.0]), c([[1.0]]))[0]) == pytest.approx(
        -1.4189385, abs=1e-6
    )
    # 2-D, summed over the action axis: mean (1, -1), sigma (e, 1), a = (1 + e, -1):
    # dim 0: -0.5 * 1 - 1 - 0.5 log(2 pi); dim 1: 0 - 0 - 0.5 log(2 pi)
    expected = -0.5 - 1.0 - LOG_2PI
    got = m.gaussian_log_prob(c([[1.0, -1.0]]), c([1.0, 0.0]), c([[1.0 + np.e, -1.0]]))
    assert tuple(got.shape) == (1,)
    assert float(got[0]) == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("script", TWINS)
def test_gaussian_entropy_by_hand(script):
    m, c = load_script(script), conv(script)
    # log_std 0 in 2-D: 2 * 0.5 * (1 + log(2 pi))
    assert float(m.gaussian_entropy(c([0.0, 0.0]))) == pytest.approx(2.8378771, abs=1e-6)
    # log sigma adds one-for-one: log_std (1, -0.5) adds 0.5
    assert float(m.gaussian_entropy(c([1.0, -0.5]))) == pytest.approx(2.8378771 + 0.5, abs=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_running_mean_std_matches_numpy_on_the_concatenation(script):
    m = load_script(script)
    rng = np.random.default_rng(0)
    chunks = [rng.normal(loc=3.0, scale=2.0, size=(n, 3)) for n in (1, 5, 17, 64)]
    rms = m.RunningMeanStd(shape=(3,))
    for chunk in chunks:
        rms.update(chunk)
    data = np.concatenate(chunks)
    assert rms.count == len(data)
    np.testing.assert_allclose(rms.mean, data.mean(axis=0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(rms.var, data.var(axis=0), rtol=1e-10, atol=1e-12)
    # scalars (the discounted return), one value per env per step
    rms = m.RunningMeanStd()
    stream = rng.normal(size=(50, 2))
    for row in stream:
        rms.update(row)
    assert rms.mean == pytest.approx(stream.mean()) and rms.var == pytest.approx(stream.var())


@pytest.mark.parametrize("script", TWINS)
def test_normalize_obs_clips_to_ten(script):
    m = load_script(script)
    out = m.normalize_obs(np.array([100.0, -100.0, 1.0]), np.zeros(3), np.ones(3))
    np.testing.assert_allclose(out, [10.0, -10.0, 1.0], atol=1e-6)
    assert out.dtype == np.float32


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("script", TWINS)
def test_discrete_env_is_refused_naming_the_right_script(script, tmp_path):
    m = load_script(script)
    twin = "algos/ppo_torch.py" if script.endswith("torch.py") else "algos/ppo_jax.py"
    with pytest.raises(ValueError, match=twin):
        m.train(m.Args(env_id="CartPole-v1", log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"


@pytest.mark.parametrize("script", TWINS)
def test_minibatches_must_divide_the_batch(script, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match="--num-minibatches must be a divisor"):
        m.train(m.Args(num_envs=3, num_steps=10, num_minibatches=4, log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())
