"""Tier 1 for DQN: worked problem 4 (the max over noisy estimates is biased upward) through the
scripts' own max_q_target, the TD target and Huber loss by hand, the epsilon schedule, and the
bad-input checks that must stop a run before any work."""

import itertools

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import all_finite, load_script, run_train

TWINS = ["algos/dqn_torch.py", "algos/dqn_jax.py"]


def as_framework(script):
    return (
        (lambda x: torch.as_tensor(np.asarray(x, dtype=np.float32)))
        if script.endswith("torch.py")
        else (lambda x: jnp.asarray(np.asarray(x, dtype=np.float32)))
    )


def all_estimates():
    """The 8 equally likely estimate vectors of problem 4: each of 3 actions is +0.1 or -0.1."""
    return np.array(list(itertools.product([0.1, -0.1], repeat=3)), dtype=np.float32)


@pytest.mark.parametrize("script", TWINS)
def test_problem4_max_is_biased_upward_exact(script):
    m, conv = load_script(script), as_framework(script)
    q = all_estimates()
    zeros = np.zeros(len(q), dtype=np.float32)
    # r = 0, not done, gamma = 1: the target is max_a Q(s', a) itself
    targets = np.asarray(m.max_q_target(conv(q), conv(zeros), conv(zeros), 1.0))
    # the max is +0.1 in 7 of the 8 cases, -0.1 only when all three are -0.1
    np.testing.assert_allclose(np.sort(targets), [-0.1] + [0.1] * 7, atol=1e-7)
    assert targets.mean() == pytest.approx(0.075, abs=1e-7)


@pytest.mark.parametrize("script", TWINS)
def test_problem4_max_is_biased_upward_monte_carlo(script):
    m, conv = load_script(script), as_framework(script)
    rng = np.random.default_rng(0)
    n = 200_000
    q = rng.choice([0.1, -0.1], size=(n, 3)).astype(np.float32)
    zeros = np.zeros(n, dtype=np.float32)
    targets = np.asarray(m.max_q_target(conv(q), conv(zeros), conv(zeros), 1.0), dtype=np.float64)
    stderr = targets.std() / np.sqrt(n)  # about 0.00011
    assert abs(targets.mean() - 0.075) < 4 * stderr


@pytest.mark.parametrize("script", TWINS)
def test_max_q_target_by_hand(script):
    m, conv = load_script(script), as_framework(script)
    next_q = [[1.0, 3.0], [2.0, -1.0], [5.0, 4.0]]
    rewards, dones = [1.0, 0.5, 2.0], [0.0, 0.0, 1.0]  # the third transition terminated
    targets = np.asarray(m.max_q_target(conv(next_q), conv(rewards), conv(dones), 0.9))
    # 1 + 0.9 * 3, 0.5 + 0.9 * 2, 2 (no bootstrap past a termination)
    np.testing.assert_allclose(targets, [3.7, 2.3, 2.0], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_huber_td_loss_by_hand(script):
    m, conv = load_script(script), as_framework(script)
    # errors 0.5 (quadratic: 0.125), -2 (linear: 1.5), 1 (the kink: 0.5 either way), 0
    loss = float(m.td_loss(conv([1.5, 0.0, 2.0, 3.0]), conv([1.0, 2.0, 1.0, 3.0])))
    assert loss == pytest.approx((0.125 + 1.5 + 0.5 + 0.0) / 4)


@pytest.mark.parametrize("script", TWINS)
def test_epsilon_schedule(script):
    m = load_script(script)
    assert m.linear_schedule(1.0, 0.05, 1000, 0) == pytest.approx(1.0)
    assert m.linear_schedule(1.0, 0.05, 1000, 500) == pytest.approx(0.525)
    assert m.linear_schedule(1.0, 0.05, 1000, 1000) == pytest.approx(0.05)
    assert m.linear_schedule(1.0, 0.05, 1000, 5000) == pytest.approx(0.05)  # the floor


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("script", TWINS)
def test_continuous_env_is_refused_naming_the_right_scripts(script, tmp_path):
    m = load_script(script)
    suffix = "torch" if script.endswith("torch.py") else "jax"
    with pytest.raises(ValueError, match=f"sac_{suffix}.py") as info:
        m.train(m.Args(env_id="Pendulum-v1", log_dir=str(tmp_path), progress=False))
    assert f"td3_{suffix}.py" in str(info.value) and f"ddpg_{suffix}.py" in str(info.value)
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"


@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(batch_size=256, buffer_size=100), "^--buffer-size must be >= --batch-size"),
        (dict(learning_starts=10, batch_size=128), "^--learning-starts must be >= --batch-size"),
        (dict(total_timesteps=500, learning_starts=1000), "^--total-timesteps must be > --learning-starts"),
        (dict(tau=0.0), "^--tau must be in"),
    ],
)
def test_inconsistent_args_are_refused(script, tmp_path, overrides, message):
    m = load_script(script)
    with pytest.raises(ValueError, match=message):
        m.train(m.Args(log_dir=str(tmp_path), progress=False, **overrides))
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize("env_id", ["Acrobot-v1", "MountainCar-v0"])
def test_other_discrete_envs_run_through_env_id(script, env_id, tmp_path):
    """A short run on each of the other classic-control tasks: the same code, only --env-id."""
    summary = run_train(
        script,
        tmp_path,
        env_id=env_id,
        total_timesteps=1200,
        learning_starts=500,
        target_network_frequency=100,
    )
    assert summary["global_step"] == 1200 and all_finite(summary)
    assert len(summary["episodic_returns"]) >= 2  # Acrobot ends at 500 steps, MountainCar at 200
