"""Tier 1 for TD3: the three fixes in hand-computed numbers (clipped double Q in the target,
clipped target policy smoothing kept inside the action bounds, termination vs truncation), in both
twins; and the bad-input checks."""

import numpy as np
import pytest

from helpers import conv, load_script

TWINS = ["algos/td3_torch.py", "algos/td3_jax.py"]


@pytest.mark.parametrize("script", TWINS)
def test_clipped_double_q_target_by_hand(script):
    m, c = load_script(script), conv(script)
    # min(5, 4) = 4: 1 + 0.9 * 4 = 4.6; min(-2, 3) = -2: 0.5 + 0.9 * (-2) = -1.3; terminated: r only
    target = m.td3_target(
        c([1.0, 0.5, 2.0]), c([0.0, 0.0, 1.0]), c([5.0, -2.0, 7.0]), c([4.0, 3.0, 6.0]), 0.9
    )
    np.testing.assert_allclose(np.asarray(target), [4.6, -1.3, 2.0], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_target_smoothing_is_clipped_and_stays_in_bounds(script):
    m, c = load_script(script), conv(script)
    # Box [-2, 2] x [0, 1]: scale (2, 0.5). noise 0.3 -> 0.3 * 2 = 0.6; noise 0.9 clipped to 0.5 -> 1.0;
    # noise -0.9 clipped to -0.5 -> -0.25; 0.9 + 0.25 = 1.15 is clipped to the bound 1.
    out = m.smoothed_target_actions(
        c([[0.5, 0.9], [1.5, 0.2], [0.0, 0.9]]),
        c([[0.3, 0.5], [0.9, -0.9], [-0.1, 0.5]]),
        0.5,
        c([2.0, 0.5]),
        c([-2.0, 0.0]),
        c([2.0, 1.0]),
    )
    np.testing.assert_allclose(np.asarray(out), [[1.1, 1.0], [2.0, 0.0], [-0.2, 1.0]], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_actor_loss_is_minus_mean_q1(script):
    m, c = load_script(script), conv(script)
    assert float(m.td3_actor_loss(c([1.0, 2.0, 6.0]))) == pytest.approx(-3.0)


@pytest.mark.parametrize("script", TWINS)
def test_discrete_env_is_refused_naming_the_right_scripts(script, tmp_path):
    m = load_script(script)
    fw = "torch" if script.endswith("torch.py") else "jax"
    with pytest.raises(ValueError, match=f"algos/dqn_{fw}.py or algos/ppo_{fw}.py"):
        m.train(m.Args(env_id="CartPole-v1", log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"


@pytest.mark.parametrize("script", TWINS)
def test_warm_up_must_leave_updates(script, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match="--total-timesteps must be > --learning-starts"):
        m.train(m.Args(total_timesteps=1000, learning_starts=1000, log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())
